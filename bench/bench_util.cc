#include "bench/bench_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

#include "ptd/container.h"
#include "ptd/ptd_writer.h"
#include "ptd/weight_writer.h"

namespace ptd::bench {

void CheckOk(const absl::Status& status, std::string_view what) {
  if (status.ok()) return;
  std::fprintf(stderr, "ptd_bench: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               status.ToString().c_str());
  std::abort();
}

double LoopRate::BytesPerSecond(uint64_t bytes_per_iteration, int64_t iterations) const {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  if (elapsed.count() <= 0) return 0;
  return static_cast<double>(bytes_per_iteration) * static_cast<double>(iterations) /
         elapsed.count();
}

std::shared_ptr<const FileSource> SmallKeyPtd(int64_t n) {
  PtdWriter writer;
  uint8_t bytes[16];
  for (int64_t i = 0; i < n; ++i) {
    FillPattern(static_cast<uint64_t>(i) + 1, bytes, sizeof(bytes));
    const std::string key = absl::StrCat("model.layers.", i, ".weight");
    CheckOk(writer.Add(key, bytes), key);
  }
  auto file = writer.Serialize();
  CheckOk(file.status(), "SmallKeyPtd");
  return std::shared_ptr<const FileSource>(
      MemorySource(std::move(*file), absl::StrCat("<", n, " keys>")));
}

WeightSetFixture MakeWeightSet(int64_t n) {
  CudaWeightWriter writer("aoti_cuda_blob");
  const std::vector<int64_t> shape = {4, 4};
  const std::vector<int64_t> stride = {4, 1};
  std::vector<uint8_t> storage(64);
  for (int64_t i = 0; i < n; ++i) {
    FillPattern(static_cast<uint64_t>(i) + 1, storage.data(), storage.size());
    WeightSpec w{
        .fqn = absl::StrCat("model.layers.", i / 8, ".proj", i % 8, ".weight"),
        .dtype = 6,  // float32
        .device_type = 1,
        .value = {.storage = storage,
                  .storage_offset = 0,
                  .sizes = shape,
                  .strides = stride,
                  .is_original_storage = true},
        .properties = {
            .storage_size = storage.size(), .offset = 0, .shape = shape, .stride = stride}};
    CheckOk(writer.Add(w), w.fqn);
  }
  auto file = writer.ptd().Serialize();
  CheckOk(file.status(), "MakeWeightSet");
  WeightSetFixture f;
  f.ptd = std::shared_ptr<const FileSource>(
      MemorySource(std::move(*file), absl::StrCat("<", n, " weights>")));
  f.manifest = writer.manifest();
  return f;
}

}  // namespace ptd::bench
