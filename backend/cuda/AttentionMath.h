//===- AttentionMath.h - The fused attention kernels' score math -*- C++ -*-===//
//
// The per-score arithmetic of the CUDA fused attention kernels
// (AttentionKernels.cu) as `__host__ __device__` functions over the plain
// geometry the kernel table decodes from ir/ops' AttentionSpec: which
// key/value matrix a score matrix reads, where its mask starts, how mask
// and causality change a score, which keys a row block sees, and the
// dropout decision of score (n, i, j), which must be the unfused Dropout's
// draw of element (n * sq + i) * sk + j of the node's Philox stream. Host
// tests (CudaFusedTest.cpp) check them against the CPU kernels without a
// GPU. No CUDA or LLVM headers.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_ATTENTIONMATH_H
#define GMOPT_BACKEND_CUDA_ATTENTIONMATH_H

#include "backend/HostDevice.h"
#include "backend/Philox.h"

#include <cmath>
#include <cstdint>

namespace gmopt {
namespace cuda {

/// Keys (and, backward, queries) of one tile staged in shared memory.
constexpr int kAttentionTileKeys = 32;
/// Query rows (warps) of one attention thread block.
constexpr int kAttentionRowsPerBlock = 8;
/// The largest head size (Q/K's and V's last dimension) the kernels take:
/// each lane keeps headDim / 32 accumulators in registers.
constexpr int64_t kAttentionMaxHeadDim = 128;
/// The most batch dimensions (before [sq, d]) a mask broadcasts over.
constexpr int kAttentionMaxBatchRank = 6;

/// How the optional mask enters the scores.
enum class AttentionMaskKind : int32_t { None = 0, Additive = 1, Bool = 2 };

/// A fused attention node's geometry and attributes (AttentionSpec), as the
/// kernels read them.
struct AttentionGeometry {
  int64_t batch = 1, heads = 1, kvHeads = 1;
  int64_t seqQ = 0, seqK = 0, headDim = 0, valueDim = 0;
  float scale = 1;
  bool causal = false;
  /// K (and dK) as [.., Hk, d, sk].
  bool kTransposed = false;
  AttentionMaskKind mask = AttentionMaskKind::None;
  bool maskTrueKeeps = true;
  float maskedValue = 0;
  /// The mask's element strides over the batch dimensions (batchShape) and
  /// over rows and columns (0 where it broadcasts).
  int32_t batchRank = 0;
  int64_t batchShape[kAttentionMaxBatchRank] = {};
  int64_t maskBatchStrides[kAttentionMaxBatchRank] = {};
  int64_t maskRowStride = 0, maskColStride = 0;
};

/// The key/value matrix score matrix \p n reads (AttentionSpec::kvIndex).
GMOPT_HD int64_t attentionKvIndex(const AttentionGeometry &g, int64_t n) {
  int64_t group = g.heads / g.kvHeads;
  return (n / g.heads) * g.kvHeads + (n % g.heads) / group;
}

/// Element offset in the mask of score matrix \p n's element (0, 0)
/// (AttentionSpec::maskOffset).
GMOPT_HD int64_t attentionMaskBase(const AttentionGeometry &g, int64_t n) {
  int64_t offset = 0;
  for (int i = g.batchRank - 1; i >= 0; --i) {
    offset += (n % g.batchShape[i]) * g.maskBatchStrides[i];
    n /= g.batchShape[i];
  }
  return offset;
}

/// Element offset in the mask of score (i, j) of the matrix at \p base.
GMOPT_HD int64_t attentionMaskOffset(const AttentionGeometry &g, int64_t base,
                                     int64_t i, int64_t j) {
  return base + i * g.maskRowStride + j * g.maskColStride;
}

/// Score (i, j) from its scaled product \p scaled, the mask value at its
/// offset (\p boolValue or \p additive, by the geometry's mask kind):
/// masked, then removed by causality (-inf), as the CPU kernel orders them.
GMOPT_HD float attentionMaskScore(const AttentionGeometry &g, float scaled,
                                  bool boolValue, float additive, int64_t i,
                                  int64_t j) {
  float s = scaled;
  if (g.mask == AttentionMaskKind::Bool) {
    if (boolValue != g.maskTrueKeeps)
      s = g.maskedValue;
  } else if (g.mask == AttentionMaskKind::Additive) {
    s += additive;
  }
  if (g.causal && j > i + (g.seqK - g.seqQ))
    s = -INFINITY;
  return s;
}

/// The key columns [0, end) that query rows [i0, i0 + rows) may see.
GMOPT_HD int64_t attentionVisibleEnd(const AttentionGeometry &g, int64_t i0,
                                     int64_t rows) {
  if (!g.causal)
    return g.seqK;
  int64_t end = i0 + rows + (g.seqK - g.seqQ);
  return end < 0 ? 0 : (end > g.seqK ? g.seqK : end);
}

/// Whether dropout with \p ratio on \p stream keeps score (n, i, j): the
/// unfused Dropout's decision for element (n * sq + i) * sk + j of the
/// [.., H, sq, sk] probabilities.
GMOPT_HD bool attentionDropoutKeeps(const AttentionGeometry &g,
                                    const PhiloxStreamKey &stream, float ratio,
                                    int64_t n, int64_t i, int64_t j) {
  uint64_t index = (static_cast<uint64_t>(n) * static_cast<uint64_t>(g.seqQ) +
                    static_cast<uint64_t>(i)) *
                       static_cast<uint64_t>(g.seqK) +
                   static_cast<uint64_t>(j);
  PhiloxWords block = philoxBlock(stream, static_cast<uint32_t>(index / 4));
  return dropoutKeeps(block.w[index % 4], ratio);
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_ATTENTIONMATH_H
