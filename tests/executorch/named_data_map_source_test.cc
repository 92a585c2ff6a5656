// The loader over ExecuTorch NamedDataMaps (ptd/executorch/named_data_map_source.h):
// upstream's FlatTensorDataMap (FileDataLoader and MmapDataLoader over real
// files) and our ContainerDataMap give the same loaded bytes as loading from
// the container directly, on the host and through a staging ring small
// enough that storages are read in chunks; conformance cases land with their
// expected digests; a missing key is X1, a wrong size G3, a failing map a
// Status naming the key, with nothing left allocated; subsets read only
// their keys.
#include "ptd/executorch/named_data_map_source.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/byte_source.h"
#include "ptd/executorch/container_data_map.h"
#include "ptd/host_device.h"
#include "ptd/manifest.h"
#include "ptd/testing/fault_device.h"
#include "tests/executorch/et_testing.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::executorch::runtime::Error;
using ::executorch::runtime::FreeableBuffer;
using ::executorch::runtime::NamedDataMap;
using ::executorch::runtime::Result;
using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::ErrorName;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::UpstreamMap;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;

// Forwards to another map; counts get_data/load_data_into per key and fails
// the Nth call (1-based, counted per key) for one key.
class FailingMap final : public NamedDataMap {
 public:
  explicit FailingMap(const NamedDataMap& inner) : inner_(inner) {}
  void FailKey(std::string key, int nth, Error error) {
    fail_key_ = std::move(key);
    fail_nth_ = nth;
    fail_error_ = error;
  }
  int calls(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(key);
    return it == calls_.end() ? 0 : it->second;
  }

  Result<const ::executorch::runtime::TensorLayout> get_tensor_layout(
      std::string_view key) const override {
    return inner_.get_tensor_layout(key);
  }
  Result<FreeableBuffer> get_data(std::string_view key) const override {
    if (Fails(key)) return fail_error_;
    return inner_.get_data(key);
  }
  Error load_data_into(std::string_view key, void* buffer, size_t size) const override {
    if (Fails(key)) return fail_error_;
    return inner_.load_data_into(key, buffer, size);
  }
  Result<uint32_t> get_num_keys() const override { return inner_.get_num_keys(); }
  Result<const char*> get_key(uint32_t index) const override { return inner_.get_key(index); }

 private:
  bool Fails(std::string_view key) const {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = ++calls_[std::string(key)];
    return key == fail_key_ && n == fail_nth_;
  }
  const NamedDataMap& inner_;
  std::string fail_key_;
  int fail_nth_ = 0;
  Error fail_error_ = Error::AccessFailed;
  mutable std::mutex mu_;
  mutable std::map<std::string, int> calls_;
};

// A host device, or one the host cannot address with a deferred-copy
// staging ring.
std::shared_ptr<Device> MakeDevice(bool staged) {
  if (!staged) return std::make_shared<HostDevice>();
  return std::make_shared<FaultDevice>(std::make_shared<HostDevice>(),
                                       FaultPlan{.host_accessible = false, .defer_copies = true});
}

// fqn -> sha256 of every loaded weight.
std::map<std::string, std::string> Digests(const LoadedWeights& w) {
  std::map<std::string, std::string> out;
  for (const LoadedWeight& lw : w.weights()) {
    auto d = DigestLoadedWeight(w, lw);
    EXPECT_TRUE(d.ok()) << d.status();
    out[std::string(lw.fqn)] = d.value_or("");
  }
  return out;
}

class NamedDataMapSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Storages below, at and above the small ring slot used below, odd ones.
    model_ = WriteTestModel(dir_.path(), {4 * kKiB, 64 * kKiB, 300 * kKiB + 4, 1024 * kKiB, 12});
    manifest_ = ReadFileBytes(model_.manifest);
    auto direct = LoadWeights(BundlePaths{.ptd = model_.ptd, .manifest = model_.manifest},
                              std::make_shared<HostDevice>());
    ASSERT_TRUE(direct.ok()) << direct.status();
    expected_ = Digests(*direct);
    ASSERT_EQ(expected_.size(), model_.fqns.size());
  }

  // Loads through `map` on both devices and compares with the direct load.
  void ExpectSameAsDirect(const NamedDataMap& map, NamedDataMapSourceOptions so = {}) {
    for (bool staged : {false, true}) {
      SCOPED_TRACE(staged ? "staged (64 KiB slots)" : "host");
      auto device = MakeDevice(staged);
      {
        auto w = LoadWeightsFromNamedDataMap(manifest_, map, device,
                                             LoadOptions{.ring_slot_bytes = 64 * kKiB}, so);
        ASSERT_TRUE(w.ok()) << w.status();
        EXPECT_EQ(Digests(*w), expected_);
        EXPECT_EQ(w->stats().storages, model_.fqns.size());
        EXPECT_EQ(w->stats().bytes, model_.data_bytes);
      }
      EXPECT_EQ(device->stats().live_allocations, 0u);
      EXPECT_EQ(device->stats().live_staging_bytes, 0u);
    }
  }

  TempDir dir_;
  TestModel model_;
  std::vector<uint8_t> manifest_;
  std::map<std::string, std::string> expected_;
};

