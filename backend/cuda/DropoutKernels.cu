//===- DropoutKernels.cu - Dropout CUDA kernels -----------------*- C++ -*-===//
//
// Dropout (with a byte mask or a 32-bit-word bitmask) and DropoutGrad on
// gmopt's Philox stream, keyed by (seed, stream id, step) so the CPU
// backend, recompute and fused ops draw the same bits (backend/Philox.h). The
// ratio and training mode are read on the device, so no launch waits for
// the host; inactive dropout is the identity. A launch captured in a CUDA
// graph reads the step from the device counter gStepCounter, which each
// replay updates first. Grid-stride loops keep the grid small for any size.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/DropoutDevice.h"
#include "backend/cuda/LaunchSupport.h"

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

/// The step of a CUDA graph's replay (getStepCounter).
__device__ uint64_t gStepCounter;

/// One thread per Philox block of four elements.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, uint8_t *mask,
                              int64_t elements, DropoutParams params) {
  DeviceDropoutMode mode = readDropoutMode(params);
  float scale = 1.0f / (1.0f - mode.ratio);
  PhiloxStreamKey key =
      makePhiloxStreamKey(params.seed, params.streamId, dropoutStep(params));
  int64_t blocks = (elements + 3) / 4;
  for (int64_t block = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       block < blocks; block += int64_t(gridDim.x) * blockDim.x) {
    PhiloxWords words;
    if (mode.active)
      words = philoxBlock(key, static_cast<uint32_t>(block));
    for (int lane = 0; lane < 4; ++lane) {
      int64_t i = block * 4 + lane;
      if (i >= elements)
        break;
      bool keep = !mode.active || dropoutKeeps(words.w[lane], mode.ratio);
      float v = loadAsFloat(x, i);
      // Inactive dropout is the identity (no scaling), as on the CPU.
      storeFromFloat(out, i, !mode.active ? v : keep ? v * scale : 0.0f);
      if (mask)
        mask[i] = keep;
    }
  }
}

/// One thread per 32-element mask word (eight Philox blocks).
template <typename T>
__global__ void bitmaskDropoutKernel(const T *x, T *out, uint32_t *mask,
                                     int64_t elements, DropoutParams params) {
  DeviceDropoutMode mode = readDropoutMode(params);
  float scale = 1.0f / (1.0f - mode.ratio);
  PhiloxStreamKey key =
      makePhiloxStreamKey(params.seed, params.streamId, dropoutStep(params));
  int64_t words = (elements + 31) / 32;
  for (int64_t word = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       word < words; word += int64_t(gridDim.x) * blockDim.x) {
    uint32_t bits = 0;
    for (int block = 0; block < 8; ++block) {
      int64_t first = word * 32 + block * 4;
      if (first >= elements)
        break;
      PhiloxWords random;
      if (mode.active)
        random = philoxBlock(key, static_cast<uint32_t>(first / 4));
      for (int lane = 0; lane < 4 && first + lane < elements; ++lane) {
        int64_t i = first + lane;
        bool keep = !mode.active || dropoutKeeps(random.w[lane], mode.ratio);
        float v = loadAsFloat(x, i);
        storeFromFloat(out, i, !mode.active ? v : keep ? v * scale : 0.0f);
        bits |= static_cast<uint32_t>(keep) << (i % 32);
      }
    }
    if (mask)
      mask[word] = bits;
  }
}

template <typename T>
__global__ void dropoutGradKernel(const T *dy, const void *mask, bool bitmask,
                                  T *dx, int64_t elements,
                                  DropoutParams params) {
  DeviceDropoutMode mode = readDropoutMode(params);
  float scale = mode.active ? 1.0f / (1.0f - mode.ratio) : 1.0f;
  const uint8_t *bytes = static_cast<const uint8_t *>(mask);
  const uint32_t *words = static_cast<const uint32_t *>(mask);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = loadAsFloat(dy, i);
    bool keep =
        !mask || (bitmask ? (words[i / 32] >> (i % 32)) & 1u : bytes[i] != 0);
    storeFromFloat(dx, i, !mode.active ? g : keep ? g * scale : 0.0f);
  }
}

} // namespace

cudaError_t gmopt::cuda::getStepCounter(uint64_t **counter) {
  void *address = nullptr;
  cudaError_t status = cudaGetSymbolAddress(&address, gStepCounter);
  *counter = static_cast<uint64_t *>(address);
  return status;
}

cudaError_t gmopt::cuda::launchDropout(Storage storage, const void *x,
                                       void *out, uint8_t *mask,
                                       int64_t elements,
                                       const DropoutParams &params,
                                       cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor((elements + 3) / 4);
  switch (storage) {
  case Storage::F32:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(static_cast<const float *>(x),
                                                 static_cast<float *>(out),
                                                 mask, elements, params);
    break;
  case Storage::F16:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(x), static_cast<HalfBits *>(out), mask,
        elements, params);
    break;
  case Storage::BF16:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(x), static_cast<BFloat16Bits *>(out),
        mask, elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchBitmaskDropout(Storage storage, const void *x,
                                              void *out, uint32_t *mask,
                                              int64_t elements,
                                              const DropoutParams &params,
                                              cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor((elements + 31) / 32);
  switch (storage) {
  case Storage::F32:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float *>(x), static_cast<float *>(out), mask,
        elements, params);
    break;
  case Storage::F16:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(x), static_cast<HalfBits *>(out), mask,
        elements, params);
    break;
  case Storage::BF16:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(x), static_cast<BFloat16Bits *>(out),
        mask, elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDropoutGrad(Storage storage, const void *dy,
                                           const void *mask, bool bitmask,
                                           void *dx, int64_t elements,
                                           const DropoutParams &params,
                                           cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(elements);
  switch (storage) {
  case Storage::F32:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float *>(dy), mask, bitmask, static_cast<float *>(dx),
        elements, params);
    break;
  case Storage::F16:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(dy), mask, bitmask,
        static_cast<HalfBits *>(dx), elements, params);
    break;
  case Storage::BF16:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(dy), mask, bitmask,
        static_cast<BFloat16Bits *>(dx), elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
