#include "bench/suite/model_sets.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/weight_writer.h"

namespace ptd::bench {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int32_t kFloat32 = 6;
constexpr int32_t kBFloat16 = 15;
// Bumped whenever what a set contains changes: old files are not reused.
constexpr char kFormat[] = "v1";

uint64_t ParseU64(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0') {
    std::fprintf(stderr, "bad value for --%s: '%s'\n", flag.c_str(), v.c_str());
    std::exit(2);
  }
  return x;
}

// The stats of a written set: from its container, stored beside it.
void Describe(ModelSet* s) {
  auto src = OpenPreadFile(s->ptd);
  Check(src.ok(), s->ptd + ": " + src.status().ToString());
  auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
  Check(c.ok(), s->ptd + ": " + c.status().ToString());
  s->keys = (*c)->named_data().size();
  std::vector<bool> seen((*c)->segments().size(), false);
  s->storages = 0;
  s->data_bytes = 0;
  for (const NamedDataEntry& e : (*c)->named_data()) {
    if (seen[e.segment_index]) continue;
    seen[e.segment_index] = true;
    ++s->storages;
    s->data_bytes += (*c)->segments()[e.segment_index].size;
  }
  s->data_begin = (*c)->header().segment_base_offset;
  s->file_bytes = std::filesystem::file_size(s->ptd);
}

void WriteInfo(const ModelSet& s, const std::string& path) {
  std::ofstream out(path + ".tmp");
  out << "storage_bytes " << s.storage_bytes << "\nstorages " << s.storages << "\nkeys " << s.keys
      << "\nweights " << s.weights << "\ndata_bytes " << s.data_bytes << "\ndata_begin "
      << s.data_begin << "\nfile_bytes " << s.file_bytes << "\n";
  out.close();
  Check(out.good(), "write " + path);
  std::filesystem::rename(path + ".tmp", path);
}

bool ReadInfo(ModelSet* s, const std::string& path) {
  std::ifstream in(path);
  if (!in) return false;
  std::string k;
  uint64_t v = 0;
  int n = 0;
  while (in >> k >> v) {
    ++n;
    if (k == "storage_bytes")
      s->storage_bytes = v;
    else if (k == "storages")
      s->storages = v;
    else if (k == "keys")
      s->keys = v;
    else if (k == "weights")
      s->weights = v;
    else if (k == "data_bytes")
      s->data_bytes = v;
    else if (k == "data_begin")
      s->data_begin = v;
    else if (k == "file_bytes")
      s->file_bytes = v;
  }
  return n == 7 && std::filesystem::exists(s->ptd) && std::filesystem::exists(s->manifest) &&
         std::filesystem::file_size(s->ptd) == s->file_bytes;
}

// Finds the set `base` in dir, or writes it with `write` (which fills the
// writer and sets s->weights) and records its stats.
template <typename Fn>
ModelSet Cached(const SuiteFlags& flags, const std::string& name, const std::string& base,
                Fn write) {
  std::filesystem::create_directories(flags.data_dir);
  ModelSet s;
  s.name = name;
  const std::string stem = absl::StrCat(flags.data_dir, "/", kFormat, "-", base);
  s.ptd = stem + ".ptd";
  s.manifest = stem + ".manifest";
  if (ReadInfo(&s, stem + ".info")) return s;
  std::fprintf(stderr, "ptd bench: writing %s ...\n", s.ptd.c_str());
  CudaWeightWriter writer("aoti_cuda_blob");
  write(&writer, &s);
  const absl::Status st = writer.Write(s.ptd, s.manifest);
  Check(st.ok(), s.ptd + ": " + st.ToString());
  Describe(&s);
  WriteInfo(s, stem + ".info");
  return s;
}

void AddView(CudaWeightWriter* w, const std::string& fqn, int32_t dtype,
             absl::Span<const uint8_t> storage, int64_t offset, std::vector<int64_t> shape,
             std::vector<int64_t> stride) {
  WeightSpec spec{
      .fqn = fqn,
      .dtype = dtype,
      .device_type = 1,
      .value = {.storage = storage,
                .storage_offset = offset,
                .sizes = shape,
                .strides = stride,
                .is_original_storage = true},
      .properties = {
          .storage_size = storage.size(), .offset = offset, .shape = shape, .stride = stride}};
  const absl::Status st = w->Add(spec);
  Check(st.ok(), fqn + ": " + st.ToString());
}

