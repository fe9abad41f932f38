//===- CrossEntropyKernels.cu - Fused linear cross entropy on CUDA -*- C++ -*-//
//
// gmopt.FusedLinearCrossEntropy and its gradient on CUDA (FusedKernels.h,
// docs/fused-cross-entropy.md), block by block over the vocabulary as the
// CPU kernel (backend/cpu/CrossEntropyKernels.cpp) walks it, holding one
// fp32 [N, block] logits tile in the node's scratch (FusedScratch.h):
//
//  - forward: per block, tile = h W_b^T (or h W_b), then one warp per row
//    updates the running maximum and rescaled sum and picks the label's
//    logit; a last one-block kernel writes lse = max + log(sum), the
//    per-row losses or their sum / mean (in double), and raises
//    LabelOutOfRange for a label outside the vocabulary;
//  - backward: one block computes each row's factor (dloss, the mean's
//    1 / counted, 0 for ignored rows); per block the tile is recomputed,
//    turned into (softmax - onehot) * factor in place, dh (+)= G_b W_b
//    (into an fp32 accumulator for 16-bit h, rounded once at the end) and
//    dW_b = G_b^T h is written once.
//
// The products are one tiled kernel over strided operands (both W layouts,
// transposes as strides, 16-bit operands read as fp32, fp32 accumulation):
// 32 x 32 output tiles, 32-deep shared-memory slices of A and B.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/FusedKernels.h"
#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/WarpRowSupport.h"

#include <cmath>
#include <type_traits>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kGemmTile = 32;
constexpr int kGemmRowsPerThread = 4;
constexpr int kRowThreads = 256;
constexpr int kReduceThreads = 1024;

/// C[i * ldc + j] = sum_k A(i, k) B(k, j) (+ C when \p accumulate), A(i, k)
/// at a[i * aRow + k * aCol], B(k, j) at b[k * bRow + j * bCol].
template <typename TA, typename TB, typename TC>
__global__ void __launch_bounds__(kGemmTile *(kGemmTile / kGemmRowsPerThread))
    stridedGemmKernel(int64_t m, int64_t n, int64_t depth, const TA *a,
                      int64_t aRow, int64_t aCol, const TB *b, int64_t bRow,
                      int64_t bCol, TC *c, int64_t ldc, bool accumulate) {
  __shared__ float as[kGemmTile][kGemmTile + 1];
  __shared__ float bs[kGemmTile][kGemmTile + 1];
  constexpr int kStep = kGemmTile / kGemmRowsPerThread;
  int tx = threadIdx.x % kGemmTile, ty = threadIdx.x / kGemmTile;
  int64_t row0 = static_cast<int64_t>(blockIdx.y) * kGemmTile;
  int64_t col0 = static_cast<int64_t>(blockIdx.x) * kGemmTile;
  float acc[kGemmRowsPerThread] = {};
  for (int64_t k0 = 0; k0 < depth; k0 += kGemmTile) {
    for (int r = ty; r < kGemmTile; r += kStep) {
      int64_t i = row0 + r, k = k0 + tx;
      as[r][tx] = i < m && k < depth ? loadAsFloat(a, i * aRow + k * aCol) : 0;
      int64_t kk = k0 + r, j = col0 + tx;
      bs[r][tx] =
          kk < depth && j < n ? loadAsFloat(b, kk * bRow + j * bCol) : 0;
    }
    __syncthreads();
    for (int kk = 0; kk < kGemmTile; ++kk) {
      float bv = bs[kk][tx];
      for (int q = 0; q < kGemmRowsPerThread; ++q)
        acc[q] += as[ty + q * kStep][kk] * bv;
    }
    __syncthreads();
  }
  int64_t j = col0 + tx;
  if (j >= n)
    return;
  for (int q = 0; q < kGemmRowsPerThread; ++q) {
    int64_t i = row0 + ty + q * kStep;
    if (i >= m)
      continue;
    float value = acc[q];
    if (accumulate)
      value += loadAsFloat(c, i * ldc + j);
    storeFromFloat(c, i * ldc + j, value);
  }
}

