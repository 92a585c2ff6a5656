// The loader (LoadWeights onto the host device) against its ceilings, on two
// synthetic models written once per process:
//
//   big:   256 storages of 4 MiB (1 GiB; PTD_BENCH_LOADER_MIB sets the total)
//   small: 65,536 storages of 1 KiB (64 MiB; PTD_BENCH_LOADER_SMALL sets the count)
//
//   BM_Ceiling/0 (big)               pread of each storage's byte range into one
//                                    freshly allocated buffer (one thread).
//   BM_Baseline_UpstreamStyle/big    upstream today: linear key search, a fresh
//                                    heap buffer per storage read into, then a
//                                    fresh destination per storage copied into.
//   BM_Loader_Host/big               LoadWeights(paths, HostDevice): verification
//                                    (container + manifest + geometry), planning,
//                                    allocation and the reads, all included.
//   BM_Ceiling/1 (small)              pread of the data region in 4 MiB calls into
//                                    one freshly allocated buffer.
//   BM_Loader_Host/small             LoadWeights as above.
//   BM_Loader_HostPreverified/*      LoadWeights(bundle) of a bundle verified once
//                                    before the loop (verification excluded).
//
// The file is read into page cache right before each timed loop
// (WarmPageCache): these are warm-cache numbers. Counters: vs_ceiling (and
// vs_upstream for the big model) are ratios (argument 0 is big, 1 small) of bytes/s to the
// benchmarks above them in the same run. Targets: big >= 0.8x ceiling and >= 1.5x upstream-style;
// small >= 0.5x ceiling.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/bench_util.h"
#include "ptd/container.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/weight_writer.h"

