//===- CnnKernels.cu - Pooling and batch-norm statistics on CUDA ----------===//
//
// The CNN kernels that are gmopt's own rather than cuDNN's: MaxPool (with
// the Indices output MaxPoolGrad needs, which cuDNN's pooling does not
// produce), AveragePool and AveragePoolGrad (cuDNN's pooling descriptors
// have no dilations and only symmetric pads, and its backward pass needs
// the forward input and output that AveragePoolGrad does not get), and the
// per-channel running / saved statistics of batch norm that ONNX defines
// differently from cuDNN (biased running variance, momentum on the old
// value). One thread per output element (per input element for the
// gradient), with the arithmetic of PoolMath.h, which the host tests check
// against the CPU kernels; the pools are templated on the element storage
// (fp32, f16, bf16), their arithmetic fp32. Also the 16-bit scatter-add of
// MaxPoolGrad and GatherGrad, a 16-bit convolution's bias and its
// gradient, and the explicit padding / cropping of a
// convolution with asymmetric pads (ConvPadMath.h), which copy elements as
// unsigned words.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/LaunchSupport.h"

#include <type_traits>

using namespace gmopt::cuda;

namespace {

#define FOR_EACH(i, n)                                                         \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

/// Runs fn(T{}) with the element type of float storage \p storage.
template <typename Fn> cudaError_t withFloatStorage(Storage storage, Fn &&fn) {
  switch (storage) {
  case Storage::F32:
    return fn(float{});
  case Storage::F16:
    return fn(HalfBits{});
  case Storage::BF16:
    return fn(BFloat16Bits{});
  default:
    return cudaErrorInvalidValue;
  }
}

template <typename T>
__global__ void maxPoolKernel(const T *x, T *y, int64_t *indices,
                              WindowParams g) {
  FOR_EACH(o, g.planes() * g.outSize()) {
    int64_t p = o / g.outSize(), within = o % g.outSize();
    float best;
    int64_t position;
    maxPoolElement(x + p * g.inSize(), g, within / g.outW, within % g.outW,
                   best, position);
    storeFromFloat(y, o, best);
    if (indices)
      indices[o] = p * g.inSize() + position;
  }
}

template <typename T>
__global__ void averagePoolKernel(const T *x, T *y, WindowParams g) {
  FOR_EACH(o, g.planes() * g.outSize()) {
    int64_t p = o / g.outSize(), within = o % g.outSize();
    storeFromFloat(y, o,
                   averagePoolElement(x + p * g.inSize(), g, within / g.outW,
                                      within % g.outW));
  }
}

template <typename T>
__global__ void averagePoolGradKernel(const T *dy, T *dx, WindowParams g) {
  FOR_EACH(i, g.planes() * g.inSize()) {
    int64_t p = i / g.inSize(), within = i % g.inSize();
    storeFromFloat(dx, i,
                   averagePoolGradElement(dy + p * g.outSize(), g,
                                          within / g.inW, within % g.inW));
  }
}

/// Where the 16-bit scatter records an index outside dX.
struct FaultSink {
  KernelFaultRecord *record;
  const int32_t *launchId;
};

__device__ void raiseIndexFault(const FaultSink &sink) {
  if (atomicCAS(&sink.record->code, 0,
                static_cast<int32_t>(KernelFault::IndexOutOfRange)) == 0)
    sink.record->launchId = *sink.launchId;
}

/// *target += value in 16-bit storage \p T: widened, added in fp32 and
/// rounded back, through compare-and-swap on the 16-bit word.
template <typename T> __device__ void atomicAdd16(T *target, float value) {
  auto *word = reinterpret_cast<unsigned short *>(target);
  unsigned short old = *word, assumed;
  do {
    assumed = old;
    T current{assumed};
    T next;
    storeFromFloat(&next, 0, loadAsFloat(&current, 0) + value);
    old = atomicCAS(word, assumed, next.bits);
  } while (old != assumed);
}

template <typename T> __global__ void zero16Kernel(T *p, int64_t n) {
  FOR_EACH(i, n) { p[i].bits = 0; }
}

__global__ void zeroFloatKernel(float *p, int64_t n) {
  FOR_EACH(i, n) { p[i] = 0.0f; }
}

template <typename T>
__global__ void scatterAdd16Kernel(const T *dy, const void *indices,
                                   bool indices32, T *dx, float *accumulator,
                                   ScatterRows rows, FaultSink sink) {
  FOR_EACH(element, rows.outer * rows.indexCount * rows.inner) {
    int64_t j = element % rows.inner;
    int64_t k = (element / rows.inner) % rows.indexCount;
    int64_t o = element / (rows.inner * rows.indexCount);
    int64_t index = indices32 ? static_cast<const int32_t *>(indices)[k]
                              : static_cast<const int64_t *>(indices)[k];
    if (index < 0)
      index += rows.axisExtent;
    if (index < 0 || index >= rows.axisExtent) {
      if (j == 0)
        raiseIndexFault(sink);
      continue;
    }
    int64_t target = (o * rows.axisExtent + index) * rows.inner + j;
    float value = loadAsFloat(dy, element);
    if (accumulator)
      atomicAdd(accumulator + target, value);
    else
      atomicAdd16(dx + target, value);
  }
}

template <typename T>
__global__ void roundIntoKernel(const float *accumulator, T *dx, int64_t n) {
  FOR_EACH(i, n) { storeFromFloat(dx, i, accumulator[i]); }
}

template <typename T>
__global__ void convBiasKernel(T *y, const T *bias, int64_t channels,
                               int64_t spatial, int64_t total) {
  FOR_EACH(i, total) {
    float b = loadAsFloat(bias, (i / spatial) % channels);
    storeFromFloat(y, i, loadAsFloat(y, i) + b);
  }
}

/// One block per channel: each thread sums a fixed stride of the channel's
/// elements, then the block adds the partial sums in a fixed tree.
template <typename T>
__global__ void convBiasGradKernel(const T *dy, T *db, int64_t batch,
                                   int64_t channels, int64_t spatial) {
  __shared__ float partial[kThreads];
  int64_t c = blockIdx.x;
  float sum = 0;
  for (int64_t k = threadIdx.x; k < batch * spatial; k += kThreads) {
    int64_t n = k / spatial, s = k % spatial;
    sum += loadAsFloat(dy, (n * channels + c) * spatial + s);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    storeFromFloat(db, c, partial[0]);
}

template <typename Word>
__global__ void convPadKernel(const Word *in, Word *out, ConvPadGeometry g) {
  FOR_EACH(i, g.paddedElements()) {
    int64_t source = padSourceIndex(g, i);
    out[i] = source < 0 ? Word(0) : in[source];
  }
}

template <typename Word>
__global__ void convCropKernel(const Word *in, Word *out, ConvPadGeometry g) {
  FOR_EACH(i, g.elements()) { out[i] = in[cropSourceIndex(g, i)]; }
}

__global__ void batchNormStatsKernel(BatchNormStatsParams s) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       c < s.channels; c += int64_t(gridDim.x) * blockDim.x) {
    double inMean = s.inputMean[c], inVar = s.inputVar[c];
    if (s.training) {
      double inv = s.batchInvStd[c];
      double var = 1.0 / (inv * inv) - s.epsilon;
      if (var < 0)
        var = 0;
      if (s.runningMean)
        s.runningMean[c] = static_cast<float>(
            inMean * s.momentum + s.batchMean[c] * (1.0 - s.momentum));
      if (s.runningVar)
        s.runningVar[c] =
            static_cast<float>(inVar * s.momentum + var * (1.0 - s.momentum));
      continue;
    }
    if (s.runningMean)
      s.runningMean[c] = static_cast<float>(inMean);
    if (s.runningVar)
      s.runningVar[c] = static_cast<float>(inVar);
    if (s.savedMean)
      s.savedMean[c] = static_cast<float>(inMean);
    if (s.savedInvStd)
      s.savedInvStd[c] = static_cast<float>(1.0 / sqrt(inVar + s.epsilon));
  }
}

} // namespace

