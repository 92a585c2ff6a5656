// ptd_signing_bench: what checking a signed model (LoadOptions::signature,
// docs/SPEC.md section 8) costs a warm host load, against its two bounds
// measured in the same run.
//
// Per model set (--sets, default the 1 GiB set of 4 MiB storages), one
// benchmark, Signed/<hash>/<set>, whose every repetition runs each case once,
// in turn, on a page cache warmed right before it (the cases alternate, so
// the machine's noise falls on all of them alike):
//   unsigned       LoadWeights(paths, HostDevice): open, verify, read.
//   hash_parallel  the same bytes hashed alone, shard by shard on the same
//                  number of threads (VerifySignedModel of the shards
//                  signature): what the digests cost without a load.
//   shards         LoadWeights with the shards signature: the digests on the
//                  load's own reads.
//   hash_single    the bytes hashed alone as one stream (the files
//                  signature, one thread): the single-stream hash rate.
//   files          LoadWeights with the files signature: one stream per
//                  file, beside the readers.
// and, with --cold (default on), the same three of the shards signature on
// a cold file (its pages dropped right before: DropPageCache), where the
// reads wait on the disk and the digests can ride on them:
//   unsigned_cold, hash_parallel_cold, shards_cold; shards_cold_ratio =
//   shards_cold / max(unsigned_cold, hash_parallel_cold).
// Counters: each case's p50 (ms) and GB/s, and
//   shards_ratio = shards / max(unsigned, hash_parallel), the bound
//   (at most 1.1); files_ratio = files / max(unsigned, hash_single).
// Each timed case includes the load's whole call (verification, allocation
// of fresh memory and its first-touch faults, reads, digests); the unload
// is not timed. The signed folders hold hard links to the set's files
// (<data_dir>/signed-<serialization>-<set>/), signed once and kept.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/suite/model_sets.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/model_signature.h"
#include "tests/testing/signing_fixture.h"

namespace ptd::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct SignedSet {
  ModelSet set;
  std::string shards_dir, files_dir, key;
  uint64_t shard_size = 0;
  std::string hash;
};

// A folder of hard links to the set's .ptd and manifest, signed once.
std::string SignedFolder(const ModelSet& m, const std::string& data_dir, const std::string& key_pem,
                         const testing::TestKey& key, const testing::SignSpec& spec) {
  const std::string dir =
      (fs::path(data_dir) / absl::StrCat("signed-", spec.method, "-", spec.hash, "-", m.name))
          .string();
  const std::string sig = dir + "/model.sig";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string& f : {m.ptd, m.manifest}) {
    const fs::path to = fs::path(dir) / fs::path(f).filename();
    std::error_code ec;
    fs::create_hard_link(f, to, ec);
    if (ec) fs::copy_file(f, to);
  }
  testing::SignFolder(dir, key, spec);
  (void)key_pem;
  return dir;
}

SignatureOptions Options(const SignedSet& s, const std::string& dir) {
  return SignatureOptions{.signature = dir + "/model.sig",
                          .public_key = s.key,
                          .certificate_chain = "",
                          .model_dir = ""};
}

BundlePaths Paths(const std::string& dir, const ModelSet& m) {
  return BundlePaths{.ptd = (fs::path(dir) / fs::path(m.ptd).filename()).string(),
                     .manifest = (fs::path(dir) / fs::path(m.manifest).filename()).string()};
}

