//===- LossKernels.cpp - Cross-entropy losses and their gradients ---------===//
//
// ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, and ONNX
// Runtime's com.microsoft SoftmaxCrossEntropyLossInternal and
// NegativeLogLikelihoodLossInternal(2) (ignore_index as an input),
// SoftmaxCrossEntropyLossGrad and SoftmaxCrossEntropyLossInternalGrad (with an
// optional bias added to the result), and the older dense-label
// SoftmaxCrossEntropy / SoftmaxCrossEntropyGrad. Scores are [N, C, D1..Dk] and
// labels [N, D1..Dk]; each sample's C scores sit `inner` = prod(D) apart.
// Reductions: none, sum, and mean, which divides by the summed weights of the
// samples not ignored (or their count without weights). A mean over zero
// counted samples (all labels ignored, or no samples) is NaN, as PyTorch
// gives, where ONNX Runtime reports 0; the gradient follows ONNX Runtime and
// PyTorch alike: it is zero (every sample's share is zero or absent), since
// the scale 1/weightSum is then not applied. Sums run sequentially in double
// so the loss does not depend on the thread count. Each kernel runs in
// float32 (vector rows) or, for float64 tensors, in float64 (plain loops).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Simd.h"
#include "ir/ops/LossReduction.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

using ops::LossReduction;

// Row helpers of the losses: Simd.h's vector kernels in float32, plain
// loops in float64 (the float32 results stay those of the vector kernels).

/// The largest of x[0, n), n >= 1.
float rowMax(const float *x, int64_t n) { return maxF32(x, n); }
double rowMax(const double *x, int64_t n) {
  double best = x[0];
  for (int64_t i = 1; i < n; ++i)
    best = x[i] > best ? x[i] : best;
  return best;
}
/// The sum of e^(x[i] - shift) over [0, n).
float rowExpShiftedSum(const float *x, int64_t n, float shift) {
  return expShiftedF32(x, nullptr, n, shift);
}
double rowExpShiftedSum(const double *x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(x[i] - shift);
  return sum;
}
/// y[i] = x[i] - shift over [0, n).
void rowShift(const float *x, float *y, int64_t n, float shift) {
  scaleShiftF32(x, y, n, 1.0f, -shift);
}
void rowShift(const double *x, double *y, int64_t n, double shift) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] - shift;
}

/// A loss node decoded once: its `reduction` (ops::getLossReduction) and
/// its `ignore_index` attribute (an Internal loss's input, when present,
/// overrides it).
struct LossState {
  LossReduction reduction = LossReduction::Mean;
  std::optional<int64_t> ignoreIndexAttr;
};

/// Decodes a loss node; an unknown reduction fails here, before the first
/// step.
llvm::Expected<std::unique_ptr<KernelState>> prepareLoss(const Node &node) {
  auto reduction = ops::getLossReduction(node);
  if (!reduction)
    return prepareError(node, llvm::toString(reduction.takeError()));
  LossState state;
  state.reduction = *reduction;
  if (node.hasAttr("ignore_index"))
    state.ignoreIndexAttr = node.getIntAttr("ignore_index", 0);
  return makeKernelState(state);
}

/// The `reduction` of \p call's loss, as prepared.
LossReduction getReduction(const KernelCall &call) {
  return call.getState<LossState>().reduction;
}

/// The ignored label: input \p input when present, else the attribute.
llvm::Expected<std::optional<int64_t>>
getIgnoreIndex(const KernelCall &call, std::optional<unsigned> input) {
  if (input)
    if (const TensorView *view = call.in(*input)) {
      auto value = readScalar(call, *view, "ignore_index");
      if (!value)
        return value.takeError();
      return std::optional<int64_t>(static_cast<int64_t>(*value));
    }
  return call.getState<LossState>().ignoreIndexAttr;
}

