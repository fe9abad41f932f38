//===- FusedScratch.h - The fused ops' CUDA scratch sizes -------*- C++ -*-===//
//
// How much fp32 scratch the CUDA kernels of gmopt's fused attention and
// fused cross entropy take (FusedKernels.h), as plain arithmetic on the
// decoded sizes: the kernel table's scratch column (CudaKernelTable.cpp,
// built without the toolkit, the planner's workspace model) and the kernels'
// scratch layout (AttentionKernels.cu, CrossEntropyKernels.cu) both read
// these, so the plan reserves exactly what a launch uses.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_FUSEDSCRATCH_H
#define GMOPT_BACKEND_CUDA_FUSEDSCRATCH_H

#include <cstdint>

namespace gmopt {
namespace cuda {

/// FusedAttentionGrad: D = rowsum(dO * O) of each of the batch x seqQ query
/// rows (the forward needs none).
inline int64_t attentionGradScratchFloats(int64_t batch, int64_t seqQ) {
  return batch * seqQ;
}

/// FusedLinearCrossEntropy: the [rows, blockColumns] logits tile, then per
/// row the running maximum, the running sum and the label's logit.
inline int64_t crossEntropyForwardScratchFloats(int64_t rows,
                                                int64_t blockColumns) {
  return rows * (blockColumns + 3);
}

/// FusedLinearCrossEntropyGrad: the tile, each row's factor d loss / d
/// loss_row, and for 16-bit tensors an fp32 [rows, hidden] accumulator of
/// dh (rounded once, as the CPU kernel stages 16-bit tensors).
inline int64_t crossEntropyBackwardScratchFloats(int64_t rows,
                                                 int64_t blockColumns,
                                                 int64_t hidden,
                                                 bool sixteenBit) {
  return rows * (blockColumns + 1) + (sixteenBit ? rows * hidden : 0);
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_FUSEDSCRATCH_H
