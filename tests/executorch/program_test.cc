// Real programs through ContainerDataMap: the wheel's Program and Method load
// tests/data/executorch/*.pte, take their weights from our map, run, and the
// outputs match eager PyTorch (tolerances from models.json). A counting
// wrapper records what the runtime asks of the map.
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/executorch/container_data_map.h"
#include "ptd/ptd_writer.h"
#include "tests/executorch/et_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

namespace et = ::executorch::runtime;
using et::Error;
using et::FreeableBuffer;
using et::NamedDataMap;
using et::Result;
using et::TensorLayout;
using ::ptd::testing::DataPath;
using ::ptd::testing::ErrorName;
using ::ptd::testing::ReadFileBytes;

// Forwards to another map and records each call as "method key".
class CountingDataMap final : public NamedDataMap {
 public:
  explicit CountingDataMap(const NamedDataMap* inner) : inner_(inner) {}

  Result<const TensorLayout> get_tensor_layout(std::string_view key) const override {
    Record("get_tensor_layout", key);
    auto r = inner_->get_tensor_layout(key);
    if (!r.ok()) return r.error();
    return r.get();
  }
  Result<FreeableBuffer> get_data(std::string_view key) const override {
    Record("get_data", key);
    return inner_->get_data(key);
  }
  Error load_data_into(std::string_view key, void* buffer, size_t size) const override {
    Record("load_data_into", key);
    return inner_->load_data_into(key, buffer, size);
  }
  Result<uint32_t> get_num_keys() const override {
    Record("get_num_keys", "");
    return inner_->get_num_keys();
  }
  Result<const char*> get_key(uint32_t index) const override {
    Record("get_key", std::to_string(index));
    return inner_->get_key(index);
  }

  const std::vector<std::string>& calls() const { return calls_; }
  void Clear() { calls_.clear(); }

 private:
  void Record(const char* method, std::string_view key) const {
    calls_.push_back(std::string(method) + " " + std::string(key));
  }
  const NamedDataMap* inner_;
  mutable std::vector<std::string> calls_;
};

// A loaded program with its memory.
struct Runner {
  std::unique_ptr<::executorch::extension::FileDataLoader> loader;
  std::unique_ptr<et::Program> program;
  std::vector<uint8_t> method_pool = std::vector<uint8_t>(4 << 20);
  std::vector<std::vector<uint8_t>> planned;
  std::vector<et::Span<uint8_t>> planned_spans;
  std::unique_ptr<et::MemoryAllocator> method_allocator;
  std::unique_ptr<et::HierarchicalAllocator> planned_allocator;
  std::unique_ptr<et::MemoryManager> memory;

  Error LoadProgram(const std::string& pte) {
    auto l = ::executorch::extension::FileDataLoader::from(pte.c_str());
    if (!l.ok()) return l.error();
    loader = std::make_unique<::executorch::extension::FileDataLoader>(std::move(l.get()));
    auto p = et::Program::load(loader.get());
    if (!p.ok()) return p.error();
    program = std::make_unique<et::Program>(std::move(p.get()));
    auto meta = program->method_meta("forward");
    if (!meta.ok()) return meta.error();
    for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
      planned.emplace_back(meta->memory_planned_buffer_size(i).get());
    }
    for (auto& b : planned) planned_spans.emplace_back(b.data(), b.size());
    method_allocator = std::make_unique<et::MemoryAllocator>(
        static_cast<uint32_t>(method_pool.size()), method_pool.data());
    planned_allocator = std::make_unique<et::HierarchicalAllocator>(
        et::Span<et::Span<uint8_t>>(planned_spans.data(), planned_spans.size()));
    memory = std::make_unique<et::MemoryManager>(method_allocator.get(), planned_allocator.get());
    return Error::Ok;
  }

  Result<et::Method> LoadMethod(const NamedDataMap* map) {
    return program->load_method("forward", memory.get(), nullptr, map);
  }
};

