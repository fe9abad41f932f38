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

#include "backend/cuda/AttentionMath.h"
#include "backend/cuda/DropoutDevice.h"
#include "backend/cuda/FusedKernels.h"
#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/WarpRowSupport.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kTile = kAttentionTileKeys;
constexpr int kRows = kAttentionRowsPerBlock;
/// Accumulators per lane: headDim / 32 at most.
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadDim) / kWarp;

/// Thread blocks of kRows rows (one warp a row) that cover \p rows rows.
__host__ __device__ int64_t rowBlocks(int64_t rows) {
  return (rows + kRows - 1) / kRows;
}

/// The shift of exp(s - shift) in a row whose maximum (or log-sum-exp) is
/// \p m: 0 for a row masked out so far (-inf everywhere), which keeps
/// exp() finite.
__device__ __forceinline__ float expShift(float m) {
  return m == -INFINITY ? 0.0f : m;
}

/// Where element (r, e) of one [rows, cols] matrix lies in its tensor:
/// start + r * rowStep + e * colStep (a transposed K through the steps).
struct MatrixLayout {
  /// Element (0, 0), the matrix's size, and the steps between rows and
  /// between columns.
  int64_t start, rows, cols, rowStep, colStep;
  __device__ int64_t at(int64_t r, int64_t e) const {
    return start + r * rowStep + e * colStep;
  }
};

/// Matrix \p index of a [.., rows, cols] tensor.
__device__ MatrixLayout denseMatrix(int64_t index, int64_t rows, int64_t cols) {
  return {index * rows * cols, rows, cols, cols, 1};
}

/// The keys of key/value matrix \p kv as rows of K (or dK), stored [sk, d]
/// or, when kTransposed, [d, sk].
__device__ MatrixLayout keyMatrix(const AttentionGeometry &g, int64_t kv) {
  MatrixLayout m = denseMatrix(kv, g.seqK, g.headDim);
  if (g.kTransposed) {
    m.rowStep = 1;
    m.colStep = g.seqK;
  }
  return m;
}

