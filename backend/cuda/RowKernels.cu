//===- RowKernels.cu - Softmax, norms and Gather on CUDA ------------------===//
//
// The CUDA kernels that reduce along one axis: Softmax/LogSoftmax and their
// gradients, LayerNormalization (and the RMS variant) and its gradient, and
// Gather/GatherGrad (the Reduce* family is in ReduceKernels.cu, the losses
// in LossKernels.cu). A tensor is seen as [outer, n, inner]; one warp owns
// one of the outer * inner rows and reduces with shuffles, statistics in
// double like the CPU kernels. Column sums (the layer-norm parameter
// gradients) are done by one thread per column in a fixed order, so those
// results are reproducible; GatherGrad uses fp32 atomics and is not.
// Indices that are out of range raise a device fault (CudaKernels.h; this
// file holds the fault word) and contribute nothing.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"

#include <cfloat>

using namespace gmopt::cuda;

namespace {

constexpr int kWarp = 32;
constexpr int kRowThreads = 256;
constexpr int kWarpsPerBlock = kRowThreads / kWarp;

__device__ KernelFaultRecord gFault;
__device__ int32_t gLaunchId;

__global__ void setLaunchIdKernel(int32_t launchId) { gLaunchId = launchId; }

__device__ void raiseFault(KernelFault code) {
  if (atomicCAS(&gFault.code, 0, static_cast<int32_t>(code)) == 0)
    gFault.launchId = gLaunchId;
}

template <Storage S> struct StorageType;
template <> struct StorageType<Storage::F32> { using type = float; };
template <> struct StorageType<Storage::F16> { using type = HalfBits; };
template <> struct StorageType<Storage::BF16> { using type = BFloat16Bits; };

__device__ __forceinline__ double warpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The first element of row \p row of \p shape, and its element stride.
__device__ __forceinline__ int64_t rowBase(const RowShape &shape, int64_t row) {
  return (row / shape.inner) * shape.n * shape.inner + row % shape.inner;
}

unsigned rowGrid(int64_t rows) {
  int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

/// Warp-per-row loop: calls body(row, lane) for every row.
#define FOR_EACH_WARP_ROW(rows)                                                \
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; \
       row < (rows); row += int64_t(gridDim.x) * blockDim.x / kWarp)

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void softmaxKernel(const T *x, T *y, RowShape shape, bool log) {
  int lane = threadIdx.x % kWarp;
  int64_t rows = shape.outer * shape.inner;
  FOR_EACH_WARP_ROW(rows) {
    int64_t base = rowBase(shape, row), step = shape.inner;
    float rowMax = -FLT_MAX;
    for (int64_t i = lane; i < shape.n; i += kWarp)
      rowMax = fmaxf(rowMax, loadAsFloat(x, base + i * step));
    rowMax = warpMax(rowMax);
    double sum = 0;
    for (int64_t i = lane; i < shape.n; i += kWarp)
      sum += ::expf(loadAsFloat(x, base + i * step) - rowMax);
    float rowSum = static_cast<float>(warpSum(sum));
    // Every lane has read the row before any writes it (y may alias x).
    __syncwarp();
    for (int64_t i = lane; i < shape.n; i += kWarp) {
      float v = loadAsFloat(x, base + i * step);
      storeFromFloat(y, base + i * step,
                     log ? logSoftmaxElement(v, rowMax, rowSum)
                         : softmaxElement(v, rowMax, rowSum));
    }
  }
}

template <typename T>
__global__ void softmaxGradKernel(const T *dy, const T *y, T *dx,
                                  RowShape shape, bool log) {
  int lane = threadIdx.x % kWarp;
  int64_t rows = shape.outer * shape.inner;
  FOR_EACH_WARP_ROW(rows) {
    int64_t base = rowBase(shape, row), step = shape.inner;
    double acc = 0;
    for (int64_t i = lane; i < shape.n; i += kWarp) {
      float g = loadAsFloat(dy, base + i * step);
      acc += log ? g : g * loadAsFloat(y, base + i * step);
    }
    float total = static_cast<float>(warpSum(acc));
    __syncwarp();
    for (int64_t i = lane; i < shape.n; i += kWarp) {
      int64_t k = base + i * step;
      float g = loadAsFloat(dy, k), v = loadAsFloat(y, k);
      storeFromFloat(dx, k,
                     log ? logSoftmaxGradElement(g, v, total)
                         : softmaxGradElement(g, v, total));
    }
  }
}

//===----------------------------------------------------------------------===//
// Layer normalization
//===----------------------------------------------------------------------===//

/// Element of a scale or bias repeating every \p period of a row's \p width
/// columns (ir/ops/NormRows.h's getParamPeriod) read by column \p j.
__device__ __forceinline__ int64_t periodic(int64_t j, int64_t period,
                                            int64_t width) {
  return period == width ? j : j % period;
}

template <typename T>
__global__ void
layerNormKernel(const T *x, const T *scale, const T *bias, T *y, float *meanOut,
                float *invOut, int64_t rows, int64_t width, int64_t scalePeriod,
                int64_t biasPeriod, float epsilon, bool simplified) {
  int lane = threadIdx.x % kWarp;
  FOR_EACH_WARP_ROW(rows) {
    const int64_t base = row * width;
    double mean = 0;
    if (!simplified) {
      double sum = 0;
      for (int64_t j = lane; j < width; j += kWarp)
        sum += loadAsFloat(x, base + j);
      mean = width ? warpSum(sum) / width : 0;
    }
    double squares = 0;
    for (int64_t j = lane; j < width; j += kWarp) {
      double d = loadAsFloat(x, base + j) - mean;
      squares += d * d;
    }
    squares = warpSum(squares);
    float m = static_cast<float>(mean);
    float inv = static_cast<float>(
        1.0 / ::sqrt((width ? squares / width : 0.0) + epsilon));
    __syncwarp();
    for (int64_t j = lane; j < width; j += kWarp)
      storeFromFloat(
          y, base + j,
          layerNormElement(
              loadAsFloat(x, base + j), m, inv,
              loadAsFloat(scale, periodic(j, scalePeriod, width)),
              bias ? loadAsFloat(bias, periodic(j, biasPeriod, width)) : 0.0f));
    if (lane == 0) {
      if (meanOut)
        meanOut[row] = m;
      if (invOut)
        invOut[row] = inv;
    }
  }
}

template <typename T>
__global__ void layerNormGradKernel(const T *dy, const T *x, const T *scale,
                                    const float *meanIn, const float *invIn,
                                    T *dx, int64_t rows, int64_t width,
                                    bool simplified) {
  int lane = threadIdx.x % kWarp;
  FOR_EACH_WARP_ROW(rows) {
    const int64_t base = row * width;
    float mu = meanIn && !simplified ? meanIn[row] : 0.0f, inv = invIn[row];
    double sumDyScale = 0, sumDyScaleXhat = 0;
    for (int64_t j = lane; j < width; j += kWarp) {
      float ds = loadAsFloat(dy, base + j) * loadAsFloat(scale, j);
      sumDyScale += ds;
      sumDyScaleXhat += ds * ((loadAsFloat(x, base + j) - mu) * inv);
    }
    float s1 = simplified ? 0.0f : static_cast<float>(warpSum(sumDyScale));
    float s2 = static_cast<float>(warpSum(sumDyScaleXhat));
    __syncwarp();
    for (int64_t j = lane; j < width; j += kWarp)
      storeFromFloat(dx, base + j,
                     layerNormGradElement(loadAsFloat(dy, base + j),
                                          loadAsFloat(x, base + j), mu, inv,
                                          loadAsFloat(scale, j), s1, s2,
                                          static_cast<float>(width)));
  }
}

/// dscale[j] = sum_r dy * xhat, dbias[j] = sum_r dy, one thread per column
/// in row order.
template <typename T>
__global__ void
layerNormParamGradKernel(const T *dy, const T *x, const float *meanIn,
                         const float *invIn, T *dscale, T *dbias, int64_t rows,
                         int64_t width, bool simplified) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < width;
       j += int64_t(gridDim.x) * blockDim.x) {
    double sumScale = 0, sumBias = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float g = loadAsFloat(dy, r * width + j);
      float mu = meanIn && !simplified ? meanIn[r] : 0.0f;
      sumScale += static_cast<double>(g) *
                  ((loadAsFloat(x, r * width + j) - mu) * invIn[r]);
      sumBias += g;
    }
    if (dscale)
      storeFromFloat(dscale, j, static_cast<float>(sumScale));
    if (dbias)
      storeFromFloat(dbias, j, static_cast<float>(sumBias));
  }
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

