// ptd-write-demo: writes a small but realistic CUDA weight file pair with the
// writer half (CudaWeightWriter): DIR/demo.ptd and DIR/demo.manifest.
//
// The weights exercise what the exporter produces: a fused QKV storage with
// three views on it, a transposed view, a compact clone of a row slice, a
// broadcast (stride 0) view, a 0-dim scalar, an empty tensor, bf16 and int64
// dtypes, a CPU-side table, and a library-local constant.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ptd/weight_writer.h"

namespace {

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr,
                 "usage: ptd-write-demo OUT_DIR\n"
                 "writes OUT_DIR/demo.ptd and OUT_DIR/demo.manifest\n");
    return argc == 2 ? 0 : 2;
  }
  const std::string dir = argv[1];
  // The directory must exist: say so (a usage error), rather than fail on an
  // internal temporary file inside it.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    std::fprintf(stderr, "ptd-write-demo: %s: %s\n", dir.c_str(),
                 errno == ENOENT ? "no such directory (create it first)" : std::strerror(errno));
    return 2;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "ptd-write-demo: %s: not a directory\n", dir.c_str());
    return 2;
  }
  std::mt19937 rng(7);

  // Two prebuilt libraries and a PTX fallback.
  std::vector<ptd::Variant> variants = {
      {.target_sm = 80, .ptx_compute = 0, .flags = 0, .so_blob_key = "aoti_sm80_so"},
      {.target_sm = 90, .ptx_compute = 0, .flags = 0, .so_blob_key = "aoti_sm90_so"},
      {.target_sm = 80, .ptx_compute = 80, .flags = 1, .so_blob_key = "aoti_ptx_so"},
  };
  ptd::CudaWeightWriter writer("aoti_sm90_so", variants);

  const auto qkv = RandomBytes(3 * 64 * 64 * 2, rng);   // bf16 [192, 64]
  const auto o_proj = RandomBytes(64 * 64 * 2, rng);    // bf16 [64, 64]
  const auto emb_rows = RandomBytes(16 * 64 * 2, rng);  // clone of emb[8:24]
  const auto rope = RandomBytes(32 * 4, rng);           // float [32]
  const auto scale = RandomBytes(4, rng);               // float scalar
  const auto pos = RandomBytes(128 * 8, rng);           // int64 [128]
  const auto bias_const = RandomBytes(64 * 4, rng);     // float [64]
  const std::vector<uint8_t> empty;

  using ptd::WeightSpec;
  const std::vector<WeightSpec> weights = {
      // q, k, v slice the fused matrix and keep its storage.
      {.fqn = "layers.0.attn.q_proj.weight",
       .dtype = 15,
       .value = {.storage = qkv,
                 .storage_offset = 0,
                 .sizes = {64, 64},
                 .strides = {64, 1},
                 .is_original_storage = true},
       .properties =
           {.storage_size = qkv.size(), .offset = 0, .shape = {64, 64}, .stride = {64, 1}}},
      {.fqn = "layers.0.attn.k_proj.weight",
       .dtype = 15,
       .value = {.storage = qkv,
                 .storage_offset = 4096,
                 .sizes = {64, 64},
                 .strides = {64, 1},
                 .is_original_storage = true},
       .properties =
           {.storage_size = qkv.size(), .offset = 4096, .shape = {64, 64}, .stride = {64, 1}}},
      {.fqn = "layers.0.attn.v_proj.weight",
       .dtype = 15,
       .value = {.storage = qkv,
                 .storage_offset = 8192,
                 .sizes = {64, 64},
                 .strides = {64, 1},
                 .is_original_storage = true},
       .properties =
           {.storage_size = qkv.size(), .offset = 8192, .shape = {64, 64}, .stride = {64, 1}}},
      // A transposed weight (o_proj.weight.t()).
      {.fqn = "layers.0.attn.o_proj.weight",
       .dtype = 15,
       .value =
           {.storage = o_proj, .sizes = {64, 64}, .strides = {1, 64}, .is_original_storage = true},
       .properties = {.offset = 0, .shape = {64, 64}, .stride = {1, 64}}},
      // A compact clone of emb[8:24]: its own 2 KiB storage, written at offset 0.
      {.fqn = "tok_embeddings.rows",
       .dtype = 15,
       .value = {.storage = emb_rows, .sizes = {16, 64}, .strides = {64, 1}},
       .properties =
           {.storage_size = 64 * 64 * 2, .offset = 8 * 64, .shape = {16, 64}, .stride = {64, 1}}},
      // rope frequencies broadcast over 8 heads.
      {.fqn = "rope.freqs",
       .dtype = 6,
       .value = {.storage = rope, .sizes = {8, 32}, .strides = {0, 1}, .is_original_storage = true},
       .properties = {.offset = 0, .shape = {8, 32}, .stride = {0, 1}}},
      {.fqn = "norm.scale",
       .dtype = 6,
       .value = {.storage = scale, .is_original_storage = true},
       .properties = {.offset = 0}},
      {.fqn = "layers.0.empty_cache",
       .dtype = 6,
       .value =
           {.storage = empty, .sizes = {0, 64}, .strides = {64, 1}, .is_original_storage = true},
       .properties = {.offset = 0, .shape = {0, 64}, .stride = {64, 1}}},
      {.fqn = "positions",
       .dtype = 4,
       .device_type = 0,
       .value = {.storage = pos, .sizes = {128}, .strides = {1}, .is_original_storage = true},
       .properties = {.offset = 0, .shape = {128}, .stride = {1}}},
      {.fqn = "_tensor_constant0",
       .dtype = 6,
       .value = {.storage = bias_const, .sizes = {64}, .strides = {1}, .is_original_storage = true},
       .properties = {.offset = 0, .shape = {64}, .stride = {1}}},
  };
  for (const WeightSpec& w : weights) {
    if (absl::Status s = writer.Add(w); !s.ok()) {
      std::fprintf(stderr, "ptd-write-demo: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const std::string ptd_path = dir + "/demo.ptd";
  const std::string manifest_path = dir + "/demo.manifest";
  if (absl::Status s = writer.Write(ptd_path, manifest_path); !s.ok()) {
    std::fprintf(stderr, "ptd-write-demo: %s\n", std::string(s.message()).c_str());
    return 2;  // An I/O failure, not a broken rule.
  }
  std::printf("wrote %s (%zu weights, %zu storages) and %s\n", ptd_path.c_str(),
              writer.manifest().entries.size(), writer.ptd().num_segments(), manifest_path.c_str());
  return 0;
}
