// Little-endian loads and stores for the wire formats (every format here is
// little-endian; the build only targets little-endian hosts).
#ifndef PTD_INTERNAL_BYTES_LE_H_
#define PTD_INTERNAL_BYTES_LE_H_

#include <bit>
#include <cstdint>
#include <cstring>

namespace ptd::internal {

static_assert(std::endian::native == std::endian::little, "ptd assumes a little-endian host");

// REQUIRES: `p` points at sizeof(T) readable bytes.
template <typename T>
inline T LoadLE(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
inline void StoreLE(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_BYTES_LE_H_
