// Weights in and out of a program: a .ptd's weights as a safetensors
// checkpoint (extract), and the .ptd a program expects built from a
// checkpoint (reweight). docs/SPEC.md section 7, rules S8-S10 and N1.
//
// Both stream: host memory stays within ExtractOptions::memory_budget or
// ReweightOptions::memory_budget (64 MiB by default) plus the metadata
// (names, shapes, the manifest), whatever the size of the model.
//
// Example:
//   BundlePaths program{.ptd = "model.ptd", .pte = "model.pte"};
//   absl::StatusOr<ExtractResult> x = ExtractWeights(program, "model.safetensors");
//   if (!x.ok()) return x.status();
//   ... fine-tune model.safetensors ...
//   absl::StatusOr<ReweightResult> r =
//       Reweight("model.safetensors", program, "new.ptd", {.base = "model.ptd"});
//   if (!r.ok()) return r.status();
//
// Errors: a broken rule is DataLoss (a file read) or InvalidArgument (a
// checkpoint that does not fit the program), naming the file, the weight or
// tensor, the rule and both numbers. No output file is left behind.
//
// Thread-safety: free functions without shared state.
#ifndef PTD_CHECKPOINT_H_
#define PTD_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "ptd/report.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_stats.h"

namespace ptd {

inline constexpr uint64_t kDefaultCheckpointMemoryBudget = uint64_t{64} << 20;

struct ExtractOptions {
  // Set: `out` is a folder of shards of at most this many bytes of tensor
  // data each (a tensor larger than it gets a shard of its own) plus
  // model.safetensors.index.json. Unset: `out` is one .safetensors file.
  std::optional<uint64_t> max_shard_size;
  // Compute WeightStats for each floating weight, and N1 warnings.
  bool stats = false;
  uint64_t memory_budget = kDefaultCheckpointMemoryBudget;
};

struct ExtractedTensor {
  std::string name;  // The fqn, or the key without a manifest.
  int32_t scalar_type = 0;
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
  std::string file;  // The file it went to (`out`, or `out`/its shard).
  std::optional<WeightStats> stats;
};

struct ExtractResult {
  std::vector<ExtractedTensor> tensors;    // In the manifests' order.
  std::vector<std::string> runtime_owned;  // fqns left out (no bytes).
  std::vector<std::string> files;          // Written: shards, then index.
  Report report;                           // Warnings (N1, with options.stats).
};

// Writes every stored weight's view of the verified bundle `inputs`,
// materialized row-major under its fqn; without a manifest, each key's bytes
// as a U8 tensor. `__metadata__` names each source file and its sha256.
// InvalidArgument naming the weight when its dtype has no safetensors name.
absl::StatusOr<ExtractResult> ExtractWeights(const BundlePaths& inputs, const std::string& out,
                                             const ExtractOptions& options = {});

struct ReweightOptions {
  // A .ptd for the same program whose bytes fill what the checkpoint does
  // not: storages of weights it lacks, and bytes no view covers.
  std::optional<std::string> base;
  // Checkpoint names are renamed before lookup: a name that starts with a
  // `first` becomes `second` + the rest (the longest matching prefix wins;
  // "" matches every name). {"model.", ""} strips a prefix.
  std::vector<std::pair<std::string, std::string>> rename;
  uint64_t memory_budget = kDefaultCheckpointMemoryBudget;
};

// A storage's bytes that no view covers and no base supplied: zero-filled.
struct ZeroFill {
  std::string key;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

struct ReweightResult {
  std::vector<std::string> written;  // fqns whose bytes came from the checkpoint.
  std::vector<std::string> kept;     // fqns kept from the base (S10).
  std::vector<std::string> unused;   // Checkpoint tensors no weight uses.
  std::vector<ZeroFill> zero_filled;
  uint64_t zero_filled_bytes = 0;
  // Warnings: kept weights (S10), zero-filled bytes, one per storage (S10),
  // checkpoint tensors no weight uses (S8).
  Report report;
};

// Builds the .ptd that `program` (a standalone manifest or a .pte;
// program.ptd is ignored) expects from `checkpoint` (a .safetensors file or
// a *.safetensors.index.json) and writes it to `out` after verifying it
// under every rule. Without a manifest, `options.base` is required, and each
// of its keys is looked up as a U8 tensor of the key's size.
//
// Layout: when the base holds every storage under its key at the manifest's
// storage_nbytes, and keys that share a base segment still agree, the base
// is kept byte for byte (FlatBuffer, header, padding, other keys such as the
// AOTI library) and only storage bytes change: extract then reweight with
// the original as base gives the original back. Otherwise the file is laid
// out as upstream's collector does (storage keys in order of first
// reference, then the base's other keys; segment alignment 128; identical
// bytes stored once). Storages are built in windows within the budget.
// Checkpoint tensors are read through pread; a sharded checkpoint is fine.
absl::StatusOr<ReweightResult> Reweight(const std::string& checkpoint, const BundlePaths& program,
                                        const std::string& out,
                                        const ReweightOptions& options = {});

}  // namespace ptd

#endif  // PTD_CHECKPOINT_H_
