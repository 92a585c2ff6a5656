// HostDevice's large blocks (issue 19): a 2 MiB-aligned mapping,
// pre-faulted before the reads, advised for transparent huge pages when the
// options say so; freed with the last buffer. A block readied ahead by
// PrepareAllocation, taken by the AllocateMany that fits.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "runtime/device/buddyinfo.h"

namespace ptd {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool ThpAvailable() {
  const HugePageMode m = SystemHugePageMode();
  return m == HugePageMode::kAlways || m == HugePageMode::kMadvise;
}

// Pages of [p, p + n) resident now (mincore), or -1 when the range is not
// mapped (ENOMEM).
long ResidentPages(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto* start = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) / page * page);
  const size_t len = static_cast<size_t>(static_cast<const uint8_t*>(p) + n - start);
  std::vector<unsigned char> vec((len + page - 1) / page);
  if (::mincore(start, len, vec.data()) != 0) return errno == ENOMEM ? -1 : -2;
  long resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

// The VmFlags of the mapping that holds `p` (/proc/self/smaps).
std::string VmFlagsOf(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(HostMemoryTest, PopulateOnAllocateMakesTheBlockResidentBeforeAnyWrite) {
  HostDevice device(
      HostMemoryOptions{.huge_pages = HugePages::kOff, .populate = Populate::kOnAllocate});
  auto got = device.AllocateMany({40 * kMiB, 1000});
  ASSERT_TRUE(got.ok()) << got.status();
  const void* base = (*got)[0].data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2 * kMiB), 0u) << "2 MiB-aligned";
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(ResidentPages(base, 40 * kMiB), static_cast<long>(40 * kMiB / page));
  EXPECT_EQ(VmFlagsOf(base).find(" hg"), std::string::npos) << VmFlagsOf(base);
  EXPECT_EQ(device.stats().huge_page_bytes, 0u);
}

// The order of a PMD-sized huge page, from sysfs; -1 where it cannot be read.
int HugePageOrder() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  uint64_t huge = 0;
  if (!(in >> huge)) return -1;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (int k = 0; k < 40; ++k) {
    if ((page << k) == huge) return k;
  }
  return -1;
}

TEST(HostMemoryTest, FreeHugePagesAreReportedWhereReportingReachesTheirOrder) {
  const std::optional<int> reporting = FreePageReportingOrder();
  const int huge_order = HugePageOrder();
  EXPECT_EQ(FreeHugePagesAreReported(),
            reporting.has_value() && (huge_order < 0 || *reporting <= huge_order));
  std::ifstream in("/sys/module/page_reporting/parameters/page_reporting_order");
  int64_t raw = -1;
  if (!(in >> raw)) {
    EXPECT_FALSE(reporting.has_value()) << "no parameter: nothing reports";
  } else if (raw >= 0 && raw <= 64) {
    EXPECT_EQ(reporting, std::optional<int>(static_cast<int>(raw)));
  } else {
    EXPECT_FALSE(reporting.has_value()) << raw << " means unset";
  }
}

TEST(HostMemoryTest, AutoAsksForHugePagesOnlyWhereFaultsNeedNotCompact) {
  const bool thp = ThpAvailable() && !FreeHugePagesAreReported();
  const bool compacts = HugePageFaultsMayCompact();
  // Never where free huge-page blocks go back to a hypervisor. Else no
  // block is too large where faults never compact; where they may, one
  // larger than the free lists can hold never asks, and an empty one asks
  // whenever the free lists can be read.
  EXPECT_EQ(UsesHugePages(HostMemoryOptions{}, SIZE_MAX), thp && !compacts);
  EXPECT_EQ(UsesHugePages(HostMemoryOptions{}, 0),
            thp && (!compacts || FreeHugePageBytes().has_value()));
  for (size_t n : {size_t{0}, 64 * kMiB, SIZE_MAX}) {
    EXPECT_EQ(UsesHugePages(HostMemoryOptions{.huge_pages = HugePages::kOn}, n), ThpAvailable())
        << n;
    EXPECT_FALSE(UsesHugePages(HostMemoryOptions{.huge_pages = HugePages::kOff}, n)) << n;
  }
}

TEST(HostMemoryTest, FreeHugePageBytesIsAtMostTheMachinesMemory) {
  const std::optional<uint64_t> free_bytes = FreeHugePageBytes();
  if (!free_bytes) GTEST_SKIP() << "/proc/buddyinfo or hpage_pmd_size cannot be read here";
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  ASSERT_GT(pages, 0);
  EXPECT_LE(*free_bytes, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page));
}

