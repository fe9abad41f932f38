//===- AttentionOps.cpp - Schemas of gmopt's fused attention ops ----------===//
//
// gmopt.FusedAttention and gmopt.FusedAttentionGrad (docs/fused-attention.md):
// scaled-dot-product attention that keeps one log-sum-exp per score row
// instead of the [.., H, sq, sk] probabilities, and its gradient, which
// recomputes them. Both are random ops (the attention dropout's stream id
// moves onto them) whose ratio and training_mode stay operands, as on
// Dropout. Inference, the FLOP/byte cost and the kernels read the one
// decoding in AttentionSpec.h.
//
//===----------------------------------------------------------------------===//

#include "ir/Collectives.h"
#include "ir/ops/AttentionSpec.h"
#include "ir/ops/OpDefs.h"

using namespace gmopt;
using namespace gmopt::ops;
using namespace gmopt::attention;

namespace {

/// Checks what can be checked without static shapes (dtypes, ranks, the
/// layout when every shape is static) and returns the Q type.
llvm::Error checkOperands(InferenceContext &ctx, unsigned first,
                          unsigned maskIndex, unsigned ratioIndex) {
  static const DType boolOnly[] = {DType::Bool};
  DType dtype = ctx.getInputType(first).getDType();
  for (unsigned i = first; i != first + 3; ++i) {
    if (auto err = checkDTypeIn(ctx, i, floatDTypes(), "Q, K and V"))
      return err;
    if (ctx.getInputType(i).getDType() != dtype)
      return ctx.error("Q, K and V must have one element type");
    if (ctx.getInputType(i).hasRank() && ctx.getInputType(i).getRank() < 2)
      return ctx.error("Q, K and V must have rank >= 2");
  }
  if (ctx.hasInput(maskIndex)) {
    DType maskType = ctx.getInputType(maskIndex).getDType();
    if (maskType != DType::Bool && maskType != dtype)
      return ctx.error("the mask must be bool or Q's element type");
  }
  if (auto err = checkDTypeIn(ctx, ratioIndex, floatDTypes(), "ratio"))
    return err;
  if (auto err = checkDTypeIn(ctx, ratioIndex + 1, boolOnly, "training_mode"))
    return err;
  bool allStatic = true;
  for (unsigned i = first; i != first + 3; ++i)
    allStatic &= ctx.getInputType(i).hasStaticShape();
  if (ctx.hasInput(maskIndex))
    allStatic &= ctx.getInputType(maskIndex).hasStaticShape();
  if (allStatic) {
    auto spec = AttentionSpec::get(ctx.getNode());
    if (!spec)
      return ctx.error(llvm::toString(spec.takeError()));
  }
  return llvm::Error::success();
}

/// FusedAttention -> (O = Q's dims with V's last, LSE = Q's dims but the
/// last, f32).
llvm::Error inferFusedAttention(InferenceContext &ctx) {
  if (auto err = checkOperands(ctx, kQ, kMask, kRatio))
    return err;
  const TensorType &q = ctx.getInputType(kQ);
  const TensorType &v = ctx.getInputType(kV);
  if (!q.hasRank() || !v.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(q.getDType()));
    setOutput(ctx, 1, TensorType::unranked(DType::F32));
    return llvm::Error::success();
  }
  DimVector rows(q.getDims().begin(), q.getDims().end() - 1);
  DimVector out = rows;
  out.push_back(v.getDims().back());
  setOutput(ctx, 0, TensorType(q.getDType(), out));
  setOutput(ctx, 1, TensorType(DType::F32, rows));
  return llvm::Error::success();
}

/// FusedAttentionGrad -> (dQ, dK, dV) with the types of Q, K and V.
llvm::Error inferFusedAttentionGrad(InferenceContext &ctx) {
  if (auto err = checkOperands(ctx, kGradQ, kGradMask, kGradRatio))
    return err;
  if (ctx.getInputType(kGradLse).getDType() != DType::F32)
    return ctx.error("the log-sum-exp must be f32");
  for (unsigned i = 0; i != 3; ++i)
    setOutput(ctx, i, ctx.getInputType(kGradQ + i));
  return llvm::Error::success();
}

/// Q K^T and P V (2 flops per multiply-add) over the scores that take
/// part, plus about 6 per score for scale, mask, exp and the online
/// softmax; the backward recomputes Q K^T and forms dV, dP, dQ and dK.
template <bool Grad> OpCost attentionCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  auto spec = AttentionSpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return cost;
  }
  uint64_t scores = spec->activeScores();
  uint64_t d = spec->headDim, dv = spec->valueDim;
  cost.flops =
      Grad ? scores * (2 * (3 * d + 2 * dv) + 10) : scores * (2 * (d + dv) + 6);
  return cost;
}

} // namespace

void ops::registerAttentionOps(OpRegistry &registry) {
  SchemaBuilder(kGmoptDomain, kFusedAttentionOp, 1)
      .inputs(3, kNumForwardOperands)
      .outputs(1, 2)
      .optionalAttr("scale", Attribute::Kind::Float)
      .attrInt("causal", 0)
      .attrInt("k_transposed", 0)
      .attrInt("mask_true_keeps", 1)
      .attrFloat("masked_value", -INFINITY)
      // The random stream id as ONNX export writes it when the forward and
      // backward ops share it (ir/serialization/OnnxExport.cpp).
      .optionalAttr("seed", Attribute::Kind::Int)
      .traits(TraitRandom)
      .amp(AmpClass::None)
      .infer(inferFusedAttention)
      .cost(attentionCost<false>)
      .add(registry);
  SchemaBuilder(kGmoptDomain, kFusedAttentionGradOp, 1)
      .inputs(6, kNumGradOperands)
      .outputs(3)
      .optionalAttr("scale", Attribute::Kind::Float)
      .attrInt("causal", 0)
      .attrInt("k_transposed", 0)
      .attrInt("mask_true_keeps", 1)
      .attrFloat("masked_value", -INFINITY)
      // The random stream id as ONNX export writes it when the forward and
      // backward ops share it (ir/serialization/OnnxExport.cpp).
      .optionalAttr("seed", Attribute::Kind::Int)
      .traits(TraitRandom)
      .amp(AmpClass::None)
      .infer(inferFusedAttentionGrad)
      .cost(attentionCost<true>)
      .add(registry);
}