__device__ __forceinline__ int64_t indexAt(const void *indices, bool indices32,
                                           int64_t i, int64_t extent,
                                           bool &valid) {
  int64_t v = indices32 ? static_cast<const int32_t *>(indices)[i]
                        : static_cast<const int64_t *>(indices)[i];
  if (v < 0)
    v += extent;
  valid = v >= 0 && v < extent;
  return v;
}

__global__ void gatherKernel(const uint8_t *data, const void *indices,
                             bool indices32, uint8_t *out, int64_t outer,
                             int64_t axisExtent, int64_t indexCount,
                             int64_t inner, int64_t elementBytes) {
  int64_t total = outer * indexCount * inner * elementBytes;
  for (int64_t byte = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       byte < total; byte += int64_t(gridDim.x) * blockDim.x) {
    int64_t element = byte / elementBytes, within = byte % elementBytes;
    int64_t j = element % inner;
    int64_t k = (element / inner) % indexCount;
    int64_t o = element / (inner * indexCount);
    bool valid;
    int64_t index = indexAt(indices, indices32, k, axisExtent, valid);
    if (!valid) {
      if (j == 0 && within == 0)
        raiseFault(KernelFault::IndexOutOfRange);
      out[byte] = 0;
      continue;
    }
    out[byte] =
        data[((o * axisExtent + index) * inner + j) * elementBytes + within];
  }
}

