// The load-latency suite's model sets, its flags and its page-cache tools,
// shared by ptd_suite_bench (ours and the ceilings) and ptd_upstream_bench
// (upstream's FlatTensorDataMap).
//
// Every set is written by our own CudaWeightWriter (a .ptd plus its
// ETCUDAFQN0 manifest) into the data directory, once: a later run finds the
// files by name (the name carries the set's parameters and a format
// version) and reuses them. The directory is never in git.
//
//   blocks  N storages of S bytes, one float32 weight each (1 GiB as
//           256 x 4 MiB, 256 MiB as 4096 x 64 KiB, 64 MiB as 65,536 x 1 KiB)
//   xfmr    a transformer-shaped bf16 model: per layer a fused QKV storage
//           with three views, a fused gate/up storage with two, transposed
//           o_proj and down_proj, two norms; embeddings tied to lm_head.
//   verify  N weights of 64 bytes (4x4 float32): verification cost per weight.
//
// Nothing here includes FlatBuffers or executorch headers: both binaries
// include it (the executorch wheel's headers cannot share a translation unit
// with Debian's FlatBuffers).
//
// Thread-safety: not thread-safe; the benchmarks run on one thread.
#ifndef PTD_BENCH_SUITE_MODEL_SETS_H_
#define PTD_BENCH_SUITE_MODEL_SETS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ptd::bench {

// One model on disk and what a load of it moves.
struct ModelSet {
  std::string name;            // "4MiB", "64KiB", "1KiB", "xfmr", "verify-1000".
  std::string description;     // Its shape, in words.
  std::string ptd;             // Path of the .ptd.
  std::string manifest;        // Path of its manifest.
  uint64_t storage_bytes = 0;  // Each storage's size; 0 when sizes vary.
  uint64_t storages = 0;       // Distinct stored segments (what a load allocates).
  uint64_t keys = 0;           // Named-data keys (several may share a segment).
  uint64_t weights = 0;        // Manifest entries (views).
  uint64_t data_bytes = 0;     // Bytes of the distinct segments: what a load moves.
  uint64_t data_begin = 0;     // File offset of the segment region.
  uint64_t file_bytes = 0;
};

// The suite's flags (--name=value; both binaries take the same ones and pass
// every other argument to Google Benchmark).
struct SuiteFlags {
  std::string data_dir;      // --data_dir; default $PTD_BENCH_DIR or <build>/bench-data.
  uint64_t big_mib = 1024;   // --big_mib: total of the 4 MiB-storage set.
  uint64_t mid_mib = 256;    // --mid_mib: total of the 64 KiB-storage set.
  uint64_t small_mib = 64;   // --small_mib: total of the 1 KiB-storage set.
  uint64_t xfmr_mib = 1024;  // --xfmr_mib: target size of the transformer.
  int reps = 10;             // --reps: timed repetitions of each case.
  bool cold = true;          // --cold=0 skips the cold-cache cases.
  bool io = true;            // --io=0 skips the cold-start page (read engines).
  std::vector<uint64_t> verify_weights = {1000, 10000, 100000};  // --verify=a,b,c
  uint64_t upstream_max_keys = 4096;  // --upstream_max_keys: sample cap (see upstream_bench.cc).
  std::string sets = "4MiB,64KiB,1KiB,xfmr";  // --sets: which sets to run.
};

// Removes the suite's flags from argv (argc updated); exits 2 on a bad value.
SuiteFlags ParseSuiteFlags(int* argc, char** argv);

// The sets named in flags.sets, written on first use. Aborts on failure (a
// benchmark of a broken fixture measures nothing).
std::vector<ModelSet> LoadSets(const SuiteFlags& flags);
ModelSet VerifySet(const SuiteFlags& flags, uint64_t weights);

// Page cache. Warm() reads the whole file (pread) so the timed load that
// follows finds it cached. Drop() asks the kernel to drop the file's pages
// (fsync, then posix_fadvise(POSIX_FADV_DONTNEED)). Both return the fraction
// of the file's pages resident afterwards, from mincore(2) over a mapping;
// a Drop() that leaves pages resident means this machine does not give a
// cold cache (the caller reports it).
double WarmPageCache(const std::string& path);
// Fills `dst` with bytes derived from `seed` (distinct seeds, distinct bytes).
void FillPattern(uint64_t seed, uint8_t* dst, uint64_t n);
double DropPageCache(const std::string& path);
double ResidentFraction(const std::string& path);

// p-th percentile (0..100) of `samples`, nearest rank; 0 when empty.
double Percentile(std::vector<double> samples, double p);

// Aborts with `what` when !ok.
void Check(bool ok, const std::string& what);

}  // namespace ptd::bench

#endif  // PTD_BENCH_SUITE_MODEL_SETS_H_
