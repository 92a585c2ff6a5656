#include "tests/executorch/et_testing.h"

#include <executorch/runtime/platform/runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"

namespace ptd::testing {

using ::executorch::runtime::Error;

std::unique_ptr<UpstreamMap> UpstreamMap::Open(const std::string& path, Loader loader) {
  auto u = std::make_unique<UpstreamMap>();
  if (loader == Loader::kFile) {
    auto l = ::executorch::extension::FileDataLoader::from(path.c_str());
    if (!l.ok()) {
      u->error = l.error();
      return u;
    }
    u->loader = std::make_unique<::executorch::extension::FileDataLoader>(std::move(l.get()));
  } else {
    auto l = ::executorch::extension::MmapDataLoader::from(path.c_str());
    if (!l.ok()) {
      u->error = l.error();
      return u;
    }
    u->loader = std::make_unique<::executorch::extension::MmapDataLoader>(std::move(l.get()));
  }
  auto m = ::executorch::extension::FlatTensorDataMap::load(u->loader.get());
  if (!m.ok()) {
    u->error = m.error();
    return u;
  }
  u->map.emplace(std::move(m.get()));
  return u;
}

std::string ErrorName(Error e) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "0x%x %s", static_cast<unsigned>(e),
                ::executorch::runtime::to_string(e));
  return buf;
}

ChildOutcome RunInChild(const std::function<void()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // Under ASan a SEGV would be reported and turned into exit(1); restore
    // the default action so the child dies of the signal either way.
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    fn();
    _exit(0);
  }
  ChildOutcome out;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return out;
  if (WIFSIGNALED(status)) {
    out.signaled = true;
    out.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
  }
  return out;
}

}  // namespace ptd::testing

int main(int argc, char** argv) {
  ::executorch::runtime::runtime_init();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
