//===- ResizeAxisMath.h - Resize's taps along one axis ----------*- C++ -*-===//
//
// Where output coordinate o of one resized axis reads the input: the source
// coordinate of every coordinate_transformation_mode, the nearest, linear
// and cubic taps with exclude_outside and edge clamping (a clamped tap
// merging into its neighbour), as ONNX's reference implementation
// (onnx/reference/ops/op_resize.py) interpolates. Written once as GMOPT_HD
// functions in float64 spelled with UnfusedMath.h's helpers (never
// contracted into a fused multiply-add on the device), for the CPU Resize
// and ResizeGrad kernels (backend/cpu/ResizeKernels.cpp) and the CUDA ones
// (backend/cuda/ResizeMath.h), which therefore agree bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_RESIZEAXISMATH_H
#define GMOPT_BACKEND_RESIZEAXISMATH_H

#include "backend/HostDevice.h"
#include "backend/UnfusedMath.h"
#include "ir/ops/ResizeModes.h"

#include <cmath>
#include <cstdint>

namespace gmopt {

/// The most taps one output coordinate reads along one axis (cubic).
constexpr int kResizeMaxTaps = 4;

/// One axis of a Resize: its extents, its scale and its region of interest
/// (start, end; [0, 1] unless tf_crop_and_resize has a roi).
struct ResizeAxis {
  int64_t inLen = 1;
  int64_t outLen = 1;
  double scale = 1.0;
  double roiStart = 0.0;
  double roiEnd = 1.0;
};

/// The attributes that decide an axis' taps (ResizeParams.h's ResizeAttrs,
/// in a form the device can read).
struct ResizeAxisRule {
  resize::Mode mode = resize::Mode::Nearest;
  resize::CoordinateMode coordinates = resize::CoordinateMode::HalfPixel;
  resize::NearestMode nearest = resize::NearestMode::RoundPreferFloor;
  int32_t excludeOutside = 0;
  double cubicCoeffA = -0.75;
};

/// The taps of one output coordinate along one axis: input indices
/// (distinct, increasing) and their weights; none when tf_crop_and_resize
/// maps the coordinate outside the input (\p outside, the element takes
/// extrapolation_value). Only the first count entries are meaningful (the
/// arrays are left unset: a kernel keeps one per axis per thread).
struct ResizeTaps {
  int32_t count = 0;
  bool outside = false;
  int64_t index[kResizeMaxTaps];
  double weight[kResizeMaxTaps];
};

/// The input coordinate that output coordinate \p o of axis \p a maps to
/// under \p rule (the reference's formulas, with the output width
/// scale * input width).
GMOPT_HD double resizeSourceOf(const ResizeAxisRule &rule, const ResizeAxis &a,
                               int64_t o) {
  double x = double(o);
  double in = double(a.inLen);
  double outWidth = mulUnfused(a.scale, in);
  switch (rule.coordinates) {
  case resize::CoordinateMode::HalfPixel:
    return subUnfused(divUnfused(addUnfused(x, 0.5), a.scale), 0.5);
  case resize::CoordinateMode::HalfPixelSymmetric: {
    double adjustment = divUnfused(double(a.outLen), outWidth);
    double offset =
        mulUnfused(divUnfused(in, 2.0), subUnfused(1.0, adjustment));
    return subUnfused(
        addUnfused(offset, divUnfused(addUnfused(x, 0.5), a.scale)), 0.5);
  }
  case resize::CoordinateMode::PytorchHalfPixel:
    return outWidth == 1.0
               ? -0.5
               : subUnfused(divUnfused(addUnfused(x, 0.5), a.scale), 0.5);
  case resize::CoordinateMode::AlignCorners:
    return outWidth == 1.0 ? 0.0
                           : divUnfused(mulUnfused(x, subUnfused(in, 1.0)),
                                        subUnfused(outWidth, 1.0));
  case resize::CoordinateMode::Asymmetric:
    return divUnfused(x, a.scale);
  case resize::CoordinateMode::TfHalfPixelForNn:
    return divUnfused(addUnfused(x, 0.5), a.scale);
  case resize::CoordinateMode::TfCropAndResize: {
    double span = subUnfused(a.roiEnd, a.roiStart);
    double source =
        outWidth == 1.0
            ? divUnfused(mulUnfused(span, subUnfused(in, 1.0)), 2.0)
            : divUnfused(mulUnfused(mulUnfused(x, span), subUnfused(in, 1.0)),
                         subUnfused(outWidth, 1.0));
    return addUnfused(source, mulUnfused(a.roiStart, subUnfused(in, 1.0)));
  }
  }
  return x;
}

/// Keys' cubic kernel for |t| <= 1 and for 1 < |t| < 2 (coefficient \p a).
GMOPT_HD double resizeCubicNear(double t, double a) {
  return addUnfused(
      mulUnfused(mulUnfused(subUnfused(mulUnfused(addUnfused(a, 2.0), t),
                                       addUnfused(a, 3.0)),
                            t),
                 t),
      1.0);
}
GMOPT_HD double resizeCubicFar(double t, double a) {
  double inner = subUnfused(mulUnfused(a, t), mulUnfused(5.0, a));
  double middle = addUnfused(mulUnfused(inner, t), mulUnfused(8.0, a));
  return subUnfused(mulUnfused(middle, t), mulUnfused(4.0, a));
}

/// The taps of output coordinate \p o along axis \p a under \p rule: the
/// mode's raw taps, exclude_outside's renormalization, then edge clamping
/// (a clamped tap merging into its neighbour).
GMOPT_HD void resizeTapsOf(const ResizeAxisRule &rule, const ResizeAxis &a,
                           int64_t o, ResizeTaps &taps) {
  int64_t inLen = a.inLen;
  taps.count = 0;
  taps.outside = false;
  double x = resizeSourceOf(rule, a, o);
  if (rule.coordinates == resize::CoordinateMode::TfCropAndResize &&
      (x < 0 || x > double(inLen - 1))) {
    taps.outside = true;
    return;
  }
  double base = floor(x);
  double r = subUnfused(x, base);
  int64_t floorIndex = static_cast<int64_t>(base);
  int64_t rawIndex[kResizeMaxTaps];
  double rawWeight[kResizeMaxTaps];
  int raw = 0;
  switch (rule.mode) {
  case resize::Mode::Nearest: {
    bool up = false;
    switch (rule.nearest) {
    case resize::NearestMode::RoundPreferFloor:
      up = r > 0.5;
      break;
    case resize::NearestMode::RoundPreferCeil:
      up = r >= 0.5;
      break;
    case resize::NearestMode::Floor:
      up = false;
      break;
    case resize::NearestMode::Ceil:
      up = r > 0;
      break;
    case resize::NearestMode::Simple:
      up = a.scale < 1.0 && r > 0;
      break;
    }
    rawIndex[0] = floorIndex + (up ? 1 : 0);
    rawWeight[0] = 1.0;
    raw = 1;
    break;
  }
  case resize::Mode::Linear:
    rawIndex[0] = floorIndex;
    rawWeight[0] = subUnfused(1.0, r);
    rawIndex[1] = floorIndex + 1;
    rawWeight[1] = r;
    raw = 2;
    break;
  case resize::Mode::Cubic: {
    double a = rule.cubicCoeffA;
    rawWeight[0] = resizeCubicFar(addUnfused(1.0, r), a);
    rawWeight[1] = resizeCubicNear(r, a);
    rawWeight[2] = resizeCubicNear(subUnfused(1.0, r), a);
    rawWeight[3] = resizeCubicFar(subUnfused(2.0, r), a);
    for (int k = 0; k != 4; ++k)
      rawIndex[k] = floorIndex - 1 + k;
    raw = 4;
    break;
  }
  }
  if (rule.excludeOutside && rule.mode != resize::Mode::Nearest) {
    double sum = 0;
    for (int k = 0; k != raw; ++k) {
      if (rawIndex[k] < 0 || rawIndex[k] >= inLen)
        rawWeight[k] = 0;
      sum = addUnfused(sum, rawWeight[k]);
    }
    if (sum != 0)
      for (int k = 0; k != raw; ++k)
        rawWeight[k] = divUnfused(rawWeight[k], sum);
  }
  for (int k = 0; k != raw; ++k) {
    if (rawWeight[k] == 0)
      continue;
    // Edge padding: taps beyond the ends read the end element, and merge
    // with the tap before them when that reads it too.
    int64_t clamped = rawIndex[k] < 0           ? 0
                      : rawIndex[k] > inLen - 1 ? inLen - 1
                                                : rawIndex[k];
    if (taps.count > 0 && taps.index[taps.count - 1] == clamped) {
      taps.weight[taps.count - 1] =
          addUnfused(taps.weight[taps.count - 1], rawWeight[k]);
      continue;
    }
    taps.index[taps.count] = clamped;
    taps.weight[taps.count] = rawWeight[k];
    ++taps.count;
  }
}

} // namespace gmopt

#endif // GMOPT_BACKEND_RESIZEAXISMATH_H