// /proc/buddyinfo as this kind of machine writes it (orders 0 to 10).
constexpr std::string_view kBuddyInfo =
    "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1   "
    "   3 \n"
    "Node 0, zone    DMA32      2      4      2      2      1      2      0      3      3      1   "
    " 753 \n"
    "Node 0, zone   Normal     35      2    226    186    529    687    530    380    197    112   "
    " 263 \n";

TEST(BuddyInfoTest, CountsBlocksOfAnOrderAndAboveAcrossZones) {
  // Order 9 (2 MiB huge pages on 4 KiB pages): an order-10 block is two.
  EXPECT_EQ(internal::FreeBlocksOfOrder(kBuddyInfo, 9),
            uint64_t{(1 + 3 * 2) + (1 + 753 * 2) + (112 + 263 * 2)});
  EXPECT_EQ(internal::FreeBlocksOfOrder(kBuddyInfo, 10), uint64_t{3 + 753 + 263});
  EXPECT_EQ(internal::FreeBlocksOfOrder(kBuddyInfo, 11), uint64_t{0});
  // Order 0: every free page.
  uint64_t pages = 0;
  const std::vector<std::vector<uint64_t>> rows = {
      {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 3},
      {2, 4, 2, 2, 1, 2, 0, 3, 3, 1, 753},
      {35, 2, 226, 186, 529, 687, 530, 380, 197, 112, 263}};
  for (const auto& row : rows) {
    for (size_t k = 0; k < row.size(); ++k) pages += row[k] << k;
  }
  EXPECT_EQ(internal::FreeBlocksOfOrder(kBuddyInfo, 0), pages);
}

TEST(BuddyInfoTest, TextItCannotReadCountsAsUnknown) {
  EXPECT_EQ(internal::FreeBlocksOfOrder("", 9), std::nullopt);
  EXPECT_EQ(internal::FreeBlocksOfOrder("no zones here\n", 9), std::nullopt);
  EXPECT_EQ(internal::FreeBlocksOfOrder("Node 0, zone Normal 1 2 x 4\n", 0), std::nullopt);
  EXPECT_EQ(internal::FreeBlocksOfOrder("Node 0, zone Normal 1 -2\n", 0), std::nullopt);
  EXPECT_EQ(internal::FreeBlocksOfOrder(kBuddyInfo, -1), std::nullopt);
  // 2^64 - 1 blocks of order 1 are more order-0 blocks than a count holds.
  EXPECT_EQ(internal::FreeBlocksOfOrder("Node 0, zone Normal 0 18446744073709551615\n", 0),
            std::nullopt);
  EXPECT_EQ(internal::FreeBlocksOfOrder("Node 0, zone Normal 0 18446744073709551615\n", 1),
            uint64_t{18446744073709551615u});
}

TEST(HostMemoryTest, HugePageBlockIsAdvisedAndResidentBeforeAnyWrite) {
  if (!ThpAvailable()) GTEST_SKIP() << "transparent huge pages are 'never' or unknown here";
  HostDevice device(
      HostMemoryOptions{.huge_pages = HugePages::kOn, .populate = Populate::kOnAllocate});
  const std::vector<size_t> sizes = {40 * kMiB, 1000, 24 * kMiB};
  auto got = device.AllocateMany(sizes);
  ASSERT_TRUE(got.ok()) << got.status();
  const auto* base = static_cast<const uint8_t*>((*got)[0].data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2 * kMiB), 0u) << "2 MiB-aligned";
  const size_t span =
      static_cast<size_t>(static_cast<const uint8_t*>((*got)[2].data()) + sizes[2] - base);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Pre-faulted: every page is there before the loader writes one byte.
  EXPECT_EQ(ResidentPages(base, span), static_cast<long>((span + page - 1) / page));
  EXPECT_NE(VmFlagsOf(base).find(" hg"), std::string::npos) << VmFlagsOf(base);
  // The whole block, rounded up to whole huge pages, was advised.
  EXPECT_EQ(device.stats().huge_page_bytes, (span + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB));
  // Fresh memory reads as zeros and takes writes.
  for (const DeviceBuffer& b : *got) {
    auto* p = static_cast<uint8_t*>(b.data());
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[b.size() - 1], 0);
    std::memset(p, 0xA5, b.size());
  }
  EXPECT_EQ(static_cast<const uint8_t*>((*got)[1].data())[999], 0xA5);
}

