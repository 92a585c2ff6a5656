// ptd_cuda_bench: host-to-device weight upload on a CUDA GPU. Built only with
// CUDA (PTD_WITH_CUDA); every benchmark skips with "no CUDA device" on a
// machine without one.
//
//   BM_Ceiling_PinnedH2D              cudaMemcpyAsync from pinned memory, 16 MiB
//                                     chunks on 2 streams into one buffer: the bus.
//   BM_Upstream_CudaMallocPerStorage  what upstream does per storage: cudaMalloc,
//                                     then a synchronous cudaMemcpy from pageable
//                                     memory.
//   BM_CudaDevice_CopyPipeline        CudaDevice: one arena (AllocateMany), a ring
//                                     of 4 x 16 MiB pinned staging slots, a memcpy
//                                     from pageable memory into the slot (standing
//                                     in for pread), CopyToDeviceAsync, Wait before
//                                     a slot is refilled.
//
// Data: PTD_CUDA_BENCH_BYTES bytes (default 256 MiB; scripts/gpu-check.sh uses
// 4 GiB) in PTD_CUDA_BENCH_STORAGES storages (default 1024), from a pageable,
// pre-faulted host buffer. This file calls the CUDA runtime directly for the
// ceiling and the upstream baseline; the library itself keeps CUDA in
// runtime/cuda.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "ptd/cuda_device.h"

namespace ptd {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSlotBytes = 16 * kMiB;
constexpr int kSlots = 4;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 0) : fallback;
}

struct Workload {
  std::vector<size_t> sizes;
  std::vector<size_t> offsets;  // In `host`.
  size_t total = 0;
  std::unique_ptr<uint8_t[]> host;  // Pageable, every page touched.
};

const Workload& GetWorkload() {
  static const Workload* workload = [] {
    auto* w = new Workload;
    const uint64_t bytes = EnvOr("PTD_CUDA_BENCH_BYTES", 256 * kMiB);
    const uint64_t storages = std::max<uint64_t>(EnvOr("PTD_CUDA_BENCH_STORAGES", 1024), 1);
    for (uint64_t i = 0; i < storages; ++i) {
      const size_t size = static_cast<size_t>(bytes / storages + (i < bytes % storages ? 1 : 0));
      w->offsets.push_back(w->total);
      w->sizes.push_back(size);
      w->total += size;
    }
    w->host.reset(new uint8_t[std::max<size_t>(w->total, 1)]);
    for (size_t i = 0; i < w->total; ++i) w->host[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    return w;
  }();
  return *workload;
}

bool NoGpu(benchmark::State& state) {
  if (CudaDeviceCount() > 0) return false;
  state.SkipWithError("no CUDA device");
  return true;
}

// Stops the benchmark on a CUDA error instead of measuring garbage.
bool Failed(benchmark::State& state, cudaError_t error, const char* what) {
  if (error == cudaSuccess) return false;
  state.SkipWithError((std::string(what) + ": " + cudaGetErrorString(error)).c_str());
  return true;
}

void BM_Ceiling_PinnedH2D(benchmark::State& state) {
  if (NoGpu(state)) return;
  const Workload& w = GetWorkload();
  void* pinned = nullptr;
  void* device = nullptr;
  cudaStream_t streams[2] = {};
  if (Failed(state, cudaHostAlloc(&pinned, kSlots * kSlotBytes, cudaHostAllocDefault),
             "cudaHostAlloc") ||
      Failed(state, cudaMalloc(&device, w.total), "cudaMalloc") ||
      Failed(state, cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking), "stream") ||
      Failed(state, cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking), "stream")) {
    return;
  }
  std::memset(pinned, 1, kSlots * kSlotBytes);
  for (auto _ : state) {
    size_t chunk = 0;
    for (size_t done = 0; done < w.total; done += kSlotBytes, ++chunk) {
      const size_t n = std::min(kSlotBytes, w.total - done);
      (void)cudaMemcpyAsync(static_cast<uint8_t*>(device) + done,
                            static_cast<uint8_t*>(pinned) + (chunk % kSlots) * kSlotBytes, n,
                            cudaMemcpyHostToDevice, streams[chunk % 2]);
    }
    if (Failed(state, cudaDeviceSynchronize(), "cudaDeviceSynchronize")) break;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.total));
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
  cudaFree(device);
  cudaFreeHost(pinned);
}
BENCHMARK(BM_Ceiling_PinnedH2D)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Upstream_CudaMallocPerStorage(benchmark::State& state) {
  if (NoGpu(state)) return;
  const Workload& w = GetWorkload();
  std::vector<void*> blocks(w.sizes.size(), nullptr);
  for (auto _ : state) {
    for (size_t i = 0; i < w.sizes.size(); ++i) {
      if (Failed(state, cudaMalloc(&blocks[i], w.sizes[i]), "cudaMalloc") ||
          Failed(state, cudaMemcpy(blocks[i], w.host.get() + w.offsets[i], w.sizes[i],
                                   cudaMemcpyHostToDevice), "cudaMemcpy")) {
        break;
      }
    }
    state.PauseTiming();  // Upstream frees at unload, not at load.
    for (void*& p : blocks) {
      cudaFree(p);
      p = nullptr;
    }
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.total));
  state.counters["storages"] = static_cast<double>(w.sizes.size());
}
BENCHMARK(BM_Upstream_CudaMallocPerStorage)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_CudaDevice_CopyPipeline(benchmark::State& state) {
  if (NoGpu(state)) return;
  const Workload& w = GetWorkload();
  auto device = OpenCudaDevice(0);
  if (!device.ok()) {
    state.SkipWithError(std::string(device.status().message()).c_str());
    return;
  }
  CudaDevice& gpu = **device;
  for (auto _ : state) {
    auto arena = gpu.AllocateMany(w.sizes);
    if (!arena.ok()) {
      state.SkipWithError(std::string(arena.status().message()).c_str());
      break;
    }
    std::vector<HostBuffer> ring;
    std::vector<CopyTicket> in_flight(kSlots);
    std::vector<bool> busy(kSlots, false);
    absl::Status status;
    for (int i = 0; i < kSlots && status.ok(); ++i) {
      auto staging = gpu.AllocateStaging(kSlotBytes);  // Cached after the first load.
      if (staging.ok()) ring.push_back(*std::move(staging));
      status = staging.status();
    }
    int slot = 0;
    for (size_t i = 0; i < w.sizes.size() && status.ok(); ++i) {
      for (size_t done = 0; done < w.sizes[i] && status.ok(); done += kSlotBytes) {
        const size_t n = std::min(kSlotBytes, w.sizes[i] - done);
        if (busy[slot]) status = gpu.Wait(in_flight[slot]);
        if (!status.ok()) break;
        std::memcpy(ring[slot].data(), w.host.get() + w.offsets[i] + done, n);  // "pread"
        auto ticket = gpu.CopyToDeviceAsync(static_cast<uint8_t*>((*arena)[i].data()) + done,
                                            ring[slot].data(), n);
        if (!ticket.ok()) {
          status = ticket.status();
          break;
        }
        in_flight[slot] = *ticket;
        busy[slot] = true;
        slot = (slot + 1) % kSlots;
      }
    }
    if (status.ok()) status = gpu.Synchronize();
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      break;
    }
    state.PauseTiming();  // Unload.
    ring.clear();
    arena->clear();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.total));
  const DeviceStats stats = gpu.stats();
  state.counters["cudaMalloc"] = static_cast<double>(stats.allocations);
  state.counters["cudaHostAlloc"] = static_cast<double>(stats.staging_allocations);
}
BENCHMARK(BM_CudaDevice_CopyPipeline)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptd
