// Shared fixtures for ptd_bench (the verifier's parts) and ptd_cuda_bench:
// in-memory containers and manifests of N entries, a loop's rate, and a
// fixture check. The load itself is measured by the suite (bench/suite/,
// scripts/bench.sh), whose FillPattern and WarmPageCache (model_sets.h)
// these use too.
//
// Thread-safety: not thread-safe; benchmarks run on one thread.
#ifndef PTD_BENCH_BENCH_UTIL_H_
#define PTD_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

#include "bench/suite/model_sets.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"

namespace ptd::bench {

// An in-memory .ptd with `n` keys "model.layers.I.weight" of 16 distinct
// bytes each.
std::shared_ptr<const FileSource> SmallKeyPtd(int64_t n);

// A CUDA weight set of `n` 4x4 float weights: the .ptd (in memory) and its
// manifest.
struct WeightSetFixture {
  std::shared_ptr<const FileSource> ptd;
  Manifest manifest;
};
WeightSetFixture MakeWeightSet(int64_t n);

// Wall-clock bytes/s of a timed loop: construct it right before the loop,
// ask after it. Used for ratio counters against a ceiling measured earlier
// in the same run (Google Benchmark does not expose its own timings).
class LoopRate {
 public:
  LoopRate() : start_(std::chrono::steady_clock::now()) {}
  double BytesPerSecond(uint64_t bytes_per_iteration, int64_t iterations) const;

 private:
  std::chrono::steady_clock::time_point start_;
};

// Aborts, printing `what` and the status, when `status` is not OK. For
// fixture setup only: a benchmark of a broken fixture measures nothing.
void CheckOk(const absl::Status& status, std::string_view what);

}  // namespace ptd::bench

#endif  // PTD_BENCH_BENCH_UTIL_H_
