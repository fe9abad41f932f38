//===- ResizeModes.h - The values of Resize's attributes --------*- C++ -*-===//
//
// The enumerations a Resize node's attributes decode to (mode,
// coordinate_transformation_mode, nearest_mode, keep_aspect_ratio_policy),
// apart from ResizeParams.h so that nvcc can include them: no LLVM, no
// other gmopt header. ResizeParams.h reads them from a node; the CPU
// kernels and the CUDA kernels' per-element math
// (backend/cuda/ResizeMath.h) switch on the same values.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_RESIZEMODES_H
#define GMOPT_IR_OPS_RESIZEMODES_H

#include <cstdint>

namespace gmopt {
namespace resize {

/// The interpolation of `mode`.
enum class Mode : int32_t { Nearest, Linear, Cubic };

/// `coordinate_transformation_mode`: how an output coordinate maps to an
/// input coordinate.
enum class CoordinateMode : int32_t {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  TfCropAndResize,
};

/// `nearest_mode`; Simple is opset 10's rule (floor when upsampling an
/// axis, ceil when downsampling it, as ONNX Runtime and Resize-10's tests
/// have it).
enum class NearestMode : int32_t {
  RoundPreferFloor,
  RoundPreferCeil,
  Floor,
  Ceil,
  Simple
};

/// `keep_aspect_ratio_policy` (opset 18+, sizes only).
enum class AspectPolicy : int32_t { Stretch, NotLarger, NotSmaller };

} // namespace resize
} // namespace gmopt

#endif // GMOPT_IR_OPS_RESIZEMODES_H
