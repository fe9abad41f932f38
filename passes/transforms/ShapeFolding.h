//===- ShapeFolding.h - Compile-time shape arithmetic -----------*- C++ -*-===//
//
// Training graphs exported from PyTorch compute shapes at run time:
// Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains, Range for
// position ids, ConstantOfShape for masks. Once every dimension is bound
// these are constants. This folder evaluates the integer ops of such chains
// on small int64/int32/bool tensors. It never computes floating-point
// payloads: folding float math at compile time could change results the
// numerical-equivalence tests compare bit for bit against the backend.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_SHAPEFOLDING_H
#define GMOPT_PASSES_TRANSFORMS_SHAPEFOLDING_H

#include "ir/Attribute.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace gmopt {

class Node;

/// Bounds on what the folder evaluates.
struct ShapeFoldLimits {
  /// Largest tensor (in elements) the folder reads or creates.
  uint64_t maxElements = 1024;
};

/// A small integer or boolean tensor evaluated at compile time. Elements
/// are held as int64 whatever the element type.
struct IntTensor {
  /// I64, I32 or Bool.
  DType dtype = DType::I64;
  /// Static extents (empty for a scalar).
  llvm::SmallVector<int64_t, 4> shape;
  /// Elements in row-major order.
  std::vector<int64_t> values;

  /// Reads \p data if its element type is one the folder computes with.
  static std::optional<IntTensor> fromData(const TensorData &data);
  /// The tensor as raw bytes in ONNX layout.
  TensorData toData() const;
};

/// True for the element types the folder computes with: i64, i32, bool.
bool isFoldableDType(DType type);

/// True if \p node is a standard-domain op the folder knows how to evaluate:
/// Shape, Size, Gather, Concat, Slice, Unsqueeze, Squeeze, Reshape, Cast,
/// Add, Sub, Mul, Div, Equal, Less(OrEqual), Greater(OrEqual), Where,
/// ConstantOfShape, Range.
bool isFoldableShapeOp(const Node &node);

/// Evaluates \p node. \p constantOperands[i] holds the compile-time value of
/// operand i, or null when it is not a constant (or absent). Returns nullopt
/// when the node cannot be folded: an operand is not constant (Shape and
/// Size only need a static operand type), a type is not foldable, a tensor
/// exceeds \p limits, or the op would fail or overflow at run time (the
/// runtime then reports it).
std::optional<TensorData>
foldShapeNode(const Node &node,
              llvm::ArrayRef<const TensorData *> constantOperands,
              const ShapeFoldLimits &limits = {});

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_SHAPEFOLDING_H
