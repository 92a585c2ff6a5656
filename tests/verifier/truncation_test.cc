// A .ptd truncated while the verifier reads it: an error naming the file,
// never SIGBUS. The pread path (the default) reports DataLoss (a rule's
// error when the verifier was reading for that rule, else an I/O error,
// exit code 2); a mapping raises SIGBUS on access, which ptd-verify --mmap
// turns into exit code 2 with a message (ExitOnMappedFileFault).
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/file_source.h"
#include "ptd/verify.h"
#include "ptd/weight_bundle.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::testing::CodeIs;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::Describe;
using ::ptd::testing::HasError;
using ::ptd::testing::MessageHas;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::WriteFileBytes;
using ::testing::HasSubstr;

// Wraps a source of the real file at `path`. Before its `at`-th access
// (0-based; ReadAt and View count alike) it truncates that file to `keep`
// bytes, as another process might. at < 0: never.
class TruncatingSource final : public FileSource {
 public:
  TruncatingSource(std::shared_ptr<const FileSource> inner, std::string path, int at, uint64_t keep)
      : inner_(std::move(inner)), path_(std::move(path)), at_(at), keep_(keep) {}
  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    Step();
    return inner_->ReadAt(offset, dst);
  }
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const override {
    Step();
    return inner_->View(offset, len);
  }
  int accesses() const { return n_; }
  bool truncated() const { return truncated_; }

 private:
  void Step() const {
    if (n_++ == at_) {
      EXPECT_EQ(::truncate(path_.c_str(), static_cast<off_t>(keep_)), 0);
      truncated_ = true;
    }
  }
  std::shared_ptr<const FileSource> inner_;
  std::string path_;
  int at_;
  uint64_t keep_;
  mutable std::atomic<int> n_{0};
  mutable bool truncated_ = false;
};

class TruncationTest : public ::testing::Test {
 public:
  void SetUp() override {
    ptd_ = dir_.File("k01.ptd");
    manifest_ = dir_.File("k01.manifest");
    original_ = ReadFileBytes(ConformancePath("files/k01_view_geometry.ptd"));
    WriteFileBytes(ptd_, original_);
    WriteFileBytes(manifest_, ReadFileBytes(ConformancePath("files/k01_view_geometry.manifest")));
  }
  void Restore() { WriteFileBytes(ptd_, original_); }
  void ArmMappedFault() { cli::ExitOnMappedFileFault("ptd-verify", ptd_); }

  // Opens the inputs (pread, or mmap) with the .ptd wrapped.
  std::pair<BundleSources, std::shared_ptr<TruncatingSource>> Open(bool mmap, int at,
                                                                   uint64_t keep) {
    auto ptd = OpenFile(ptd_, mmap);
    auto manifest = OpenFile(manifest_, mmap);
    EXPECT_TRUE(ptd.ok() && manifest.ok());
    auto wrapped = std::make_shared<TruncatingSource>(*ptd, ptd_, at, keep);
    BundleSources s;
    s.ptd = wrapped;
    s.manifest = *manifest;
    return {s, wrapped};
  }
  VerifyOptions Options(bool mmap) const {
    VerifyOptions o;
    o.paths.ptd = ptd_;
    o.paths.manifest = manifest_;
    o.digest = true;
    o.paths.use_mmap = mmap;
    return o;
  }

  TempDir dir_;
  std::string ptd_, manifest_;
  std::vector<uint8_t> original_;
};

TEST_F(TruncationTest, TheVerifierReadsThroughPreadByDefault) {
  EXPECT_FALSE(VerifyOptions{}.paths.use_mmap);
  EXPECT_FALSE(BundlePaths{}.use_mmap);
}

TEST_F(TruncationTest, ContainerTruncatedBeforeItsFlatBufferIsReadIsC1DataLoss) {
  // Access 0 reads the header; access 1 the FlatBuffer, now past the end.
  auto [sources, src] = Open(/*mmap=*/false, /*at=*/1, /*keep=*/64);
  Report report;
  const WeightBundle b = WeightBundle::Verify(sources, &report);
  ASSERT_TRUE(src->truncated());
  EXPECT_THAT(report, HasError("C1", ::testing::AllOf(CodeIs(absl::StatusCode::kDataLoss),
                                                      MessageHas(ptd_), MessageHas("shrank"))))
      << Describe(report);
  EXPECT_EQ(b.container(), nullptr);
}

