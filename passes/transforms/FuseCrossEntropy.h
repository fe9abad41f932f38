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
// With mode=forward-gradient the match is rewritten instead into token
// chunks of the unfused ops that compute the gradient in the forward pass
// (Options::mode): no recompute, the unfused step's FLOPs.
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

/// How the pass rewrites a matched projection + loss.
enum class CrossEntropyMode { Recompute, ForwardGradient };

/// The `fuse-cross-entropy` pass.
class FuseCrossEntropyPass : public Pass {
public:
  /// Tunables; each is a pipeline option
  /// (`fuse-cross-entropy{mode=forward-gradient}`).
  struct Options {
    /// recompute: the fused op pair; its backward recomputes the logits
    /// (one more 2 N D V product than the unfused step, 9% of GPT-2 small's
    /// FLOPs). forward-gradient: since the loss is the step's last forward
    /// value and its gradient depends on dloss only through a scale, the
    /// forward pass computes, one token chunk at a time with the unfused
    /// ops (product, SoftmaxCrossEntropyLoss with reduction sum, its
    /// gradient for dloss = 1, the two gradient products, dW accumulated),
    /// the loss, dh for dloss = 1 and dW for dloss = 1; the backward pass
    /// only scales them by dloss (over the counted tokens for a mean).
    /// The same FLOPs as the unfused step, at most one chunk of [rows, V]
    /// logits live, and dW kept from the forward pass to the backward pass
    /// (Liger's FusedLinearCrossEntropy does the same in PyTorch). Applies
    /// to fp32 losses with reduction mean or sum and static shapes; others
    /// get the fused pair.
    CrossEntropyMode mode = CrossEntropyMode::Recompute;
    /// forward-gradient: the bytes of one chunk's fp32 logits; a chunk has
    /// chunkBytes / (4 V) tokens, and more than D / 2 (so that a
    /// memory-aware schedule accumulates dW chunk by chunk; see
    /// forwardGradientChunks).
    uint64_t chunkBytes = 64ull << 20;
  };

  /// A pass with the default options.
  FuseCrossEntropyPass();
  /// A pass with \p options.
  explicit FuseCrossEntropyPass(Options options);

  /// The current option values.
  const Options &getPassOptions() const { return options; }

  llvm::StringRef getName() const override { return "fuse-cross-entropy"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_FUSECROSSENTROPY_H
