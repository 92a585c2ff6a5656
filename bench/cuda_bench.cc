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
// Data: PTD_CUDA_BENCH_BYTES bytes (default 256 MiB; gpu-bundle/run.sh uses
// 1 GiB, then 4 GiB) in PTD_CUDA_BENCH_STORAGES storages (default 1024), from
// a pageable, pre-faulted host buffer. This file calls the CUDA runtime
// directly for the ceiling and the upstream baseline; the library itself keeps
// CUDA in runtime/cuda.
//
// The loader from a file (warm page cache), on a .ptd + manifest of
// PTD_CUDA_LOADER_BYTES bytes (default 4 GiB) in PTD_CUDA_LOADER_STORAGES
// storages (default 1024), written once with CudaWeightWriter and cached in
// PTD_CUDA_BENCH_DIR (default $TMPDIR or /tmp) across runs:
//
//   BM_LoaderCeiling_PinnedH2D        cudaMemcpyAsync of the data bytes from a ring
//                                     of 4 x 16 MiB pinned slots on 2 streams.
//   BM_LoaderCeiling_PreadPinned      the file's data region read with pread in
//                                     16 MiB pieces into pinned memory by
//                                     PTD_CUDA_LOADER_THREADS (default 4) threads.
//   BM_LoaderUpstream_MallocPreadCudaMemcpy
//                                     upstream's way per storage: a pageable heap
//                                     buffer read into (FileDataLoader), cudaMalloc,
//                                     synchronous cudaMemcpy, free.
//   BM_Loader_Cuda                    LoadWeights(paths, CudaDevice): verification,
//                                     plan, one arena, reads through the pinned
//                                     staging ring, copies and waits; as many
//                                     reader threads as the pread ceiling.
// Counters of BM_Loader_Cuda: GBps, vs_ceiling (over the lower of the two
// ceilings, target >= 0.85), vs_upstream (target >= 4), meets_targets (1 or
// 0), p50_ms / p90_ms of one load and first_weight_p50_ms (time to the first
// complete storage) over the iterations. Freeing a load's memory is outside the timed region
// everywhere.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/bench_util.h"
#include "ptd/container.h"
#include "ptd/cuda_device.h"
#include "ptd/loader.h"
#include "ptd/weight_writer.h"

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
          Failed(state,
                 cudaMemcpy(blocks[i], w.host.get() + w.offsets[i], w.sizes[i],
                            cudaMemcpyHostToDevice),
                 "cudaMemcpy")) {
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
  auto device = CudaDevice::Open(0);
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

// ---- The loader from a file ----

struct LoaderFile {
  std::string ptd, manifest;
  uint64_t data_bytes = 0;                // Sum of the storages.
  uint64_t data_begin = 0, data_end = 0;  // The file's segment region.
  std::vector<uint64_t> offsets, sizes;   // Each storage, in the file.
};

// Writes the model unless a complete one (same sizes) is cached; every
// storage has distinct bytes, so the writer deduplicates nothing.
const LoaderFile* GetLoaderFile(std::string* error) {
  static std::optional<LoaderFile> file;
  static std::string failed;
  if (file) return &*file;
  if (!failed.empty()) {
    *error = failed;
    return nullptr;
  }
  const uint64_t bytes = EnvOr("PTD_CUDA_LOADER_BYTES", uint64_t{4} << 30);
  const uint64_t count = std::max<uint64_t>(EnvOr("PTD_CUDA_LOADER_STORAGES", 1024), 1);
  const uint64_t each = std::max<uint64_t>(bytes / count / 4 * 4, 4);
  const char* dir_env = std::getenv("PTD_CUDA_BENCH_DIR");
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = dir_env != nullptr && *dir_env != '\0' ? dir_env
                          : tmp != nullptr && *tmp != '\0'       ? tmp
                                                                 : "/tmp";
  LoaderFile f;
  const std::string stem = absl::StrCat(dir, "/ptd_cuda_loader_", count, "x", each);
  f.ptd = stem + ".ptd";
  f.manifest = stem + ".manifest";
  const auto fail = [&](const absl::Status& st) -> const LoaderFile* {
    failed = absl::StrCat("loader file ", f.ptd, ": ", st.message());
    *error = failed;
    return nullptr;
  };
  std::error_code ec;
  if (!std::filesystem::exists(f.ptd, ec) || !std::filesystem::exists(f.manifest, ec)) {
    std::filesystem::create_directories(dir, ec);
    CudaWeightWriter writer("so_blob");
    std::vector<std::vector<uint8_t>> storages(count);
    const std::vector<int64_t> shape = {static_cast<int64_t>(each / 4)};
    const std::vector<int64_t> stride = {1};
    for (uint64_t i = 0; i < count; ++i) {
      storages[i].resize(each);
      bench::FillPattern(i + 1, storages[i].data(), each);
      WeightSpec w{.fqn = absl::StrCat("model.layers.", i, ".weight"),
                   .dtype = 6,
                   .device_type = 1,
                   .value = {.storage = storages[i],
                             .sizes = shape,
                             .strides = stride,
                             .is_original_storage = true},
                   .properties = {.offset = 0, .shape = shape, .stride = stride}};
      if (const absl::Status st = writer.Add(w); !st.ok()) return fail(st);
    }
    if (const absl::Status st = writer.Write(f.ptd, f.manifest); !st.ok()) return fail(st);
  }
  // Where the storages sit (and a check that a cached file is whole).
  auto src = OpenPreadFile(f.ptd);
  if (!src.ok()) return fail(src.status());
  auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
  if (!c.ok()) return fail(c.status());
  for (const NamedDataEntry& e : (*c)->named_data()) {
    f.offsets.push_back((*c)->SegmentFileOffset(e.segment_index));
    f.sizes.push_back((*c)->SegmentSize(e).value_or(0));
    f.data_bytes += f.sizes.back();
  }
  if (f.sizes.size() != count || f.data_bytes != count * each) {
    return fail(
        absl::DataLossError(absl::StrCat("holds ", f.sizes.size(), " storages of ", f.data_bytes,
                                         " bytes, expected ", count, " x ", each, "; delete it")));
  }
  f.data_begin = (*c)->header().segment_base_offset;
  f.data_end = f.data_begin + (*c)->header().segment_data_size;
  file.emplace(std::move(f));
  return &*file;
}

// The file (or nothing, with the benchmark skipped) and a warm page cache.
const LoaderFile* LoaderFileFor(benchmark::State& state) {
  std::string error;
  const LoaderFile* f = GetLoaderFile(&error);
  if (f == nullptr) {
    state.SkipWithError(error.c_str());
    return nullptr;
  }
  bench::WarmPageCache(f->ptd);
  return f;
}

size_t LoaderThreads() {
  return static_cast<size_t>(std::max<uint64_t>(EnvOr("PTD_CUDA_LOADER_THREADS", 4), 1));
}

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
// Bytes per second over the timed parts of the iterations.
double Rate(uint64_t bytes, int64_t iterations, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) * static_cast<double>(iterations) / seconds : 0;
}

