// Tests of the loader on the host device and on staging devices (one that
// defers copies to Wait, a CUDA-like one, and AsyncDevice, whose copies
// complete later on other threads, out of order): every ok
// conformance case lands with the expected digests and one allocation per
// distinct segment; shared storages load once; subsets read only what they
// need; variants pick their library-local constants; coalescing; CPU
// weights; the ByteSource entry point verifies before allocating.
#include "ptd/loader.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/byte_source.h"
#include "ptd/container.h"
#include "ptd/host_device.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/testing/async_device.h"
#include "ptd/testing/fault_device.h"
#include "ptd/weight_bundle.h"
#include "runtime/loader/place.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::ConformanceRoutes;
using ::ptd::testing::CountingFileSource;
using ::ptd::testing::ExpectLoadedAsCase;
using ::ptd::testing::FakeCudaDevice;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;
using json = nlohmann::json;

// The devices every conformance case is loaded onto.
// kHostMapped: the host with LoadOptions::map_file.
enum class Target { kHost, kHostMapped, kStagedDeferred, kFakeCuda, kAsync };

std::shared_ptr<Device> MakeDevice(Target t) {
  switch (t) {
    case Target::kHost:
    case Target::kHostMapped:
      return std::make_shared<HostDevice>();
    case Target::kStagedDeferred:
      return std::make_shared<FaultDevice>(
          std::make_shared<HostDevice>(),
          FaultPlan{.host_accessible = false, .defer_copies = true});
    case Target::kFakeCuda:
      return std::make_shared<FakeCudaDevice>(std::nullopt);
    case Target::kAsync:
      return std::make_shared<AsyncDevice>();
  }
  return nullptr;
}

// The staging devices the loader tests below run on: one over host memory
// that copies at once, and AsyncDevice (sm 90 like FakeCudaDevice's default).
struct StagedDevice {
  const char* name;
  std::shared_ptr<Device> (*make)();
};
const StagedDevice kStagedDevices[] = {
    {"fake-cuda", [] { return std::shared_ptr<Device>(std::make_shared<FakeCudaDevice>()); }},
    {"async",
     [] {
       return std::shared_ptr<Device>(
           std::make_shared<AsyncDevice>(AsyncDeviceOptions{.compute_capability = 90}));
     }},
};

// A staging block dropped with a copy from it still in flight (AsyncDevice
// counts it; the loader must never do it).
uint64_t StagingFreedInFlight(const Device& d) {
  const auto* a = dynamic_cast<const AsyncDevice*>(&d);
  return a ? a->counts().staging_freed_in_flight : 0;
}

// Distinct segments behind `keys` in the .ptd.
size_t DistinctSegments(const std::string& ptd, const std::vector<std::string>& keys) {
  auto b = WeightBundle::Open(BundlePaths{.ptd = ptd});
  EXPECT_TRUE(b.ok()) << b.status();
  std::set<uint32_t> segs;
  for (const std::string& k : keys) {
    const NamedDataEntry* e = b->container()->Find(k);
    EXPECT_NE(e, nullptr) << k;
    if (e) segs.insert(e->segment_index);
  }
  return segs.size();
}

// The manifest entry of `bundle` named `fqn` (of its first manifest that
// has it), or null.
const WeightEntry* EntryOf(const WeightBundle& bundle, std::string_view fqn) {
  for (const SourcedManifest& m : bundle.manifests()) {
    for (const WeightEntry& e : m.manifest.entries) {
      if (e.fqn == fqn) return &e;
    }
  }
  return nullptr;
}

