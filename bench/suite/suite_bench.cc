// ptd_suite_bench: the load-latency suite (issue 11), ours and the ceilings
// in one run. scripts/bench.sh runs it (and ptd_upstream_bench) and turns
// the JSON into bench/results/<machine>.md.
//
// Per model set (bench/suite/model_sets.h), in this order:
//   Ceiling/memcpy/<set>      memcpy of data_bytes between two pre-faulted
//                             buffers (reused memory: no page faults).
//   Ceiling/pread_warm/<set>  pread of the file's segment region, 4 MiB per
//                             call, one thread, from a warm page cache into a
//                             freshly allocated buffer (first-touch faults
//                             included, as for the loader).
//   Ceiling/pread_warm_reused/<set>  the same into a pre-faulted buffer
//                             (informational: the fault-free read).
//   Ceiling/pread_populated/<set>  the same into fresh memory from
//                             HostDevice::AllocateMany: 2 MiB-aligned, THP
//                             where the kernel allows, pre-faulted
//                             (MADV_POPULATE_WRITE); the allocation and the
//                             population are timed (counter populate_ms), so
//                             the gap to pread_warm is what faults cost.
//   Ceiling/read_cold/<set>   as pread_warm, right after the file's pages were
//                             dropped: the cold read of the file.
//   Loader/host_warm/<set>    LoadWeights(paths, HostDevice) (LoadOptions::io
//                             kAuto, the default): open, verify,
//                             plan, allocate (fresh memory), read; warm cache.
//   Loader/host_warm_thp/<set> as host_warm with HugePages::kOn: fresh
//                             memory in transparent huge pages wherever THP
//                             is on, to show in the same run what the
//                             default's choice (kAuto) gains or loses
//                             (counter huge_page_bytes on both: the bytes
//                             advised for huge pages). Repetitions in one
//                             process reuse memory just freed: a one-shot
//                             process may fare otherwise (host_device.h).
//   Loader/host_mapped/<set>  as host_warm with LoadOptions::map_file: the
//                             storages are private mappings of the file,
//                             populated from the warm page cache (counter
//                             map_ms), not reads into fresh memory.
//   Loader/host_cold/<set>    the same as host_warm after dropping the
//                             file's pages.
// Then Verify/<N>: WeightBundle::Open (pread) of N 64-byte weights, warm,
// with its parts timed separately (container, manifest, resolve), and the
// minor page faults of the timed open (counter minflt). With glibc's
// defaults a repetition may find its memory returned to the kernel by the
// last one (glibc trims a freed heap top over its dynamic threshold, and
// maps chunks over another): at 100,000 weights that varies from 0 to 8,800
// faults between builds and runs, more than the work it measures changes.
// Last, VerifyKeptHeap/<N>: the same after mallopt() told glibc to keep
// freed memory (no trimming, no mmap under 32 MiB), as tcmalloc and jemalloc
// do by default: repetitions reuse warm memory, and the figure is the
// verification's own work. Registered last: mallopt is process-wide.
//
// Every case runs --reps timed repetitions (manual time: the page-cache
// warm-up or drop before a repetition and the free after it are not timed).
// Counters: p50_ms, p90_ms, GBps (bytes / p50), bytes, and for the loader
// the p50 of each phase (verify/plan/alloc/read/first_weight ms), the peak
// host staging bytes seen during a load, and for cold cases the fraction of
// the file still resident after the drop (mincore).
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/suite/model_sets.h"
#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/manifest.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_set.h"

