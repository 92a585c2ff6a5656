// Upstream as an oracle: every .ptd our writer produces here, and every
// conformance .ptd our reader accepts, loads in upstream's FlatTensorDataMap
// with the same keys in the same order, the same sizes and the same bytes
// (and the same layouts where a key has one).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/executorch/container_data_map.h"
#include "ptd/ptd_writer.h"
#include "tests/executorch/et_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::executorch::runtime::Error;
using ::ptd::testing::ErrorName;
using ::ptd::testing::TempDir;
using ::ptd::testing::UpstreamMap;

// Compares ours with upstream over both of upstream's loaders.
void ExpectSameAsUpstream(const std::string& path) {
  SCOPED_TRACE(path);
  auto ours = ContainerDataMap::OpenFile(path);
  ASSERT_TRUE(ours.ok()) << ours.status();
  const Container& c = (*ours)->container();
  for (auto loader : {UpstreamMap::Loader::kFile, UpstreamMap::Loader::kMmap}) {
    auto up = UpstreamMap::Open(path, loader);
    ASSERT_TRUE(up->map.has_value()) << "upstream: " << ErrorName(up->error);
    const auto& u = *up->map;
    ASSERT_EQ(u.get_num_keys().get(), c.named_data().size());
    ASSERT_EQ((*ours)->get_num_keys().get(), c.named_data().size());
    for (uint32_t i = 0; i < c.named_data().size(); ++i) {
      const NamedDataEntry& e = c.named_data()[i];
      SCOPED_TRACE(e.key);
      ASSERT_STREQ(u.get_key(i).get(), std::string(e.key).c_str());
      ASSERT_STREQ((*ours)->get_key(i).get(), std::string(e.key).c_str());
      auto ub = u.get_data(e.key);
      auto ob = (*ours)->get_data(e.key);
      ASSERT_TRUE(ub.ok()) << ErrorName(ub.error());
      ASSERT_TRUE(ob.ok());
      auto bytes = c.Get(e.key);
      ASSERT_TRUE(bytes.ok());
      ASSERT_EQ(ub->size(), bytes->size());
      ASSERT_EQ(ob->size(), bytes->size());
      if (bytes->size() > 0) {
        EXPECT_EQ(std::memcmp(ub->data(), bytes->data(), bytes->size()), 0);
        EXPECT_EQ(std::memcmp(ob->data(), bytes->data(), bytes->size()), 0);
      }
      if (e.layout == nullptr) {
        // Upstream would crash here; ours says NotFound.
        EXPECT_EQ((*ours)->get_tensor_layout(e.key).error(), Error::NotFound);
        continue;
      }
      auto ul = u.get_tensor_layout(e.key);
      auto ol = (*ours)->get_tensor_layout(e.key);
      ASSERT_TRUE(ul.ok()) << ErrorName(ul.error());
      ASSERT_TRUE(ol.ok()) << ErrorName(ol.error());
      EXPECT_EQ(static_cast<int>(ul->scalar_type()), e.layout->scalar_type);
      EXPECT_EQ(ol->scalar_type(), ul->scalar_type());
      EXPECT_EQ(ol->nbytes(), ul->nbytes());
      ASSERT_EQ(ul->sizes().size(), e.layout->sizes.size());
      ASSERT_EQ(ol->sizes().size(), e.layout->sizes.size());
      for (size_t d = 0; d < e.layout->sizes.size(); ++d) {
        EXPECT_EQ(ul->sizes()[d], e.layout->sizes[d]);
        EXPECT_EQ(ul->dim_order()[d], e.layout->dim_order[d]);
        EXPECT_EQ(ol->sizes()[d], e.layout->sizes[d]);
        EXPECT_EQ(ol->dim_order()[d], e.layout->dim_order[d]);
      }
      const size_t n = ul->nbytes();
      std::vector<uint8_t> a(n + 1, 0x5A), b(n + 1, 0x5A);
      EXPECT_EQ(u.load_data_into(e.key, b.data(), n), Error::Ok);
      EXPECT_EQ((*ours)->load_data_into(e.key, a.data(), n), Error::Ok);
      EXPECT_EQ(a, b);
    }
    uint8_t x;
    EXPECT_EQ(u.get_data("\x01no such key").error(), Error::NotFound);
    EXPECT_EQ((*ours)->load_data_into("\x01no such key", &x, 1), Error::NotFound);
  }
}

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TensorLayout Layout(int32_t type, std::vector<int32_t> sizes, std::vector<uint8_t> dim_order = {}) {
  TensorLayout l;
  l.scalar_type = type;
  if (dim_order.empty()) {
    for (size_t i = 0; i < sizes.size(); ++i) dim_order.push_back(static_cast<uint8_t>(i));
  }
  l.sizes = std::move(sizes);
  l.dim_order = std::move(dim_order);
  return l;
}

class OracleTest : public ::testing::Test {
 protected:
  void Check(const PtdWriter& w) {
    const std::string path = dir_.File(absl::StrCat("w", n_++, ".ptd"));
    ASSERT_TRUE(w.Write(path).ok());
    ExpectSameAsUpstream(path);
  }
  TempDir dir_;
  int n_ = 0;
};

TEST_F(OracleTest, WriterLayoutsOfSeveralDtypes) {
  PtdWriter w;
  ASSERT_TRUE(w.Add("linear.weight", Bytes(24, 1), 16, Layout(6, {2, 3})).ok());
  ASSERT_TRUE(w.Add("emb.weight", Bytes(8, 2), 16, Layout(15, {4})).ok());
  ASSERT_TRUE(w.Add("q", Bytes(16, 3), 1, Layout(1, {16})).ok());
  ASSERT_TRUE(w.Add("idx", Bytes(24, 4), 64, Layout(4, {3, 1})).ok());
  ASSERT_TRUE(
      w.Add("conv.weight", Bytes(2 * 3 * 2 * 2 * 4, 5), 16, Layout(6, {2, 3, 2, 2}, {0, 2, 3, 1}))
          .ok());  // channels-last
  ASSERT_TRUE(w.Add("scalar", Bytes(8, 6), 8, Layout(7, {})).ok());
  ASSERT_TRUE(w.Add("empty", {}, 1, Layout(6, {0, 5})).ok());
  Check(w);
}

