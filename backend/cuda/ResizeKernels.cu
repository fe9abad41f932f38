//===- ResizeKernels.cu - Resize and ResizeGrad on CUDA -------------------===//
//
// Resize gathers each output element through its taps; ResizeGrad gathers
// each input element's shares from the output coordinates that read it (see
// ResizeMath.h). Both are grid-stride loops over a flat index with the
// parameters passed by value; 16-bit storage is widened to fp32 on load and
// rounded to nearest even on store, as the CPU backend stages it.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/ResizeKernels.h"

#include <type_traits>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

template <typename T>
__global__ void resizeKernel(ResizeParams params, const T *x, T *y,
                             int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    storeFromFloat(y, i, float(resizeElement(params, x, i)));
}

template <typename T>
__global__ void resizeGradKernel(ResizeParams params, const T *dY, T *dX,
                                 int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    storeFromFloat(dX, i, resizeGradElement(params, dY, i));
}

/// Calls \p f with a typed null pointer of \p storage's element type.
template <typename F> cudaError_t withFloatType(Storage storage, F &&f) {
  switch (storage) {
  case Storage::F32:
    return f(static_cast<float *>(nullptr));
  case Storage::F16:
    return f(static_cast<HalfBits *>(nullptr));
  case Storage::BF16:
    return f(static_cast<BFloat16Bits *>(nullptr));
  default:
    return cudaErrorInvalidValue;
  }
}

} // namespace

cudaError_t gmopt::cuda::launchResize(Storage storage,
                                      const ResizeParams &params, const void *x,
                                      void *y, int64_t outElements,
                                      cudaStream_t stream) {
  if (outElements == 0)
    return cudaSuccess;
  return withFloatType(storage, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    resizeKernel<<<gridFor(outElements), kThreads, 0, stream>>>(
        params, static_cast<const T *>(x), static_cast<T *>(y), outElements);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchResizeGrad(Storage storage,
                                          const ResizeParams &params,
                                          const void *dY, void *dX,
                                          int64_t inElements,
                                          cudaStream_t stream) {
  if (inElements == 0)
    return cudaSuccess;
  return withFloatType(storage, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    resizeGradKernel<<<gridFor(inElements), kThreads, 0, stream>>>(
        params, static_cast<const T *>(dY), static_cast<T *>(dX), inElements);
    return cudaGetLastError();
  });
}
