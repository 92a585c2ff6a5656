// ptd-load: what each listed weight or key got from the load, and with
// --digest its digests (read back from the device) and, on a CUDA device,
// the digest of its dense copy made on the GPU.
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "ptd/sha256.h"
#include "verifier/cli_util.h"
#include "verifier/load_cli.h"
#ifdef PTD_HAVE_CUDA
#include "ptd/cuda_device.h"
#include "ptd/view_materialize.h"
#endif

namespace ptd_load {
namespace {

#ifdef PTD_HAVE_CUDA
// What MaterializedDigest reuses from weight to weight: one device buffer,
// grown only when a larger weight comes (a digest run makes O(1) device
// allocations, and no cudaFree per weight), and one host buffer.
struct MaterializeScratch {
  ptd::DeviceBuffer dense;
  std::vector<uint8_t> piece;
};

// sha256 of the dense, row-major copy of `w` made on the GPU and read back
// in pieces of at most 64 MiB.
absl::StatusOr<std::string> MaterializedDigest(ptd::CudaDevice& gpu,
                                               const ptd::LoadedWeights& weights,
                                               const ptd::LoadedWeight& w,
                                               MaterializeScratch& scratch) {
  const ptd::LoadedStorage& s = weights.storage(w);
  auto plan = ptd::PlanMaterialize(w.view(), s.buffer.size());
  if (!plan.ok()) return plan.status();
  const size_t nbytes = static_cast<size_t>(plan->output_nbytes);
  if (!scratch.dense || scratch.dense.size() < nbytes) {
    scratch.dense = ptd::DeviceBuffer();  // The old one goes first.
    auto grown = gpu.Allocate(nbytes);
    if (!grown.ok()) return grown.status();
    scratch.dense = *std::move(grown);
  }
  const absl::Status materialized = gpu.MaterializeInto(s.buffer, w.view(), scratch.dense);
  if (!materialized.ok()) return materialized;
  const size_t piece_bytes = std::min<size_t>(nbytes, size_t{64} << 20);
  if (scratch.piece.size() < piece_bytes) scratch.piece.resize(piece_bytes);
  ptd::Sha256 sha;
  for (size_t done = 0; done < nbytes;) {
    const size_t n = std::min(piece_bytes, nbytes - done);
    const absl::Status st = gpu.CopyToHost(
        scratch.piece.data(), static_cast<const uint8_t*>(scratch.dense.data()) + done, n);
    if (!st.ok()) return st;
    sha.Update(absl::MakeConstSpan(scratch.piece.data(), n));
    done += n;
  }
  return sha.HexDigest();
}
#endif

std::optional<std::string> DigestOrNull(const absl::StatusOr<std::string>& d) {
  if (d.ok()) return *d;
  std::cerr << "ptd-load: digest: " << d.status().message() << "\n";
  return std::nullopt;
}

// On a CUDA device: the weight's dense copy, made on the GPU, against the
// digest gathered from the view read back. A failure or mismatch is exit 2.
class MaterializeCheck {
 public:
  explicit MaterializeCheck(const ptd::LoadedWeights& w) : w_(w) {}
  void Check(const ptd::LoadedWeight& lw, LoadedItem* item, LoadResults* r) {
#ifdef PTD_HAVE_CUDA
    auto* gpu = dynamic_cast<ptd::CudaDevice*>(w_.device().get());
    if (gpu == nullptr || lw.device != ptd::DeviceKind::kCuda || !item->sha256) return;
    item->has_materialized = true;
    auto d = MaterializedDigest(*gpu, w_, lw, scratch_);
    if (!d.ok()) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': materialize on " << gpu->name() << ": "
                << d.status().message() << "\n";
      r->materialize_failed = true;
      return;
    }
    item->materialized_sha256 = *d;
    if (*d != *item->sha256) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': the dense copy made on " << gpu->name()
                << " has sha256 " << *d << ", the view read back " << *item->sha256 << "\n";
      r->materialize_failed = true;
      return;
    }
    ++r->materialized;
#else
    (void)lw;
    (void)item;
    (void)r;
#endif
  }

