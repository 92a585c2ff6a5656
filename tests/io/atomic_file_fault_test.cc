// WriteFileAtomically under injected faults: each step (open, write, fsync,
// close, rename) failing with ENOSPC or EIO through the FileOps seam leaves
// the old target intact and no temporary file behind, and the error names
// the step and the errno's text.
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/atomic_file.h"
#include "runtime/io/file_ops.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::WriteFileBytes;
using ::testing::HasSubstr;

enum class Step { kOpen, kWrite, kFsync, kClose, kRename };

const char* StepName(Step s) {
  switch (s) {
    case Step::kOpen:
      return "open";
    case Step::kWrite:
      return "write";
    case Step::kFsync:
      return "fsync";
    case Step::kClose:
      return "close";
    case Step::kRename:
      return "rename";
  }
  return "?";
}

// The system calls, except that the `nth` (1-based) call of `step` fails
// with `err` (and does nothing). Also makes every write short, so that the
// writer's loop is exercised: at most `max_write` bytes per call.
class FailingOps final : public internal::FileOps {
 public:
  FailingOps(Step step, int nth, int err, size_t max_write = 3)
      : step_(step), nth_(nth), err_(err), max_write_(max_write) {}

  int Open(const char* path, int flags, mode_t mode) const override {
    if (Fail(Step::kOpen)) return -1;
    return FileOps::Open(path, flags, mode);
  }
  ssize_t Write(int fd, const void* buf, size_t n) const override {
    if (Fail(Step::kWrite)) return -1;
    return FileOps::Write(fd, buf, std::min(n, max_write_));
  }
  int Fsync(int fd) const override {
    if (Fail(Step::kFsync)) return -1;
    return FileOps::Fsync(fd);
  }
  int Close(int fd) const override {
    if (Fail(Step::kClose)) {
      FileOps::Close(fd);  // As close(2) on EIO: the descriptor is gone.
      return -1;
    }
    return FileOps::Close(fd);
  }
  int Rename(const char* from, const char* to) const override {
    if (Fail(Step::kRename)) return -1;
    return FileOps::Rename(from, to);
  }
  bool fired() const { return fired_; }

 private:
  bool Fail(Step s) const {
    if (s != step_ || ++calls_ != nth_) return false;
    fired_ = true;
    errno = err_;
    return true;
  }
  Step step_;
  int nth_;
  int err_;
  size_t max_write_;
  mutable int calls_ = 0;
  mutable bool fired_ = false;
};

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

// Three chunks of 8 bytes.
absl::Status Produce(const WriteFn& write) {
  for (uint8_t i = 0; i < 3; ++i) {
    const std::vector<uint8_t> chunk(8, static_cast<uint8_t>(i + 1));
    if (absl::Status s = write(chunk); !s.ok()) return s;
  }
  return absl::OkStatus();
}

struct FaultCase {
  Step step;
  int nth;  // Which call of that step fails.
  int err;
};

class AtomicFileFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(AtomicFileFaultTest, OldTargetIntactNoTemporaryErrorNamesStepAndErrno) {
  const FaultCase c = GetParam();
  TempDir dir;
  const std::string path = dir.File("model.ptd");
  const std::vector<uint8_t> old = {7, 7, 7};
  WriteFileBytes(path, old);

  const FailingOps ops(c.step, c.nth, c.err);
  const absl::Status s = internal::WriteFileAtomically(ops, path, Produce);
  ASSERT_TRUE(ops.fired()) << "the fault was never reached";
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(StepName(c.step)) + " failed"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::strerror(c.err)));
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.ptd"));
  EXPECT_EQ(s.code(), c.err == ENOSPC ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReadFileBytes(path), old);
  EXPECT_THAT(Entries(dir.path()), ::testing::ElementsAre("model.ptd"));
}

TEST_P(AtomicFileFaultTest, NoTargetBeforeMeansNoFileAfter) {
  const FaultCase c = GetParam();
  TempDir dir;
  const FailingOps ops(c.step, c.nth, c.err);
  const absl::Status s = internal::WriteFileAtomically(ops, dir.File("new.ptd"), Produce);
  ASSERT_TRUE(ops.fired());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(Entries(dir.path()), ::testing::IsEmpty());
}

std::vector<FaultCase> Cases() {
  std::vector<FaultCase> cases;
  for (int err : {ENOSPC, EIO}) {
    cases.push_back({Step::kOpen, 1, err});
    cases.push_back({Step::kWrite, 1, err});  // The first write.
    cases.push_back({Step::kWrite, 5, err});  // Part way (writes are short).
    cases.push_back({Step::kFsync, 1, err});
    cases.push_back({Step::kClose, 1, err});
    cases.push_back({Step::kRename, 1, err});
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<FaultCase>& info) {
  return std::string(StepName(info.param.step)) + std::to_string(info.param.nth) + "_" +
         (info.param.err == ENOSPC ? "ENOSPC" : "EIO");
}

INSTANTIATE_TEST_SUITE_P(EveryStep, AtomicFileFaultTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(AtomicFileFaultTest, ShortWritesStillWriteEverything) {
  TempDir dir;
  const std::string path = dir.File("x.bin");
  // No fault (the 1000th open never comes), writes of at most 3 bytes.
  const FailingOps ops(Step::kOpen, 1000, EIO, 3);
  ASSERT_TRUE(internal::WriteFileAtomically(ops, path, Produce).ok());
  std::vector<uint8_t> want;
  for (uint8_t i = 1; i <= 3; ++i) want.insert(want.end(), 8, i);
  EXPECT_EQ(ReadFileBytes(path), want);
}

TEST(AtomicFileFaultTest, DirectoryFsyncFailureStillSucceeds) {
  // The second fsync is the directory's, after the rename: the file is
  // complete and in place, so the write succeeds.
  TempDir dir;
  const std::string path = dir.File("x.bin");
  const FailingOps ops(Step::kFsync, 2, EIO);
  ASSERT_TRUE(internal::WriteFileAtomically(ops, path, Produce).ok());
  EXPECT_TRUE(ops.fired());
  EXPECT_EQ(ReadFileBytes(path).size(), 24u);
  EXPECT_THAT(Entries(dir.path()), ::testing::ElementsAre("x.bin"));
}

}  // namespace
}  // namespace ptd