// Each route is loaded twice: by paths (the result copies its names and
// dims) and from a shared bundle (the result holds the bundle and points
// into it; the caller's reference is dropped before the checks).
void ExpectLoadsCase(const json& tc, Target target) {
  const std::string ptd = ConformancePath(tc["ptd"]);
  for (const BundlePaths& paths : ConformanceRoutes(tc)) {
    for (const bool shared : {false, true}) {
      SCOPED_TRACE(paths.pte ? "pte" : paths.manifest ? "manifest" : "container");
      SCOPED_TRACE(shared ? "shared bundle" : "by paths");
      std::shared_ptr<Device> device = MakeDevice(target);
      // By paths, each key gets its own storage (the default); from a shared
      // bundle, keys on one segment share one (LoadOptions::share_segments).
      const LoadOptions options{.map_file = target == Target::kHostMapped,
                                .share_segments = shared};
      std::weak_ptr<const WeightBundle> kept;
      {
        absl::StatusOr<LoadedWeights> w = absl::UnknownError("not loaded");
        if (shared) {
          auto opened = WeightBundle::Open(paths);
          ASSERT_TRUE(opened.ok()) << opened.status();
          auto bundle = std::make_shared<const WeightBundle>(*std::move(opened));
          kept = bundle;
          w = LoadWeights(std::move(bundle), device, options);
        } else {
          w = LoadWeights(paths, device, options);
        }
        ASSERT_TRUE(w.ok()) << w.status();
        const std::shared_ptr<const WeightBundle> bundle = kept.lock();
        // Held by the result alone (when it has manifests to point into).
        EXPECT_EQ(bundle != nullptr, shared && tc["kind"] != "container");
        // Storages and weights as cases.json says (ExpectLoadedAsCase); then
        // what only a host load shows.
        const std::vector<std::string> loaded = ExpectLoadedAsCase(tc, *w, device->kind());
        std::vector<std::string> keys;
        for (const auto& nd : tc.value("named_data", json::array())) keys.push_back(nd["key"]);
        if (tc.contains("weights")) {
          EXPECT_EQ(w->stats().runtime_owned, w->runtime_owned().size());
          for (const auto& want : tc["weights"]) {
            const std::string fqn = want["fqn"];
            if (want["sha256"].is_null()) {
              // Runtime-owned: listed with its view (SPEC section 2).
              const auto owned =
                  std::find_if(w->runtime_owned().begin(), w->runtime_owned().end(),
                               [&](const RuntimeOwnedWeight& r) { return r.fqn == fqn; });
              ASSERT_NE(owned, w->runtime_owned().end()) << fqn;
              EXPECT_EQ(owned->sizes, want["sizes"].get<std::vector<int64_t>>());
              EXPECT_EQ(owned->strides, want["strides"].get<std::vector<int64_t>>());
              EXPECT_EQ(owned->required_nbytes, want["required_nbytes"].get<uint64_t>());
              if (bundle != nullptr) {
                const WeightEntry* e = EntryOf(*bundle, fqn);
                ASSERT_NE(e, nullptr) << fqn;
                EXPECT_EQ(owned->fqn.data(), e->fqn.data()) << fqn;
                EXPECT_EQ(owned->sizes.data(), e->sizes.data()) << fqn;
              }
              continue;
            }
            const LoadedWeight* lw = w->Find(fqn);
            ASSERT_NE(lw, nullptr) << fqn;
            keys.push_back(want["storage_key"]);
            const LoadedStorage& s = w->storage(*lw);
            EXPECT_EQ(lw->data, static_cast<uint8_t*>(s.buffer.data()) +
                                    lw->storage_offset * lw->element_size);
            if (bundle != nullptr) {
              // Views into the bundle's manifest, not copies.
              const WeightEntry* e = EntryOf(*bundle, fqn);
              ASSERT_NE(e, nullptr) << fqn;
              EXPECT_EQ(lw->fqn.data(), e->fqn.data()) << fqn;
              EXPECT_EQ(lw->storage_key, e->storage_key) << fqn;
              EXPECT_EQ(lw->sizes.data(), e->sizes.data()) << fqn;
              EXPECT_EQ(lw->strides.data(), e->strides.data()) << fqn;
            }
          }
          EXPECT_EQ(loaded.size(), w->weights().size());
        }
        // One allocation per distinct key (with share_segments, per distinct
        // segment), one AllocateMany per device.
        const size_t distinct = shared ? DistinctSegments(ptd, keys)
                                       : std::set<std::string>(keys.begin(), keys.end()).size();
        EXPECT_EQ(w->stats().storages, distinct);
        if (target == Target::kHost) {
          EXPECT_EQ(device->stats().allocations, distinct);
          EXPECT_EQ(w->stats().mapped, 0u);
        }
        if (target == Target::kHostMapped) {
          // Mapped where the file's offset keeps the host alignment, else read.
          EXPECT_EQ(device->stats().allocations + w->stats().mapped, distinct);
          uint64_t mapped_bytes = 0;
          for (const LoadedStorage& s : w->storages()) {
            if (!s.mapped) continue;
            mapped_bytes += s.nbytes;
            EXPECT_EQ(reinterpret_cast<uintptr_t>(s.buffer.data()) % kHostAlignment, 0u);
          }
          EXPECT_EQ(w->stats().mapped_bytes, mapped_bytes);
          // Every byte is mapped or read (without share_segments, keys on one
          // segment are read once for all of them: no byte twice).
          if (shared) {
            EXPECT_GE(w->stats().bytes_read + mapped_bytes, w->stats().bytes);
          }
        }
      }
      // Gone with the result.
      EXPECT_TRUE(kept.expired());
      EXPECT_EQ(device->stats().live_allocations, 0u);
      EXPECT_EQ(device->stats().live_staging_bytes, 0u);
      EXPECT_EQ(StagingFreedInFlight(*device), 0u);
    }
  }
}

class LoaderConformanceTest : public ::testing::TestWithParam<std::string> {};

const json& Case(const std::string& name) {
  for (const auto& tc : ConformanceCases()) {
    if (tc["name"] == name) return tc;
  }
  throw std::runtime_error("no case " + name);
}

TEST_P(LoaderConformanceTest, HostDeviceGetsExpectedBytes) {
  ExpectLoadsCase(Case(GetParam()), Target::kHost);
}
TEST_P(LoaderConformanceTest, MappedHostLoadGetsExpectedBytes) {
  ExpectLoadsCase(Case(GetParam()), Target::kHostMapped);
}
TEST_P(LoaderConformanceTest, StagedDeviceGetsExpectedBytes) {
  ExpectLoadsCase(Case(GetParam()), Target::kStagedDeferred);
}
TEST_P(LoaderConformanceTest, CudaLikeDeviceGetsExpectedBytes) {
  ExpectLoadsCase(Case(GetParam()), Target::kFakeCuda);
}
TEST_P(LoaderConformanceTest, AsyncDeviceGetsExpectedBytes) {
  ExpectLoadsCase(Case(GetParam()), Target::kAsync);
}