/// Where score matrix \p n's mask starts (0 without a mask).
__device__ __forceinline__ int64_t maskStart(const AttentionGeometry &g,
                                             int64_t n) {
  return g.mask != AttentionMaskKind::None ? attentionMaskBase(g, n) : 0;
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

/// A launch's dropout: its mode and the Philox stream it draws from.
struct DropoutDraw {
  /// The ratio, and whether the launch drops at all.
  DeviceDropoutMode mode;
  /// The node's Philox stream at the run's step.
  PhiloxStreamKey key;

  __device__ explicit DropoutDraw(const DropoutParams &params)
      : mode(readDropoutMode(params)), key(dropoutStreamKey(params)) {}

  /// The dropout factor of score (n, i, j): 0 or 1 / (1 - ratio) when
  /// dropout is active, else 1.
  __device__ float factor(const AttentionGeometry &g, int64_t n, int64_t i,
                          int64_t j) const {
    if (!mode.active)
      return 1.0f;
    return attentionDropoutKeeps(g, key, mode.ratio, n, i, j)
               ? 1.0f / (1.0f - mode.ratio)
               : 0.0f;
  }
};

/// Stages rows [r0, r0 + kTile) of matrix \p m of \p x in shared memory,
/// row c at dst + c * stride, as fp32; rows past the matrix are zeros.
template <typename T>
__device__ void stageTile(const T *x, const MatrixLayout &m, int64_t r0,
                          float *dst, int stride) {
  for (int idx = threadIdx.x; idx < kTile * m.cols; idx += blockDim.x) {
    int c = idx / static_cast<int>(m.cols);
    int e = idx % static_cast<int>(m.cols);
    int64_t r = r0 + c;
    dst[c * stride + e] = r < m.rows ? loadAsFloat(x, m.at(r, e)) : 0.0f;
  }
}

/// Lane \p lane's share of the warp's copy of row \p r of matrix \p m of
/// \p x to \p dst as fp32 (zeros when not \p valid).
template <typename T>
__device__ void loadRow(const T *x, const MatrixLayout &m, int64_t r,
                        bool valid, float *dst, int lane) {
  for (int e = lane; e < m.cols; e += kWarp)
    dst[e] = valid ? loadAsFloat(x, m.at(r, e)) : 0.0f;
}

/// sum_e a[e] b[e] over \p dim floats of shared memory.
__device__ __forceinline__ float dotShared(const float *a, const float *b,
                                           int64_t dim) {
  float sum = 0.0f;
  for (int e = 0; e < dim; ++e)
    sum += a[e] * b[e];
  return sum;
}

/// Calls f(t, e) for each column e = lane + 32 t below \p dim that lane
/// \p lane owns (its accumulator t).
template <typename F>
__device__ __forceinline__ void forLaneColumns(int lane, int64_t dim, F f) {
  for (int t = 0; t < kPerLane; ++t) {
    int e = lane + t * kWarp;
    if (e < dim)
      f(t, e);
  }
}

/// One row of a product with a staged tile: \p acc += sum_c (lane c's
/// \p p) tile[c], over the lane's columns below \p dim.
__device__ __forceinline__ void accumulateTile(float (&acc)[kPerLane], float p,
                                               const float *tile, int stride,
                                               int64_t dim, int lane) {
  for (int c = 0; c < kTile; ++c) {
    float pc = __shfl_sync(0xffffffffu, p, c);
    forLaneColumns(lane, dim,
                   [&](int t, int e) { acc[t] += pc * tile[c * stride + e]; });
  }
}

/// A thread of the query-row kernels (the forward and pass 1 of the
/// backward): a block takes kRows consecutive query rows of score matrix
/// n, warp w row i0 + w, and walks the key tiles of n's key/value matrix
/// that its rows may see.
struct QueryRowThread {
  /// The thread's warp (its row of the block) and lane.
  int warp, lane;
  /// The score matrix, the block's first row and this warp's row.
  int64_t n, i0, i;
  bool rowValid;
  /// The score matrix's K and V.
  MatrixLayout keys, values;
  /// Where its mask starts.
  int64_t maskBase;
  /// The key columns [0, visibleEnd) the block's rows may see.
  int64_t visibleEnd;

  __device__ explicit QueryRowThread(const AttentionGeometry &g)
      : warp(threadIdx.x / kWarp), lane(threadIdx.x % kWarp) {
    int64_t blocks = rowBlocks(g.seqQ);
    n = blockIdx.x / blocks;
    i0 = (blockIdx.x % blocks) * kRows;
    i = i0 + warp;
    rowValid = i < g.seqQ;
    int64_t kv = attentionKvIndex(g, n);
    keys = keyMatrix(g, kv);
    values = denseMatrix(kv, g.seqK, g.valueDim);
    maskBase = maskStart(g, n);
    int64_t rows = g.seqQ - i0 < kRows ? g.seqQ - i0 : kRows;
    visibleEnd = attentionVisibleEnd(g, i0, rows);
  }

  /// The block stages keys [j0, j0 + kTile) of K and V, between barriers.
  template <typename T>
  __device__ void stageKeys(const T *k, const T *v, int64_t j0, float *ks,
                            int kStride, float *vs, int vStride) const {
    __syncthreads();
    stageTile(k, keys, j0, ks, kStride);
    stageTile(v, values, j0, vs, vStride);
    __syncthreads();
  }
};

/// The kernels, by how they carve their shared memory.
enum class AttentionPass { Forward, GradQuery, GradKey };

/// A kernel's dynamic shared memory, in floats from its start: a tile of
/// kTile rows of headDim floats at headStride (padded by one, so lanes
/// reading across rows hit distinct banks), one of valueDim floats at
/// valueStride (padded in the backward, which reads it across rows too),
/// each warp's own row of headDim and, in the backward, of valueDim
/// floats, and the key pass's kTile log-sum-exps and D values.
struct SharedLayout {
  /// The tiles' row strides in floats.
  int headStride, valueStride;
  /// Where the value tile, the rows of headDim, the rows of valueDim and
  /// the log-sum-exps start; the floats in all.
  int64_t valueTile, headRows, valueRows, tileLse, floats;

  __host__ __device__ SharedLayout(const AttentionGeometry &g,
                                   AttentionPass pass) {
    bool backward = pass != AttentionPass::Forward;
    headStride = static_cast<int>(g.headDim) + 1;
    valueStride = static_cast<int>(g.valueDim) + (backward ? 1 : 0);
    valueTile = kTile * headStride;
    headRows = valueTile + kTile * valueStride;
    valueRows = headRows + kRows * g.headDim;
    tileLse = valueRows + (backward ? kRows * g.valueDim : 0);
    floats = tileLse + (pass == AttentionPass::GradKey ? 2 * kTile : 0);
  }
  __host__ __device__ size_t bytes() const { return sizeof(float) * floats; }
};

template <typename T>
__global__ void __launch_bounds__(kRows *kWarp)
    attentionForwardKernel(AttentionGeometry g, const T *q, const T *k,
                           const T *v, const void *mask, DropoutParams dropout,
                           T *out, float *lse) {
  extern __shared__ float shared[];
  SharedLayout layout(g, AttentionPass::Forward);
  int kStride = layout.headStride, vStride = layout.valueStride;
  float *ks = shared, *vs = shared + layout.valueTile;
  float *qs = shared + layout.headRows;
  QueryRowThread thread(g);
  DropoutDraw draw(dropout);
  int64_t n = thread.n, i = thread.i;
  int lane = thread.lane;
  float *qRow = qs + thread.warp * g.headDim;
  loadRow(q, denseMatrix(n, g.seqQ, g.headDim), i, thread.rowValid, qRow, lane);
  float acc[kPerLane] = {};
  float rowMax = -INFINITY, rowSum = 0.0f;
  int64_t end = thread.visibleEnd;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    thread.stageKeys(k, v, j0, ks, kStride, vs, vStride);
    if (!thread.rowValid)
      continue;
    int64_t j = j0 + lane;
    float dot = dotShared(qRow, ks + lane * kStride, g.headDim);
    float s = j < end ? maskedScore<T>(g, mask, thread.maskBase, i, j, dot)
                      : -INFINITY;
    float newMax = fmaxf(rowMax, warpMax(s));
    float shift = expShift(newMax);
    float rescale = expf(rowMax - shift);
    float p = expf(s - shift);
    rowSum = rowSum * rescale + warpSum(p);
    rowMax = newMax;
    // The normalizer sums the undropped probabilities; only the product
    // with V sees the dropped ones.
    if (j < end)
      p *= draw.factor(g, n, i, j);
    for (int t = 0; t < kPerLane; ++t)
      acc[t] *= rescale;
    accumulateTile(acc, p, vs, vStride, g.valueDim, lane);
  }
  if (!thread.rowValid)
    return;
  MatrixLayout outRows = denseMatrix(n, g.seqQ, g.valueDim);
  forLaneColumns(lane, g.valueDim, [&](int t, int e) {
    storeFromFloat(out, outRows.at(i, e), acc[t] / rowSum);
  });
  if (lse && lane == 0)
    lse[n * g.seqQ + i] = expShift(rowMax) + logf(rowSum);
}

