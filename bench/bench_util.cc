#include "bench/bench_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

#include "ptd/ptd_writer.h"
#include "ptd/weight_writer.h"

namespace ptd::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kChunk = 4 * kMiB;

// Removes the model's directory at exit.
struct ModelHolder {
  SyntheticModel model;
  std::string dir;
  ~ModelHolder() {
    if (dir.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/ptd_bench.XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {
    CheckOk(absl::UnavailableError(absl::StrCat("mkdtemp ", templ, ": ", std::strerror(errno))),
            "temporary directory");
  }
  return templ;
}

void Build(ModelHolder* h) {
  struct Group {
    int count;
    uint64_t bytes;
    const char* name;  // Printf pattern of the fqn, %d the layer.
  };
  const Group groups[] = {
      {1, 64 * kMiB, "model.embed_tokens.weight"},
      {2, 32 * kMiB, "model.lm_head.%d.weight"},
      {4, 16 * kMiB, "model.layers.%d.mlp.gate_up_proj.weight"},
      {48, 1 * kMiB, "model.layers.%d.self_attn.o_proj.weight"},
      {2048, 4 * kKiB, "model.layers.%d.input_layernorm.weight"},
  };
  PtdWriter writer;
  std::vector<uint8_t> buf;
  SyntheticModel& m = h->model;
  for (const Group& g : groups) {
    buf.resize(g.bytes);
    for (int i = 0; i < g.count; ++i) {
      char fqn[128];
      std::snprintf(fqn, sizeof(fqn), g.name, i);
      std::string key = absl::StrCat("cuda_fqn_weight:cuda:", fqn);
      FillPattern(m.keys.size() + 1, buf.data(), buf.size());
      CheckOk(writer.Add(key, buf, /*alignment=*/64), key);
      m.dest_offsets.push_back(m.data_bytes);
      m.sizes.push_back(g.bytes);
      m.data_bytes += g.bytes;
      m.keys.push_back(std::move(key));
    }
  }
  h->dir = MakeTempDir();
  m.path = h->dir + "/model.ptd";
  CheckOk(writer.Write(m.path), m.path);
  m.file_bytes = std::filesystem::file_size(m.path);
}

}  // namespace

void CheckOk(const absl::Status& status, std::string_view what) {
  if (status.ok()) return;
  std::fprintf(stderr, "ptd_bench: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               status.ToString().c_str());
  std::abort();
}

void FillPattern(uint64_t seed, uint8_t* dst, uint64_t n) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(dst + i, &x, 8);
  }
  for (; i < n; ++i) dst[i] = static_cast<uint8_t>(seed + i);
}

const SyntheticModel& Model() {
  static ModelHolder holder;
  if (holder.model.path.empty()) Build(&holder);
  return holder.model;
}

double LoopRate::BytesPerSecond(uint64_t bytes_per_iteration, int64_t iterations) const {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  if (elapsed.count() <= 0) return 0;
  return static_cast<double>(bytes_per_iteration) * static_cast<double>(iterations) /
         elapsed.count();
}

void WarmPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) CheckOk(absl::NotFoundError(std::strerror(errno)), path);
  static std::vector<uint8_t> scratch(kChunk);
  off_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, scratch.data(), scratch.size(), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) CheckOk(absl::UnavailableError(std::strerror(errno)), path);
    if (n == 0) break;
    off += n;
  }
  ::close(fd);
}

std::unique_ptr<uint8_t[]> PrefaultedBuffer(uint64_t n) {
  std::unique_ptr<uint8_t[]> p(new uint8_t[n]);
  std::memset(p.get(), 0x5A, n);
  return p;
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
