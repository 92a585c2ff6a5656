// The simulator's self-tests: each plants a bug, in a tiny program, that the
// hardware would punish, and expects the failure. Each strictness check of
// cudasim.h has a test here (or in kernel_exec_test.cc) that fails when the
// check is disabled; ctest proves it (tests/cudasim/CMakeLists.txt,
// "cudasim.without.*": the test run with PTD_CUDASIM_DISABLE=<check> must
// fail).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "tests/cudasim/cudasim.h"
#include "tests/cudasim/kernel_prelude.h"

namespace cudasim {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBytes = 64 * 1024;

// Waits up to `limit` for `stream` to go idle.
bool IdleWithin(cudaStream_t stream, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (StreamIdle(stream)) return true;
    std::this_thread::sleep_for(1ms);
  }
  return StreamIdle(stream);
}

// Pinned and device buffers and a non-blocking stream, freed at the end.
class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaHostAlloc(&pinned_, kBytes, cudaHostAllocDefault), cudaSuccess);
    ASSERT_EQ(cudaHostAlloc(&pinned2_, kBytes, cudaHostAllocDefault), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&device_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    EXPECT_EQ(cudaFree(device_), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned_), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned2_), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  uint8_t* pinned() { return static_cast<uint8_t*>(pinned_); }
  uint8_t* pinned2() { return static_cast<uint8_t*>(pinned2_); }

  void* pinned_ = nullptr;
  void* pinned2_ = nullptr;
  void* device_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// ---- device memory is not host memory (check "protect") ----

using SimDeathTest = SimTest;

TEST_F(SimDeathTest, HostDereferenceOfADevicePointerDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        volatile uint8_t* p = static_cast<volatile uint8_t*>(device_);
        p[0] = 1;
        std::fprintf(stderr, "wrote device memory from the host: %d\n", p[0]);
      },
      "");
}

// ---- streams are asynchronous (check "async") ----

TEST_F(SimTest, APinnedCopyReadsItsSourceWhenItRuns) {
  std::memset(pinned(), 'a', kBytes);
  {
    StreamGate gate(stream_);
    ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    EXPECT_FALSE(StreamIdle(stream_)) << "the copy ran before the call returned";
    // The bug: the staging buffer is reused before its copy completed.
    std::memset(pinned(), 'b', kBytes);
  }
  ASSERT_EQ(cudaMemcpyAsync(pinned2(), device_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(pinned2()[0], 'b') << "the copy read its source at the call, not when it ran";
  EXPECT_EQ(pinned2()[kBytes - 1], 'b');
}

TEST_F(SimTest, EventsCompleteWhenTheStreamReachesThem) {
  cudaEvent_t never = nullptr, event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&never, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(never), cudaSuccess) << "an event never recorded is complete";
  EXPECT_EQ(cudaEventSynchronize(never), cudaSuccess);
  {
    StreamGate gate(stream_);
    ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  }
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(never), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// ---- pageable memory (the behaviour CUDA documents for cudaMemcpy) ----

TEST_F(SimTest, APageableCopyStagesItsSourceBeforeReturning) {
  std::vector<uint8_t> pageable(kBytes, 'p');
  ASSERT_EQ(cudaMemcpyAsync(device_, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream_),
            cudaSuccess);
  std::fill(pageable.begin(), pageable.end(), 'q');  // Safe: the source was staged.
  ASSERT_EQ(cudaMemcpyAsync(pinned2(), device_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(pinned2()[0], 'p');
}

// Check "pageable_d2h".
TEST_F(SimTest, DeviceToPageableIsSynchronous) {
  std::memset(pinned(), 'd', kBytes);
  ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, stream_),
            cudaSuccess);
  std::vector<uint8_t> pageable(kBytes, 0);
  StreamGate gate(stream_);
  std::thread opener([&] {
    std::this_thread::sleep_for(50ms);
    gate.Open();
  });
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), device_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaSuccess);
  // No synchronization: the call itself waited for the copy.
  const uint8_t first = pageable[0], last = pageable[kBytes - 1];
  opener.join();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(first, 'd');
  EXPECT_EQ(last, 'd');
}

// ---- ordering (checks "wait_event", "legacy_sync", "free_sync") ----

