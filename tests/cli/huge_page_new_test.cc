// The tools' operator new (verifier/huge_page_new.cc), which this test
// binary links too: once turned on, a block of kLargeBlockBytes or more is a
// mapping of its own advised onto huge pages, and every kind of delete gives
// it back; smaller blocks, and blocks past the table's capacity, are malloc's.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "verifier/cli_util.h"

namespace ptd::cli {
namespace {

// The mapping of /proc/self/smaps that holds `p`: its first line (range)
// and its VmFlags, or nullopt when no mapping holds it.
struct Mapping {
  uintptr_t begin = 0, end = 0;
  std::string flags;
};
// Addresses, not pointers: the tests look at where a deleted block was.
uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

std::optional<Mapping> MappingOf(uintptr_t at) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  std::optional<Mapping> found;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;  // NOLINT(runtime/int): sscanf's type.
    char dash = 0;
    std::istringstream head(line);
    if (!found && (head >> std::hex >> lo >> dash >> hi) && dash == '-' && line.find(':') > 20) {
      if (at >= lo && at < hi)
        found = Mapping{static_cast<uintptr_t>(lo), static_cast<uintptr_t>(hi), ""};
      continue;
    }
    if (found && line.rfind("VmFlags:", 0) == 0) {
      found->flags = line.substr(8);
      return found;
    }
  }
  return found;
}

bool Advised(uintptr_t at) {
  const auto m = MappingOf(at);
  return m.has_value() && m->flags.find(" hg") != std::string::npos;
}

class HugePageNewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HugePageMallocAvailable()) {
      GTEST_SKIP() << "a sanitizer build (its operator new stays) or THP mode never";
    }
    ASSERT_TRUE(UseHugePagesForLargeBlocks());
    ASSERT_TRUE(HugePagesForLargeBlocks());
  }
};

// Adjacent mappings with the same flags merge into one, so a block is found
// by its flags: malloc never advises huge pages here (no glibc.malloc.hugetlb
// in the test's environment), the tools' operator new does.
bool Unmapped(uintptr_t at) { return !MappingOf(at).has_value(); }

TEST_F(HugePageNewTest, ALargeArrayIsAdvisedAndItsUnsizedDeleteUnmapsIt) {
  constexpr size_t kBytes = (size_t{8} << 20) + 100;
  auto* block = new uint8_t[kBytes];
  std::memset(block, 7, kBytes);
  const uintptr_t first = Address(block), last = first + kBytes - 1;
  EXPECT_TRUE(Advised(first));
  EXPECT_TRUE(Advised(last));
  delete[] block;  // Unsized: found in the table.
  EXPECT_TRUE(Unmapped(first));
  EXPECT_TRUE(Unmapped(last));
}

TEST_F(HugePageNewTest, SizedAndAlignedDeletesUnmapTheirBlocks) {
  std::optional<std::vector<uint8_t>> v(std::in_place, size_t{3} << 20, uint8_t{1});
  const uintptr_t data = Address(v->data());
  EXPECT_TRUE(Advised(data));
  v.reset();  // std::allocator: the sized delete.
  EXPECT_TRUE(Unmapped(data));

  void* aligned = ::operator new (size_t{4} << 20, std::align_val_t{4096});
  const uintptr_t aligned_at = Address(aligned);
  EXPECT_EQ(aligned_at % 4096, 0u);
  EXPECT_TRUE(Advised(aligned_at));
  ::operator delete (aligned, size_t{4} << 20, std::align_val_t{4096});
  EXPECT_TRUE(Unmapped(aligned_at));

  // An alignment over a page is aligned_alloc's, and still aligned.
  void* wide = ::operator new (size_t{4} << 20, std::align_val_t{size_t{1} << 21});
  EXPECT_EQ(Address(wide) % (size_t{1} << 21), 0u);
  EXPECT_FALSE(Advised(Address(wide)));
  ::operator delete (wide, std::align_val_t{size_t{1} << 21});
}

TEST_F(HugePageNewTest, SmallBlocksStayMallocs) {
  auto small = std::make_unique<uint8_t[]>(kLargeBlockBytes - 1);
  ASSERT_TRUE(MappingOf(Address(small.get())).has_value());
  EXPECT_FALSE(Advised(Address(small.get())));
}

// Past the table's 1024 slots, malloc serves; every block is given back by
// the delete that matches it, whichever allocator made it. The blocks are
// never written: address space only.
TEST_F(HugePageNewTest, PastTheTableMallocServesAndEveryDeleteFindsItsOwn) {
  constexpr size_t kBlocks = 1100;
  std::vector<uint8_t*> blocks;
  blocks.reserve(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<uint8_t*>(::operator new[](kLargeBlockBytes)));
  }
  size_t advised = 0;
  for (uint8_t* p : blocks) advised += Advised(Address(p)) ? 1 : 0;
  EXPECT_LE(advised, 1024u);
  EXPECT_GE(advised, 1000u) << "other blocks alive may hold a few slots";
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uintptr_t at = Address(blocks[i]);
    const bool ours = Advised(at);
    if (i % 2 == 0) {
      ::operator delete[](blocks[i]);
    } else {
      ::operator delete[](blocks[i], kLargeBlockBytes);
    }
    if (ours) {
      EXPECT_TRUE(Unmapped(at)) << i;
    }
  }
  // The table has room again.
  auto* again = new uint8_t[kLargeBlockBytes];
  EXPECT_TRUE(Advised(Address(again)));
  delete[] again;
}

// Out of memory is still std::bad_alloc, and nothrow new still null.
TEST_F(HugePageNewTest, AnImpossibleBlockThrowsBadAlloc) {
  // Through a volatile, so that the compiler does not reject the size.
  volatile size_t huge = SIZE_MAX / 2;
  EXPECT_THROW((void)::operator new(huge), std::bad_alloc);
  EXPECT_EQ(::operator new(huge, std::nothrow), nullptr);
  huge = SIZE_MAX - 10;
  EXPECT_EQ(::operator new[](huge, std::nothrow), nullptr);
}

}  // namespace
}  // namespace ptd::cli
