//===- FuseCrossEntropy.h - LM head + loss as one fused op pair -*- C++ -*-===//
//
// A language model's final projection and loss keep [N, V] tensors (N
// tokens, V the vocabulary) from the forward pass to the backward pass:
// ONNX Runtime's SoftmaxCrossEntropyLoss saves its log-probabilities for
// SoftmaxCrossEntropyLossGrad, and the logits' gradient feeds the two
// gradient products of the projection. At GPT-2 small 8x1024 each is
// 1.5 GiB. The `fuse-cross-entropy` pass finds
//
//   Z = MatMul/FusedMatMul(h, W or W^T) -> [Reshape] -> logits
//   loss, log_prob = SoftmaxCrossEntropyLoss(logits, labels)
//   dZ = SoftmaxCrossEntropyLossGrad(dloss, log_prob, labels)
//     -> [Reshape]* -> dh = FusedMatMul/MatMul(dZ, W or W^T)
//                   -> dW = Gemm(dZ^T, h) (or Gemm(h^T, dZ) for W [D, V])
//
// and replaces it with gmopt.FusedLinearCrossEntropy(h, W, labels) ->
// (loss, lse) and gmopt.FusedLinearCrossEntropyGrad(dloss, h, W, labels,
// lse) -> (dh, dW), which keep one log-sum-exp per token and hold one
// vocabulary block of logits at a time (docs/fused-cross-entropy.md). A
// tied embedding keeps its one weight: dW replaces only the projection's
// share of the gradient Sum.
//
// Only a whole match is rewritten; a pattern whose logits,
// log-probabilities or logits' gradient have another use, whose backward
// part is missing or different, or whose loss has class weights, is left
// alone and counted in the statistics by reason. Analysis (match every
// SoftmaxCrossEntropyLoss) -> plan (CrossEntropyFusion per match) ->
// rewrite.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_FUSECROSSENTROPY_H
#define GMOPT_PASSES_TRANSFORMS_FUSECROSSENTROPY_H

#include "passes/Pass.h"

namespace gmopt {

/// The `fuse-cross-entropy` pass (no options).
class FuseCrossEntropyPass : public Pass {
public:
  FuseCrossEntropyPass();

  llvm::StringRef getName() const override { return "fuse-cross-entropy"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_FUSECROSSENTROPY_H