template <typename TA, typename TB, typename TC>
cudaError_t stridedGemm(int64_t m, int64_t n, int64_t depth, const TA *a,
                        int64_t aRow, int64_t aCol, const TB *b, int64_t bRow,
                        int64_t bCol, TC *c, int64_t ldc, bool accumulate,
                        cudaStream_t stream) {
  if (m == 0 || n == 0)
    return cudaSuccess;
  dim3 grid(static_cast<unsigned>((n + kGemmTile - 1) / kGemmTile),
            static_cast<unsigned>((m + kGemmTile - 1) / kGemmTile));
  stridedGemmKernel<<<grid, kGemmTile *(kGemmTile / kGemmRowsPerThread), 0,
                      stream>>>(m, n, depth, a, aRow, aCol, b, bRow, bCol, c,
                                ldc, accumulate);
  return cudaGetLastError();
}

__device__ __forceinline__ bool isIgnored(const CrossEntropyGeometry &g,
                                          int64_t label) {
  return g.hasIgnoreIndex && label == g.ignoreIndex;
}

/// The logits of vocabulary block [b0, b0 + bc) into the tile.
template <typename T>
cudaError_t blockLogits(const CrossEntropyGeometry &g, const T *h, const T *w,
                        int64_t b0, int64_t bc, float *tile,
                        cudaStream_t stream) {
  int64_t d = g.hidden;
  if (g.transW)
    return stridedGemm(g.rows, bc, d, h, d, int64_t(1), w + b0 * d, int64_t(1),
                       d, tile, g.blockColumns, false, stream);
  return stridedGemm(g.rows, bc, d, h, d, int64_t(1), w + b0, g.vocab,
                     int64_t(1), tile, g.blockColumns, false, stream);
}

__global__ void initRowsKernel(int64_t rows, float *rowMax, float *rowSum,
                               float *target) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    rowMax[r] = -INFINITY;
    rowSum[r] = 0;
    target[r] = 0;
  }
}

/// One warp per row: the running maximum and rescaled sum over the block's
/// logits, and the label's logit when it falls in the block.
__global__ void onlineRowsKernel(CrossEntropyGeometry g, const float *tile,
                                 int64_t b0, int64_t bc, const void *labels,
                                 float *rowMax, float *rowSum, float *target) {
  int lane = threadIdx.x % kWarp;
  int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (r >= g.rows)
    return;
  const float *row = tile + r * g.blockColumns;
  float best = -INFINITY;
  for (int64_t c = lane; c < bc; c += kWarp)
    best = fmaxf(best, row[c]);
  best = fmaxf(warpMax(best), rowMax[r]);
  float sum = 0;
  for (int64_t c = lane; c < bc; c += kWarp)
    sum += expf(row[c] - best);
  sum = warpSum(sum);
  if (lane != 0)
    return;
  // Rescale the running sum to the new maximum (none before block 0).
  float previous =
      rowMax[r] == -INFINITY ? 0.0f : rowSum[r] * expf(rowMax[r] - best);
  rowSum[r] = previous + sum;
  rowMax[r] = best;
  int64_t label = labelAt(labels, g.labels32, r);
  if (label >= b0 && label < b0 + bc)
    target[r] = row[label - b0];
}

/// One block: lse, the per-row losses or their reduction, and the label
/// check.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    finishLossKernel(CrossEntropyGeometry g, const void *labels,
                     const float *rowMax, const float *rowSum,
                     const float *target, float *lse, T *loss,
                     KernelFaultRecord *fault, const int32_t *launchId) {
  __shared__ double totals[kReduceThreads];
  __shared__ int64_t counts[kReduceThreads];
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = threadIdx.x; r < g.rows; r += blockDim.x) {
    lse[r] = rowMax[r] + logf(rowSum[r]);
    int64_t label = labelAt(labels, g.labels32, r);
    double value = 0;
    if (!isIgnored(g, label)) {
      if (label < 0 || label >= g.vocab) {
        if (atomicCAS(&fault->code, 0,
                      static_cast<int32_t>(KernelFault::LabelOutOfRange)) == 0)
          fault->launchId = *launchId;
      }
      // The row's loss from the unrounded log-sum-exp.
      value = static_cast<double>(rowMax[r]) +
              log(static_cast<double>(rowSum[r])) -
              static_cast<double>(target[r]);
      ++counted;
    }
    if (g.reduction == CrossEntropyReduction::None)
      storeFromFloat(loss, r, static_cast<float>(value));
    total += value;
  }
  totals[threadIdx.x] = total;
  counts[threadIdx.x] = counted;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      totals[threadIdx.x] += totals[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0 || g.reduction == CrossEntropyReduction::None)
    return;
  double result = totals[0];
  // A mean over no counted row is 0/0 = NaN, as the unfused loss.
  if (g.reduction == CrossEntropyReduction::Mean)
    result /= static_cast<double>(counts[0]);
  storeFromFloat(loss, 0, static_cast<float>(result));
}