__global__ void zeroKernel(float *p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = 0.0f;
}

__global__ void gatherGradKernel(const float *dy, const void *indices,
                                 bool indices32, float *dx, int64_t outer,
                                 int64_t axisExtent, int64_t indexCount,
                                 int64_t inner) {
  int64_t total = outer * indexCount * inner;
  for (int64_t element = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       element < total; element += int64_t(gridDim.x) * blockDim.x) {
    int64_t j = element % inner;
    int64_t k = (element / inner) % indexCount;
    int64_t o = element / (inner * indexCount);
    bool valid;
    int64_t index = indexAt(indices, indices32, k, axisExtent, valid);
    if (!valid) {
      if (j == 0)
        raiseFault(KernelFault::IndexOutOfRange);
      continue;
    }
    atomicAdd(dx + (o * axisExtent + index) * inner + j, dy[element]);
  }
}

unsigned flatGrid(int64_t elements) {
  int64_t blocks = (elements + kRowThreads - 1) / kRowThreads;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

} // namespace

cudaError_t gmopt::cuda::setKernelLaunchId(int32_t launchId,
                                           cudaStream_t stream) {
  // A kernel, not a copy from the host: the id travels as a kernel
  // argument, so a step captured in a CUDA graph keeps each launch's own id
  // (a copy would read a host address that is gone at replay).
  setLaunchIdKernel<<<1, 1, 0, stream>>>(launchId);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::readKernelFault(KernelFaultRecord &record,
                                         cudaStream_t stream) {
  cudaError_t status = cudaMemcpyFromSymbolAsync(
      &record, gFault, sizeof(record), 0, cudaMemcpyDeviceToHost, stream);
  if (status != cudaSuccess)
    return status;
  if ((status = cudaStreamSynchronize(stream)) != cudaSuccess)
    return status;
  if (record.code == 0)
    return cudaSuccess;
  KernelFaultRecord cleared;
  return cudaMemcpyToSymbolAsync(gFault, &cleared, sizeof(cleared), 0,
                                 cudaMemcpyHostToDevice, stream);
}

cudaError_t gmopt::cuda::getKernelFaultWord(KernelFaultRecord **record,
                                            const int32_t **launchId) {
  void *fault = nullptr, *id = nullptr;
  cudaError_t status = cudaGetSymbolAddress(&fault, gFault);
  if (status == cudaSuccess)
    status = cudaGetSymbolAddress(&id, gLaunchId);
  *record = static_cast<KernelFaultRecord *>(fault);
  *launchId = static_cast<const int32_t *>(id);
  return status;
}

cudaError_t gmopt::cuda::launchSoftmax(Storage storage, const void *x, void *y,
                                       RowShape shape, bool log,
                                       cudaStream_t stream) {
  unsigned grid = rowGrid(shape.outer * shape.inner);
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      softmaxKernel<<<grid, kRowThreads, 0, stream>>>(
          static_cast<const T *>(x), static_cast<T *>(y), shape, log));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchSoftmaxGrad(Storage storage, const void *dy,
                                           const void *y, void *dx,
                                           RowShape shape, bool log,
                                           cudaStream_t stream) {
  unsigned grid = rowGrid(shape.outer * shape.inner);
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      softmaxGradKernel<<<grid, kRowThreads, 0, stream>>>(
          static_cast<const T *>(dy), static_cast<const T *>(y),
          static_cast<T *>(dx), shape, log));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchLayerNorm(Storage storage, const void *x,
                                         const void *scale, const void *bias,
                                         void *y, float *mean, float *invStd,
                                         int64_t rows, int64_t width,
                                         int64_t scalePeriod,
                                         int64_t biasPeriod, float epsilon,
                                         bool simplified, cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  if (width != 0 && (scalePeriod < 1 || biasPeriod < 1 ||
                     width % scalePeriod != 0 || width % biasPeriod != 0))
    return cudaErrorInvalidValue;
  unsigned grid = rowGrid(rows);
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      layerNormKernel<<<grid, kRowThreads, 0, stream>>>(
          static_cast<const T *>(x), static_cast<const T *>(scale),
          static_cast<const T *>(bias), static_cast<T *>(y), mean, invStd, rows,
          width, scalePeriod, biasPeriod, epsilon, simplified));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchLayerNormGrad(
    Storage storage, const void *dy, const void *x, const void *scale,
    const float *mean, const float *invStd, void *dx, void *dscale, void *dbias,
    int64_t rows, int64_t width, bool simplified, cudaStream_t stream) {
  unsigned grid = rowGrid(rows);
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    // The column sums first: dx may be planned into dy's bytes.
    if (dscale || dbias)
      layerNormParamGradKernel<<<flatGrid(width), kRowThreads, 0, stream>>>(
          static_cast<const T *>(dy), static_cast<const T *>(x), mean, invStd,
          static_cast<T *>(dscale), static_cast<T *>(dbias), rows, width,
          simplified);
    if (rows)
      layerNormGradKernel<<<grid, kRowThreads, 0, stream>>>(
          static_cast<const T *>(dy), static_cast<const T *>(x),
          static_cast<const T *>(scale), mean, invStd, static_cast<T *>(dx),
          rows, width, simplified);
  });
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchGather(const void *data, const void *indices,
                                      bool indices32, void *out, int64_t outer,
                                      int64_t axisExtent, int64_t indexCount,
                                      int64_t inner, int64_t elementBytes,
                                      cudaStream_t stream) {
  int64_t total = outer * indexCount * inner * elementBytes;
  if (total == 0)
    return cudaSuccess;
  gatherKernel<<<flatGrid(total), kRowThreads, 0, stream>>>(
      static_cast<const uint8_t *>(data), indices, indices32,
      static_cast<uint8_t *>(out), outer, axisExtent, indexCount, inner,
      elementBytes);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchGatherGrad(const float *dy, const void *indices,
                                          bool indices32, float *dx,
                                          int64_t outer, int64_t axisExtent,
                                          int64_t indexCount, int64_t inner,
                                          cudaStream_t stream) {
  int64_t outElements = outer * axisExtent * inner;
  if (outElements)
    zeroKernel<<<flatGrid(outElements), kRowThreads, 0, stream>>>(dx,
                                                                  outElements);
  int64_t total = outer * indexCount * inner;
  if (total)
    gatherGradKernel<<<flatGrid(total), kRowThreads, 0, stream>>>(
        dy, indices, indices32, dx, outer, axisExtent, indexCount, inner);
  return cudaGetLastError();
}