void BM_Signed(benchmark::State& state, const SignedSet& s, size_t threads, bool cold) {
  auto device = std::make_shared<HostDevice>();
  std::vector<double> unsigned_s, hash_par, shards, hash_one, files;
  std::vector<double> unsigned_cold, hash_cold, shards_cold;
  const auto load = [&](const std::string& dir, bool sign, const std::string& sig_dir,
                        bool drop = false) {
    const BundlePaths p = Paths(dir, s.set);
    if (drop) {
      WarmPageCache(*p.manifest);
      DropPageCache(p.ptd);
    } else {
      WarmPageCache(p.ptd);
    }
    LoadOptions o;
    o.threads = threads;
    if (sign) o.signature = Options(s, sig_dir);
    const auto t0 = Clock::now();
    auto w = LoadWeights(p, device, o);
    const double t = Since(t0);
    Check(w.ok(), "LoadWeights " + p.ptd + ": " + w.status().ToString());
    Check(!sign || (w->stats().signature.verified && w->stats().signature.one_pass),
          "the signed load did not verify in one pass");
    return t;
  };
  const auto hash_alone = [&](const std::string& dir, size_t n, bool drop = false) {
    const BundlePaths p = Paths(dir, s.set);
    if (drop) {
      DropPageCache(p.ptd);
    } else {
      WarmPageCache(p.ptd);
    }
    const std::string read[] = {p.ptd, *p.manifest};
    const auto t0 = Clock::now();
    const absl::Status st = VerifySignedModel(Options(s, dir), read, n, nullptr);
    const double t = Since(t0);
    Check(st.ok(), st.ToString());
    return t;
  };
  for (auto _ : state) {
    unsigned_s.push_back(load(s.shards_dir, false, ""));
    hash_par.push_back(hash_alone(s.shards_dir, threads));
    shards.push_back(load(s.shards_dir, true, s.shards_dir));
    hash_one.push_back(hash_alone(s.files_dir, 1));
    files.push_back(load(s.files_dir, true, s.files_dir));
    if (cold) {
      unsigned_cold.push_back(load(s.shards_dir, false, "", true));
      hash_cold.push_back(hash_alone(s.shards_dir, threads, true));
      shards_cold.push_back(load(s.shards_dir, true, s.shards_dir, true));
    }
    state.SetIterationTime(shards.back());
  }
  const double bytes = static_cast<double>(s.set.file_bytes);
  const auto put = [&](const std::string& name, const std::vector<double>& v) {
    const double p50 = Percentile(v, 50);
    state.counters[name + "_ms"] = p50 * 1e3;
    state.counters[name + "_GBps"] = p50 > 0 ? bytes / p50 / 1e9 : 0;
    return p50;
  };
  const double u = put("unsigned", unsigned_s), hp = put("hash_parallel", hash_par);
  const double sh = put("shards", shards), h1 = put("hash_single", hash_one);
  const double fi = put("files", files);
  state.counters["shards_ratio"] = sh / std::max(u, hp);
  state.counters["files_ratio"] = fi / std::max(u, h1);
  if (cold) {
    const double uc = put("unsigned_cold", unsigned_cold);
    const double hc = put("hash_parallel_cold", hash_cold);
    const double sc = put("shards_cold", shards_cold);
    state.counters["shards_cold_ratio"] = sc / std::max(uc, hc);
  }
  state.counters["threads"] = static_cast<double>(threads);
  state.counters["shard_size"] = static_cast<double>(s.shard_size);
}

}  // namespace
}  // namespace ptd::bench

int main(int argc, char** argv) {
  using namespace ptd::bench;  // NOLINT: main only.
  SuiteFlags flags = ParseSuiteFlags(&argc, argv);
  uint64_t shard_mib = 16;
  std::string hash = "sha256";
  size_t threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--shard_mib=", 0) == 0) shard_mib = std::stoull(a.substr(12));
    if (a.rfind("--hash=", 0) == 0) hash = a.substr(7);
    if (a.rfind("--threads=", 0) == 0) threads = std::stoull(a.substr(10));
  }
  if (flags.sets == SuiteFlags{}.sets) flags.sets = "4MiB";
  benchmark::Initialize(&argc, argv);
  static const std::vector<ModelSet> sets = LoadSets(flags);
  static std::vector<SignedSet> signed_sets;
  const ptd::testing::TestKey key = ptd::testing::TestKey::Make();
  const std::string key_path = flags.data_dir + "/signing-bench-key.pub";
  ptd::testing::WriteFile(key_path, key.public_pem);
  for (const ModelSet& m : sets) {
    SignedSet s{.set = m,
                .shards_dir = {},
                .files_dir = {},
                .key = key_path,
                .shard_size = shard_mib << 20,
                .hash = hash};
    s.shards_dir = SignedFolder(m, flags.data_dir, key.public_pem, key,
                                ptd::testing::SignSpec{.method = "shards",
                                                       .hash = hash,
                                                       .shard_size = s.shard_size,
                                                       .ignore_paths = {"model.sig"}});
    s.files_dir = SignedFolder(
        m, flags.data_dir, key.public_pem, key,
        ptd::testing::SignSpec{
            .method = "files", .hash = hash, .shard_size = 0, .ignore_paths = {"model.sig"}});
    signed_sets.push_back(std::move(s));
  }
  for (const SignedSet& s : signed_sets) {
    benchmark::RegisterBenchmark(absl::StrCat("Signed/", s.hash, "/", s.set.name).c_str(),
                                 BM_Signed, s, threads, flags.cold)
        ->Iterations(flags.reps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::AddCustomContext("data_dir", flags.data_dir);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
