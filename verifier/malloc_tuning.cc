// How ptd-load's process allocates: glibc's huge-page malloc (re-exec with
// GLIBC_TUNABLES) and a fixed mmap threshold, and the lines that report them.
#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <gnu/libc-version.h>

#include "verifier/cli_util.h"

namespace ptd::cli {

namespace {

constexpr const char* kTunables = "GLIBC_TUNABLES";
constexpr const char* kHugetlbTunable = "glibc.malloc.hugetlb";

// glibc.malloc.hugetlb exists from glibc 2.35.
bool GlibcHasHugetlbTunable() {
  int major = 0, minor = 0;
  if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 35);
}

// "[always]" or "[madvise]": the kernel backs advised memory with THP.
bool KernelAllowsThp() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

// Where GLIBC_TUNABLES sets `name` ("glibc.malloc.hugetlb=1:..."), or null.
const char* TunableSetting(const char* name) {
  const char* tunables = std::getenv(kTunables);
  return tunables != nullptr ? std::strstr(tunables, name) : nullptr;
}

}  // namespace

bool BuiltWithSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

bool HugePageMallocAvailable() {
  return !BuiltWithSanitizer() && GlibcHasHugetlbTunable() && KernelAllowsThp();
}

std::string MallocPagesLine() {
  const char* at = TunableSetting(kHugetlbTunable);
  if (at == nullptr) return "malloc: default (4 KiB) pages";
  const std::string setting(at, std::strcspn(at, ":"));
  if (setting == absl::StrCat(kHugetlbTunable, "=1")) {
    return absl::StrCat("malloc: ", setting, " (large blocks on transparent huge pages)");
  }
  return absl::StrCat("malloc: ", setting);
}

namespace {
enum class MmapThreshold { kDynamic, kFixed, kEnvironment };
MmapThreshold g_mmap_threshold = MmapThreshold::kDynamic;
}  // namespace

void FixMallocMmapThreshold() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      TunableSetting("glibc.malloc.mmap_threshold") != nullptr) {
    g_mmap_threshold = MmapThreshold::kEnvironment;
    return;
  }
  if (::mallopt(M_MMAP_THRESHOLD, kMallocMmapThreshold) == 1) {
    g_mmap_threshold = MmapThreshold::kFixed;
  }
}

std::string MallocMmapLine() {
  switch (g_mmap_threshold) {
    case MmapThreshold::kFixed:
      return absl::StrCat("malloc: mmap_threshold=", kMallocMmapThreshold, " (fixed)");
    case MmapThreshold::kEnvironment:
      return "malloc: mmap_threshold set by the environment";
    case MmapThreshold::kDynamic:
      break;
  }
  return "malloc: mmap_threshold dynamic (glibc's default)";
}

namespace {

// The kernel names a process after the file it executes: "exe" after the
// exec of /proc/self/exe below. Gives the name back from argv[0] (cut to 15
// bytes, as the kernel cuts it), so that ps, top and pgrep see "ptd-load".
void KeepProcessName(const char* argv0) {
  char comm[16] = {};
  if (argv0 == nullptr || ::prctl(PR_GET_NAME, comm) != 0 || std::strcmp(comm, "exe") != 0) return;
  const char* slash = std::strrchr(argv0, '/');
  const char* name = slash != nullptr ? slash + 1 : argv0;
  if (*name == '\0' || std::strcmp(name, "exe") == 0) return;
  char cut[16] = {};
  std::memcpy(cut, name, std::min(std::strlen(name), sizeof(cut) - 1));
  (void)::prctl(PR_SET_NAME, cut);
}

}  // namespace

void ReexecWithHugePageMalloc(char** argv) {
  KeepProcessName(argv[0]);
  const char* opt_out = std::getenv("PTD_MALLOC_HUGETLB");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") == 0) return;
  // Set already, by the user or by the exec below: never a second exec.
  if (TunableSetting(kHugetlbTunable) != nullptr) return;
  const char* tunables = std::getenv(kTunables);
  if (!HugePageMallocAvailable()) return;
  const std::optional<std::string> before =
      tunables != nullptr ? std::optional<std::string>(tunables) : std::nullopt;
  std::string value = absl::StrCat(kHugetlbTunable, "=1");
  if (before && !before->empty()) value = absl::StrCat(*before, ":", value);
  if (::setenv(kTunables, value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Still here: run as is, with the environment as it was.
  if (before) {
    ::setenv(kTunables, before->c_str(), 1);
  } else {
    ::unsetenv(kTunables);
  }
}

}  // namespace ptd::cli