// The loader plans a bundle's storages through the resolver's container
// entries (arrays by entry and segment, no key hashing) and a ByteSource's
// through key lookups. Both must give the same storages, keys and weights,
// also with CPU weights in a second (host) group.
void ExpectBothPlansAgree(const json& tc, Target target) {
  if (tc["kind"] == "container" || tc.contains("via") || !tc.contains("manifest")) return;
  const std::string ptd = ConformancePath(tc["ptd"]);
  const std::string manifest = ConformancePath(tc["manifest"]);
  auto by_entry = LoadWeights(BundlePaths{.ptd = ptd, .manifest = manifest}, MakeDevice(target));
  ASSERT_TRUE(by_entry.ok()) << by_entry.status();
  auto container = Container::Open(OpenPreadFile(ptd).value()).value();
  const auto source = MakeContainerByteSource(*container);
  const std::vector<uint8_t> bytes = ::ptd::testing::ReadFileBytes(manifest);
  auto by_key = LoadWeights(bytes, *source, MakeDevice(target));
  ASSERT_TRUE(by_key.ok()) << by_key.status();
  ASSERT_EQ(by_entry->storages().size(), by_key->storages().size());
  for (size_t i = 0; i < by_key->storages().size(); ++i) {
    const LoadedStorage& a = by_entry->storages()[i];
    const LoadedStorage& b = by_key->storages()[i];
    EXPECT_EQ(std::vector<std::string_view>(a.keys.begin(), a.keys.end()),
              std::vector<std::string_view>(b.keys.begin(), b.keys.end()))
        << "storage " << i;
    EXPECT_EQ(a.nbytes, b.nbytes) << "storage " << i;
    EXPECT_EQ(a.device, b.device) << "storage " << i;
    for (std::string_view k : a.keys) EXPECT_EQ(by_entry->FindStorage(k), &a) << k;
  }
  ASSERT_EQ(by_entry->weights().size(), by_key->weights().size());
  for (size_t i = 0; i < by_key->weights().size(); ++i) {
    const LoadedWeight& a = by_entry->weights()[i];
    const LoadedWeight& b = by_key->weights()[i];
    EXPECT_EQ(a.fqn, b.fqn);
    EXPECT_EQ(a.storage, b.storage) << a.fqn;
    EXPECT_EQ(a.device, b.device) << a.fqn;
    EXPECT_EQ(
        static_cast<uint8_t*>(a.data) - static_cast<uint8_t*>(by_entry->storage(a).buffer.data()),
        static_cast<uint8_t*>(b.data) - static_cast<uint8_t*>(by_key->storage(b).buffer.data()))
        << a.fqn;
    EXPECT_EQ(by_entry->Find("manifest", a.fqn), &a);
  }
  EXPECT_EQ(by_entry->stats().reused, by_key->stats().reused);
  EXPECT_EQ(by_entry->stats().bytes, by_key->stats().bytes);
}

TEST_P(LoaderConformanceTest, BundleAndByteSourcePlansAgree) {
  ExpectBothPlansAgree(Case(GetParam()), Target::kHost);
  ExpectBothPlansAgree(Case(GetParam()), Target::kFakeCuda);
}

std::vector<std::string> Cases(bool ok) {
  std::vector<std::string> names;
  for (const auto& tc : ConformanceCases()) {
    if ((tc["expect"] == "ok") == ok) names.push_back(tc["name"]);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Upstream, LoaderConformanceTest, ::testing::ValuesIn(Cases(true)),
                         [](const auto& p) { return p.param; });

class LoaderRejectTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoaderRejectTest, AllocatesNothing) {
  const json& tc = Case(GetParam());
  BundlePaths paths{.ptd = ConformancePath(tc["ptd"])};
  if (tc.contains("manifest")) paths.manifest = ConformancePath(tc["manifest"]);
  if (tc.contains("via")) {
    paths.manifest.reset();
    paths.pte = ConformancePath(tc["pte"]);
  }
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(paths, device);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(device->stats().allocations, 0u);
  EXPECT_EQ(device->stats().staging_allocations, 0u);
}

INSTANTIATE_TEST_SUITE_P(Upstream, LoaderRejectTest, ::testing::ValuesIn(Cases(false)),
                         [](const auto& p) { return p.param; });

TEST(LoaderTest, ViewsOfOneStorageKeyShareOneCopy) {
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(
      BundlePaths{.ptd = ConformancePath("files/k02_one_storage_key_many_views.ptd"),
                  .manifest = ConformancePath("files/k02_one_storage_key_many_views.manifest")},
      device);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->weights().size(), 4u);
  EXPECT_EQ(w->storages().size(), 1u);
  EXPECT_EQ(device->stats().allocations, 1u);
  const LoadedWeight* q = w->Find("layers.0.attn.q");
  const LoadedWeight* k = w->Find("layers.0.attn.k");
  ASSERT_TRUE(q && k);
  EXPECT_EQ(static_cast<uint8_t*>(k->data) - static_cast<uint8_t*>(q->data), 16 * 4);
  EXPECT_EQ(w->Find("manifest", "layers.0.attn.k"), k);
  EXPECT_EQ(w->Find("nope"), nullptr);
}

// Keys whose bytes the file stores once (one segment): each gets its own
// buffer by default, since a program may write one of them in place (an
// AOTInductor program writes the buffers it mutates, and the exporter
// stores every layer's zero-filled KV cache once); with share_segments,
// one buffer serves them all.
TEST(LoaderTest, KeysOnOneSegmentGetABufferEachUnlessSharingIsAskedFor) {
  const std::string ptd = ConformancePath("files/c01_layouts_and_shared_segment.ptd");
  auto b = WeightBundle::Open(BundlePaths{.ptd = ptd});
  ASSERT_TRUE(b.ok());
  const std::vector<NamedDataEntry>& named = b->container()->named_data();
  std::set<uint32_t> segs;
  for (const NamedDataEntry& e : named) segs.insert(e.segment_index);
  ASSERT_LT(segs.size(), named.size()) << "the case has keys on one segment";
  for (const bool share : {false, true}) {
    SCOPED_TRACE(share ? "share_segments" : "default");
    auto device = std::make_shared<HostDevice>();
    auto w = LoadWeights(BundlePaths{.ptd = ptd}, device, {.share_segments = share});
    ASSERT_TRUE(w.ok()) << w.status();
    for (const NamedDataEntry& e : named) {
      const LoadedStorage* s = w->FindStorage(e.key);
      ASSERT_NE(s, nullptr);
      for (const NamedDataEntry& o : named) {
        if (o.segment_index != e.segment_index) continue;
        const LoadedStorage* t = w->FindStorage(o.key);
        // The same bytes either way; the same memory only when shared.
        EXPECT_EQ(DigestLoadedStorage(*w, *t).value(), DigestLoadedStorage(*w, *s).value());
        EXPECT_EQ(t->buffer.data() == s->buffer.data(), share || o.key == e.key) << o.key;
      }
    }
    const size_t want = share ? segs.size() : named.size();
    EXPECT_EQ(w->storages().size(), want);
    EXPECT_EQ(device->stats().allocations, want);
    EXPECT_EQ(w->stats().allocations, 1u);
  }
}

