// ptd_upstream_bench: the upstream baseline of the load-latency suite, on
// the same files as ptd_suite_bench: the executorch 1.5.1 package's
// FlatTensorDataMap over its FileDataLoader and MmapDataLoader (no mlock:
// Module's LoadMode::Mmap). Built only when the package is found.
//
// What upstream's CUDA backend does with weights: get_data(key) per key, a
// destination per key (cudaMalloc there, a fresh host allocation here), a
// copy, and the buffer freed. Per set:
//   Upstream/file_get_data/<set>       FileDataLoader: get_data is a fresh
//                                      heap buffer read with pread; memcpy.
//   Upstream/mmap_get_data/<set>       MmapDataLoader: get_data maps the range;
//                                      memcpy from the mapping.
//   Upstream/file_get_data_cold/<set>  as the first, after dropping the pages.
// load_data_into is not measured: the CUDA weight writer (ours, like the
// exporter) writes keys without a tensor layout, and upstream's
// load_data_into dereferences the missing layout (SIGSEGV; see
// tests/executorch/container_data_map_test.cc).
// Every key of the file is asked for in key order; keys that share a segment
// (fused QKV views, tied embeddings) are loaded once per key, as upstream
// does. Each repetition includes opening the loader and
// FlatTensorDataMap::load. Destinations are kept until the load ends and
// freed untimed.
//
// Upstream finds a key by a linear scan of the FlatBuffer's named_data, so a
// full load of n keys costs O(n^2) string compares. With more keys than
// --upstream_max_keys, a sample of that many keys spread evenly over the
// whole key list is loaded (each lookup still scans half the list on
// average) and the per-key time is scaled to all keys: counters sampled_keys
// and extrapolated say so.
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/flat_tensor/flat_tensor_data_map.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

#include "bench/suite/model_sets.h"