std::vector<float> ReadFloats(const std::string& path) {
  const auto bytes = ReadFileBytes(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Sets input [2,16] (before every execute: planned memory is reused), runs,
// and returns the [2,8] output.
std::vector<float> RunForward(et::Method& method, std::vector<float>& input) {
  et::etensor::TensorImpl::SizesType sizes[2] = {2, 16};
  et::etensor::TensorImpl::DimOrderType dim_order[2] = {0, 1};
  et::etensor::TensorImpl impl(::executorch::aten::ScalarType::Float, 2, sizes, input.data(),
                               dim_order);
  et::EValue in{::executorch::aten::Tensor(&impl)};
  EXPECT_EQ(method.set_input(in, 0), Error::Ok);
  const Error e = method.execute();
  EXPECT_EQ(e, Error::Ok) << ErrorName(e);
  if (e != Error::Ok) return {};
  const auto& out = method.get_output(0);
  EXPECT_TRUE(out.isTensor());
  const auto t = out.toTensor();
  EXPECT_EQ(t.numel(), 16);
  const float* p = t.const_data_ptr<float>();
  return std::vector<float>(p, p + t.numel());
}

struct Model {
  const char* name;
  double atol, rtol;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const Model& m) {
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    max_diff = std::max(max_diff, d);
    EXPECT_LE(d, m.atol + m.rtol * std::fabs(double(want[i]))) << m.name << " [" << i << "]";
  }
  std::printf("%s: max |got - expected| = %.3g\n", m.name, max_diff);
}

std::vector<std::string> Calls(const std::string& method, const std::vector<std::string>& keys) {
  std::vector<std::string> v;
  for (const auto& k : keys) v.push_back(method + " " + k);
  return v;
}

class ProgramTest : public ::testing::TestWithParam<ContainerDataMap::Access> {};

// mlp (portable/optimized CPU kernels): per key in file order,
// get_tensor_layout then get_data; nothing during execute.
TEST_P(ProgramTest, MlpRunsAndAsksForLayoutThenDataPerKey) {
  const Model m{"mlp", 1e-5, 1e-5};
  auto map = ContainerDataMap::OpenFile(DataPath("executorch/mlp.ptd"), GetParam());
  ASSERT_TRUE(map.ok()) << map.status();
  CountingDataMap counting(map->get());
  Runner r;
  ASSERT_EQ(r.LoadProgram(DataPath("executorch/mlp.pte")), Error::Ok);
  auto method = r.LoadMethod(&counting);
  ASSERT_TRUE(method.ok()) << ErrorName(method.error());

  std::vector<std::string> want;
  for (const char* k : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    want.push_back(std::string("get_tensor_layout ") + k);
    want.push_back(std::string("get_data ") + k);
  }
  EXPECT_EQ(counting.calls(), want);

  counting.Clear();
  auto input = ReadFloats(DataPath("executorch/mlp.input.bin"));
  const auto expected = ReadFloats(DataPath("executorch/mlp.expected.bin"));
  for (int run = 0; run < 2; ++run) ExpectClose(RunForward(*method, input), expected, m);
  EXPECT_TRUE(counting.calls().empty());
}

// mlp_xnnpack (one XNNPACK delegate): get_data per sha256 key in file order,
// no get_tensor_layout (the keys have none); nothing during execute.
TEST_P(ProgramTest, MlpXnnpackRunsAndAsksOnlyForData) {
  const Model m{"mlp_xnnpack", 1e-4, 1e-4};
  auto map = ContainerDataMap::OpenFile(DataPath("executorch/mlp_xnnpack.ptd"), GetParam());
  ASSERT_TRUE(map.ok()) << map.status();
  CountingDataMap counting(map->get());
  Runner r;
  ASSERT_EQ(r.LoadProgram(DataPath("executorch/mlp_xnnpack.pte")), Error::Ok);
  auto method = r.LoadMethod(&counting);
  ASSERT_TRUE(method.ok()) << ErrorName(method.error());

  std::vector<std::string> keys;
  for (const auto& e : (*map)->container().named_data()) keys.emplace_back(e.key);
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(keys[0], "31651231e83c4124daa62b4bb6d3a6aee9992e2034fdf991eb81770f730dd6e9");
  EXPECT_EQ(counting.calls(), Calls("get_data", keys));

  counting.Clear();
  auto input = ReadFloats(DataPath("executorch/mlp_xnnpack.input.bin"));
  const auto expected = ReadFloats(DataPath("executorch/mlp_xnnpack.expected.bin"));
  for (int run = 0; run < 2; ++run) ExpectClose(RunForward(*method, input), expected, m);
  EXPECT_TRUE(counting.calls().empty());
}

INSTANTIATE_TEST_SUITE_P(Access, ProgramTest,
                         ::testing::Values(ContainerDataMap::Access::kMmap,
                                           ContainerDataMap::Access::kPread),
                         [](const auto& param_info) {
                           return param_info.param == ContainerDataMap::Access::kMmap
                                      ? std::string("Mmap")
                                      : std::string("Pread");
                         });

// The same counts with upstream's map: the runtime asks the same of both.
TEST(ProgramUpstreamTest, UpstreamMapGetsTheSameCalls) {
  for (const char* name : {"mlp", "mlp_xnnpack"}) {
    SCOPED_TRACE(name);
    const std::string base = std::string("executorch/") + name;
    auto ours = ContainerDataMap::OpenFile(DataPath(base + ".ptd"));
    ASSERT_TRUE(ours.ok());
    auto up = ::ptd::testing::UpstreamMap::Open(DataPath(base + ".ptd"));
    ASSERT_TRUE(up->map.has_value());
    CountingDataMap a(ours->get()), b(&*up->map);
    Runner ra, rb;
    ASSERT_EQ(ra.LoadProgram(DataPath(base + ".pte")), Error::Ok);
    ASSERT_EQ(rb.LoadProgram(DataPath(base + ".pte")), Error::Ok);
    auto ma = ra.LoadMethod(&a);
    auto mb = rb.LoadMethod(&b);
    ASSERT_TRUE(ma.ok() && mb.ok());
    EXPECT_EQ(a.calls(), b.calls());
  }
}

// A map without the program's keys: the runtime fails load_method cleanly
// with NotFound (it relies on exactly that code), for both models.
TEST(ProgramErrorTest, MissingKeysFailLoadMethodWithNotFound) {
  for (auto [pte, ptd] :
       {std::pair{"mlp.pte", "mlp_xnnpack.ptd"}, std::pair{"mlp_xnnpack.pte", "mlp.ptd"}}) {
    SCOPED_TRACE(pte);
    auto map = ContainerDataMap::OpenFile(DataPath(std::string("executorch/") + ptd));
    ASSERT_TRUE(map.ok());
    Runner r;
    ASSERT_EQ(r.LoadProgram(DataPath(std::string("executorch/") + pte)), Error::Ok);
    auto method = r.LoadMethod(map->get());
    ASSERT_FALSE(method.ok());
    EXPECT_EQ(method.error(), Error::NotFound) << ErrorName(method.error());
  }
}

// The runtime compares our layouts with the program's: the same bytes under a
// transposed layout fail load_method with InvalidExternalData.
TEST(ProgramErrorTest, LayoutMismatchIsInvalidExternalData) {
  auto good = ContainerDataMap::OpenFile(DataPath("executorch/mlp.ptd"));
  ASSERT_TRUE(good.ok());
  PtdWriter w;
  for (const auto& e : (*good)->container().named_data()) {
    auto bytes = (*good)->container().Get(e.key);
    ASSERT_TRUE(bytes.ok());
    ::ptd::TensorLayout layout = *e.layout;
    if (e.key == "fc1.weight") layout.sizes = {16, 32};
    ASSERT_TRUE(w.Add(std::string(e.key), bytes->span(), 16, layout).ok());
  }
  ::ptd::testing::TempDir dir;
  ASSERT_TRUE(w.Write(dir.File("t.ptd")).ok());
  auto map = ContainerDataMap::OpenFile(dir.File("t.ptd"));
  ASSERT_TRUE(map.ok()) << map.status();
  Runner r;
  ASSERT_EQ(r.LoadProgram(DataPath("executorch/mlp.pte")), Error::Ok);
  auto method = r.LoadMethod(map->get());
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.error(), Error::InvalidExternalData) << ErrorName(method.error());
}

}  // namespace
}  // namespace ptd
