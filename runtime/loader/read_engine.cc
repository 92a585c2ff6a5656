#include "runtime/loader/read_engine.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

#include "runtime/io/page_cache.h"

namespace ptd::internal {
namespace {

// kAuto reads a file buffered when at least this share of it is cached, and
// direct when at most kColdShare is; in between it asks per range.
constexpr double kWarmShare = 0.9;
constexpr double kColdShare = 0.1;
// kAuto reads a file smaller than this buffered whatever the page cache
// holds: a direct read of it saves little, and its pages are worth keeping.
constexpr uint64_t kAutoMinDirectBytes = uint64_t{8} << 20;
// kPerRange looks at the page cache in chunks of at least this size, and
// at most this many chunks a file.
constexpr uint64_t kMinChunkBytes = uint64_t{4} << 20;
constexpr uint64_t kMaxChunks = uint64_t{1} << 16;

// The calling thread's aligned buffer for direct reads into a destination
// that is not aligned; it grows to the largest such read and stays.
struct AlignedScratch {
  uint8_t* data = nullptr;
  size_t size = 0;
  ~AlignedScratch() { Release(); }
  void Release() {
    if (data != nullptr) ::operator delete[](data, std::align_val_t{DirectFile::kAlignment});
    data = nullptr;
    size = 0;
  }
  uint8_t* Get(size_t n) {
    if (size < n) {
      Release();
      data = static_cast<uint8_t*>(::operator new[](n, std::align_val_t{DirectFile::kAlignment}));
      size = n;
    }
    return data;
  }
};

bool Aligned(uint64_t v) { return v % DirectFile::kAlignment == 0; }

}  // namespace

ReadEngine::ReadEngine(const ByteSource& source, IoMode requested, Device& device)
    : source_(source), file_(source.LocatedFile()), requested_(requested) {
  const int fd = file_ != nullptr ? file_->descriptor() : -1;
  if (fd >= 0) cached_bytes_ = CachedBytes(fd, 0, file_->size());
  // GPUDirect Storage: into the memory of a device the host cannot reach.
  const bool device_memory = device.kind() != DeviceKind::kHost && !device.host_accessible();
  const auto open_gds = [&]() -> absl::Status {
    if (!device_memory) {
      return absl::FailedPreconditionError(
          "GPUDirect Storage reads into GPU memory, and the device is the host");
    }
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(source.name(), ": the source reads no file of its own"));
    }
    auto reader = device.OpenFileReader(fd, source.name());
    if (!reader.ok()) return reader.status();
    gds_mode_ = std::string((*reader)->mode());
    if (gds_mode_ != "p2p") {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuFile runs in its compatibility mode (", gds_mode_,
          ": no nvidia-fs driver), which reads through host memory as the direct engine does"));
    }
    gds_ = *std::move(reader);
    return absl::OkStatus();
  };
  IoMode wanted = requested;
  if (requested == IoMode::kGds) {
    if (absl::Status st = open_gds(); !st.ok()) {
      AddFallback(IoMode::kGds, IoMode::kDirect, std::string(st.message()));
    }
    wanted = IoMode::kDirect;
  }
  if (wanted == IoMode::kBuffered) return;
  if (fd < 0) {
    if (wanted == IoMode::kDirect) {
      AddFallback(IoMode::kDirect, IoMode::kBuffered,
                  absl::StrCat(source.name(), ": the source reads no file of its own (",
                               file_ == nullptr ? "it has no file locations" : "a mapping", ")"));
    } else {
      choice_text_ = "buffered: the source reads no file of its own";
    }
    return;
  }
  const uint64_t size = file_->size();
  if (wanted == IoMode::kAuto) {
    if (size < kAutoMinDirectBytes) {
      choice_text_ = absl::StrCat("buffered: a small file (", size, " bytes, under ",
                                  kAutoMinDirectBytes, ")");
      return;
    }
    if (!cached_bytes_) {
      choice_text_ = "direct: the page cache cannot be asked about the file";
      choice_ = Choice::kDirect;
    } else {
      const double share = size == 0 ? 1.0 : static_cast<double>(*cached_bytes_) / size;
      const std::string held = absl::StrCat(*cached_bytes_, " of ", size, " bytes cached");
      if (share >= kWarmShare) {
        choice_text_ = absl::StrCat("buffered: warm, ", held);
        return;
      }
      choice_ = share <= kColdShare ? Choice::kDirect : Choice::kPerRange;
      choice_text_ = share <= kColdShare
                         ? absl::StrCat("direct: cold, ", held)
                         : absl::StrCat("per range: ", held, " (cached ranges buffered)");
    }
  } else {
    choice_ = Choice::kDirect;
    choice_text_ = "direct: asked for";
  }
  if (requested == IoMode::kAuto && choice_ == Choice::kDirect && device_memory) {
    // A cold file into GPU memory: GPUDirect Storage where cuFile offers
    // its P2P mode; auto asked for no engine in particular, so its absence
    // is a note, not a fallback.
    if (absl::Status st = open_gds(); st.ok()) {
      choice_text_ += "; gds (cuFile P2P) for device memory";
    } else if (!absl::IsUnimplemented(st)) {
      choice_text_ += absl::StrCat("; no gds: ", st.message());
    }
  }
  auto opened = DirectFile::Open(fd, source.name());
  if (!opened.ok()) {
    AddFallback(IoMode::kDirect, IoMode::kBuffered, std::string(opened.status().message()));
    choice_ = Choice::kBuffered;
    return;
  }
  direct_ = *std::move(opened);
  if (choice_ == Choice::kPerRange) {
    chunk_ = std::max(kMinChunkBytes, (size / kMaxChunks + kAlignment) / kAlignment * kAlignment);
    warm_chunks_.resize(static_cast<size_t>((size + chunk_ - 1) / chunk_));
    for (size_t c = 0; c < warm_chunks_.size(); ++c) {
      const uint64_t at = c * chunk_;
      const uint64_t n = std::min(chunk_, size - at);
      const auto cached = CachedBytes(fd, at, n);
      warm_chunks_[c] = cached && *cached * 2 >= n;
    }
  }
}

