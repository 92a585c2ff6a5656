// Writes the regression case of every SPEC rule into a directory
// (tests/testing/rule_files.h):
//   build/tests/ptd_make_rule_files tests/data/rules
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/testing/rule_files.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  for (const ptd::testing::RuleFile& f : ptd::testing::RuleFiles()) {
    std::ofstream out(dir + "/" + f.name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(f.bytes.data()),
              static_cast<std::streamsize>(f.bytes.size()));
    if (!out) {
      std::fprintf(stderr, "%s/%s: cannot write\n", dir.c_str(), f.name.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("wrote %d files into %s\n", n, dir.c_str());
  return 0;
}
