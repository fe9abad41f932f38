//===- ResizeParams.h - What an ONNX Resize node means ----------*- C++ -*-===//
//
// The one reading of a Resize node (ai.onnx opsets 10, 11, 13, 18, 19) and of
// ONNX Runtime's com.microsoft ResizeGrad, its adjoint, that shape
// inference, the CPU kernels and the gradient rule share: the attributes
// (with each opset's defaults and the values it defines), which operand is
// roi, scales or sizes, and the geometry - the per-axis scale factors and
// the output extents that scales or sizes give, following ONNX's reference
// implementation (onnx/reference/ops/op_resize.py): output = floor(scale *
// input) for scales; scale = size / input for sizes, or the common ratio
// of keep_aspect_ratio_policy with output = round-half-up(scale * input).
// The attribute values themselves are ResizeModes.h's, which the CUDA
// kernels include too.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_RESIZEPARAMS_H
#define GMOPT_IR_OPS_RESIZEPARAMS_H

#include "ir/ops/ResizeModes.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace gmopt {

class Node;
class Value;

namespace resize {

/// The attributes of a Resize or ResizeGrad node, defaults filled in.
struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  CoordinateMode coordinateMode = CoordinateMode::HalfPixel;
  NearestMode nearestMode = NearestMode::RoundPreferFloor;
  double cubicCoeffA = -0.75;
  bool excludeOutside = false;
  double extrapolationValue = 0.0;
  AspectPolicy aspectPolicy = AspectPolicy::Stretch;
  /// The `axes` attribute as written (empty: every axis).
  std::vector<int64_t> axes;
};

/// Where a node's operands are (-1: the node's opset has no such operand).
struct ResizeOperands {
  /// The input X (Resize) or the forward input X (ResizeGrad).
  int x = 0;
  /// The incoming gradient dY (ResizeGrad only).
  int dY = -1;
  int roi = -1;
  int scales = -1;
  int sizes = -1;
};

/// True for com.microsoft ResizeGrad, false for ai.onnx Resize.
bool isResizeGrad(const Node &node);

/// The operand layout of \p node (Resize at its opset, or ResizeGrad).
ResizeOperands getResizeOperands(const Node &node);

/// Reads and validates \p node's attributes for its op and opset: values
/// the opset does not define, antialias=1 (gmopt has no antialiasing
/// filter) and nearest modes mixed with opset 10 are errors (plain
/// messages, without the node's name: callers add it).
llvm::Expected<ResizeAttrs> readResizeAttrs(const Node &node);

/// The resized axes of a rank-\p rank tensor: `axes` normalized (negative
/// axes count from the end), or every axis. Rejects out-of-range and
/// repeated axes.
llvm::Expected<llvm::SmallVector<unsigned, 4>>
resizedAxes(const ResizeAttrs &attrs, int64_t rank);

/// The geometry of one Resize: a scale per axis of X and the output shape.
struct ResizeGeometry {
  std::vector<double> scales;
  std::vector<int64_t> outShape;
};

/// The geometry for input shape \p inShape from \p scales (one per resized
/// axis; empty when absent) or \p sizes (likewise), exactly one of which
/// must be given, as the reference implementation computes it.
llvm::Expected<ResizeGeometry>
resolveResizeGeometry(const ResizeAttrs &attrs, llvm::ArrayRef<int64_t> inShape,
                      llvm::ArrayRef<double> scales,
                      llvm::ArrayRef<int64_t> sizes);

/// The regions of interest per axis of X (start, end), expanded from the
/// roi input (2 * resized axes values: starts then ends); [0, 1] where
/// absent.
llvm::Expected<std::vector<std::pair<double, double>>>
expandRoi(const ResizeAttrs &attrs, int64_t rank, llvm::ArrayRef<double> roi);

/// The elements of \p value when they are known at compile time: a
/// constant (initializer or Constant node), or what exporters compute
/// scales with - Concat along axis 0 of such values (torch's
/// Concat(Constant [1, 1], Constant [2, 2]) for a scale_factor), Identity,
/// and Cast of a traced integer tensor. nullopt otherwise. Shape inference
/// and the CUDA kernels' plan (which reads scales and roi on the host) share
/// it.
std::optional<std::vector<double>> traceFloatValues(const Value &value);

} // namespace resize
} // namespace gmopt

#endif // GMOPT_IR_OPS_RESIZEPARAMS_H
