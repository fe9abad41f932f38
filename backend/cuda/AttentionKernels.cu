//===- AttentionKernels.cu - Fused attention CUDA kernels -------*- C++ -*-===//
//
// gmopt.FusedAttention and gmopt.FusedAttentionGrad on CUDA (FusedKernels.h,
// docs/fused-attention.md). Forward: a thread block of
// kAttentionRowsPerBlock warps takes as many consecutive query rows of one
// score matrix, one warp a row; each key tile of kAttentionTileKeys rows of
// K and V is staged once in shared memory (fp32, K's rows padded by one
// float so the lanes' column reads hit distinct banks), lane c scores key
// j0 + c, the warp's max and sum give the online softmax's rescale, and
// each lane accumulates headDim / 32 output elements in registers. Only
// the tiles a causal row block can see are visited. Backward: pass 1 (query
// rows, the forward's layout) writes D_i = dO_i . O_i and dQ; pass 2 (one
// warp per key row, the query rows of every head of its group staged in
// tiles) writes dK and dV. Both recompute P = exp(S - LSE) and the dropout
// decisions from the node's Philox stream; every gradient element is one
// warp's sum, so the results are deterministic.
//
// Semantics are the CPU kernel's (backend/cpu/AttentionKernels.cpp): mask
// then causality, -inf scores take no part, a fully masked row gives
// 0 / 0, the normalizer sums the undropped probabilities.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cuda/AttentionMath.h"
#include "backend/cuda/DropoutDevice.h"
#include "backend/cuda/FusedKernels.h"
#include "backend/cuda/LaunchSupport.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

constexpr int kWarp = 32;
constexpr int kTile = kAttentionTileKeys;
constexpr int kRows = kAttentionRowsPerBlock;
/// Accumulators per lane: headDim / 32 at most.
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadDim) / kWarp;

__device__ __forceinline__ float warpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Score (i, j) of matrix \p n from its raw product \p dot: scaled, masked
/// (AttentionMath.h), -inf past the keys.
template <typename T>
__device__ float maskedScore(const AttentionGeometry &g, const void *mask,
                             int64_t base, int64_t i, int64_t j, float dot) {
  if (j >= g.seqK)
    return -INFINITY;
  bool boolValue = false;
  float additive = 0.0f;
  if (g.mask != AttentionMaskKind::None) {
    int64_t at = attentionMaskOffset(g, base, i, j);
    if (g.mask == AttentionMaskKind::Bool)
      boolValue = static_cast<const uint8_t *>(mask)[at] != 0;
    else
      additive = loadAsFloat(static_cast<const T *>(mask), at);
  }
  return attentionMaskScore(g, dot * g.scale, boolValue, additive, i, j);
}

/// The dropout factor of score (n, i, j): 0 or 1 / (1 - ratio) when
/// dropout is active, else 1.
__device__ __forceinline__ float
dropoutFactor(const AttentionGeometry &g, const DeviceDropoutMode &mode,
              const PhiloxStreamKey &key, int64_t n, int64_t i, int64_t j) {
  if (!mode.active)
    return 1.0f;
  return attentionDropoutKeeps(g, key, mode.ratio, n, i, j)
             ? 1.0f / (1.0f - mode.ratio)
             : 0.0f;
}

