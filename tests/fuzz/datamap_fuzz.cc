// Fuzz target: ptd::ContainerDataMap, ExecuTorch's NamedDataMap, over
// arbitrary .ptd bytes.
//
// Opens the bytes through a zero-copy source and through one without views
// (heap copies); both must agree. For every open map, every NamedDataMap
// call: get_num_keys; get_key for every index, the first ones out of range
// and UINT32_MAX; for every key get_tensor_layout, get_data and
// load_data_into with the right size, one byte short, one byte over, and a
// null buffer; and each call for a key that is absent. Buffers from
// get_data are read after the map is gone (they keep the container alive).
//
// Only built when the executorch package is found (TARGET ptd_executorch).
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/freeable_buffer.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/container.h"
#include "ptd/executorch/container_data_map.h"
#include "ptd/file_source.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

using ::executorch::runtime::Error;
using ::executorch::runtime::FreeableBuffer;

constexpr uint8_t kCanary = 0xA5;

// Whether ExecuTorch's TensorLayout::create refuses these sizes: it
// multiplies them in order, in unsigned 64 bits, and refuses a product that
// overflows even when a later size is 0.
bool RunningProductOverflows(const std::vector<int32_t>& sizes) {
  uint64_t n = 1;
  for (int32_t s : sizes) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return true;
  }
  return false;
}

// Every call over one map; appends the buffers get_data handed out.
void Exercise(const ContainerDataMap& map, std::vector<FreeableBuffer>* kept) {
  const Container& c = map.container();
  auto num = map.get_num_keys();
  FUZZ_CHECK(num.ok() && *num == c.named_data().size());
  for (uint32_t i = 0; i < *num + 2; ++i) {
    auto key = map.get_key(i);
    if (i >= *num) {
      FUZZ_CHECK(!key.ok() && key.error() == Error::InvalidArgument);
      continue;
    }
    FUZZ_CHECK(key.ok() && *key != nullptr);
    // A C string: a key with a NUL reads up to it (the verifier checked the
    // NUL after each key, so data() is terminated).
    FUZZ_CHECK(std::string_view(*key) == std::string_view(c.named_data()[i].key.data()));
  }
  auto beyond = map.get_key(UINT32_MAX);
  FUZZ_CHECK(!beyond.ok() && beyond.error() == Error::InvalidArgument);

  for (const NamedDataEntry& e : c.named_data()) {
    // A duplicate key (impossible after Open: C6) or one with a NUL finds
    // the first entry of that name; compare through Find.
    const NamedDataEntry* found = c.Find(e.key);
    FUZZ_CHECK(found != nullptr);
    const uint64_t load_size = map.LoadSize(*found);
    const uint64_t seg_size = *c.SegmentSize(*found);
    FUZZ_CHECK(load_size <= seg_size);

    auto layout = map.get_tensor_layout(e.key);
    if (found->layout != nullptr && RunningProductOverflows(found->layout->sizes)) {
      // C8 accepts it (a size is 0); ExecuTorch's TensorLayout does not.
      FUZZ_CHECK(!layout.ok() && layout.error() == Error::InvalidArgument);
    } else if (found->layout != nullptr) {
      FUZZ_CHECK(layout.ok());
      FUZZ_CHECK(layout->sizes().size() == found->layout->sizes.size());
      FUZZ_CHECK(layout->dim_order().size() == found->layout->dim_order.size());
      FUZZ_CHECK(layout->nbytes() == load_size);
    } else {
      FUZZ_CHECK(!layout.ok() && layout.error() == Error::NotFound);
    }

    auto data = map.get_data(e.key);
    FUZZ_CHECK(data.ok());
    FUZZ_CHECK(data->size() == seg_size);
    Touch(absl::MakeConstSpan(static_cast<const uint8_t*>(data->data()), data->size()));

    // Exactly the right size: the first load_size bytes of the segment.
    std::vector<uint8_t> buf(load_size + 1, kCanary);
    FUZZ_CHECK(map.load_data_into(e.key, buf.data(), load_size) == Error::Ok);
    FUZZ_CHECK(load_size == 0 || std::memcmp(buf.data(), data->data(), load_size) == 0);
    FUZZ_CHECK(buf[load_size] == kCanary);
    // Too small and too big: refused, nothing written.
    std::vector<uint8_t> fresh(load_size + 1, kCanary);
    if (load_size > 0) {
      FUZZ_CHECK(map.load_data_into(e.key, fresh.data(), load_size - 1) == Error::InvalidArgument);
      FUZZ_CHECK(map.load_data_into(e.key, nullptr, load_size) == Error::InvalidArgument);
    }
    FUZZ_CHECK(map.load_data_into(e.key, fresh.data(), load_size + 1) == Error::InvalidArgument);
    for (uint8_t b : fresh) FUZZ_CHECK(b == kCanary);
    kept->push_back(std::move(*data));
  }

  // A key that is absent (keys are non-empty, and this one is not UTF-8).
  const std::string_view absent("\xff\xfe absent", 9);
  if (c.Find(absent) == nullptr) {
    auto l = map.get_tensor_layout(absent);
    FUZZ_CHECK(!l.ok() && l.error() == Error::NotFound);
    auto d = map.get_data(absent);
    FUZZ_CHECK(!d.ok() && d.error() == Error::NotFound);
    uint8_t one = 0;
    FUZZ_CHECK(map.load_data_into(absent, &one, 1) == Error::NotFound);
  }
  auto empty = map.get_data(std::string_view());
  FUZZ_CHECK(!empty.ok() && empty.error() == Error::NotFound);
}

}  // namespace
}  // namespace ptd::fuzz

namespace {

// The map logs each refused call (ET_LOG); millions of lines would slow the
// fuzzer and bury its own output.
void DropLogMessage(et_timestamp_t, et_pal_log_level_t, const char*, const char*, size_t,
                    const char*, size_t) {}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ::executorch::runtime::register_pal(
      ::executorch::runtime::PalImpl::create(DropLogMessage, __FILE__));
  ::executorch::runtime::runtime_init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  std::shared_ptr<const FileSource> source =
      MemorySource(std::vector<uint8_t>(data, data + size), "fuzz.ptd");
  auto viewed = ContainerDataMap::Open(source);
  auto copied = ContainerDataMap::Open(std::make_shared<fuzz::NoViewSource>(source));
  FUZZ_CHECK(viewed.ok() == copied.ok());
  if (!viewed.ok()) {
    FUZZ_CHECK(viewed.status().code() == copied.status().code());
    return 0;
  }
  std::vector<::executorch::runtime::FreeableBuffer> kept;
  fuzz::Exercise(**viewed, &kept);
  fuzz::Exercise(**copied, &kept);
  viewed->reset();
  copied->reset();
  source.reset();
  // The buffers outlive the maps and the source.
  for (auto& b : kept) {
    fuzz::Touch(absl::MakeConstSpan(static_cast<const uint8_t*>(b.data()), b.size()));
    b.Free();
  }
  return 0;
}