// Rates of the same run, for the ratios (benchmarks run in file order).
double g_h2d_rate = 0, g_pread_rate = 0, g_upstream_rate = 0;

void BM_LoaderCeiling_PinnedH2D(benchmark::State& state) {
  if (NoGpu(state)) return;
  const LoaderFile* f = LoaderFileFor(state);
  if (f == nullptr) return;
  void* pinned = nullptr;
  void* device = nullptr;
  cudaStream_t streams[2] = {};
  if (Failed(state, cudaHostAlloc(&pinned, kSlots * kSlotBytes, cudaHostAllocDefault),
             "cudaHostAlloc") ||
      Failed(state, cudaMalloc(&device, f->data_bytes), "cudaMalloc") ||
      Failed(state, cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking), "stream") ||
      Failed(state, cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking), "stream")) {
    cudaFree(device);
    cudaFreeHost(pinned);
    return;
  }
  std::memset(pinned, 1, kSlots * kSlotBytes);
  bool ok = true;
  double timed_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    size_t chunk = 0;
    for (size_t done = 0; done < f->data_bytes; done += kSlotBytes, ++chunk) {
      const size_t n = std::min<size_t>(kSlotBytes, f->data_bytes - done);
      (void)cudaMemcpyAsync(static_cast<uint8_t*>(device) + done,
                            static_cast<uint8_t*>(pinned) + (chunk % kSlots) * kSlotBytes, n,
                            cudaMemcpyHostToDevice, streams[chunk % 2]);
    }
    if (Failed(state, cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
      ok = false;
      break;
    }
    timed_s += Seconds(Clock::now() - t0);
  }
  if (ok) g_h2d_rate = Rate(f->data_bytes, state.iterations(), timed_s);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f->data_bytes));
  state.counters["GBps"] = g_h2d_rate / 1e9;
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
  cudaFree(device);
  cudaFreeHost(pinned);
}
BENCHMARK(BM_LoaderCeiling_PinnedH2D)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LoaderCeiling_PreadPinned(benchmark::State& state) {
  if (NoGpu(state)) return;
  const LoaderFile* f = LoaderFileFor(state);
  if (f == nullptr) return;
  const size_t threads = LoaderThreads();
  void* pinned = nullptr;
  if (Failed(state, cudaHostAlloc(&pinned, threads * kSlotBytes, cudaHostAllocDefault),
             "cudaHostAlloc")) {
    return;
  }
  const int fd = ::open(f->ptd.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    state.SkipWithError("open failed");
    cudaFreeHost(pinned);
    return;
  }
  std::atomic<bool> short_read{false};
  double timed_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::atomic<uint64_t> next{f->data_begin};
    const auto work = [&](size_t t) {
      uint8_t* slot = static_cast<uint8_t*>(pinned) + t * kSlotBytes;
      for (;;) {
        const uint64_t at = next.fetch_add(kSlotBytes);
        if (at >= f->data_end) return;
        const uint64_t n = std::min<uint64_t>(kSlotBytes, f->data_end - at);
        for (uint64_t done = 0; done < n;) {
          const ssize_t r = ::pread(fd, slot + done, n - done, static_cast<off_t>(at + done));
          if (r <= 0) {
            short_read = true;
            return;
          }
          done += static_cast<uint64_t>(r);
        }
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& t : pool) t.join();
    timed_s += Seconds(Clock::now() - t0);
  }
  ::close(fd);
  cudaFreeHost(pinned);
  if (short_read) {
    state.SkipWithError("short pread");
    return;
  }
  const uint64_t region = f->data_end - f->data_begin;
  g_pread_rate = Rate(region, state.iterations(), timed_s);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * region));
  state.counters["GBps"] = g_pread_rate / 1e9;
  state.counters["threads"] = static_cast<double>(threads);
}
BENCHMARK(BM_LoaderCeiling_PreadPinned)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LoaderUpstream_MallocPreadCudaMemcpy(benchmark::State& state) {
  if (NoGpu(state)) return;
  const LoaderFile* f = LoaderFileFor(state);
  if (f == nullptr) return;
  const int fd = ::open(f->ptd.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    state.SkipWithError("open failed");
    return;
  }
  std::vector<void*> blocks(f->sizes.size(), nullptr);
  bool ok = true;
  double timed_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < f->sizes.size() && ok; ++i) {
      // FileDataLoader::load: a fresh aligned heap buffer, pread into it.
      void* host = std::aligned_alloc(64, (f->sizes[i] + 63) / 64 * 64);
      for (uint64_t done = 0; host != nullptr && done < f->sizes[i];) {
        const ssize_t r = ::pread(fd, static_cast<uint8_t*>(host) + done, f->sizes[i] - done,
                                  static_cast<off_t>(f->offsets[i] + done));
        if (r <= 0) {
          ok = false;
          break;
        }
        done += static_cast<uint64_t>(r);
      }
      if (host == nullptr || !ok) {
        std::free(host);
        state.SkipWithError("read failed");
        ok = false;
        break;
      }
      if (Failed(state, cudaMalloc(&blocks[i], f->sizes[i]), "cudaMalloc") ||
          Failed(state, cudaMemcpy(blocks[i], host, f->sizes[i], cudaMemcpyHostToDevice),
                 "cudaMemcpy")) {
        ok = false;
      }
      std::free(host);
    }
    timed_s += Seconds(Clock::now() - t0);
    state.PauseTiming();  // Upstream frees at unload, not at load.
    for (void*& p : blocks) {
      cudaFree(p);
      p = nullptr;
    }
    state.ResumeTiming();
    if (!ok) break;
  }
  ::close(fd);
  if (!ok) return;
  g_upstream_rate = Rate(f->data_bytes, state.iterations(), timed_s);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f->data_bytes));
  state.counters["GBps"] = g_upstream_rate / 1e9;
  state.counters["storages"] = static_cast<double>(f->sizes.size());
}
BENCHMARK(BM_LoaderUpstream_MallocPreadCudaMemcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

// The q-quantile (nearest rank) of `v`; 0 when empty.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

void BM_Loader_Cuda(benchmark::State& state) {
  if (NoGpu(state)) return;
  const LoaderFile* f = LoaderFileFor(state);
  if (f == nullptr) return;
  auto device = CudaDevice::Open(0);
  if (!device.ok()) {
    state.SkipWithError(std::string(device.status().message()).c_str());
    return;
  }
  const BundlePaths paths{.ptd = f->ptd, .manifest = f->manifest};
  const LoadOptions options{.threads = LoaderThreads()};
  LoadTimings last;
  LoadStats stats;
  double timed_s = 0;
  std::vector<double> load_s, first_s;  // Per iteration: p50/p90 below.
  const uint64_t memcpy_calls_before = (*device)->memcpy_calls();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto w = LoadWeights(paths, *device, options);
    if (!w.ok()) {
      state.SkipWithError(std::string(w.status().message()).c_str());
      return;
    }
    const double dt = Seconds(Clock::now() - t0);
    timed_s += dt;
    load_s.push_back(dt);
    first_s.push_back(w->timings().first_weight_s);
    last = w->timings();
    stats = w->stats();
    std::optional<LoadedWeights> held(*std::move(w));
    state.PauseTiming();  // Unload.
    held.reset();
    state.ResumeTiming();
  }
  const double r = Rate(f->data_bytes, state.iterations(), timed_s);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f->data_bytes));
  state.counters["GBps"] = r / 1e9;
  const double ceiling =
      g_h2d_rate > 0 && g_pread_rate > 0 ? std::min(g_h2d_rate, g_pread_rate) : 0;
  if (ceiling > 0) state.counters["vs_ceiling"] = r / ceiling;
  if (g_upstream_rate > 0) state.counters["vs_upstream"] = r / g_upstream_rate;
  state.counters["meets_targets"] =
      ceiling > 0 && g_upstream_rate > 0 && r / ceiling >= 0.85 && r / g_upstream_rate >= 4 ? 1 : 0;
  state.counters["p50_ms"] = Percentile(load_s, 0.5) * 1e3;
  state.counters["p90_ms"] = Percentile(load_s, 0.9) * 1e3;
  state.counters["first_weight_p50_ms"] = Percentile(first_s, 0.5) * 1e3;
  state.counters["storages"] = static_cast<double>(stats.storages);
  state.counters["copies"] = static_cast<double>(stats.copies);
  // cudaMemcpyAsync calls a load issued (copies that follow each other in
  // source and destination go as one).
  state.counters["copy_calls"] =
      static_cast<double>((*device)->memcpy_calls() - memcpy_calls_before) /
      static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["verify_ms"] = last.verify_s * 1e3;
  state.counters["alloc_ms"] = last.allocate_s * 1e3;
  state.counters["read_ms"] = last.read_s * 1e3;
  state.counters["wait_ms"] = last.wait_s * 1e3;
  const DeviceStats ds = (*device)->stats();
  state.counters["cudaMalloc"] = static_cast<double>(ds.allocations);
  state.counters["cudaHostAlloc"] = static_cast<double>(ds.staging_allocations);
}
BENCHMARK(BM_Loader_Cuda)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptd
