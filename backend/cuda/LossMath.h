//===- LossMath.h - Per-sample arithmetic of the CUDA losses ----*- C++ -*-===//
//
// The arithmetic LossKernels.cu applies to one sample of the cross-entropy
// and negative log-likelihood losses and their gradients, written once as
// `__host__ __device__` functions so that host unit tests run it against
// the CPU kernels (backend/cpu/LossKernels.cpp) without a GPU
// (tests/unit/CudaLossTest.cpp). The functions follow the CPU kernels'
// order of operations: per-sample losses are products in double, sums run
// in double, the mean divides by the summed weights of the samples not
// ignored (0/0 = NaN when every label is ignored), and the gradients form
// their factor in double and the element in fp32. Tensors may be f32, f16
// or bf16 each (LossTensor): values are widened to fp32 on load and
// rounded to nearest even on store, as the CPU backend's staging does.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_LOSSMATH_H
#define GMOPT_BACKEND_CUDA_LOSSMATH_H

#include "backend/UnfusedMath.h"
#include "backend/cuda/ElementwiseMath.h"
#include "ir/ops/LossReduction.h"

namespace gmopt {
namespace cuda {

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

/// The element type of one float tensor of a loss kernel.
enum class LossFloat : int32_t { F32, F16, BF16 };

/// A float tensor a loss kernel reads; absent when data is null.
struct LossTensor {
  const void *data = nullptr;
  LossFloat kind = LossFloat::F32;

  GMOPT_HD bool present() const { return data != nullptr; }
  /// Element \p i widened to fp32.
  GMOPT_HD float load(int64_t i) const {
    switch (kind) {
    case LossFloat::F16:
      return loadAsFloat(static_cast<const HalfBits *>(data), i);
    case LossFloat::BF16:
      return loadAsFloat(static_cast<const BFloat16Bits *>(data), i);
    case LossFloat::F32:
      break;
    }
    return static_cast<const float *>(data)[i];
  }
};

/// A float tensor a loss kernel writes; absent when data is null.
struct LossOutput {
  void *data = nullptr;
  LossFloat kind = LossFloat::F32;