TEST(LoaderTest, SubsetReadsOnlyItsStorages) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {65536, 65536, 65536, 65536});
  auto pread = OpenFile(m.ptd, /*use_mmap=*/false);
  ASSERT_TRUE(pread.ok());
  auto counting = std::make_shared<CountingFileSource>(*pread);
  auto manifest = OpenFile(m.manifest, false);
  ASSERT_TRUE(manifest.ok());
  auto opened = WeightBundle::Open(BundleSources{.ptd = counting, .manifest = *manifest});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const auto bundle = std::make_shared<const WeightBundle>(*std::move(opened));
  for (const std::vector<std::string>& fqns :
       std::vector<std::vector<std::string>>{{"w2"}, {"w1", "w3"}}) {
    counting->Reset();
    auto device = std::make_shared<HostDevice>();
    auto w = LoadWeights(bundle, device, LoadOptions{.fqns = fqns});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->weights().size(), fqns.size());
    EXPECT_EQ(counting->bytes(), 65536u * fqns.size());
    EXPECT_EQ(w->stats().bytes_read, 65536u * fqns.size());
    EXPECT_EQ(device->stats().allocations, fqns.size());
    for (const std::string& f : fqns) EXPECT_NE(w->Find(f), nullptr);
    EXPECT_EQ(w->Find("w0"), nullptr);
  }
  auto device = std::make_shared<HostDevice>();
  auto missing = LoadWeights(bundle, device, LoadOptions{.fqns = {"w9"}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'w9'"));
  EXPECT_EQ(device->stats().allocations, 0u);
}

TEST(LoaderTest, CoalescesAdjacentSmallStoragesOnBothPaths) {
  TempDir dir;
  const std::vector<uint64_t> sizes(4096, 1024);
  const TestModel m = WriteTestModel(dir.path(), sizes);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto opened = WeightBundle::Open(paths);
  ASSERT_TRUE(opened.ok());
  const auto bundle = std::make_shared<const WeightBundle>(*std::move(opened));
  auto reference = LoadWeights(bundle, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok());
  for (int d = -1; d < static_cast<int>(std::size(kStagedDevices)); ++d) {
    SCOPED_TRACE(d < 0 ? "host" : kStagedDevices[d].name);
    std::shared_ptr<Device> device =
        d < 0 ? std::make_shared<HostDevice>() : kStagedDevices[d].make();
    LoadOptions o{.ring_slot_bytes = 256 << 10, .max_read_bytes = 256 << 10};
    auto w = LoadWeights(bundle, device, o);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().storages, 4096u);
    // 4 MiB in 256 KiB reads (plus a little padding): about 16, not 4096.
    EXPECT_LE(w->stats().reads, 20u);
    EXPECT_GE(w->stats().reads, 16u);
    for (const char* f : {"w0", "w1", "w2047", "w4095"}) {
      auto digest = DigestLoadedWeight(*w, *w->Find(f));
      ASSERT_TRUE(digest.ok());
      EXPECT_EQ(*digest, DigestLoadedWeight(*reference, *reference->Find(f)).value()) << f;
      const LoadedStorage& s = w->storage(*w->Find(f));
      EXPECT_EQ(s.nbytes, 1024u);
    }
  }
}

TEST(LoaderTest, AManifestOutOfFileOrderLoadsAsOneInOrder) {
  // The manifest names the storages in the reverse of their file order:
  // Allocate lays them out in file order all the same, so the packed
  // reads of these back-to-back 1 KiB storages go straight into them on the
  // host, and a staging slot is one copy, as for a manifest in file order.
  TempDir dir;
  const std::vector<uint64_t> sizes(2048, 1024);
  const TestModel m = WriteTestModel(dir.path(), sizes);
  absl::StatusOr<Manifest> manifest = ParseManifest(::ptd::testing::ReadFileBytes(m.manifest));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::reverse(manifest->entries.begin(), manifest->entries.end());
  absl::StatusOr<std::vector<uint8_t>> reversed = EncodeManifest(*manifest);
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  const std::string reversed_path = dir.path() + "/reversed.manifest";
  ::ptd::testing::WriteFileBytes(reversed_path, *reversed);
  auto in_order = WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = m.manifest});
  auto out_of_order = WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = reversed_path});
  ASSERT_TRUE(in_order.ok() && out_of_order.ok());
  const auto reference_bundle = std::make_shared<const WeightBundle>(*std::move(in_order));
  const auto bundle = std::make_shared<const WeightBundle>(*std::move(out_of_order));
  ASSERT_EQ(bundle->manifests()[0].manifest.entries.front().fqn, "w2047");
  for (int d = -1; d < static_cast<int>(std::size(kStagedDevices)); ++d) {
    SCOPED_TRACE(d < 0 ? "host" : kStagedDevices[d].name);
    const auto make = [&]() -> std::shared_ptr<Device> {
      return d < 0 ? std::make_shared<HostDevice>() : kStagedDevices[d].make();
    };
    const LoadOptions o{.ring_slot_bytes = 256 << 10, .max_read_bytes = 256 << 10};
    auto reference = LoadWeights(reference_bundle, make(), o);
    auto w = LoadWeights(bundle, make(), o);
    ASSERT_TRUE(reference.ok() && w.ok()) << w.status();
    EXPECT_EQ(w->stats().storages, 2048u);
    EXPECT_EQ(w->stats().reads, reference->stats().reads);
    EXPECT_LE(w->stats().reads, 20u);  // 2 MiB in 256 KiB reads, not 2048.
    EXPECT_EQ(w->stats().bytes_via_scratch, reference->stats().bytes_via_scratch);
    EXPECT_EQ(w->stats().copies, reference->stats().copies);
    ::ptd::testing::ExpectSameBytes(*w, *reference, m.fqns);
  }
}

