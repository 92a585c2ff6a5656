// The CUDA 12 build's launchers (cmake/PtdCuda12.cmake): gather_kernels.cu
// compiled by the host compiler with PTD_CUDA_PREBUILT_KERNELS, so that only
// its launchers are compiled here and PTD_LAUNCH finds each kernel by name in
// the prebuilt images (internal/prebuilt_kernels.h).
#include "runtime/cuda/gather_kernels.cu"  // NOLINT(build/include)