TEST_F(SimTest, StreamWaitEventOrdersAnotherStream) {
  cudaStream_t reader = nullptr;
  cudaEvent_t copied = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), cudaSuccess);
  std::memset(pinned(), 'w', kBytes);
  std::memset(pinned2(), 0, kBytes);
  {
    StreamGate gate(stream_);
    ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    ASSERT_EQ(cudaEventRecord(copied, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(reader, copied, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(pinned2(), device_, kBytes, cudaMemcpyDeviceToHost, reader),
              cudaSuccess);
    EXPECT_FALSE(IdleWithin(reader, 100ms)) << "the reader did not wait for the event";
  }
  ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
  EXPECT_EQ(pinned2()[0], 'w');
  EXPECT_EQ(cudaEventDestroy(copied), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(reader), cudaSuccess);
}

TEST_F(SimTest, TheLegacyStreamWaitsForBlockingStreamsOnly) {
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);
  {
    // A non-blocking stream held up does not hold up the legacy stream.
    StreamGate gate(stream_);
    ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, nullptr),
              cudaSuccess);
    EXPECT_TRUE(IdleWithin(nullptr, 2000ms));
  }
  {
    // A blocking stream held up does.
    StreamGate gate(blocking);
    ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, nullptr),
              cudaSuccess);
    EXPECT_FALSE(IdleWithin(nullptr, 100ms)) << "the legacy stream ran past a blocking stream";
  }
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(SimTest, FreeAndFreeHostSynchronize) {
  for (bool host : {false, true}) {
    SCOPED_TRACE(host ? "cudaFreeHost" : "cudaFree");
    void* victim = nullptr;
    ASSERT_EQ(host ? cudaHostAlloc(&victim, 4096, 0) : cudaMalloc(&victim, 4096), cudaSuccess);
    StreamGate gate(stream_);
    ASSERT_EQ(cudaMemcpyAsync(device_, pinned(), kBytes, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    std::thread opener([&] {
      std::this_thread::sleep_for(50ms);
      gate.Open();
    });
    ASSERT_EQ(host ? cudaFreeHost(victim) : cudaFree(victim), cudaSuccess);
    EXPECT_TRUE(StreamIdle(stream_)) << "returned before the device's work was done";
    opener.join();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
}

// ---- errors as CUDA reports them ----

__global__ void Nothing(int) {}

struct Big {
  char bytes[4097];
};
__global__ void TakesTooMuch(Big) {}

// Check "launch_config".
TEST_F(SimTest, InvalidLaunchConfigurationsFail) {
  struct Case {
    dim3 grid, block;
    size_t shared;
    cudaError_t want;
  };
  const Case cases[] = {
      {dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32, 32, 2), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
      {dim3(1, 65536), dim3(1), 0, cudaErrorInvalidConfiguration},
      {dim3(1, 1, 65536), dim3(1), 0, cudaErrorInvalidConfiguration},
      {dim3(0), dim3(1), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32), 48 * 1024 + 1, cudaErrorInvalidValue},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.grid.x << "x" << c.grid.y << "x" << c.grid.z << " / "
                                      << c.block.x << "x" << c.block.y << "x" << c.block.z);
    PTD_CUDASIM_LAUNCH(Nothing, c.grid, c.block, c.shared, stream_)(1);
    EXPECT_EQ(cudaPeekAtLastError(), c.want);
    EXPECT_EQ(cudaGetLastError(), c.want);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError clears the last error";
  }
  PTD_CUDASIM_LAUNCH(TakesTooMuch, dim3(1), dim3(1), 0, stream_)(Big{});
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << "4097 bytes of kernel parameters";
  PTD_CUDASIM_LAUNCH(Nothing, dim3(1, 65535), dim3(1), 0, stream_)(1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the largest grid y is valid";
  PTD_CUDASIM_LAUNCH(Nothing, dim3(1), dim3(1024), 0, stream_)(1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the largest block is valid";
  PTD_CUDASIM_LAUNCH(Nothing, dim3(1), dim3(1), 0, stream_)(1);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

// Check "ordinal".
TEST_F(SimTest, InvalidDeviceOrdinalsFail) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(count), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  EXPECT_EQ(cudaGetDeviceProperties(&prop, count), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);
}

// Check "capacity".
TEST(SimCapacityTest, AllocationsPastTheCapacityFail) {
  Config config = CurrentConfig();
  config.capacity = uint64_t{64} << 20;
  config.context_reserve = 0;  // The capacity alone (SimContextTest below).
  ASSERT_TRUE(Configure(config));
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, size_t{48} << 20), cudaSuccess);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, size_t{64} << 20);
  EXPECT_EQ(free, size_t{16} << 20);
  EXPECT_EQ(cudaMalloc(&b, size_t{32} << 20), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "out of memory is not sticky";
  ASSERT_EQ(cudaMalloc(&b, size_t{16} << 20), cudaSuccess) << "exactly the rest fits";
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  EXPECT_EQ(DeviceBytesInUse(0), 0u);
  ASSERT_TRUE(Configure(Config{}));
}

// Check "pin": every page resident when cudaHostAlloc returns, and no more
// pinned than the limit.
TEST(SimPinTest, HostAllocPinsEveryPageUpToTheLimit) {
  Config config = CurrentConfig();
  config.pinned_limit = uint64_t{8} << 20;
  ASSERT_TRUE(Configure(config));
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaHostAlloc(&a, size_t{6} << 20, cudaHostAllocMapped), cudaSuccess);
  const size_t pages = (size_t{6} << 20) / 4096;
  std::vector<unsigned char> resident(pages);
  ASSERT_EQ(::mincore(a, size_t{6} << 20, resident.data()), 0);
  EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }),
            static_cast<ptrdiff_t>(pages));
  EXPECT_EQ(cudaHostAlloc(&b, size_t{4} << 20, 0), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaHostAlloc(&b, size_t{2} << 20, 0), cudaSuccess) << "exactly the rest fits";
  EXPECT_EQ(cudaFreeHost(a), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(b), cudaSuccess);
  ASSERT_TRUE(Configure(Config{}));
}

