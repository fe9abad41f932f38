//===- FoldScale.h - Fold scalar scales into matrix products ----*- C++ -*-===//
//
// Attention scales its scores, `Mul(MatMul(Q, K^T), 1/sqrt(d))`, and its
// gradient scales them back, `Mul(dS, 1/sqrt(d))` read by the two products
// of the score gradient. Each Mul is a full pass over a batch x heads x seq
// x seq tensor (and, under recompute, is made again in the backward pass),
// while com.microsoft FusedMatMul scales its product by `alpha` for free -
// ONNX Runtime's MatMulScaleFusion. The pass folds a float32 scalar constant
// into the products on both sides:
//
//   * of a product: y = Mul(P(A, B), c) (or Mul(c, P), or Div(P, c)) where
//     P is a MatMul or FusedMatMul whose result has no other use. P becomes
//     FusedMatMul(A, B) with alpha' = alpha * c (alpha / c). With alpha = 1
//     and Mul this is exact: the product is rounded, then scaled, as before.
//   * into products: y = Mul(x, c) (or Div) whose every use is operand A or
//     B (not both) of a MatMul or FusedMatMul. The users read x with their
//     alpha scaled; the product of x rounds once instead of twice.
//
// Values the training signature names, graph outputs and products with a
// batch transpose are left alone; c must be an initializer (a graph input's
// default may be overridden by the caller).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_FOLDSCALE_H
#define GMOPT_PASSES_TRANSFORMS_FOLDSCALE_H

#include "passes/Pass.h"

namespace gmopt {

/// The `fold-scale` pass.
class FoldScalePass : public Pass {
public:
  /// Tunables; each is a pipeline option (`fold-scale{into-products=false}`).
  struct Options {
    /// Fold the scale of a product's only use into the product's alpha.
    bool ofProducts = true;
    /// Fold a scaled operand into the alphas of the products that read it.
    bool intoProducts = true;
  };

  /// A pass with the default options.
  FoldScalePass();
  /// A pass with \p options.
  explicit FoldScalePass(Options options);

  llvm::StringRef getName() const override { return "fold-scale"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_FOLDSCALE_H
