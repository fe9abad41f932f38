//===- BiasDropoutKernels.cu - com.microsoft BiasDropout on CUDA ----------===//
//
// launchBiasDropout of LossKernels.h: one thread per Philox block of four
// elements, as the Dropout kernel (DropoutKernels.cu), so a thread
// draws its four decisions once. The decisions and the element arithmetic
// are BiasDropoutMath.h's, which equal the CPU kernel's bit for bit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/BiasDropoutMath.h"
#include "backend/cuda/LossKernels.h"

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

constexpr int kThreads = 256;

__global__ void biasDropoutKernel(LossTensor x, LossTensor bias,
                                  LossTensor residual, LossOutput out,
                                  uint8_t *mask, int64_t elements,
                                  int64_t width, DropoutParams params) {
  BiasDropoutMode mode = resolveBiasDropoutMode(
      params.ratioValue, params.ratio, params.training, params.inference);
  PhiloxStreamKey key =
      makePhiloxStreamKey(params.seed, params.streamId, dropoutStep(params));
  int64_t blocks = (elements + 3) / 4;
  for (int64_t block = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       block < blocks; block += int64_t(gridDim.x) * blockDim.x) {
    uint32_t keepBits =
        biasDropoutKeepBits(key, static_cast<uint32_t>(block), mode);
    for (int lane = 0; lane < 4; ++lane) {
      int64_t i = block * 4 + lane;
      if (i >= elements)
        break;
      bool keep = (keepBits >> lane) & 1u;
      out.store(i,
                biasDropoutElement(x.load(i), bias.load(width ? i % width : 0),
                                   residual.present(),
                                   residual.present() ? residual.load(i) : 0.0f,
                                   keep, mode));
      if (mask)
        mask[i] = keep;
    }
  }
}

unsigned gridFor(int64_t threads) {
  int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

} // namespace

cudaError_t gmopt::cuda::launchBiasDropout(LossTensor x, LossTensor bias,
                                           LossTensor residual, LossOutput out,
                                           uint8_t *mask, int64_t elements,
                                           int64_t width,
                                           const DropoutParams &params,
                                           cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  biasDropoutKernel<<<gridFor((elements + 3) / 4), kThreads, 0, stream>>>(
      x, bias, residual, out, mask, elements, width, params);
  return cudaGetLastError();
}
