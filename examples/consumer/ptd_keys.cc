// ptd-keys: prints the keys of a .ptd file, one per line, with their sizes.
// A minimal consumer of the installed ptd package (ptd::format only).
#include <ptd/container.h>
#include <ptd/file_source.h>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ptd-keys FILE.ptd\n";
    return 2;
  }
  auto source = ptd::OpenFile(argv[1]);
  if (!source.ok()) {
    std::cerr << source.status() << "\n";
    return 2;
  }
  auto container = ptd::Container::Open(*source);
  if (!container.ok()) {
    std::cerr << container.status() << "\n";
    return 1;
  }
  for (const ptd::NamedDataEntry& e : (*container)->named_data()) {
    const auto size = (*container)->SegmentSize(e);
    std::cout << e.key << "\t" << (size ? *size : 0) << "\n";
  }
  return 0;
}
