//===- PackDropoutMasks.h - Dropout masks saved as bits ----------*- C++ -*-===//
//
// `pack-dropout-masks` stores every dropout mask the backward pass reads as
// a bitmask: a standard Dropout whose mask output is read only by
// com.microsoft DropoutGrad nodes becomes com.microsoft BitmaskDropout
// (the same data output; the mask packed 32 elements per uint32 word) and
// each of those DropoutGrad nodes becomes BitmaskDropoutGrad. A bool mask
// costs one byte per element and lives from the forward pass to the
// backward one; the bitmask costs one bit. The rewrite is exact: the new
// node keeps the Dropout's random stream id (and seed), and every backend
// draws the same decisions for the same stream whichever of the two ops
// draws them (backend/cpu/DropoutKernels.cpp), so losses and gradients are
// bitwise unchanged.
//
// ONNX Runtime applies the same replacement to its CUDA training graphs
// (BitmaskDropoutReplacement); it registers the two ops for CUDA and ROCm
// only, so an ONNX graph emitted after this pass trains in ORT on those
// providers, not on its CPU one.
//
// Left alone: a Dropout whose mask is unused (nothing to save), a graph
// output or named by the training signature, or read by anything but a
// DropoutGrad's mask operand; a Dropout with the pre-opset-12 ratio
// attribute.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AMP_PACKDROPOUTMASKS_H
#define GMOPT_PASSES_AMP_PACKDROPOUTMASKS_H

#include "passes/Pass.h"
#include "passes/PatternRewriter.h"

namespace gmopt {

/// The pattern's name, as counted in GreedyRewriteResult.
inline constexpr llvm::StringLiteral kPackDropoutMaskPattern =
    "pack-dropout-mask";

/// Dropout + its DropoutGrads -> BitmaskDropout + BitmaskDropoutGrads.
class PackDropoutMask : public RewritePattern {
public:
  PackDropoutMask() : RewritePattern(kPackDropoutMaskPattern) {}
  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override;
};

/// The `pack-dropout-masks` pass.
class PackDropoutMasksPass : public Pass {
public:
  /// Declares the statistics the pass reports.
  PackDropoutMasksPass();
  llvm::StringRef getName() const override { return "pack-dropout-masks"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;
};

} // namespace gmopt

#endif // GMOPT_PASSES_AMP_PACKDROPOUTMASKS_H