/// Stages keys [j0, j0 + kTile) of K (row stride \p kStride floats) and,
/// when \p v, of V in shared memory; keys past seqK are zeros.
template <typename T>
__device__ void stageKeys(const AttentionGeometry &g, const T *kBase,
                          const T *vBase, int64_t j0, float *ks, int kStride,
                          float *vs, int vStride) {
  int threads = blockDim.x;
  for (int idx = threadIdx.x; idx < kTile * g.headDim; idx += threads) {
    int c = idx / static_cast<int>(g.headDim);
    int e = idx % static_cast<int>(g.headDim);
    int64_t j = j0 + c;
    float value = 0.0f;
    if (j < g.seqK)
      value = g.kTransposed ? loadAsFloat(kBase, e * g.seqK + j)
                            : loadAsFloat(kBase, j * g.headDim + e);
    ks[c * kStride + e] = value;
  }
  if (!vs)
    return;
  for (int idx = threadIdx.x; idx < kTile * g.valueDim; idx += threads) {
    int c = idx / static_cast<int>(g.valueDim);
    int e = idx % static_cast<int>(g.valueDim);
    int64_t j = j0 + c;
    vs[c * vStride + e] =
        j < g.seqK ? loadAsFloat(vBase, j * g.valueDim + e) : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRows *kWarp)
    attentionForwardKernel(AttentionGeometry g, const T *q, const T *k,
                           const T *v, const void *mask, DropoutParams dropout,
                           T *out, float *lse) {
  extern __shared__ float shared[];
  int kStride = static_cast<int>(g.headDim) + 1;
  int vStride = static_cast<int>(g.valueDim);
  float *ks = shared;
  float *vs = ks + kTile * kStride;
  float *qs = vs + kTile * vStride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t rowBlocks = (g.seqQ + kRows - 1) / kRows;
  int64_t n = blockIdx.x / rowBlocks;
  int64_t i0 = (blockIdx.x % rowBlocks) * kRows;
  int64_t i = i0 + warp;
  bool rowValid = i < g.seqQ;
  int64_t kv = attentionKvIndex(g, n);
  const T *kBase = k + kv * g.seqK * g.headDim;
  const T *vBase = v + kv * g.seqK * g.valueDim;
  int64_t base =
      g.mask != AttentionMaskKind::None ? attentionMaskBase(g, n) : 0;
  DeviceDropoutMode mode = readDropoutMode(dropout);
  PhiloxStreamKey key =
      makePhiloxStreamKey(dropout.seed, dropout.streamId, dropoutStep(dropout));
  float *qRow = qs + warp * g.headDim;
  for (int e = lane; e < g.headDim; e += kWarp)
    qRow[e] = rowValid ? loadAsFloat(q, (n * g.seqQ + i) * g.headDim + e) : 0;
  float acc[kPerLane];
  for (int t = 0; t < kPerLane; ++t)
    acc[t] = 0.0f;
  float rowMax = -INFINITY, rowSum = 0.0f;
  int64_t rows = g.seqQ - i0 < kRows ? g.seqQ - i0 : kRows;
  int64_t end = attentionVisibleEnd(g, i0, rows);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    stageKeys(g, kBase, vBase, j0, ks, kStride, vs, vStride);
    __syncthreads();
    if (!rowValid)
      continue;
    int64_t j = j0 + lane;
    float dot = 0.0f;
    for (int e = 0; e < g.headDim; ++e)
      dot += qRow[e] * ks[lane * kStride + e];
    float s = j < end ? maskedScore<T>(g, mask, base, i, j, dot) : -INFINITY;
    float newMax = fmaxf(rowMax, warpMax(s));
    // A row masked out so far (-inf everywhere) keeps exp() finite.
    float shift = newMax == -INFINITY ? 0.0f : newMax;
    float rescale = expf(rowMax - shift);
    float p = expf(s - shift);
    rowSum = rowSum * rescale + warpSum(p);
    rowMax = newMax;
    // The normalizer sums the undropped probabilities; only the product
    // with V sees the dropped ones.
    if (j < end)
      p *= dropoutFactor(g, mode, key, n, i, j);
    for (int t = 0; t < kPerLane; ++t)
      acc[t] *= rescale;
    for (int c = 0; c < kTile; ++c) {
      float pc = __shfl_sync(0xffffffffu, p, c);
      for (int t = 0; t < kPerLane; ++t) {
        int e = lane + t * kWarp;
        if (e < g.valueDim)
          acc[t] += pc * vs[c * vStride + e];
      }
    }
  }
  if (!rowValid)
    return;
  for (int t = 0; t < kPerLane; ++t) {
    int e = lane + t * kWarp;
    if (e < g.valueDim)
      storeFromFloat(out, (n * g.seqQ + i) * g.valueDim + e, acc[t] / rowSum);
  }
  if (lse && lane == 0) {
    float shift = rowMax == -INFINITY ? 0.0f : rowMax;
    lse[n * g.seqQ + i] = shift + logf(rowSum);
  }
}

