// Little-endian patching of test files, for corruption tests.
#ifndef PTD_TESTS_TESTING_PATCH_H_
#define PTD_TESTS_TESTING_PATCH_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace ptd::testing {

inline void PatchU32(std::vector<uint8_t>& bytes, size_t at, uint32_t v) {
  std::memcpy(bytes.data() + at, &v, 4);
}

inline void PatchU64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) {
  std::memcpy(bytes.data() + at, &v, 8);
}

inline uint64_t ReadU64(const std::vector<uint8_t>& bytes, size_t at) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_PATCH_H_
