//===- ResizeMath.h - Coordinates, taps and elements of Resize --*- C++ -*-===//
//
// The per-element arithmetic of ONNX Resize and com.microsoft ResizeGrad on
// CUDA (ResizeKernels.cu), written once as `__host__ __device__` functions
// so that host tests run it against the CPU kernels
// (backend/cpu/ResizeKernels.cpp, tests/unit/CudaResizeTest.cpp). Each
// function repeats the CPU kernel's float64 operations in its order - the
// source coordinate of every coordinate_transformation_mode, the nearest,
// linear and cubic taps with exclude_outside and edge clamping (a clamped
// tap merging into its neighbour), the tensor-product sum over the axes -
// and the device side spells every product and sum as a round-to-nearest
// intrinsic, which nvcc never contracts into a fused multiply-add, so a
// Resize equals the CPU's bit for bit.
//
// ResizeGrad gathers instead of scattering: each input element visits the
// output coordinates whose taps read it, per axis a range found by binary
// search on the (monotone) source coordinate, in the row-major order the
// CPU kernel scatters them, and adds the same fp32 shares in the same
// order. It is deterministic, needs no atomics and no zeroed output, and
// also equals the CPU bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_RESIZEMATH_H
#define GMOPT_BACKEND_CUDA_RESIZEMATH_H

#include "backend/ResizeAxisMath.h"
#include "backend/UnfusedMath.h"
#include "backend/cuda/ElementwiseMath.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// The most axes a Resize on CUDA may have.
constexpr int kResizeMaxRank = 8;
/// Everything a Resize or ResizeGrad kernel needs, resolved on the host from
/// the node and its constant operands (ResizePlan.cpp).
/// The axis rule (mode, coordinates, nearest mode, exclude_outside, cubic
/// coefficient) is the shared ResizeAxisRule.
struct ResizeParams : ResizeAxisRule {
  int32_t rank = 0;
  /// Leading axes that the resize leaves as they are (identity taps): the
  /// CPU kernel does not interpolate along them, and neither do these
  /// functions.
  int32_t planeRank = 0;
  double extrapolationValue = 0.0;
  ResizeAxis axes[kResizeMaxRank];
  /// Row-major strides of the input (X, dX) and of the output (Y, dY).
  int64_t inStrides[kResizeMaxRank] = {};
  int64_t outStrides[kResizeMaxRank] = {};
};

// The arithmetic below is spelled with UnfusedMath.h's helpers (float64
// coordinates and weights, the gradient's fp32 sums): never contracted, so
// the device rounds as the CPU kernel does.

//===----------------------------------------------------------------------===//
// One axis
//===----------------------------------------------------------------------===//

/// The input coordinate that output coordinate \p o of axis \p axis maps to
/// (backend/ResizeAxisMath.h).
GMOPT_HD double resizeSourceCoordinate(const ResizeParams &p, int axis,
                                       int64_t o) {
  return resizeSourceOf(p, p.axes[axis], o);
}

/// The taps of output coordinate \p o along \p axis (backend/ResizeAxisMath.h,
/// as the CPU kernel's buildAxisTaps makes them).
GMOPT_HD void resizeAxisTaps(const ResizeParams &p, int axis, int64_t o,
                             ResizeTaps &taps) {
  resizeTapsOf(p, p.axes[axis], o, taps);
}

/// True when every output coordinate of \p axis reads exactly its own input
/// coordinate with weight 1 (the CPU kernel's AxisTaps::isIdentity).
GMOPT_HD bool resizeAxisIsIdentity(const ResizeParams &p, int axis) {
  const ResizeAxis &a = p.axes[axis];
  if (a.inLen != a.outLen)
    return false;
  ResizeTaps taps;
  for (int64_t o = 0; o < a.outLen; ++o) {
    resizeAxisTaps(p, axis, o, taps);
    if (taps.outside || taps.count != 1 || taps.index[0] != o ||
        taps.weight[0] != 1.0)
      return false;
  }
  return true;
}