// The default leaves population to PrepareWrite, which the loader calls
// just before each read: it faults in the pages of the range it is given
// (and of no other), and keeps the bytes already there, including those of
// a neighbour on a page the range shares.
TEST(HostMemoryTest, PrepareWriteFaultsInItsRangeAndKeepsTheBytes) {
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff});
  auto got = device.AllocateMany({32 * kMiB});
  ASSERT_TRUE(got.ok()) << got.status();
  auto* base = static_cast<uint8_t*>((*got)[0].data());
  const long page = ::sysconf(_SC_PAGESIZE);
  EXPECT_EQ(ResidentPages(base, 32 * kMiB), 0) << "nothing before PrepareWrite";
  std::memset(base, 0x5A, 100);  // A neighbour's bytes on the first page.
  ASSERT_TRUE(device.PrepareWrite(base + 100, 8 * kMiB).ok());
  // [100, 8 MiB + 100) touches 8 MiB / page + 1 pages, the first included.
  EXPECT_EQ(ResidentPages(base, 32 * kMiB), static_cast<long>(8 * kMiB) / page + 1);
  EXPECT_EQ(ResidentPages(base + 9 * kMiB, 23 * kMiB), 0) << "beyond the range";
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(base[i], 0x5A) << i;
  for (size_t i = 100; i < 8 * kMiB + 100; i += 4093) ASSERT_EQ(base[i], 0) << i;
  EXPECT_TRUE(device.PrepareWrite(base, 0).ok());
}

TEST(HostMemoryTest, PrepareWriteDoesNothingUnlessPopulatingBeforeWrites) {
  for (Populate p : {Populate::kOff, Populate::kOnAllocate}) {
    HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff, .populate = p});
    auto got = device.AllocateMany({16 * kMiB});
    ASSERT_TRUE(got.ok()) << got.status();
    const long before = ResidentPages((*got)[0].data(), 16 * kMiB);
    ASSERT_TRUE(device.PrepareWrite((*got)[0].data(), 4 * kMiB).ok());
    EXPECT_EQ(ResidentPages((*got)[0].data(), 16 * kMiB), before);
  }
}

TEST(HostMemoryTest, WithoutPopulateNothingIsResidentYet) {
  if (!ThpAvailable()) GTEST_SKIP() << "transparent huge pages are 'never' or unknown here";
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOn, .populate = Populate::kOff});
  auto got = device.AllocateMany({32 * kMiB});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ResidentPages((*got)[0].data(), 32 * kMiB), 0);
}

TEST(HostMemoryTest, TheMappingGoesWithTheLastBuffer) {
  if (!ThpAvailable()) GTEST_SKIP() << "transparent huge pages are 'never' or unknown here";
  HostDevice device;
  const void* base = nullptr;
  {
    auto got = device.AllocateMany({16 * kMiB, 16 * kMiB});
    ASSERT_TRUE(got.ok()) << got.status();
    base = (*got)[0].data();
    ASSERT_TRUE(device.PrepareWrite((*got)[0].data(), 16 * kMiB).ok());
    DeviceBuffer keep = std::move((*got)[1]);
    got->clear();
    EXPECT_GT(ResidentPages(base, 16 * kMiB), 0) << "still held by the second buffer";
    EXPECT_EQ(device.stats().live_allocations, 2u);
  }
  EXPECT_EQ(ResidentPages(base, 16 * kMiB), -1) << "unmapped";
  EXPECT_EQ(device.stats().live_allocations, 0u);
  EXPECT_EQ(device.stats().live_bytes, 0u);
}

TEST(HostMemoryTest, SmallBlocksStayOnTheHeap) {
  HostDevice device(HostMemoryOptions{.huge_min_bytes = 64 * kMiB});
  auto got = device.AllocateMany({kMiB, kMiB});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(VmFlagsOf((*got)[0].data()).find(" hg"), std::string::npos);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*got)[0].data()) % kDeviceAlignment, 0u);
}

