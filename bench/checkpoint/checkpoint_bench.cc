// ptd_checkpoint_bench: ptd-extract and ptd-reweight on a 1 GiB model
// against copying the same file, file to file, in the same run (issue 35).
//
// Each benchmark runs the command-line tool as a child process and reads its
// peak RSS from wait4(2), so "peak_rss_mib" is the whole process: the
// tool's code, its metadata and its buffers, not this harness. The ceiling,
// BM_CopyFile, is a child too: `cp` of the .ptd onto a fresh file, then
// fsync (the tools fsync what they write, so the ceiling does as well).
// Every iteration starts from a warm page cache (the input read right
// before it, outside the timing) and writes a file that did not exist, so
// each figure includes the page cache's first-touch cost of the output.
//
// The model: 64 f32 weights of 16 MiB, row-major, [2048, 2048] each (1 GiB
// of data), with a standalone manifest; written once into
// $PTD_BENCH_DIR/checkpoint (default: build/bench-data/checkpoint), and the
// checkpoint extracted from it there too.
//
//   build/bench/ptd_checkpoint_bench --benchmark_counters_tabular=true
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

#include "ptd/weight_writer.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

constexpr int kWeights = 64;
constexpr int64_t kRows = 2048, kCols = 2048;  // f32: 16 MiB each.
constexpr uint64_t kWeightBytes = uint64_t{kRows * kCols} * 4;
constexpr uint64_t kDataBytes = kWeightBytes * kWeights;

std::string Dir() {
  const char* env = std::getenv("PTD_BENCH_DIR");
  return std::string(env != nullptr ? env : PTD_BENCH_DEFAULT_DIR) + "/checkpoint";
}
std::string ModelPtd() { return Dir() + "/model.ptd"; }
std::string ModelManifest() { return Dir() + "/model.manifest"; }
std::string Checkpoint() { return Dir() + "/model.safetensors"; }
std::string Output(const char* name) { return Dir() + "/" + name; }

void Die(const std::string& what) {
  std::fprintf(stderr, "ptd_checkpoint_bench: %s\n", what.c_str());
  std::exit(1);
}

struct ChildResult {
  int exit_code = -1;
  double seconds = 0;
  double peak_rss_mib = 0;
};

// Runs argv[0] with argv, stdout and stderr to /dev/null; its wall time and
// peak RSS.
ChildResult RunChild(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    Die("cannot start " + args[0]);
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) Die("wait4 failed");
  ChildResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux.
  return r;
}

void WarmPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("cannot open " + path);
  std::vector<char> buf(8 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

// The model and its checkpoint, written on first use.
void EnsureModel() {
  static bool done = false;
  if (done) return;
  fs::create_directories(Dir());
  if (!fs::exists(ModelPtd()) || !fs::exists(ModelManifest())) {
    // In a child: the writer holds the whole model, and posix_spawn's
    // children would report this process's high-water RSS as theirs.
    const pid_t pid = fork();
    if (pid < 0) Die("fork failed");
    if (pid > 0) {
      int status = 0;
      if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        Die("could not write the model");
      }
      return EnsureModel();
    }
    ptd::CudaWeightWriter writer("model_so");
    std::vector<uint8_t> storage(kWeightBytes);
    for (int w = 0; w < kWeights; ++w) {
      // Distinct bytes per weight (no two storages deduplicated), finite floats.
      float* f = reinterpret_cast<float*>(storage.data());
      for (int64_t i = 0; i < kRows * kCols; ++i) f[i] = static_cast<float>((i % 4099) + w);
      const absl::Status s = writer.Add(
          ptd::WeightSpec{.fqn = "layers." + std::to_string(w) + ".weight",
                          .dtype = 6,
                          .device_type = 1,
                          .value = {.storage = storage,
                                    .sizes = {kRows, kCols},
                                    .strides = {kCols, 1},
                                    .is_original_storage = true},
                          .properties = {.shape = {kRows, kCols}, .stride = {kCols, 1}}});
      if (!s.ok()) Die(std::string(s.message()));
    }
    const absl::Status s = writer.Write(ModelPtd(), ModelManifest());
    if (!s.ok()) Die(std::string(s.message()));
    std::_Exit(0);
  }
  if (!fs::exists(Checkpoint())) {
    const ChildResult r = RunChild(
        {PTD_EXTRACT_BINARY, ModelPtd(), "--manifest", ModelManifest(), "-o", Checkpoint()});
    if (r.exit_code != 0) Die("ptd-extract could not write the checkpoint");
  }
  done = true;
}

double g_copy_bytes_per_second = 0;

// Runs `args` once per iteration (input warmed, output removed first);
// manual time is the child's wall time.
void RunTool(benchmark::State& state, const std::vector<std::string>& args,
             const std::vector<std::string>& inputs, const std::string& output, bool is_ceiling) {
  EnsureModel();
  double seconds = 0, peak = 0;
  for (auto _ : state) {
    fs::remove_all(output);
    for (const std::string& input : inputs) WarmPageCache(input);
    const ChildResult r = RunChild(args);
    if (r.exit_code != 0) {
      state.SkipWithError((args[0] + " failed").c_str());
      return;
    }
    state.SetIterationTime(r.seconds);
    seconds += r.seconds;
    peak = std::max(peak, r.peak_rss_mib);
  }
  fs::remove_all(output);
  const double rate = static_cast<double>(kDataBytes) * state.iterations() / seconds;
  state.counters["GiB/s"] = rate / double(1 << 30);
  state.counters["peak_rss_mib"] = peak;
  if (is_ceiling) {
    g_copy_bytes_per_second = rate;
  } else if (g_copy_bytes_per_second > 0) {
    state.counters["x_copy"] = rate / g_copy_bytes_per_second;
  }
}

// The ceiling: the .ptd copied file to file and fsynced.
void BM_CopyFile(benchmark::State& state) {
  const std::string out = Output("copy.ptd");
  RunTool(state, {"/bin/sh", "-c", "cp \"$0\" \"$1\" && sync \"$1\"", ModelPtd(), out},
          {ModelPtd()}, out, /*is_ceiling=*/true);
}

void BM_Extract(benchmark::State& state) {
  const std::string out = Output("extracted.safetensors");
  RunTool(state, {PTD_EXTRACT_BINARY, ModelPtd(), "--manifest", ModelManifest(), "-o", out},
          {ModelPtd(), ModelManifest()}, out, false);
}

void BM_Reweight(benchmark::State& state) {
  const std::string out = Output("reweighted.ptd");
  RunTool(state, {PTD_REWEIGHT_BINARY, Checkpoint(), "--manifest", ModelManifest(), "-o", out},
          {Checkpoint(), ModelManifest()}, out, false);
}

void BM_ReweightWithBase(benchmark::State& state) {
  const std::string out = Output("reweighted_base.ptd");
  RunTool(state,
          {PTD_REWEIGHT_BINARY, Checkpoint(), "--manifest", ModelManifest(), "--base", ModelPtd(),
           "-o", out},
          {Checkpoint(), ModelManifest(), ModelPtd()}, out, false);
}

// The ceiling first: the ratios divide by it.
BENCHMARK(BM_CopyFile)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Extract)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Reweight)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ReweightWithBase)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