/// Pass 1 of the backward: D_i = dO_i . O_i and dQ, one warp a query row.
template <typename T>
__global__ void __launch_bounds__(kRows *kWarp)
    attentionGradQueryKernel(AttentionGeometry g, const T *dO, const T *q,
                             const T *k, const T *v, const T *o,
                             const float *lse, const void *mask,
                             DropoutParams dropout, float *rowDot, T *dQ) {
  extern __shared__ float shared[];
  int kStride = static_cast<int>(g.headDim) + 1;
  int vStride = static_cast<int>(g.valueDim) + 1;
  float *ks = shared;
  float *vs = ks + kTile * kStride;
  float *qs = vs + kTile * vStride;
  float *dos = qs + kRows * g.headDim;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t rowBlocks = (g.seqQ + kRows - 1) / kRows;
  int64_t n = blockIdx.x / rowBlocks;
  int64_t i0 = (blockIdx.x % rowBlocks) * kRows;
  int64_t i = i0 + warp;
  bool rowValid = i < g.seqQ;
  int64_t kv = attentionKvIndex(g, n);
  const T *kBase = k + kv * g.seqK * g.headDim;
  const T *vBase = v + kv * g.seqK * g.valueDim;
  int64_t base =
      g.mask != AttentionMaskKind::None ? attentionMaskBase(g, n) : 0;
  DeviceDropoutMode mode = readDropoutMode(dropout);
  PhiloxStreamKey key =
      makePhiloxStreamKey(dropout.seed, dropout.streamId, dropoutStep(dropout));
  int64_t row = n * g.seqQ + i;
  float *qRow = qs + warp * g.headDim;
  float *dORow = dos + warp * g.valueDim;
  float dot = 0.0f;
  for (int e = lane; e < g.headDim; e += kWarp)
    qRow[e] = rowValid ? loadAsFloat(q, row * g.headDim + e) : 0.0f;
  for (int e = lane; e < g.valueDim; e += kWarp) {
    float gradient = rowValid ? loadAsFloat(dO, row * g.valueDim + e) : 0.0f;
    dORow[e] = gradient;
    if (rowValid)
      dot += gradient * loadAsFloat(o, row * g.valueDim + e);
  }
  float rowD = warpSum(dot);
  if (rowValid && lane == 0)
    rowDot[row] = rowD;
  float rowLse = rowValid ? lse[row] : 0.0f;
  float shift = rowLse == -INFINITY ? 0.0f : rowLse;
  float acc[kPerLane];
  for (int t = 0; t < kPerLane; ++t)
    acc[t] = 0.0f;
  int64_t rows = g.seqQ - i0 < kRows ? g.seqQ - i0 : kRows;
  int64_t end = attentionVisibleEnd(g, i0, rows);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    stageKeys(g, kBase, vBase, j0, ks, kStride, vs, vStride);
    __syncthreads();
    if (!rowValid)
      continue;
    int64_t j = j0 + lane;
    float qk = 0.0f, dov = 0.0f;
    for (int e = 0; e < g.headDim; ++e)
      qk += qRow[e] * ks[lane * kStride + e];
    for (int e = 0; e < g.valueDim; ++e)
      dov += dORow[e] * vs[lane * vStride + e];
    float ds = 0.0f;
    if (j < end) {
      float s = maskedScore<T>(g, mask, base, i, j, qk);
      float p = expf(s - shift);
      float gradient = dov * dropoutFactor(g, mode, key, n, i, j);
      ds = p * (gradient - rowD);
    }
    for (int c = 0; c < kTile; ++c) {
      float dsc = __shfl_sync(0xffffffffu, ds, c);
      for (int t = 0; t < kPerLane; ++t) {
        int e = lane + t * kWarp;
        if (e < g.headDim)
          acc[t] += dsc * ks[c * kStride + e];
      }
    }
  }
  if (!rowValid)
    return;
  for (int t = 0; t < kPerLane; ++t) {
    int e = lane + t * kWarp;
    if (e < g.headDim)
      storeFromFloat(dQ, row * g.headDim + e, acc[t] * g.scale);
  }
}

