//===- PoolMath.h - Per-output arithmetic of the pools ----------*- C++ -*-===//
//
// The window geometry the CUDA pooling and convolution paths share (the
// backend-neutral WindowGeometry, which CudnnGeometry.cpp resolves from a
// node's attributes and the device reads, plus the pools' flags), and the
// per-element arithmetic of the
// pooling kernels (PoolKernels.cu) as __host__ __device__ functions that the
// host tests run against the CPU backend's PoolKernels.cpp. Each function
// visits the window in the CPU kernel's order with the same fp32
// operations, so MaxPool, AveragePool and AveragePoolGrad agree with the
// CPU bit for bit (in f16 / bf16 storage too: the elements are widened to
// fp32, the arithmetic is fp32 and the result is rounded once, as the CPU
// backend's staged fp32 kernels do); AveragePoolGrad gathers, per input
// element, the shares of the windows that cover it, in the (oh, ow) order the
// CPU kernel scatters them; both divide by backend/WindowMath.h's
// averagePoolCount. A 1-D window is a 2-D one of height 1.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_POOLMATH_H
#define GMOPT_BACKEND_CUDA_POOLMATH_H

#include "backend/WindowGeometry.h"
#include "backend/WindowMath.h"
#include "backend/cuda/ElementwiseMath.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// The shared window geometry (backend/WindowGeometry.h) plus what the
/// pools add to it.
struct WindowParams : WindowGeometry {
  /// AveragePool: count_include_pad.
  bool includePad = false;
  /// MaxPool: storage_order 1 (indices column-major within a plane).
  bool columnMajor = false;
};

/// The elements of a plane of storage \p T, widened to fp32.
template <typename T> struct PlaneAsFloat {
  const T *plane;
  GMOPT_HD float operator()(int64_t i) const { return loadAsFloat(plane, i); }
};

/// MaxPool of output (oh, ow) over \p plane (WindowMath.h's maxPoolWindow): the
/// largest element (the first NaN wins; -inf for an all-padding window) and its
/// flattened position within the plane (row- or column-major; 0 when the window
/// saw nothing). \p T is the storage (float, HalfBits, BFloat16Bits); the
/// comparisons are in fp32, so a 16-bit pool picks the element the CPU
/// backend's fp32 kernel picks on the widened input.
template <typename T>
GMOPT_HD void maxPoolElement(const T *plane, const WindowParams &g, int64_t oh,
                             int64_t ow, float &best, int64_t &within) {
  maxPoolWindow(g, oh, ow, g.columnMajor, PlaneAsFloat<T>{plane}, best, within);
}

/// AveragePool of output (oh, ow) over \p plane (WindowMath.h's
/// averagePoolWindow: fp32 sum in window order of the elements widened from
/// storage \p T).
template <typename T>
GMOPT_HD float averagePoolElement(const T *plane, const WindowParams &g,
                                  int64_t oh, int64_t ow) {
  return averagePoolWindow<float>(g, oh, ow, g.includePad,
                                  PlaneAsFloat<T>{plane});
}

/// The output index along one axis whose window reaches input \p in with
/// tap \p tap, or -1.
GMOPT_HD int64_t coveringOutput(int64_t in, int64_t tap, int64_t stride,
                                int64_t padBegin, int64_t dilation,
                                int64_t outExtent) {
  int64_t t = in + padBegin - tap * dilation;
  if (t < 0 || t % stride)
    return -1;
  int64_t out = t / stride;
  return out < outExtent ? out : -1;
}

/// AveragePoolGrad at input (ih, iw): the sum of dY / count over the
/// windows that cover it, in increasing (oh, ow) order (taps visited from
/// the last down), as the CPU kernel adds them; dY is widened from storage
/// \p T.
template <typename T>
GMOPT_HD float averagePoolGradElement(const T *dyPlane, const WindowParams &g,
                                      int64_t ih, int64_t iw) {
  float sum = 0;
  for (int64_t ki = g.kernelH - 1; ki >= 0; --ki) {
    int64_t oh =
        coveringOutput(ih, ki, g.strideH, g.padTop, g.dilationH, g.outH);
    if (oh < 0)
      continue;
    for (int64_t kj = g.kernelW - 1; kj >= 0; --kj) {
      int64_t ow =
          coveringOutput(iw, kj, g.strideW, g.padLeft, g.dilationW, g.outW);
      if (ow < 0)
        continue;
      int64_t count = averagePoolCount(g, oh, ow, g.includePad);
      if (count)
        sum +=
            loadAsFloat(dyPlane, oh * g.outW + ow) / static_cast<float>(count);
    }
  }
  return sum;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_POOLMATH_H
