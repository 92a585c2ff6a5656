// Shared fixtures for ptd_bench: a synthetic model file, a page-cache warmer,
// pre-faulted buffers and in-memory containers / manifests of N entries.
//
// The synthetic model is written once per process into a fresh temporary
// directory and removed at exit. The machine pages out page cache left idle
// for about a minute, so every benchmark that reads the file calls
// WarmPageCache() right before its timed loop.
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

#include "ptd/file_source.h"
#include "ptd/manifest.h"

namespace ptd::bench {

struct SyntheticModel {
  std::string path;                    // The .ptd file.
  uint64_t file_bytes = 0;             // Size of the file.
  uint64_t data_bytes = 0;             // Sum of the storages (what a load copies).
  std::vector<std::string> keys;       // In the order a program asks for them.
  std::vector<uint64_t> sizes;         // Bytes of each key's storage.
  std::vector<uint64_t> dest_offsets;  // Where each key goes in the arena.
};

// The model: 1 x 64 MiB, 2 x 32 MiB, 4 x 16 MiB storages (embedding,
// lm_head, large projections), 48 x 1 MiB and 2048 x 4 KiB (norms, biases,
// small projections): 248 MiB of data in 2103 keys, distinct bytes each so
// nothing is deduplicated. Written on first use; CHECK-fails on error.
const SyntheticModel& Model();

// Reads the whole file with pread into a scratch buffer so that the timed
// loop that follows finds it in the page cache.
void WarmPageCache(const std::string& path);

// A buffer of `n` bytes with every page already touched.
std::unique_ptr<uint8_t[]> PrefaultedBuffer(uint64_t n);

// Fills `dst` with bytes derived from `seed` (distinct seeds, distinct bytes).
void FillPattern(uint64_t seed, uint8_t* dst, uint64_t n);

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
