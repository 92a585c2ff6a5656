// The CUDA device's defects that only the simulator can show: its devices,
// counters, paused engines and fault injection (label "cudasim"; built into
// ptd_cuda_sim_tests only, beside the gpu tests of tests/cuda/).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/cuda_device.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/view_materialize.h"
#include "tests/cudasim/cudasim.h"
#include "tests/cudasim/sim_devices.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::cudasim::SimDevices;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Every storage's digest of a load, in fqn order.
std::vector<std::string> Digests(const LoadedWeights& w, const TestModel& model) {
  std::vector<std::string> out;
  for (const std::string& fqn : model.fqns) {
    const LoadedWeight* lw = w.Find(fqn);
    if (lw == nullptr) {
      out.push_back("missing " + fqn);
      continue;
    }
    auto d = DigestLoadedStorage(w, w.storage(*lw));
    out.push_back(d.ok() ? *d : std::string(d.status().message()));
  }
  return out;
}

// The defect: the defaulted move-assignment replaced device_ before
// storages_, so the old device (and the internals its buffers' deleters
// point at) went first. Under ASan that is a heap-use-after-free.
TEST(CudaSimTest, MoveAssigningALoadFreesItsStoragesBeforeItsDevice) {
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), {4096, 70000, 1 << 20});
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  std::vector<std::string> want;
  {
    auto host = LoadWeights(paths, std::make_shared<HostDevice>());
    ASSERT_TRUE(host.ok()) << host.status();
    want = Digests(*host, model);
  }
  // Two devices, each held only by its load.
  auto a = LoadWeights(paths, *CudaDevice::Open(0));
  auto b = LoadWeights(paths, *CudaDevice::Open(0));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(cudasim::DeviceBytesInUse(0), 0u);
  *a = *std::move(b);
  EXPECT_EQ(Digests(*a, model), want);
  a = absl::InternalError("dropped");
  b = absl::InternalError("dropped");
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u) << "every device block was freed";
}

// The defect: DeviceScope read cudaGetDevice's 0 on a thread that never
// chose a device and "restored" it, which since CUDA 12 creates a context on
// cuda:0.
TEST(CudaSimTest, ALoadOnCuda1NeverTouchesCuda0) {
  SimDevices sim(2);
  ASSERT_TRUE(sim.ok());
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), {4096, 70000, 1 << 20});
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  std::thread::id worker_id;
  std::vector<std::string> got;
  std::thread worker([&] {
    worker_id = std::this_thread::get_id();
    auto gpu = CudaDevice::Open(1);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto w = LoadWeights(paths, *gpu);
    ASSERT_TRUE(w.ok()) << w.status();
    got = Digests(*w, model);
    // Each storage says which GPU holds it.
    for (const LoadedStorage& s : w->storages()) {
      EXPECT_EQ(s.device, DeviceKind::kCuda);
      EXPECT_EQ(s.device_index, 1);
    }
    for (const std::string& fqn : model.fqns) {
      const LoadedWeight* lw = w->Find(fqn);
      auto dense = (*gpu)->Materialize(w->storage(*lw).buffer, lw->view());
      ASSERT_TRUE(dense.ok()) << dense.status();
    }
  });
  worker.join();
  ASSERT_EQ(got.size(), model.fqns.size());
  EXPECT_EQ(cudasim::DevicesTouchedBy(worker_id), std::set<int>{1});
  EXPECT_EQ(cudasim::DevicesWithContext(), std::set<int>{1}) << "no context on cuda:0";
}

// A thread that did choose a device gets it back after work on another.
TEST(CudaSimTest, TheCallersDeviceIsRestored) {
  SimDevices sim(2);
  ASSERT_TRUE(sim.ok());
  std::thread worker([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto gpu = CudaDevice::Open(1);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto block = (*gpu)->Allocate(4096);
    ASSERT_TRUE(block.ok()) << block.status();
    int device = -1;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 0);
  });
  worker.join();
}

