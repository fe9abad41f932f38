//===- LossReduction.h - How a loss combines its samples --------*- C++ -*-===//
//
// The `reduction` attribute of the classification losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and ONNX Runtime's
// SoftmaxCrossEntropyLossInternal(Grad), SoftmaxCrossEntropy(Grad) ...):
// none, sum, or mean (the default), read once from a node by shape
// inference, the CPU kernels and the CUDA plan. The enumeration is plain
// C++ so that nvcc can include this header (backend/cuda/LossMath.h); the
// decoding is host code.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_LOSSREDUCTION_H
#define GMOPT_IR_OPS_LOSSREDUCTION_H

#include <cstdint>

#if !defined(__CUDACC__)
#include "llvm/Support/Error.h"
#endif

namespace gmopt {

class Node;

namespace ops {

/// How the per-sample losses combine: kept per sample, summed, or
/// averaged (over the summed weights where the loss has weights).
enum class LossReduction : int32_t { None, Sum, Mean };

#if !defined(__CUDACC__)
/// The `reduction` of loss \p node (default mean), or "reduction must be
/// none, sum or mean, got 'NAME'" (a plain message; callers name the node).
llvm::Expected<LossReduction> getLossReduction(const Node &node);
#endif

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_LOSSREDUCTION_H
