// Helpers for the executorch tests: upstream's FlatTensorDataMap over the
// wheel's data loaders (the reference these tests compare against), and a
// child process for calls that crash upstream.
//
// Nothing here includes Debian's FlatBuffers headers: the wheel's headers
// cannot share a translation unit with them (see README).
#ifndef PTD_TESTS_EXECUTORCH_ET_TESTING_H_
#define PTD_TESTS_EXECUTORCH_ET_TESTING_H_

#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/flat_tensor/flat_tensor_data_map.h>
#include <executorch/runtime/core/error.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ptd::testing {

// Upstream's map and the loader it borrows.
struct UpstreamMap {
  enum class Loader { kFile, kMmap };
  std::unique_ptr<::executorch::runtime::DataLoader> loader;
  std::optional<::executorch::extension::FlatTensorDataMap> map;
  ::executorch::runtime::Error error = ::executorch::runtime::Error::Ok;

  // Check `error` (or `map.has_value()`) afterwards.
  static std::unique_ptr<UpstreamMap> Open(const std::string& path, Loader loader = Loader::kFile);
};

// "0x20 NotFound" style names for assertion messages.
std::string ErrorName(::executorch::runtime::Error e);

// How a forked child that ran `fn` ended.
struct ChildOutcome {
  bool signaled = false;
  int signal = 0;      // When signaled.
  int exit_code = -1;  // When it exited.
};
// Runs `fn` in a forked child (default SIGSEGV disposition, stderr kept) and
// waits for it. The child exits 0 when `fn` returns.
ChildOutcome RunInChild(const std::function<void()>& fn);

}  // namespace ptd::testing

#endif  // PTD_TESTS_EXECUTORCH_ET_TESTING_H_
