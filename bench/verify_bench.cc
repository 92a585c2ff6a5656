// Verification and lookup costs, and how they scale.
//
//   BM_ContainerOpen_Keys/N      Container::Open of an in-memory .ptd of N
//                                keys: every structural check plus the hash
//                                index build. Complexity fit over N.
//   BM_Lookup_Hash/Linear        one key lookup among 10k: Find() against a
//                                linear scan of named_data().
//   BM_ManifestDecode_Entries/N  ParseManifest of N entries.
//   BM_WeightSetResolve/N        WeightSet::Resolve of N weights against N
//                                keys; the header promises O(entries + keys).
//   BM_Ceiling_Sha256            SHA-256 of a flat 16 MiB buffer.
//   BM_DigestView_Contiguous     DigestView of a 2048x2048 float view of the
//                                same bytes (zero-copy source); vs_sha256 is
//                                its ratio to the ceiling.
//   BM_DigestView_Transposed     the same view transposed (4-byte runs).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/bench_util.h"
#include "ptd/container.h"
#include "ptd/manifest.h"
#include "ptd/report.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "ptd/weight_set.h"

namespace ptd::bench {
namespace {

constexpr int64_t kLookupKeys = 10000;
constexpr int64_t kMatrixDim = 2048;  // Floats per side: 16 MiB.

std::shared_ptr<const FileSource> SmallKeyPtdCached(int64_t n) {
  static std::map<int64_t, std::shared_ptr<const FileSource>> cache;
  auto& slot = cache[n];
  if (slot == nullptr) slot = SmallKeyPtd(n);
  return slot;
}

const WeightSetFixture& WeightSetCached(int64_t n) {
  static std::map<int64_t, WeightSetFixture> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, MakeWeightSet(n)).first;
  return it->second;
}

std::unique_ptr<Container> ContainerOrDie(std::shared_ptr<const FileSource> source) {
  auto c = Container::Open(std::move(source));
  CheckOk(c.status(), "Container::Open");
  return std::move(*c);
}

void BM_ContainerOpen_Keys(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto source = SmallKeyPtdCached(n);
  for (auto _ : state) {
    auto c = Container::Open(source);
    benchmark::DoNotOptimize(c);
  }
  state.SetComplexityN(n);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ContainerOpen_Keys)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMicrosecond)
    ->Complexity(benchmark::oN);

// Keys in a scattered order, so neither lookup benefits from locality.
std::vector<std::string> ScatteredKeys(const Container& c) {
  const auto& named = c.named_data();
  std::vector<std::string> keys;
  keys.reserve(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    keys.emplace_back(named[(i * 7919) % named.size()].key);
  }
  return keys;
}

void BM_Lookup_Hash(benchmark::State& state) {
  auto c = ContainerOrDie(SmallKeyPtdCached(kLookupKeys));
  const std::vector<std::string> keys = ScatteredKeys(*c);
  size_t i = 0;
  for (auto _ : state) {
    const NamedDataEntry* e = c->Find(keys[i]);
    benchmark::DoNotOptimize(e);
    if (++i == keys.size()) i = 0;
  }
}
BENCHMARK(BM_Lookup_Hash);

void BM_Lookup_Linear(benchmark::State& state) {
  auto c = ContainerOrDie(SmallKeyPtdCached(kLookupKeys));
  const std::vector<std::string> keys = ScatteredKeys(*c);
  const auto& named = c->named_data();
  size_t i = 0;
  for (auto _ : state) {
    const NamedDataEntry* e = nullptr;
    for (const NamedDataEntry& cand : named) {
      if (cand.key == keys[i]) {
        e = &cand;
        break;
      }
    }
    benchmark::DoNotOptimize(e);
    if (++i == keys.size()) i = 0;
  }
}
BENCHMARK(BM_Lookup_Linear);

void BM_ManifestDecode_Entries(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto encoded = EncodeManifest(WeightSetCached(n).manifest);
  CheckOk(encoded.status(), "EncodeManifest");
  for (auto _ : state) {
    auto m = ParseManifest(*encoded);
    benchmark::DoNotOptimize(m);
  }
  state.SetComplexityN(n);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(encoded->size()));
}
BENCHMARK(BM_ManifestDecode_Entries)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMicrosecond)
    ->Complexity(benchmark::oN);

void BM_WeightSetResolve(benchmark::State& state) {
  const int64_t n = state.range(0);
  const WeightSetFixture& f = WeightSetCached(n);
  auto c = ContainerOrDie(f.ptd);
  const SourcedManifest inputs[] = {{"manifest", f.manifest}};
  CheckOk(WeightSet::Open(*c, inputs).status(), "WeightSet::Open");
  for (auto _ : state) {
    Report report;
    WeightSet ws = WeightSet::Resolve(*c, inputs, &report);
    benchmark::DoNotOptimize(ws);
  }
  state.SetComplexityN(n);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_WeightSetResolve)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMicrosecond)
    ->Complexity(benchmark::oN);

// The 16 MiB matrix the digest benchmarks share, in a zero-copy source.
const FileSource& Matrix() {
  static std::shared_ptr<const FileSource> source = [] {
    std::vector<uint8_t> bytes(kMatrixDim * kMatrixDim * 4);
    FillPattern(42, bytes.data(), bytes.size());
    return std::shared_ptr<const FileSource>(MemorySource(std::move(bytes)));
  }();
  return *source;
}

double g_sha256_rate = 0;  // Bytes/s of BM_Ceiling_Sha256 in this run.

void BM_Ceiling_Sha256(benchmark::State& state) {
  const FileSource& src = Matrix();
  const absl::Span<const uint8_t> bytes = *src.View(0, src.size());
  LoopRate rate;
  for (auto _ : state) {
    std::string hex = Sha256Hex(bytes);
    benchmark::DoNotOptimize(hex);
  }
  g_sha256_rate = rate.BytesPerSecond(src.size(), state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
}
BENCHMARK(BM_Ceiling_Sha256)->Unit(benchmark::kMillisecond);

void DigestViewBench(benchmark::State& state, bool transposed) {
  const FileSource& src = Matrix();
  const std::vector<int64_t> sizes = {kMatrixDim, kMatrixDim};
  const std::vector<int64_t> strides =
      transposed ? std::vector<int64_t>{1, kMatrixDim} : std::vector<int64_t>{kMatrixDim, 1};
  const ViewSpec view{.element_size = 4, .storage_offset = 0, .sizes = sizes, .strides = strides};
  LoopRate rate;
  for (auto _ : state) {
    auto hex = DigestView(src, 0, src.size(), view);
    CheckOk(hex.status(), "DigestView");
    benchmark::DoNotOptimize(hex);
  }
  if (g_sha256_rate > 0) {
    state.counters["vs_sha256"] =
        rate.BytesPerSecond(src.size(), state.iterations()) / g_sha256_rate;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
}

void BM_DigestView_Contiguous(benchmark::State& state) { DigestViewBench(state, false); }
BENCHMARK(BM_DigestView_Contiguous)->Unit(benchmark::kMillisecond);

void BM_DigestView_Transposed(benchmark::State& state) { DigestViewBench(state, true); }
BENCHMARK(BM_DigestView_Transposed)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptd::bench
