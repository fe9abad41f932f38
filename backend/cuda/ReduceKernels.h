//===- ReduceKernels.h - Reductions and reducing ops on CUDA ----*- C++ -*-===//
//
// Launches of the kernels in ReduceKernels.cu behind CudaReduceDispatch.cpp:
// the Reduce* family over any set of axes (ReduceIndexing), ArgMax /
// ArgMin, InstanceNormalization, InvertibleLayerNormalizationGrad and
// DivGrad. Each output is computed by one thread, one warp or one block
// (chosen from the output count and the reduction length) in a fixed order,
// so results are reproducible. Every launch is asynchronous on \p stream,
// allocates nothing and returns the launch status. launchReduce (the
// [outer, n, inner] form, CudaKernels.h) is defined here too.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_REDUCEKERNELS_H
#define GMOPT_BACKEND_CUDA_REDUCEKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/ReduceMath.h"

namespace gmopt {
namespace cuda {

/// out[o] = the \p kind reduction of x over \p ix (slot 0) for each of
/// ix.outputs elements, in \p storage (a float type), accumulated as
/// ReduceMath.h says.
cudaError_t launchStridedReduce(ReduceKind kind, Storage storage, const void *x,
                                void *out, const ReduceIndexing &ix,
                                cudaStream_t stream);

/// ArgMax (\p isMax) or ArgMin of x over \p ix (slot 0; at most one reduced
/// dimension, whose position is the index written) into int64 \p out.
cudaError_t launchArgReduce(Storage storage, const void *x, int64_t *out,
                            const ReduceIndexing &ix, bool isMax,
                            bool selectLast, cudaStream_t stream);

/// InstanceNormalization of x [planes = N * channels, size] with per-channel
/// scale and bias.
cudaError_t launchInstanceNorm(Storage storage, const void *x,
                               const void *scale, const void *bias, void *y,
                               int64_t planes, int64_t channels, int64_t size,
                               double epsilon, cudaStream_t stream);

/// InvertibleLayerNormalizationGrad over [rows, cols]: dx from dy, the
/// forward output y, scale, bias and the fp32 inverse standard deviation
/// per row; dscale and dbias (each may be null) summed over rows in
/// kNormGradRowBlock blocks.
cudaError_t launchInvertibleLayerNormGrad(Storage storage, const void *dy,
                                          const void *y, const void *scale,
                                          const void *bias, const float *invStd,
                                          void *dx, void *dscale, void *dbias,
                                          int64_t rows, int64_t cols,
                                          cudaStream_t stream);

/// One output of DivGrad over the iteration space of dY (slot 0 dY, slot 1
/// A, slot 2 B, kept dimensions those of the output's operand): \p forB
/// false writes dA = sum(dy / b), true dB = sum(-dy * a / b^2).
cudaError_t launchDivGrad(Storage storage, const void *dy, const void *a,
                          const void *b, void *grad, const ReduceIndexing &ix,
                          bool forB, cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_REDUCEKERNELS_H