TEST_F(OracleTest, WriterSharedSegments) {
  PtdWriter w(PtdWriterOptions{.segment_alignment = 16});
  const auto shared = Bytes(64, 7);
  ASSERT_TRUE(w.Add("a", shared, 1, Layout(6, {16})).ok());
  ASSERT_TRUE(w.Add("pad", Bytes(3, 8)).ok());
  ASSERT_TRUE(w.Add("b", shared, 256, Layout(6, {4, 4})).ok());
  ASSERT_TRUE(w.Add("c", shared, 32).ok());                         // Same bytes, no layout.
  ASSERT_TRUE(w.Add("d_prefix", shared, 1, Layout(0, {10})).ok());  // First 10 bytes.
  ASSERT_EQ(w.num_segments(), 2u);
  Check(w);
}

TEST_F(OracleTest, WriterNoLayoutsCudaStyle) {
  PtdWriter w;
  ASSERT_TRUE(w.Add("cuda_fqn_weight:cuda:layer.0.weight", Bytes(1000, 9)).ok());
  ASSERT_TRUE(w.Add("cuda_fqn_weight:cuda:layer.0.bias", Bytes(13, 10)).ok());
  ASSERT_TRUE(w.Add("cuda_fqn_weight:cpu:layer.1.weight", Bytes(1000, 9)).ok());
  ASSERT_TRUE(w.Add("cuda_fqn_weight:cuda:so_blob:_tensor_constant0", Bytes(7, 11)).ok());
  ASSERT_TRUE(w.Add("so_blob", Bytes(5000, 12)).ok());
  Check(w);
}

TEST_F(OracleTest, WriterEmptyFileAndEmptySegments) {
  Check(PtdWriter());
  PtdWriter w;
  ASSERT_TRUE(w.Add("e0", {}).ok());
  ASSERT_TRUE(w.Add("e1", {}, 1, Layout(6, {0})).ok());
  ASSERT_TRUE(w.Add("x", Bytes(5, 13)).ok());
  Check(w);
}

TEST_F(OracleTest, WriterAlignmentsAndUnicodeKeys) {
  for (uint64_t align : {1u, 16u, 128u, 4096u}) {
    SCOPED_TRACE(align);
    PtdWriter w(PtdWriterOptions{.segment_alignment = align});
    ASSERT_TRUE(w.Add("gewicht.größe", Bytes(33, 14), 1, Layout(0, {33})).ok());
    ASSERT_TRUE(w.Add("权重", Bytes(40, 15), 8, Layout(3, {10})).ok());
    ASSERT_TRUE(w.Add("k", Bytes(1, 16), 2048).ok());
    Check(w);
  }
}

// Seeded random mixes of all of the above.
TEST_F(OracleTest, WriterRandomMixes) {
  std::mt19937 rng(20250612);
  const int32_t types[] = {0, 1, 2, 3, 4, 5, 6, 7, 11, 15};
  const uint32_t sizes_of[] = {1, 1, 2, 4, 8, 2, 4, 8, 1, 2};
  for (int file = 0; file < 12; ++file) {
    PtdWriter w(PtdWriterOptions{.segment_alignment = 1u << (rng() % 8)});
    const int keys = static_cast<int>(rng() % 20);
    std::vector<std::vector<uint8_t>> pool;
    for (int k = 0; k < keys; ++k) {
      std::vector<uint8_t> data;
      if (!pool.empty() && rng() % 4 == 0) {
        data = pool[rng() % pool.size()];  // A shared segment.
      } else {
        data = Bytes(rng() % 300, rng());
        pool.push_back(data);
      }
      const uint64_t align = 1u << (rng() % 7);
      std::optional<TensorLayout> layout;
      const int t = static_cast<int>(rng() % 10);
      if (rng() % 3 != 0 && data.size() >= sizes_of[t]) {
        const int32_t n = static_cast<int32_t>(data.size() / sizes_of[t]);
        layout =
            (n % 2 == 0 && n > 0) ? Layout(types[t], {2, n / 2}, {1, 0}) : Layout(types[t], {n});
      }
      ASSERT_TRUE(w.Add(absl::StrCat("k", file, ".", k), data, align, layout).ok());
    }
    Check(w);
  }
}

// Every conformance .ptd that our reader accepts; the accepted set includes
// every container case marked "ok".
TEST(OracleConformanceTest, AcceptedConformanceFilesMatchUpstream) {
  std::vector<std::string> accepted;
  const std::string dir = ::ptd::testing::ConformancePath("files");
  std::vector<std::string> paths;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() == ".ptd") paths.push_back(f.path().string());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    if (!ContainerDataMap::OpenFile(p).ok()) continue;
    accepted.push_back(std::filesystem::path(p).filename().string());
    ExpectSameAsUpstream(p);
  }
  for (const auto& c : ::ptd::testing::ConformanceCases()) {
    if (c["expect"] != "ok") continue;
    const std::string name = std::filesystem::path(c["ptd"].get<std::string>()).filename().string();
    EXPECT_NE(std::find(accepted.begin(), accepted.end(), name), accepted.end()) << name;
  }
  EXPECT_GE(accepted.size(), 5u);
  std::printf("conformance .ptd files matched against upstream: %zu\n", accepted.size());
}

}  // namespace
}  // namespace ptd