TEST_F(NamedDataMapSourceTest, UpstreamFileLoaderMapLoadsWhatTheContainerLoads) {
  auto up = UpstreamMap::Open(model_.ptd, UpstreamMap::Loader::kFile);
  ASSERT_TRUE(up->map.has_value()) << ErrorName(up->error);
  ExpectSameAsDirect(*up->map);
}

TEST_F(NamedDataMapSourceTest, UpstreamMmapLoaderMapLoadsWhatTheContainerLoads) {
  auto up = UpstreamMap::Open(model_.ptd, UpstreamMap::Loader::kMmap);
  ASSERT_TRUE(up->map.has_value()) << ErrorName(up->error);
  ExpectSameAsDirect(*up->map);
}

TEST_F(NamedDataMapSourceTest, ContainerDataMapLoadsWhatTheContainerLoads) {
  for (auto access : {ContainerDataMap::Access::kMmap, ContainerDataMap::Access::kPread}) {
    auto m = ContainerDataMap::OpenFile(model_.ptd, access);
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectSameAsDirect(**m);
    ExpectSameAsDirect(**m, NamedDataMapSourceOptions{.use_load_data_into = true});
  }
}

// A map's keys have no file locations: on a staging device they are packed
// into each slot, one run in device memory, so that a slot is one copy (not
// a slot's round trip per storage). 65,536 storages of 1,000 B.
TEST(NamedDataMapSourcePackingTest, SmallStoragesShareSlotsAndCopies) {
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), std::vector<uint64_t>(65536, 1000));
  const std::vector<uint8_t> manifest = ReadFileBytes(model.manifest);
  auto direct = LoadWeights(BundlePaths{.ptd = model.ptd, .manifest = model.manifest},
                            std::make_shared<HostDevice>());
  ASSERT_TRUE(direct.ok()) << direct.status();
  auto map = ContainerDataMap::OpenFile(model.ptd, ContainerDataMap::Access::kPread);
  ASSERT_TRUE(map.ok()) << map.status();
  auto device = std::make_shared<FaultDevice>(std::make_shared<HostDevice>(),
                                              FaultPlan{.host_accessible = false});
  {
    auto w = LoadWeightsFromNamedDataMap(manifest, **map, device);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(Digests(*w), Digests(*direct));
    // Copy requests after the loader's merge: at most one per 1 MiB loaded.
    const uint64_t copies = device->counts().copies;
    std::printf("[          ] 65,536 x 1,000 B through the map: %llu copies, %llu reads\n",
                static_cast<unsigned long long>(copies),
                static_cast<unsigned long long>(w->stats().reads));
    EXPECT_LE(copies, 1 + w->stats().bytes / (1 << 20)) << copies << " copies";
    EXPECT_EQ(w->stats().reads, 65536u);  // Each key read by itself, into shared slots.
    for (const LoadedStorage& s : w->storages()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(s.buffer.data()) % 64, 0u);
    }
  }
  EXPECT_EQ(device->stats().live_allocations, 0u);
}