// LoadWeights of paths hints the device before it verifies: a load of every
// weight onto the host takes the block readied meanwhile, with the bytes a
// load without it reads; a load of named weights or a mapped load gives no
// hint (HintLoadAllocation), and a load whose files fail to verify leaves
// nothing prepared.
TEST(LoaderTest, ALoadOfEverythingTakesTheMemoryReadiedWhileItVerified) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(16, uint64_t{1} << 20));
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  const auto host = [](Populate p = Populate::kBeforeWrite) {
    return std::make_shared<HostDevice>(
        HostMemoryOptions{.huge_pages = HugePages::kOff, .populate = p});
  };
  auto reference = LoadWeights(paths, host(Populate::kOff));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const auto device = host();
  auto w = LoadWeights(paths, device);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_GE(device->stats().prepared_bytes, w->stats().bytes);
  EXPECT_EQ(device->stats().prepared_bytes % (2 << 20), 0u) << "a 2 MiB-rounded block";
  ::ptd::testing::ExpectSameBytes(*w, *reference, m.fqns);

  // The hint itself: none for named weights, a mapped load or no .ptd.
  const auto hinted = host();
  EXPECT_FALSE(internal::HintLoadAllocation(*hinted, paths, LoadOptions{.fqns = {m.fqns[0]}}));
  EXPECT_FALSE(internal::HintLoadAllocation(*hinted, paths, LoadOptions{.map_file = true}));
  EXPECT_FALSE(internal::HintLoadAllocation(*hinted, BundlePaths{.manifest = m.manifest}, {}));
  ASSERT_TRUE(hinted->AllocateMany({16 << 20}).ok());
  EXPECT_EQ(hinted->stats().prepared_bytes, 0u);
  EXPECT_TRUE(internal::HintLoadAllocation(*hinted, paths, {}));
  ASSERT_TRUE(hinted->AllocateMany({16 << 20}).ok());
  EXPECT_EQ(hinted->stats().prepared_bytes, uint64_t{16} << 20);

  const std::string garbage = dir.path() + "/garbage.manifest";
  ::ptd::testing::WriteFileBytes(garbage, std::vector<uint8_t>(64, 0xEE));
  const auto failed = host();
  EXPECT_FALSE(LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = garbage}, failed).ok());
  auto after = failed->AllocateMany({16 << 20});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(failed->stats().prepared_bytes, 0u) << "dropped when the files failed";
}

// A source that records where each located read lands.
class DestinationRecorder : public ::ptd::testing::ForwardingByteSource {
 public:
  using ForwardingByteSource::ForwardingByteSource;
  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      destinations_.push_back(dst.data());
      sizes_.push_back(dst.size());
    }
    return inner().ReadLocated(offset, dst);
  }
  std::vector<const uint8_t*> destinations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return destinations_;
  }
  std::vector<size_t> sizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sizes_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<const uint8_t*> destinations_;
  mutable std::vector<size_t> sizes_;
};

// Every weight of `fqns` in `w` holds the `size` bytes stored behind its key.
void ExpectStoredBytes(const LoadedWeights& w, const WeightBundle& bundle,
                       const std::vector<std::string>& fqns, uint64_t size) {
  auto reference = MakeContainerByteSource(*bundle.container());
  for (const std::string& fqn : fqns) {
    const LoadedWeight* lw = w.Find(fqn);
    ASSERT_NE(lw, nullptr) << fqn;
    std::vector<uint8_t> want(size);
    ASSERT_TRUE(reference->ReadAt(lw->storage_key, 0, absl::MakeSpan(want)).ok());
    const auto* got = static_cast<const uint8_t*>(lw->data);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << fqn;
  }
}

TEST(LoaderTest, PackedNeighboursBackToBackInMemoryAreReadStraightIntoThem) {
  // 1 KiB storages lie back to back in the file (128-byte segment
  // alignment) and in the host device's block (64-byte packing): each
  // packed read goes straight into its first storage. 1000-byte storages
  // have 24-byte gaps between them in the file: through scratch, then
  // copied. Either way every storage holds its stored bytes.
  for (const uint64_t size : {uint64_t{1024}, uint64_t{1000}}) {
    SCOPED_TRACE(size);
    TempDir dir;
    const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(256, size));
    auto bundle = WeightBundle::Open(BundlePaths{.ptd = m.ptd});
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    const std::vector<uint8_t> manifest = ::ptd::testing::ReadFileBytes(m.manifest);
    DestinationRecorder source(MakeContainerByteSource(*bundle->container()));
    auto w =
        LoadWeights(manifest, source, std::make_shared<HostDevice>(), LoadOptions{.threads = 1});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().storages, 256u);
    EXPECT_LT(w->stats().reads, 16u);  // Packed: 256 KiB at a time, not 256 reads.
    std::set<const uint8_t*> starts;
    for (const LoadedStorage& s : w->storages()) {
      starts.insert(static_cast<const uint8_t*>(s.buffer.data()));
    }
    const std::vector<const uint8_t*> destinations = source.destinations();
    ASSERT_EQ(destinations.size(), w->stats().reads);
    for (const uint8_t* d : destinations) EXPECT_EQ(starts.count(d), size == 1024 ? 1u : 0u);
    ExpectStoredBytes(*w, *bundle, m.fqns, size);
  }
}

