#include <memory>

#include "absl/strings/str_cat.h"

#include "ptd/byte_source.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd {

absl::Status ByteSource::ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const {
  (void)offset;
  (void)dst;
  return absl::UnimplementedError(absl::StrCat(name(), ": no located reads"));
}

absl::StatusOr<std::shared_ptr<uint8_t>> ByteSource::MapLocated(uint64_t offset, uint64_t len,
                                                                size_t threads) const {
  (void)offset;
  (void)len;
  (void)threads;
  return absl::UnimplementedError(absl::StrCat(name(), ": no mappings"));
}

namespace {

class ContainerByteSource final : public ByteSource {
 public:
  ContainerByteSource(const Container& container, std::shared_ptr<const FileSource> data)
      : container_(container), data_(std::move(data)) {}

  std::string name() const override { return container_.path(); }

  std::vector<std::string> Keys() const override {
    std::vector<std::string> keys;
    keys.reserve(container_.named_data().size());
    for (const NamedDataEntry& e : container_.named_data()) keys.emplace_back(e.key);
    return keys;
  }

  absl::StatusOr<uint64_t> Size(std::string_view key) const override {
    PTD_ASSIGN_OR_RETURN(const NamedDataEntry* e, Entry(key));
    return *container_.SegmentSize(*e);
  }

  absl::Status ReadAt(std::string_view key, uint64_t offset,
                      absl::Span<uint8_t> dst) const override {
    PTD_ASSIGN_OR_RETURN(const NamedDataEntry* e, Entry(key));
    const uint64_t size = *container_.SegmentSize(*e);
    if (!internal::RangeInside(offset, dst.size(), size)) {
      return absl::OutOfRangeError(absl::StrCat(name(), ": read of ", dst.size(), " bytes at ",
                                                offset, " of key '", internal::Sv(key), "' (", size,
                                                " bytes)"));
    }
    return data().ReadAt(container_.SegmentFileOffset(e->segment_index) + offset, dst);
  }

  std::optional<Location> Locate(std::string_view key) const override {
    const NamedDataEntry* e = container_.Find(key);
    if (e == nullptr || !container_.SegmentSize(*e) ||
        !container_.segments()[e->segment_index].in_bounds) {
      return std::nullopt;
    }
    return Location{.segment = e->segment_index,
                    .offset = container_.SegmentFileOffset(e->segment_index)};
  }

  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    return data().ReadAt(offset, dst);
  }

  absl::StatusOr<std::shared_ptr<uint8_t>> MapLocated(uint64_t offset, uint64_t len,
                                                      size_t threads) const override {
    return data().MapPrivate(offset, len, threads);
  }

  const FileSource* LocatedFile() const override { return &data(); }

 private:
  const FileSource& data() const { return data_ ? *data_ : container_.source(); }

  // The entry of `key` with a valid, in-bounds segment, or NotFound.
  absl::StatusOr<const NamedDataEntry*> Entry(std::string_view key) const {
    const NamedDataEntry* e = container_.Find(key);
    if (e == nullptr || !container_.SegmentSize(*e) ||
        !container_.segments()[e->segment_index].in_bounds) {
      return absl::NotFoundError(
          absl::StrCat(name(), ": no readable key '", internal::Sv(key), "'"));
    }
    return e;
  }

  const Container& container_;
  std::shared_ptr<const FileSource> data_;
};

}  // namespace

std::unique_ptr<ByteSource> MakeContainerByteSource(const Container& container,
                                                    std::shared_ptr<const FileSource> data) {
  return std::make_unique<ContainerByteSource>(container, std::move(data));
}

}  // namespace ptd