// PrepareAllocation: a block mapped ahead (and faulted in on a thread of
// its own) that the next AllocateMany that fits takes, cut to its size.
TEST(HostMemoryTest, AllocateManyTakesThePreparedBlockCutToItsSize) {
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff});
  device.PrepareAllocation(32 * kMiB);
  // 20 MiB and 1,000 bytes (packed at 64-byte boundaries): a 22 MiB block.
  auto got = device.AllocateMany({20 * kMiB, 1000});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(device.stats().prepared_bytes, 22 * kMiB);
  const auto* base = static_cast<const uint8_t*>((*got)[0].data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2 * kMiB), 0u) << "2 MiB-aligned";
  EXPECT_EQ(ResidentPages(base + 22 * kMiB, 10 * kMiB), -1) << "the rest is unmapped";
  // Fresh memory: the thread that faulted it in wrote zeros only.
  for (size_t i = 0; i < 20 * kMiB; i += 4093) ASSERT_EQ(base[i], 0) << i;
  EXPECT_EQ(device.stats().live_allocations, 2u);
  // PrepareWrite faults in what the thread did not get to.
  const long page = ::sysconf(_SC_PAGESIZE);
  ASSERT_TRUE(device.PrepareWrite((*got)[0].data(), 20 * kMiB).ok());
  EXPECT_EQ(ResidentPages(base, 20 * kMiB), static_cast<long>(20 * kMiB) / page);
  got->clear();
  // Taken: the next allocation gets fresh memory, which PrepareWrite faults
  // in in full (whatever address it has).
  auto next = device.AllocateMany({16 * kMiB});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(device.stats().prepared_bytes, 22 * kMiB);
  EXPECT_EQ(ResidentPages((*next)[0].data(), 16 * kMiB), 0);
  ASSERT_TRUE(device.PrepareWrite((*next)[0].data(), 16 * kMiB).ok());
  EXPECT_EQ(ResidentPages((*next)[0].data(), 16 * kMiB), static_cast<long>(16 * kMiB) / page);
}

TEST(HostMemoryTest, AnAllocationThePreparedBlockCannotHoldDropsIt) {
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff});
  device.PrepareAllocation(16 * kMiB);
  auto big = device.AllocateMany({40 * kMiB});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(device.stats().prepared_bytes, 0u);
  auto small = device.AllocateMany({8 * kMiB});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(device.stats().prepared_bytes, 0u) << "dropped, not kept for later";
}

TEST(HostMemoryTest, PreparingNothingDropsThePreparedBlock) {
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff});
  device.PrepareAllocation(32 * kMiB);
  device.PrepareAllocation(0);
  auto got = device.AllocateMany({16 * kMiB});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(device.stats().prepared_bytes, 0u);
  // A hint the next replaces: only the last one is taken.
  device.PrepareAllocation(8 * kMiB);
  device.PrepareAllocation(24 * kMiB);
  auto again = device.AllocateMany({20 * kMiB});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(device.stats().prepared_bytes, 20 * kMiB);
  // A device that goes with a block prepared and not taken unmaps it.
  HostDevice{}.PrepareAllocation(16 * kMiB);
}

TEST(HostMemoryTest, OnlyHintsOfLargeBlocksPopulatedBeforeWritesArePrepared) {
  for (Populate p : {Populate::kOff, Populate::kOnAllocate}) {
    HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff, .populate = p});
    device.PrepareAllocation(32 * kMiB);
    auto got = device.AllocateMany({16 * kMiB});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(device.stats().prepared_bytes, 0u);
  }
  HostDevice device(HostMemoryOptions{.huge_min_bytes = 64 * kMiB});
  device.PrepareAllocation(32 * kMiB);  // Under huge_min_bytes: the heap's.
  auto got = device.AllocateMany({16 * kMiB});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(device.stats().prepared_bytes, 0u);
  // More than half the machine's available memory: not faulted in ahead.
  const std::optional<uint64_t> available = MemAvailableBytes();
  ASSERT_TRUE(available.has_value()) << "/proc/meminfo has no MemAvailable";
  HostDevice huge_hint(HostMemoryOptions{.huge_pages = HugePages::kOff});
  huge_hint.PrepareAllocation(*available / 2 + 1);
  auto after = huge_hint.AllocateMany({16 * kMiB});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(huge_hint.stats().prepared_bytes, 0u);
}

// Every method may be called concurrently (TSan runs this).
TEST(HostMemoryTest, HintsAndAllocationsMayRace) {
  HostDevice device(HostMemoryOptions{.huge_pages = HugePages::kOff});
  std::thread hints([&] {
    for (int i = 0; i < 20; ++i) device.PrepareAllocation(16 * kMiB);
  });
  std::vector<DeviceBuffer> kept;
  for (int i = 0; i < 20; ++i) {
    auto got = device.AllocateMany({8 * kMiB});
    ASSERT_TRUE(got.ok()) << got.status();
    std::memset((*got)[0].data(), i, 8 * kMiB);
    kept.push_back(std::move((*got)[0]));
  }
  hints.join();
  for (int i = 0; i < 20; ++i) {
    const auto* p = static_cast<const uint8_t*>(kept[i].data());
    ASSERT_EQ(p[0], i);
    ASSERT_EQ(p[8 * kMiB - 1], i);
  }
  EXPECT_EQ(device.stats().prepared_bytes % (8 * kMiB), 0u);
  EXPECT_LE(device.stats().prepared_bytes, 20 * 8 * kMiB);
}

}  // namespace
}  // namespace ptd
