//===- LossKernels.cu - Cross entropy and NLL losses on CUDA --------------===//
//
// The loss kernels of LossKernels.h, their per-sample arithmetic that of
// LossMath.h. SoftmaxCrossEntropyLoss and its gradient give one warp to a
// sample (class counts reach the vocabulary size): the row maximum and the
// exp-sum (in double) are warp reductions. NegativeLogLikelihoodLoss picks
// one score per sample, and the older dense-label SoftmaxCrossEntropy walks
// its rows in class order: one thread per sample. Reduced losses are summed
// by one block, each thread a strided share of the samples in double,
// combined by a fixed tree, so they are reproducible. A label out of range
// raises the shared device fault (RowKernels.cu's word, reached through
// getKernelFaultWord).
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/LossKernels.h"
#include "backend/cuda/WarpRowSupport.h"

#include <cfloat>

using namespace gmopt::cuda;

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

/// Where a faulting kernel records its fault.
struct FaultSink {
  KernelFaultRecord *record;
  const int32_t *launchId;
};

__device__ void raiseLabelFault(const FaultSink &sink) {
  if (atomicCAS(&sink.record->code, 0,
                static_cast<int32_t>(KernelFault::LabelOutOfRange)) == 0)
    sink.record->launchId = *sink.launchId;
}

cudaError_t faultSink(FaultSink &sink) {
  return getKernelFaultWord(&sink.record, &sink.launchId);
}

/// Sums each thread's \p loss and \p weight over the block in a fixed tree;
/// thread 0 gets the totals.
__device__ void blockSums(double &loss, double &weight) {
  __shared__ double partialLoss[kThreads], partialWeight[kThreads];
  partialLoss[threadIdx.x] = loss;
  partialWeight[threadIdx.x] = weight;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      partialLoss[threadIdx.x] += partialLoss[threadIdx.x + width];
      partialWeight[threadIdx.x] += partialWeight[threadIdx.x + width];
    }
    __syncthreads();
  }
  loss = partialLoss[0];
  weight = partialWeight[0];
}

/// Offset of class 0 of sample \p s.
__device__ __forceinline__ int64_t sampleBase(const LabelLossParams &p,
                                              int64_t s) {
  return (s / p.inner) * p.rule.classes * p.inner + s % p.inner;
}