/// Pass 1 of the backward: D_i = dO_i . O_i and dQ, one warp a query row.
template <typename T>
__global__ void __launch_bounds__(kRows *kWarp)
    attentionGradQueryKernel(AttentionGeometry g, const T *dO, const T *q,
                             const T *k, const T *v, const T *o,
                             const float *lse, const void *mask,
                             DropoutParams dropout, float *rowDot, T *dQ) {
  extern __shared__ float shared[];
  SharedLayout layout(g, AttentionPass::GradQuery);
  int kStride = layout.headStride, vStride = layout.valueStride;
  float *ks = shared, *vs = shared + layout.valueTile;
  float *qs = shared + layout.headRows, *dos = shared + layout.valueRows;
  QueryRowThread thread(g);
  DropoutDraw draw(dropout);
  int64_t n = thread.n, i = thread.i;
  int lane = thread.lane;
  bool rowValid = thread.rowValid;
  int64_t row = n * g.seqQ + i;
  MatrixLayout queryRows = denseMatrix(n, g.seqQ, g.headDim);
  MatrixLayout outputRows = denseMatrix(n, g.seqQ, g.valueDim);
  float *qRow = qs + thread.warp * g.headDim;
  float *dORow = dos + thread.warp * g.valueDim;
  loadRow(q, queryRows, i, rowValid, qRow, lane);
  loadRow(dO, outputRows, i, rowValid, dORow, lane);
  float dot = 0.0f;
  if (rowValid)
    for (int e = lane; e < g.valueDim; e += kWarp)
      dot += dORow[e] * loadAsFloat(o, outputRows.at(i, e));
  float rowD = warpSum(dot);
  if (rowValid && lane == 0)
    rowDot[row] = rowD;
  float shift = expShift(rowValid ? lse[row] : 0.0f);
  float acc[kPerLane] = {};
  int64_t end = thread.visibleEnd;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    thread.stageKeys(k, v, j0, ks, kStride, vs, vStride);
    if (!rowValid)
      continue;
    int64_t j = j0 + lane;
    float qk = dotShared(qRow, ks + lane * kStride, g.headDim);
    float dov = dotShared(dORow, vs + lane * vStride, g.valueDim);
    float ds = 0.0f;
    if (j < end) {
      float s = maskedScore<T>(g, mask, thread.maskBase, i, j, qk);
      float p = expf(s - shift);
      float gradient = dov * draw.factor(g, n, i, j);
      ds = p * (gradient - rowD);
    }
    accumulateTile(acc, ds, ks, kStride, g.headDim, lane);
  }
  if (!rowValid)
    return;
  forLaneColumns(lane, g.headDim, [&](int t, int e) {
    storeFromFloat(dQ, queryRows.at(i, e), acc[t] * g.scale);
  });
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
  SharedLayout layout(g, AttentionPass::GradKey);
  int qStride = layout.headStride, dOStride = layout.valueStride;
  float *qs = shared, *dos = shared + layout.valueTile;
  float *keyRowsShared = shared + layout.headRows;
  float *vRows = shared + layout.valueRows;
  float *tileLse = shared + layout.tileLse, *tileD = tileLse + kTile;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t keyBlocks = rowBlocks(g.seqK);
  int64_t kv = blockIdx.x / keyBlocks;
  int64_t firstKey = (blockIdx.x % keyBlocks) * kRows;
  int64_t j = firstKey + warp;
  bool keyValid = j < g.seqK;
  int64_t group = g.heads / g.kvHeads;
  int64_t b = kv / g.kvHeads, hk = kv % g.kvHeads;
  MatrixLayout keys = keyMatrix(g, kv);
  MatrixLayout values = denseMatrix(kv, g.seqK, g.valueDim);
  DropoutDraw draw(dropout);
  float *kRow = keyRowsShared + warp * g.headDim;
  float *vRow = vRows + warp * g.valueDim;
  loadRow(k, keys, j, keyValid, kRow, lane);
  loadRow(v, values, j, keyValid, vRow, lane);
  float dKAcc[kPerLane] = {}, dVAcc[kPerLane] = {};
  // Causality: rows before firstKey - (sk - sq) see none of these keys.
  int64_t firstRow = 0;
  if (g.causal) {
    firstRow = firstKey - (g.seqK - g.seqQ);
    firstRow = firstRow < 0 ? 0 : firstRow / kTile * kTile;
  }
  for (int64_t hq = 0; hq < group; ++hq) {
    int64_t n = b * g.heads + hk * group + hq;
    int64_t base = maskStart(g, n);
    MatrixLayout queryRows = denseMatrix(n, g.seqQ, g.headDim);
    MatrixLayout outputRows = denseMatrix(n, g.seqQ, g.valueDim);
    for (int64_t i0 = firstRow; i0 < g.seqQ; i0 += kTile) {
      __syncthreads();
      stageTile(q, queryRows, i0, qs, qStride);
      stageTile(dO, outputRows, i0, dos, dOStride);
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
        float qk = dotShared(qs + lane * qStride, kRow, g.headDim);
        float dov = dotShared(dos + lane * dOStride, vRow, g.valueDim);
        float s = maskedScore<T>(g, mask, base, i, j, qk);
        float p = expf(s - expShift(tileLse[lane]));
        float factor = draw.factor(g, n, i, j);
        pd = p * factor;
        ds = p * (dov * factor - tileD[lane]);
      }
      accumulateTile(dVAcc, pd, dos, dOStride, g.valueDim, lane);
      accumulateTile(dKAcc, ds, qs, qStride, g.headDim, lane);
    }
  }
  if (!keyValid)
    return;
  forLaneColumns(lane, g.valueDim, [&](int t, int e) {
    storeFromFloat(dV, values.at(j, e), dVAcc[t]);
  });
  forLaneColumns(lane, g.headDim, [&](int t, int e) {
    storeFromFloat(dK, keys.at(j, e), dKAcc[t] * g.scale);
  });
}

