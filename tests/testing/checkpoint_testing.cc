#include "tests/testing/checkpoint_testing.h"

#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/view_digest.h"

namespace ptd::testing {

BundlePaths WriteModel(const TempDir& dir, const Storages& storages,
                       const std::vector<ModelWeight>& weights, const std::string& name) {
  PtdWriter writer;
  for (const auto& [key, bytes] : storages) EXPECT_TRUE(writer.Add(key, bytes).ok());
  const std::string ptd = dir.File(name + ".ptd");
  EXPECT_TRUE(writer.Write(ptd).ok());
  Manifest m;
  m.variants = {Variant{.so_blob_key = "so"}};
  for (const ModelWeight& w : weights) {
    WeightEntry e;
    e.fqn = m.KeepName(w.fqn);
    e.storage_key = m.KeepName(w.key);
    for (const auto& [key, bytes] : storages) {
      if (key == w.key) e.storage_nbytes = bytes.size();
    }
    e.dtype = w.dtype;
    e.storage_offset = w.offset;
    e.sizes.assign(w.sizes.begin(), w.sizes.end());
    e.strides.assign(w.strides.begin(), w.strides.end());
    m.entries.push_back(e);
  }
  auto encoded = EncodeManifest(m);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  const std::string manifest = dir.File(name + ".manifest");
  if (encoded.ok()) WriteFileBytes(manifest, *encoded);
  return BundlePaths{.ptd = ptd, .manifest = manifest};
}

void WriteCheckpoint(const std::string& path, const std::vector<CheckpointTensor>& tensors) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const CheckpointTensor& t : tensors) {
    specs.push_back({t.name, FindSafetensorsDtype(t.dtype), t.shape});
  }
  auto layout = PlanSafetensors(specs, {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(
      WriteSafetensors(path, *layout, [&](const SafetensorsTensor& st, const WriteFn& write) {
        for (const CheckpointTensor& t : tensors) {
          if (t.name == st.name) return write(t.bytes);
        }
        return absl::InternalError("no such tensor");
      }).ok());
}

std::vector<uint8_t> Iota(size_t n, uint8_t start, uint8_t step) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * step);
  return v;
}

std::vector<uint8_t> Gather(const std::vector<uint8_t>& storage, const ModelWeight& w, uint32_t e) {
  std::vector<uint8_t> out;
  const ViewSpec spec{e, w.offset, w.sizes, w.strides};
  EXPECT_TRUE(GatherView(absl::MakeConstSpan(storage), spec, [&](absl::Span<const uint8_t> b) {
                out.insert(out.end(), b.begin(), b.end());
              }).ok());
  return out;
}

absl::StatusOr<SafetensorsFile> OpenSafetensors(const std::string& path) {
  auto src = OpenFile(path, false);
  if (!src.ok()) return src.status();
  return SafetensorsFile::Open(*src);
}

std::vector<uint8_t> TensorBytes(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsTensor* t = f.Find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<uint8_t> out(t->nbytes());
  EXPECT_TRUE(f.Read(*t, 0, absl::MakeSpan(out)).ok());
  return out;
}

}  // namespace ptd::testing