// The defect: a failed restore in DeviceScope left its error in the thread's
// last-error slot, and the next launch check (cudaGetLastError after the
// launch) reported it as the launch's.
TEST(CudaSimTest, AnIgnoredFailureIsNotReportedByALaterLaunch) {
  SimDevices sim(2);
  ASSERT_TRUE(sim.ok());
  std::thread worker([] {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);  // The caller's device, with a context.
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    // Allocate sets cuda:0 (1st call) and restores cuda:1 (2nd), which fails.
    cudasim::FailNthCall("cudaSetDevice", 2, cudaErrorInvalidDevice);
    auto storage = (*gpu)->Allocate(64 * 4);
    ASSERT_TRUE(storage.ok()) << storage.status();
    std::vector<uint32_t> values(64);
    for (uint32_t i = 0; i < 64; ++i) values[i] = i;
    auto ticket = (*gpu)->CopyToDeviceAsync(storage->data(), values.data(), 64 * 4);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE((*gpu)->Wait(*ticket).ok());
    // Every other element: the gather kernel.
    const std::vector<int64_t> sizes = {32}, strides = {2};
    auto out = (*gpu)->Materialize(
        *storage, {.element_size = 4, .storage_offset = 0, .sizes = sizes, .strides = strides});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<uint32_t> back(32);
    ASSERT_TRUE((*gpu)->CopyToHost(back.data(), out->data(), 32 * 4).ok());
    for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(back[i], 2 * i);
  });
  worker.join();
}

// The defect: Materialize launched its kernel on whatever pointer it got; a
// kernel reading host memory kills a real GPU context (here: the process).
TEST(CudaSimTest, MaterializeOfHostMemoryIsInvalidArgument) {
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  auto host = std::make_shared<HostDevice>()->Allocate(4096);
  ASSERT_TRUE(host.ok());
  const std::vector<int64_t> sizes = {32, 32}, strides = {1, 32};
  const ViewSpec view{.element_size = 4, .storage_offset = 0, .sizes = sizes, .strides = strides};
  auto out = (*gpu)->Materialize(*host, view);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("cuda:0"));
  EXPECT_EQ((*gpu)->stats().live_allocations, 0u);
}

// Materialize into a caller's buffer: no cudaMalloc (nor the device-wide
// synchronization of a cudaFree) per call.
TEST(CudaSimTest, MaterializeIntoReusesTheCallersBuffer) {
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  auto storage = (*gpu)->Allocate(64 * 64 * 2);
  ASSERT_TRUE(storage.ok());
  auto scratch = (*gpu)->Allocate(64 * 64 * 2);
  ASSERT_TRUE(scratch.ok());
  const uint64_t mallocs = cudasim::CallCount("cudaMalloc");
  const std::vector<int64_t> sizes = {64, 64}, strides = {1, 64};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        (*gpu)
            ->MaterializeInto(
                *storage,
                {.element_size = 2, .storage_offset = 0, .sizes = sizes, .strides = strides},
                *scratch)
            .ok());
  }
  EXPECT_EQ(cudasim::CallCount("cudaMalloc"), mallocs);
  // Too small a buffer is refused, before any launch.
  auto small = (*gpu)->Allocate(16);
  ASSERT_TRUE(small.ok());
  const absl::Status st = (*gpu)->MaterializeInto(
      *storage, {.element_size = 2, .storage_offset = 0, .sizes = sizes, .strides = strides},
      *small);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

// The defect: MaterializeInto chose its word width from the source address
// only, so an output at an odd offset got 8-byte stores at odd addresses
// (cudaErrorMisalignedAddress on a GPU; UBSan's alignment check in the ASan
// stage). The word now divides both addresses: which kernel ran says so.
TEST(CudaSimTest, MaterializeIntoAnOddlyPlacedOutputUsesNarrowerWords) {
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  constexpr int64_t kRows = 8, kCols = 6;  // 8-byte elements, a permuted 3-d view.
  std::vector<uint8_t> bytes(kRows * kCols * 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  auto storage = (*gpu)->Allocate(bytes.size());
  ASSERT_TRUE(storage.ok());
  auto t = (*gpu)->CopyToDeviceAsync(storage->data(), bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*gpu)->Wait(*t).ok());
  const std::vector<int64_t> sizes = {2, kCols, 4}, strides = {4, 8, 1};
  const ViewSpec view{.element_size = 8, .storage_offset = 0, .sizes = sizes, .strides = strides};
  std::vector<uint8_t> expected(2 * kCols * 4 * 8);
  ASSERT_TRUE(MaterializeOnHost(bytes, view, absl::MakeSpan(expected)).ok());
  auto block = (*gpu)->Allocate(expected.size() + 8);
  ASSERT_TRUE(block.ok());
  for (size_t misalign : {0, 1, 2, 4}) {
    SCOPED_TRACE(misalign);
    cudasim::ResetCallCounts();
    const DeviceBuffer out = block->Slice(misalign, expected.size());
    ASSERT_TRUE((*gpu)->MaterializeInto(*storage, view, out).ok());
    const std::string kernel = absl::StrCat("kernel:ptd_gather_w", misalign == 0 ? 8 : misalign);
    EXPECT_EQ(cudasim::CallCount(kernel), 1u) << kernel;
    std::vector<uint8_t> got(expected.size());
    ASSERT_TRUE((*gpu)->CopyToHost(got.data(), out.data(), got.size()).ok());
    EXPECT_EQ(got, expected);
  }
}

