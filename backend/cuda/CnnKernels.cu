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
// against the CPU kernels.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"

using namespace gmopt::cuda;

namespace {

constexpr int kThreads = 256;

unsigned gridFor(int64_t elements) {
  int64_t blocks = (elements + kThreads - 1) / kThreads;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

__global__ void maxPoolKernel(const float *x, float *y, int64_t *indices,
                              WindowParams g) {
  int64_t total = g.planes() * g.outSize();
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = o / g.outSize(), within = o % g.outSize();
    float best;
    int64_t position;
    maxPoolElement(x + p * g.inSize(), g, within / g.outW, within % g.outW,
                   best, position);
    y[o] = best;
    if (indices)
      indices[o] = p * g.inSize() + position;
  }
}

__global__ void averagePoolKernel(const float *x, float *y, WindowParams g) {
  int64_t total = g.planes() * g.outSize();
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = o / g.outSize(), within = o % g.outSize();
    y[o] = averagePoolElement(x + p * g.inSize(), g, within / g.outW,
                              within % g.outW);
  }
}

__global__ void averagePoolGradKernel(const float *dy, float *dx,
                                      WindowParams g) {
  int64_t total = g.planes() * g.inSize();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = i / g.inSize(), within = i % g.inSize();
    dx[i] = averagePoolGradElement(dy + p * g.outSize(), g, within / g.inW,
                                   within % g.inW);
  }
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

cudaError_t gmopt::cuda::launchMaxPool(const float *x, float *y,
                                       int64_t *indices, const WindowParams &g,
                                       cudaStream_t stream) {
  int64_t total = g.planes() * g.outSize();
  if (total)
    maxPoolKernel<<<gridFor(total), kThreads, 0, stream>>>(x, y, indices, g);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchAveragePool(const float *x, float *y,
                                           const WindowParams &g,
                                           cudaStream_t stream) {
  int64_t total = g.planes() * g.outSize();
  if (total)
    averagePoolKernel<<<gridFor(total), kThreads, 0, stream>>>(x, y, g);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchAveragePoolGrad(const float *dy, float *dx,
                                               const WindowParams &g,
                                               cudaStream_t stream) {
  int64_t total = g.planes() * g.inSize();
  if (total)
    averagePoolGradKernel<<<gridFor(total), kThreads, 0, stream>>>(dy, dx, g);
  return cudaGetLastError();
}

cudaError_t
gmopt::cuda::launchBatchNormStats(const BatchNormStatsParams &params,
                                  cudaStream_t stream) {
  if (params.channels)
    batchNormStatsKernel<<<gridFor(params.channels), kThreads, 0, stream>>>(
        params);
  return cudaGetLastError();
}