namespace ptd::bench {
namespace {

constexpr uint64_t kChunk = uint64_t{4} << 20;
constexpr double kNotDropped = 0.05;  // Resident fraction above which a drop failed.

using Clock = std::chrono::steady_clock;

// Minor page faults of this process so far (first touches of fresh memory).
long MinorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Records per-repetition seconds and turns them into counters.
struct Samples {
  std::vector<double> s;
  double max_resident = 0;  // Cold cases: worst fraction left after a drop.
  void Add(benchmark::State& state, double seconds) {
    s.push_back(seconds);
    state.SetIterationTime(seconds);
  }
  void Finish(benchmark::State& state, uint64_t bytes, bool cold) const {
    const double p50 = Percentile(s, 50);
    state.counters["p50_ms"] = p50 * 1e3;
    state.counters["p90_ms"] = Percentile(s, 90) * 1e3;
    state.counters["GBps"] = p50 > 0 ? static_cast<double>(bytes) / p50 / 1e9 : 0;
    state.counters["bytes"] = static_cast<double>(bytes);
    state.counters["reps"] = static_cast<double>(s.size());
    if (cold) {
      state.counters["resident_after_drop"] = max_resident;
      if (max_resident > kNotDropped) {
        state.SetLabel(absl::StrCat("NOT COLD: ", static_cast<int>(max_resident * 100),
                                    "% of the file stayed resident after POSIX_FADV_DONTNEED"));
      }
    }
  }
};

void PreadAll(int fd, uint8_t* dst, uint64_t len, uint64_t offset) {
  for (uint64_t done = 0; done < len;) {
    const size_t want = static_cast<size_t>(std::min(kChunk, len - done));
    const ssize_t n = ::pread(fd, dst + done, want, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    Check(n > 0, "short pread");
    done += static_cast<uint64_t>(n);
  }
}

// A fresh, uninitialized, page-aligned buffer: what the ceilings read into.
// Page-aligned as the loader's large blocks are (malloc's 16-byte offset
// makes the kernel's copy into it several times slower on some CPUs, which
// would flatter every ratio to these ceilings).
using Buffer = std::unique_ptr<uint8_t, decltype(&std::free)>;
Buffer AlignedBuffer(uint64_t n) {
  constexpr uint64_t kPage = 4096;
  const uint64_t bytes = (n + kPage) / kPage * kPage;
  Buffer b(static_cast<uint8_t*>(std::aligned_alloc(kPage, static_cast<size_t>(bytes))),
           &std::free);
  Check(b != nullptr, absl::StrCat("aligned_alloc of ", bytes, " bytes"));
  return b;
}

void Prepare(const ModelSet& m, bool cold, Samples* samples) {
  if (cold) {
    samples->max_resident = std::max(samples->max_resident, DropPageCache(m.ptd));
  } else {
    WarmPageCache(m.ptd);
  }
}

void BM_Memcpy(benchmark::State& state, const ModelSet& m) {
  Buffer src = AlignedBuffer(m.data_bytes);
  Buffer dst = AlignedBuffer(m.data_bytes);
  std::memset(src.get(), 1, m.data_bytes);
  std::memset(dst.get(), 2, m.data_bytes);
  Samples samples;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), m.data_bytes);
    benchmark::ClobberMemory();
    samples.Add(state, Since(t0));
  }
  samples.Finish(state, m.data_bytes, false);
}

void BM_ReadFile(benchmark::State& state, const ModelSet& m, bool cold) {
  const int fd = ::open(m.ptd.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "open " + m.ptd);
  const uint64_t len = m.file_bytes - m.data_begin;
  Samples samples;
  for (auto _ : state) {
    Prepare(m, cold, &samples);
    const auto t0 = Clock::now();
    Buffer buf = AlignedBuffer(len);  // Fresh: faults included.
    PreadAll(fd, buf.get(), len, m.data_begin);
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
    samples.Add(state, Since(t0));
  }
  ::close(fd);
  samples.Finish(state, len, cold);
}