// Fills a staging block of `n` bytes with 'a', queues its copy to `dst`,
// and lets the block go (back to the cache, or freed) while the copy is
// still queued (the caller paused the engines). Its ticket; nullopt (and a
// failure) when a call fails.
std::optional<CopyTicket> CopyFromAReleasedStagingBlock(CudaDevice& gpu, void* dst, size_t n) {
  auto staging = gpu.AllocateStaging(n);
  if (!staging.ok()) {
    ADD_FAILURE() << staging.status();
    return std::nullopt;
  }
  std::memset(staging->data(), 'a', n);
  auto t = gpu.CopyToDeviceAsync(dst, staging->data(), n);
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return std::nullopt;
  }
  return *t;
}

// The defect: a staging block went back to the cache, and out again, while
// a copy from it was still in flight; its next owner overwrote the bytes
// that copy had yet to read.
TEST(CudaSimTest, TheStagingCacheWaitsForCopiesFromABlock) {
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  constexpr size_t kBytes = 1 << 20;
  auto dst = (*gpu)->Allocate(kBytes);
  ASSERT_TRUE(dst.ok());
  cudasim::PauseEngines();
  // Back to the cache, its copy still queued.
  const std::optional<CopyTicket> ticket =
      CopyFromAReleasedStagingBlock(**gpu, dst->data(), kBytes);
  ASSERT_TRUE(ticket.has_value());
  std::thread resume([] {
    std::this_thread::sleep_for(100ms);
    cudasim::ResumeEngines();
  });
  auto again = (*gpu)->AllocateStaging(kBytes);
  ASSERT_TRUE(again.ok());
  std::memset(again->data(), 'b', kBytes);  // The next owner writes.
  resume.join();
  ASSERT_TRUE((*gpu)->Wait(*ticket).ok());
  std::vector<uint8_t> back(kBytes);
  ASSERT_TRUE((*gpu)->CopyToHost(back.data(), dst->data(), kBytes).ok());
  EXPECT_EQ(back.front(), 'a');
  EXPECT_EQ(back.back(), 'a');
  EXPECT_EQ(std::count(back.begin(), back.end(), 'a'), static_cast<ptrdiff_t>(kBytes));
}

