// WeightBundle: everything a verifier or a loader needs to know about one
// model's weights, assembled and checked in one call.
//
// A bundle is a .ptd container plus the CUDA weight manifests that describe
// views into it: a standalone manifest file, or the manifest of every
// CudaBackend delegate of a .pte (or neither: the container alone). Assembly
// opens the container (H*, C*), decodes each manifest (M*), reads the .pte
// (P1, P2, P4), checks that each variant's library is named data somewhere
// (P3), and resolves every weight against the container (X*, G*).
//
// Two ways in, one set of checks (as for Container):
//   WeightBundle::Verify()  every error and warning into a Report; the bundle
//                           holds whatever could be read, for reporting.
//   WeightBundle::Open()    for use: the first error as a Status; a returned
//                           bundle is fully verified and every weight is ok.
//
// Both take the inputs as paths (BundlePaths) or as sources already opened
// (BundleSources).
//
// Example:
//   const BundlePaths paths{.ptd = "model.ptd", .pte = "model.pte"};
//   absl::StatusOr<WeightBundle> bundle = WeightBundle::Open(paths);
//   if (!bundle.ok()) return bundle.status();  // DataLoss "... (G2)"
//   for (const SourcedManifest& m : bundle->manifests()) ...  // "pte:forward:0"
//
//   Report report;                               // Or every finding:
//   WeightBundle checked = WeightBundle::Verify(paths, &report);
//   for (const Diagnostic& d : report.errors()) ...
//
// To load it: LoadWeights (ptd/loader.h).
//
// Lifetime: the bundle owns its container, program and manifests; the
// WeightSet points into them. Movable, not copyable.
// Thread-safety: const methods are safe to call concurrently.
#ifndef PTD_WEIGHT_BUNDLE_H_
#define PTD_WEIGHT_BUNDLE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/program.h"
#include "ptd/report.h"
#include "ptd/weight_set.h"

namespace ptd {

// The inputs, already opened. `ptd` is required; at most one of `manifest`
// (a standalone manifest file) and `pte` is usual, but both are accepted.
struct BundleSources {
  std::shared_ptr<const FileSource> ptd;
  std::shared_ptr<const FileSource> manifest;  // Optional.
  std::shared_ptr<const FileSource> pte;       // Optional.
};

// The same, as paths. Read through pread(2) by default: a file truncated
// while it is verified is then a DataLoss naming it. `use_mmap` true maps
// the files instead; a mapped file that shrinks under a read raises SIGBUS,
// which the caller must handle (ptd-verify --mmap turns it into exit 2).
struct BundlePaths {
  std::string ptd;
  std::optional<std::string> manifest;
  std::optional<std::string> pte;
  bool use_mmap = false;
};

// Opens the files of `paths`. NotFound, PermissionDenied or Unavailable
// (see OpenMmapFile) for the first that cannot be opened.
absl::StatusOr<BundleSources> OpenBundleSources(const BundlePaths& paths);

class WeightBundle {
 public:
  // Runs every check, appending each error and warning to `report`. Never
  // fails: a part that cannot be read is absent from the bundle and its
  // errors are in the report. An input that could not be read at all (an
  // I/O error, not a rule) is in io_error().
  static WeightBundle Verify(const BundleSources& sources, Report* report);
  // The same from paths (OpenBundleSources). A file that cannot be opened
  // is io_error() (NotFound, PermissionDenied, ...) and nothing is checked:
  // the bundle is empty and `report` unchanged.
  static WeightBundle Verify(const BundlePaths& paths, Report* report);

  // For use: the first error (rule or I/O) as a Status, naming the file,
  // the rule and both numbers.
  static absl::StatusOr<WeightBundle> Open(const BundleSources& sources);
  static absl::StatusOr<WeightBundle> Open(const BundlePaths& paths);

  WeightBundle(WeightBundle&&) = default;
  WeightBundle& operator=(WeightBundle&&) = default;
  WeightBundle(const WeightBundle&) = delete;
  WeightBundle& operator=(const WeightBundle&) = delete;

  // The container; null when it could not be decoded.
  const Container* container() const { return container_.get(); }
  // The program when a .pte was given and could be decoded.
  const Program* program() const { return program_.get(); }
  // Every decoded manifest, standalone first, then the .pte's in order.
  const std::vector<SourcedManifest>& manifests() const { return *manifests_; }
  // The resolved weights, parallel to manifests(); absent without manifests.
  const std::optional<WeightSet>& weights() const { return weights_; }
  // The standalone manifest file's path, when one was given.
  const std::optional<std::string>& manifest_path() const { return manifest_path_; }
  // Set when an input could not be read (not a rule violation).
  const std::optional<absl::Status>& io_error() const { return io_error_; }

 private:
  WeightBundle() : manifests_(std::make_unique<std::vector<SourcedManifest>>()) {}

  void ReadManifestFile(const FileSource& source, Report* report);
  void ReadProgram(std::shared_ptr<const FileSource> source, Report* report);
  void CheckLibraryKeys(Report* report) const;  // P3.

  std::unique_ptr<Container> container_;
  std::unique_ptr<Program> program_;
  // Behind a pointer so that the WeightSet's pointers into it survive moves.
  std::unique_ptr<std::vector<SourcedManifest>> manifests_;
  std::optional<WeightSet> weights_;
  std::optional<absl::Status> io_error_;
  std::optional<std::string> manifest_path_;
};

}  // namespace ptd

#endif  // PTD_WEIGHT_BUNDLE_H_
