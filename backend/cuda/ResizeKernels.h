//===- ResizeKernels.h - Launchers of the CUDA Resize kernels ---*- C++ -*-===//
//
// The launchers ResizeKernels.cu implements for CudaResizeDispatch.cpp:
// Resize (one thread per output element) and ResizeGrad (one thread per
// input element, gathering; no atomics, deterministic). Same conventions as
// CudaKernels.h: raw device pointers, enqueue on the stream, return the
// launch status, never allocate or synchronize. \p storage is F32, F16 or
// BF16; the arithmetic is ResizeMath.h's.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_RESIZEKERNELS_H
#define GMOPT_BACKEND_CUDA_RESIZEKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/ResizeMath.h"

namespace gmopt {
namespace cuda {

/// y[i] = resizeElement(params, x, i), rounded to \p storage, for the
/// \p outElements output elements.
cudaError_t launchResize(Storage storage, const ResizeParams &params,
                         const void *x, void *y, int64_t outElements,
                         cudaStream_t stream);

/// dX[i] = resizeGradElement(params, dY, i), rounded to \p storage, for the
/// \p inElements input elements (every one written).
cudaError_t launchResizeGrad(Storage storage, const ResizeParams &params,
                             const void *dY, void *dX, int64_t inElements,
                             cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_RESIZEKERNELS_H
