// Replay driver: runs a fuzz target's LLVMFuzzerTestOneInput over files,
// without libFuzzer. Linked instead of -fsanitize=fuzzer when PTD_LIBFUZZER
// is off, so the seed corpus and any saved crash inputs run as ctest tests
// (under the sanitizers when PTD_SANITIZE is set).
//
// Usage: <target>_fuzz_replay PATH...
// Each PATH is a file or a directory (walked recursively, in sorted order).
// Prints the number of inputs run. Exit 0 when every path existed and was
// read; 1 otherwise. A crashing input aborts the process (as under libFuzzer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional, as under libFuzzer: a target that needs one-time setup defines it.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

bool ReadFile(const fs::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Appends the regular files at or under `path`; false if it does not exist.
bool Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files->push_back(path);
    return true;
  }
  if (!fs::is_directory(path, ec)) return false;
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) found.push_back(it->path());
  }
  if (ec) return false;
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 1;
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  bool ok = true;
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> files;
    if (!Collect(argv[i], &files)) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      ok = false;
      continue;
    }
    for (const fs::path& f : files) {
      std::vector<uint8_t> bytes;
      if (!ReadFile(f, &bytes)) {
        std::fprintf(stderr, "%s: cannot read\n", f.c_str());
        ok = false;
        continue;
      }
      // Copy into an allocation of exactly the input's size (non-null even
      // when empty), so that ASan flags a read one past the end, as with
      // libFuzzer's own copy.
      std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size()]);
      std::copy(bytes.begin(), bytes.end(), exact.get());
      LLVMFuzzerTestOneInput(exact.get(), bytes.size());
      ++count;
    }
  }
  std::printf("replayed %zu inputs\n", count);
  return ok ? 0 : 1;
}
