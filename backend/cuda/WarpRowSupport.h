//===- WarpRowSupport.h - Pieces of the warp-per-row kernels -----*- C++ -*-===//
//
// Internal to backend/cuda's .cu files: what the kernels that give one warp
// to a row (the losses of LossKernels.cu, the fused cross entropy and the
// fused attention) would otherwise each spell again: the warp's maximum and
// sum by butterfly shuffles, which leave the result in every lane, and the
// read of an int32 or int64 label.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_WARPROWSUPPORT_H
#define GMOPT_BACKEND_CUDA_WARPROWSUPPORT_H

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Lanes of a warp.
constexpr int kWarpSize = 32;

/// The maximum of \p v over the warp, in every lane.
__device__ __forceinline__ float warpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The sum of \p v over the warp (float or double), in every lane; the
/// same butterfly order in every lane, so every lane gets the same bits.
template <typename T> __device__ __forceinline__ T warpSum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Label \p index of \p labels, int32 when \p labels32, else int64.
__device__ __forceinline__ int64_t labelAt(const void *labels, bool labels32,
                                           int64_t index) {
  return labels32 ? static_cast<const int32_t *>(labels)[index]
                  : static_cast<const int64_t *>(labels)[index];
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_WARPROWSUPPORT_H