 private:
  const ptd::LoadedWeights& w_;
#ifdef PTD_HAVE_CUDA
  MaterializeScratch scratch_;
#endif
};

// Per listed weight: whether it was loaded, where, and with --digest its
// digests. Loaded weights come manifest by manifest in entry order, so they
// are matched to the outcome's weights walking both in step.
void WeightResults(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::LoadedWeights& w,
                   const std::function<void()>& tick, LoadResults* r) {
  MaterializeCheck materialize(w);
  const std::vector<ptd::LoadedWeight>& loaded = w.weights();
  size_t next = 0;
  r->weights.resize(outcome.manifests.size());
  for (size_t m = 0; m < outcome.manifests.size(); ++m) {
    const ptd::VerifiedManifest& vm = outcome.manifests[m];
    r->weights[m].resize(vm.weights.size());
    for (size_t i = 0; i < vm.weights.size(); ++i) {
      const ptd::VerifiedWeight& vw = vm.weights[i];
      LoadedItem& item = r->weights[m][i];
      const ptd::LoadedWeight* lw = nullptr;
      if (next < loaded.size() && loaded[next].source == vm.manifest->source &&
          loaded[next].fqn == vw.entry->fqn) {
        lw = &loaded[next++];
      }
      item.found = lw != nullptr;
      if (lw != nullptr) item.residency = lw->residency;
      tick();
      if (!a.digest || (lw == nullptr && !vw.runtime_owned)) continue;
      item.has_sha = true;
      if (lw == nullptr) continue;
      item.sha256 = DigestOrNull(ptd::DigestLoadedWeight(w, *lw));
      if (item.sha256) r->digests.emplace_back(lw->fqn, *item.sha256);
      materialize.Check(*lw, &item, r);
    }
  }
}

// Per listed key, without manifests: the storage it was loaded into.
void KeyResults(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::LoadedWeights& w,
                const std::function<void()>& tick, LoadResults* r) {
  r->keys.resize(outcome.ptd.keys.size());
  for (size_t i = 0; i < outcome.ptd.keys.size(); ++i) {
    const ptd::VerifiedKey& k = outcome.ptd.keys[i];
    LoadedItem& item = r->keys[i];
    const ptd::LoadedStorage* s = w.FindStorage(k.entry->key);
    item.found = s != nullptr;
    if (s != nullptr) item.residency = s->residency;
    tick();
    if (!a.digest || s == nullptr) continue;
    item.has_sha = true;
    item.sha256 = DigestOrNull(ptd::DigestLoadedStorage(w, *s));
    if (item.sha256) r->digests.emplace_back(k.entry->key, *item.sha256);
  }
}

}  // namespace

LoadResults CollectResults(const Args& a, const ptd::VerifyOutcome& outcome,
                           const ptd::LoadedWeights& w) {
  LoadResults r;
  if (!a.json_out && !a.digest) return r;
  // Digests can be the slow part: the bar follows them by weights.
  ptd::cli::ProgressBar bar;
  const bool show = a.digest && ::isatty(STDERR_FILENO) != 0;
  uint64_t total = 0, done = 0;
  for (const ptd::VerifiedManifest& m : outcome.manifests) total += m.weights.size();
  if (outcome.manifests.empty()) total = outcome.ptd.keys.size();
  if (a.digest) bar.Start("digests", ptd::cli::ProgressBar::kItems);
  const std::function<void()> tick = [&] {
    if (show) bar.Update(++done, total);
  };
  WeightResults(a, outcome, w, tick, &r);
  if (outcome.manifests.empty()) KeyResults(a, outcome, w, tick, &r);
  bar.Erase();
  return r;
}

}  // namespace ptd_load
