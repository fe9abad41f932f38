//===- ScalingKernels.cu - Finiteness and loss-scaling kernels -----------===//
//
// IsFinite, IsAllFinite (one launch per input clearing a shared flag: every
// writer writes 0, so the race is benign and the result deterministic) and
// MixedPrecisionScale (one launch per input, the scale read on the device).
// The element arithmetic is ScalingMath.h's.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/ScalingKernels.h"

#include <type_traits>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

template <typename T>
__global__ void isFiniteKernel(const T *x, uint8_t *out, int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = passesFiniteTest(loadAsFloat(x, i), FiniteTest::Finite) ? 1 : 0;
}

template <typename T>
__global__ void clearUnlessFiniteKernel(const T *x, int64_t elements,
                                        FiniteTest test, uint8_t *flag) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    if (!passesFiniteTest(loadAsFloat(x, i), test))
      *flag = 0;
}

template <typename TX, typename TY>
__global__ void scaleKernel(const TX *x, TY *y, int64_t elements,
                            const float *scale) {
  float s = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    storeFromFloat(y, i, scaledElement(loadAsFloat(x, i), s));
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

cudaError_t gmopt::cuda::launchIsFinite(Storage storage, const void *x,
                                        uint8_t *out, int64_t elements,
                                        cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  return withFloatType(storage, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    isFiniteKernel<<<gridFor(elements), kThreads, 0, stream>>>(
        static_cast<const T *>(x), out, elements);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchClearUnlessFinite(Storage storage, const void *x,
                                                 int64_t elements,
                                                 FiniteTest test, uint8_t *flag,
                                                 cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  return withFloatType(storage, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    clearUnlessFiniteKernel<<<gridFor(elements), kThreads, 0, stream>>>(
        static_cast<const T *>(x), elements, test, flag);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchScaleInto(Storage from, const void *x,
                                         Storage to, void *y, int64_t elements,
                                         const float *scale,
                                         cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  return withFloatType(from, [&](auto *xTag) {
    using TX = std::remove_pointer_t<decltype(xTag)>;
    return withFloatType(to, [&](auto *yTag) {
      using TY = std::remove_pointer_t<decltype(yTag)>;
      scaleKernel<<<gridFor(elements), kThreads, 0, stream>>>(
          static_cast<const TX *>(x), static_cast<TY *>(y), elements, scale);
      return cudaGetLastError();
    });
  });
}
