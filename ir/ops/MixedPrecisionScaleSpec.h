//===- MixedPrecisionScaleSpec.h - MixedPrecisionScale layout ---*- C++ -*-===//
//
// The one reading of ONNX Runtime's com.microsoft MixedPrecisionScale(S,
// X...) -> Y... (each X * S in the `to` type) that the CPU kernel and the
// CUDA plan share: with fuse_outputs, every scaled input lands in the one
// output back to back; without, input i lands in output i of its own size.
// Built from the element counts of the scaled inputs and of the outputs.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_MIXEDPRECISIONSCALESPEC_H
#define GMOPT_IR_OPS_MIXEDPRECISIONSCALESPEC_H

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace gmopt {

class Node;

namespace ops {

/// Where one scaled input X (operand 1 + i) is written.
struct ScaledTensor {
  /// The result it is written into.
  unsigned result = 0;
  /// Its first element within that result.
  uint64_t offset = 0;
  /// Its number of elements.
  uint64_t elements = 0;
};

/// A MixedPrecisionScale node's output layout.
struct MixedPrecisionScaleSpec {
  /// fuse_outputs: every input in result 0.
  bool fused = false;
  /// The `to` element type, when the node names one.
  std::optional<DType> to;
  /// One entry per scaled input, in operand order.
  llvm::SmallVector<ScaledTensor, 8> tensors;
};

/// What a MixedPrecisionScale node's attributes say: fuse_outputs and
/// `to`, decoded once (a CPU kernel at prepare) and laid out over each
/// step's element counts by layoutMixedPrecisionScale.
struct MixedPrecisionScaleAttrs {
  bool fused = false;
  std::optional<DType> to;
};

/// The attributes of MixedPrecisionScale \p node.
MixedPrecisionScaleAttrs getMixedPrecisionScaleAttrs(const Node &node);

/// The layout \p attrs give scaled inputs of \p inputElements elements and
/// results of \p resultElements, with getMixedPrecisionScaleSpec's errors.
llvm::Expected<MixedPrecisionScaleSpec>
layoutMixedPrecisionScale(const MixedPrecisionScaleAttrs &attrs,
                          llvm::ArrayRef<uint64_t> inputElements,
                          llvm::ArrayRef<uint64_t> resultElements);

/// The layout of MixedPrecisionScale \p node for scaled inputs of
/// \p inputElements elements and results of \p resultElements. Reports a
/// result count that does not fit, a result of the wrong size and a fused
/// result whose size is not the inputs' total (plain messages; callers
/// name the node).
llvm::Expected<MixedPrecisionScaleSpec>
getMixedPrecisionScaleSpec(const Node &node,
                           llvm::ArrayRef<uint64_t> inputElements,
                           llvm::ArrayRef<uint64_t> resultElements);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_MIXEDPRECISIONSCALESPEC_H
