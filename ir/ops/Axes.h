//===- Axes.h - What axis attributes mean -----------------------*- C++ -*-===//
//
// The one reading of the axis attributes that shape inference, the shape
// folder, the gradient rules and both backends decode: a possibly negative
// axis counted from the end (ONNX accepts [-rank, rank-1]); the axis of
// the softmax family, whose meaning changed with opset 13 (before it, and
// in ONNX Runtime's gradients without the _13 suffix, the input is coerced
// to 2-D at `axis`, default 1; from it, the op runs along the one dimension
// `axis`, default -1); and the [start, end) slice of Shape-15. Errors are
// plain messages; callers name the node.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_AXES_H
#define GMOPT_IR_OPS_AXES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace gmopt {

class Node;

namespace ops {

/// \p axis in [-rank, rank) mapped to [0, rank); nullopt outside.
inline std::optional<unsigned> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return static_cast<unsigned>(axis < 0 ? axis + rank : axis);
}

/// The message of an axis out of range: "<what> A is out of range for
/// rank R".
std::string axisOutOfRange(llvm::StringRef what, int64_t axis, int64_t rank);

/// normalizeAxis, or the error axisOutOfRange describes.
llvm::Expected<unsigned> checkAxis(int64_t axis, int64_t rank,
                                   llvm::StringRef what = "axis");

/// How a softmax-family node (Softmax, LogSoftmax and ONNX Runtime's
/// (Log)SoftmaxGrad(_13)) reads an input of some shape: an
/// [outer, axisDim, inner] view, normalized along axisDim.
struct SoftmaxAxes {
  /// True for the pre-13 convention (the input coerced to 2-D at axis).
  bool coerced2D = false;
  /// The axis, normalized (0 for a rank-0 input).
  unsigned axis = 0;
  /// The product of the dimensions before the axis.
  int64_t outer = 1;
  /// The extent normalized over: the axis' dimension, or with coerced2D the
  /// product of the dimensions from the axis on.
  int64_t axisDim = 1;
  /// The product of the dimensions after the axis (1 with coerced2D).
  int64_t inner = 1;
};

/// True when the softmax-family \p node follows the pre-13 convention:
/// ai.onnx Softmax/LogSoftmax below opset 13, com.microsoft gradients
/// without the _13 suffix.
bool isCoercedSoftmax(const Node &node);

/// The `axis` attribute of softmax-family \p node with its convention's
/// default (1 coerced, -1 otherwise).
int64_t getSoftmaxAxisAttr(const Node &node);

/// The `axis` of softmax-family \p node (getSoftmaxAxisAttr) normalized
/// against an input of rank \p rank, or axisOutOfRange's error. Shape
/// inference and the gradient rules check it before any shape is bound.
llvm::Expected<unsigned> getSoftmaxAxis(const Node &node, int64_t rank);

/// The softmax axes of \p node over an input of \p shape. A rank-0 input is
/// one element (any axis); otherwise the axis must be in range.
llvm::Expected<SoftmaxAxes> getSoftmaxAxes(const Node &node,
                                           llvm::ArrayRef<int64_t> shape);

/// getSoftmaxAxes from the node's decoded convention (isCoercedSoftmax)
/// and `axis` (getSoftmaxAxisAttr): a pure function of those and \p shape,
/// which a kernel that decoded its node once evaluates on each input.
llvm::Expected<SoftmaxAxes> getSoftmaxAxes(bool coerced2D, int64_t axisAttr,
                                           llvm::ArrayRef<int64_t> shape);

/// The [start, end) dimensions of Shape's output (opset 15's `start` and
/// `end`, negative counted from the end, clamped to [0, rank]).
struct ShapeSlice {
  int64_t start = 0;
  int64_t end = 0;
  /// The number of dimensions kept.
  int64_t size() const { return end > start ? end - start : 0; }
};

/// The slice the Shape \p node takes of an input of rank \p rank.
ShapeSlice getShapeSlice(const Node &node, int64_t rank);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_AXES_H