/// Bounds on the input indices output coordinate \p o of \p axis may read,
/// [low, high]: both are monotone in o in the direction the source
/// coordinate moves, which the gradient's search relies on.
GMOPT_HD void resizeTapBounds(const ResizeParams &p, int axis, int64_t o,
                              int64_t &low, int64_t &high) {
  int64_t inLen = p.axes[axis].inLen;
  double x = resizeSourceCoordinate(p, axis, o);
  // Far outside the input every tap clamps to an end; clamping x first
  // keeps the index conversion in range.
  double limit = double(inLen) + 3.0;
  x = x < -3.0 ? -3.0 : x > limit ? limit : x;
  int64_t base = static_cast<int64_t>(floor(x));
  low = p.mode == resize::Mode::Cubic ? base - 1 : base;
  high = p.mode == resize::Mode::Cubic ? base + 2 : base + 1;
  low = low < 0 ? 0 : low > inLen - 1 ? inLen - 1 : low;
  high = high < 0 ? 0 : high > inLen - 1 ? inLen - 1 : high;
}

/// A condition on the tap bounds of an output coordinate and an input index
/// i, for the search of resizeReaderRange.
enum class ResizeBoundTest : int32_t {
  HighReaches,   ///< high >= i
  LowPasses,     ///< low > i
  LowReaches,    ///< low <= i
  HighFallsShort ///< high < i
};

