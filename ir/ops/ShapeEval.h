//===- ShapeEval.h - The one shape evaluator --------------------*- C++ -*-===//
//
// What the shape ops compute about shapes, written once: Reshape's target
// (0 copies, -1 is inferred, allowzero), numpy broadcasting, ONNX Runtime's
// BroadcastGradientArgs, Range's length, and the result shapes of Expand,
// Tile, Squeeze, Unsqueeze and Concat. Shape inference (over symbolic
// dimensions), constant shape propagation (ShapeValue), the shape folder,
// the gradient rules, the CPU kernels and the CUDA launches all call it, so
// a rule and its error text cannot drift apart between layers.
//
// The functions are pure: int64 shape vectors in, a shape or an
// llvm::Error out. Errors are plain messages; callers name the node. The
// rules whose symbolic form matters (axis lists, the Reshape markers, the
// BroadcastGradientArgs walk, unsqueeze/squeeze placement) are templates
// over the dimension type, so inference runs the same code on its Dims.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_SHAPEEVAL_H
#define GMOPT_IR_OPS_SHAPEEVAL_H

#include "ir/ops/BroadcastWalk.h"
#include "ir/ops/RangeCount.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace gmopt {

class Node;

namespace ops {

/// A static shape.
using StaticShape = llvm::SmallVector<int64_t, 6>;

/// The elements of \p shape, or an error for a negative extent or an int64
/// overflow.
llvm::Expected<int64_t> countElements(llvm::ArrayRef<int64_t> shape);

//===----------------------------------------------------------------------===//
// Axis lists
//===----------------------------------------------------------------------===//

/// \p axes (each in [-rank, rank)) normalized against \p rank, in their
/// order. Errors: "<what> A is out of range for rank R", "<what> contains
/// axis A twice".
llvm::Expected<llvm::SmallVector<unsigned, 6>>
normalizeAxisList(llvm::ArrayRef<int64_t> axes, int64_t rank,
                  llvm::StringRef what = "axes");

//===----------------------------------------------------------------------===//
// Reshape
//===----------------------------------------------------------------------===//

/// What one element of Reshape's target asks for.
enum class ReshapeElement {
  /// 0 without allowzero: the input's extent at the same index.
  Copy,
  /// -1: whatever makes the element counts agree.
  Infer,
  /// An extent (a value >= 0, or an element not known yet).
  Extent,
};

/// Reshape \p node's allowzero (opset 14; false before).
bool reshapeAllowsZero(const Node &node);

/// Where Squeeze's and Unsqueeze's axes are: the `axes` attribute before
/// opset 13, operand 1 from then on.
struct SqueezeAxesSource {
  /// The axes are operand 1.
  bool fromOperand = false;
  /// Axes are given at all (Squeeze without them removes every 1).
  bool given = false;
  /// The attribute's axes (empty from opset 13).
  std::vector<int64_t> attrAxes;
};

/// The axes source of Squeeze / Unsqueeze \p node.
SqueezeAxesSource getSqueezeAxesSource(const Node &node);

/// The kinds of Reshape's \p target elements (nullopt: not known yet, an
/// extent). Errors: "invalid shape element V" (below -1), "shape contains
/// more than one -1", "shape contains both 0 and -1 with allowzero=1".
llvm::Expected<llvm::SmallVector<ReshapeElement, 6>>
classifyReshapeTarget(llvm::ArrayRef<std::optional<int64_t>> target,
                      bool allowZero);

/// The error of a copied (0) target element \p index beyond the input's
/// rank; \p input describes the input (its type or shape).
llvm::Error reshapeCopyOutOfRange(unsigned index, llvm::StringRef input,
                                  int64_t rank);

/// Reshape's output shape for an \p input of static shape and the target
/// values \p target. Errors: classifyReshapeTarget's, reshapeCopyOutOfRange,
/// "cannot reshape [I] to [T]: N elements are not divisible by M",
/// "cannot reshape [I] to [T]: element counts differ".
llvm::Expected<StaticShape> reshapeTarget(llvm::ArrayRef<int64_t> input,
                                          llvm::ArrayRef<int64_t> target,
                                          bool allowZero);

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

/// The numpy broadcast of static \p shapes, or nullopt when they do not
/// broadcast.
std::optional<StaticShape>
broadcastStaticShapes(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// The broadcast of \p a and \p b; error "shapes [A] and [B] do not
/// broadcast".
llvm::Expected<StaticShape> broadcastStaticShapes(llvm::ArrayRef<int64_t> a,
                                                  llvm::ArrayRef<int64_t> b);

/// The axes of broadcast(a, b) each operand's gradient sums over, from
/// last to first (ONNX Runtime's BroadcastGradientArgs order).
struct GradientAxes {
  StaticShape a, b;
};

/// The outcome of the BroadcastGradientArgs walk.
struct GradientAxesResult {
  GradientAxes axes;
  /// The pair that stopped the walk: Incompatible or Unknown; Same when
  /// the walk finished.
  BroadcastPair stop = BroadcastPair::Same;
};

/// The BroadcastGradientArgs walk (walkBroadcastGradientAxes) over shapes
/// of any dimension type, \p classify(a[i], b[j]) deciding each aligned
/// pair.
template <typename DimT, typename ClassifyFn>
GradientAxesResult walkBroadcastGradient(llvm::ArrayRef<DimT> a,
                                         llvm::ArrayRef<DimT> b,
                                         ClassifyFn classify) {
  GradientAxesResult result;
  result.stop = walkBroadcastGradientAxes(
      a.data(), static_cast<int64_t>(a.size()), b.data(),
      static_cast<int64_t>(b.size()), classify, [&](bool toA, int64_t axis) {
        (toA ? result.axes.a : result.axes.b).push_back(axis);
      });
  return result;
}

/// BroadcastGradientArgs of static shapes; error "shapes [A] and [B] do
/// not broadcast".
llvm::Expected<GradientAxes> broadcastGradientArgs(llvm::ArrayRef<int64_t> a,
                                                   llvm::ArrayRef<int64_t> b);

//===----------------------------------------------------------------------===//
// Expand, Tile, Squeeze, Unsqueeze, Concat
//===----------------------------------------------------------------------===//

/// Expand's output: the broadcast of \p input and \p target. Errors:
/// "invalid shape element V", "incompatible broadcast: cannot expand [I]
/// to [T]".
llvm::Expected<StaticShape> expandShape(llvm::ArrayRef<int64_t> input,
                                        llvm::ArrayRef<int64_t> target);

/// Checks Tile's \p repeats against an input of rank \p rank (nullopt
/// elements: not known yet). Errors: "repeats has N values but the input
/// has rank R", "repeats value V is negative".
llvm::Error checkTileRepeats(llvm::ArrayRef<std::optional<int64_t>> repeats,
                             int64_t rank);

/// Tile's output: input[d] * repeats[d]; checkTileRepeats' errors and
/// "tiled extent overflows".
llvm::Expected<StaticShape> tileShape(llvm::ArrayRef<int64_t> input,
                                      llvm::ArrayRef<int64_t> repeats);

/// Unsqueeze's output: \p input with ones inserted at \p axes (normalized
/// against the output rank, unique; see normalizeAxisList).
template <typename DimT>
llvm::SmallVector<DimT, 6> unsqueezeDims(llvm::ArrayRef<DimT> input,
                                         llvm::ArrayRef<unsigned> axes,
                                         const DimT &one) {
  llvm::SmallVector<DimT, 6> out;
  size_t next = 0;
  for (unsigned d = 0, e = input.size() + axes.size(); d != e; ++d)
    out.push_back(llvm::is_contained(axes, d) ? one : input[next++]);
  return out;
}

/// Unsqueeze's output for static shapes: normalizeAxisList's errors
/// against the output rank.
llvm::Expected<StaticShape> unsqueezeShape(llvm::ArrayRef<int64_t> input,
                                           llvm::ArrayRef<int64_t> axes);

/// The error "cannot squeeze axis A of extent E".
llvm::Error squeezeExtentError(unsigned axis, int64_t extent);

/// Squeeze's output: \p input without \p axes (normalized, unique), or
/// without every extent-1 dimension when \p axes is nullopt.
/// \p extentOf(dim) gives a dimension's extent when known. Error: "cannot
/// squeeze axis A of extent E".
template <typename DimT, typename ExtentFn>
llvm::Expected<llvm::SmallVector<DimT, 6>>
squeezeDims(llvm::ArrayRef<DimT> input,
            std::optional<llvm::ArrayRef<unsigned>> axes, ExtentFn extentOf) {
  llvm::SmallVector<DimT, 6> out;
  for (unsigned d = 0, e = input.size(); d != e; ++d) {
    std::optional<int64_t> extent = extentOf(input[d]);
    bool removed = axes ? llvm::is_contained(*axes, d) : extent == 1;
    if (!removed) {
      out.push_back(input[d]);
      continue;
    }
    if (extent && *extent != 1)
      return squeezeExtentError(d, *extent);
  }
  return out;
}

/// Squeeze's output for static shapes (\p axes nullopt: every 1).
llvm::Expected<StaticShape>
squeezeShape(llvm::ArrayRef<int64_t> input,
             std::optional<llvm::ArrayRef<int64_t>> axes);

/// Concat's output along \p axis of static \p inputs. Errors: "input I has
/// rank R but input 0 has rank R0", the axis' range error, "dimension D of
/// input I is X but another input has Y".
llvm::Expected<StaticShape>
concatShape(llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs, int64_t axis);

/// Checks Split's explicit \p split sizes for \p numOutputs outputs of an
/// axis \p axis of \p extent (nullopt: not static) and returns their sum.
/// Errors: "split has N values but the node has M outputs", "split size V
/// is negative", "split sizes overflow", "split sizes sum to S but axis A
/// has extent E".
llvm::Expected<int64_t> checkSplitSizes(llvm::ArrayRef<int64_t> split,
                                        unsigned numOutputs, unsigned axis,
                                        std::optional<int64_t> extent);

/// Range's length for scalars read as double (floats) or int64 (integers);
/// error "delta must not be zero".
template <typename T>
llvm::Expected<int64_t> checkedRangeCount(T start, T limit, T delta) {
  if (delta == T(0))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "delta must not be zero");
  return rangeCount(start, limit, delta);
}

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_SHAPEEVAL_H
