// The CUDA 12 build's prebuilt kernels (cmake/PtdCuda12.cmake,
// runtime/cuda/prebuilt_kernels.cc): which image each device gets, and that
// the embedded images carry every entry point the launchers name. These need
// no GPU (the gpu-bundle test runs them on the CPU machine). Compiled in
// every build of ptd_cuda_tests, they exist only in the CUDA 12 one.
#if defined(PTD_CUDA_PREBUILT_KERNELS)

#include "runtime/cuda/internal/prebuilt_kernels.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptd::internal {
namespace {

constexpr const char* kEntryPoints[] = {"ptd_gather_w1",    "ptd_gather_w2",    "ptd_gather_w4",
                                        "ptd_gather_w8",    "ptd_transpose_w1", "ptd_transpose_w2",
                                        "ptd_transpose_w4", "ptd_transpose_w8", "ptd_scatter"};

std::string_view Bytes(const PrebuiltImage& image) {
  return std::string_view(static_cast<const char*>(image.data), image.size);
}

std::string Selected(const PrebuiltImage* images, size_t count, uint32_t cc) {
  const PrebuiltImage* image = SelectPrebuiltImage(images, count, cc);
  return image == nullptr ? "none" : PrebuiltImageName(*image);
}

TEST(PrebuiltKernelsTest, EachDeviceGetsAnImageThatRunsOnIt) {
  const PrebuiltImage images[] = {{80, false, nullptr, 0},
                                  {90, false, nullptr, 0},
                                  {100, false, nullptr, 0},
                                  {120, false, nullptr, 0},
                                  {80, true, nullptr, 0}};
  const size_t n = std::size(images);
  // Native code runs on later minor versions of its major one only.
  EXPECT_EQ(Selected(images, n, 80), "sm_80 cubin");    // A100
  EXPECT_EQ(Selected(images, n, 86), "sm_80 cubin");    // RTX 30xx, A10
  EXPECT_EQ(Selected(images, n, 89), "sm_80 cubin");    // L4, L40
  EXPECT_EQ(Selected(images, n, 90), "sm_90 cubin");    // H100, H200
  EXPECT_EQ(Selected(images, n, 100), "sm_100 cubin");  // B200
  EXPECT_EQ(Selected(images, n, 103), "sm_100 cubin");
  EXPECT_EQ(Selected(images, n, 120), "sm_120 cubin");  // RTX 50xx
  EXPECT_EQ(Selected(images, n, 121), "sm_120 cubin");
  // No cubin of the major version: the PTX, which the driver compiles.
  EXPECT_EQ(Selected(images, n, 110), "compute_80 PTX");
  EXPECT_EQ(Selected(images, n, 130), "compute_80 PTX");
  // Older than every image.
  EXPECT_EQ(Selected(images, n, 75), "none");
  EXPECT_EQ(Selected(images, n, 70), "none");
  // Without a PTX, a device of another major version gets nothing.
  EXPECT_EQ(Selected(images, n - 1, 110), "none");
}

TEST(PrebuiltKernelsTest, TheEmbeddedImagesCarryEveryEntryPoint) {
  size_t count = 0;
  const PrebuiltImage* images = PrebuiltImages(&count);
  ASSERT_NE(images, nullptr);
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(PrebuiltImageName(images[i]));
  EXPECT_THAT(names, ::testing::ElementsAre("sm_80 cubin", "sm_90 cubin", "sm_100 cubin",
                                            "sm_120 cubin", "compute_80 PTX"));
  for (size_t i = 0; i < count; ++i) {
    const PrebuiltImage& image = images[i];
    const std::string_view bytes = Bytes(image);
    SCOPED_TRACE(names[i]);
    ASSERT_GT(image.size, 1000u);
    if (image.ptx) {
      // A C string for the driver's compiler: NUL right after the text.
      EXPECT_EQ(static_cast<const char*>(image.data)[image.size], '\0');
      EXPECT_THAT(std::string(bytes), ::testing::HasSubstr(".target sm_80"));
      for (const char* entry : kEntryPoints) {
        EXPECT_THAT(std::string(bytes),
                    ::testing::HasSubstr(std::string(".visible .entry ") + entry + "("));
      }
    } else {
      // An ELF file for the CUDA machine (e_machine EM_CUDA, 190).
      ASSERT_EQ(bytes.substr(0, 4), std::string_view("\x7f"
                                                     "ELF",
                                                     4));
      uint16_t machine = 0;
      std::memcpy(&machine, bytes.data() + 18, sizeof(machine));
      EXPECT_EQ(machine, 190);
      for (const char* entry : kEntryPoints) {
        // The symbol table's names, NUL-terminated.
        EXPECT_NE(bytes.find(std::string_view(entry, std::strlen(entry) + 1)),
                  std::string_view::npos)
            << entry;
      }
    }
  }
}

}  // namespace
}  // namespace ptd::internal

#endif  // PTD_CUDA_PREBUILT_KERNELS