void BM_Loader(benchmark::State& state, const ModelSet& m, bool cold, bool mapped,
               HugePages huge_pages, IoMode io) {
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest, .use_mmap = false};
  auto device = std::make_shared<HostDevice>(HostMemoryOptions{.huge_pages = huge_pages});
  Samples samples;
  std::vector<double> verify, plan, map, alloc, read, finish, unaccounted, first;
  uint64_t staging_peak = 0, bytes = 0, storages = 0, reads = 0, mapped_storages = 0;
  uint64_t huge_page_bytes = 0;
  LoadOptions options;
  options.map_file = mapped;
  options.io = io;
  uint64_t direct_bytes = 0, buffered_bytes = 0;
  double resident_after = 0;
  options.progress = [&](uint64_t, uint64_t) {
    staging_peak = std::max(staging_peak, device->stats().live_staging_bytes);
    return true;
  };
  for (auto _ : state) {
    Prepare(m, cold, &samples);
    const uint64_t huge_before = device->stats().huge_page_bytes;
    const auto t0 = Clock::now();
    auto w = LoadWeights(paths, device, options);
    const double s = Since(t0);
    Check(w.ok(), "LoadWeights " + m.ptd + ": " + w.status().ToString());
    samples.Add(state, s);
    const LoadTimings& t = w->timings();
    verify.push_back(t.verify_s);
    plan.push_back(t.plan_s);
    map.push_back(t.map_s);
    alloc.push_back(t.allocate_s);
    read.push_back(t.read_s);
    finish.push_back(t.finish_s);
    unaccounted.push_back(s - t.total_s);
    first.push_back(t.first_weight_s);
    bytes = w->stats().bytes;
    storages = w->stats().storages;
    reads = w->stats().reads;
    mapped_storages = w->stats().mapped;
    huge_page_bytes = device->stats().huge_page_bytes - huge_before;
    direct_bytes = w->stats().io.direct_bytes;
    buffered_bytes = w->stats().io.buffered_bytes;
    if (cold) resident_after = std::max(resident_after, ResidentFraction(m.ptd));
    // The unload (w going out of scope) is not timed.
  }
  // Which engines read the bytes, and what of the file the page cache held
  // after a cold load (the hygiene of LoadOptions::io).
  state.counters["direct_bytes"] = static_cast<double>(direct_bytes);
  state.counters["buffered_bytes"] = static_cast<double>(buffered_bytes);
  if (cold) state.counters["resident_after_load"] = resident_after;
  samples.Finish(state, bytes, cold);
  state.counters["verify_ms"] = Percentile(verify, 50) * 1e3;
  state.counters["plan_ms"] = Percentile(plan, 50) * 1e3;
  if (mapped) {
    state.counters["map_ms"] = Percentile(map, 50) * 1e3;
    state.counters["mapped"] = static_cast<double>(mapped_storages);
  }
  state.counters["alloc_ms"] = Percentile(alloc, 50) * 1e3;
  state.counters["read_ms"] = Percentile(read, 50) * 1e3;
  state.counters["finish_ms"] = Percentile(finish, 50) * 1e3;
  // LoadWeights' return after its own total: the verified bundle is freed.
  state.counters["free_ms"] = Percentile(unaccounted, 50) * 1e3;
  state.counters["first_weight_ms"] = Percentile(first, 50) * 1e3;
  state.counters["staging_peak_bytes"] = static_cast<double>(staging_peak);
  state.counters["storages"] = static_cast<double>(storages);
  state.counters["reads"] = static_cast<double>(reads);
  // The last repetition's: bytes of its block advised for huge pages.
  state.counters["huge_page_bytes"] = static_cast<double>(huge_page_bytes);
}

