//===- AttentionSpec.cpp - What a fused attention node means --------------===//
//
// Decodes gmopt.FusedAttention / FusedAttentionGrad attributes and operand
// shapes once (see AttentionSpec.h): layout checks, grouped-query heads and
// the broadcast strides of the mask.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/AttentionSpec.h"
#include "ir/ops/ShapeInference.h"

#include "ir/IR.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <string>

using namespace gmopt;
using namespace gmopt::attention;

namespace {

llvm::Error specError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

AttentionAttrs AttentionAttrs::fromNode(const Node &node) {
  AttentionAttrs attrs;
  if (node.hasAttr("scale"))
    attrs.scale = node.getFloatAttr("scale", 1.0f);
  attrs.causal = node.getIntAttr("causal", 0) != 0;
  attrs.kTransposed = node.getIntAttr("k_transposed", 0) != 0;
  attrs.maskTrueKeeps = node.getIntAttr("mask_true_keeps", 1) != 0;
  attrs.maskedValue = node.getFloatAttr("masked_value", -INFINITY);
  return attrs;
}

llvm::Expected<AttentionSpec>
AttentionSpec::get(const Node &node, llvm::ArrayRef<int64_t> q,
                   llvm::ArrayRef<int64_t> k, llvm::ArrayRef<int64_t> v,
                   std::optional<llvm::ArrayRef<int64_t>> mask,
                   DType maskType) {
  return get(AttentionAttrs::fromNode(node), q, k, v, mask, maskType);
}

llvm::Expected<AttentionSpec>
AttentionSpec::get(const AttentionAttrs &attrs, llvm::ArrayRef<int64_t> q,
                   llvm::ArrayRef<int64_t> k, llvm::ArrayRef<int64_t> v,
                   std::optional<llvm::ArrayRef<int64_t>> mask,
                   DType maskType) {
  AttentionSpec spec;
  spec.attrs = attrs;
  size_t rank = q.size();
  if (rank < 2 || k.size() != rank || v.size() != rank)
    return specError("Q " + ops::shapeString(q) + ", K " + ops::shapeString(k) +
                     " and V " + ops::shapeString(v) +
                     " must have one rank, at least 2");
  spec.batchShape.assign(q.begin(), q.end() - 2);
  for (int64_t extent : spec.batchShape)
    spec.batch *= extent;
  spec.seqQ = q[rank - 2];
  spec.headDim = q[rank - 1];
  spec.seqK = spec.attrs.kTransposed ? k[rank - 1] : k[rank - 2];
  int64_t kHeadDim = spec.attrs.kTransposed ? k[rank - 2] : k[rank - 1];
  spec.valueDim = v[rank - 1];
  if (kHeadDim != spec.headDim)
    return specError("K " + ops::shapeString(k) +
                     " does not have Q's head size " +
                     llvm::Twine(spec.headDim));
  if (v[rank - 2] != spec.seqK)
    return specError("V " + ops::shapeString(v) + " does not have K's " +
                     llvm::Twine(spec.seqK) + " keys");
  if (rank >= 3) {
    spec.heads = q[rank - 3];
    spec.kvHeads = k[rank - 3];
    if (v[rank - 3] != spec.kvHeads)
      return specError("K and V have different head counts");
    if (spec.kvHeads <= 0 || spec.heads % spec.kvHeads != 0)
      return specError("Q's " + llvm::Twine(spec.heads) +
                       " heads are not a multiple of K's " +
                       llvm::Twine(spec.kvHeads));
    for (size_t i = 0; i + 3 < rank; ++i)
      if (k[i] != q[i] || v[i] != q[i])
        return specError("Q " + ops::shapeString(q) + ", K " +
                         ops::shapeString(k) + " and V " + ops::shapeString(v) +
                         " have different batch dimensions");
  }
  spec.scale = spec.attrs.scale
                   ? *spec.attrs.scale
                   : 1.0f / std::sqrt(static_cast<float>(
                                std::max<int64_t>(spec.headDim, 1)));
  if (mask) {
    spec.hasMask = true;
    spec.boolMask = maskType == DType::Bool;
    llvm::ArrayRef<int64_t> m = *mask;
    if (m.size() > rank)
      return specError("the mask " + ops::shapeString(m) +
                       " has a higher rank than the scores");
    // Broadcast strides against batchShape + [sq, sk], right-aligned.
    llvm::SmallVector<int64_t, 6> scores(spec.batchShape.begin(),
                                         spec.batchShape.end());
    scores.push_back(spec.seqQ);
    scores.push_back(spec.seqK);
    spec.maskStrides.assign(rank, 0);
    int64_t stride = 1;
    for (size_t i = 0; i != m.size(); ++i) {
      size_t maskDim = m.size() - 1 - i, scoreDim = rank - 1 - i;
      if (m[maskDim] == scores[scoreDim])
        spec.maskStrides[scoreDim] = m[maskDim] == 1 ? 0 : stride;
      else if (m[maskDim] != 1)
        return specError("the mask " + ops::shapeString(m) +
                         " does not broadcast to the scores " +
                         ops::shapeString(scores));
      stride *= m[maskDim];
    }
  }
  return spec;
}

llvm::Expected<AttentionSpec> AttentionSpec::get(const Node &node) {
  bool grad = node.getOpType() == kFusedAttentionGradOp;
  unsigned first = grad ? kGradQ : kQ;
  unsigned maskIndex = grad ? kGradMask : kMask;
  llvm::SmallVector<llvm::SmallVector<int64_t, 4>, 3> shapes;
  for (unsigned i = first; i != first + 3; ++i) {
    const Value *operand =
        i < node.getNumOperands() ? node.getOperand(i) : nullptr;
    if (!operand || !operand->getType().hasStaticShape())
      return specError("Q, K and V need static shapes");
    shapes.push_back(operand->getType().getStaticShape());
  }
  const Value *mask =
      maskIndex < node.getNumOperands() ? node.getOperand(maskIndex) : nullptr;
  llvm::SmallVector<int64_t, 4> maskShape;
  if (mask) {
    if (!mask->getType().hasStaticShape())
      return specError("the mask needs a static shape");
    maskShape = mask->getType().getStaticShape();
  }
  return get(node, shapes[0], shapes[1], shapes[2],
             mask ? std::optional<llvm::ArrayRef<int64_t>>(maskShape)
                  : std::nullopt,
             mask ? mask->getType().getDType() : DType::Undefined);
}

int64_t AttentionSpec::maskOffset(int64_t n) const {
  int64_t offset = 0;
  for (size_t i = batchShape.size(); i-- > 0;) {
    offset += (n % batchShape[i]) * maskStrides[i];
    n /= batchShape[i];
  }
  return offset;
}

uint64_t AttentionSpec::activeScores() const {
  uint64_t perMatrix = static_cast<uint64_t>(seqQ) * seqK;
  if (attrs.causal) {
    // Row i sees columns [0, i + sk - sq], clamped to [0, sk].
    perMatrix = 0;
    for (int64_t i = 0; i < seqQ; ++i)
      perMatrix += std::clamp<int64_t>(i + seqK - seqQ + 1, 0, seqK);
  }
  return perMatrix * static_cast<uint64_t>(batch);
}