ModelSet BlockSet(const SuiteFlags& flags, const std::string& name, uint64_t total, uint64_t size) {
  const uint64_t count = std::max<uint64_t>(total / size, 1);
  ModelSet s = Cached(flags, name, absl::StrCat("blocks-", count, "x", size),
                      [&](CudaWeightWriter* w, ModelSet* m) {
                        std::vector<uint8_t> bytes(size);
                        const int64_t n = static_cast<int64_t>(size / 4);
                        for (uint64_t i = 0; i < count; ++i) {
                          FillPattern(i + 1, bytes.data(), bytes.size());
                          AddView(w, absl::StrCat("model.layers.", i, ".weight"), kFloat32, bytes,
                                  0, {n}, {1});
                        }
                        m->weights = count;
                      });
  s.storage_bytes = size;
  s.description = absl::StrCat(count, " float32 weights, one ", size, "-byte storage each");
  return s;
}

// Dimensions by target size: smaller targets get a narrower model so that
// they still have several layers.
ModelSet TransformerSet(const SuiteFlags& flags) {
  const uint64_t target = flags.xfmr_mib * kMiB;
  int64_t d = 2048, ff = 5632, vocab = 32000;
  if (flags.xfmr_mib < 96) {
    d = 512, ff = 1408, vocab = 16000;
  } else if (flags.xfmr_mib < 512) {
    d = 1024, ff = 2816, vocab = 32000;
  }
  const uint64_t emb = static_cast<uint64_t>(vocab * d * 2);
  const uint64_t layer = static_cast<uint64_t>(2 * (4 * d * d + 3 * ff * d) + 4 * d);
  const int64_t layers =
      static_cast<int64_t>(std::max<uint64_t>(target > emb ? (target - emb) / layer : 1, 1));
  ModelSet set = Cached(
      flags, "xfmr", absl::StrCat("xfmr-d", d, "-ff", ff, "-v", vocab, "-l", layers),
      [&](CudaWeightWriter* w, ModelSet* m) {
        uint64_t seed = 1;
        std::vector<uint8_t> buf;
        auto fill = [&](int64_t elements) -> absl::Span<const uint8_t> {
          buf.resize(static_cast<size_t>(elements) * 2);
          FillPattern(seed++, buf.data(), buf.size());
          return buf;
        };
        // Tied embeddings: the same bytes under two fqns, stored once.
        absl::Span<const uint8_t> e = fill(vocab * d);
        AddView(w, "model.embed_tokens.weight", kBFloat16, e, 0, {vocab, d}, {d, 1});
        AddView(w, "lm_head.weight", kBFloat16, e, 0, {vocab, d}, {d, 1});
        int64_t n = 2;
        for (int64_t l = 0; l < layers; ++l) {
          const std::string p = absl::StrCat("model.layers.", l, ".");
          // Fused QKV: one storage, three views at element offsets.
          absl::Span<const uint8_t> qkv = fill(3 * d * d);
          AddView(w, p + "self_attn.q_proj.weight", kBFloat16, qkv, 0, {d, d}, {d, 1});
          AddView(w, p + "self_attn.k_proj.weight", kBFloat16, qkv, d * d, {d, d}, {d, 1});
          AddView(w, p + "self_attn.v_proj.weight", kBFloat16, qkv, 2 * d * d, {d, d}, {d, 1});
          // Transposed: column-major views of their storage.
          AddView(w, p + "self_attn.o_proj.weight", kBFloat16, fill(d * d), 0, {d, d}, {1, d});
          absl::Span<const uint8_t> gu = fill(2 * ff * d);
          AddView(w, p + "mlp.gate_proj.weight", kBFloat16, gu, 0, {ff, d}, {d, 1});
          AddView(w, p + "mlp.up_proj.weight", kBFloat16, gu, ff * d, {ff, d}, {d, 1});
          AddView(w, p + "mlp.down_proj.weight", kBFloat16, fill(d * ff), 0, {d, ff}, {1, d});
          AddView(w, p + "input_layernorm.weight", kBFloat16, fill(d), 0, {d}, {1});
          AddView(w, p + "post_attention_layernorm.weight", kBFloat16, fill(d), 0, {d}, {1});
          n += 9;
        }
        AddView(w, "model.norm.weight", kBFloat16, fill(d), 0, {d}, {1});
        m->weights = static_cast<uint64_t>(n + 1);
      });
  set.description = absl::StrCat(
      "bf16, hidden ", d, ", ffn ", ff, ", vocab ", vocab, ", ", layers,
      " layers; per layer a fused QKV storage (3 views at offsets), a fused gate/up storage "
      "(2 views), transposed o_proj and down_proj (strides {1, d}), 2 norms; embed_tokens "
      "tied to lm_head (one storage, 2 keys)");
  return set;
}