TEST(LoaderTest, PackedReadsThroughScratchGoAMebibyteAtATime) {
  // 4,096 storages of 1000 bytes with gaps between them in the file: the
  // packed reads (4 MiB by default) go through scratch in parts of whole
  // storages and at most 1 MiB, so a reader holds 1 MiB of scratch.
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(4096, 1000));
  auto bundle = WeightBundle::Open(BundlePaths{.ptd = m.ptd});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::vector<uint8_t> manifest = ::ptd::testing::ReadFileBytes(m.manifest);
  DestinationRecorder source(MakeContainerByteSource(*bundle->container()));
  auto w = LoadWeights(manifest, source, std::make_shared<HostDevice>(), LoadOptions{.threads = 2});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<size_t> sizes = source.sizes();
  ASSERT_EQ(sizes.size(), w->stats().reads);
  uint64_t read = 0;
  for (size_t n : sizes) {
    EXPECT_LE(n, size_t{1} << 20);
    EXPECT_EQ(n % 1024, 1000u) << "whole 1000-byte storages at a 1024-byte pitch";
    read += n;
  }
  EXPECT_EQ(read, w->stats().bytes_read);
  // About 4 MiB of file in parts of at most 1 MiB.
  EXPECT_GE(sizes.size(), 4u);
  EXPECT_LT(sizes.size(), 16u);
  ExpectStoredBytes(*w, *bundle, m.fqns, 1000);
}

TEST(LoaderTest, FirstLookupsFromManyThreadsBuildTheIndexesOnce) {
  // The indexes are built by the first Find or FindStorage, whichever
  // thread makes it; every thread must see them whole (TSan runs this).
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(512, 64));
  for (int round = 0; round < 4; ++round) {
    auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                         std::make_shared<HostDevice>());
    ASSERT_TRUE(w.ok()) << w.status();
    std::atomic<size_t> found{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = 0; i < m.fqns.size(); ++i) {
          const std::string& fqn = m.fqns[(i + t * 97) % m.fqns.size()];
          const LoadedWeight* lw = t % 2 == 0 ? w->Find(fqn) : w->Find("manifest", fqn);
          if (lw != nullptr && lw->fqn == fqn && w->FindStorage(lw->storage_key) != nullptr) {
            ++found;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(found.load(), 4 * m.fqns.size());
    EXPECT_EQ(w->Find("no such weight"), nullptr);
  }
}

TEST(LoaderTest, LargeStoragesAreReadInChunksByThreads) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {3 << 20, 100, (1 << 20) + 4});
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto reference = LoadWeights(paths, std::make_shared<HostDevice>(), LoadOptions{.threads = 1});
  ASSERT_TRUE(reference.ok());
  for (size_t threads : {1, 2, 4}) {
    for (const StagedDevice& staged : kStagedDevices) {
      SCOPED_TRACE(staged.name);
      auto w = LoadWeights(paths, staged.make(),
                           LoadOptions{.threads = threads,
                                       .ring_slots = 3,
                                       .ring_slot_bytes = 256 << 10,
                                       .max_read_bytes = 256 << 10});
      ASSERT_TRUE(w.ok()) << w.status();
      auto h = LoadWeights(paths, std::make_shared<HostDevice>(),
                           LoadOptions{.threads = threads, .max_read_bytes = 256 << 10});
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_GE(h->stats().reads, 17u);  // 3 MiB + 1 MiB in 256 KiB chunks.
      for (const std::string& f : m.fqns) {
        const auto want = DigestLoadedWeight(*reference, *reference->Find(f));
        EXPECT_EQ(DigestLoadedWeight(*w, *w->Find(f)).value(), want.value()) << f;
        EXPECT_EQ(DigestLoadedWeight(*h, *h->Find(f)).value(), want.value()) << f;
      }
    }
  }
}

// On a staging device storages lie as in the file (runs), but a run never
// spans a storage the load leaves out: what is allocated stays what the
// placement counted (each storage rounded to kDeviceAlignment), so a device
// budget remains a cap. Every other storage of 64 x 4 KiB loaded.
TEST(LoaderTest, RunsOnAStagingDeviceNeverSpanStoragesLeftOut) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(64, 4096));
  std::vector<std::string> half;
  for (size_t i = 0; i < m.fqns.size(); i += 2) half.push_back(m.fqns[i]);
  for (const StagedDevice& staged : kStagedDevices) {
    SCOPED_TRACE(staged.name);
    std::shared_ptr<Device> device = staged.make();
    auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest}, device,
                         LoadOptions{.fqns = half});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().storages, 32u);
    EXPECT_LE(device->stats().allocated_bytes, 32u * 4096u);
  }
  // Loaded whole, the 64 are one run: one buffer of exactly their bytes.
  auto device = std::make_shared<FakeCudaDevice>();
  auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest}, device);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(device->stats().allocations, 1u);
  EXPECT_EQ(device->stats().allocated_bytes, 64u * 4096u);
}

TEST(LoaderTest, CpuWeightsGoToHostMemoryOnAnotherDevice) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {256, 512}, /*with_cpu_weight=*/true);
  for (const StagedDevice& staged : kStagedDevices) {
    SCOPED_TRACE(staged.name);
    std::shared_ptr<Device> device = staged.make();
    auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest}, device);
    ASSERT_TRUE(w.ok()) << w.status();
    const LoadedWeight* cpu = w->Find("cpu.table");
    ASSERT_NE(cpu, nullptr);
    EXPECT_EQ(cpu->device, DeviceKind::kHost);
    EXPECT_TRUE(w->storage(*cpu).host_accessible);
    EXPECT_EQ(w->Find("w0")->device, DeviceKind::kCuda);
    // w0 and w1 in one run (laid out as in the file), one buffer; the CPU
    // weight is not on it.
    EXPECT_EQ(device->stats().allocations, 1u);
    EXPECT_EQ(w->stats().allocations, 2u);  // One AllocateMany per device.
    EXPECT_EQ(w->DeviceOf(w->storage(*cpu)).kind(), DeviceKind::kHost);
  }
}