/// Layout of scores [N, C, D...] against labels [N, D...].
struct LossShape {
  int64_t batch = 0;
  int64_t classes = 0;
  int64_t inner = 1;
  int64_t samples() const { return batch * inner; }
  /// Offset of class 0 of sample s.
  int64_t base(int64_t s) const {
    return (s / inner) * classes * inner + s % inner;
  }
};

llvm::Expected<LossShape> getLossShape(const KernelCall &call,
                                       const TensorView &scores,
                                       const TensorView &labels,
                                       const TensorView *weights) {
  llvm::ArrayRef<int64_t> s = scores.getShape(), l = labels.getShape();
  if (s.size() < 2 || l.size() != s.size() - 1 || l[0] != s[0] ||
      l.drop_front() != s.drop_front(2))
    return call.error("scores " + shapeString(s) + " and labels " +
                      shapeString(l) +
                      " do not match ([N,C,D...] against [N,D...])");
  LossShape shape;
  shape.batch = s[0];
  shape.classes = s[1];
  shape.inner = product(s.drop_front(2));
  if (weights &&
      (weights->getRank() != 1 || weights->getDim(0) != shape.classes))
    return call.error("weights must be a vector of C = " +
                      llvm::Twine(shape.classes) + " elements");
  return shape;
}

/// Reads every label as int64 into a scratch tensor, checking it is a class
/// or the ignored label.
llvm::Expected<TensorBuffer> readLabels(const KernelCall &call,
                                        const TensorView &labels,
                                        int64_t classes,
                                        std::optional<int64_t> ignoreIndex) {
  auto buffer =
      call.getContext().allocateScratch(DType::I64, labels.getShape());
  if (!buffer)
    return buffer.takeError();
  int64_t *values = buffer->getView().getDataAs<int64_t>();
  llvm::Error err = dispatchIndex(
      call, labels.getDType(),
      [&](auto tag) -> llvm::Error {
        using I = typename decltype(tag)::type;
        const I *data = labels.getDataAs<I>();
        for (int64_t i = 0, e = labels.getNumElements(); i < e; ++i) {
          int64_t label = static_cast<int64_t>(data[i]);
          if ((!ignoreIndex || label != *ignoreIndex) &&
              (label < 0 || label >= classes))
            return call.error("label " + llvm::Twine(label) +
                              " is out of range [0, " + llvm::Twine(classes) +
                              ")");
          values[i] = label;
        }
        return llvm::Error::success();
      },
      "labels");
  if (err)
    return err;
  return buffer;
}

/// Scratch for per-sample losses, accumulated in double.
llvm::Expected<TensorBuffer> allocatePerSample(const KernelCall &call,
                                               int64_t samples) {
  return call.getContext().allocateScratch(DType::F64, {samples});
}

/// Weight of sample label \p label (1 without weights); 0 when ignored.
template <typename T>
inline double sampleWeight(int64_t label, std::optional<int64_t> ignoreIndex,
                           const T *weights) {
  if (ignoreIndex && label == *ignoreIndex)
    return 0;
  return weights ? weights[label] : 1.0;
}

/// Writes the reduced (or per-sample) loss into \p out.
llvm::Error storeLoss(const KernelCall &call, TensorView &out,
                      const TensorView &perSampleView, double weightSum,
                      LossReduction reduction,
                      llvm::ArrayRef<int64_t> labelShape) {
  llvm::ArrayRef<double> perSample(perSampleView.getDataAs<double>(),
                                   perSampleView.getNumElements());
  // The loss in the output's element type (float32, or float64).
  auto store = [&](size_t i, double value) {
    if (out.getDType() == DType::F64)
      out.getDataAs<double>()[i] = value;
    else
      out.getDataAs<float>()[i] = static_cast<float>(value);
  };
  if (reduction == LossReduction::None) {
    if (llvm::Error err = checkOutputShape(call, 0, labelShape))
      return err;
    for (size_t i = 0; i < perSample.size(); ++i)
      store(i, perSample[i]);
    return llvm::Error::success();
  }
  if (out.getNumElements() != 1)
    return call.error("a reduced loss must have one element");
  double sum = 0;
  for (double value : perSample)
    sum += value;
  // A mean over nothing (every label ignored, an empty batch) is 0/0 = NaN,
  // as in PyTorch: a silent 0 would look like a perfect fit.
  if (reduction == LossReduction::Mean)
    sum /= weightSum;
  store(0, sum);
  return llvm::Error::success();
}

