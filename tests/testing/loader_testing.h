// Helpers for loader and device tests: a device that poses as a GPU over
// host memory, sources that count or fail reads, and model files written
// with the writer half.
#ifndef PTD_TESTS_TESTING_LOADER_TESTING_H_
#define PTD_TESTS_TESTING_LOADER_TESTING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#include "ptd/byte_source.h"
#include "ptd/container.h"
#include "ptd/device.h"
#include "ptd/file_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/weight_bundle.h"

namespace ptd::testing {

// A "CUDA" device over host memory: kind kCuda, not host-accessible, with a
// compute capability, so that the loader stages its copies and sends CPU
// weights to its own host device.
class FakeCudaDevice final : public Device {
 public:
  explicit FakeCudaDevice(std::optional<uint32_t> sm = 90) : sm_(sm) {}
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override { return 0; }
  std::string name() const override { return "fake-cuda:0"; }
  std::optional<uint32_t> compute_capability() const override { return sm_; }
  bool host_accessible() const override { return false; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t n) override { return host_.Allocate(n); }
  absl::StatusOr<HostBuffer> AllocateStaging(size_t n) override { return host_.AllocateStaging(n); }
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t n) override {
    return host_.CopyToDeviceAsync(dst, src, n);
  }
  absl::Status Wait(const CopyTicket& t) override { return host_.Wait(t); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status CopyToHost(void* dst, const void* src, size_t n) override {
    return host_.CopyToHost(dst, src, n);
  }
  DeviceStats stats() const override { return host_.stats(); }

 private:
  std::optional<uint32_t> sm_;
  HostDevice host_;
};

// Counts the bytes read through a FileSource (views are not offered, so
// every byte goes through ReadAt).
class CountingFileSource final : public FileSource {
 public:
  explicit CountingFileSource(std::shared_ptr<const FileSource> inner) : inner_(std::move(inner)) {}
  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    bytes_ += dst.size();
    ++reads_;
    return inner_->ReadAt(offset, dst);
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t reads() const { return reads_; }
  void Reset() {
    bytes_ = 0;
    reads_ = 0;
  }

 private:
  std::shared_ptr<const FileSource> inner_;
  mutable std::atomic<uint64_t> bytes_{0}, reads_{0};
};

// Owns a ByteSource and forwards every call to it: a base for test sources
// that change or record one call.
class ForwardingByteSource : public ByteSource {
 public:
  explicit ForwardingByteSource(std::unique_ptr<ByteSource> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::vector<std::string> Keys() const override { return inner_->Keys(); }
  absl::StatusOr<uint64_t> Size(std::string_view key) const override { return inner_->Size(key); }
  absl::Status ReadAt(std::string_view key, uint64_t offset,
                      absl::Span<uint8_t> dst) const override {
    return inner_->ReadAt(key, offset, dst);
  }
  std::optional<Location> Locate(std::string_view key) const override {
    return inner_->Locate(key);
  }
  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    return inner_->ReadLocated(offset, dst);
  }
  absl::StatusOr<std::shared_ptr<uint8_t>> MapLocated(uint64_t offset, uint64_t len,
                                                      size_t threads) const override {
    return inner_->MapLocated(offset, len, threads);
  }

 protected:
  const ByteSource& inner() const { return *inner_; }

 private:
  std::unique_ptr<ByteSource> inner_;
};

// Wraps a ByteSource: counts reads and fails the Nth (1-based; 0 never)
// with `status`.
class FaultyByteSource final : public ByteSource {
 public:
  explicit FaultyByteSource(const ByteSource& inner, uint64_t fail_read = 0,
                            absl::Status status = absl::DataLossError("injected read fault"))
      : inner_(inner), fail_read_(fail_read), status_(std::move(status)) {}
  std::string name() const override { return inner_.name(); }
  std::vector<std::string> Keys() const override { return inner_.Keys(); }
  absl::StatusOr<uint64_t> Size(std::string_view key) const override { return inner_.Size(key); }
  absl::Status ReadAt(std::string_view key, uint64_t offset,
                      absl::Span<uint8_t> dst) const override {
    if (Count(dst.size())) return status_;
    return inner_.ReadAt(key, offset, dst);
  }
  std::optional<Location> Locate(std::string_view key) const override {
    return locate_ ? inner_.Locate(key) : std::nullopt;
  }
  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (Count(dst.size())) return status_;
    return inner_.ReadLocated(offset, dst);
  }
  void set_locate(bool locate) { locate_ = locate; }
  uint64_t reads() const { return reads_; }
  uint64_t bytes() const { return bytes_; }

 private:
  bool Count(uint64_t n) const {
    bytes_ += n;
    return ++reads_ == fail_read_;
  }
  const ByteSource& inner_;
  uint64_t fail_read_;
  absl::Status status_;
  bool locate_ = true;
  mutable std::atomic<uint64_t> reads_{0}, bytes_{0};
};

// A model written with CudaWeightWriter: weight i is a 1-D float tensor
// "w<i>" of sizes[i] bytes (a multiple of 4) with distinct bytes, plus
// optionally a CPU weight. Files: DIR/model.ptd and DIR/model.manifest.
struct TestModel {
  std::string ptd;
  std::string manifest;
  std::vector<std::string> fqns;
  std::vector<uint64_t> sizes;
  uint64_t data_bytes = 0;
};
TestModel WriteTestModel(const std::string& dir, const std::vector<uint64_t>& sizes,
                         bool with_cpu_weight = false,
                         uint64_t segment_alignment = kDefaultSegmentAlignment);

// Every weight `fqns` names has in `w` the bytes of the same weight in
// `reference` (digests of the loaded memory); gtest failures otherwise.
void ExpectSameBytes(const LoadedWeights& w, const LoadedWeights& reference,
                     const std::vector<std::string>& fqns);

// The routes a conformance case (an entry of cases.json) is loaded by: the
// container alone, its manifest, its .pte.
std::vector<BundlePaths> ConformanceRoutes(const nlohmann::json& tc);

// Checks `w`, loaded from conformance case `tc`, against cases.json: every
// key's storage (size and sha256 of the loaded bytes), every stored weight
// (sizes, strides, offset, where it lives, sha256 of its view gathered from
// the loaded memory), and every runtime-owned weight listed but not loaded.
// `device` is where a weight of device_type 1 lives (0: the host). Adds
// gtest failures; returns the fqns of the loaded weights it checked.
std::vector<std::string> ExpectLoadedAsCase(const nlohmann::json& tc, const LoadedWeights& w,
                                            DeviceKind device);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_LOADER_TESTING_H_
