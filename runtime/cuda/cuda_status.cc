#include "runtime/cuda/internal/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace ptd::internal {

absl::Status CudaStatus(cudaError_t error, const char* call, int device) {
  // Reset the last-error slot (no effect on sticky errors, which every later
  // call reports anyway).
  (void)cudaGetLastError();
  const std::string where =
      device >= 0 ? absl::StrCat(call, " on cuda:", device) : std::string(call);
  std::string message =
      absl::StrCat(where, ": ", cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return absl::InvalidArgumentError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

}  // namespace ptd::internal