TEST(LoaderTest, StagingUsesAtMostTheRingWhateverTheFileSize) {
  TempDir dir;
  std::vector<uint64_t> sizes = {4 << 20, 3 << 20, (2 << 20) + 12};
  for (int i = 0; i < 3000; ++i) sizes.push_back(1024 + 4 * (i % 7));
  const TestModel m = WriteTestModel(dir.path(), sizes);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "deferred");
    // Counted by FaultDevice: over host memory copying at Wait, or passing
    // copies through to AsyncDevice.
    std::shared_ptr<Device> host = async ? std::shared_ptr<Device>(std::make_shared<AsyncDevice>())
                                         : std::make_shared<HostDevice>();
    auto device = std::make_shared<FaultDevice>(
        host, FaultPlan{.host_accessible = false, .defer_copies = !async});
    const LoadOptions o{.threads = 3, .ring_slots = 2, .ring_slot_bytes = 256 << 10};
    ASSERT_GT(m.data_bytes, 20 * 2 * o.ring_slot_bytes);  // Many times the ring.
    auto w = LoadWeights(paths, device, o);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_LE(device->counts().peak_live_staging_bytes, o.ring_slots * o.ring_slot_bytes);
    EXPECT_GT(device->counts().peak_live_staging_bytes, 0u);
    EXPECT_EQ(device->counts().staging_allocations, o.ring_slots);
    auto ref = LoadWeights(paths, std::make_shared<HostDevice>());
    ASSERT_TRUE(ref.ok());
    for (const std::string& f : m.fqns) {
      EXPECT_EQ(DigestLoadedWeight(*w, *w->Find(f)).value(),
                DigestLoadedWeight(*ref, *ref->Find(f)).value())
          << f;
    }
    EXPECT_GT(w->stats().copies, 0u);
    w = absl::CancelledError("dropped");
    EXPECT_EQ(host->stats().live_allocations, 0u);
    EXPECT_EQ(host->stats().live_staging_bytes, 0u);
    EXPECT_EQ(StagingFreedInFlight(*host), 0u);
  }
}

TEST(LoaderTest, TheDefaultRingIsTwoSlotsDeeperThanTheReaders) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(64, 64 << 10));
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  for (size_t threads : {1, 4, 7}) {
    SCOPED_TRACE(threads);
    auto device = std::make_shared<FaultDevice>(std::make_shared<AsyncDevice>());
    auto w =
        LoadWeights(paths, device, LoadOptions{.threads = threads, .ring_slot_bytes = 64 << 10});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(device->counts().staging_allocations, threads + 2);
  }
  EXPECT_EQ(kDefaultRingSlots, kDefaultLoadThreads + 2);
  EXPECT_EQ(LoadOptions{}.ring_slots, 0u);  // 0: threads + 2.
}

TEST(LoaderTest, ProgressReportsEveryByteAndTimingsAreFilled) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1 << 20, 4096, 4096});
  uint64_t last = 0, total = 0, calls = 0;
  LoadOptions o{.max_read_bytes = 256 << 10};
  o.progress = [&](uint64_t done, uint64_t all) {
    EXPECT_GE(done, last);
    last = done;
    total = all;
    ++calls;
    return true;
  };
  auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                       std::make_shared<HostDevice>(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(last, m.data_bytes);
  EXPECT_EQ(total, m.data_bytes);
  EXPECT_GE(calls, 5u);
  const LoadTimings& t = w->timings();
  EXPECT_GT(t.total_s, 0);
  EXPECT_GT(t.verify_s, 0);
  EXPECT_LE(t.first_weight_s, t.total_s);
  EXPECT_GE(t.total_s, t.verify_s + t.read_s);
}

// A caller that verified first (ptd-load, Python's ptd.load) passes the
// seconds it took: the timings count them once, from the same start as a
// LoadWeights(paths) call that verifies itself.
TEST(LoaderTest, TheCallersVerificationCountsInTheTimings) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {4096, 4096});
  auto bundle = WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = m.manifest});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  auto shared = std::make_shared<const WeightBundle>(*std::move(bundle));
  const double verify_s = 5.0;  // Far above the load itself.
  auto w = LoadWeights(shared, std::make_shared<HostDevice>(), LoadOptions{.verify_s = verify_s});
  ASSERT_TRUE(w.ok()) << w.status();
  const LoadTimings& t = w->timings();
  EXPECT_EQ(t.verify_s, verify_s);
  EXPECT_GE(t.total_s, verify_s);
  EXPECT_LT(t.total_s, 2 * verify_s);
  EXPECT_GE(t.first_weight_s, verify_s);
  EXPECT_LE(t.first_weight_s, t.total_s);

  auto plain = LoadWeights(shared, std::make_shared<HostDevice>());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->timings().verify_s, 0);
  EXPECT_LT(plain->timings().first_weight_s, verify_s);

  for (const double bad : {-1.0, std::nan("")}) {
    const auto refused =
        LoadWeights(shared, std::make_shared<HostDevice>(), LoadOptions{.verify_s = bad});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("LoadOptions::verify_s"));
  }
}

// A manifest whose two variants each have a library-local constant.
struct VariantFixture {
  std::vector<uint8_t> ptd;
  std::vector<uint8_t> manifest;
};