namespace ptd::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct LoaderModel {
  std::string dir;
  std::string ptd;
  std::string manifest;
  uint64_t data_bytes = 0;
  std::vector<std::string> keys;
  std::vector<uint64_t> offsets;  // File offset of each storage.
  std::vector<uint64_t> sizes;
  uint64_t data_begin = 0, data_end = 0;  // The segment region.
  ~LoaderModel() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

void Build(LoaderModel* m, uint64_t count, uint64_t size, const char* name) {
  CudaWeightWriter writer("so_blob");
  std::vector<uint8_t> bytes(size);
  const std::vector<int64_t> shape = {static_cast<int64_t>(size / 4)};
  const std::vector<int64_t> stride = {1};
  for (uint64_t i = 0; i < count; ++i) {
    FillPattern(i + 1, bytes.data(), bytes.size());
    WeightSpec w{
        .fqn = absl::StrCat("model.layers.", i, ".weight"),
        .dtype = 6,
        .device_type = 1,
        .value = {.storage = bytes, .sizes = shape, .strides = stride, .is_original_storage = true},
        .properties = {.offset = 0, .shape = shape, .stride = stride}};
    CheckOk(writer.Add(w), w.fqn);
    m->keys.push_back(absl::StrCat("cuda_fqn_weight:cuda:", w.fqn));
    m->data_bytes += size;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/ptd_loader_bench.XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) CheckOk(absl::UnavailableError("mkdtemp"), templ);
  m->dir = templ;
  m->ptd = absl::StrCat(templ, "/", name, ".ptd");
  m->manifest = absl::StrCat(templ, "/", name, ".manifest");
  CheckOk(writer.Write(m->ptd, m->manifest), m->ptd);
  auto src = OpenPreadFile(m->ptd);
  CheckOk(src.status(), m->ptd);
  auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
  CheckOk(c.status(), m->ptd);
  for (const std::string& k : m->keys) {
    const NamedDataEntry* e = (*c)->Find(k);
    m->offsets.push_back((*c)->SegmentFileOffset(e->segment_index));
    m->sizes.push_back(*(*c)->SegmentSize(*e));
  }
  m->data_begin = (*c)->header().segment_base_offset;
  m->data_end = m->data_begin + (*c)->header().segment_data_size;
}

const LoaderModel& Big() {
  static LoaderModel m;
  if (m.ptd.empty()) {
    const uint64_t total = EnvOr("PTD_BENCH_LOADER_MIB", 1024) * kMiB;
    Build(&m, 256, total / 256 / 4 * 4, "big");
  }
  return m;
}

const LoaderModel& Small() {
  static LoaderModel m;
  if (m.ptd.empty()) Build(&m, EnvOr("PTD_BENCH_LOADER_SMALL", 65536), 1024, "small");
  return m;
}

const LoaderModel& ModelFor(const benchmark::State& state) {
  return state.range(0) == 0 ? Big() : Small();
}

double g_ceiling_rate[2] = {0, 0};
double g_upstream_rate = 0;

void Ratios(benchmark::State& state, double rate) {
  const auto i = static_cast<size_t>(state.range(0));
  if (g_ceiling_rate[i] > 0) state.counters["vs_ceiling"] = rate / g_ceiling_rate[i];
  if (i == 0 && g_upstream_rate > 0) state.counters["vs_upstream"] = rate / g_upstream_rate;
}

void PreadAll(int fd, uint8_t* dst, uint64_t len, uint64_t offset) {
  for (uint64_t done = 0; done < len;) {
    const ssize_t n = ::pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (n <= 0) CheckOk(absl::DataLossError("short pread"), "ceiling");
    done += static_cast<uint64_t>(n);
  }
}

// Big: each storage's range; small: the data region in 4 MiB calls. Into one
// fresh buffer per iteration (page faults included, as for the loader).
void BM_Ceiling(benchmark::State& state) {
  const LoaderModel& m = ModelFor(state);
  const int fd = ::open(m.ptd.c_str(), O_RDONLY | O_CLOEXEC);
  WarmPageCache(m.ptd);
  LoopRate rate;
  for (auto _ : state) {
    std::unique_ptr<uint8_t[]> buf(new uint8_t[m.data_end - m.data_begin]);
    if (state.range(0) == 0) {
      uint64_t at = 0;
      for (size_t k = 0; k < m.keys.size(); ++k) {
        PreadAll(fd, buf.get() + at, m.sizes[k], m.offsets[k]);
        at += m.sizes[k];
      }
    } else {
      for (uint64_t off = m.data_begin; off < m.data_end;) {
        const uint64_t n = std::min(4 * kMiB, m.data_end - off);
        PreadAll(fd, buf.get() + (off - m.data_begin), n, off);
        off += n;
      }
    }
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  }
  ::close(fd);
  g_ceiling_rate[state.range(0)] = rate.BytesPerSecond(m.data_bytes, state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Ceiling)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Baseline_UpstreamStyleLoad(benchmark::State& state) {
  const LoaderModel& m = ModelFor(state);
  WarmPageCache(m.ptd);
  LoopRate rate;
  for (auto _ : state) {
    auto src = OpenPreadFile(m.ptd);
    CheckOk(src.status(), "open");
    auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
    CheckOk(c.status(), "Container::Open");
    std::vector<std::string> names;
    for (const NamedDataEntry& e : (*c)->named_data()) names.emplace_back(e.key);
    std::vector<std::unique_ptr<uint8_t[]>> dests;
    dests.reserve(m.keys.size());
    for (const std::string& key : m.keys) {
      size_t i = 0;
      while (i < names.size() && names[i] != key) ++i;
      auto bytes = (*c)->SegmentData((*c)->named_data()[i].segment_index);
      CheckOk(bytes.status(), key);
      dests.emplace_back(new uint8_t[bytes->size()]);
      std::memcpy(dests.back().get(), bytes->data(), bytes->size());
    }
    benchmark::ClobberMemory();
  }
  const double r = rate.BytesPerSecond(m.data_bytes, state.iterations());
  if (state.range(0) == 0) g_upstream_rate = r;
  if (g_ceiling_rate[state.range(0)] > 0) {
    state.counters["vs_ceiling"] = r / g_ceiling_rate[state.range(0)];
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Baseline_UpstreamStyleLoad)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Loader_Host(benchmark::State& state) {
  const LoaderModel& m = ModelFor(state);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto device = std::make_shared<HostDevice>();
  WarmPageCache(m.ptd);
  LoopRate rate;
  LoadTimings last;
  for (auto _ : state) {
    auto w = LoadWeights(paths, device);
    CheckOk(w.status(), "LoadWeights");
    benchmark::DoNotOptimize(w->weights().data());
    last = w->timings();
  }
  Ratios(state, rate.BytesPerSecond(m.data_bytes, state.iterations()));
  // Where the last load's time went, in ms.
  state.counters["verify_ms"] = last.verify_s * 1e3;
  state.counters["plan_ms"] = last.plan_s * 1e3;
  state.counters["alloc_ms"] = last.allocate_s * 1e3;
  state.counters["read_ms"] = last.read_s * 1e3;
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Loader_Host)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// The same from a bundle verified once, outside the loop: what a load costs
// beyond verification (and the file's own open).
void BM_Loader_HostPreverified(benchmark::State& state) {
  const LoaderModel& m = ModelFor(state);
  auto opened =
      WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = m.manifest, .use_mmap = false});
  CheckOk(opened.status(), "WeightBundle::Open");
  const auto bundle = std::make_shared<const WeightBundle>(*std::move(opened));
  auto device = std::make_shared<HostDevice>();
  WarmPageCache(m.ptd);
  LoopRate rate;
  for (auto _ : state) {
    auto w = LoadWeights(bundle, device);
    CheckOk(w.status(), "LoadWeights");
    benchmark::DoNotOptimize(w->weights().data());
  }
  Ratios(state, rate.BytesPerSecond(m.data_bytes, state.iterations()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Loader_HostPreverified)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptd::bench
