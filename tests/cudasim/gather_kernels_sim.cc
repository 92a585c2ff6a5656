// The simulator build's kernels: runtime/cuda/gather_kernels.cu itself,
// compiled as C++ after the prelude that maps CUDA's kernel language and
// launches onto the simulator (kernel_prelude.h). The prelude must come
// first, hence the include order.
// clang-format off
#include "tests/cudasim/kernel_prelude.h"
#include "runtime/cuda/gather_kernels.cu"  // NOLINT(build/include)
// clang-format on