/// One block: factor[r] = d loss / d loss_r (0 for ignored rows).
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    rowFactorsKernel(CrossEntropyGeometry g, const T *dLoss, const void *labels,
                     float *factor) {
  __shared__ int64_t counts[kReduceThreads];
  int64_t counted = 0;
  for (int64_t r = threadIdx.x; r < g.rows; r += blockDim.x)
    counted += !isIgnored(g, labelAt(labels, g.labels32, r));
  counts[threadIdx.x] = counted;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  double meanScale = g.reduction == CrossEntropyReduction::Mean
                         ? 1.0 / static_cast<double>(counts[0])
                         : 1.0;
  for (int64_t r = threadIdx.x; r < g.rows; r += blockDim.x) {
    bool ignored = isIgnored(g, labelAt(labels, g.labels32, r));
    double value = g.reduction == CrossEntropyReduction::None
                       ? static_cast<double>(loadAsFloat(dLoss, r))
                       : static_cast<double>(loadAsFloat(dLoss, 0)) * meanScale;
    factor[r] = ignored ? 0.0f : static_cast<float>(value);
  }
}

/// One warp per row: the tile becomes (softmax - onehot(label)) * factor.
__global__ void gradientRowsKernel(CrossEntropyGeometry g, float *tile,
                                   int64_t b0, int64_t bc, const void *labels,
                                   const float *lse, const float *factor) {
  int lane = threadIdx.x % kWarp;
  int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (r >= g.rows)
    return;
  float *row = tile + r * g.blockColumns;
  float f = factor[r], shift = lse[r];
  int64_t label = labelAt(labels, g.labels32, r);
  for (int64_t c = lane; c < bc; c += kWarp) {
    float value = f == 0.0f ? 0.0f : expf(row[c] - shift) * f;
    if (f != 0.0f && b0 + c == label)
      value -= f;
    row[c] = value;
  }
}

template <typename T>
__global__ void roundKernel(const float *from, T *to, int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    storeFromFloat(to, i, from[i]);
}

unsigned warpRowBlocks(int64_t rows) {
  int64_t perBlock = kRowThreads / kWarp;
  return static_cast<unsigned>((rows + perBlock - 1) / perBlock);
}

template <typename T>
cudaError_t forwardTyped(const CrossEntropyGeometry &g, const T *h, const T *w,
                         const void *labels, T *loss, float *lse,
                         float *scratch, cudaStream_t stream) {
  int64_t n = g.rows;
  float *tile = scratch;
  float *rowMax = tile + n * g.blockColumns;
  float *rowSum = rowMax + n, *target = rowSum + n;
  KernelFaultRecord *fault = nullptr;
  const int32_t *launchId = nullptr;
  if (cudaError_t status = getKernelFaultWord(&fault, &launchId))
    return status;
  if (n > 0) {
    initRowsKernel<<<gridFor(n), kThreads, 0, stream>>>(n, rowMax, rowSum,
                                                        target);
    for (int64_t b0 = 0; b0 < g.vocab; b0 += g.blockColumns) {
      int64_t bc =
          g.vocab - b0 < g.blockColumns ? g.vocab - b0 : g.blockColumns;
      if (cudaError_t status = blockLogits(g, h, w, b0, bc, tile, stream))
        return status;
      onlineRowsKernel<<<warpRowBlocks(n), kRowThreads, 0, stream>>>(
          g, tile, b0, bc, labels, rowMax, rowSum, target);
    }
  }
  finishLossKernel<<<1, kReduceThreads, 0, stream>>>(
      g, labels, rowMax, rowSum, target, lse, loss, fault, launchId);
  return cudaGetLastError();
}