bool fitsKernels(const AttentionGeometry &g) {
  return g.headDim > 0 && g.headDim <= kAttentionMaxHeadDim && g.valueDim > 0 &&
         g.valueDim <= kAttentionMaxHeadDim && g.kvHeads > 0 &&
         g.heads % g.kvHeads == 0;
}

/// Launches \p kernel on \p blocks blocks of kRows warps with \p bytes of
/// dynamic shared memory (opting in where that is more than the default
/// 48 KiB).
template <typename... Params, typename... Args>
cudaError_t launchRowBlocks(void (*kernel)(Params...), int64_t blocks,
                            size_t bytes, cudaStream_t stream, Args... args) {
  if (bytes > 48 * 1024)
    if (cudaError_t status = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
            static_cast<int>(bytes)))
      return status;
  kernel<<<static_cast<unsigned>(blocks), kRows * kWarp, bytes, stream>>>(
      args...);
  return cudaGetLastError();
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
  size_t bytes = SharedLayout(g, AttentionPass::Forward).bytes();
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    return launchRowBlocks(
        attentionForwardKernel<T>, g.batch * rowBlocks(g.seqQ), bytes, stream,
        g, static_cast<const T *>(q), static_cast<const T *>(k),
        static_cast<const T *>(v), mask, dropout, static_cast<T *>(out), lse);
  });
  return cudaErrorInvalidValue;
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
  int64_t kvMatrices = g.batch / (g.heads / g.kvHeads);
  size_t queryBytes = SharedLayout(g, AttentionPass::GradQuery).bytes();
  size_t keyBytes = SharedLayout(g, AttentionPass::GradKey).bytes();
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    if (g.seqQ > 0)
      if (cudaError_t status = launchRowBlocks(
              attentionGradQueryKernel<T>, g.batch * rowBlocks(g.seqQ),
              queryBytes, stream, g, static_cast<const T *>(dO),
              static_cast<const T *>(q), static_cast<const T *>(k),
              static_cast<const T *>(v), static_cast<const T *>(o), lse, mask,
              dropout, rowDot, static_cast<T *>(dQ)))
        return status;
    if (g.seqK > 0)
      if (cudaError_t status = launchRowBlocks(
              attentionGradKeyKernel<T>, kvMatrices * rowBlocks(g.seqK),
              keyBytes, stream, g, static_cast<const T *>(dO),
              static_cast<const T *>(q), static_cast<const T *>(k),
              static_cast<const T *>(v), lse, mask, dropout, rowDot,
              static_cast<T *>(dK), static_cast<T *>(dV)))
        return status;
  });
  return cudaGetLastError();
}