  GMOPT_HD bool present() const { return data != nullptr; }
  /// Stores \p v into element \p i, rounding a 16-bit element.
  GMOPT_HD void store(int64_t i, float v) const {
    switch (kind) {
    case LossFloat::F16:
      storeFromFloat(static_cast<HalfBits *>(data), i, v);
      return;
    case LossFloat::BF16:
      storeFromFloat(static_cast<BFloat16Bits *>(data), i, v);
      return;
    case LossFloat::F32:
      break;
    }
    static_cast<float *>(data)[i] = v;
  }
  /// The same bytes, read.
  GMOPT_HD LossTensor asInput() const { return LossTensor{data, kind}; }
};

//===----------------------------------------------------------------------===//
// Labels and weights
//===----------------------------------------------------------------------===//

/// How the per-sample losses combine (ir/ops/LossReduction.h).
using LossReduction = ops::LossReduction;

/// What a label means to the loss.
enum class LabelKind : int32_t { Counted, Ignored, OutOfRange };

/// The classes and the ignored label of a label-indexed loss.
struct LabelRule {
  int64_t classes = 0;
  bool hasIgnoreIndex = false;
  int64_t ignoreIndex = 0;
};

/// The ignored label is ignored even outside [0, classes), as the CPU's
/// readLabels accepts it.
GMOPT_HD LabelKind classifyLabel(const LabelRule &rule, int64_t label) {
  if (rule.hasIgnoreIndex && label == rule.ignoreIndex)
    return LabelKind::Ignored;
  if (label < 0 || label >= rule.classes)
    return LabelKind::OutOfRange;
  return LabelKind::Counted;
}

/// A sample's weight: weights[label] (1 without weights), 0 when the label
/// is ignored or out of range (which the kernel reports as a fault).
GMOPT_HD float sampleWeight(LabelKind kind, int64_t label,
                            const LossTensor &weights) {
  if (kind != LabelKind::Counted)
    return 0.0f;
  return weights.present() ? weights.load(label) : 1.0f;
}

//===----------------------------------------------------------------------===//
// Forward losses
//===----------------------------------------------------------------------===//

/// e^x in fp32 (the device's expf; the host's std::exp, as the CPU
/// kernels' scalar loops call it).
GMOPT_HD float lossExp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}

/// ln x in fp32.
GMOPT_HD float lossLog(float x) {
#if defined(__CUDA_ARCH__)
  return ::logf(x);
#else
  return std::log(x);
#endif
}

/// The log-softmax shift of a row: max + ln(sum of e^(x - max)).
GMOPT_HD float logSoftmaxShift(float rowMax, float expSum) {
  return addUnfused(rowMax, lossLog(expSum));
}

/// NegativeLogLikelihoodLoss of one sample: -input[label] * weight in
/// double (0 for a weightless sample, whatever the input holds).
GMOPT_HD double nllSampleLoss(float picked, float weight) {
  return weight == 0.0f ? 0.0
                        : mulUnfused(-static_cast<double>(picked),
                                     static_cast<double>(weight));
}

/// SoftmaxCrossEntropyLoss of one sample: -(score[label] - shift) * weight
/// in double; the difference is the fp32 log-probability.
GMOPT_HD double crossEntropySampleLoss(float picked, float shift,
                                       float weight) {
  return nllSampleLoss(subUnfused(picked, shift), weight);
}

/// The reduced loss from the summed per-sample losses and weights: the sum,
/// or the mean over the summed weights (NaN when every label is ignored).
GMOPT_HD float reducedLoss(double lossSum, double weightSum,
                           LossReduction reduction) {
  return static_cast<float>(
      reduction == LossReduction::Mean ? lossSum / weightSum : lossSum);
}

/// The older com.microsoft SoftmaxCrossEntropy of one sample (dense labels,
/// the row contiguous from \p base): -sum(label * log_prob) in double, the
/// log-probabilities stored into \p logProb when present. The row statistics
/// run in fp32 in class order, as the CPU kernel's loop.
GMOPT_HD double denseCrossEntropySample(const LossTensor &logits,
                                        const LossTensor &labels,
                                        const LossOutput &logProb, int64_t base,
                                        int64_t classes) {
  float rowMax = logits.load(base);
  for (int64_t c = 1; c < classes; ++c) {
    float v = logits.load(base + c);
    rowMax = rowMax < v ? v : rowMax;
  }
  float expSum = 0.0f;
  for (int64_t c = 0; c < classes; ++c)
    expSum =
        addUnfused(expSum, lossExp(subUnfused(logits.load(base + c), rowMax)));
  float shift = logSoftmaxShift(rowMax, expSum);
  double loss = 0.0;
  for (int64_t c = 0; c < classes; ++c) {
    float value = subUnfused(logits.load(base + c), shift);
    if (logProb.present())
      logProb.store(base + c, value);
    loss -= mulUnfused(static_cast<double>(labels.load(base + c)),
                       static_cast<double>(value));
  }
  return loss;
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

/// The scale of a mean's gradient: 1 / weightSum, or 1 when nothing is
/// counted (every sample's share is then zero) or for none and sum.
GMOPT_HD double meanGradientScale(double weightSum, LossReduction reduction) {
  return reduction == LossReduction::Mean && weightSum != 0.0 ? 1.0 / weightSum
                                                              : 1.0;
}

/// A sample's gradient factor weight * dY (* scale when reduced), formed in
/// double and rounded to fp32; \p dy is dY[sample] for none, dY[0] else.
GMOPT_HD float gradientFactor(float weight, float dy, double scale,
                              LossReduction reduction) {
  double upstream = reduction == LossReduction::None
                        ? static_cast<double>(dy)
                        : mulUnfused(static_cast<double>(dy), scale);
  return static_cast<float>(mulUnfused(static_cast<double>(weight), upstream));
}

/// SoftmaxCrossEntropyLossGrad of one element: (e^log_prob - onehot) *
/// factor, 0 for a weightless sample; plus the bias when present.
GMOPT_HD float crossEntropyGradElement(float logProb, bool isLabel,
                                       float weight, float factor, bool hasBias,
                                       float bias) {
  float value =
      weight == 0.0f
          ? 0.0f
          : mulUnfused(subUnfused(lossExp(logProb), isLabel ? 1.0f : 0.0f),
                       factor);
  return hasBias ? addUnfused(value, bias) : value;
}

/// The dense SoftmaxCrossEntropyGrad's factor of one sample: dY * scale
/// (scale 1 / samples for mean), in double, rounded to fp32.
GMOPT_HD float denseGradientFactor(float dy, double scale) {
  return static_cast<float>(mulUnfused(static_cast<double>(dy), scale));
}

/// The dense SoftmaxCrossEntropyGrad of one element: (e^log_prob *
/// sum(label row) - label) * factor, in fp32.
GMOPT_HD float denseCrossEntropyGradElement(float logProb, float labelSum,
                                            float label, float factor) {
  return mulUnfused(subUnfused(mulUnfused(lossExp(logProb), labelSum), label),
                    factor);
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_LOSSMATH_H
