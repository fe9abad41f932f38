//===- WindowMath.h - Window and pad index math for both backends -*- C++ -*-=//
//
// The index arithmetic the CPU kernels and the CUDA kernels share, written
// once as GMOPT_HD functions (no CUDA header, no LLVM): which input
// coordinate Pad's reflect, edge and wrap modes read for an output
// coordinate (backend/cpu/MovementKernels.cpp, backend/cuda/PadMath.h),
// which element of a window MaxPool picks, and what AveragePool sums and
// how many window positions it divides by (backend/cpu/PoolKernels.cpp,
// backend/cuda/PoolMath.h), and the window walk they and the CPU
// AveragePool gradient's scatter share.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_WINDOWMATH_H
#define GMOPT_BACKEND_WINDOWMATH_H

#include "backend/HostDevice.h"
#include "backend/WindowGeometry.h"

#include <cmath>
#include <cstdint>

// The attribute decoding is host code; nvcc's translation units see only
// the arithmetic.
#if !defined(__CUDACC__)
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSwitch.h"

#include <optional>
#endif

namespace gmopt {

/// Pad's mode attribute.
enum class PadMode : int32_t { Constant, Reflect, Edge, Wrap };

#if !defined(__CUDACC__)
/// The PadMode of Pad's `mode` attribute \p name (opset 19's "wrap"
/// included); nullopt for a name Pad does not define.
inline std::optional<PadMode> parsePadMode(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<PadMode>>(name)
      .Case("constant", PadMode::Constant)
      .Case("reflect", PadMode::Reflect)
      .Case("edge", PadMode::Edge)
      .Case("wrap", PadMode::Wrap)
      .Default(std::nullopt);
}
#endif

/// The source coordinate in [0, \p n) of coordinate \p coord of a padded
/// dimension of input extent \p n (the coordinate already shifted by the
/// leading pad), or -1 where constant mode pads. Reflect mirrors without
/// repeating the edge element (and repeats as often as the pads need);
/// edge repeats it; wrap is periodic. \p n must be positive unless the mode
/// is constant.
GMOPT_HD int64_t padSourceCoordinate(int64_t coord, int64_t n, PadMode mode) {
  if (coord >= 0 && coord < n)
    return coord;
  switch (mode) {
  case PadMode::Reflect: {
    if (n == 1)
      return 0;
    int64_t period = 2 * (n - 1);
    int64_t r = coord % period;
    if (r < 0)
      r += period;
    return r < n ? r : period - r;
  }
  case PadMode::Edge:
    return coord < 0 ? 0 : n - 1;
  case PadMode::Wrap: {
    int64_t r = coord % n;
    return r < 0 ? r + n : r;
  }
  default:
    return -1;
  }
}

/// Visits the elements of output (\p oh, \p ow)'s window \p g that lie
/// inside the input, row by row (the order every pool sums, picks and
/// scatters in): \p visit(ih, iw) with the input row and column.
template <typename Visit>
GMOPT_HD void forEachWindowInput(const WindowGeometry &g, int64_t oh,
                                 int64_t ow, const Visit &visit) {
  for (int64_t ki = 0; ki < g.kernelH; ++ki) {
    int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
    if (ih < 0 || ih >= g.inH)
      continue;
    for (int64_t kj = 0; kj < g.kernelW; ++kj) {
      int64_t iw = ow * g.strideW - g.padLeft + kj * g.dilationW;
      if (iw >= 0 && iw < g.inW)
        visit(ih, iw);
    }
  }
}

/// MaxPool of output (\p oh, \p ow) of window \p g, visiting the window
/// row by row: the largest element (the first NaN wins, as in max(); -inf
/// for an all-padding window) in \p best and its flattened position within
/// the plane in \p within (row-major, or column-major with \p columnMajor,
/// storage_order 1; 0 when the window saw nothing). \p load(i) is the plane's
/// element i as a \p V, the type the comparisons run in.
template <typename V, typename Load>
GMOPT_HD void maxPoolWindow(const WindowGeometry &g, int64_t oh, int64_t ow,
                            bool columnMajor, const Load &load, V &best,
                            int64_t &within) {
  best = -static_cast<V>(INFINITY);
  int64_t bestH = -1, bestW = -1;
  forEachWindowInput(g, oh, ow, [&](int64_t ih, int64_t iw) {
    V v = load(ih * g.inW + iw);
    // x != x: NaN, in device code too.
    bool take = bestH < 0 || (!(best != best) && ((v != v) || v > best));
    if (take) {
      best = v;
      bestH = ih;
      bestW = iw;
    }
  });
  within = bestH < 0     ? 0
           : columnMajor ? bestW * g.inH + bestH
                         : bestH * g.inW + bestW;
}

/// The number of positions AveragePool divides output (\p oh, \p ow) of
/// window \p g by: the window's positions inside the input, or with
/// \p includePad (count_include_pad) inside the padded input.
GMOPT_HD int64_t averagePoolCount(const WindowGeometry &g, int64_t oh,
                                  int64_t ow, bool includePad) {
  int64_t lowH = includePad ? -g.padTop : 0;
  int64_t highH = includePad ? g.inH + g.padBottom : g.inH;
  int64_t lowW = includePad ? -g.padLeft : 0;
  int64_t highW = includePad ? g.inW + g.padRight : g.inW;
  int64_t count = 0;
  for (int64_t ki = 0; ki < g.kernelH; ++ki) {
    int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
    if (ih < lowH || ih >= highH)
      continue;
    for (int64_t kj = 0; kj < g.kernelW; ++kj) {
      int64_t iw = ow * g.strideW - g.padLeft + kj * g.dilationW;
      count += iw >= lowW && iw < highW;
    }
  }
  return count;
}

/// AveragePool of output (\p oh, \p ow) of window \p g: the sum in \p V of
/// the window's elements inside the input, in window order (\p load(i) is
/// the plane's element i as a \p V), divided by averagePoolCount (0 for a
/// window that counts nothing).
template <typename V, typename Load>
GMOPT_HD V averagePoolWindow(const WindowGeometry &g, int64_t oh, int64_t ow,
                             bool includePad, const Load &load) {
  V sum = 0;
  forEachWindowInput(
      g, oh, ow, [&](int64_t ih, int64_t iw) { sum += load(ih * g.inW + iw); });
  int64_t count = averagePoolCount(g, oh, ow, includePad);
  return count ? sum / static_cast<V>(count) : V(0);
}

} // namespace gmopt

#endif // GMOPT_BACKEND_WINDOWMATH_H
