//===- CnnKernels.h - gmopt's own CNN kernels on CUDA -----------*- C++ -*-===//
//
// Launches of the pooling kernels, the 16-bit scatter-add of MaxPoolGrad
// and GatherGrad, and the convolution pad / crop kernels (CnnKernels.cu)
// behind CudnnDispatch.cpp (and GatherGrad's entry in CudaDispatch.cpp). Every
// launch takes the element storage of its float tensors (F32, F16 or BF16; the
// arithmetic is fp32, PoolMath.h), is asynchronous on \p stream and returns the
// launch status. Batch norm's statistics kernel is declared in CudaKernels.h.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CNNKERNELS_H
#define GMOPT_BACKEND_CUDA_CNNKERNELS_H

#include "backend/cuda/ConvPadMath.h"
#include "backend/cuda/CudaKernels.h"

namespace gmopt {
namespace cuda {

/// MaxPool of [N, C, H, W] over window \p g (PoolMath.h): y and, when not
/// null, the int64 Indices (flattened positions in X, as the CPU kernel
/// writes them).
cudaError_t launchMaxPool(Storage storage, const void *x, void *y,
                          int64_t *indices, const WindowParams &g,
                          cudaStream_t stream);
/// AveragePool of [N, C, H, W] over window \p g.
cudaError_t launchAveragePool(Storage storage, const void *x, void *y,
                              const WindowParams &g, cudaStream_t stream);
/// AveragePoolGrad: every dx element gathers the shares of the windows that
/// cover it (no atomics, reproducible).
cudaError_t launchAveragePoolGrad(Storage storage, const void *dy, void *dx,
                                  const WindowParams &g, cudaStream_t stream);

/// dX seen as [outer, axisExtent, inner], dY as [outer, indexCount, inner].
struct ScatterRows {
  int64_t outer = 1, axisExtent = 0, indexCount = 0, inner = 1;
};

/// The scatter-add of MaxPoolGrad (over the flattened dX) and GatherGrad in
/// 16-bit storage (\p storage F16 or BF16): dX = 0, then dY's row k added
/// to dX's row indices[k] (int64, or int32 with \p indices32; negative
/// ones counted from the end). With \p accumulator (fp32 scratch of dX's
/// elements) the sums are fp32 atomics, rounded once into dX, as the CPU
/// backend's staged fp32 kernels round them; without it, 16-bit atomics on
/// dX itself (each add rounded). An index out of range raises the device
/// fault of the current launch id and adds nothing. fp32 is
/// launchGatherGrad.
cudaError_t launchScatterAdd16(Storage storage, const void *dy,
                               const void *indices, bool indices32, void *dx,
                               float *accumulator, const ScatterRows &rows,
                               cudaStream_t stream);

/// y[n, c, s] += bias[c] for 16-bit \p storage, y [batch, channels,
/// spatial] (fp32 add, rounded): a 16-bit Conv's bias, added here rather
/// than by cudnnAddTensor, whose bf16 support cuDNN does not document.
cudaError_t launchConvBias16(Storage storage, void *y, const void *bias,
                             int64_t batch, int64_t channels, int64_t spatial,
                             cudaStream_t stream);
/// dB[c] = the sum of dY[n, c, s] over n and s for 16-bit \p storage: fp32
/// sums in a fixed order (one block per channel, reproducible), rounded
/// once; ConvGrad's dB, for the same reason.
cudaError_t launchConvBiasGrad16(Storage storage, const void *dy, void *db,
                                 int64_t batch, int64_t channels,
                                 int64_t spatial, cudaStream_t stream);

/// Copies the planes of \p in (elements of \p elementBytes: 2 or 4) into
/// the padded planes of \p out, zeros around them (ConvPadMath.h).
cudaError_t launchConvPad(const void *in, void *out, int64_t elementBytes,
                          const ConvPadGeometry &g, cudaStream_t stream);
/// The inverse: \p out (unpadded) cropped from the padded planes of \p in.
cudaError_t launchConvCrop(const void *in, void *out, int64_t elementBytes,
                           const ConvPadGeometry &g, cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CNNKERNELS_H
