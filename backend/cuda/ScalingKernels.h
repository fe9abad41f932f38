//===- ScalingKernels.h - Mixed-precision kernels on CUDA --------*- C++
//-*-===//
//
// Launches of the finiteness and loss-scaling kernels (ScalingKernels.cu)
// behind CudaScalingDispatch.cpp. Every launch is asynchronous on \p stream
// and returns the launch status; scalars the step computes (the loss
// scale) are read on the device.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_SCALINGKERNELS_H
#define GMOPT_BACKEND_CUDA_SCALINGKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/ScalingMath.h"

namespace gmopt {
namespace cuda {

/// IsFinite: out[i] = passesFiniteTest(x[i], Finite) as a bool byte.
cudaError_t launchIsFinite(Storage storage, const void *x, uint8_t *out,
                           int64_t elements, cudaStream_t stream);
/// One input of IsAllFinite: clears *flag when an element of \p x fails
/// \p test (the caller sets *flag to 1 before the first input).
cudaError_t launchClearUnlessFinite(Storage storage, const void *x,
                                    int64_t elements, FiniteTest test,
                                    uint8_t *flag, cudaStream_t stream);
/// One input of MixedPrecisionScale: y[i] = x[i] * *scale, stored as \p to.
cudaError_t launchScaleInto(Storage from, const void *x, Storage to, void *y,
                            int64_t elements, const float *scale,
                            cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_SCALINGKERNELS_H
