// Streaming digests of stored bytes and of strided views.
//
// A view's digest is the SHA-256 of its elements gathered in row-major order
// of its sizes (each element's stored bytes): the bytes of
// tensor.contiguous() for the same view in PyTorch. Gathering runs in bounded
// memory: it reads through zero-copy views when the source has them, else
// through a fixed-size window, and hashes in fixed-size chunks.
#ifndef PTD_VIEW_DIGEST_H_
#define PTD_VIEW_DIGEST_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/file_source.h"
#include "ptd/view_geometry.h"

namespace ptd {

// Bytes read from the source at once when it cannot hand out views.
inline constexpr uint64_t kGatherWindowBytes = 1 << 20;

// SHA-256 of source bytes [offset, offset + len), streamed.
absl::StatusOr<std::string> DigestRange(const FileSource& source, uint64_t offset, uint64_t len);

// Calls `sink` with the view's elements in row-major order, in chunks of at
// most kGatherWindowBytes. The storage is source bytes [storage_offset,
// storage_offset + storage_nbytes). InvalidArgument when the view's geometry
// is bad or it needs more than storage_nbytes (callers check G1/G2 first).
absl::Status GatherView(const FileSource& source, uint64_t storage_offset, uint64_t storage_nbytes,
                        const ViewSpec& view,
                        const std::function<void(absl::Span<const uint8_t>)>& sink);

// SHA-256 of GatherView's output.
absl::StatusOr<std::string> DigestView(const FileSource& source, uint64_t storage_offset,
                                       uint64_t storage_nbytes, const ViewSpec& view);

// The same two over a storage already in memory (a loaded storage): `storage`
// is the whole storage; the view is gathered from it without copying it.
absl::Status GatherView(absl::Span<const uint8_t> storage, const ViewSpec& view,
                        const std::function<void(absl::Span<const uint8_t>)>& sink);
absl::StatusOr<std::string> DigestView(absl::Span<const uint8_t> storage, const ViewSpec& view);

}  // namespace ptd

#endif  // PTD_VIEW_DIGEST_H_
