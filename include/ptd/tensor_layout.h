// TensorLayout: the layout a .ptd may record for a named-data key (dtype,
// sizes, dim order), as the reader finds it (ptd/container.h) and the writer
// writes it (ptd/ptd_writer.h).
#ifndef PTD_TENSOR_LAYOUT_H_
#define PTD_TENSOR_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace ptd {

struct TensorLayout {
  int32_t scalar_type = 0;
  std::vector<int32_t> sizes;
  std::vector<uint8_t> dim_order;
};

}  // namespace ptd

#endif  // PTD_TENSOR_LAYOUT_H_
