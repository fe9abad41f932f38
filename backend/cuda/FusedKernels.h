//===- FusedKernels.h - Fused attention and cross entropy on CUDA -*- C++ -*-===//
//
// The launches of gmopt's fused ops on CUDA (AttentionKernels.cu,
// CrossEntropyKernels.cu) and the plain data they take, which
// CudaFusedDispatch.cpp fills once per node from ir/ops' AttentionSpec and
// CrossEntropySpec (this header has no LLVM types, so nvcc compiles it).
//
// Attention (docs/fused-attention.md, CUDA section) is a FlashAttention-2
// style kernel of gmopt's own: one warp per query row, key/value tiles of
// kAttentionTileKeys rows staged in shared memory as fp32, an online
// softmax in fp32, one log-sum-exp per row saved; the backward recomputes
// each tile's probabilities from it in two passes (dQ by query rows, which
// also writes D = rowsum(dO * O) to scratch; dK and dV by key rows), so
// no two warps ever write one gradient element and no atomics are needed.
// Dropout draws score (n, i, j) as element (n * sq + i) * sk + j of the
// node's Philox stream (backend/Philox.h), as the CPU kernel and the
// unfused Dropout do.
//
// Cross entropy (docs/fused-cross-entropy.md) walks the vocabulary in
// blocks of kVocabBlock columns as the CPU does, holding one fp32
// [N, block] logits tile in the node's scratch: a tiled fp32-accumulating
// GEMM over strided operands (both W layouts, 16-bit inputs read as fp32)
// per block, then row kernels for the running maximum and log-sum-exp,
// ignore_index, the reduction and the gradient.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_FUSEDKERNELS_H
#define GMOPT_BACKEND_CUDA_FUSEDKERNELS_H

#include "backend/cuda/AttentionMath.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/FusedScratch.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gmopt {
namespace cuda {

/// FusedAttention: O = dropout(softmax(scale Q K^T + mask)) V and, when
/// \p lse is not null, each row's log-sum-exp; Q, K, V, O and an additive
/// mask have \p storage, a bool mask is bytes.
cudaError_t launchFusedAttention(Storage storage, const AttentionGeometry &g,
                                 const void *q, const void *k, const void *v,
                                 const void *mask, const DropoutParams &dropout,
                                 void *out, float *lse, cudaStream_t stream);

/// FusedAttentionGrad: dQ, dK, dV from dO, Q, K, V, O and the forward's
/// log-sum-exp; \p rowDot is batch x seqQ floats of scratch (D).
cudaError_t launchFusedAttentionGrad(
    Storage storage, const AttentionGeometry &g, const void *dO, const void *q,
    const void *k, const void *v, const void *o, const float *lse,
    const void *mask, const DropoutParams &dropout, float *rowDot, void *dQ,
    void *dK, void *dV, cudaStream_t stream);

/// The reductions of the fused cross entropy (ops::LossReduction).
enum class CrossEntropyReduction : int32_t { None = 0, Sum = 1, Mean = 2 };

/// A fused linear cross-entropy node (CrossEntropySpec), as the kernels
/// read it.
struct CrossEntropyGeometry {
  int64_t rows = 0, hidden = 0, vocab = 0;
  /// Columns of one vocabulary block (the tile's row stride).
  int64_t blockColumns = 0;
  bool transW = true;
  bool hasIgnoreIndex = false;
  int64_t ignoreIndex = 0;
  CrossEntropyReduction reduction = CrossEntropyReduction::Mean;
  /// Labels are int32 (else int64).
  bool labels32 = false;
};

/// FusedLinearCrossEntropy: \p loss (N or 1 elements of \p storage) and
/// \p lse (N floats). A label outside [0, V) that is not ignore_index
/// raises KernelFault::LabelOutOfRange.
cudaError_t launchFusedCrossEntropy(Storage storage,
                                    const CrossEntropyGeometry &g,
                                    const void *h, const void *w,
                                    const void *labels, void *loss, float *lse,
                                    float *scratch, cudaStream_t stream);
/// (\p scratch: crossEntropyForwardScratchFloats floats.)

/// FusedLinearCrossEntropyGrad: dh and dW from dloss, h, W, labels and lse.
cudaError_t launchFusedCrossEntropyGrad(Storage storage,
                                        const CrossEntropyGeometry &g,
                                        const void *dLoss, const void *h,
                                        const void *w, const void *labels,
                                        const float *lse, void *dh, void *dw,
                                        float *scratch, cudaStream_t stream);
/// (\p scratch: crossEntropyBackwardScratchFloats floats.)

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_FUSEDKERNELS_H
