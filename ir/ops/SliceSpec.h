//===- SliceSpec.h - Where a Slice sits in its source -----------*- C++ -*-===//
//
// The one reading of ONNX Slice's starts, ends, axes and steps against a
// static input shape (opset 1's attributes and opset 10's operands alike,
// and ONNX Runtime's SliceGrad, which takes the forward's lists): per
// dimension the first index taken, the step and the number of elements
// taken, with negative indices counted from the end and bounds clamped as
// ONNX clamps them (ops::sliceRange). The shape folder and the CPU kernels
// read it; shape inference applies sliceRange to symbolic extents.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_SLICESPEC_H
#define GMOPT_IR_OPS_SLICESPEC_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {
namespace ops {

/// A slice of a static shape: per dimension of the input, the first index
/// taken, the step between taken indices and the extent of the result.
/// Dimensions the slice does not name are taken whole (begin 0, step 1).
struct SliceSpec {
  llvm::SmallVector<int64_t, 6> begin;
  llvm::SmallVector<int64_t, 6> step;
  llvm::SmallVector<int64_t, 6> shape;
};

/// Resolves Slice's \p starts and \p ends on \p axes (empty: 0, 1, ...)
/// with \p steps (empty: all 1) against \p inShape. Reports lists of
/// different lengths, an axis out of range or named twice and a zero step
/// (plain messages; callers name the node).
llvm::Expected<SliceSpec> resolveSlice(llvm::ArrayRef<int64_t> inShape,
                                       llvm::ArrayRef<int64_t> starts,
                                       llvm::ArrayRef<int64_t> ends,
                                       llvm::ArrayRef<int64_t> axes,
                                       llvm::ArrayRef<int64_t> steps);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_SLICESPEC_H
