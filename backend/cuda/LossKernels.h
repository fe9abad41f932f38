//===- LossKernels.h - Launchers of the losses and BiasDropout --*- C++ -*-===//
//
// The launchers LossKernels.cu and BiasDropoutKernels.cu implement for
// CudaLossDispatch.cpp: SoftmaxCrossEntropyLoss (and ONNX Runtime's
// Internal variant) and its gradient, NegativeLogLikelihoodLoss (and
// Internal, Internal2), the older dense-label SoftmaxCrossEntropy and its
// gradient, and BiasDropout. Same conventions as CudaKernels.h: raw device
// pointers, enqueue on the stream, return the launch status, never
// allocate or synchronize. A label out of range raises the device fault
// (KernelFault::LabelOutOfRange) and makes its loss NaN (a reduced loss
// too) and its gradient row zero. Reduced losses are summed by one block in
// a fixed order, so they are reproducible.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_LOSSKERNELS_H
#define GMOPT_BACKEND_CUDA_LOSSKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LossMath.h"

namespace gmopt {
namespace cuda {

/// A label-indexed loss over scores [N, C, D...] and int labels [N, D...]:
/// sample s's class c sits at (s / inner) * C * inner + c * inner + s %
/// inner.
struct LabelLossParams {
  int64_t batch = 0, inner = 1;
  LabelRule rule;
  LossReduction reduction = LossReduction::Mean;
  /// Labels are int32 instead of int64.
  bool labels32 = false;
};

/// SoftmaxCrossEntropyLoss -> loss ([] or [N, D...]) and log_prob (may be
/// absent; may share the scores' bytes).
cudaError_t launchSoftmaxCrossEntropy(LossTensor scores, const void *labels,
                                      LossTensor weights, LossOutput loss,
                                      LossOutput logProb,
                                      const LabelLossParams &params,
                                      cudaStream_t stream);
/// SoftmaxCrossEntropyLossGrad: dx = (e^log_prob - onehot) * weight * dy
/// (/ weightSum for mean), + bias when present (dx may share log_prob's
/// bytes).
cudaError_t launchSoftmaxCrossEntropyGrad(LossTensor dy, LossTensor logProb,
                                          const void *labels,
                                          LossTensor weights, LossTensor bias,
                                          LossOutput dx,
                                          const LabelLossParams &params,
                                          cudaStream_t stream);
/// NegativeLogLikelihoodLoss: -input[label] * weight per sample, reduced.
cudaError_t launchNegativeLogLikelihood(LossTensor input, const void *labels,
                                        LossTensor weights, LossOutput loss,
                                        const LabelLossParams &params,
                                        cudaStream_t stream);
/// com.microsoft SoftmaxCrossEntropy over \p samples rows of \p classes
/// (dense labels of the logits' shape) -> loss ([] or [samples]) and
/// log_prob (may be absent); mean divides by the sample count.
cudaError_t launchDenseCrossEntropy(LossTensor logits, LossTensor labels,
                                    LossOutput loss, LossOutput logProb,
                                    int64_t samples, int64_t classes,
                                    LossReduction reduction,
                                    cudaStream_t stream);
/// com.microsoft SoftmaxCrossEntropyGrad: dx = (e^log_prob * sum(label) -
/// label) * dy (/ samples for mean).
cudaError_t launchDenseCrossEntropyGrad(LossTensor dy, LossTensor logProb,
                                        LossTensor labels, LossOutput dx,
                                        int64_t samples, int64_t classes,
                                        LossReduction reduction,
                                        cudaStream_t stream);

/// BiasDropout over \p elements: out = Dropout(x + bias[i % width]) +
/// residual (residual may be absent), mask (bool, may be null) = keep; the
/// stream and mode as launchDropout's DropoutParams.
cudaError_t launchBiasDropout(LossTensor x, LossTensor bias,
                              LossTensor residual, LossOutput out,
                              uint8_t *mask, int64_t elements, int64_t width,
                              const DropoutParams &params, cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_LOSSKERNELS_H