/// SoftmaxCrossEntropyLoss(scores, labels, weights?) and the Internal
/// variant (ignore_index as input 3) -> (loss, log_prob?).
template <bool Internal, typename T>
llvm::Error sceLossKernelTyped(KernelCall &call) {
  const TensorView &scores = *call.in(0), &labels = *call.in(1);
  const TensorView *weights = call.in(2);
  TensorView &out = *call.out(0);
  TensorView *logProb = call.out(1);
  LossReduction reduction = getReduction(call);
  auto ignoreIndex = getIgnoreIndex(call, Internal ? std::optional<unsigned>(3)
                                                   : std::nullopt);
  if (!ignoreIndex)
    return ignoreIndex.takeError();
  auto shape = getLossShape(call, scores, labels, weights);
  if (!shape)
    return shape.takeError();
  for (const TensorView *t :
       {&scores, weights, static_cast<const TensorView *>(&out),
        static_cast<const TensorView *>(logProb)})
    if (t)
      if (llvm::Error err =
              checkDType(call, *t, dtypeOf<T>(), "scores, weights and outputs"))
        return err;
  if (logProb)
    if (llvm::Error err = checkOutputShape(call, 1, scores.getShape()))
      return err;
  auto labelValues = readLabels(call, labels, shape->classes, *ignoreIndex);
  if (!labelValues)
    return labelValues.takeError();
  const int64_t *labelData = labelValues->getView().getDataAs<int64_t>();
  const T *x = scores.getDataAs<T>();
  const T *w = weights ? weights->getDataAs<T>() : nullptr;
  T *lp = logProb ? logProb->getDataAs<T>() : nullptr;
  int64_t classes = shape->classes, inner = shape->inner;
  auto perSampleBuffer = allocatePerSample(call, shape->samples());
  if (!perSampleBuffer)
    return perSampleBuffer.takeError();
  double *perSample = perSampleBuffer->getView().getDataAs<double>();
  parallelFor(call.getNumThreads(), shape->samples(), grainFor(8 * classes),
              [&](int64_t lo, int64_t hi) {
                for (int64_t s = lo; s < hi; ++s) {
                  const T *row = x + shape->base(s);
                  T shift;
                  if (inner == 1) {
                    T maxValue = rowMax(row, classes);
                    shift = maxValue +
                            std::log(rowExpShiftedSum(row, classes, maxValue));
                  } else {
                    T maxValue = row[0];
                    for (int64_t c = 1; c < classes; ++c)
                      maxValue = std::max(maxValue, row[c * inner]);
                    T sum = 0;
                    for (int64_t c = 0; c < classes; ++c)
                      sum += std::exp(row[c * inner] - maxValue);
                    shift = maxValue + std::log(sum);
                  }
                  // The loss reads the row before log_prob is written: the
                  // planner may give log_prob the scores' buffer
                  // (TraitRowwise).
                  int64_t label = labelData[s];
                  double weight = sampleWeight(label, *ignoreIndex, w);
                  perSample[s] =
                      weight == 0
                          ? 0.0
                          : -static_cast<double>(row[label * inner] - shift) *
                                weight;
                  if (lp) {
                    T *lpRow = lp + shape->base(s);
                    if (inner == 1)
                      rowShift(row, lpRow, classes, shift);
                    else
                      for (int64_t c = 0; c < classes; ++c)
                        lpRow[c * inner] = row[c * inner] - shift;
                  }
                }
              });
  double weightSum = 0;
  for (int64_t s = 0; s < shape->samples(); ++s)
    weightSum += sampleWeight(labelData[s], *ignoreIndex, w);
  return storeLoss(call, out, perSampleBuffer->getView(), weightSum, reduction,
                   labels.getShape());
}