VariantFixture MakeVariantFixture() {
  Manifest m;
  m.variants = {Variant{.target_sm = 80, .so_blob_key = "lib80"},
                Variant{.target_sm = 90, .so_blob_key = "lib90"}};
  PtdWriter w;
  const auto add = [&](std::string fqn, std::string key, uint8_t fill) {
    std::vector<uint8_t> bytes(16, fill);
    EXPECT_TRUE(w.Add(key, bytes).ok());
    m.entries.push_back(WeightEntry{.fqn = m.KeepName(fqn),
                                    .storage_key = m.KeepName(key),
                                    .storage_nbytes = 16,
                                    .dtype = 6,
                                    .device_type = 1,
                                    .sizes = {4},
                                    .strides = {1}});
  };
  add("layer.weight", "cuda_fqn_weight:cuda:layer.weight", 1);
  add("_tensor_constant0", "cuda_fqn_weight:cuda:lib80:_tensor_constant0", 2);
  add("_tensor_constant1", "cuda_fqn_weight:cuda:lib90:_tensor_constant1", 3);
  VariantFixture f;
  f.ptd = w.Serialize().value();
  f.manifest = EncodeManifest(m).value();
  return f;
}

TEST(LoaderTest, LibraryLocalConstantsFollowTheChosenVariant) {
  const VariantFixture f = MakeVariantFixture();
  auto container = Container::Open(MemorySource(f.ptd, "variants.ptd")).value();
  const auto source = MakeContainerByteSource(*container);
  const auto names = [](const LoadedWeights& w) {
    std::set<std::string> out;
    for (const LoadedWeight& x : w.weights()) out.insert(std::string(x.fqn));
    return out;
  };
  for (const StagedDevice& staged : kStagedDevices) {  // Both report sm 90.
    SCOPED_TRACE(staged.name);
    auto on90 = LoadWeights(f.manifest, *source, staged.make());
    ASSERT_TRUE(on90.ok()) << on90.status();
    EXPECT_EQ(names(*on90), (std::set<std::string>{"layer.weight", "_tensor_constant1"}));
    EXPECT_EQ(on90->chosen_variants(), (std::vector<std::optional<size_t>>{1}));
  }
  auto sm80 =
      LoadWeights(f.manifest, *source, std::make_shared<HostDevice>(), LoadOptions{.sm = 80});
  ASSERT_TRUE(sm80.ok());
  EXPECT_EQ(names(*sm80), (std::set<std::string>{"layer.weight", "_tensor_constant0"}));
  // The host has no capability: no variant is chosen, nothing is filtered.
  auto host = LoadWeights(f.manifest, *source, std::make_shared<HostDevice>());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(names(*host).size(), 3u);
  EXPECT_EQ(host->chosen_variants(), (std::vector<std::optional<size_t>>{std::nullopt}));
  auto none = LoadWeights(f.manifest, *source, std::make_shared<FakeCudaDevice>(75));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no variant fits sm 75"));
  auto other = LoadWeights(f.manifest, *source, std::make_shared<FakeCudaDevice>(90),
                           LoadOptions{.fqns = {"_tensor_constant0"}});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("lib80"));
}

TEST(LoaderTest, ByteSourceEntryVerifiesBeforeAllocating) {
  const VariantFixture f = MakeVariantFixture();
  auto container = Container::Open(MemorySource(f.ptd, "variants.ptd")).value();
  const auto source = MakeContainerByteSource(*container);
  Manifest m = ParseManifest(f.manifest).value();
  struct Case {
    std::string name;
    std::function<void(Manifest&)> mutate;
    absl::StatusCode code;
    std::string rule;
  };
  const std::vector<Case> cases = {
      {"size", [](Manifest& x) { x.entries[0].storage_nbytes = 20; }, absl::StatusCode::kDataLoss,
       "(G3)"},
      {"key", [](Manifest& x) { x.entries[0].storage_key = "cuda_fqn_weight:cuda:none"; },
       absl::StatusCode::kNotFound, "(X1)"},
      {"view", [](Manifest& x) { x.entries[0].sizes = {5}; }, absl::StatusCode::kDataLoss, "(G2)"},
  };
  for (const Case& c : cases) {
    Manifest bad = m;
    c.mutate(bad);
    auto device = std::make_shared<HostDevice>();
    auto w = LoadWeights(EncodeManifest(bad).value(), *source, device);
    ASSERT_FALSE(w.ok()) << c.name;
    EXPECT_EQ(w.status().code(), c.code) << c.name << ": " << w.status();
    EXPECT_THAT(w.status().message(), HasSubstr(c.rule)) << c.name;
    EXPECT_EQ(device->stats().allocations, 0u);
  }
  auto device = std::make_shared<HostDevice>();
  auto trailing = f.manifest;
  trailing.push_back(0);
  EXPECT_THAT(LoadWeights(trailing, *source, device).status().message(), HasSubstr("(M3)"));
  EXPECT_EQ(device->stats().allocations, 0u);
}

TEST(LoaderTest, LoadsEveryKeyOfABundleWithoutManifests) {
  const VariantFixture f = MakeVariantFixture();
  auto bundle = WeightBundle::Open(
      BundleSources{.ptd = std::shared_ptr<const FileSource>(MemorySource(f.ptd, "variants.ptd"))});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  auto w = LoadWeights(std::make_shared<const WeightBundle>(*std::move(bundle)),
                       std::make_shared<HostDevice>());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->storages().size(), 3u);
  const LoadedStorage* s = w->FindStorage("cuda_fqn_weight:cuda:lib90:_tensor_constant1");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(static_cast<const uint8_t*>(s->buffer.data())[15], 3);
}

TEST(LoaderTest, ABundleWithErrorsIsRefused) {
  auto sources = OpenBundleSources(
      BundlePaths{.ptd = ConformancePath("files/k12_storage_size_mismatch.ptd"),
                  .manifest = ConformancePath("files/k12_storage_size_mismatch.manifest")});
  ASSERT_TRUE(sources.ok());
  Report report;
  auto b = std::make_shared<const WeightBundle>(WeightBundle::Verify(*sources, &report));
  ASSERT_FALSE(report.ok());
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(b, device);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(device->stats().allocations, 0u);
}

}  // namespace
}  // namespace ptd
