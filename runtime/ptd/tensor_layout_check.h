// C8 of a tensor layout, private to this repository: the reader
// (runtime/ptd/container.cc, which defines it) checks each decoded layout
// with it, and PtdWriter (runtime/ptd/ptd_writer.cc) each layout it is given,
// so that the writer never writes a layout the reader refuses.
//
// Thread-safety: a pure function of its arguments (appends to `report`).
#ifndef PTD_RUNTIME_PTD_TENSOR_LAYOUT_CHECK_H_
#define PTD_RUNTIME_PTD_TENSOR_LAYOUT_CHECK_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "ptd/container.h"
#include "ptd/report.h"

namespace ptd {

// Checks a tensor layout against C8 (known scalar type, sizes >= 0,
// dim_order a permutation of the dims, byte size within `segment_size` when
// known), appending each violation to `report`. Used by the reader and the
// writer alike.
void CheckTensorLayout(const TensorLayout& layout, std::string_view key, uint32_t segment_index,
                       std::optional<uint64_t> segment_size, const Where& where, Report* report);

}  // namespace ptd

#endif  // PTD_RUNTIME_PTD_TENSOR_LAYOUT_CHECK_H_
