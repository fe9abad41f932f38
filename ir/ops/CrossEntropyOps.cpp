//===- CrossEntropyOps.cpp - Schemas of gmopt's fused cross entropy -------===//
//
// gmopt.FusedLinearCrossEntropy and gmopt.FusedLinearCrossEntropyGrad
// (docs/fused-cross-entropy.md): the final projection, softmax and cross
// entropy of a language model as one op that keeps one log-sum-exp per
// token instead of the [N, V] logits or log-probabilities, and its
// gradient, which recomputes the logits a vocabulary block at a time.
// Inference, the FLOP/byte cost and the kernels read the one decoding in
// CrossEntropySpec.h.
//
//===----------------------------------------------------------------------===//

#include "ir/Collectives.h"
#include "ir/ops/CrossEntropySpec.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeInference.h"

using namespace gmopt;
using namespace gmopt::ops;
using namespace gmopt::crossentropy;

namespace {

/// Checks h, W and labels from operand \p first on (dtypes, and the
/// decoding when every shape is static).
llvm::Error checkOperands(InferenceContext &ctx, unsigned first) {
  static const DType labelTypes[] = {DType::I64, DType::I32};
  if (auto err = checkDTypeIn(ctx, first, floatDTypes(), "h"))
    return err;
  if (ctx.getInputType(first + 1).getDType() !=
      ctx.getInputType(first).getDType())
    return ctx.error("h and W must have one element type");
  if (auto err = checkDTypeIn(ctx, first + 2, labelTypes, "labels"))
    return err;
  auto reduction = getLossReduction(ctx.getNode());
  if (!reduction)
    return ctx.error(llvm::toString(reduction.takeError()));
  bool allStatic = true;
  for (unsigned i = first; i != first + 3; ++i)
    allStatic &= ctx.getInputType(i).hasStaticShape();
  if (allStatic) {
    auto spec = CrossEntropySpec::get(ctx.getNode());
    if (!spec)
      return ctx.error(llvm::toString(spec.takeError()));
  }
  return llvm::Error::success();
}

/// FusedLinearCrossEntropy -> (loss: a scalar, or labels' shape for
/// reduction none; lse: f32 with labels' shape).
llvm::Error inferFusedLinearCrossEntropy(InferenceContext &ctx) {
  if (auto err = checkOperands(ctx, kH))
    return err;
  DType dtype = ctx.getInputType(kH).getDType();
  const TensorType &labels = ctx.getInputType(kLabels);
  auto reduction = getLossReduction(ctx.getNode());
  if (!reduction)
    return ctx.error(llvm::toString(reduction.takeError()));
  if (!labels.hasRank()) {
    setOutput(ctx, 0,
              *reduction == LossReduction::None ? TensorType::unranked(dtype)
                                                : TensorType(dtype, {}));
    setOutput(ctx, 1, TensorType::unranked(DType::F32));
    return llvm::Error::success();
  }
  setOutput(ctx, 0,
            *reduction == LossReduction::None
                ? TensorType(dtype, labels.getDims())
                : TensorType(dtype, llvm::ArrayRef<Dim>()));
  setOutput(ctx, 1, TensorType(DType::F32, labels.getDims()));
  return llvm::Error::success();
}

/// FusedLinearCrossEntropyGrad -> (dh, dW) with h's and W's types.
llvm::Error inferFusedLinearCrossEntropyGrad(InferenceContext &ctx) {
  if (auto err = checkOperands(ctx, kGradH))
    return err;
  if (ctx.getInputType(kGradLse).getDType() != DType::F32)
    return ctx.error("the log-sum-exp must be f32");
  if (ctx.getInputType(kGradDLoss).getDType() !=
      ctx.getInputType(kGradH).getDType())
    return ctx.error("dloss must have h's element type");
  setOutput(ctx, 0, ctx.getInputType(kGradH));
  setOutput(ctx, 1, ctx.getInputType(kGradW));
  return llvm::Error::success();
}

/// The logits product (2 N D V) plus about 5 per logit for the online
/// log-sum-exp; the backward recomputes the product, forms the gradient of
/// each logit and multiplies it into dh and dW (two more products).
template <bool Grad> OpCost crossEntropyCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  auto spec = CrossEntropySpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return cost;
  }
  uint64_t logits = static_cast<uint64_t>(spec->rows) * spec->vocab;
  uint64_t product = 2 * logits * spec->hidden;
  cost.flops = Grad ? 3 * product + 6 * logits : product + 5 * logits;
  return cost;
}

} // namespace

void ops::registerCrossEntropyOps(OpRegistry &registry) {
  SchemaBuilder(kGmoptDomain, kFusedLinearCrossEntropyOp, 1)
      .inputs(3)
      .outputs(2)
      .attrInt("trans_w", 1)
      .optionalAttr("ignore_index", Attribute::Kind::Int)
      .attrString("reduction", "mean")
      .amp(AmpClass::Deny)
      .infer(inferFusedLinearCrossEntropy)
      .cost(crossEntropyCost<false>)
      .add(registry);
  SchemaBuilder(kGmoptDomain, kFusedLinearCrossEntropyGradOp, 1)
      .inputs(5)
      .outputs(2)
      .attrInt("trans_w", 1)
      .optionalAttr("ignore_index", Attribute::Kind::Int)
      .attrString("reduction", "mean")
      .amp(AmpClass::Deny)
      .infer(inferFusedLinearCrossEntropyGrad)
      .cost(crossEntropyCost<true>)
      .add(registry);
}