/// sceLossKernel in float64 when its first operand is float64, else in float32.
template <bool Internal> llvm::Error sceLossKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return sceLossKernelTyped<Internal, double>(call);
  return sceLossKernelTyped<Internal, float>(call);
}

/// NegativeLogLikelihoodLoss(input, target, weight?) -> loss, and ONNX
/// Runtime's Internal variants (ignore_index as input 3).
template <bool Internal, typename T>
llvm::Error nllLossKernelTyped(KernelCall &call) {
  const TensorView &input = *call.in(0), &target = *call.in(1);
  const TensorView *weights = call.in(2);
  TensorView &out = *call.out(0);
  LossReduction reduction = getReduction(call);
  auto ignoreIndex = getIgnoreIndex(call, Internal ? std::optional<unsigned>(3)
                                                   : std::nullopt);
  if (!ignoreIndex)
    return ignoreIndex.takeError();
  auto shape = getLossShape(call, input, target, weights);
  if (!shape)
    return shape.takeError();
  for (const TensorView *t :
       {&input, weights, static_cast<const TensorView *>(&out)})
    if (t)
      if (llvm::Error err =
              checkDType(call, *t, dtypeOf<T>(), "input, weight and loss"))
        return err;
  auto labelValues = readLabels(call, target, shape->classes, *ignoreIndex);
  if (!labelValues)
    return labelValues.takeError();
  const int64_t *labelData = labelValues->getView().getDataAs<int64_t>();
  const T *x = input.getDataAs<T>();
  const T *w = weights ? weights->getDataAs<T>() : nullptr;
  auto perSampleBuffer = allocatePerSample(call, shape->samples());
  if (!perSampleBuffer)
    return perSampleBuffer.takeError();
  double *perSample = perSampleBuffer->getView().getDataAs<double>();
  double weightSum = 0;
  for (int64_t s = 0; s < shape->samples(); ++s) {
    int64_t label = labelData[s];
    double weight = sampleWeight(label, *ignoreIndex, w);
    perSample[s] =
        weight == 0 ? 0.0 : -x[shape->base(s) + label * shape->inner] * weight;
    weightSum += weight;
  }
  return storeLoss(call, out, perSampleBuffer->getView(), weightSum, reduction,
                   target.getShape());
}

/// nllLossKernel in float64 when its first operand is float64, else in float32.
template <bool Internal> llvm::Error nllLossKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return nllLossKernelTyped<Internal, double>(call);
  return nllLossKernelTyped<Internal, float>(call);
}

