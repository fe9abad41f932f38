//===- FuseAttention.h - Attention as one fused op pair ---------*- C++ -*-===//
//
// The decomposed scaled-dot-product attention that exporters and ONNX
// Runtime's generator write keeps the [.., H, sq, sk] probabilities (and
// their dropped-out copy and mask) alive from the forward pass to the
// backward pass. The `fuse-attention` pass finds
//
//   S = MatMul/FusedMatMul(Q, K^T or K) -> [Mul/Div by a scalar]
//     -> [Where(mask, fill, .) / Where(mask, ., fill) / Add(., bias)]
//     -> P = Softmax(axis -1) -> [D, m = Dropout/BitmaskDropout(P)]
//     -> O = MatMul(D, V)
//
// and its gradient as ONNX Runtime and gmopt's autodiff emit it
// (FusedMatMul for dV = D^T dO and dD = dO V^T, DropoutGrad or
// BitmaskDropoutGrad, SoftmaxGrad_13, the mask's Where gradient, the scale,
// the two products of dS), and replaces both with gmopt.FusedAttention,
// which saves one log-sum-exp per row, and gmopt.FusedAttentionGrad, which
// recomputes the probabilities tile by tile (docs/fused-attention.md). The
// dropout's stream id moves onto both ops, so they draw the unfused mask.
// A boolean causal constant becomes the `causal` attribute.
//
// Only a whole match is rewritten: a pattern whose backward part is missing
// or different, or one of whose intermediates (scores, probabilities,
// dropped copy, mask, their gradients) has another use, is left alone and
// counted in the statistics by reason. Analysis (match every softmax) ->
// plan (AttentionFusion per match) -> rewrite.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_FUSEATTENTION_H
#define GMOPT_PASSES_TRANSFORMS_FUSEATTENTION_H

#include "passes/Pass.h"

namespace gmopt {

/// The `fuse-attention` pass.
class FuseAttentionPass : public Pass {
public:
  /// Tunables; each is a pipeline option (`fuse-attention{causal=false}`).
  struct Options {
    /// Turn a boolean mask constant that is exactly the causal triangle
    /// (with a -inf fill) into the `causal` attribute, so the kernels skip
    /// the masked tiles; otherwise it stays a mask operand.
    bool causal = true;
  };

  /// A pass with the default options.
  FuseAttentionPass();
  /// A pass with \p options.
  explicit FuseAttentionPass(Options options);

  llvm::StringRef getName() const override { return "fuse-attention"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_FUSEATTENTION_H
