//===- BiasDropoutMath.h - BiasDropout's element and mask -------*- C++ -*-===//
//
// com.microsoft BiasDropout on CUDA (BiasDropoutKernels.cu): out =
// Dropout(data + bias) + residual with a bool mask. The keep decisions come
// from gmopt's Philox stream (backend/Philox.h) exactly as the CPU kernel
// (backend/cpu/DropoutKernels.cpp) draws them: element i is kept when the
// word i % 4 of block i / 4 gives a uniform >= ratio. The element
// arithmetic follows the CPU's fp32 order with every step rounded on its
// own (no fused multiply-add), so the CUDA output and mask equal the CPU
// backend's bit for bit; tests/unit/CudaLossTest.cpp checks both on the
// host.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_BIASDROPOUTMATH_H
#define GMOPT_BACKEND_CUDA_BIASDROPOUTMATH_H

#include "backend/Philox.h"
#include "backend/UnfusedMath.h"

namespace gmopt {
namespace cuda {

/// The dropout mode one launch resolves: the ratio, whether anything is
/// dropped (training with a nonzero ratio) and the keep scale.
struct BiasDropoutMode {
  float ratio = 0.5f;
  bool active = false;
  float scale = 1.0f;
};

/// The mode from the ratio (\p ratioValue when >= 0, else *\p ratio, else
/// 0.5) and the training flag (*\p training; false when null or when
/// \p inference says the node has no training input), as the CPU's
/// getDropoutMode.
GMOPT_HD BiasDropoutMode resolveBiasDropoutMode(float ratioValue,
                                                const float *ratio,
                                                const uint8_t *training,
                                                bool inference) {
  BiasDropoutMode mode;
  mode.ratio = ratioValue >= 0.0f ? ratioValue : ratio ? *ratio : 0.5f;
  bool isTraining = !inference && training && *training != 0;
  mode.active = isTraining && mode.ratio > 0.0f;
  mode.scale = 1.0f / (1.0f - mode.ratio);
  return mode;
}

/// The keep decisions of elements [4 * block, 4 * block + 4), element
/// 4 * block + k in bit k; all kept when the mode is inactive.
GMOPT_HD uint32_t biasDropoutKeepBits(const PhiloxStreamKey &key,
                                      uint32_t block,
                                      const BiasDropoutMode &mode) {
  if (!mode.active)
    return 0xfu;
  PhiloxWords words = philoxBlock(key, block);
  uint32_t bits = 0;
  for (int lane = 0; lane < 4; ++lane)
    bits |= static_cast<uint32_t>(dropoutKeeps(words.w[lane], mode.ratio))
            << lane;
  return bits;
}

/// One output element: keep ? (x + bias) * scale : 0 when active, x + bias
/// when not (unscaled), then + residual when present.
GMOPT_HD float biasDropoutElement(float x, float bias, bool hasResidual,
                                  float residual, bool keep,
                                  const BiasDropoutMode &mode) {
  float sum = addUnfused(x, bias);
  float value = !mode.active ? sum : keep ? mulUnfused(sum, mode.scale) : 0.0f;
  return hasResidual ? addUnfused(value, residual) : value;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_BIASDROPOUTMATH_H
