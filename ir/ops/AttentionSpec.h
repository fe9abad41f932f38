//===- AttentionSpec.h - What a fused attention node means ------*- C++ -*-===//
//
// The one reading of gmopt's fused scaled-dot-product attention ops,
// gmopt.FusedAttention and gmopt.FusedAttentionGrad (docs/fused-attention.md),
// that shape inference, the cost model, the CPU kernels and the
// fuse-attention pass share: the operand layout (K plain [.., Hk, sk, d] or
// transposed [.., Hk, d, sk]), heads and the grouped-query group, the
// sequence and head sizes, the score scale, causality, and how an optional
// mask (additive float bias, or a boolean keep/drop mask with a fill value)
// broadcasts over the [.., H, sq, sk] scores.
//
//   FusedAttention(Q, K, V, mask?, ratio?, training_mode?) -> (O, LSE)
//   FusedAttentionGrad(dO, Q, K, V, O, LSE, mask?, ratio?, training_mode?)
//       -> (dQ, dK, dV)
//
// Element (batch index n, row i, column j) of the scores is element
// (n * sq + i) * sk + j of the unfused graph's [.., H, sq, sk] probability
// tensor: the dropout decision of that element is the Philox draw of that
// index in the node's stream, as the unfused Dropout draws it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_ATTENTIONSPEC_H
#define GMOPT_IR_OPS_ATTENTIONSPEC_H

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cmath>
#include <cstdint>
#include <optional>

namespace gmopt {

class Node;

/// gmopt.FusedAttention (domain kGmoptDomain).
constexpr llvm::StringLiteral kFusedAttentionOp = "FusedAttention";
/// gmopt.FusedAttentionGrad (domain kGmoptDomain).
constexpr llvm::StringLiteral kFusedAttentionGradOp = "FusedAttentionGrad";

namespace attention {

/// Operand positions of FusedAttention.
constexpr unsigned kQ = 0;
constexpr unsigned kK = 1;
constexpr unsigned kV = 2;
constexpr unsigned kMask = 3;
constexpr unsigned kRatio = 4;
constexpr unsigned kTrainingMode = 5;
constexpr unsigned kNumForwardOperands = 6;

/// Operand positions of FusedAttentionGrad.
constexpr unsigned kGradDO = 0;
constexpr unsigned kGradQ = 1;
constexpr unsigned kGradK = 2;
constexpr unsigned kGradV = 3;
constexpr unsigned kGradO = 4;
constexpr unsigned kGradLse = 5;
constexpr unsigned kGradMask = 6;
constexpr unsigned kGradRatio = 7;
constexpr unsigned kGradTrainingMode = 8;
constexpr unsigned kNumGradOperands = 9;

/// The attributes of either op, with their defaults applied.
struct AttentionAttrs {
  /// Factor of Q K^T; nullopt means 1 / sqrt(head size).
  std::optional<float> scale;
  /// Scores with column j > row i + (sk - sq) take no part.
  bool causal = false;
  /// K is given as [.., Hk, d, sk] (K^T) instead of [.., Hk, sk, d]; dK of
  /// the gradient has K's layout.
  bool kTransposed = false;
  /// For a boolean mask: true elements take part (SDPA's convention); with
  /// false, true elements are the masked ones (`Where(mask, fill, S)`).
  bool maskTrueKeeps = true;
  /// The score a masked element gets from a boolean mask (the fill of the
  /// unfused Where); -inf removes it from the softmax.
  float maskedValue = -INFINITY;

  /// Reads \p node's attributes.
  static AttentionAttrs fromNode(const Node &node);
};

/// A fused attention node decoded against static operand shapes.
struct AttentionSpec {
  AttentionAttrs attrs;
  /// Q's dimensions before [sq, d] (e.g. [batch, heads]).
  llvm::SmallVector<int64_t, 4> batchShape;
  /// Product of batchShape: the number of (batch, head) score matrices.
  int64_t batch = 1;
  /// Query heads (Q's dimension -3, 1 for rank-2 operands) and key/value
  /// heads (K's); heads is a multiple of kvHeads (grouped-query attention).
  int64_t heads = 1;
  int64_t kvHeads = 1;
  int64_t seqQ = 0;
  int64_t seqK = 0;
  /// Q and K's last dimension (head size), V's last dimension.
  int64_t headDim = 0;
  int64_t valueDim = 0;
  /// The effective score scale (attrs.scale or 1 / sqrt(headDim)).
  float scale = 1;
  /// A mask operand is present, and whether it is boolean.
  bool hasMask = false;
  bool boolMask = false;
  /// Element strides of the mask broadcast to batchShape + [sq, sk] (0 on
  /// broadcast dimensions).
  llvm::SmallVector<int64_t, 6> maskStrides;

  /// Decodes \p node's attributes against static shapes of Q, K, V and the
  /// mask (\p mask null when absent, then \p maskType is ignored). Errors
  /// are plain messages; callers add the node.
  static llvm::Expected<AttentionSpec>
  get(const Node &node, llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
      llvm::ArrayRef<int64_t> v, std::optional<llvm::ArrayRef<int64_t>> mask,
      DType maskType);
  /// The same from attributes decoded once (AttentionAttrs::fromNode): a
  /// pure function of them and the shapes, which a kernel that decoded its
  /// node once evaluates on each launch's operands.
  static llvm::Expected<AttentionSpec>
  get(const AttentionAttrs &attrs, llvm::ArrayRef<int64_t> q,
      llvm::ArrayRef<int64_t> k, llvm::ArrayRef<int64_t> v,
      std::optional<llvm::ArrayRef<int64_t>> mask, DType maskType);
  /// Decodes a FusedAttention or FusedAttentionGrad node from its operands'
  /// static types; an error when a shape is not static.
  static llvm::Expected<AttentionSpec> get(const Node &node);

  /// The key/value matrix index read by score matrix \p n (< batch).
  int64_t kvIndex(int64_t n) const {
    int64_t group = heads / kvHeads;
    return (n / heads) * kvHeads + (n % heads) / group;
  }
  /// Element offset in the mask of score matrix \p n's element (0, 0).
  int64_t maskOffset(int64_t n) const;
  /// True if score (\p row, \p col) is removed by causality.
  bool causallyMasked(int64_t row, int64_t col) const {
    return attrs.causal && col > row + (seqK - seqQ);
  }
  /// Score elements that take part, counted for the cost model (half of
  /// them for a causal square).
  uint64_t activeScores() const;
};

} // namespace attention
} // namespace gmopt

#endif // GMOPT_IR_OPS_ATTENTIONSPEC_H