TEST_F(NamedDataMapSourceTest, ByteSourceReadsKeysWholeAndInChunks) {
  auto up = UpstreamMap::Open(model_.ptd);
  ASSERT_TRUE(up->map.has_value());
  auto ours = ContainerDataMap::OpenFile(model_.ptd);
  ASSERT_TRUE(ours.ok());
  const auto src = MakeNamedDataMapByteSource(*up->map, {.name = "up.ptd"});
  const auto ref = MakeContainerByteSource((*ours)->container());
  EXPECT_EQ(src->name(), "up.ptd");
  EXPECT_EQ(src->Keys(), ref->Keys());
  EXPECT_FALSE(src->Locate(src->Keys()[0]).has_value());
  for (const std::string& key : ref->Keys()) {
    SCOPED_TRACE(key);
    const uint64_t size = ref->Size(key).value();
    ASSERT_EQ(src->Size(key).value(), size);
    std::vector<uint8_t> want(size), whole(size), chunked(size);
    ASSERT_TRUE(ref->ReadAt(key, 0, absl::MakeSpan(want)).ok());
    ASSERT_TRUE(src->ReadAt(key, 0, absl::MakeSpan(whole)).ok());
    EXPECT_EQ(whole, want);
    for (uint64_t at = 0; at < size; at += 5000) {
      const uint64_t n = std::min<uint64_t>(5000, size - at);
      ASSERT_TRUE(src->ReadAt(key, at, absl::MakeSpan(chunked).subspan(at, n)).ok());
    }
    EXPECT_EQ(chunked, want);
    uint8_t b[2];
    const auto past = src->ReadAt(key, size - 1, absl::MakeSpan(b));
    EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
    EXPECT_THAT(past.message(), HasSubstr(key));
  }
  const auto none = src->Size("no such key");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("up.ptd: get_data of key 'no such key'"));
}

TEST_F(NamedDataMapSourceTest, MissingKeyIsX1AndWrongSizeIsG3NothingAllocated) {
  auto up = UpstreamMap::Open(model_.ptd);
  ASSERT_TRUE(up->map.has_value());
  const Manifest m = ParseManifest(manifest_).value();
  struct Case {
    const char* name;
    std::function<void(Manifest&)> mutate;
    absl::StatusCode code;
    const char* rule;
  };
  const std::vector<Case> cases = {
      {"missing key", [](Manifest& x) { x.entries[1].storage_key = "cuda_fqn_weight:cuda:gone"; },
       absl::StatusCode::kNotFound, "(X1)"},
      {"wrong size", [](Manifest& x) { x.entries[2].storage_nbytes += 4; },
       absl::StatusCode::kDataLoss, "(G3)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Manifest bad = m;
    c.mutate(bad);
    auto device = MakeDevice(true);
    auto w = LoadWeightsFromNamedDataMap(EncodeManifest(bad).value(), *up->map, device);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), c.code) << w.status();
    EXPECT_THAT(w.status().message(), HasSubstr(c.rule));
    EXPECT_EQ(device->stats().allocations, 0u);
    EXPECT_EQ(device->stats().staging_allocations, 0u);
  }
}

TEST_F(NamedDataMapSourceTest, FailingMapNamesTheKeyAndFreesEverything) {
  auto up = UpstreamMap::Open(model_.ptd);
  ASSERT_TRUE(up->map.has_value());
  const std::string key = "cuda_fqn_weight:cuda:w3";  // 1 MiB: read in chunks when staged.
  struct Case {
    const char* name;
    int nth;  // 1: when sizing; 2: when reading.
    bool staged;
    const char* phase;
  };
  for (const Case& c :
       {Case{"sizing", 1, false, "get_data of key"}, Case{"read (host)", 2, false, "): read: "},
        Case{"read (staged, chunks)", 2, true, "): read: "}}) {
    SCOPED_TRACE(c.name);
    FailingMap map(*up->map);
    map.FailKey(key, c.nth, Error::AccessFailed);
    auto device = MakeDevice(c.staged);
    {
      auto w = LoadWeightsFromNamedDataMap(manifest_, map, device,
                                           LoadOptions{.ring_slot_bytes = 64 * kKiB});
      ASSERT_FALSE(w.ok());
      EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
      EXPECT_THAT(w.status().message(), HasSubstr("'" + key + "'"));
      EXPECT_THAT(std::string(w.status().message()), HasSubstr("Error::AccessFailed (0x22)"));
      EXPECT_THAT(w.status().message(), HasSubstr(c.phase));
      if (c.nth == 1) {
        EXPECT_EQ(device->stats().allocations, 0u);
      }
    }
    EXPECT_EQ(device->stats().live_allocations, 0u);
    EXPECT_EQ(device->stats().live_staging_bytes, 0u);
  }
  // load_data_into's failure too.
  auto ours = ContainerDataMap::OpenFile(model_.ptd);
  ASSERT_TRUE(ours.ok());
  FailingMap map(**ours);
  map.FailKey("cuda_fqn_weight:cuda:w0", 2, Error::MemoryAllocationFailed);
  auto w = LoadWeightsFromNamedDataMap(manifest_, map, MakeDevice(false), {},
                                       {.name = "model.ptd", .use_load_data_into = true});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
  EXPECT_THAT(w.status().message(),
              HasSubstr("model.ptd: load_data_into of key 'cuda_fqn_weight:cuda:w0' failed"));
}