TEST_F(TruncationTest, TruncationAtEveryReadIsAnErrorNamingTheFile) {
  // A clean run counts the accesses (verification, then digests).
  int total = 0;
  {
    auto [sources, src] = Open(false, -1, 0);
    const VerifyOutcome clean = RunVerify(Options(false), sources);
    ASSERT_EQ(clean.exit_code(), 0) << Describe(clean.report);
    total = src->accesses();
  }
  ASSERT_GT(total, 3);
  for (int at = 0; at < total; ++at) {
    SCOPED_TRACE("truncated before access " + std::to_string(at));
    Restore();
    auto [sources, src] = Open(false, at, 64);
    const VerifyOutcome out = RunVerify(Options(false), sources);
    const nlohmann::ordered_json out_json = VerifyJson(out);
    ASSERT_TRUE(src->truncated());
    EXPECT_NE(out.exit_code(), 0) << Describe(out.report);
    if (out.io_error()) {
      // Read after verification (a digest): exit code 2, the file named.
      EXPECT_EQ(out.exit_code(), 2);
      EXPECT_THAT(std::string(out.io_error()->status.message()), HasSubstr(ptd_));
      EXPECT_EQ(out.io_error()->file, ptd_);
      EXPECT_THAT(std::string(out.io_error()->status.message()), HasSubstr("shrank"));
      EXPECT_FALSE(out_json["ok"].get<bool>());
    } else {
      // Read for a rule: that rule's error, DataLoss, naming the file.
      EXPECT_THAT(out.report.errors(),
                  ::testing::Contains(::testing::AllOf(CodeIs(absl::StatusCode::kDataLoss),
                                                       MessageHas(ptd_), MessageHas("shrank"))))
          << Describe(out.report);
    }
  }
}

// SIGBUS is delivered to the reading thread; death tests fork.
class TruncationDeathTest : public TruncationTest {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    TruncationTest::SetUp();
  }
};

bool KilledByAnySignal(int status) { return WIFSIGNALED(status); }

TEST_F(TruncationDeathTest, AMappingOfAShrunkFileFaultsOnAccess) {
  // Why the default is pread: no Status can report this. (Under ASan the
  // sanitizer's SIGBUS handler aborts instead; a signal either way.)
  EXPECT_EXIT(
      {
        auto src = OpenMmapFile(ptd_);
        if (!src.ok()) _exit(3);
        if (::truncate(ptd_.c_str(), 0) != 0) _exit(4);
        auto view = (*src)->View(0, (*src)->size());
        volatile uint8_t sink = 0;
        for (uint8_t b : *view) sink = static_cast<uint8_t>(sink + b);
        _exit(0);
      },
      KilledByAnySignal, "");
}

// The mmap path of ptd-verify in a child: a clean run counts the accesses,
// then the .ptd is truncated to nothing before the last one (a digest reading
// the mapping). Returns only if nothing faulted.
void VerifyMappedAndTruncate(TruncationTest* t) {
  t->ArmMappedFault();
  int total = 0;
  {
    auto opened = t->Open(/*mmap=*/true, -1, 0);
    if (RunVerify(t->Options(true), opened.first).exit_code() != 0) _exit(3);
    total = opened.second->accesses();
  }
  auto opened = t->Open(/*mmap=*/true, total - 1, 0);
  const VerifyOutcome out = RunVerify(t->Options(true), opened.first);
  const nlohmann::ordered_json out_json = VerifyJson(out);
  _exit(out.exit_code() == 0 ? 0 : 5);
}

TEST_F(TruncationDeathTest, WithExitOnMappedFileFaultTheVerifierExits2NamingTheFile) {
  EXPECT_EXIT(VerifyMappedAndTruncate(this), ::testing::ExitedWithCode(2),
              "shrank while it was being read.*k01.ptd");
}

}  // namespace
}  // namespace ptd