/// The first output coordinate o of \p axis at which \p test holds for
/// input index \p i (outLen when none does), for a test that holds from
/// some o on.
GMOPT_HD int64_t resizeFirstWhere(const ResizeParams &p, int axis, int64_t i,
                                  ResizeBoundTest test) {
  int64_t lo = 0, hi = p.axes[axis].outLen;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int64_t low, high;
    resizeTapBounds(p, axis, mid, low, high);
    bool holds = false;
    switch (test) {
    case ResizeBoundTest::HighReaches:
      holds = high >= i;
      break;
    case ResizeBoundTest::LowPasses:
      holds = low > i;
      break;
    case ResizeBoundTest::LowReaches:
      holds = low <= i;
      break;
    case ResizeBoundTest::HighFallsShort:
      holds = high < i;
      break;
    }
    if (holds)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// The output coordinates of \p axis whose taps may read input index \p i:
/// [first, last] (empty when first > last). Where the source coordinate
/// rises with o, the readers are those whose high bound reaches i up to
/// the last whose low bound does not pass it; where it falls (a reversed
/// tf_crop_and_resize region), the other way round.
GMOPT_HD void resizeReaderRange(const ResizeParams &p, int axis, int64_t i,
                                int64_t &first, int64_t &last) {
  int64_t outLen = p.axes[axis].outLen;
  first = 0;
  last = -1;
  if (outLen <= 0)
    return;
  bool rising = resizeSourceCoordinate(p, axis, 0) <=
                resizeSourceCoordinate(p, axis, outLen - 1);
  if (rising) {
    first = resizeFirstWhere(p, axis, i, ResizeBoundTest::HighReaches);
    last = resizeFirstWhere(p, axis, i, ResizeBoundTest::LowPasses) - 1;
  } else {
    first = resizeFirstWhere(p, axis, i, ResizeBoundTest::LowReaches);
    last = resizeFirstWhere(p, axis, i, ResizeBoundTest::HighFallsShort) - 1;
  }
}

//===----------------------------------------------------------------------===//
// Elements
//===----------------------------------------------------------------------===//

/// Loads a stored element as float64 (16-bit floats widened through fp32,
/// as the CPU kernel stages them).
GMOPT_HD double resizeLoad(const float *p, int64_t i) { return double(p[i]); }
GMOPT_HD double resizeLoad(const HalfBits *p, int64_t i) {
  return double(loadAsFloat(p, i));
}
GMOPT_HD double resizeLoad(const BFloat16Bits *p, int64_t i) {
  return double(loadAsFloat(p, i));
}

/// Output element \p outIndex of Resize over input \p x, in float64 before
/// the store rounds it (the CPU kernel's gatherTaps, or
/// extrapolation_value where tf_crop_and_resize leaves the input).
template <typename T>
GMOPT_HD double resizeElement(const ResizeParams &p, const T *x,
                              int64_t outIndex) {
  ResizeTaps taps[kResizeMaxRank];
  int64_t planeOffset = 0;
  int64_t rest = outIndex;
  for (int axis = p.rank - 1; axis >= 0; --axis) {
    int64_t outLen = p.axes[axis].outLen;
    int64_t o = rest % outLen;
    rest /= outLen;
    if (axis < p.planeRank) {
      planeOffset += o * p.inStrides[axis];
      continue;
    }
    resizeAxisTaps(p, axis, o, taps[axis]);
  }
  int first = p.planeRank, last = p.rank - 1;
  if (first > last)
    return resizeLoad(x, planeOffset);
  for (int axis = first; axis <= last; ++axis)
    if (taps[axis].outside)
      return p.extrapolationValue;
  for (int axis = first; axis <= last; ++axis)
    if (taps[axis].count == 0)
      return 0.0; // An empty sum, as the CPU kernel's.
  // The CPU kernel's recursion, unrolled: partial[axis] sums, over the taps
  // of axis so far, weight times the sum over the axes after it.
  double partial[kResizeMaxRank];
  int tap[kResizeMaxRank];
  for (int axis = first; axis <= last; ++axis) {
    partial[axis] = 0;
    tap[axis] = 0;
  }
  while (true) {
    int64_t offset = planeOffset;
    for (int axis = first; axis <= last; ++axis)
      offset += taps[axis].index[tap[axis]] * p.inStrides[axis];
    partial[last] =
        addUnfused(partial[last], mulUnfused(taps[last].weight[tap[last]],
                                             resizeLoad(x, offset)));
    int axis = last;
    while (++tap[axis] == taps[axis].count) {
      if (axis == first)
        return partial[first];
      double inner = partial[axis];
      partial[axis] = 0;
      tap[axis] = 0;
      --axis;
      partial[axis] = addUnfused(
          partial[axis], mulUnfused(taps[axis].weight[tap[axis]], inner));
    }
  }
}

/// Element \p inIndex of ResizeGrad's dX from \p dY: the shares
/// dY[o] * weights of every output coordinate o whose taps read it, rounded
/// to fp32 and added in the row-major order of o (the CPU kernel's
/// scatterTaps, as a gather).
template <typename T>
GMOPT_HD float resizeGradElement(const ResizeParams &p, const T *dY,
                                 int64_t inIndex) {
  int64_t in[kResizeMaxRank];
  int64_t planeOffset = 0; // Of dY, over the identity axes.
  int64_t rest = inIndex;
  for (int axis = p.rank - 1; axis >= 0; --axis) {
    int64_t inLen = p.axes[axis].inLen;
    in[axis] = rest % inLen;
    rest /= inLen;
    if (axis < p.planeRank)
      planeOffset += in[axis] * p.outStrides[axis];
  }
  int first = p.planeRank, last = p.rank - 1;
  if (first > last)
    return addUnfused(0.0f, float(resizeLoad(dY, planeOffset)));
  int64_t begin[kResizeMaxRank], end[kResizeMaxRank], o[kResizeMaxRank];
  for (int axis = first; axis <= last; ++axis) {
    resizeReaderRange(p, axis, in[axis], begin[axis], end[axis]);
    if (begin[axis] > end[axis])
      return 0.0f;
    o[axis] = begin[axis];
  }
  // reads[axis]: whether o[axis]'s taps read in[axis]; weight[axis]: the
  // weight they read it with.
  double weight[kResizeMaxRank];
  bool reads[kResizeMaxRank];
  auto weigh = [&](int axis) {
    ResizeTaps taps;
    resizeAxisTaps(p, axis, o[axis], taps);
    reads[axis] = false;
    weight[axis] = 0.0;
    for (int t = 0; t < taps.count; ++t)
      if (taps.index[t] == in[axis]) {
        reads[axis] = true;
        weight[axis] = taps.weight[t];
      }
  };
  for (int axis = first; axis <= last; ++axis)
    weigh(axis);
  float sum = 0.0f;
  while (true) {
    bool all = true;
    for (int axis = first; axis <= last; ++axis)
      all = all && reads[axis];
    if (all) {
      int64_t offset = planeOffset;
      for (int axis = first; axis <= last; ++axis)
        offset += o[axis] * p.outStrides[axis];
      double share = resizeLoad(dY, offset);
      for (int axis = first; axis <= last; ++axis)
        share = mulUnfused(share, weight[axis]);
      sum = addUnfused(sum, float(share));
    }
    int axis = last;
    while (++o[axis] > end[axis]) {
      if (axis == first)
        return sum;
      o[axis] = begin[axis];
      weigh(axis);
      --axis;
    }
    weigh(axis);
  }
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_RESIZEMATH_H