TEST_F(NamedDataMapSourceTest, SubsetReadsOnlyItsKeys) {
  auto up = UpstreamMap::Open(model_.ptd);
  ASSERT_TRUE(up->map.has_value());
  FailingMap map(*up->map);  // Counts only.
  auto w = LoadWeightsFromNamedDataMap(manifest_, map, MakeDevice(true),
                                       LoadOptions{.fqns = {"w2"}, .ring_slot_bytes = 64 * kKiB});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->weights().size(), 1u);
  EXPECT_EQ(Digests(*w), (std::map<std::string, std::string>{{"w2", expected_.at("w2")}}));
  EXPECT_EQ(w->stats().bytes, model_.sizes[2]);
  // Every key is sized once (verification); only w2's is read, once (its
  // chunks share one get_data).
  EXPECT_EQ(map.calls("cuda_fqn_weight:cuda:w2"), 2);
  EXPECT_EQ(map.calls("cuda_fqn_weight:cuda:w3"), 1);
  EXPECT_EQ(map.calls("cuda_fqn_weight:cuda:w0"), 1);
}

// Every ok conformance case with a manifest, through upstream's map over the
// upstream-written file: the expected digest of every weight.
TEST(NamedDataMapSourceConformanceTest, UpstreamMapGivesExpectedDigests) {
  int cases = 0;
  for (const auto& tc : ConformanceCases()) {
    if (tc["expect"] != "ok" || !tc.contains("manifest") || !tc.contains("weights")) continue;
    SCOPED_TRACE(tc["name"].get<std::string>());
    ++cases;
    auto up = UpstreamMap::Open(ConformancePath(tc["ptd"]));
    ASSERT_TRUE(up->map.has_value()) << ErrorName(up->error);
    const std::vector<uint8_t> manifest = ReadFileBytes(ConformancePath(tc["manifest"]));
    for (bool staged : {false, true}) {
      auto device = MakeDevice(staged);
      auto w = LoadWeightsFromNamedDataMap(manifest, *up->map, device);
      ASSERT_TRUE(w.ok()) << w.status();
      // Runtime-owned entries (no digest) are listed, not loaded.
      ASSERT_EQ(w->weights().size() + w->runtime_owned().size(), tc["weights"].size());
      for (const auto& want : tc["weights"]) {
        if (want["sha256"].is_null()) {
          EXPECT_EQ(w->Find(want["fqn"].get<std::string>()), nullptr) << want["fqn"];
          continue;
        }
        const LoadedWeight* lw = w->Find(want["fqn"].get<std::string>());
        ASSERT_NE(lw, nullptr) << want["fqn"];
        auto d = DigestLoadedWeight(*w, *lw);
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_EQ(*d, want["sha256"].get<std::string>()) << want["fqn"];
      }
    }
  }
  EXPECT_GE(cases, 2);
}

// Runtime-owned entries (SPEC section 2): upstream's runtime never looks
// their storage keys up, and neither does the backend's entry point, even
// when the .ptd stores them (k05, warning R1 in the verifier).
TEST(NamedDataMapSourceConformanceTest, RuntimeOwnedKeysAreNeverAskedFor) {
  const std::string ptd = ConformancePath("files/k05_offgraph_kv_stored_zero_blob.ptd");
  auto up = UpstreamMap::Open(ptd);
  ASSERT_TRUE(up->map.has_value()) << ErrorName(up->error);
  FailingMap map(*up->map);  // Counts only.
  const std::vector<uint8_t> manifest =
      ReadFileBytes(ConformancePath("files/k05_offgraph_kv_stored_zero_blob.manifest"));
  auto w = LoadWeightsFromNamedDataMap(manifest, map, MakeDevice(true));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->weights().size(), 5u);
  ASSERT_EQ(w->runtime_owned().size(), 4u);
  for (const RuntimeOwnedWeight& r : w->runtime_owned()) {
    EXPECT_EQ(map.calls(std::string(r.storage_key)), 0) << r.storage_key;
  }
  EXPECT_GE(map.calls("cuda_fqn_weight:cuda:layers.0.attn.qkv"), 1);
}

}  // namespace
}  // namespace ptd