/// SoftmaxCrossEntropyLossGrad(dY, log_prob, label, weight?) and the
/// Internal variant (ignore_index input 4, bias input 5) -> d_logits =
/// (softmax - onehot(label)) * weight * dY (scaled by 1/weightSum for mean).
template <bool Internal, typename T>
llvm::Error sceLossGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0), &logProb = *call.in(1),
                   &labels = *call.in(2);
  const TensorView *weights = call.in(3);
  const TensorView *bias = Internal ? call.in(5) : nullptr;
  TensorView &dX = *call.out(0);
  LossReduction reduction = getReduction(call);
  auto ignoreIndex = getIgnoreIndex(call, Internal ? std::optional<unsigned>(4)
                                                   : std::nullopt);
  if (!ignoreIndex)
    return ignoreIndex.takeError();
  auto shape = getLossShape(call, logProb, labels, weights);
  if (!shape)
    return shape.takeError();
  for (const TensorView *t :
       {&dY, &logProb, weights, bias, static_cast<const TensorView *>(&dX)})
    if (t)
      if (llvm::Error err = checkDType(call, *t, dtypeOf<T>(),
                                       "dY, log_prob, weight, bias and dX"))
        return err;
  if (llvm::Error err = checkOutputShape(call, 0, logProb.getShape()))
    return err;
  if (bias && bias->getShape() != logProb.getShape())
    return call.error("bias must have log_prob's shape");
  if (reduction == LossReduction::None ? dY.getShape() != labels.getShape()
                                       : dY.getNumElements() != 1)
    return call.error("dY has shape " + shapeString(dY.getShape()) +
                      ", which does not fit the reduction");
  auto labelValues = readLabels(call, labels, shape->classes, *ignoreIndex);
  if (!labelValues)
    return labelValues.takeError();
  const int64_t *labelData = labelValues->getView().getDataAs<int64_t>();
  const T *g = dY.getDataAs<T>();
  const T *lp = logProb.getDataAs<T>();
  const T *w = weights ? weights->getDataAs<T>() : nullptr;
  const T *b = bias ? bias->getDataAs<T>() : nullptr;
  T *out = dX.getDataAs<T>();
  double scale = 1;
  if (reduction == LossReduction::Mean) {
    double weightSum = 0;
    for (int64_t s = 0; s < shape->samples(); ++s)
      weightSum += sampleWeight(labelData[s], *ignoreIndex, w);
    if (weightSum != 0)
      scale = 1 / weightSum;
  }
  int64_t classes = shape->classes, inner = shape->inner;
  parallelFor(
      call.getNumThreads(), shape->samples(), grainFor(4 * classes),
      [&](int64_t lo, int64_t hi) {
        for (int64_t s = lo; s < hi; ++s) {
          int64_t base = shape->base(s);
          int64_t label = labelData[s];
          double weight = sampleWeight(label, *ignoreIndex, w);
          T factor = static_cast<T>(weight * (reduction == LossReduction::None
                                                  ? g[s]
                                                  : g[0] * scale));
          if constexpr (std::is_same_v<T, float>) {
            if (inner == 1 && weight != 0) {
              // (e^lp - onehot) * factor (+ bias), four classes at a time.
              const F32x4 f = splatF32x4(factor), one = splatF32x4(1.0f),
                          zero = splatF32x4(0.0f);
              int64_t c = 0;
              for (; c + kF32Lanes <= classes; c += kF32Lanes) {
                I32x4 lane = I32x4{0, 1, 2, 3} + static_cast<int32_t>(c);
                F32x4 onehot =
                    selectF32x4(lane == static_cast<int32_t>(label), one, zero);
                F32x4 value = (expF32x4(loadF32x4(lp + base + c)) - onehot) * f;
                if (b)
                  value += loadF32x4(b + base + c);
                storeF32x4(out + base + c, value);
              }
              for (; c < classes; ++c) {
                T e = expF32x4(splatF32x4(lp[base + c]))[0];
                T value = (e - (c == label ? T(1) : T(0))) * factor;
                out[base + c] = b ? value + b[base + c] : value;
              }
              continue;
            }
          }
          for (int64_t c = 0; c < classes; ++c) {
            int64_t i = base + c * inner;
            T value =
                weight == 0
                    ? T(0)
                    : (std::exp(lp[i]) - (c == label ? T(1) : T(0))) * factor;
            out[i] = b ? value + b[i] : value;
          }
        }
      });
  return llvm::Error::success();
}

/// sceLossGradKernel in float64 when its first operand is float64, else in
/// float32.
template <bool Internal> llvm::Error sceLossGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return sceLossGradKernelTyped<Internal, double>(call);
  return sceLossGradKernelTyped<Internal, float>(call);
}

