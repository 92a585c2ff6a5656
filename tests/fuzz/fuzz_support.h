// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cc).
//
// NoViewSource wraps a source and hides its View(), so the library takes its
// pread path (owned copies, windowed reads) over the same bytes; the targets
// compare that path with the zero-copy one. Touch() reads every byte of a
// span so that the sanitizers check the whole range. FUZZ_CHECK traps on a
// broken invariant: the library returned something it promised not to.
#ifndef PTD_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define PTD_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"

#include "ptd/file_source.h"
#include "ptd/report.h"

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

namespace ptd::fuzz {

class NoViewSource final : public FileSource {
 public:
  explicit NoViewSource(std::shared_ptr<const FileSource> inner) : inner_(std::move(inner)) {}
  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    return inner_->ReadAt(offset, dst);
  }
  // View() keeps the base class's nullopt.

 private:
  std::shared_ptr<const FileSource> inner_;
};

// Loads every byte of `bytes` (ASan reports a read outside the allocation).
inline void Touch(absl::Span<const uint8_t> bytes) {
  volatile uint8_t sink = 0;
  uint8_t acc = 0;
  for (uint8_t b : bytes) acc = static_cast<uint8_t>(acc ^ b);
  sink = acc;
  (void)sink;
}

// True when both reports hold the same errors and warnings (rule and code),
// in the same order.
inline bool SameDiagnostics(const Report& a, const Report& b) {
  const auto same = [](const std::vector<Diagnostic>& x, const std::vector<Diagnostic>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].rule != y[i].rule || x[i].code != y[i].code) return false;
    }
    return true;
  };
  return same(a.errors(), b.errors()) && same(a.warnings(), b.warnings());
}

// Runs T::Verify (Container, Program) over `source` and over the same bytes
// without zero-copy views; traps unless both paths agree, and unless a null
// result comes with an error. Returns both results.
template <typename T>
std::pair<std::unique_ptr<T>, std::unique_ptr<T>> VerifyBothWays(
    const std::shared_ptr<const FileSource>& source, Report* report) {
  std::unique_ptr<T> viewed = T::Verify(source, report);
  Report pread_report;
  std::unique_ptr<T> read = T::Verify(std::make_shared<NoViewSource>(source), &pread_report);
  FUZZ_CHECK((viewed == nullptr) == (read == nullptr));
  FUZZ_CHECK(SameDiagnostics(*report, pread_report));
  FUZZ_CHECK(viewed != nullptr || !report->ok());
  return {std::move(viewed), std::move(read)};
}

}  // namespace ptd::fuzz

#endif  // PTD_TESTS_FUZZ_FUZZ_SUPPORT_H_