unsigned warpGrid(int64_t rows) {
  int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

unsigned threadGrid(int64_t elements) {
  int64_t blocks = (elements + kThreads - 1) / kThreads;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

/// Warp-per-row loop over `row`.
#define FOR_EACH_WARP_ROW(rows)                                                \
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; \
       row < (rows); row += int64_t(gridDim.x) * blockDim.x / kWarp)

/// Thread-per-element loop over `i`.
#define FOR_EACH_THREAD(count)                                                 \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;             \
       i < (count); i += int64_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// SoftmaxCrossEntropyLoss
//===----------------------------------------------------------------------===//

/// Per sample: log_prob (when requested) and, for reduction none, the loss.
__global__ void crossEntropyRowKernel(LossTensor scores, const void *labels,
                                      LossTensor weights, LossOutput loss,
                                      LossOutput logProb, LabelLossParams p,
                                      FaultSink sink) {
  int lane = threadIdx.x % kWarp;
  int64_t samples = p.batch * p.inner, classes = p.rule.classes;
  FOR_EACH_WARP_ROW(samples) {
    int64_t base = sampleBase(p, row), step = p.inner;
    float rowMax = -FLT_MAX;
    for (int64_t c = lane; c < classes; c += kWarp)
      rowMax = fmaxf(rowMax, scores.load(base + c * step));
    rowMax = warpMax(rowMax);
    double sum = 0;
    for (int64_t c = lane; c < classes; c += kWarp)
      sum += lossExp(subUnfused(scores.load(base + c * step), rowMax));
    float shift = logSoftmaxShift(rowMax, static_cast<float>(warpSum(sum)));
    int64_t label = labelAt(labels, p.labels32, row);
    LabelKind kind = classifyLabel(p.rule, label);
    float weight = sampleWeight(kind, label, weights);
    if (kind == LabelKind::OutOfRange && lane == 0)
      raiseLabelFault(sink);
    float picked =
        kind == LabelKind::Counted ? scores.load(base + label * step) : 0.0f;
    // Every lane has read the row before any writes it (log_prob may share
    // the scores' bytes).
    __syncwarp();
    if (p.reduction == LossReduction::None && lane == 0)
      loss.store(row, kind == LabelKind::OutOfRange
                          ? NAN
                          : static_cast<float>(
                                crossEntropySampleLoss(picked, shift, weight)));
    if (logProb.present())
      for (int64_t c = lane; c < classes; c += kWarp)
        logProb.store(base + c * step,
                      subUnfused(scores.load(base + c * step), shift));
  }
}

/// One block: the reduced loss in sample order, from log_prob when there
/// is one (already written) or from the scores.
__global__ void crossEntropyReduceKernel(LossTensor scores, LossTensor logProb,
                                         const void *labels, LossTensor weights,
                                         LossOutput loss, LabelLossParams p,
                                         FaultSink sink) {
  int64_t samples = p.batch * p.inner, classes = p.rule.classes;
  double lossSum = 0, weightSum = 0;
  bool bad = false;
  for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) {
    int64_t label = labelAt(labels, p.labels32, s);
    LabelKind kind = classifyLabel(p.rule, label);
    bad |= kind == LabelKind::OutOfRange;
    float weight = sampleWeight(kind, label, weights);
    weightSum += weight;
    if (weight == 0.0f)
      continue;
    int64_t base = sampleBase(p, s);
    if (logProb.present()) {
      lossSum += nllSampleLoss(logProb.load(base + label * p.inner), weight);
      continue;
    }
    float rowMax = -FLT_MAX;
    for (int64_t c = 0; c < classes; ++c)
      rowMax = fmaxf(rowMax, scores.load(base + c * p.inner));
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += lossExp(subUnfused(scores.load(base + c * p.inner), rowMax));
    float shift = logSoftmaxShift(rowMax, static_cast<float>(sum));
    lossSum += crossEntropySampleLoss(scores.load(base + label * p.inner),
                                      shift, weight);
  }
  bad = __syncthreads_or(bad);
  blockSums(lossSum, weightSum);
  if (threadIdx.x == 0) {
    if (bad)
      raiseLabelFault(sink);
    loss.store(0, bad ? NAN : reducedLoss(lossSum, weightSum, p.reduction));
  }
}

__global__ void crossEntropyGradKernel(LossTensor dy, LossTensor logProb,
                                       const void *labels, LossTensor weights,
                                       LossTensor bias, LossOutput dx,
                                       LabelLossParams p, FaultSink sink) {
  __shared__ double scale;
  int64_t samples = p.batch * p.inner, classes = p.rule.classes;
  // Every block derives the mean's scale itself (one pass over the labels),
  // so the launch needs no scratch.
  if (p.reduction == LossReduction::Mean) {
    double unused = 0, weightSum = 0;
    for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) {
      int64_t label = labelAt(labels, p.labels32, s);
      weightSum += sampleWeight(classifyLabel(p.rule, label), label, weights);
    }
    blockSums(unused, weightSum);
    if (threadIdx.x == 0)
      scale = meanGradientScale(weightSum, p.reduction);
  } else if (threadIdx.x == 0) {
    scale = 1.0;
  }
  __syncthreads();
  int lane = threadIdx.x % kWarp;
  float reducedDy = p.reduction == LossReduction::None ? 0.0f : dy.load(0);
  FOR_EACH_WARP_ROW(samples) {
    int64_t base = sampleBase(p, row), step = p.inner;
    int64_t label = labelAt(labels, p.labels32, row);
    LabelKind kind = classifyLabel(p.rule, label);
    if (kind == LabelKind::OutOfRange && lane == 0)
      raiseLabelFault(sink);
    float weight = sampleWeight(kind, label, weights);
    float factor = gradientFactor(
        weight, p.reduction == LossReduction::None ? dy.load(row) : reducedDy,
        scale, p.reduction);
    for (int64_t c = lane; c < classes; c += kWarp) {
      int64_t k = base + c * step;
      dx.store(k, crossEntropyGradElement(logProb.load(k), c == label, weight,
                                          factor, bias.present(),
                                          bias.present() ? bias.load(k) : 0));
    }
  }
}

