#include "tests/testing/loader_testing.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "ptd/weight_writer.h"
#include "tests/testing/test_util.h"

namespace ptd::testing {

TestModel WriteTestModel(const std::string& dir, const std::vector<uint64_t>& sizes,
                         bool with_cpu_weight, uint64_t segment_alignment) {
  CudaWeightWriter writer("so_blob", {}, PtdWriterOptions{.segment_alignment = segment_alignment});
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
    WeightSpec w{
        .fqn = fqn,
        .dtype = 6,
        .device_type = device_type,
        .value = {.storage = bytes, .sizes = shape, .strides = stride, .is_original_storage = true},
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

std::vector<std::string> ExpectLoadedAsCase(const nlohmann::json& tc, const LoadedWeights& w,
                                            DeviceKind device) {
  std::vector<std::string> checked;
  if (tc.contains("named_data")) {
    for (const auto& nd : tc["named_data"]) {
      const std::string key = nd["key"];
      const LoadedStorage* s = w.FindStorage(key);
      EXPECT_NE(s, nullptr) << key;
      if (s == nullptr) continue;
      EXPECT_EQ(s->nbytes, nd["size"].get<uint64_t>()) << key;
      auto d = DigestLoadedStorage(w, *s);
      EXPECT_TRUE(d.ok()) << key << ": " << d.status();
      if (d.ok()) {
        EXPECT_EQ(*d, nd["sha256"].get<std::string>()) << key;
      }
    }
  }
  if (!tc.contains("weights")) return checked;
  // Runtime-owned entries (no digest in cases.json) are listed, never loaded
  // (SPEC section 2).
  EXPECT_EQ(w.weights().size() + w.runtime_owned().size(), tc["weights"].size());
  for (const auto& want : tc["weights"]) {
    const std::string fqn = want["fqn"];
    if (want["sha256"].is_null()) {
      EXPECT_EQ(w.Find(fqn), nullptr) << fqn;
      EXPECT_EQ(w.FindStorage(want["storage_key"].get<std::string>()), nullptr) << fqn;
      continue;
    }
    const LoadedWeight* lw = w.Find(fqn);
    EXPECT_NE(lw, nullptr) << fqn;
    if (lw == nullptr) continue;
    EXPECT_EQ(lw->sizes, want["sizes"].get<std::vector<int64_t>>()) << fqn;
    EXPECT_EQ(lw->strides, want["strides"].get<std::vector<int64_t>>()) << fqn;
    EXPECT_EQ(lw->storage_offset, want["storage_offset"].get<int64_t>()) << fqn;
    EXPECT_EQ(lw->device, want["device_type"] == kDeviceTypeCpu ? DeviceKind::kHost : device)
        << fqn;
    auto d = DigestLoadedWeight(w, *lw);  // Read back and gathered.
    EXPECT_TRUE(d.ok()) << fqn << ": " << d.status();
    if (d.ok()) {
      EXPECT_EQ(*d, want["sha256"].get<std::string>()) << fqn;
    }
    checked.push_back(fqn);
  }
  return checked;
}

void ExpectSameBytes(const LoadedWeights& w, const LoadedWeights& reference,
                     const std::vector<std::string>& fqns) {
  for (const std::string& f : fqns) {
    const LoadedWeight* a = w.Find(f);
    const LoadedWeight* b = reference.Find(f);
    ASSERT_TRUE(a && b) << f;
    EXPECT_EQ(DigestLoadedWeight(w, *a).value(), DigestLoadedWeight(reference, *b).value()) << f;
  }
}

}  // namespace ptd::testing
