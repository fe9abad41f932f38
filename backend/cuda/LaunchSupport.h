//===- LaunchSupport.h - Launch shapes shared by the CUDA kernels -*- C++ -*-===//
//
// Internal to backend/cuda's .cu files: the block size and grid of the
// grid-stride element loops, and the switch from a float Storage to its
// C++ storage type, which every kernel family would otherwise spell again.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_LAUNCHSUPPORT_H
#define GMOPT_BACKEND_CUDA_LAUNCHSUPPORT_H

#include "backend/cuda/CudaKernels.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Threads per block of the grid-stride element loops.
constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over \p elements: one element a thread,
/// at least one block, at most 8 x 65535 (the loop strides past that).
inline unsigned gridFor(int64_t elements) {
  int64_t blocks = (elements + kThreads - 1) / kThreads;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

} // namespace cuda
} // namespace gmopt

/// Runs the statements after \p T with T the C++ storage type of the float
/// \p storage (float, HalfBits, BFloat16Bits); any other storage returns
/// cudaErrorInvalidValue from the enclosing launch function.
#define GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, ...)                          \
  switch (storage) {                                                           \
  case Storage::F32: {                                                         \
    using T = float;                                                           \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case Storage::F16: {                                                         \
    using T = HalfBits;                                                        \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  case Storage::BF16: {                                                        \
    using T = BFloat16Bits;                                                    \
    __VA_ARGS__;                                                               \
    break;                                                                     \
  }                                                                            \
  default:                                                                     \
    return cudaErrorInvalidValue;                                              \
  }

#endif // GMOPT_BACKEND_CUDA_LAUNCHSUPPORT_H
