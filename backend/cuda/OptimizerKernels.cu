//===- OptimizerKernels.cu - Accumulators and optimizers --------*- C++ -*-===//
//
// The training step's update kernels: InPlaceAccumulatorV2's gradient
// accumulation and the conditional sum (any float storage for the sum and
// the value, fp32 arithmetic), and the fused multi-tensor AdamW and SGD
// updates with their update flag. The arithmetic is ElementwiseMath.h's,
// which host tests check against the CPU kernels; the flags and scalars
// (lr, step, update signal, overwrite) are read on the device, so no launch
// waits for the host.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"

using namespace gmopt::cuda;

namespace {

template <typename TB, typename TV>
__global__ void accumulateKernel(const TB *sum, const TV *value,
                                 const uint8_t *overwrite,
                                 const uint8_t *updateSignal, uint8_t *updated,
                                 TB *out, TB *outCopy, int64_t elements) {
  bool replace = overwrite && *overwrite != 0;
  bool update = !updateSignal || *updateSignal != 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    float old = loadAsFloat(sum, i);
    float result = !update   ? old
                   : replace ? loadAsFloat(value, i)
                             : old + loadAsFloat(value, i);
    storeFromFloat(out, i, result);
    if (outCopy && outCopy != out)
      storeFromFloat(outCopy, i, result);
  }
  if (updated && blockIdx.x == 0 && threadIdx.x == 0)
    *updated = 1;
}

template <typename TB>
cudaError_t accumulateInto(const TB *sum, Storage valueStorage,
                           const void *value, const uint8_t *overwrite,
                           const uint8_t *updateSignal, uint8_t *updated,
                           void *out, void *outCopy, int64_t elements,
                           cudaStream_t stream) {
  unsigned grid = gridFor(elements);
  TB *result = static_cast<TB *>(out), *copy = static_cast<TB *>(outCopy);
  switch (valueStorage) {
  case Storage::F32:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const float *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  case Storage::F16:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const HalfBits *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  case Storage::BF16:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const BFloat16Bits *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

/// The tensor table of a fused optimizer launch, passed by value.
struct OptimizerTable {
  OptimizerTensor tensors[kOptimizerTensorsPerLaunch];
};

/// blockIdx.y picks the tensor, blockIdx.x strides over its elements.
__global__ void adamWKernel(OptimizerTable table, AdamWParams params) {
  if (params.updateSignal && *params.updateSignal == 0)
    return;
  AdamWConstants s;
  s.alpha = params.alpha;
  s.beta = params.beta;
  s.epsilon = params.epsilon;
  s.weightDecay = params.weightDecay;
  s.mode = params.mode;
  setAdamWStep(s, *params.lr, *params.step, params.correctBias);
  const OptimizerTensor &t = table.tensors[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < t.elements; i += int64_t(gridDim.x) * blockDim.x) {
    float w = t.weight[i], m1 = t.m1[i], m2 = t.m2[i];
    adamWElement(s, w, t.grad[i], m1, m2);
    t.weight[i] = w;
    t.m1[i] = m1;
    t.m2[i] = m2;
  }
}

__global__ void sgdKernel(OptimizerTable table, const float *lr,
                          const uint8_t *updateSignal) {
  if (updateSignal && *updateSignal == 0)
    return;
  float negativeLr = -*lr;
  const OptimizerTensor &t = table.tensors[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < t.elements; i += int64_t(gridDim.x) * blockDim.x)
    t.weight[i] = sgdElement(t.weight[i], t.grad[i], negativeLr);
}

__global__ void optimizerFlagKernel(bool int64Flag, void *flag,
                                    int64_t elements,
                                    const uint8_t *updateSignal) {
  bool update = !updateSignal || *updateSignal != 0;
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    if (int64Flag)
      static_cast<int64_t *>(flag)[i] = update ? 1 : 0;
    else
      static_cast<uint8_t *>(flag)[i] = update ? 1 : 0;
  }
}

/// Blocks along x for the largest tensor of a fused launch.
unsigned fusedGrid(const OptimizerTensor *tensors, int count) {
  int64_t largest = 1;
  for (int i = 0; i < count; ++i)
    largest = tensors[i].elements > largest ? tensors[i].elements : largest;
  unsigned grid = gridFor(largest);
  return grid > 4096 ? 4096 : grid;
}

} // namespace

/// The accumulators' common launch: out (and outCopy) = update ? (replace ?
/// value : sum + value) : sum.
static cudaError_t
launchAccumulateFrom(Storage sumStorage, const void *sum, Storage valueStorage,
                     const void *value, const uint8_t *overwrite,
                     const uint8_t *updateSignal, uint8_t *updated, void *out,
                     void *outCopy, int64_t elements, cudaStream_t stream) {
  switch (sumStorage) {
  case Storage::F32:
    return accumulateInto(static_cast<const float *>(sum), valueStorage, value,
                          overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  case Storage::F16:
    return accumulateInto(static_cast<const HalfBits *>(sum), valueStorage,
                          value, overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  case Storage::BF16:
    return accumulateInto(static_cast<const BFloat16Bits *>(sum), valueStorage,
                          value, overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

cudaError_t gmopt::cuda::launchAccumulate(
    Storage bufferStorage, void *buffer, Storage valueStorage,
    const void *value, const uint8_t *overwrite, uint8_t *updated,
    void *bufferOut, int64_t elements, cudaStream_t stream) {
  // At least one thread runs (gridFor), to set the updated flag.
  return launchAccumulateFrom(bufferStorage, buffer, valueStorage, value,
                              overwrite, nullptr, updated, buffer, bufferOut,
                              elements, stream);
}

cudaError_t gmopt::cuda::launchSumIf(Storage sumStorage, const void *oldSum,
                                     Storage valueStorage, const void *value,
                                     const uint8_t *updateSignal, void *newSum,
                                     int64_t elements, cudaStream_t stream) {
  return launchAccumulateFrom(sumStorage, oldSum, valueStorage, value, nullptr,
                              updateSignal, nullptr, newSum, nullptr, elements,
                              stream);
}

cudaError_t gmopt::cuda::launchAdamW(const OptimizerTensor *tensors, int count,
                                     const AdamWParams &params,
                                     cudaStream_t stream) {
  if (count <= 0 || count > kOptimizerTensorsPerLaunch)
    return count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  OptimizerTable table;
  for (int i = 0; i < count; ++i)
    table.tensors[i] = tensors[i];
  dim3 grid(fusedGrid(tensors, count), static_cast<unsigned>(count));
  adamWKernel<<<grid, kThreads, 0, stream>>>(table, params);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchSgd(const OptimizerTensor *tensors, int count,
                                   const float *lr, const uint8_t *updateSignal,
                                   cudaStream_t stream) {
  if (count <= 0 || count > kOptimizerTensorsPerLaunch)
    return count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  OptimizerTable table;
  for (int i = 0; i < count; ++i)
    table.tensors[i] = tensors[i];
  dim3 grid(fusedGrid(tensors, count), static_cast<unsigned>(count));
  sgdKernel<<<grid, kThreads, 0, stream>>>(table, lr, updateSignal);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchOptimizerFlag(Storage storage, void *flag,
                                             int64_t elements,
                                             const uint8_t *updateSignal,
                                             cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  if (storage != Storage::I64 && storage != Storage::Bool)
    return cudaErrorInvalidValue;
  optimizerFlagKernel<<<1, 32, 0, stream>>>(storage == Storage::I64, flag,
                                            elements, updateSignal);
  return cudaGetLastError();
}