bool ReadEngine::WasWarm(uint64_t offset, uint64_t len) const {
  if (warm_chunks_.empty() || len == 0) return false;
  const size_t first = static_cast<size_t>(offset / chunk_);
  const size_t last =
      std::min(warm_chunks_.size() - 1, static_cast<size_t>((offset + len - 1) / chunk_));
  size_t warm = 0;
  for (size_t c = first; c <= last; ++c) warm += warm_chunks_[c];
  return warm * 2 >= last - first + 1;
}

ReadEngine::~ReadEngine() = default;

absl::Status ReadEngine::ReadToDevice(uint64_t offset, void* dst, size_t n) {
  auto got = gds_->Read(dst, n, offset);
  if (!got.ok()) return got.status();
  gds_bytes_.fetch_add(*got, std::memory_order_relaxed);
  if (*got < n) {
    return absl::DataLossError(absl::StrCat(source_.name(), ": file ended at ", offset + *got,
                                            " while reading ", n, " bytes at offset ", offset,
                                            " (it shrank after open)"));
  }
  return absl::OkStatus();
}

void ReadEngine::GdsFailed(const absl::Status& why) {
  if (!gds_failed_.exchange(true)) {
    AddFallback(IoMode::kGds, IoMode::kDirect, std::string(why.message()));
  }
}

void ReadEngine::AddFallback(IoMode from, IoMode to, std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  fallbacks_.push_back(IoFallback{.from = from, .to = to, .reason = std::move(reason)});
}

absl::Status ReadEngine::Read(uint64_t offset, absl::Span<uint8_t> dst) {
  absl::Status st = ReadUnhashed(offset, dst);
  if (st.ok() && hasher_ != nullptr) st = hasher_->Feed(offset, dst.data(), dst.size());
  return st;
}

