// How the tools' processes allocate: large blocks on transparent huge pages
// (huge_page_new.cc) and a fixed mmap threshold, and the lines that report
// them.
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

#include "verifier/cli_util.h"

namespace ptd::cli {

namespace {

constexpr const char* kTunables = "GLIBC_TUNABLES";
constexpr const char* kHugetlbTunable = "glibc.malloc.hugetlb";

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

bool BuiltWithSanitizer() { return PTD_CLI_SANITIZER != 0; }

bool HugePageMallocAvailable() { return !BuiltWithSanitizer() && KernelAllowsThp(); }

std::string MallocPagesLine() {
  const char* at = TunableSetting(kHugetlbTunable);
  if (at == nullptr) {
    return HugePagesForLargeBlocks()
               ? absl::StrCat("malloc: blocks of ", kLargeBlockBytes >> 20,
                              " MiB and more on transparent huge pages (MADV_HUGEPAGE)")
               : "malloc: default (4 KiB) pages";
  }
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

void UseHugePageMalloc() {
  const char* opt_out = std::getenv("PTD_MALLOC_HUGETLB");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") == 0) return;
  // The user's own glibc.malloc.hugetlb is kept, and glibc's malloc applies it.
  if (TunableSetting(kHugetlbTunable) != nullptr) return;
  if (!HugePageMallocAvailable()) return;
  UseHugePagesForLargeBlocks();
}

}  // namespace ptd::cli
