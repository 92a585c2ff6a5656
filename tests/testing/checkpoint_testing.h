// Builders for the extract and reweight tests: a model (.ptd + manifest) from
// storages and weights, a safetensors checkpoint from tensors, and the bytes
// a view gathers.
#ifndef PTD_TESTS_TESTING_CHECKPOINT_TESTING_H_
#define PTD_TESTS_TESTING_CHECKPOINT_TESTING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "ptd/safetensors.h"
#include "ptd/weight_bundle.h"
#include "tests/testing/test_util.h"

namespace ptd::testing {

// One manifest weight: a view of storage `key`.
struct ModelWeight {
  std::string fqn;
  std::string key;
  int32_t dtype = 6;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

using Storages = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

// Writes NAME.ptd (the storages, by PtdWriter) and NAME.manifest (the
// weights, ETCUDAFQN0 with one variant "so") into `dir`.
BundlePaths WriteModel(const TempDir& dir, const Storages& storages,
                       const std::vector<ModelWeight>& weights, const std::string& name = "model");

// One checkpoint tensor: its safetensors dtype name, shape and bytes.
struct CheckpointTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes `tensors` as a safetensors file (the library's writer).
void WriteCheckpoint(const std::string& path, const std::vector<CheckpointTensor>& tensors);

// n bytes start, start + step, ... (mod 256).
std::vector<uint8_t> Iota(size_t n, uint8_t start = 0, uint8_t step = 7);

// The bytes `w`'s view of `storage` gathers, row-major (elements of `e` bytes).
std::vector<uint8_t> Gather(const std::vector<uint8_t>& storage, const ModelWeight& w, uint32_t e);

// A safetensors file, opened; and tensor `name`'s bytes in it.
absl::StatusOr<SafetensorsFile> OpenSafetensors(const std::string& path);
std::vector<uint8_t> TensorBytes(const SafetensorsFile& f, const std::string& name);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_CHECKPOINT_TESTING_H_
