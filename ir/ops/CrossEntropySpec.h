//===- CrossEntropySpec.h - What a fused linear cross entropy means -*- C++ -*-===//
//
// The one reading of gmopt's fused linear cross-entropy ops
// (docs/fused-cross-entropy.md), shared by shape inference, the cost model,
// the CPU kernels and the fuse-cross-entropy pass:
//
//   FusedLinearCrossEntropy(h, W, labels) -> (loss, lse)
//   FusedLinearCrossEntropyGrad(dloss, h, W, labels, lse) -> (dh, dW)
//
// h is [.., D] (N rows of D, N the product of its leading dimensions), W
// is [V, D] (`trans_w` = 1, the default: logits = h W^T, the tied
// embedding's layout) or [D, V] (`trans_w` = 0: logits = h W), labels hold
// N class indices. The loss is the softmax cross entropy of the [N, V]
// logits, which neither op stores: the forward keeps one log-sum-exp per
// row (lse, f32, labels' shape), the backward recomputes the logits one
// vocabulary block at a time. `ignore_index` rows count for nothing;
// `reduction` (none / sum / mean over the rows not ignored) is
// SoftmaxCrossEntropyLoss's.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_CROSSENTROPYSPEC_H
#define GMOPT_IR_OPS_CROSSENTROPYSPEC_H

#include "ir/Types.h"
#include "ir/ops/LossReduction.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace gmopt {

class Node;

/// gmopt.FusedLinearCrossEntropy (domain kGmoptDomain).
constexpr llvm::StringLiteral kFusedLinearCrossEntropyOp =
    "FusedLinearCrossEntropy";
/// gmopt.FusedLinearCrossEntropyGrad (domain kGmoptDomain).
constexpr llvm::StringLiteral kFusedLinearCrossEntropyGradOp =
    "FusedLinearCrossEntropyGrad";

namespace crossentropy {

/// Operand positions of FusedLinearCrossEntropy.
constexpr unsigned kH = 0;
constexpr unsigned kW = 1;
constexpr unsigned kLabels = 2;

/// Operand positions of FusedLinearCrossEntropyGrad.
constexpr unsigned kGradDLoss = 0;
constexpr unsigned kGradH = 1;
constexpr unsigned kGradW = 2;
constexpr unsigned kGradLabels = 3;
constexpr unsigned kGradLse = 4;

/// Vocabulary columns per block of recomputed logits: the kernels hold one
/// [N, kVocabBlock] tile at a time.
constexpr int64_t kVocabBlock = 512;

/// The attributes of either op, decoded once.
struct CrossEntropyAttrs {
  /// `trans_w`: W is [V, D] (the default) rather than [D, V].
  bool transW = true;
  /// `ignore_index`.
  std::optional<int64_t> ignoreIndex;
  /// `reduction` (ops::getLossReduction).
  ops::LossReduction reduction = ops::LossReduction::Mean;

  /// Reads \p node's attributes; an error for an unknown reduction.
  static llvm::Expected<CrossEntropyAttrs> fromNode(const Node &node);
};

/// A fused linear cross-entropy node, decoded once.
struct CrossEntropySpec {
  /// Rows (tokens): the product of h's leading dimensions.
  int64_t rows = 0;
  /// Hidden size D.
  int64_t hidden = 0;
  /// Vocabulary size V.
  int64_t vocab = 0;
  /// W is [V, D] (logits = h W^T); false: W is [D, V].
  bool transW = true;
  /// Rows whose label is this take no part.
  std::optional<int64_t> ignoreIndex;
  /// How the per-row losses combine.
  ops::LossReduction reduction = ops::LossReduction::Mean;

  /// Vocabulary columns of one block (kVocabBlock, or V when smaller).
  int64_t blockColumns() const {
    return vocab < kVocabBlock ? vocab : kVocabBlock;
  }
  /// Elements of the logits tile the kernels hold: rows x blockColumns.
  int64_t tileElements() const { return rows * blockColumns(); }

  /// Decodes \p node (either op) with its operands' static shapes; an
  /// error names what does not fit.
  static llvm::Expected<CrossEntropySpec> get(const Node &node);
  /// Decodes \p node's attributes with the given h, W and labels shapes.
  static llvm::Expected<CrossEntropySpec> get(const Node &node,
                                              llvm::ArrayRef<int64_t> h,
                                              llvm::ArrayRef<int64_t> w,
                                              llvm::ArrayRef<int64_t> labels);
  /// The same from attributes decoded once (CrossEntropyAttrs::fromNode):
  /// a pure function of them and the shapes.
  static llvm::Expected<CrossEntropySpec> get(const CrossEntropyAttrs &attrs,
                                              llvm::ArrayRef<int64_t> h,
                                              llvm::ArrayRef<int64_t> w,
                                              llvm::ArrayRef<int64_t> labels);
};

} // namespace crossentropy
} // namespace gmopt

#endif // GMOPT_IR_OPS_CROSSENTROPYSPEC_H
