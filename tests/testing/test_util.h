// Helpers shared by the tests: test data paths, files, temporary folders.
#ifndef PTD_TESTS_TESTING_TEST_UTIL_H_
#define PTD_TESTS_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace ptd::testing {

// Where a test finds a file or tool: `$env` when that variable is set and not
// empty; else `compiled` (the compile definition) when it is absolute; else
// `compiled` relative to the folder of the running executable
// (/proc/self/exe), as in the relocatable GPU bundle (scripts/gpu_bundle.sh).
std::string TestPath(const char* env, const char* compiled);

// Path of `rel` under tests/data (TestPath("PTD_TEST_DATA_DIR", PTD_TEST_DATA_DIR)).
std::string DataPath(const std::string& rel);

// The conformance cases (tests/data/conformance/cases.json).
const nlohmann::json& ConformanceCases();
// Absolute path of a path that cases.json gives (relative to conformance/).
std::string ConformancePath(const std::string& rel);
// The case named `name` (throws std::runtime_error when there is none).
const nlohmann::json& ConformanceCase(const std::string& name);
// The names of the cases expected to verify ("expect": "ok"), in file order.
std::vector<std::string> OkConformanceCases();

std::vector<uint8_t> ReadFileBytes(const std::string& path);
// The bytes of a list: ByteVector({1, 2, 3}).
std::vector<uint8_t> ByteVector(std::initializer_list<int> bytes);
// How many entries folder `dir` holds (that no temporary file is left).
int CountEntries(const std::string& dir);
void WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes);

// A fresh directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Runs a command line through the shell; returns its exit status and stdout.
struct CommandResult {
  int exit_code = -1;
  std::string out;
};
CommandResult RunCommand(const std::string& command);

// How many times `needle` occurs in `haystack` (overlaps counted).
size_t Count(const std::string& haystack, const std::string& needle);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_TEST_UTIL_H_
