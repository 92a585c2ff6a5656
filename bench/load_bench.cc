// The load path against its ceilings, all in one binary and one run.
//
//   BM_Ceiling_Memcpy          memcpy of the model's bytes between two
//                              pre-faulted host buffers.
//   BM_Ceiling_PreadWarm       pread of the whole file from page cache into
//                              a pre-faulted buffer, 4 MiB at a time.
//   BM_Baseline_UpstreamStyle  upstream ExecuTorch today: a linear key search
//                              per lookup, then a fresh heap buffer per
//                              storage, read into and copied out of.
//   BM_Load_Mmap               Container::Open on a mapping, Get() per key,
//                              memcpy into the destination arena.
//   BM_Load_Pread              Container::Open on a pread source, ReadAt of
//                              each segment straight into the arena.
//
// Every load includes opening the file and the container. The file is read
// into page cache right before each timed loop (WarmPageCache), so these
// measure the warm-cache path; counters vs_memcpy and vs_pread give each
// result's ratio to the ceilings measured above it in the same run.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "bench/bench_util.h"
#include "ptd/container.h"
#include "ptd/file_source.h"

namespace ptd::bench {
namespace {

constexpr uint64_t kPreadChunk = uint64_t{4} << 20;

// Ceilings measured earlier in this run, bytes/s; 0 until measured.
double g_memcpy_rate = 0;
double g_pread_rate = 0;

// The destination every load writes into: data_bytes, pre-faulted once.
uint8_t* Arena() {
  static std::unique_ptr<uint8_t[]> arena = PrefaultedBuffer(Model().data_bytes);
  return arena.get();
}

void SetRatios(benchmark::State& state, double rate) {
  if (g_memcpy_rate > 0) state.counters["vs_memcpy"] = rate / g_memcpy_rate;
  if (g_pread_rate > 0) state.counters["vs_pread"] = rate / g_pread_rate;
}

std::shared_ptr<const FileSource> OpenOrDie(absl::StatusOr<std::unique_ptr<FileSource>> source) {
  CheckOk(source.status(), "open");
  return std::shared_ptr<const FileSource>(std::move(*source));
}

std::unique_ptr<Container> ContainerOrDie(std::shared_ptr<const FileSource> source) {
  auto c = Container::Open(std::move(source));
  CheckOk(c.status(), "Container::Open");
  return std::move(*c);
}

void BM_Ceiling_Memcpy(benchmark::State& state) {
  const SyntheticModel& m = Model();
  static std::unique_ptr<uint8_t[]> src = PrefaultedBuffer(m.data_bytes);
  uint8_t* dst = Arena();
  LoopRate rate;
  for (auto _ : state) {
    std::memcpy(dst, src.get(), m.data_bytes);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  g_memcpy_rate = rate.BytesPerSecond(m.data_bytes, state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Ceiling_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Ceiling_PreadWarm(benchmark::State& state) {
  const SyntheticModel& m = Model();
  static std::unique_ptr<uint8_t[]> buf = PrefaultedBuffer(m.file_bytes);
  const int fd = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) CheckOk(absl::NotFoundError("cannot open"), m.path);
  WarmPageCache(m.path);
  LoopRate rate;
  for (auto _ : state) {
    for (uint64_t off = 0; off < m.file_bytes;) {
      const size_t want = static_cast<size_t>(std::min(kPreadChunk, m.file_bytes - off));
      const ssize_t n = ::pread(fd, buf.get() + off, want, static_cast<off_t>(off));
      if (n <= 0) CheckOk(absl::DataLossError("short pread"), m.path);
      off += static_cast<uint64_t>(n);
    }
    benchmark::ClobberMemory();
  }
  g_pread_rate = rate.BytesPerSecond(m.file_bytes, state.iterations());
  ::close(fd);
  if (g_memcpy_rate > 0) state.counters["vs_memcpy"] = g_pread_rate / g_memcpy_rate;
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.file_bytes));
}
BENCHMARK(BM_Ceiling_PreadWarm)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Baseline_UpstreamStyle(benchmark::State& state) {
  const SyntheticModel& m = Model();
  uint8_t* arena = Arena();
  WarmPageCache(m.path);
  LoopRate rate;
  for (auto _ : state) {
    auto c = ContainerOrDie(OpenOrDie(OpenPreadFile(m.path)));
    // Upstream keeps the FlatBuffer and compares its keys on every lookup.
    std::vector<std::string> names;
    names.reserve(c->named_data().size());
    for (const NamedDataEntry& e : c->named_data()) names.emplace_back(e.key);
    for (size_t k = 0; k < m.keys.size(); ++k) {
      size_t i = 0;
      while (i < names.size() && names[i] != m.keys[k]) ++i;
      if (i == names.size()) CheckOk(absl::NotFoundError(m.keys[k]), "lookup");
      // A fresh pageable heap buffer per storage, then a synchronous copy.
      auto bytes = c->SegmentData(c->named_data()[i].segment_index);
      CheckOk(bytes.status(), m.keys[k]);
      std::memcpy(arena + m.dest_offsets[k], bytes->data(), bytes->size());
    }
    benchmark::ClobberMemory();
  }
  SetRatios(state, rate.BytesPerSecond(m.data_bytes, state.iterations()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Baseline_UpstreamStyle)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Load_Mmap(benchmark::State& state) {
  const SyntheticModel& m = Model();
  uint8_t* arena = Arena();
  WarmPageCache(m.path);
  LoopRate rate;
  for (auto _ : state) {
    auto c = ContainerOrDie(OpenOrDie(OpenMmapFile(m.path)));
    for (size_t k = 0; k < m.keys.size(); ++k) {
      auto bytes = c->Get(m.keys[k]);
      CheckOk(bytes.status(), m.keys[k]);
      if (bytes->size() != m.sizes[k]) CheckOk(absl::DataLossError("size"), m.keys[k]);
      std::memcpy(arena + m.dest_offsets[k], bytes->data(), bytes->size());
    }
    benchmark::ClobberMemory();
  }
  SetRatios(state, rate.BytesPerSecond(m.data_bytes, state.iterations()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Load_Mmap)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Load_Pread(benchmark::State& state) {
  const SyntheticModel& m = Model();
  uint8_t* arena = Arena();
  WarmPageCache(m.path);
  LoopRate rate;
  for (auto _ : state) {
    auto c = ContainerOrDie(OpenOrDie(OpenPreadFile(m.path)));
    for (size_t k = 0; k < m.keys.size(); ++k) {
      const NamedDataEntry* e = c->Find(m.keys[k]);
      if (e == nullptr) CheckOk(absl::NotFoundError(m.keys[k]), "Find");
      const uint64_t size = c->SegmentSize(*e).value_or(0);
      if (size != m.sizes[k]) CheckOk(absl::DataLossError("size"), m.keys[k]);
      CheckOk(c->source().ReadAt(c->SegmentFileOffset(e->segment_index),
                                 absl::MakeSpan(arena + m.dest_offsets[k], size)),
              m.keys[k]);
    }
    benchmark::ClobberMemory();
  }
  SetRatios(state, rate.BytesPerSecond(m.data_bytes, state.iterations()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data_bytes));
}
BENCHMARK(BM_Load_Pread)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptd::bench
