#include "runtime/signing/file_hasher.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

#include "ptd/rules.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/threads.h"

namespace ptd::internal {

namespace {
constexpr size_t kReadChunk = size_t{1} << 20;
}  // namespace

absl::Status DigestMismatch(const ModelSignature& signature, const SignedFile& file,
                            const SignedFile::Shard& shard, std::string_view path) {
  const absl::string_view hash = Sv(SignatureHashName(signature.hash()));
  return RuleError(
      absl::StatusCode::kDataLoss, "A5",
      signature.sharded()
          ? absl::StrCat(Sv(path), ": bytes ", shard.start, ":", shard.end,
                         " do not hash to the signed ", hash, " digest of shard '", file.name, ":",
                         shard.start, ":", shard.end, "'")
          : absl::StrCat(Sv(path), ": the file does not hash to its signed ", hash, " digest"));
}

SignedFileHasher::SignedFileHasher(const ModelSignature& signature, const SignedFile& entry,
                                   const FileSource& file, uint64_t max_pending)
    : signature_(signature),
      entry_(entry),
      file_(file),
      size_(file.size()),
      max_pending_(max_pending) {
  for (const SignedFile::Shard& shard : entry_.shards) {
    auto s = std::make_unique<Stream>();
    s->start = shard.start;
    s->end = std::min(shard.end, size_);
    s->cursor = s->start;
    s->digest = std::make_unique<SignatureDigest>(signature_.hash());
    streams_.push_back(std::move(s));
  }
}

SignedFileHasher::~SignedFileHasher() = default;

void SignedFileHasher::ExpectReads(std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  expected_.clear();
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, size_);
    if (lo >= hi) continue;
    if (!expected_.empty() && lo <= expected_.back().second) {
      expected_.back().second = std::max(expected_.back().second, hi);
    } else {
      expected_.emplace_back(lo, hi);
    }
  }
}

uint64_t SignedFileHasher::StreamOf(uint64_t offset) const {
  return signature_.sharded() ? offset / signature_.shard_size() : 0;
}

bool SignedFileHasher::Expected(uint64_t offset) const {
  auto it =
      std::upper_bound(expected_.begin(), expected_.end(), std::make_pair(offset, ~uint64_t{0}));
  if (it == expected_.begin()) return false;
  --it;
  return offset < it->second;
}

uint64_t SignedFileHasher::NextExpected(uint64_t offset) const {
  auto it =
      std::lower_bound(expected_.begin(), expected_.end(), std::make_pair(offset, uint64_t{0}));
  return it == expected_.end() ? size_ : it->first;
}

void SignedFileHasher::Hash(Stream& s, const uint8_t* data, uint64_t n) {
  s.digest->Update(data, static_cast<size_t>(n));
  s.cursor += n;
}

absl::Status SignedFileHasher::Advance(Stream& s) {
  std::vector<uint8_t> buf;
  while (s.cursor < s.end) {
    // Pending bytes at (or overlapping) the cursor.
    auto it = s.pending.begin();
    if (it != s.pending.end() && it->first <= s.cursor) {
      const uint64_t lo = it->first;
      const uint64_t hi = lo + it->second.size();
      if (hi > s.cursor) {
        const uint64_t upto = std::min(hi, s.end);
        Hash(s, it->second.data() + (s.cursor - lo), upto - s.cursor);
      }
      pending_bytes_.fetch_sub(it->second.size(), std::memory_order_relaxed);
      s.pending.erase(it);
      continue;
    }
    if (Expected(s.cursor)) break;  // A reader will feed it.
    // Bytes nobody reads: the hasher reads them.
    const uint64_t hi = std::min(s.end, NextExpected(s.cursor));
    if (buf.empty()) buf.resize(kReadChunk);
    while (s.cursor < hi) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), hi - s.cursor));
      absl::Status st = file_.ReadAt(s.cursor, absl::MakeSpan(buf.data(), n));
      if (!st.ok()) return st;
      Hash(s, buf.data(), n);
    }
  }
  s.cv.notify_all();
  return absl::OkStatus();
}

absl::Status SignedFileHasher::Feed(uint64_t offset, const uint8_t* data, size_t n) {
  const uint64_t end = std::min<uint64_t>(offset + n, size_);
  if (offset >= end) return absl::OkStatus();
  uint64_t k = StreamOf(offset);
  for (; k < streams_.size() && streams_[k]->start < end; ++k) {
    Stream& s = *streams_[k];
    const uint64_t lo = std::max(offset, s.start);
    const uint64_t hi = std::min(end, s.end);
    if (lo >= hi) continue;
    std::unique_lock<std::mutex> lock(s.mu);
    if (!s.error.ok()) return s.error;
    absl::Status st = Advance(s);
    if (!st.ok()) return s.error = st;
    if (lo > s.cursor &&
        pending_bytes_.load(std::memory_order_relaxed) + (hi - lo) > max_pending_) {
      // Too much set aside: wait for the cursor (held by a reader that is
      // not waiting, as readers take their ranges in file order).
      s.cv.wait(lock, [&] { return s.cursor >= lo || aborted_.load(); });
      if (aborted_.load()) return absl::CancelledError("the load stopped");
    }
    if (hi <= s.cursor) continue;  // Already hashed (an overlapping read).
    if (lo <= s.cursor) {
      Hash(s, data + (s.cursor - offset), hi - s.cursor);
      st = Advance(s);
      if (!st.ok()) return s.error = st;
    } else {
      auto& slot = s.pending[lo];
      if (slot.size() < hi - lo) {
        pending_bytes_.fetch_add((hi - lo) - slot.size(), std::memory_order_relaxed);
        slot.assign(data + (lo - offset), data + (hi - offset));
      }
    }
  }
  return absl::OkStatus();
}

void SignedFileHasher::Abort() {
  aborted_ = true;
  for (auto& s : streams_) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->cv.notify_all();
  }
}

absl::Status SignedFileHasher::Finish(size_t threads) {
  // Nothing more will be fed: every byte left is the hasher's to read.
  expected_.clear();
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(streams_.size());
  const auto work = [&] {
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= streams_.size()) return;
      Stream& s = *streams_[k];
      std::lock_guard<std::mutex> lock(s.mu);
      absl::Status st = s.error.ok() ? Advance(s) : s.error;
      if (st.ok() && s.cursor != s.end) {
        st = absl::InternalError(absl::StrCat(file_.name(), ": the signature hasher stopped at ",
                                              s.cursor, " of ", s.start, ":", s.end));
      }
      if (st.ok() && s.digest->Finish() != entry_.shards[k].digest) {
        st = DigestMismatch(signature_, entry_, entry_.shards[k], file_.name());
      }
      errors[k] = std::move(st);
    }
  };
  internal::RunOnThreads(std::min(threads, streams_.size()), work);
  for (absl::Status& st : errors) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace ptd::internal