template <typename T>
cudaError_t backwardTyped(const CrossEntropyGeometry &g, const T *dLoss,
                          const T *h, const T *w, const void *labels,
                          const float *lse, T *dh, T *dw, float *scratch,
                          cudaStream_t stream) {
  int64_t n = g.rows, d = g.hidden, v = g.vocab;
  float *tile = scratch;
  float *factor = tile + n * g.blockColumns;
  // fp32 dh accumulates in place; 16-bit dh in fp32 scratch, rounded once.
  constexpr bool kSixteenBit = !std::is_same<T, float>::value;
  float *dhAcc = kSixteenBit ? factor + n : reinterpret_cast<float *>(dh);
  if (n == 0)
    return cudaMemsetAsync(dw, 0, sizeof(T) * v * d, stream);
  rowFactorsKernel<<<1, kReduceThreads, 0, stream>>>(g, dLoss, labels, factor);
  for (int64_t b0 = 0; b0 < v; b0 += g.blockColumns) {
    int64_t bc = v - b0 < g.blockColumns ? v - b0 : g.blockColumns;
    if (cudaError_t status = blockLogits(g, h, w, b0, bc, tile, stream))
      return status;
    gradientRowsKernel<<<warpRowBlocks(n), kRowThreads, 0, stream>>>(
        g, tile, b0, bc, labels, lse, factor);
    bool accumulate = b0 != 0;
    cudaError_t status = cudaSuccess;
    if (g.transW) {
      // dh (+)= G_b W_b with W_b [bc, D]; dW_b [bc, D] = G_b^T h.
      status = stridedGemm(n, d, bc, static_cast<const float *>(tile),
                           g.blockColumns, int64_t(1), w + b0 * d, d,
                           int64_t(1), dhAcc, d, accumulate, stream);
      if (!status)
        status = stridedGemm(bc, d, n, static_cast<const float *>(tile),
                             int64_t(1), g.blockColumns, h, d, int64_t(1),
                             dw + b0 * d, d, false, stream);
    } else {
      // W [D, V]: dh (+)= G_b W_b^T; dW[:, b0 + c] = h^T G_b.
      status = stridedGemm(n, d, bc, static_cast<const float *>(tile),
                           g.blockColumns, int64_t(1), w + b0, int64_t(1), v,
                           dhAcc, d, accumulate, stream);
      if (!status)
        status = stridedGemm(d, bc, n, h, int64_t(1), d,
                             static_cast<const float *>(tile), g.blockColumns,
                             int64_t(1), dw + b0, v, false, stream);
    }
    if (status)
      return status;
  }
  if (kSixteenBit)
    roundKernel<<<gridFor(n * d), kThreads, 0, stream>>>(dhAcc, dh, n * d);
  return cudaGetLastError();
}

bool fitsKernels(const CrossEntropyGeometry &g) {
  return g.rows >= 0 && g.hidden >= 0 && g.vocab > 0 && g.blockColumns > 0;
}

} // namespace

cudaError_t gmopt::cuda::launchFusedCrossEntropy(Storage storage,
                                                 const CrossEntropyGeometry &g,
                                                 const void *h, const void *w,
                                                 const void *labels, void *loss,
                                                 float *lse, float *scratch,
                                                 cudaStream_t stream) {
  if (!fitsKernels(g) || (g.rows && !scratch))
    return cudaErrorInvalidValue;
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    return forwardTyped(g, static_cast<const T *>(h), static_cast<const T *>(w),
                        labels, static_cast<T *>(loss), lse, scratch, stream);
  });
  return cudaErrorInvalidValue;
}

cudaError_t gmopt::cuda::launchFusedCrossEntropyGrad(
    Storage storage, const CrossEntropyGeometry &g, const void *dLoss,
    const void *h, const void *w, const void *labels, const float *lse,
    void *dh, void *dw, float *scratch, cudaStream_t stream) {
  if (!fitsKernels(g) || (g.rows && !scratch))
    return cudaErrorInvalidValue;
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    return backwardTyped(g, static_cast<const T *>(dLoss),
                         static_cast<const T *>(h), static_cast<const T *>(w),
                         labels, lse, static_cast<T *>(dh),
                         static_cast<T *>(dw), scratch, stream);
  });
  return cudaErrorInvalidValue;
}