// The cold ceiling: O_DIRECT reads of the segment region right after its
// pages were dropped, by `streams` threads over equal parts of it, each
// with `depth` 4 MiB requests in flight (threads of its own), into reused,
// page-aligned buffers (no faults: the disk's speed). Counter
// requests_in_flight = streams x depth.
void BM_DirectCold(benchmark::State& state, const ModelSet& m, int streams, int depth) {
  const int fd = ::open(m.ptd.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    state.SkipWithError(("O_DIRECT refused: " + m.ptd).c_str());
    return;
  }
  const uint64_t begin = m.data_begin / 4096 * 4096;
  const uint64_t len = (m.file_bytes - begin + 4095) / 4096 * 4096;
  const int workers = streams * depth;
  std::vector<Buffer> bufs;
  for (int i = 0; i < workers; ++i) {
    bufs.push_back(AlignedBuffer(kChunk));
    std::memset(bufs.back().get(), 0, kChunk);
  }
  Samples samples;
  for (auto _ : state) {
    Prepare(m, true, &samples);
    const auto t0 = Clock::now();
    // Stream s reads requests s, s + streams, ... of its part in order; its
    // `depth` threads take the part's requests in turn.
    const uint64_t part = (len / streams + kChunk - 1) / kChunk * kChunk;
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        const int s = w / depth;
        const uint64_t lo = begin + s * part;
        const uint64_t hi = std::min(begin + len, lo + part);
        for (uint64_t at = lo + (w % depth) * kChunk; at < hi; at += depth * kChunk) {
          const size_t n = static_cast<size_t>(std::min(kChunk, hi - at));
          const ssize_t got =
              ::pread(fd, bufs[w].get(), (n + 4095) / 4096 * 4096, static_cast<off_t>(at));
          Check(got >= 0, "O_DIRECT pread");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    samples.Add(state, Since(t0));
  }
  ::close(fd);
  samples.Finish(state, m.file_bytes - m.data_begin, true);
  state.counters["requests_in_flight"] = workers;
}

// The timed figure is WeightBundle::Open. Its parts are then timed once more
// each, separately (untimed by the figure), to name where the time goes:
// Container::Open of the .ptd, ParseManifest, WeightSet::Open (resolution:
// X*, G*); "bundle" is the total minus those three.
void BM_Verify(benchmark::State& state, const ModelSet& m, bool keep_heap) {
  if (keep_heap) {
    // Once, and for the rest of the process (these run last). 32 MiB is
    // the most M_MMAP_THRESHOLD takes on 64-bit glibc.
    static const bool kept =
        ::mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
    Check(kept, "mallopt");
  }
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest, .use_mmap = false};
  Samples samples;
  std::vector<double> container, manifest, resolve, faults;
  for (auto _ : state) {
    WarmPageCache(m.ptd);
    WarmPageCache(m.manifest);
    const long f0 = MinorFaults();
    auto t0 = Clock::now();
    auto b = WeightBundle::Open(paths);
    const double s = Since(t0);
    faults.push_back(static_cast<double>(MinorFaults() - f0));
    Check(b.ok(), "WeightBundle::Open " + m.ptd + ": " + b.status().ToString());
    samples.Add(state, s);

    t0 = Clock::now();
    auto src = OpenPreadFile(m.ptd);
    Check(src.ok(), m.ptd);
    auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
    Check(c.ok(), "Container::Open");
    container.push_back(Since(t0));
    t0 = Clock::now();
    auto msrc = OpenPreadFile(m.manifest);
    Check(msrc.ok(), m.manifest);
    std::vector<uint8_t> bytes((*msrc)->size());
    Check((*msrc)->ReadAt(0, absl::MakeSpan(bytes)).ok(), m.manifest);
    auto man = ParseManifest(bytes);
    Check(man.ok(), "ParseManifest");
    manifest.push_back(Since(t0));
    t0 = Clock::now();
    const SourcedManifest in[] = {{"manifest", *std::move(man)}};
    auto ws = WeightSet::Open(**c, in);
    Check(ws.ok(), "WeightSet::Open");
    resolve.push_back(Since(t0));
  }
  samples.Finish(state, m.file_bytes, false);
  const double p50 = Percentile(samples.s, 50);
  state.counters["weights"] = static_cast<double>(m.weights);
  state.counters["ns_per_weight"] = p50 * 1e9 / static_cast<double>(m.weights);
  state.counters["container_ms"] = Percentile(container, 50) * 1e3;
  state.counters["manifest_ms"] = Percentile(manifest, 50) * 1e3;
  state.counters["resolve_ms"] = Percentile(resolve, 50) * 1e3;
  // Of the timed Open: first touches of fresh memory, a cost that grows
  // with the manifest's and FlatBuffer's sizes, not with instructions.
  state.counters["minflt"] = Percentile(faults, 50);
}

// Into reused memory: the same reads without first-touch faults, to show
// what the fresh-memory ceiling pays for them.
void BM_ReadFilePopulated(benchmark::State& state, const ModelSet& m) {
  const int fd = ::open(m.ptd.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "open " + m.ptd);
  const uint64_t len = m.file_bytes - m.data_begin;
  HostDevice device(HostMemoryOptions{.populate = Populate::kOnAllocate});
  Samples samples;
  std::vector<double> populate;
  for (auto _ : state) {
    Prepare(m, false, &samples);
    const auto t0 = Clock::now();
    auto bufs = device.AllocateMany({static_cast<size_t>(len)});
    Check(bufs.ok(), "AllocateMany: " + bufs.status().ToString());
    populate.push_back(Since(t0));
    PreadAll(fd, static_cast<uint8_t*>((*bufs)[0].data()), len, m.data_begin);
    benchmark::ClobberMemory();
    samples.Add(state, Since(t0));
  }
  ::close(fd);
  samples.Finish(state, len, false);
  std::sort(populate.begin(), populate.end());
  if (!populate.empty()) state.counters["populate_ms"] = populate[populate.size() / 2] * 1e3;
  // Whether the blocks were advised for huge pages (the last one's).
  state.counters["thp"] = device.stats().huge_page_bytes > 0 ? 1 : 0;
}

void BM_ReadFileReused(benchmark::State& state, const ModelSet& m) {
  const int fd = ::open(m.ptd.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "open " + m.ptd);
  const uint64_t len = m.file_bytes - m.data_begin;
  Buffer buf = AlignedBuffer(len);
  std::memset(buf.get(), 3, len);
  Samples samples;
  for (auto _ : state) {
    WarmPageCache(m.ptd);
    const auto t0 = Clock::now();
    PreadAll(fd, buf.get(), len, m.data_begin);
    benchmark::ClobberMemory();
    samples.Add(state, Since(t0));
  }
  ::close(fd);
  samples.Finish(state, len, false);
}