cudaError_t gmopt::cuda::launchMaxPool(Storage storage, const void *x, void *y,
                                       int64_t *indices, const WindowParams &g,
                                       cudaStream_t stream) {
  int64_t total = g.planes() * g.outSize();
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if (total)
      maxPoolKernel<<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const T *>(x), static_cast<T *>(y), indices, g);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchAveragePool(Storage storage, const void *x,
                                           void *y, const WindowParams &g,
                                           cudaStream_t stream) {
  int64_t total = g.planes() * g.outSize();
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if (total)
      averagePoolKernel<<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const T *>(x), static_cast<T *>(y), g);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchAveragePoolGrad(Storage storage, const void *dy,
                                               void *dx, const WindowParams &g,
                                               cudaStream_t stream) {
  int64_t total = g.planes() * g.inSize();
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if (total)
      averagePoolGradKernel<<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const T *>(dy), static_cast<T *>(dx), g);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchScatterAdd16(Storage storage, const void *dy,
                                            const void *indices, bool indices32,
                                            void *dx, float *accumulator,
                                            const ScatterRows &rows,
                                            cudaStream_t stream) {
  if (storage != Storage::F16 && storage != Storage::BF16)
    return cudaErrorInvalidValue;
  FaultSink sink;
  if (cudaError_t status = getKernelFaultWord(&sink.record, &sink.launchId))
    return status;
  int64_t dxElements = rows.outer * rows.axisExtent * rows.inner;
  int64_t dyElements = rows.outer * rows.indexCount * rows.inner;
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if constexpr (!std::is_same_v<T, float>) {
      T *out = static_cast<T *>(dx);
      if (dxElements) {
        if (accumulator)
          zeroFloatKernel<<<gridFor(dxElements), kThreads, 0, stream>>>(
              accumulator, dxElements);
        else
          zero16Kernel<<<gridFor(dxElements), kThreads, 0, stream>>>(
              out, dxElements);
      }
      if (dyElements)
        scatterAdd16Kernel<<<gridFor(dyElements), kThreads, 0, stream>>>(
            static_cast<const T *>(dy), indices, indices32, out, accumulator,
            rows, sink);
      if (accumulator && dxElements)
        roundIntoKernel<<<gridFor(dxElements), kThreads, 0, stream>>>(
            accumulator, out, dxElements);
    }
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchConvBias16(Storage storage, void *y,
                                          const void *bias, int64_t batch,
                                          int64_t channels, int64_t spatial,
                                          cudaStream_t stream) {
  if (storage != Storage::F16 && storage != Storage::BF16)
    return cudaErrorInvalidValue;
  int64_t total = batch * channels * spatial;
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if (total)
      convBiasKernel<<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<T *>(y), static_cast<const T *>(bias), channels, spatial,
          total);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchConvBiasGrad16(Storage storage, const void *dy,
                                              void *db, int64_t batch,
                                              int64_t channels, int64_t spatial,
                                              cudaStream_t stream) {
  if (storage != Storage::F16 && storage != Storage::BF16)
    return cudaErrorInvalidValue;
  if (channels > INT32_MAX)
    return cudaErrorInvalidConfiguration;
  return withFloatStorage(storage, [&](auto element) {
    using T = decltype(element);
    if (channels)
      convBiasGradKernel<<<static_cast<unsigned>(channels), kThreads, 0,
                           stream>>>(static_cast<const T *>(dy),
                                     static_cast<T *>(db), batch, channels,
                                     spatial);
    return cudaGetLastError();
  });
}

namespace {

/// Runs fn(Word{}) with the unsigned word of \p bytes (2 or 4).
template <typename Fn> cudaError_t withWord(int64_t bytes, Fn &&fn) {
  if (bytes == 2)
    return fn(uint16_t{});
  if (bytes == 4)
    return fn(uint32_t{});
  return cudaErrorInvalidValue;
}

} // namespace

cudaError_t gmopt::cuda::launchConvPad(const void *in, void *out,
                                       int64_t elementBytes,
                                       const ConvPadGeometry &g,
                                       cudaStream_t stream) {
  return withWord(elementBytes, [&](auto word) {
    using Word = decltype(word);
    if (g.paddedElements())
      convPadKernel<<<gridFor(g.paddedElements()), kThreads, 0, stream>>>(
          static_cast<const Word *>(in), static_cast<Word *>(out), g);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchConvCrop(const void *in, void *out,
                                        int64_t elementBytes,
                                        const ConvPadGeometry &g,
                                        cudaStream_t stream) {
  return withWord(elementBytes, [&](auto word) {
    using Word = decltype(word);
    if (g.elements())
      convCropKernel<<<gridFor(g.elements()), kThreads, 0, stream>>>(
          static_cast<const Word *>(in), static_cast<Word *>(out), g);
    return cudaGetLastError();
  });
}

cudaError_t
gmopt::cuda::launchBatchNormStats(const BatchNormStatsParams &params,
                                  cudaStream_t stream) {
  if (params.channels)
    batchNormStatsKernel<<<gridFor(params.channels), kThreads, 0, stream>>>(
        params);
  return cudaGetLastError();
}
