// SignedFileHasher: the signed digests of one file, computed from the bytes
// a load reads anyway (LoadOptions::signature), so that no byte is read
// twice. Private to the loader.
//
// The file is cut into streams: each shard of a "shards" signature, or the
// whole file for "files". A stream is hashed in order. The loader's reader
// threads hand over each range they read (Feed), from any thread, in any
// order:
// - a range at its stream's cursor is hashed at once, by the thread that
//   read it (so the shards of a file are hashed in parallel);
// - a range ahead of it is copied aside until the cursor reaches it, up to
//   kMaxPending bytes in all; past that, Feed waits for the cursor. The
//   loader's readers take their ranges in file order, so the range at the
//   cursor is always held by a thread that is not waiting: no deadlock;
// - bytes the load does not read (the header, padding, storages it skips
//   or maps) are declared up front (ExpectReads) and read by the hasher
//   itself when the cursor reaches them.
// Finish hashes what is left and compares every digest (A5).
//
// Thread-safety: Feed may be called concurrently; the rest from one thread.
#ifndef PTD_RUNTIME_SIGNING_FILE_HASHER_H_
#define PTD_RUNTIME_SIGNING_FILE_HASHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

#include "ptd/file_source.h"
#include "ptd/model_signature.h"

namespace ptd::internal {

// A5: `file`'s `shard` (the whole file for "files"), read from `path`,
// does not hash to its signed digest. The message names the path and, for
// "shards", the byte range and the shard's resource name.
absl::Status DigestMismatch(const ModelSignature& signature, const SignedFile& file,
                            const SignedFile::Shard& shard, std::string_view path);

class SignedFileHasher {
 public:
  static constexpr uint64_t kMaxPending = uint64_t{64} << 20;

  // `entry` is `file`'s entry in `signature` (its size already checked,
  // A4). Both outlive the hasher.
  SignedFileHasher(const ModelSignature& signature, const SignedFile& entry, const FileSource& file,
                   uint64_t max_pending = kMaxPending);
  ~SignedFileHasher();

  // The ranges [first, second) the load will Feed, in any order (they may
  // overlap). Everything else is read by the hasher. Call before Feed.
  void ExpectReads(std::vector<std::pair<uint64_t, uint64_t>> ranges);

  // Bytes [offset, offset + n) of the file, as read (bytes past its end are
  // ignored). Cancelled after Abort.
  absl::Status Feed(uint64_t offset, const uint8_t* data, size_t n);

  // Hashes what was not fed (`threads` at a time) and checks every digest:
  // A5 naming the file and, for "shards", the shard's byte range.
  absl::Status Finish(size_t threads);

  // Wakes and fails every waiting Feed (the load failed).
  void Abort();

  // Which stream holds `offset` (for readers that group their work by
  // stream: a stream per shard_size bytes, or one).
  uint64_t StreamOf(uint64_t offset) const;
  bool sharded() const { return signature_.sharded(); }

 private:
  struct Stream {
    uint64_t start = 0, end = 0;
    uint64_t cursor = 0;
    std::unique_ptr<SignatureDigest> digest;
    std::map<uint64_t, std::vector<uint8_t>> pending;  // By file offset.
    std::mutex mu;
    std::condition_variable cv;
    absl::Status error;
    bool finished = false;
  };

  // Moves `s`'s cursor over pending bytes and over bytes nobody will feed
  // (reading them). REQUIRES: s.mu held.
  absl::Status Advance(Stream& s);
  // The first byte at or after `offset` that a read will feed, or end.
  uint64_t NextExpected(uint64_t offset) const;
  bool Expected(uint64_t offset) const;
  void Hash(Stream& s, const uint8_t* data, uint64_t n);

  const ModelSignature& signature_;
  const SignedFile& entry_;
  const FileSource& file_;
  uint64_t size_ = 0;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::pair<uint64_t, uint64_t>> expected_;  // Sorted, merged.
  uint64_t max_pending_;
  std::atomic<uint64_t> pending_bytes_{0};
  std::atomic<bool> aborted_{false};
};

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_SIGNING_FILE_HASHER_H_
