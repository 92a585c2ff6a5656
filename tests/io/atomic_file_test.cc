// WriteFileAtomically: the target appears whole or not at all, no temporary
// is ever left behind, and new files get the mode the umask gives (without
// the process umask being changed).
#include "ptd/atomic_file.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ByteVector;
using ::ptd::testing::CountEntries;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Sets the umask for one scope.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST(AtomicFileTest, WritesTheBytes) {
  TempDir dir;
  const std::string path = dir.File("x.bin");
  ASSERT_TRUE(WriteFileAtomically(path, ByteVector({1, 2, 3})).ok());
  EXPECT_EQ(ReadFileBytes(path), ByteVector({1, 2, 3}));
  EXPECT_EQ(CountEntries(dir.path()), 1);
}

TEST(AtomicFileTest, StreamsManyChunks) {
  TempDir dir;
  const std::string path = dir.File("x.bin");
  ASSERT_TRUE(WriteFileAtomically(path, [](const WriteFn& write) {
                for (int i = 0; i < 100; ++i) {
                  if (absl::Status s = write(ByteVector({i})); !s.ok()) return s;
                }
                return absl::OkStatus();
              }).ok());
  const std::vector<uint8_t> got = ReadFileBytes(path);
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got[99], 99);
}

TEST(AtomicFileTest, NewFileModeFollowsTheUmaskWhichStaysUnchanged) {
  for (const auto& [mask, want] :
       {std::pair<mode_t, mode_t>{022, 0644}, {027, 0640}, {077, 0600}, {002, 0664}}) {
    TempDir dir;
    ScopedUmask scoped(mask);
    const std::string path = dir.File("m.bin");
    ASSERT_TRUE(WriteFileAtomically(path, ByteVector({1})).ok());
    EXPECT_EQ(ModeOf(path), want) << std::oct << mask;
    // The process umask is what it was before the write.
    const mode_t now = ::umask(mask);
    EXPECT_EQ(now, mask);
  }
}

TEST(AtomicFileTest, ProducerFailureLeavesTargetUntouchedAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.File("keep.bin");
  ::ptd::testing::WriteFileBytes(path, ByteVector({7, 7, 7}));
  const absl::Status s = WriteFileAtomically(path, [](const WriteFn& write) {
    if (absl::Status st = write(ByteVector({1, 2})); !st.ok()) return st;
    return absl::DataLossError("producer failed half way");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadFileBytes(path), ByteVector({7, 7, 7}));
  EXPECT_EQ(CountEntries(dir.path()), 1);
}

TEST(AtomicFileTest, FailedWriteLeavesTargetUntouchedAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.File("keep.bin");
  ::ptd::testing::WriteFileBytes(path, ByteVector({7, 7, 7}));
  // write(2) fails with EFBIG past a 16-byte file size limit.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s = WriteFileAtomically(path, std::vector<uint8_t>(64, 1));
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("write failed"));
  EXPECT_EQ(ReadFileBytes(path), ByteVector({7, 7, 7}));
  EXPECT_EQ(CountEntries(dir.path()), 1);
}

TEST(AtomicFileTest, MissingDirectoryIsNotFound) {
  TempDir dir;
  const absl::Status s = WriteFileAtomically(dir.File("no/such/x.ptd"), ByteVector({1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

TEST(AtomicFileTest, FailedRenameLeavesNoTemporary) {
  TempDir dir;
  // The target is a non-empty directory: rename(2) fails at the last step.
  const std::string target = dir.File("model.ptd");
  std::filesystem::create_directory(target);
  ::ptd::testing::WriteFileBytes(target + "/inside", ByteVector({5}));
  const absl::Status s = WriteFileAtomically(target, ByteVector({1, 2, 3}));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.ptd"));
  EXPECT_TRUE(std::filesystem::is_directory(target));
  EXPECT_EQ(ReadFileBytes(target + "/inside"), ByteVector({5}));
  EXPECT_EQ(CountEntries(dir.path()), 1);
}

TEST(AtomicFileTest, ReplacesExistingTarget) {
  TempDir dir;
  const std::string path = dir.File("x.bin");
  ::ptd::testing::WriteFileBytes(path, ByteVector({5}));
  ASSERT_TRUE(WriteFileAtomically(path, ByteVector({1, 2})).ok());
  EXPECT_EQ(ReadFileBytes(path), ByteVector({1, 2}));
}

}  // namespace
}  // namespace ptd