namespace ptd::bench {
namespace {

using ::executorch::extension::FileDataLoader;
using ::executorch::extension::FlatTensorDataMap;
using ::executorch::extension::MmapDataLoader;
using ::executorch::runtime::DataLoader;
using ::executorch::runtime::FreeableBuffer;
using Clock = std::chrono::steady_clock;

enum class Mode { kFileGetData, kMmapGetData };

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<DataLoader> OpenLoader(const std::string& path, Mode mode) {
  if (mode == Mode::kMmapGetData) {
    auto l = MmapDataLoader::from(path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
    Check(l.ok(), "MmapDataLoader::from " + path);
    return std::make_unique<MmapDataLoader>(std::move(l.get()));
  }
  auto l = FileDataLoader::from(path.c_str());
  Check(l.ok(), "FileDataLoader::from " + path);
  return std::make_unique<FileDataLoader>(std::move(l.get()));
}

// The keys a load asks for (a sample when there are too many), with their
// segment sizes, read once before timing.
struct KeyPlan {
  std::vector<std::string> keys;
  std::vector<size_t> sizes;
  uint64_t all_keys = 0;
};

KeyPlan PlanKeys(const ModelSet& m, uint64_t max_keys) {
  auto loader = OpenLoader(m.ptd, Mode::kFileGetData);
  auto map = FlatTensorDataMap::load(loader.get());
  Check(map.ok(), "FlatTensorDataMap::load " + m.ptd);
  KeyPlan plan;
  plan.all_keys = map->get_num_keys().get();
  const uint64_t take = std::min<uint64_t>(plan.all_keys, std::max<uint64_t>(max_keys, 1));
  for (uint64_t j = 0; j < take; ++j) {
    const uint32_t i = static_cast<uint32_t>(j * plan.all_keys / take);
    auto key = map->get_key(i);
    Check(key.ok(), "get_key");
    plan.keys.emplace_back(key.get());
    auto data = map->get_data(plan.keys.back());
    Check(data.ok(), "get_data " + plan.keys.back());
    plan.sizes.push_back(data->size());
  }
  return plan;
}

void BM_Upstream(benchmark::State& state, const ModelSet& m, Mode mode, bool cold,
                 uint64_t max_keys) {
  const KeyPlan plan = PlanKeys(m, max_keys);
  const double scale = static_cast<double>(plan.all_keys) / static_cast<double>(plan.keys.size());
  std::vector<double> total, first;
  double max_resident = 0;
  uint64_t staging_peak = 0;
  for (auto _ : state) {
    if (cold) {
      max_resident = std::max(max_resident, DropPageCache(m.ptd));
    } else {
      WarmPageCache(m.ptd);
    }
    std::vector<std::unique_ptr<uint8_t[]>> dests;
    dests.reserve(plan.keys.size());
    const auto t0 = Clock::now();
    auto loader = OpenLoader(m.ptd, mode);
    auto map = FlatTensorDataMap::load(loader.get());
    Check(map.ok(), "FlatTensorDataMap::load");
    const double open_s = Since(t0);
    double first_s = 0;
    for (size_t k = 0; k < plan.keys.size(); ++k) {
      dests.emplace_back(new uint8_t[plan.sizes[k]]);
      auto data = map->get_data(plan.keys[k]);
      Check(data.ok() && data->size() == plan.sizes[k], "get_data " + plan.keys[k]);
      // FileDataLoader: a heap buffer per key, freed after its copy.
      if (mode == Mode::kFileGetData) staging_peak = std::max<uint64_t>(staging_peak, data->size());
      std::memcpy(dests.back().get(), data->data(), data->size());
      data->Free();
      if (k == 0) first_s = Since(t0);
    }
    benchmark::ClobberMemory();
    const double s = open_s + (Since(t0) - open_s) * scale;
    total.push_back(s);
    first.push_back(first_s);
    state.SetIterationTime(s);
  }
  const double p50 = Percentile(total, 50);
  state.counters["p50_ms"] = p50 * 1e3;
  state.counters["p90_ms"] = Percentile(total, 90) * 1e3;
  state.counters["GBps"] = p50 > 0 ? static_cast<double>(m.data_bytes) / p50 / 1e9 : 0;
  state.counters["bytes"] = static_cast<double>(m.data_bytes);
  state.counters["reps"] = static_cast<double>(total.size());
  state.counters["first_weight_ms"] = Percentile(first, 50) * 1e3;
  state.counters["staging_peak_bytes"] = static_cast<double>(staging_peak);
  state.counters["keys"] = static_cast<double>(plan.all_keys);
  state.counters["sampled_keys"] = static_cast<double>(plan.keys.size());
  state.counters["extrapolated"] = plan.keys.size() < plan.all_keys ? 1 : 0;
  if (cold) {
    state.counters["resident_after_drop"] = max_resident;
    if (max_resident > 0.05) {
      state.SetLabel("NOT COLD: " + std::to_string(static_cast<int>(max_resident * 100)) +
                     "% of the file stayed resident after POSIX_FADV_DONTNEED");
    }
  }
}

}  // namespace
}  // namespace ptd::bench

int main(int argc, char** argv) {
  using namespace ptd::bench;  // NOLINT: main only.
  ::executorch::runtime::runtime_init();
  const SuiteFlags flags = ParseSuiteFlags(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  static const std::vector<ModelSet> sets = LoadSets(flags);
  benchmark::AddCustomContext("upstream_max_keys", std::to_string(flags.upstream_max_keys));
  struct Case {
    const char* name;
    Mode mode;
    bool cold;
  };
  const Case cases[] = {{"file_get_data", Mode::kFileGetData, false},
                        {"mmap_get_data", Mode::kMmapGetData, false},
                        {"file_get_data_cold", Mode::kFileGetData, true}};
  for (const ModelSet& m : sets) {
    for (const Case& c : cases) {
      if (c.cold && !flags.cold) continue;
      benchmark::RegisterBenchmark(("Upstream/" + std::string(c.name) + "/" + m.name).c_str(),
                                   BM_Upstream, m, c.mode, c.cold, flags.upstream_max_keys)
          ->Iterations(flags.reps)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