//===----------------------------------------------------------------------===//
// NegativeLogLikelihoodLoss
//===----------------------------------------------------------------------===//

/// One thread per sample: the per-sample losses (reduction none).
__global__ void nllRowKernel(LossTensor input, const void *labels,
                             LossTensor weights, LossOutput loss,
                             LabelLossParams p, FaultSink sink) {
  FOR_EACH_THREAD(p.batch * p.inner) {
    int64_t label = labelAt(labels, p.labels32, i);
    LabelKind kind = classifyLabel(p.rule, label);
    if (kind == LabelKind::OutOfRange) {
      raiseLabelFault(sink);
      loss.store(i, NAN);
      continue;
    }
    float weight = sampleWeight(kind, label, weights);
    float picked =
        weight != 0.0f ? input.load(sampleBase(p, i) + label * p.inner) : 0.0f;
    loss.store(i, static_cast<float>(nllSampleLoss(picked, weight)));
  }
}

/// One block: the summed or mean loss.
__global__ void nllReduceKernel(LossTensor input, const void *labels,
                                LossTensor weights, LossOutput loss,
                                LabelLossParams p, FaultSink sink) {
  double lossSum = 0, weightSum = 0;
  bool bad = false;
  for (int64_t s = threadIdx.x; s < p.batch * p.inner; s += blockDim.x) {
    int64_t label = labelAt(labels, p.labels32, s);
    LabelKind kind = classifyLabel(p.rule, label);
    bad |= kind == LabelKind::OutOfRange;
    float weight = sampleWeight(kind, label, weights);
    weightSum += weight;
    if (weight != 0.0f)
      lossSum +=
          nllSampleLoss(input.load(sampleBase(p, s) + label * p.inner), weight);
  }
  bad = __syncthreads_or(bad);
  blockSums(lossSum, weightSum);
  if (threadIdx.x == 0) {
    if (bad)
      raiseLabelFault(sink);
    loss.store(0, bad ? NAN : reducedLoss(lossSum, weightSum, p.reduction));
  }
}

//===----------------------------------------------------------------------===//
// Dense-label SoftmaxCrossEntropy
//===----------------------------------------------------------------------===//

/// One thread per sample: log_prob (when requested) and the per-sample
/// loss (reduction none).
__global__ void denseCrossEntropyRowKernel(LossTensor logits, LossTensor labels,
                                           LossOutput loss, LossOutput logProb,
                                           int64_t samples, int64_t classes) {
  FOR_EACH_THREAD(samples) {
    double value =
        denseCrossEntropySample(logits, labels, logProb, i * classes, classes);
    loss.store(i, static_cast<float>(value));
  }
}

/// One block: log_prob (when requested) and the summed or mean loss.
__global__ void denseCrossEntropyReduceKernel(
    LossTensor logits, LossTensor labels, LossOutput loss, LossOutput logProb,
    int64_t samples, int64_t classes, LossReduction reduction) {
  double lossSum = 0, count = static_cast<double>(samples);
  for (int64_t s = threadIdx.x; s < samples; s += blockDim.x)
    lossSum +=
        denseCrossEntropySample(logits, labels, logProb, s * classes, classes);
  double unused = 0;
  blockSums(lossSum, unused);
  if (threadIdx.x == 0)
    loss.store(0, reducedLoss(lossSum, count, reduction));
}