// Check "context": free starts below the total, by the context's share.
TEST(SimContextTest, TheContextHoldsPartOfTheDevice) {
  Config config = CurrentConfig();
  config.capacity = uint64_t{64} << 20;
  config.context_reserve = uint64_t{4} << 20;
  ASSERT_TRUE(Configure(config));
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, size_t{64} << 20);
  EXPECT_EQ(free, size_t{60} << 20);
  void* a = nullptr;
  EXPECT_EQ(cudaMalloc(&a, size_t{62} << 20), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaMalloc(&a, size_t{60} << 20), cudaSuccess) << "exactly the rest fits";
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  // An eighth of the capacity at most.
  config.context_reserve = uint64_t{1} << 30;
  ASSERT_TRUE(Configure(config));
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, size_t{56} << 20);
  ASSERT_TRUE(Configure(Config{}));
}

// Check "sticky".
TEST(SimErrorTest, StickyErrorsStayAndOthersClear) {
  void* p = nullptr;
  FailNthCall("cudaMalloc", 2, cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorMemoryAllocation) << "the 2nd call fails";
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess) << "the 3rd works again";
  EXPECT_EQ(cudaFree(p), cudaSuccess);

  // A fault that corrupts the context: every later call returns it, and
  // cudaGetLastError does not clear it.
  FailNthCall("cudaDeviceSynchronize", 1, cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  ASSERT_TRUE(Configure(CurrentConfig()));  // A fresh device: the test's own cleanup.
  (void)cudaGetLastError();                 // The thread's last error, no longer sticky.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(SimErrorTest, ErrorNamesAndStringsAreCudas) {
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorIllegalAddress),
               "an illegal memory access was encountered");
}

// ---- several devices ----

TEST(SimDevicesTest, TheCurrentDeviceIsPerThreadAndTouchesAreRecorded) {
  Config config = CurrentConfig();
  config.devices = 2;
  ASSERT_TRUE(Configure(config));
  std::thread::id worker_id;
  std::thread worker([&] {
    worker_id = std::this_thread::get_id();
    void* p = nullptr;
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
    cudaPointerAttributes a;
    ASSERT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(a.device, 1);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
  worker.join();
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0) << "cudaSetDevice holds per host thread";
  EXPECT_EQ(DevicesTouchedBy(worker_id), std::set<int>{1});
  EXPECT_EQ(DevicesWithContext(), std::set<int>{1}) << "cudaGetDevice creates no context";
  ASSERT_TRUE(Configure(Config{}));
}

TEST(SimFaultTest, TheNthCallOfANamedApiFails) {
  const uint64_t before = CallCount("cudaMalloc");
  FailNthCall("cudaMalloc", 3, cudaErrorMemoryAllocation);
  std::vector<void*> got;
  std::vector<cudaError_t> errors;
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    errors.push_back(cudaMalloc(&p, 16));
    if (p != nullptr) got.push_back(p);
  }
  EXPECT_EQ(errors, (std::vector<cudaError_t>{cudaSuccess, cudaSuccess, cudaErrorMemoryAllocation,
                                              cudaSuccess}));
  EXPECT_EQ(CallCount("cudaMalloc") - before, 4u);
  for (void* p : got) EXPECT_EQ(cudaFree(p), cudaSuccess);
  (void)cudaGetLastError();
}

// ---- kernels (check "kernel_host"; the barrier is in kernel_exec_test.cc) ----