// The defect: a staging block past the cache's bound, and every block the
// cache held when trimmed, went to cudaFreeHost while copies from it were
// still queued, counting on cudaFreeHost to wait (NVIDIA documents no such
// thing). With free_sync off, the simulator ends the process on a free of
// memory a pending copy reads; the blocks are now freed after their copies.
TEST(CudaSimTest, StagingIsFreedOnlyAfterTheCopiesFromIt) {
  struct FreeSyncOff {
    FreeSyncOff() { cudasim::Disable(cudasim::Check::kFreeSync); }
    ~FreeSyncOff() { cudasim::Enable(cudasim::Check::kFreeSync); }
  } off;
  constexpr size_t kBytes = 1 << 20;
  for (const bool trim : {false, true}) {
    SCOPED_TRACE(trim ? "cached, then TrimStagingCache" : "past the cache's bound");
    auto gpu = CudaDevice::Open(
        0, CudaDeviceOptions{.staging_cache_bytes = trim ? uint64_t{64} << 20 : 0});
    ASSERT_TRUE(gpu.ok());
    auto dst = (*gpu)->Allocate(kBytes);
    ASSERT_TRUE(dst.ok());
    cudasim::PauseEngines();
    std::thread resume([] {
      std::this_thread::sleep_for(100ms);
      cudasim::ResumeEngines();
    });
    // Freed or cached, its copy still queued.
    const std::optional<CopyTicket> ticket =
        CopyFromAReleasedStagingBlock(**gpu, dst->data(), kBytes);
    ASSERT_TRUE(ticket.has_value());
    if (trim) {
      EXPECT_EQ((*gpu)->staging_cache_bytes(), kBytes);
      (*gpu)->TrimStagingCache();
    }
    resume.join();
    ASSERT_TRUE((*gpu)->Wait(*ticket).ok());
    std::vector<uint8_t> back(kBytes);
    ASSERT_TRUE((*gpu)->CopyToHost(back.data(), dst->data(), kBytes).ok());
    EXPECT_EQ(std::count(back.begin(), back.end(), 'a'), static_cast<ptrdiff_t>(kBytes));
    EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
  }
}

// The defect: one cudaMemcpyAsync per packed piece. Pieces contiguous in
// staging and in device memory go as one copy: about one per staging slot
// filled (one event record each), not one per storage.
TEST(CudaSimTest, PackedPiecesAreCoalescedIntoOneCopyPerSlot) {
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), std::vector<uint64_t>(65536, 1024));
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  const uint64_t copies = cudasim::CallCount("cudaMemcpyAsync");
  const uint64_t records = cudasim::CallCount("cudaEventRecord");
  auto w = LoadWeights(paths, *gpu);
  ASSERT_TRUE(w.ok()) << w.status();
  const uint64_t issued = cudasim::CallCount("cudaMemcpyAsync") - copies;
  const uint64_t slots = cudasim::CallCount("cudaEventRecord") - records;
  std::printf("[          ] 65,536 x 1 KiB: %llu copies for %llu slots filled\n",
              static_cast<unsigned long long>(issued), static_cast<unsigned long long>(slots));
  EXPECT_LE(issued, slots + 4);
  EXPECT_LT(slots, 64u);
  // LoadStats::copy_calls is what the runtime saw; copies counts requests.
  EXPECT_EQ(w->stats().copy_calls, issued);
  EXPECT_EQ(w->stats().copies, 65536u);
  // And the bytes are right.
  size_t checked = 0;
  for (size_t i = 0; i < model.fqns.size(); i += 4099) {
    auto host =
        LoadWeights(paths, std::make_shared<HostDevice>(), LoadOptions{.fqns = {model.fqns[i]}});
    ASSERT_TRUE(host.ok());
    EXPECT_EQ(*DigestLoadedStorage(*w, w->storage(*w->Find(model.fqns[i]))),
              *DigestLoadedStorage(*host, host->storage(*host->Find(model.fqns[i]))));
    ++checked;
  }
  EXPECT_GT(checked, 10u);
}