/// Pass 2 of the backward: dK and dV, one warp a key row of one key/value
/// matrix, over the query rows of every head that reads it.
template <typename T>
__global__ void __launch_bounds__(kRows *kWarp)
    attentionGradKeyKernel(AttentionGeometry g, const T *dO, const T *q,
                           const T *k, const T *v, const float *lse,
                           const void *mask, DropoutParams dropout,
                           const float *rowDot, T *dK, T *dV) {
  extern __shared__ float shared[];
  int qStride = static_cast<int>(g.headDim) + 1;
  int dOStride = static_cast<int>(g.valueDim) + 1;
  float *qs = shared;
  float *dos = qs + kTile * qStride;
  float *keyRowsShared = dos + kTile * dOStride;
  float *vRows = keyRowsShared + kRows * g.headDim;
  float *tileLse = vRows + kRows * g.valueDim;
  float *tileD = tileLse + kTile;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t keyBlocks = (g.seqK + kRows - 1) / kRows;
  int64_t kv = blockIdx.x / keyBlocks;
  int64_t firstKey = (blockIdx.x % keyBlocks) * kRows;
  int64_t j = firstKey + warp;
  bool keyValid = j < g.seqK;
  int64_t group = g.heads / g.kvHeads;
  int64_t b = kv / g.kvHeads, hk = kv % g.kvHeads;
  const T *kBase = k + kv * g.seqK * g.headDim;
  const T *vBase = v + kv * g.seqK * g.valueDim;
  DeviceDropoutMode mode = readDropoutMode(dropout);
  PhiloxStreamKey key =
      makePhiloxStreamKey(dropout.seed, dropout.streamId, dropoutStep(dropout));
  float *kRow = keyRowsShared + warp * g.headDim;
  float *vRow = vRows + warp * g.valueDim;
  for (int e = lane; e < g.headDim; e += kWarp)
    kRow[e] = !keyValid       ? 0.0f
              : g.kTransposed ? loadAsFloat(kBase, e * g.seqK + j)
                              : loadAsFloat(kBase, j * g.headDim + e);
  for (int e = lane; e < g.valueDim; e += kWarp)
    vRow[e] = keyValid ? loadAsFloat(vBase, j * g.valueDim + e) : 0.0f;
  float dKAcc[kPerLane], dVAcc[kPerLane];
  for (int t = 0; t < kPerLane; ++t)
    dKAcc[t] = dVAcc[t] = 0.0f;
  // Causality: rows before firstKey - (sk - sq) see none of these keys.
  int64_t firstRow = 0;
  if (g.causal) {
    firstRow = firstKey - (g.seqK - g.seqQ);
    firstRow = firstRow < 0 ? 0 : firstRow / kTile * kTile;
  }
  for (int64_t hq = 0; hq < group; ++hq) {
    int64_t n = b * g.heads + hk * group + hq;
    int64_t base =
        g.mask != AttentionMaskKind::None ? attentionMaskBase(g, n) : 0;
    for (int64_t i0 = firstRow; i0 < g.seqQ; i0 += kTile) {
      __syncthreads();
      for (int idx = threadIdx.x; idx < kTile * g.headDim; idx += blockDim.x) {
        int r = idx / static_cast<int>(g.headDim);
        int e = idx % static_cast<int>(g.headDim);
        int64_t i = i0 + r;
        qs[r * qStride + e] =
            i < g.seqQ ? loadAsFloat(q, (n * g.seqQ + i) * g.headDim + e)
                       : 0.0f;
      }
      for (int idx = threadIdx.x; idx < kTile * g.valueDim; idx += blockDim.x) {
        int r = idx / static_cast<int>(g.valueDim);
        int e = idx % static_cast<int>(g.valueDim);
        int64_t i = i0 + r;
        dos[r * dOStride + e] =
            i < g.seqQ ? loadAsFloat(dO, (n * g.seqQ + i) * g.valueDim + e)
                       : 0.0f;
      }
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        int64_t i = i0 + r;
        tileLse[r] = i < g.seqQ ? lse[n * g.seqQ + i] : 0.0f;
        tileD[r] = i < g.seqQ ? rowDot[n * g.seqQ + i] : 0.0f;
      }
      __syncthreads();
      if (!keyValid)
        continue;
      int64_t i = i0 + lane;
      float pd = 0.0f, ds = 0.0f;
      if (i < g.seqQ) {
        float qk = 0.0f, dov = 0.0f;
        for (int e = 0; e < g.headDim; ++e)
          qk += qs[lane * qStride + e] * kRow[e];
        for (int e = 0; e < g.valueDim; ++e)
          dov += dos[lane * dOStride + e] * vRow[e];
        float s = maskedScore<T>(g, mask, base, i, j, qk);
        float rowLse = tileLse[lane];
        float p = expf(s - (rowLse == -INFINITY ? 0.0f : rowLse));
        float factor = dropoutFactor(g, mode, key, n, i, j);
        pd = p * factor;
        ds = p * (dov * factor - tileD[lane]);
      }
      for (int r = 0; r < kTile; ++r) {
        float pdr = __shfl_sync(0xffffffffu, pd, r);
        float dsr = __shfl_sync(0xffffffffu, ds, r);
        for (int t = 0; t < kPerLane; ++t) {
          int e = lane + t * kWarp;
          if (e < g.valueDim)
            dVAcc[t] += pdr * dos[r * dOStride + e];
          if (e < g.headDim)
            dKAcc[t] += dsr * qs[r * qStride + e];
        }
      }
    }
  }
  if (!keyValid)
    return;
  for (int t = 0; t < kPerLane; ++t) {
    int e = lane + t * kWarp;
    if (e < g.valueDim)
      storeFromFloat(dV, (kv * g.seqK + j) * g.valueDim + e, dVAcc[t]);
    if (e < g.headDim) {
      int64_t at = g.kTransposed ? kv * g.headDim * g.seqK + e * g.seqK + j
                                 : (kv * g.seqK + j) * g.headDim + e;
      storeFromFloat(dK, at, dKAcc[t] * g.scale);
    }
  }
}