absl::Status ReadEngine::ReadUnhashed(uint64_t offset, absl::Span<uint8_t> dst) {
  const bool drop_if_cold = requested_ == IoMode::kDirect || requested_ == IoMode::kGds;
  if (direct_ == nullptr || choice_ == Choice::kBuffered ||
      direct_failed_.load(std::memory_order_relaxed)) {
    return ReadBuffered(offset, dst, drop_if_cold && direct_ != nullptr);
  }
  const uint64_t size = file_->size();
  const uint64_t len = offset < size ? std::min<uint64_t>(dst.size(), size - offset) : 0;
  if (choice_ == Choice::kPerRange && WasWarm(offset, len)) return ReadBuffered(offset, dst, false);
  absl::Status st = ReadDirect(offset, dst);
  if (st.ok() || absl::IsDataLoss(st)) return st;
  // The direct engine failed: this read and the rest go buffered.
  if (!direct_failed_.exchange(true)) {
    AddFallback(IoMode::kDirect, IoMode::kBuffered, std::string(st.message()));
  }
  return ReadBuffered(offset, dst, drop_if_cold);
}

absl::Status ReadEngine::ReadBuffered(uint64_t offset, absl::Span<uint8_t> dst, bool drop_if_cold) {
  size_t n = dst.size();
  if (file_ != nullptr && direct_ != nullptr) {
    // An aligned range's last block may run past the end of the file.
    const uint64_t size = file_->size();
    n = offset < size ? static_cast<size_t>(std::min<uint64_t>(n, size - offset)) : 0;
  }
  const int fd = file_ != nullptr ? file_->descriptor() : -1;
  bool cold = false;
  if (drop_if_cold && fd >= 0) {
    const auto cached = CachedBytes(fd, offset, n);
    cold = cached && *cached == 0;
  }
  absl::Status st = source_.ReadLocated(offset, dst.first(n));
  if (!st.ok()) return st;
  buffered_.fetch_add(n, std::memory_order_relaxed);
  if (cold) (void)DropCachedRange(fd, offset, n);
  return absl::OkStatus();
}

absl::Status ReadEngine::ReadDirect(uint64_t offset, absl::Span<uint8_t> dst) {
  thread_local AlignedScratch scratch;
  const uint64_t size = file_->size();
  const uint64_t lo = offset / kAlignment * kAlignment;
  const uint64_t hi = (offset + dst.size() + kAlignment - 1) / kAlignment * kAlignment;
  const bool in_place =
      lo == offset && Aligned(reinterpret_cast<uintptr_t>(dst.data())) && Aligned(dst.size());
  uint8_t* buf = in_place ? dst.data() : scratch.Get(static_cast<size_t>(hi - lo));
  auto got = direct_->Read(lo, absl::MakeSpan(buf, static_cast<size_t>(hi - lo)));
  if (!got.ok()) return got.status();
  used_direct_.store(true, std::memory_order_relaxed);
  direct_bytes_.fetch_add(*got, std::memory_order_relaxed);
  const uint64_t want_end = std::min<uint64_t>(offset + dst.size(), size);
  if (lo + *got < want_end) {
    return absl::DataLossError(
        absl::StrCat(source_.name(), ": file ended at ", lo + *got, " while reading ",
                     want_end - offset, " bytes at offset ", offset, " (it shrank after open)"));
  }
  if (!in_place && want_end > offset) {
    std::memcpy(dst.data(), buf + (offset - lo), static_cast<size_t>(want_end - offset));
  }
  return absl::OkStatus();
}

void ReadEngine::NoteDirectReaders(size_t n) {
  size_t seen = direct_readers_.load(std::memory_order_relaxed);
  while (seen < n && !direct_readers_.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

IoReport ReadEngine::Report() const {
  IoReport r;
  r.requested = requested_;
  r.buffered_bytes = buffered_.load();
  r.direct_bytes = direct_bytes_.load();
  r.gds_bytes = gds_bytes_.load();
  r.gds_mode = gds_mode_;
  r.cached_bytes = cached_bytes_;
  r.file_bytes = file_ != nullptr ? file_->size() : 0;
  if (used_direct_.load()) {
    r.queue = std::string(DirectFile::Queue());
    r.direct_readers = direct_readers_.load();
  }
  r.choice = choice_text_;
  std::lock_guard<std::mutex> lock(mu_);
  r.fallbacks = fallbacks_;
  return r;
}

}  // namespace ptd::internal
