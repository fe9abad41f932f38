//===- FoldTranspose.h - Fold transposes into matrix products ---*- C++ -*-===//
//
// Exporters spell a linear layer's weight as `MatMul(x, Transpose(W))` and
// its gradient as `Transpose(Gemm(A, dY, transA=1))`; attention transposes
// keys with a perm that also swaps the last two axes. Every such Transpose
// is a full copy per step (and the transposed weight is kept alive for the
// backward pass), while BLAS takes a transposed operand for free. The pass
// folds the swap of the last two axes into the products' transA/transB
// flags, on both sides of a product:
//
//   * into products: y = Transpose(x) whose every user is a MatMul,
//     com.microsoft FusedMatMul or Gemm reading y as A or B. The users read
//     x with the flag flipped (a MatMul becomes a FusedMatMul); a perm that
//     also moves other axes leaves a cheaper Transpose that keeps the last
//     axis in place (rows are copied whole).
//   * of a product: y = Transpose(P(A, B)) where the product's result has
//     no other use. Since (op(A) op(B))^T = op(B)^T op(A)^T, P becomes
//     P(B, A) with transA' = !transB and transB' = !transA.
//
// Results change only by the rounding of a transposed BLAS call. Values the
// training signature names, graph outputs and products with a bias (Gemm's
// C) or a batch transpose (transBatchA/B) are left alone.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_FOLDTRANSPOSE_H
#define GMOPT_PASSES_TRANSFORMS_FOLDTRANSPOSE_H

#include "passes/Pass.h"

namespace gmopt {

/// The `fold-transpose` pass.
class FoldTransposePass : public Pass {
public:
  /// Tunables; each is a pipeline option (`fold-transpose{of-products=false}`).
  struct Options {
    /// Fold a Transpose whose users are all matrix products into their
    /// transA/transB flags (MatMul users become FusedMatMul).
    bool intoProducts = true;
    /// Fold a Transpose of a matrix product's only use into the product by
    /// swapping its operands and flipping their flags.
    bool ofProducts = true;
  };

  /// A pass with the default options.
  FoldTransposePass();
  /// A pass with \p options.
  explicit FoldTransposePass(Options options);

  llvm::StringRef getName() const override { return "fold-transpose"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_FOLDTRANSPOSE_H