bool fitsKernels(const AttentionGeometry &g) {
  return g.headDim > 0 && g.headDim <= kAttentionMaxHeadDim && g.valueDim > 0 &&
         g.valueDim <= kAttentionMaxHeadDim && g.kvHeads > 0 &&
         g.heads % g.kvHeads == 0;
}

/// Opts \p kernel into \p bytes of dynamic shared memory where that is
/// more than the default 48 KiB.
template <typename Kernel>
cudaError_t allowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024)
    return cudaSuccess;
  return cudaFuncSetAttribute(kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

} // namespace

cudaError_t gmopt::cuda::launchFusedAttention(
    Storage storage, const AttentionGeometry &g, const void *q, const void *k,
    const void *v, const void *mask, const DropoutParams &dropout, void *out,
    float *lse, cudaStream_t stream) {
  if (!fitsKernels(g))
    return cudaErrorInvalidValue;
  if (g.batch == 0 || g.seqQ == 0)
    return cudaSuccess;
  int64_t blocks = g.batch * ((g.seqQ + kRows - 1) / kRows);
  size_t bytes = sizeof(float) * (kTile * (g.headDim + 1) + kTile * g.valueDim +
                                  kRows * g.headDim);
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    auto kernel = attentionForwardKernel<T>;
    if (cudaError_t status = allowSharedBytes(kernel, bytes))
      return status;
    kernel<<<static_cast<unsigned>(blocks), kRows * kWarp, bytes, stream>>>(
        g, static_cast<const T *>(q), static_cast<const T *>(k),
        static_cast<const T *>(v), mask, dropout, static_cast<T *>(out), lse);
  });
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchFusedAttentionGrad(
    Storage storage, const AttentionGeometry &g, const void *dO, const void *q,
    const void *k, const void *v, const void *o, const float *lse,
    const void *mask, const DropoutParams &dropout, float *rowDot, void *dQ,
    void *dK, void *dV, cudaStream_t stream) {
  if (!fitsKernels(g) || !rowDot)
    return cudaErrorInvalidValue;
  if (g.batch == 0)
    return cudaSuccess;
  int64_t queryBlocks = g.batch * ((g.seqQ + kRows - 1) / kRows);
  int64_t kvMatrices = g.batch / (g.heads / g.kvHeads);
  int64_t keyBlocks = kvMatrices * ((g.seqK + kRows - 1) / kRows);
  size_t queryBytes =
      sizeof(float) * (kTile * (g.headDim + 1) + kTile * (g.valueDim + 1) +
                       kRows * (g.headDim + g.valueDim));
  size_t keyBytes =
      sizeof(float) * (kTile * (g.headDim + 1) + kTile * (g.valueDim + 1) +
                       kRows * (g.headDim + g.valueDim) + 2 * kTile);
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    if (g.seqQ > 0) {
      auto queryKernel = attentionGradQueryKernel<T>;
      if (cudaError_t status = allowSharedBytes(queryKernel, queryBytes))
        return status;
      queryKernel<<<static_cast<unsigned>(queryBlocks), kRows * kWarp,
                    queryBytes, stream>>>(
          g, static_cast<const T *>(dO), static_cast<const T *>(q),
          static_cast<const T *>(k), static_cast<const T *>(v),
          static_cast<const T *>(o), lse, mask, dropout, rowDot,
          static_cast<T *>(dQ));
      if (cudaError_t status = cudaGetLastError())
        return status;
    }
    if (g.seqK > 0) {
      auto keyKernel = attentionGradKeyKernel<T>;
      if (cudaError_t status = allowSharedBytes(keyKernel, keyBytes))
        return status;
      keyKernel<<<static_cast<unsigned>(keyBlocks), kRows * kWarp, keyBytes,
                  stream>>>(
          g, static_cast<const T *>(dO), static_cast<const T *>(q),
          static_cast<const T *>(k), static_cast<const T *>(v), lse, mask,
          dropout, rowDot, static_cast<T *>(dK), static_cast<T *>(dV));
    }
  });
  return cudaGetLastError();
}