/// One thread per sample.
__global__ void denseCrossEntropyGradKernel(LossTensor dy, LossTensor logProb,
                                            LossTensor labels, LossOutput dx,
                                            int64_t samples, int64_t classes,
                                            LossReduction reduction) {
  double scale = reduction == LossReduction::Mean && samples
                     ? 1.0 / static_cast<double>(samples)
                     : 1.0;
  FOR_EACH_THREAD(samples) {
    int64_t base = i * classes;
    float labelSum = 0.0f;
    for (int64_t c = 0; c < classes; ++c)
      labelSum = addUnfused(labelSum, labels.load(base + c));
    float factor = denseGradientFactor(
        dy.load(reduction == LossReduction::None ? i : 0), scale);
    for (int64_t c = 0; c < classes; ++c)
      dx.store(base + c,
               denseCrossEntropyGradElement(logProb.load(base + c), labelSum,
                                            labels.load(base + c), factor));
  }
}

} // namespace

cudaError_t gmopt::cuda::launchSoftmaxCrossEntropy(
    LossTensor scores, const void *labels, LossTensor weights, LossOutput loss,
    LossOutput logProb, const LabelLossParams &params, cudaStream_t stream) {
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  int64_t samples = params.batch * params.inner;
  // The row kernel first: the reduction reads the log-probabilities it
  // writes, since log_prob may have overwritten the scores.
  if (samples && (logProb.present() || params.reduction == LossReduction::None))
    crossEntropyRowKernel<<<warpGrid(samples), kThreads, 0, stream>>>(
        scores, labels, weights, loss, logProb, params, sink);
  if (params.reduction != LossReduction::None)
    crossEntropyReduceKernel<<<1, kThreads, 0, stream>>>(
        scores, logProb.asInput(), labels, weights, loss, params, sink);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchSoftmaxCrossEntropyGrad(
    LossTensor dy, LossTensor logProb, const void *labels, LossTensor weights,
    LossTensor bias, LossOutput dx, const LabelLossParams &params,
    cudaStream_t stream) {
  int64_t samples = params.batch * params.inner;
  if (samples == 0)
    return cudaSuccess;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  crossEntropyGradKernel<<<warpGrid(samples), kThreads, 0, stream>>>(
      dy, logProb, labels, weights, bias, dx, params, sink);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchNegativeLogLikelihood(
    LossTensor input, const void *labels, LossTensor weights, LossOutput loss,
    const LabelLossParams &params, cudaStream_t stream) {
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  int64_t samples = params.batch * params.inner;
  if (params.reduction != LossReduction::None)
    nllReduceKernel<<<1, kThreads, 0, stream>>>(input, labels, weights, loss,
                                                params, sink);
  else if (samples)
    nllRowKernel<<<threadGrid(samples), kThreads, 0, stream>>>(
        input, labels, weights, loss, params, sink);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDenseCrossEntropy(
    LossTensor logits, LossTensor labels, LossOutput loss, LossOutput logProb,
    int64_t samples, int64_t classes, LossReduction reduction,
    cudaStream_t stream) {
  if (reduction != LossReduction::None)
    denseCrossEntropyReduceKernel<<<1, kThreads, 0, stream>>>(
        logits, labels, loss, logProb, samples, classes, reduction);
  else if (samples)
    denseCrossEntropyRowKernel<<<threadGrid(samples), kThreads, 0, stream>>>(
        logits, labels, loss, logProb, samples, classes);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDenseCrossEntropyGrad(
    LossTensor dy, LossTensor logProb, LossTensor labels, LossOutput dx,
    int64_t samples, int64_t classes, LossReduction reduction,
    cudaStream_t stream) {
  if (samples == 0)
    return cudaSuccess;
  denseCrossEntropyGradKernel<<<threadGrid(samples), kThreads, 0, stream>>>(
      dy, logProb, labels, dx, samples, classes, reduction);
  return cudaGetLastError();
}