/// com.microsoft SoftmaxCrossEntropy(logits, label) -> (loss, log_prob?):
/// dense labels (one probability row per sample) over the last dimension;
/// mean divides by the number of samples.
template <typename T> llvm::Error denseSceKernelTyped(KernelCall &call) {
  const TensorView &logits = *call.in(0), &labels = *call.in(1);
  TensorView &out = *call.out(0);
  TensorView *logProb = call.out(1);
  LossReduction reduction = getReduction(call);
  if (llvm::Error err =
          checkSameShape(call, logits, labels, "logits and label"))
    return err;
  for (const TensorView *t :
       {&logits, &labels, static_cast<const TensorView *>(&out),
        static_cast<const TensorView *>(logProb)})
    if (t)
      if (llvm::Error err =
              checkDType(call, *t, dtypeOf<T>(), "logits, label and outputs"))
        return err;
  if (logits.getRank() == 0)
    return call.error("logits must have rank >= 1");
  if (logProb)
    if (llvm::Error err = checkOutputShape(call, 1, logits.getShape()))
      return err;
  int64_t classes = logits.getShape().back();
  int64_t samples = classes ? logits.getNumElements() / classes : 0;
  auto perSampleBuffer = allocatePerSample(call, samples);
  if (!perSampleBuffer)
    return perSampleBuffer.takeError();
  double *perSample = perSampleBuffer->getView().getDataAs<double>();
  const T *x = logits.getDataAs<T>(), *l = labels.getDataAs<T>();
  T *lp = logProb ? logProb->getDataAs<T>() : nullptr;
  parallelFor(call.getNumThreads(), samples, grainFor(8 * classes),
              [&](int64_t lo, int64_t hi) {
                for (int64_t s = lo; s < hi; ++s) {
                  const T *row = x + s * classes;
                  T maxValue = row[0];
                  for (int64_t c = 1; c < classes; ++c)
                    maxValue = std::max(maxValue, row[c]);
                  T sum = 0;
                  for (int64_t c = 0; c < classes; ++c)
                    sum += std::exp(row[c] - maxValue);
                  T shift = maxValue + std::log(sum);
                  double loss = 0;
                  for (int64_t c = 0; c < classes; ++c) {
                    T value = row[c] - shift;
                    if (lp)
                      lp[s * classes + c] = value;
                    loss -= static_cast<double>(l[s * classes + c]) * value;
                  }
                  perSample[s] = loss;
                }
              });
  llvm::SmallVector<int64_t, 6> sampleShape(logits.getShape().drop_back());
  return storeLoss(call, out, perSampleBuffer->getView(),
                   static_cast<double>(samples), reduction, sampleShape);
}

/// denseSceKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error denseSceKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return denseSceKernelTyped<double>(call);
  return denseSceKernelTyped<float>(call);
}

/// com.microsoft SoftmaxCrossEntropyGrad(dY, log_prob, label) -> d_logits =
/// (softmax * sum(label) - label) * dY (divided by the sample count for
/// mean).
template <typename T> llvm::Error denseSceGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0), &logProb = *call.in(1),
                   &labels = *call.in(2);
  TensorView &dX = *call.out(0);
  LossReduction reduction = getReduction(call);
  if (llvm::Error err =
          checkSameShape(call, logProb, labels, "log_prob and label"))
    return err;
  if (llvm::Error err = checkOutputShape(call, 0, logProb.getShape()))
    return err;
  for (const TensorView *t :
       {&dY, &logProb, &labels, static_cast<const TensorView *>(&dX)})
    if (llvm::Error err = checkDType(call, *t, dtypeOf<T>(), "operands"))
      return err;
  if (logProb.getRank() == 0)
    return call.error("log_prob must have rank >= 1");
  int64_t classes = logProb.getShape().back();
  int64_t samples = classes ? logProb.getNumElements() / classes : 0;
  bool perSample = reduction == LossReduction::None;
  if (perSample ? dY.getNumElements() != samples : dY.getNumElements() != 1)
    return call.error("dY has shape " + shapeString(dY.getShape()) +
                      ", which does not fit the reduction");
  const T *g = dY.getDataAs<T>(), *lp = logProb.getDataAs<T>();
  const T *l = labels.getDataAs<T>();
  T *out = dX.getDataAs<T>();
  double scale =
      reduction == LossReduction::Mean && samples ? 1.0 / samples : 1.0;
  parallelFor(call.getNumThreads(), samples, grainFor(4 * classes),
              [&](int64_t lo, int64_t hi) {
                for (int64_t s = lo; s < hi; ++s) {
                  T labelSum = 0;
                  for (int64_t c = 0; c < classes; ++c)
                    labelSum += l[s * classes + c];
                  T factor = static_cast<T>((perSample ? g[s] : g[0]) * scale);
                  for (int64_t c = 0; c < classes; ++c) {
                    int64_t i = s * classes + c;
                    out[i] = (std::exp(lp[i]) * labelSum - l[i]) * factor;
                  }
                }
              });
  return llvm::Error::success();
}

/// denseSceGradKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error denseSceGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return denseSceGradKernelTyped<double>(call);
  return denseSceGradKernelTyped<float>(call);
}

/// Elements of operand \p index (0 when absent).
int64_t operandElements(const Node &node, unsigned index) {
  const Value *value =
      index < node.getNumOperands() ? node.getOperand(index) : nullptr;
  return value ? value->getType().getNumElements() : 0;
}

/// Scratch of the label-indexed losses: the labels widened to i64
/// (readLabels) and, for the forward losses, the per-sample losses in f64
/// (allocatePerSample); one sample per label.
template <unsigned LabelsOperand, bool PerSample>
uint64_t labelLossWorkspace(const Node &node) {
  int64_t samples = operandElements(node, LabelsOperand);
  return addScratch(scratchBytes(DType::I64, samples),
                    PerSample ? scratchBytes(DType::F64, samples) : 0);
}

/// Scratch of the dense-label cross entropy: per-sample losses, one per row
/// of the last dimension.
uint64_t denseSceWorkspace(const Node &node) {
  const Value *logits = node.getOperand(0);
  if (!logits || logits->getType().getRank() == 0)
    return 0;
  int64_t classes = logits->getType().getStaticShape().back();
  return scratchBytes(DType::F64,
                      classes ? operandElements(node, 0) / classes : 0);
}

} // namespace

void cpu::registerLossKernels(KernelTable &table) {
  table.add("", "SoftmaxCrossEntropyLoss", sceLossKernel<false>);
  table.add("", "NegativeLogLikelihoodLoss", nllLossKernel<false>);
  table.add(kMsDomain, "NegativeLogLikelihoodLossInternal",
            nllLossKernel<true>);
  table.add(kMsDomain, "NegativeLogLikelihoodLossInternal2",
            nllLossKernel<true>);
  table.add(kMsDomain, "SoftmaxCrossEntropyLossInternal", sceLossKernel<true>);
  table.add(kMsDomain, "SoftmaxCrossEntropyLossGrad", sceLossGradKernel<false>);
  table.add(kMsDomain, "SoftmaxCrossEntropyLossInternalGrad",
            sceLossGradKernel<true>);
  table.add(kMsDomain, "SoftmaxCrossEntropy", denseSceKernel);
  table.add(kMsDomain, "SoftmaxCrossEntropyGrad", denseSceGradKernel);
  table.setWorkspace("", "SoftmaxCrossEntropyLoss",
                     labelLossWorkspace<1, true>);
  table.setWorkspace("", "NegativeLogLikelihoodLoss",
                     labelLossWorkspace<1, true>);
  for (const char *op : {"NegativeLogLikelihoodLossInternal",
                         "NegativeLogLikelihoodLossInternal2",
                         "SoftmaxCrossEntropyLossInternal"})
    table.setWorkspace(kMsDomain, op, labelLossWorkspace<1, true>);
  for (const char *op :
       {"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad"})
    table.setWorkspace(kMsDomain, op, labelLossWorkspace<2, false>);
  table.setWorkspace(kMsDomain, "SoftmaxCrossEntropy", denseSceWorkspace);
  for (const char *op :
       {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
    table.setPrepare("", op, prepareLoss);
  for (const char *op :
       {"NegativeLogLikelihoodLossInternal",
        "NegativeLogLikelihoodLossInternal2", "SoftmaxCrossEntropyLossInternal",
        "SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad",
        "SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad"})
    table.setPrepare(kMsDomain, op, prepareLoss);
}
