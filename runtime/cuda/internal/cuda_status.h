// CUDA errors as absl::Status: the one place that turns a cudaError_t into a
// message naming the call, the device and CUDA's own words. Only runtime/cuda
// includes this (it includes the CUDA runtime API header).
#ifndef PTD_CUDA_INTERNAL_CUDA_STATUS_H_
#define PTD_CUDA_INTERNAL_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace ptd::internal {

// "<call> on cuda:<device>: <CUDA's message> (<error name>)"; `device` < 0
// leaves out the device. Out of memory is ResourceExhausted, no device or
// driver Unavailable, an invalid argument InvalidArgument, the rest
// Internal. Clears CUDA's last-error slot so a stale, non-sticky error (a
// failed cudaMalloc) is not reported again by a later launch check.
absl::Status CudaStatus(cudaError_t error, const char* call, int device);

}  // namespace ptd::internal

// PTD_CUDA_RETURN_IF_ERROR(device, cudaMalloc, &p, n): calls cudaMalloc(&p, n)
// and returns the CudaStatus of a failure from the enclosing function.
#define PTD_CUDA_RETURN_IF_ERROR(device, fn, ...)                         \
  do {                                                                    \
    const cudaError_t ptd_cuda_error_ = fn(__VA_ARGS__);                  \
    if (ptd_cuda_error_ != cudaSuccess) {                                 \
      return ::ptd::internal::CudaStatus(ptd_cuda_error_, #fn, (device)); \
    }                                                                     \
  } while (false)

#endif  // PTD_CUDA_INTERNAL_CUDA_STATUS_H_
