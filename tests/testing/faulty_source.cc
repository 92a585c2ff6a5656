#include "tests/testing/faulty_source.h"

#include "absl/strings/str_cat.h"

namespace ptd::testing {

absl::Status FaultySource::ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const {
  const int call = reads_++;
  if (!fail_at_ || call != *fail_at_) return inner_->ReadAt(offset, dst);
  if (!short_) return status_;
  const size_t half = dst.size() / 2;
  if (absl::Status s = inner_->ReadAt(offset, dst.subspan(0, half)); !s.ok()) return s;
  return absl::DataLossError(absl::StrCat(name(), ": short read at offset ", offset, ": ", half,
                                          " of ", dst.size(), " bytes"));
}

}  // namespace ptd::testing