benchmark::internal::Benchmark* Tune(benchmark::internal::Benchmark* b, int reps) {
  return b->Iterations(reps)->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace ptd::bench

int main(int argc, char** argv) {
  using namespace ptd::bench;  // NOLINT: main only.
  const SuiteFlags flags = ParseSuiteFlags(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Static: the benchmarks keep references until they have run.
  static const std::vector<ModelSet> sets = LoadSets(flags);
  static std::vector<ModelSet> verify_sets;
  for (uint64_t n : flags.verify_weights) verify_sets.push_back(VerifySet(flags, n));
  benchmark::AddCustomContext("data_dir", flags.data_dir);
  benchmark::AddCustomContext("reps", std::to_string(flags.reps));
  for (const ModelSet& m : sets) {
    benchmark::AddCustomContext(
        "set." + m.name, absl::StrCat("storages=", m.storages, " storage_bytes=", m.storage_bytes,
                                      " keys=", m.keys, " weights=", m.weights,
                                      " data_bytes=", m.data_bytes, " file_bytes=", m.file_bytes));
    benchmark::AddCustomContext("desc." + m.name, m.description);
    const int r = flags.reps;
    Tune(benchmark::RegisterBenchmark(("Ceiling/memcpy/" + m.name).c_str(), BM_Memcpy, m), r);
    Tune(benchmark::RegisterBenchmark(("Ceiling/pread_warm/" + m.name).c_str(), BM_ReadFile, m,
                                      false),
         r);
    Tune(benchmark::RegisterBenchmark(("Ceiling/pread_warm_reused/" + m.name).c_str(),
                                      BM_ReadFileReused, m),
         r);
    Tune(benchmark::RegisterBenchmark(("Ceiling/pread_populated/" + m.name).c_str(),
                                      BM_ReadFilePopulated, m),
         r);
    if (flags.cold) {
      Tune(benchmark::RegisterBenchmark(("Ceiling/read_cold/" + m.name).c_str(), BM_ReadFile, m,
                                        true),
           r);
    }
    Tune(benchmark::RegisterBenchmark(("Loader/host_warm/" + m.name).c_str(), BM_Loader, m, false,
                                      false, ptd::HugePages::kAuto, ptd::IoMode::kAuto),
         r);
    Tune(benchmark::RegisterBenchmark(("Loader/host_warm_thp/" + m.name).c_str(), BM_Loader, m,
                                      false, false, ptd::HugePages::kOn, ptd::IoMode::kAuto),
         r);
    Tune(benchmark::RegisterBenchmark(("Loader/host_mapped/" + m.name).c_str(), BM_Loader, m, false,
                                      true, ptd::HugePages::kAuto, ptd::IoMode::kAuto),
         r);
    if (flags.cold) {
      Tune(benchmark::RegisterBenchmark(("Loader/host_cold/" + m.name).c_str(), BM_Loader, m, true,
                                        false, ptd::HugePages::kAuto, ptd::IoMode::kAuto),
           r);
    }
    // The cold-start page (issue 42): each read engine cold and warm, the
    // cold ceiling at three queue depths, alternating with the loads.
    if (flags.cold && flags.io) {
      for (const int depth : {1, 2, 4}) {
        Tune(benchmark::RegisterBenchmark(
                 absl::StrCat("Ceiling/direct_cold/", m.name, "/qd", 4 * depth).c_str(),
                 BM_DirectCold, m, 4, depth),
             r);
      }
      for (const ptd::IoMode io :
           {ptd::IoMode::kBuffered, ptd::IoMode::kDirect, ptd::IoMode::kAuto}) {
        for (const bool cold : {true, false}) {
          const std::string name = absl::StrCat("ColdStart/", std::string(ptd::IoModeName(io)),
                                                cold ? "_cold/" : "_warm/", m.name);
          Tune(benchmark::RegisterBenchmark(name.c_str(), BM_Loader, m, cold, false,
                                            ptd::HugePages::kAuto, io),
               r);
        }
      }
    }
  }
  for (const bool keep_heap : {false, true}) {
    for (const ModelSet& m : verify_sets) {
      const std::string name =
          (keep_heap ? "VerifyKeptHeap/" : "Verify/") + std::to_string(m.weights);
      Tune(benchmark::RegisterBenchmark(name.c_str(), BM_Verify, m, keep_heap), flags.reps);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
