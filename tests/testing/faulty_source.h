// FaultySource: a FileSource that wraps another and misbehaves on purpose,
// for tests of what readers do when I/O fails part way (LevelDB's
// error-injecting Env, in small).
//
//   auto src = std::make_shared<FaultySource>(MemorySource(bytes, "x.ptd"));
//   src->FailReadAt(2, absl::UnavailableError("disk gone"));  // 3rd ReadAt.
//   src->ShortReadAt(0);  // The 1st ReadAt fills only half and says DataLoss.
//
// Views are withheld by default (so every access goes through ReadAt), or
// passed through with set_views(true).
// Thread-safety: not thread-safe.
#ifndef PTD_TESTS_TESTING_FAULTY_SOURCE_H_
#define PTD_TESTS_TESTING_FAULTY_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"

#include "ptd/file_source.h"

namespace ptd::testing {

class FaultySource : public FileSource {
 public:
  explicit FaultySource(std::shared_ptr<const FileSource> inner) : inner_(std::move(inner)) {}

  // The `n`th ReadAt call (0-based) returns `status` and reads nothing.
  void FailReadAt(int n, absl::Status status) {
    fail_at_ = n;
    status_ = std::move(status);
    short_ = false;
  }
  // The `n`th ReadAt call reads only the first half of the range, and
  // reports DataLoss like a file that shrank.
  void ShortReadAt(int n) {
    fail_at_ = n;
    short_ = true;
  }
  void set_views(bool on) { views_ = on; }
  // ReadAt calls so far.
  int reads() const { return reads_; }

  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override;
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const override {
    if (!views_) return std::nullopt;
    return inner_->View(offset, len);
  }

 private:
  std::shared_ptr<const FileSource> inner_;
  std::optional<int> fail_at_;
  absl::Status status_;
  bool short_ = false;
  bool views_ = false;
  mutable int reads_ = 0;
};

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_FAULTY_SOURCE_H_
