#include "tests/testing/loader_testing.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "ptd/weight_writer.h"
#include "tests/testing/test_util.h"

namespace ptd::testing {

TestModel WriteTestModel(const std::string& dir, const std::vector<uint64_t>& sizes,
                         bool with_cpu_weight) {
  CudaWeightWriter writer("so_blob");
  TestModel m;
  m.ptd = dir + "/model.ptd";
  m.manifest = dir + "/model.manifest";
  const auto add = [&](const std::string& fqn, uint64_t nbytes, int32_t device_type,
                       uint64_t seed) {
    std::vector<uint8_t> bytes(nbytes);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& b : bytes) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b = static_cast<uint8_t>(x);
    }
    const std::vector<int64_t> shape = {static_cast<int64_t>(nbytes / 4)};
    const std::vector<int64_t> stride = {1};
    WeightSpec w{.fqn = fqn,
                 .dtype = 6,
                 .device_type = device_type,
                 .value = {.storage = bytes, .sizes = shape, .strides = stride,
                           .is_original_storage = true},
                 .properties = {.offset = 0, .shape = shape, .stride = stride}};
    const absl::Status st = writer.Add(w);
    if (!st.ok()) throw std::runtime_error(st.ToString());
    m.fqns.push_back(fqn);
    m.sizes.push_back(nbytes);
    m.data_bytes += nbytes;
  };
  for (size_t i = 0; i < sizes.size(); ++i) add(absl::StrCat("w", i), sizes[i], 1, i + 1);
  if (with_cpu_weight) add("cpu.table", 64, 0, 1000);
  const absl::Status st = writer.Write(m.ptd, m.manifest);
  if (!st.ok()) throw std::runtime_error(st.ToString());
  return m;
}

std::vector<BundlePaths> ConformanceRoutes(const nlohmann::json& tc) {
  std::vector<BundlePaths> routes;
  const std::string ptd = ConformancePath(tc["ptd"]);
  if (tc["kind"] == "container") {
    routes.push_back(BundlePaths{.ptd = ptd});
  } else {
    if (!tc.contains("via")) {
      routes.push_back({.ptd = ptd, .manifest = ConformancePath(tc["manifest"])});
    }
    if (tc.contains("pte")) routes.push_back({.ptd = ptd, .pte = ConformancePath(tc["pte"])});
  }
  return routes;
}

}  // namespace ptd::testing