// Storages whose sizes are not multiples of the old 256 B arena padding, and
// mixed sizes: the arena lies as the file does (runs at file distances), so
// a filled staging slot is one cudaMemcpyAsync, and every storage is at
// least 64 B aligned (AOTInductor's constant alignment). The load's
// copy_calls stay within 1 + bytes / 1 MiB, and every byte is right.
TEST(CudaSimTest, SmallStoragesOfAnySizeAreOneCopyPerSlot) {
  std::vector<uint64_t> mixed;
  for (uint64_t i = 0; i < 20000; ++i) mixed.push_back(4 + (i * 7919) % 3000 / 4 * 4);
  struct Set {
    const char* name;
    std::vector<uint64_t> sizes;
    uint64_t alignment;
    bool one_copy_per_slot;
  };
  const Set sets[] = {
      {"65,536 x 1,000 B, 128 B file alignment", std::vector<uint64_t>(65536, 1000), 128, true},
      {"20,000 mixed sizes, 128 B file alignment", mixed, 128, true},
      // Legacy 16 B files: a storage at a file offset that is not 64 B
      // aligned from its run's first cannot keep its file distance, so a
      // slot's pieces are scattered on the device: one copy of the slot and
      // one kernel (ptd_scatter) that moves each piece.
      {"20,000 mixed sizes, 16 B file alignment", mixed, 16, true},
  };
  for (const Set& set : sets) {
    SCOPED_TRACE(set.name);
    TempDir dir;
    const TestModel model = WriteTestModel(dir.path(), set.sizes, false, set.alignment);
    const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok());
    const uint64_t memcpys = cudasim::CallCount("cudaMemcpyAsync");
    const uint64_t scatters = cudasim::CallCount("kernel:ptd_scatter");
    auto w = LoadWeights(paths, *gpu);
    ASSERT_TRUE(w.ok()) << w.status();
    const uint64_t issued = cudasim::CallCount("cudaMemcpyAsync") - memcpys;
    const uint64_t scattered = cudasim::CallCount("kernel:ptd_scatter") - scatters;
    // Files whose runs keep their distances need no scatter.
    if (set.alignment == 128) {
      EXPECT_EQ(scattered, 0u);
    } else {
      EXPECT_GT(scattered, 0u);
    }
    EXPECT_EQ(w->stats().copy_calls, issued);
    std::printf("[          ] %s: %llu copy calls (%llu scatter kernels) for %llu bytes\n",
                set.name, static_cast<unsigned long long>(issued),
                static_cast<unsigned long long>(scattered),
                static_cast<unsigned long long>(w->stats().bytes));
    if (set.one_copy_per_slot) {
      EXPECT_LE(issued, 1 + w->stats().bytes / (1 << 20));
    }
    auto host = LoadWeights(paths, std::make_shared<HostDevice>());
    ASSERT_TRUE(host.ok());
    for (size_t i = 0; i < model.fqns.size(); ++i) {
      const LoadedWeight* lw = w->Find(model.fqns[i]);
      ASSERT_NE(lw, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(lw->data) % 64, 0u) << model.fqns[i];
      if (i % 97 == 0 || i + 1 == model.fqns.size()) {
        EXPECT_EQ(*DigestLoadedStorage(*w, w->storage(*lw)),
                  *DigestLoadedStorage(*host, host->storage(*host->Find(model.fqns[i]))))
            << model.fqns[i];
      }
    }
  }
}

// A staging slot's device scratch that cannot be allocated: the load goes on
// with a copy per piece, and every byte is right.
TEST(CudaSimTest, ScatterWithoutScratchFallsBackToCopies) {
  std::vector<uint64_t> mixed;
  for (uint64_t i = 0; i < 3000; ++i) mixed.push_back(4 + (i * 7919) % 3000 / 4 * 4);
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), mixed, false, 16);
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  const uint64_t scatters = cudasim::CallCount("kernel:ptd_scatter");
  const uint64_t memcpys = cudasim::CallCount("cudaMemcpyAsync");
  // The arena is the load's first cudaMalloc; the scratch its second.
  cudasim::FailNthCall("cudaMalloc", 2, cudaErrorMemoryAllocation);
  auto w = LoadWeights(paths, *gpu);
  cudasim::ClearFaults();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(cudasim::CallCount("kernel:ptd_scatter"), scatters);
  EXPECT_GT(cudasim::CallCount("cudaMemcpyAsync") - memcpys, 16u);
  auto host = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(host.ok());
  for (size_t i = 0; i < model.fqns.size(); i += 7) {
    const std::string& fqn = model.fqns[i];
    EXPECT_EQ(*DigestLoadedWeight(*w, *w->Find(fqn)), *DigestLoadedWeight(*host, *host->Find(fqn)))
        << fqn;
  }
}

// Out of memory past the device's capacity is a clean error that leaves
// nothing allocated.
TEST(CudaSimTest, ALoadPastTheCapacityFailsCleanly) {
  SimDevices sim(1, uint64_t{8} << 20);
  ASSERT_TRUE(sim.ok());
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), std::vector<uint64_t>(12, 1 << 20));
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok());
  auto w = LoadWeights({.ptd = model.ptd, .manifest = model.manifest}, *gpu);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("out of memory"));
  EXPECT_EQ((*gpu)->stats().live_allocations, 0u);
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
}

}  // namespace
}  // namespace ptd