__global__ void Fill(uint8_t* out, uint8_t value, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void Sum(const uint8_t* in, uint32_t n, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t s = 0;
  for (uint32_t i = 0; i < n; ++i) s += in[i];
  *out = s;
}

TEST_F(SimTest, KernelsReachDeviceAndPinnedMemory) {
  PTD_CUDASIM_LAUNCH(Fill, dim3(kBytes / 256), dim3(256), 0, stream_)
  (static_cast<uint8_t*>(device_), uint8_t{3}, uint32_t{kBytes});
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::memset(pinned(), 1, kBytes);
  auto* sum = reinterpret_cast<uint64_t*>(pinned2());
  PTD_CUDASIM_LAUNCH(Sum, dim3(1), dim3(32), 0, stream_)(pinned(), uint32_t{kBytes}, sum);
  ASSERT_EQ(cudaMemcpyAsync(pinned(), device_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(*sum, kBytes) << "the kernel read the pinned bytes before the copy overwrote them";
  EXPECT_EQ(pinned()[0], 3);
  EXPECT_EQ(pinned()[kBytes - 1], 3);
}

TEST_F(SimDeathTest, AKernelTouchingPageableMemoryDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        std::vector<uint8_t> pageable(4096, 1);
        uint64_t* sum = reinterpret_cast<uint64_t*>(pinned2());
        PTD_CUDASIM_LAUNCH(Sum, dim3(1), dim3(1), 0, stream_)(pageable.data(), 4096u, sum);
        (void)cudaStreamSynchronize(stream_);
        std::fprintf(stderr, "a kernel read pageable memory: %llu\n",
                     static_cast<unsigned long long>(*sum));
      },
      "");
}

// Check "misaligned": an 8-byte load one byte off its alignment, as a
// gather of words from a sliced buffer would make.
__global__ void LoadWord(const uint8_t* in, uint64_t* out) {
  if (threadIdx.x == 0) *out = *reinterpret_cast<const uint64_t*>(in + 1);
}

TEST_F(SimDeathTest, AMisalignedWordInAKernelDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        uint64_t* out = reinterpret_cast<uint64_t*>(pinned2());
        PTD_CUDASIM_LAUNCH(LoadWord, dim3(1), dim3(1), 0, stream_)(pinned(), out);
        (void)cudaStreamSynchronize(stream_);
        std::fprintf(stderr, "a kernel loaded a misaligned word: %llu\n",
                     static_cast<unsigned long long>(*out));
      },
      "misaligned address");
}

// Check "pending_free": with free_sync off, nothing waits for the copy, and
// the free is caught rather than left to corrupt what the copy reads.
TEST_F(SimDeathTest, FreeingPinnedMemoryAPendingCopyReadsDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Disable(Check::kFreeSync);
        void* victim = nullptr;
        (void)cudaHostAlloc(&victim, kBytes, 0);
        StreamGate gate(stream_);
        (void)cudaMemcpyAsync(device_, victim, kBytes, cudaMemcpyHostToDevice, stream_);
        (void)cudaFreeHost(victim);
        std::fprintf(stderr, "freed under a pending copy\n");
        std::exit(0);
      },
      "cudaFreeHost\\(0x[0-9a-f]+\\): a copy pending on a stream of device 0 still reads");
}

TEST_F(SimDeathTest, AKernelReadingPastItsAllocationDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        uint64_t* sum = reinterpret_cast<uint64_t*>(pinned2());
        PTD_CUDASIM_LAUNCH(Sum, dim3(1), dim3(1), 0, stream_)
        (static_cast<uint8_t*>(device_), uint32_t{kBytes + 4096}, sum);
        (void)cudaStreamSynchronize(stream_);
        std::fprintf(stderr, "read past the allocation: %llu\n",
                     static_cast<unsigned long long>(*sum));
      },
      "");
}

TEST(SimDevicesTest, LaunchesAndEventRecordsStayOnTheStreamsDevice) {
  Config config = CurrentConfig();
  config.devices = 2;
  ASSERT_TRUE(Configure(config));
  cudaStream_t on1 = nullptr;
  cudaEvent_t event0 = nullptr;
  void* p = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&on1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&event0, cudaEventDisableTiming), cudaSuccess);
  PTD_CUDASIM_LAUNCH(Nothing, dim3(1), dim3(1), 0, on1)(1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle)
      << "a launch goes to a stream of the current device";
  EXPECT_EQ(cudaEventRecord(event0, on1), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  // A copy may go to another device's stream.
  uint8_t bytes[64] = {};
  EXPECT_EQ(cudaMemcpyAsync(bytes, p, 64, cudaMemcpyDeviceToHost, on1), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event0), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(on1), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_TRUE(Configure(Config{}));
}

}  // namespace
}  // namespace cudasim
