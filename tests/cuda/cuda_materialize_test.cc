// CudaDevice::Materialize against the host reference (MaterializeOnHost),
// byte for byte: random views (rank 0 to 6, permuted, broadcast, offset,
// element sizes 1, 2, 3, 4, 8 and 16, aligned and misaligned storage) and
// each fast path (contiguous copy, tiled transpose) at sizes that cross tile
// and grid limits. They need a GPU and skip without one.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/cuda_device.h"
#include "ptd/view_materialize.h"
#include "tests/cuda/cuda_test_util.h"

namespace ptd {
namespace {

class CudaMaterializeTest : public CudaTest {
 protected:
  // Uploads `storage` at byte `misalign` of a device buffer and checks the
  // device's materialized view against the host reference.
  void ExpectSameAsHost(const std::vector<uint8_t>& storage, const ViewSpec& view,
                        size_t misalign = 0) {
    auto block = device_->Allocate(storage.size() + misalign);
    ASSERT_TRUE(block.ok()) << block.status();
    const DeviceBuffer device_storage = block->Slice(misalign, storage.size());
    auto ticket = device_->CopyToDeviceAsync(device_storage.data(), storage.data(), storage.size());
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE(device_->Wait(*ticket).ok());

    auto plan = PlanMaterialize(view, storage.size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<uint8_t> expected(plan->output_nbytes);
    ASSERT_TRUE(MaterializeOnHost(storage, view, absl::MakeSpan(expected)).ok());

    auto out = device_->Materialize(device_storage, view);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), expected.size());
    std::vector<uint8_t> got(expected.size());
    ASSERT_TRUE(device_->CopyToHost(got.data(), out->data(), got.size()).ok());
    ASSERT_TRUE(got == expected) << "first difference at byte "
                                 << (std::mismatch(got.begin(), got.end(), expected.begin()).first -
                                     got.begin());
  }

  std::mt19937_64 rng_{11};

  std::vector<uint8_t> RandomBytes(size_t n) {
    std::vector<uint8_t> bytes(n);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
    return bytes;
  }
};

TEST_F(CudaMaterializeTest, RandomViewsMatchTheHostReference) {
  const uint32_t element_sizes[] = {1, 2, 3, 4, 8, 16};
  for (int iter = 0; iter < 300; ++iter) {
    const uint32_t e = element_sizes[rng_() % std::size(element_sizes)];
    const int rank = static_cast<int>(rng_() % 7);
    std::vector<int64_t> sizes(rank), strides(rank);
    for (auto& s : sizes) s = 1 + static_cast<int64_t>(rng_() % 9);
    int64_t step = 1 + static_cast<int64_t>(rng_() % 2);  // Sometimes every other element.
    for (int d = rank; d-- > 0;) {
      strides[d] = step;
      step *= sizes[d] + static_cast<int64_t>(rng_() % 2);  // Sometimes padded.
    }
    std::shuffle(strides.begin(), strides.end(), rng_);
    for (auto& t : strides) {
      if (rng_() % 5 == 0) t = 0;  // Broadcast.
    }
    if (rank > 0 && rng_() % 20 == 0) sizes[rng_() % rank] = 0;  // Empty.
    const int64_t offset = static_cast<int64_t>(rng_() % 5);
    const ViewSpec view{
        .element_size = e, .storage_offset = offset, .sizes = sizes, .strides = strides};
    const GeometryResult geometry = ComputeExtent(view);
    ASSERT_TRUE(geometry.ok()) << geometry.detail;
    const size_t storage_bytes =
        std::max<uint64_t>(geometry.extent.required_nbytes, 1) + rng_() % 3;
    SCOPED_TRACE(::testing::Message() << "iteration " << iter << " e=" << e << " rank=" << rank);
    ExpectSameAsHost(RandomBytes(storage_bytes), view, rng_() % 4 == 0 ? 1 + rng_() % 7 : 0);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CudaMaterializeTest, ContiguousZeroDimAndEmpty) {
  const auto storage = RandomBytes(4096);
  const std::vector<int64_t> sizes = {8, 16, 4}, strides = {64, 4, 1};
  ExpectSameAsHost(storage,
                   {.element_size = 4, .storage_offset = 3, .sizes = sizes, .strides = strides});
  const std::vector<int64_t> none;
  ExpectSameAsHost(storage,
                   {.element_size = 8, .storage_offset = 7, .sizes = none, .strides = none});
  const std::vector<int64_t> empty_sizes = {3, 0}, empty_strides = {1, 1};
  auto block = device_->Allocate(16);
  ASSERT_TRUE(block.ok());
  auto empty = device_->Materialize(
      *block,
      {.element_size = 4, .storage_offset = 0, .sizes = empty_sizes, .strides = empty_strides});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
}

TEST_F(CudaMaterializeTest, TransposeAcrossTileEdges) {
  for (uint32_t e : {1u, 2u, 4u, 8u}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1000, 777}, {33, 65}, {31, 2}}) {
      // A cols x rows row-major matrix, viewed transposed: rows x cols, strides (1, rows).
      const auto storage = RandomBytes(static_cast<size_t>(rows * cols) * e);
      const std::vector<int64_t> sizes = {rows, cols}, strides = {1, rows};
      SCOPED_TRACE(::testing::Message() << e << " bytes, " << rows << " x " << cols);
      ExpectSameAsHost(
          storage, {.element_size = e, .storage_offset = 0, .sizes = sizes, .strides = strides});
    }
  }
}

TEST_F(CudaMaterializeTest, TransposeWithMoreRowTilesThanGridY) {
  // 2^21 + 3 rows: 65537 row tiles, more than gridDim.y's 65535.
  const int64_t rows = (int64_t{1} << 21) + 3, cols = 3;
  const auto storage = RandomBytes(static_cast<size_t>(rows * cols));
  const std::vector<int64_t> sizes = {rows, cols}, strides = {1, rows};
  ExpectSameAsHost(storage,
                   {.element_size = 1, .storage_offset = 0, .sizes = sizes, .strides = strides});
}

TEST_F(CudaMaterializeTest, GatherBeyond2To31Elements) {
  // One byte broadcast to 2^31 + 1000 elements: the gather's grid-stride loop.
  const int64_t n = (int64_t{1} << 31) + 1000;
  auto storage = device_->Allocate(1);
  ASSERT_TRUE(storage.ok());
  const uint8_t value = 0x5a;
  auto ticket = device_->CopyToDeviceAsync(storage->data(), &value, 1);
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(device_->Wait(*ticket).ok());
  const std::vector<int64_t> sizes = {n}, strides = {0};
  auto out = device_->Materialize(
      *storage, {.element_size = 1, .storage_offset = 0, .sizes = sizes, .strides = strides});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), static_cast<size_t>(n));
  std::vector<uint8_t> tail(4096);
  ASSERT_TRUE(
      device_->CopyToHost(tail.data(), static_cast<uint8_t*>(out->data()) + n - 4096, tail.size())
          .ok());
  EXPECT_TRUE(std::all_of(tail.begin(), tail.end(), [&](uint8_t b) { return b == value; }));
}

TEST_F(CudaMaterializeTest, RejectsAViewPastItsStorage) {
  auto storage = device_->Allocate(64);
  ASSERT_TRUE(storage.ok());
  const std::vector<int64_t> sizes = {17}, strides = {1};
  const auto out = device_->Materialize(
      *storage, {.element_size = 4, .storage_offset = 0, .sizes = sizes, .strides = strides});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange) << out.status();
  EXPECT_EQ(device_->stats().live_allocations, 1u);
}

}  // namespace
}  // namespace ptd