// mmap + mincore: the fraction of the file's pages in the page cache.
double Resident(int fd, uint64_t size) {
  if (size == 0) return 0;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t pages = (size + static_cast<uint64_t>(page) - 1) / static_cast<uint64_t>(page);
  std::vector<unsigned char> vec(pages);
  double frac = -1;
  if (::mincore(p, size, vec.data()) == 0) {
    uint64_t in = 0;
    for (unsigned char v : vec) in += v & 1;
    frac = static_cast<double>(in) / static_cast<double>(pages);
  }
  ::munmap(p, size);
  return frac;
}

int OpenOrDie(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "open " + path + ": " + std::strerror(errno));
  return fd;
}

uint64_t FileSize(int fd) {
  struct stat st;
  Check(::fstat(fd, &st) == 0, "fstat");
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

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

void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "ptd bench: %s\n", what.c_str());
  std::abort();
}

SuiteFlags ParseSuiteFlags(int* argc, char** argv) {
  SuiteFlags f;
  const char* env = std::getenv("PTD_BENCH_DIR");
  f.data_dir = env != nullptr && *env != '\0' ? env : PTD_BENCH_DEFAULT_DIR;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq == std::string::npos ? a.size() : eq);
    const std::string v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "--data_dir")
      f.data_dir = v;
    else if (key == "--big_mib")
      f.big_mib = ParseU64("big_mib", v);
    else if (key == "--mid_mib")
      f.mid_mib = ParseU64("mid_mib", v);
    else if (key == "--small_mib")
      f.small_mib = ParseU64("small_mib", v);
    else if (key == "--xfmr_mib")
      f.xfmr_mib = ParseU64("xfmr_mib", v);
    else if (key == "--reps")
      f.reps = static_cast<int>(std::max<uint64_t>(ParseU64("reps", v), 1));
    else if (key == "--cold")
      f.cold = ParseU64("cold", v) != 0;
    else if (key == "--io")
      f.io = ParseU64("io", v) != 0;
    else if (key == "--upstream_max_keys")
      f.upstream_max_keys = ParseU64("upstream_max_keys", v);
    else if (key == "--sets")
      f.sets = v;
    else if (key == "--verify") {
      f.verify_weights.clear();
      for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        f.verify_weights.push_back(ParseU64("verify", std::string(part)));
      }
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return f;
}

std::vector<ModelSet> LoadSets(const SuiteFlags& flags) {
  std::vector<ModelSet> sets;
  for (absl::string_view name : absl::StrSplit(flags.sets, ',', absl::SkipEmpty())) {
    if (name == "4MiB")
      sets.push_back(BlockSet(flags, "4MiB", flags.big_mib * kMiB, 4 * kMiB));
    else if (name == "64KiB")
      sets.push_back(BlockSet(flags, "64KiB", flags.mid_mib * kMiB, 64 * kKiB));
    else if (name == "1KiB")
      sets.push_back(BlockSet(flags, "1KiB", flags.small_mib * kMiB, kKiB));
    else if (name == "xfmr")
      sets.push_back(TransformerSet(flags));
    else
      Check(false, absl::StrCat("unknown set '", name, "' (4MiB, 64KiB, 1KiB, xfmr)"));
  }
  return sets;
}

ModelSet VerifySet(const SuiteFlags& flags, uint64_t weights) {
  return Cached(flags, absl::StrCat("verify-", weights), absl::StrCat("verify-", weights),
                [&](CudaWeightWriter* w, ModelSet* m) {
                  std::vector<uint8_t> bytes(64);
                  for (uint64_t i = 0; i < weights; ++i) {
                    FillPattern(i + 1, bytes.data(), bytes.size());
                    AddView(w, absl::StrCat("model.layers.", i / 8, ".proj", i % 8, ".weight"),
                            kFloat32, bytes, 0, {4, 4}, {4, 1});
                  }
                  m->weights = weights;
                });
}

double WarmPageCache(const std::string& path) {
  const int fd = OpenOrDie(path);
  static std::vector<uint8_t> scratch(4 * kMiB);
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, scratch.data(), scratch.size(), off);
    if (n < 0 && errno == EINTR) continue;
    Check(n >= 0, "pread " + path);
    if (n == 0) break;
    off += n;
  }
  const double r = Resident(fd, FileSize(fd));
  ::close(fd);
  return r;
}

double DropPageCache(const std::string& path) {
  const int fd = OpenOrDie(path);
  ::fsync(fd);  // Dirty pages cannot be dropped.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const double r = Resident(fd, FileSize(fd));
  ::close(fd);
  return r;
}

double ResidentFraction(const std::string& path) {
  const int fd = OpenOrDie(path);
  const double r = Resident(fd, FileSize(fd));
  ::close(fd);
  return r;
}

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(samples.size())));
  return samples[i - 1];
}

}  // namespace ptd::bench
