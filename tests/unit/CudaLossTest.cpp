//===- CudaLossTest.cpp - The losses and BiasDropout on CUDA --------------===//
//
// The CUDA losses (backend/cuda/CudaLossDispatch.cpp, LossKernels.cu) and
// BiasDropout (CudaDropoutDispatch.cpp, BiasDropoutKernels.cu). Without
// a GPU: LossMath.h's and BiasDropoutMath.h's arithmetic, composed on the
// host the way the kernels compose it, gives the CPU kernels' results
// (backend/cpu/LossKernels.cpp, DropoutKernels.cpp) over ignore_index,
// weights, every reduction, a mean with every label ignored and 16-bit
// tensors: bit for bit where the CPU kernel runs scalar loops, within a
// stated tolerance where it runs vector exponentials. BiasDropout's mask
// and output equal the CPU's bit for bit. The prepare-time checks refuse
// what the kernels cannot run. With a GPU: the CUDA kernels equal the CPU
// backend's (skipped here).
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/BiasDropoutMath.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/LossMath.h"
#include "ir/Half.h"
#include "ir/Module.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <optional>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::LabelKind;
using cuda::LossFloat;
using cuda::LossOutput;
using cuda::LossReduction;
using cuda::LossTensor;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

HostTensor ofType(DType dtype, std::vector<int64_t> shape,
                  const std::vector<float> &values) {
  if (dtype == DType::F16)
    return HostTensor::f16(std::move(shape), values);
  if (dtype == DType::BF16)
    return HostTensor::bf16(std::move(shape), values);
  return HostTensor::f32(std::move(shape), values);
}

LossFloat lossFloatOf(DType dtype) {
  return dtype == DType::F16    ? LossFloat::F16
         : dtype == DType::BF16 ? LossFloat::BF16
                                : LossFloat::F32;
}

LossTensor lossIn(const HostTensor *t) {
  return t ? LossTensor{t->bytes.data(), lossFloatOf(t->dtype)} : LossTensor{};
}

/// A zeroed tensor of \p dtype and \p shape for a model's output.
HostTensor zeros(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return ofType(dtype, std::move(shape), std::vector<float>(n, 0.0f));
}

LossOutput lossOut(HostTensor &t) {
  return LossOutput{t.bytes.data(), lossFloatOf(t.dtype)};
}

int64_t elementsOf(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const char *reductionName(LossReduction r) {
  return r == LossReduction::None  ? "none"
         : r == LossReduction::Sum ? "sum"
                                   : "mean";
}

/// Expects \p actual to equal \p expected element for element: bit for bit
/// when \p tolerance is 0 (NaN matching NaN), else within \p tolerance *
/// (1 + |expected|).
void expectClose(const HostTensor &actual, const HostTensor &expected,
                 double tolerance, const std::string &what) {
  std::vector<float> a = actual.floats(), e = expected.floats();
  ASSERT_EQ(a.size(), e.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << " element " << i;
      continue;
    }
    if (tolerance == 0) {
      EXPECT_EQ(std::memcmp(&a[i], &e[i], sizeof(float)), 0)
          << what << " element " << i << ": " << a[i] << " vs " << e[i];
    } else {
      EXPECT_NEAR(a[i], e[i], tolerance * (1 + std::fabs(e[i])))
          << what << " element " << i;
    }
  }
}

//===----------------------------------------------------------------------===//
// Label-indexed losses
//===----------------------------------------------------------------------===//

/// One label-indexed loss problem.
struct LabelCase {
  const char *name;
  std::vector<int64_t> scoreShape;
  std::vector<int64_t> labels;
  /// Empty: no weights.
  std::vector<float> weights;
  std::optional<int64_t> ignoreIndex;
};

const LabelCase kLabelCases[] = {
    // An ignored label outside [0, C), with weights.
    {"weighted", {4, 5}, {0, 3, -100, 4}, {0.5f, 1, 2, 0.25f, 3}, -100},
    // [N, C, D]: samples strided by D; an ignored label inside [0, C).
    {"spatial", {2, 3, 4}, {0, 1, 2, 1, 2, 2, 0, 1}, {}, 1},
    // Weights with a zero weight; no ignore_index.
    {"zero weight", {3, 6, 2}, {5, 0, 1, 2, 3, 4}, {1, 0, 2, 3, 0.5f, 1}, {}},
    // Every label ignored: the mean is 0/0 = NaN, the gradient zero.
    {"all ignored", {3, 4}, {2, 2, 2}, {1, 2, 3, 4}, 2},
};

std::vector<int64_t> labelShapeOf(llvm::ArrayRef<int64_t> scoreShape) {
  std::vector<int64_t> shape = {scoreShape[0]};
  shape.insert(shape.end(), scoreShape.begin() + 2, scoreShape.end());
  return shape;
}

cuda::LabelRule ruleOf(const LabelCase &c) {
  cuda::LabelRule rule;
  rule.classes = c.scoreShape[1];
  rule.hasIgnoreIndex = c.ignoreIndex.has_value();
  rule.ignoreIndex = c.ignoreIndex.value_or(0);
  return rule;
}

int64_t innerOf(const LabelCase &c) {
  return elementsOf(llvm::ArrayRef<int64_t>(c.scoreShape).drop_front(2));
}

int64_t baseOf(const LabelCase &c, int64_t s) {
  int64_t inner = innerOf(c);
  return (s / inner) * c.scoreShape[1] * inner + s % inner;
}

std::vector<NamedAttribute> lossAttrs(const LabelCase &c, LossReduction r,
                                      bool ignoreAsAttr) {
  std::vector<NamedAttribute> attrs = {
      stringAttr("reduction", reductionName(r))};
  if (ignoreAsAttr && c.ignoreIndex)
    attrs.push_back(intAttr("ignore_index", *c.ignoreIndex));
  return attrs;
}

std::vector<int64_t> lossShapeOf(const LabelCase &c, LossReduction r) {
  return r == LossReduction::None ? labelShapeOf(c.scoreShape)
                                  : std::vector<int64_t>{};
}

/// The NLL kernels of LossKernels.cu on the host (sequential sums).
HostTensor modelNll(const LabelCase &c, const HostTensor &input,
                    const HostTensor *weights, LossReduction r, DType out) {
  HostTensor loss = zeros(out, lossShapeOf(c, r));
  LossOutput o = lossOut(loss);
  LossTensor x = lossIn(&input), w = lossIn(weights);
  cuda::LabelRule rule = ruleOf(c);
  double lossSum = 0, weightSum = 0;
  for (size_t s = 0; s < c.labels.size(); ++s) {
    int64_t label = c.labels[s];
    float weight =
        cuda::sampleWeight(cuda::classifyLabel(rule, label), label, w);
    float picked =
        weight != 0 ? x.load(baseOf(c, s) + label * innerOf(c)) : 0.0f;
    double value = cuda::nllSampleLoss(picked, weight);
    if (r == LossReduction::None)
      o.store(s, static_cast<float>(value));
    lossSum += value;
    weightSum += weight;
  }
  if (r != LossReduction::None)
    o.store(0, cuda::reducedLoss(lossSum, weightSum, r));
  return loss;
}

TEST(CudaLossTest, NllMathIsTheCpuKernel) {
  unsigned seed = 1;
  for (const LabelCase &c : kLabelCases)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (LossReduction r :
           {LossReduction::None, LossReduction::Sum, LossReduction::Mean})
        for (bool internal : {false, true}) {
          SCOPED_TRACE(std::string(c.name) + " " + dtypeName(dtype).str() +
                       " " + reductionName(r) + (internal ? " Internal" : ""));
          HostTensor input =
              ofType(dtype, c.scoreShape,
                     randomFloats(elementsOf(c.scoreShape), ++seed, -3, 0));
          HostTensor labels =
              HostTensor::i64(labelShapeOf(c.scoreShape), c.labels);
          HostTensor weights = ofType(dtype, {c.scoreShape[1]}, c.weights);
          HostTensor ignore = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
          const HostTensor *w = c.weights.empty() ? nullptr : &weights;
          std::vector<HostTensor *> inputs = {&input, &labels,
                                              const_cast<HostTensor *>(w)};
          if (internal)
            inputs.push_back(c.ignoreIndex ? &ignore : nullptr);
          KernelRunner runner;
          auto cpu =
              runner.run(internal ? kMsDomain : "",
                         internal ? "NegativeLogLikelihoodLossInternal2"
                                  : "NegativeLogLikelihoodLoss",
                         inputs, {TensorType::get(dtype, lossShapeOf(c, r))},
                         lossAttrs(c, r, !internal));
          ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
          expectClose(modelNll(c, input, w, r, dtype), (*cpu)[0], 0, "loss");
          if (std::string(c.name) == "all ignored" &&
              r == LossReduction::Mean) {
            EXPECT_TRUE(std::isnan((*cpu)[0].floats()[0]));
          }
        }
}

/// The SoftmaxCrossEntropyLoss kernels of LossKernels.cu on the host: the
/// row statistics per sample (the exp-sum in double, as the warp sums),
/// the sums sequential.
std::pair<HostTensor, HostTensor>
modelCrossEntropy(const LabelCase &c, const HostTensor &scores,
                  const HostTensor *weights, LossReduction r, DType out) {
  HostTensor loss = zeros(out, lossShapeOf(c, r));
  HostTensor logProb = zeros(out, c.scoreShape);
  LossOutput o = lossOut(loss), lp = lossOut(logProb);
  LossTensor x = lossIn(&scores), w = lossIn(weights);
  cuda::LabelRule rule = ruleOf(c);
  int64_t inner = innerOf(c), classes = c.scoreShape[1];
  double lossSum = 0, weightSum = 0;
  for (size_t s = 0; s < c.labels.size(); ++s) {
    int64_t base = baseOf(c, s), label = c.labels[s];
    float rowMax = -FLT_MAX;
    for (int64_t k = 0; k < classes; ++k)
      rowMax = std::fmax(rowMax, x.load(base + k * inner));
    double expSum = 0;
    for (int64_t k = 0; k < classes; ++k)
      expSum += cuda::lossExp(x.load(base + k * inner) - rowMax);
    float shift = cuda::logSoftmaxShift(rowMax, static_cast<float>(expSum));
    LabelKind kind = cuda::classifyLabel(rule, label);
    float weight = cuda::sampleWeight(kind, label, w);
    float picked =
        kind == LabelKind::Counted ? x.load(base + label * inner) : 0;
    double value = cuda::crossEntropySampleLoss(picked, shift, weight);
    if (r == LossReduction::None)
      o.store(s, static_cast<float>(value));
    lossSum += value;
    weightSum += weight;
    for (int64_t k = 0; k < classes; ++k)
      lp.store(base + k * inner, x.load(base + k * inner) - shift);
  }
  if (r != LossReduction::None)
    o.store(0, cuda::reducedLoss(lossSum, weightSum, r));
  return {std::move(loss), std::move(logProb)};
}

TEST(CudaLossTest, CrossEntropyMathIsTheCpuKernel) {
  // The CPU kernel sums vector exponentials in fp32, the model (and the
  // CUDA kernel) scalar ones in double: a few fp32 ulps apart; 16-bit
  // outputs are a rounding of those apart at most.
  unsigned seed = 100;
  for (const LabelCase &c : kLabelCases)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (LossReduction r :
           {LossReduction::None, LossReduction::Sum, LossReduction::Mean})
        for (bool internal : {false, true}) {
          SCOPED_TRACE(std::string(c.name) + " " + dtypeName(dtype).str() +
                       " " + reductionName(r) + (internal ? " Internal" : ""));
          HostTensor scores =
              ofType(dtype, c.scoreShape,
                     randomFloats(elementsOf(c.scoreShape), ++seed, -4, 4));
          HostTensor labels = HostTensor::i32(
              labelShapeOf(c.scoreShape),
              std::vector<int32_t>(c.labels.begin(), c.labels.end()));
          HostTensor weights = ofType(dtype, {c.scoreShape[1]}, c.weights);
          HostTensor ignore = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
          const HostTensor *w = c.weights.empty() ? nullptr : &weights;
          std::vector<HostTensor *> inputs = {&scores, &labels,
                                              const_cast<HostTensor *>(w)};
          if (internal)
            inputs.push_back(c.ignoreIndex ? &ignore : nullptr);
          KernelRunner runner;
          auto cpu = runner.run(internal ? kMsDomain : "",
                                internal ? "SoftmaxCrossEntropyLossInternal"
                                         : "SoftmaxCrossEntropyLoss",
                                inputs,
                                {TensorType::get(dtype, lossShapeOf(c, r)),
                                 TensorType::get(dtype, c.scoreShape)},
                                lossAttrs(c, r, !internal));
          ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
          auto [loss, logProb] = modelCrossEntropy(c, scores, w, r, dtype);
          double tolerance = dtype == DType::F32   ? 2e-6
                             : dtype == DType::F16 ? 1e-3
                                                   : 8e-3;
          expectClose(loss, (*cpu)[0], tolerance, "loss");
          expectClose(logProb, (*cpu)[1], tolerance, "log_prob");
        }
}

/// The SoftmaxCrossEntropyLossGrad kernel on the host.
HostTensor modelCrossEntropyGrad(const LabelCase &c, const HostTensor &dY,
                                 const HostTensor &logProb,
                                 const HostTensor *weights,
                                 const HostTensor *bias, LossReduction r,
                                 DType out) {
  HostTensor dX = zeros(out, c.scoreShape);
  LossOutput o = lossOut(dX);
  LossTensor g = lossIn(&dY), lp = lossIn(&logProb), w = lossIn(weights),
             b = lossIn(bias);
  cuda::LabelRule rule = ruleOf(c);
  double weightSum = 0;
  for (int64_t label : c.labels)
    weightSum += cuda::sampleWeight(cuda::classifyLabel(rule, label), label, w);
  double scale = cuda::meanGradientScale(weightSum, r);
  int64_t inner = innerOf(c), classes = c.scoreShape[1];
  for (size_t s = 0; s < c.labels.size(); ++s) {
    int64_t base = baseOf(c, s), label = c.labels[s];
    float weight =
        cuda::sampleWeight(cuda::classifyLabel(rule, label), label, w);
    float factor = cuda::gradientFactor(
        weight, g.load(r == LossReduction::None ? s : 0), scale, r);
    for (int64_t k = 0; k < classes; ++k) {
      int64_t i = base + k * inner;
      o.store(i, cuda::crossEntropyGradElement(lp.load(i), k == label, weight,
                                               factor, b.present(),
                                               b.present() ? b.load(i) : 0));
    }
  }
  return dX;
}

TEST(CudaLossTest, CrossEntropyGradMathIsTheCpuKernel) {
  unsigned seed = 200;
  for (const LabelCase &c : kLabelCases)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (LossReduction r :
           {LossReduction::None, LossReduction::Sum, LossReduction::Mean})
        for (bool internal : {false, true}) {
          SCOPED_TRACE(std::string(c.name) + " " + dtypeName(dtype).str() +
                       " " + reductionName(r) + (internal ? " Internal" : ""));
          std::vector<int64_t> lossShape = lossShapeOf(c, r);
          HostTensor dY =
              ofType(dtype, lossShape,
                     randomFloats(elementsOf(lossShape), ++seed, 0.5f, 2));
          HostTensor logProb =
              ofType(dtype, c.scoreShape,
                     randomFloats(elementsOf(c.scoreShape), ++seed, -4, -0.1f));
          HostTensor labels =
              HostTensor::i64(labelShapeOf(c.scoreShape), c.labels);
          HostTensor weights = ofType(dtype, {c.scoreShape[1]}, c.weights);
          HostTensor ignore = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
          HostTensor bias =
              ofType(dtype, c.scoreShape,
                     randomFloats(elementsOf(c.scoreShape), ++seed, -1, 1));
          const HostTensor *w = c.weights.empty() ? nullptr : &weights;
          std::vector<HostTensor *> inputs = {&dY, &logProb, &labels,
                                              const_cast<HostTensor *>(w)};
          if (internal) {
            inputs.push_back(c.ignoreIndex ? &ignore : nullptr);
            inputs.push_back(&bias);
          }
          KernelRunner runner;
          auto cpu = runner.run(kMsDomain,
                                internal ? "SoftmaxCrossEntropyLossInternalGrad"
                                         : "SoftmaxCrossEntropyLossGrad",
                                inputs, {TensorType::get(dtype, c.scoreShape)},
                                lossAttrs(c, r, !internal));
          ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
          HostTensor model = modelCrossEntropyGrad(
              c, dY, logProb, w, internal ? &bias : nullptr, r, dtype);
          // With D > 1 the CPU's loop is scalar: bit for bit. Its [N, C]
          // rows (16-bit ones staged as fp32) run vectors with a
          // polynomial exponential: a few fp32 ulps, or one 16-bit
          // rounding, apart.
          double tolerance = innerOf(c) > 1        ? 0
                             : dtype == DType::F32 ? 2e-6
                             : dtype == DType::F16 ? 1e-3
                                                   : 8e-3;
          expectClose(model, (*cpu)[0], tolerance, "dX");
          if (std::string(c.name) == "all ignored" && !internal) {
            for (float v : model.floats())
              EXPECT_EQ(v, 0.0f);
          }
        }
}

//===----------------------------------------------------------------------===//
// Dense-label SoftmaxCrossEntropy
//===----------------------------------------------------------------------===//

TEST(CudaLossTest, DenseCrossEntropyMathIsTheCpuKernel) {
  const std::vector<int64_t> shape = {3, 2, 7};
  int64_t n = elementsOf(shape), classes = 7, samples = n / classes;
  unsigned seed = 300;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (LossReduction r :
         {LossReduction::None, LossReduction::Sum, LossReduction::Mean}) {
      SCOPED_TRACE(dtypeName(dtype).str() + " " + reductionName(r));
      HostTensor logits = ofType(dtype, shape, randomFloats(n, ++seed, -3, 3));
      // Label rows that do not sum to one (the gradient scales by the sum).
      HostTensor labels =
          ofType(dtype, shape, randomFloats(n, ++seed, 0, 0.4f));
      std::vector<int64_t> lossShape = r == LossReduction::None
                                           ? std::vector<int64_t>{3, 2}
                                           : std::vector<int64_t>{};
      KernelRunner runner;
      auto cpu = runner.run(
          kMsDomain, "SoftmaxCrossEntropy", {&logits, &labels},
          {TensorType::get(dtype, lossShape), TensorType::get(dtype, shape)},
          {stringAttr("reduction", reductionName(r))});
      ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
      HostTensor loss = zeros(dtype, lossShape), logProb = zeros(dtype, shape);
      LossOutput o = lossOut(loss);
      double lossSum = 0;
      for (int64_t s = 0; s < samples; ++s) {
        double value = cuda::denseCrossEntropySample(
            lossIn(&logits), lossIn(&labels), lossOut(logProb), s * classes,
            classes);
        if (r == LossReduction::None)
          o.store(s, static_cast<float>(value));
        lossSum += value;
      }
      if (r != LossReduction::None)
        o.store(0, cuda::reducedLoss(lossSum, static_cast<double>(samples), r));
      expectClose(loss, (*cpu)[0], 0, "loss");
      expectClose(logProb, (*cpu)[1], 0, "log_prob");

      // The gradient of the same reduction.
      HostTensor dY =
          ofType(dtype, lossShape,
                 randomFloats(elementsOf(lossShape), ++seed, 0.5f, 2));
      auto grad = runner.run(kMsDomain, "SoftmaxCrossEntropyGrad",
                             {&dY, &(*cpu)[1], &labels},
                             {TensorType::get(dtype, shape)},
                             {stringAttr("reduction", reductionName(r))});
      ASSERT_TRUE(bool(grad)) << llvm::toString(grad.takeError());
      HostTensor dX = zeros(dtype, shape);
      LossTensor g = lossIn(&dY), lp = lossIn(&(*cpu)[1]), l = lossIn(&labels);
      double scale =
          r == LossReduction::Mean ? 1.0 / static_cast<double>(samples) : 1.0;
      for (int64_t s = 0; s < samples; ++s) {
        float labelSum = 0;
        for (int64_t k = 0; k < classes; ++k)
          labelSum += l.load(s * classes + k);
        float factor = cuda::denseGradientFactor(
            g.load(r == LossReduction::None ? s : 0), scale);
        for (int64_t k = 0; k < classes; ++k) {
          int64_t i = s * classes + k;
          lossOut(dX).store(i, cuda::denseCrossEntropyGradElement(
                                   lp.load(i), labelSum, l.load(i), factor));
        }
      }
      expectClose(dX, (*grad)[0], 0, "dX");
    }
}

//===----------------------------------------------------------------------===//
// BiasDropout
//===----------------------------------------------------------------------===//

TEST(CudaLossTest, BiasDropoutMaskAndOutputAreTheCpuKernels) {
  const std::vector<int64_t> shape = {5, 3, 13}; // 195: not a multiple of 4.
  int64_t n = elementsOf(shape), width = 13;
  unsigned seed = 400;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (bool withResidual : {false, true})
      for (float ratio : {0.0f, 0.3f, 0.75f})
        for (int training : {-1, 0, 1}) // -1: no training_mode operand.
          for (uint64_t step : {0ull, 7ull, (1ull << 33) + 5}) {
            SCOPED_TRACE(
                dtypeName(dtype).str() + " ratio " + std::to_string(ratio) +
                " training " + std::to_string(training) + " step " +
                std::to_string(step) + (withResidual ? " residual" : ""));
            HostTensor x = ofType(dtype, shape, randomFloats(n, ++seed, -3, 3));
            HostTensor bias =
                ofType(dtype, {width}, randomFloats(width, ++seed, -1, 1));
            HostTensor residual =
                ofType(dtype, shape, randomFloats(n, ++seed, -2, 2));
            HostTensor ratioTensor = HostTensor::f32({}, {ratio});
            HostTensor mode = HostTensor::boolean({}, {training == 1});
            std::vector<HostTensor *> inputs = {
                &x, &bias, withResidual ? &residual : nullptr, &ratioTensor};
            if (training >= 0)
              inputs.push_back(&mode);
            const uint64_t runSeed = 0x5eed0000abcdull, streamId = 77;
            KernelRunner runner;
            runner.getContext().setSeed(runSeed);
            runner.getContext().setStep(step);
            auto cpu = runner.run(kMsDomain, "BiasDropout", inputs,
                                  {TensorType::get(dtype, shape),
                                   TensorType::get(DType::Bool, shape)},
                                  {intAttr("seed", streamId)});
            ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
            uint8_t trainingByte = training == 1;
            cuda::BiasDropoutMode m = cuda::resolveBiasDropoutMode(
                ratio, nullptr, training >= 0 ? &trainingByte : nullptr,
                training < 0);
            PhiloxStreamKey key = makePhiloxStreamKey(runSeed, streamId, step);
            HostTensor out = zeros(dtype, shape);
            std::vector<uint8_t> mask(n);
            LossTensor xs = lossIn(&x), bs = lossIn(&bias),
                       rs = lossIn(withResidual ? &residual : nullptr);
            for (int64_t block = 0; block * 4 < n; ++block) {
              uint32_t bits = cuda::biasDropoutKeepBits(
                  key, static_cast<uint32_t>(block), m);
              for (int lane = 0; lane < 4 && block * 4 + lane < n; ++lane) {
                int64_t i = block * 4 + lane;
                bool keep = (bits >> lane) & 1u;
                mask[i] = keep;
                lossOut(out).store(
                    i, cuda::biasDropoutElement(
                           xs.load(i), bs.load(i % width), rs.present(),
                           rs.present() ? rs.load(i) : 0, keep, m));
              }
            }
            EXPECT_EQ(mask, (*cpu)[1].values<uint8_t>());
            EXPECT_EQ(out.bytes, (*cpu)[0].bytes);
          }
}

//===----------------------------------------------------------------------===//
// Prepare-time checks
//===----------------------------------------------------------------------===//

/// A one-node module of (\p domain, \p op); \p constants holds operands
/// that are initializers (nullopt: a graph input).
std::unique_ptr<Module>
oneNode(llvm::StringRef domain, llvm::StringRef op,
        std::vector<TensorType> inputs, std::vector<TensorType> results,
        std::vector<NamedAttribute> attrs, Node **node,
        std::vector<std::optional<TensorData>> constants = {}) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 18;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    if (inputs[i].getDType() == DType::Undefined)
      operands.push_back(nullptr);
    else if (i < constants.size() && constants[i])
      operands.push_back(graph.addInitializer(*constants[i], name));
    else
      operands.push_back(graph.addInput(inputs[i], name));
  }
  Builder builder(graph);
  *node = builder.create(OpName{domain.str(), op.str()}, operands, results,
                         attrs, op.str());
  if (const Attribute *seed = (*node)->getAttr("seed"))
    (*node)->setStreamId(static_cast<uint64_t>(seed->getInt()));
  assignMissingStreamIds(graph);
  for (unsigned i = 0; i < (*node)->getNumResults(); ++i)
    graph.addOutput((*node)->getResult(i));
  return module;
}

std::string refusal(llvm::StringRef domain, llvm::StringRef op,
                    std::vector<TensorType> inputs,
                    std::vector<TensorType> results,
                    std::vector<NamedAttribute> attrs = {},
                    std::vector<std::optional<TensorData>> constants = {}) {
  Node *node = nullptr;
  auto module = oneNode(domain, op, inputs, results, attrs, &node, constants);
  llvm::Error err = checkCudaNode(*node);
  return err ? llvm::toString(std::move(err)) : std::string();
}

bool mentions(const std::string &message, llvm::StringRef text) {
  return message.find(text.str()) != std::string::npos &&
         message.find("node") != std::string::npos;
}

TEST(CudaLossTest, ChecksRefuseWhatTheKernelsCannotRun) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  auto t = [](DType dtype, std::vector<int64_t> shape) {
    return TensorType::get(dtype, shape);
  };
  TensorType none;
  TensorType scores = t(DType::F32, {4, 5}), labels = t(DType::I64, {4});
  TensorType scalar = t(DType::F32, {});
  TensorData ignore = TensorData::fromValues<int64_t>(DType::I64, {}, {-1});
  // Accepted: f16 scores with an f32 loss (output_type), int32 labels,
  // a constant ignore_index, BiasDropout in bf16.
  EXPECT_EQ(refusal(kMsDomain, "SoftmaxCrossEntropyLossInternal",
                    {t(DType::F16, {4, 5}), t(DType::I32, {4}),
                     t(DType::F16, {5}), t(DType::I64, {})},
                    {scalar, t(DType::F32, {4, 5})}, {}, {{}, {}, {}, ignore}),
            "");
  EXPECT_EQ(refusal("", "NegativeLogLikelihoodLoss",
                    {t(DType::BF16, {2, 5, 3}), t(DType::I64, {2, 3})},
                    {t(DType::BF16, {2, 3})},
                    {stringAttr("reduction", "none")}),
            "");
  EXPECT_EQ(refusal(kMsDomain, "NegativeLogLikelihoodLossInternal2",
                    {scores, labels, none, t(DType::I64, {})}, {scalar}, {},
                    {{}, {}, {}, ignore}),
            "");
  EXPECT_EQ(refusal(kMsDomain, "SoftmaxCrossEntropy",
                    {t(DType::F16, {3, 4}), t(DType::F16, {3, 4})},
                    {t(DType::F16, {}), t(DType::F16, {3, 4})}),
            "");
  EXPECT_EQ(refusal(kMsDomain, "SoftmaxCrossEntropyGrad",
                    {scalar, scores, scores}, {scores}),
            "");
  EXPECT_EQ(refusal(kMsDomain, "BiasDropout",
                    {t(DType::BF16, {4, 5}), t(DType::BF16, {5}),
                     t(DType::BF16, {4, 5}), scalar, t(DType::Bool, {})},
                    {t(DType::BF16, {4, 5}), t(DType::Bool, {4, 5})}),
            "");

  // Refused, each naming the node.
  EXPECT_TRUE(
      mentions(refusal("", "NegativeLogLikelihoodLoss",
                       {t(DType::F64, {4, 5}), labels}, {t(DType::F64, {})}),
               "float64 losses run on the CPU backend"));
  EXPECT_TRUE(mentions(refusal("", "NegativeLogLikelihoodLoss",
                               {scores, t(DType::F32, {4})}, {scalar}),
                       "labels must be int64 or int32"));
  EXPECT_TRUE(mentions(refusal("", "NegativeLogLikelihoodLoss",
                               {scores, labels, t(DType::F32, {4})}, {scalar}),
                       "weights must be a vector of C = 5"));
  EXPECT_TRUE(mentions(refusal("", "NegativeLogLikelihoodLoss",
                               {scores, t(DType::I64, {5})}, {scalar}),
                       "do not match"));
  EXPECT_TRUE(mentions(refusal("", "NegativeLogLikelihoodLoss",
                               {scores, labels}, {t(DType::F32, {4})}),
                       "a reduced loss has 4 elements"));
  EXPECT_TRUE(
      mentions(refusal(kMsDomain, "NegativeLogLikelihoodLossInternal",
                       {scores, labels, none, t(DType::I64, {})}, {scalar}),
               "ignore_index must be a constant"));
  EXPECT_TRUE(mentions(refusal(kMsDomain, "SoftmaxCrossEntropyLossGrad",
                               {t(DType::F32, {3}), scores, labels}, {scores},
                               {stringAttr("reduction", "none")}),
                       "dY must have the shape of the labels"));
  EXPECT_TRUE(mentions(
      refusal(kMsDomain, "SoftmaxCrossEntropyLossInternalGrad",
              {scalar, scores, labels, none, none, t(DType::F32, {4, 4})},
              {scores}),
      "bias must have the shape of log_prob"));
  EXPECT_TRUE(
      mentions(refusal(kMsDomain, "SoftmaxCrossEntropy",
                       {scores, t(DType::F32, {4, 4})}, {scalar, scores}),
               "label must have the shape of the logits"));
  EXPECT_TRUE(mentions(refusal(kMsDomain, "SoftmaxCrossEntropyGrad",
                               {t(DType::F32, {2}), scores, scores}, {scores},
                               {stringAttr("reduction", "none")}),
                       "dY has 2 elements, not 4"));
  EXPECT_TRUE(
      mentions(refusal(kMsDomain, "BiasDropout", {scores, t(DType::F16, {5})},
                       {scores, t(DType::Bool, {4, 5})}),
               "mix element types"));
  EXPECT_TRUE(
      mentions(refusal(kMsDomain, "BiasDropout", {scores, t(DType::F32, {4})},
                       {scores, t(DType::Bool, {4, 5})}),
               "bias must have one element per last-dimension"));
  EXPECT_TRUE(mentions(
      refusal(kMsDomain, "BiasDropout",
              {scores, t(DType::F32, {5}), none, t(DType::F16, {})}, {scores}),
      "ratio must be float32"));
  EXPECT_TRUE(
      mentions(refusal(kMsDomain, "BiasDropout", {scores, t(DType::F32, {5})},
                       {scores, t(DType::U32, {1})}),
               "the mask must be bool"));
}

//===----------------------------------------------------------------------===//
// On the device
//===----------------------------------------------------------------------===//

TEST(CudaLossTest, KernelsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  struct Case {
    llvm::StringRef domain;
    const char *op;
    /// Inputs; a null TensorData is an absent operand.
    std::vector<TensorData> inputs;
    /// Which inputs are initializers.
    std::vector<bool> constant;
    std::vector<TensorType> results;
    std::vector<NamedAttribute> attrs;
    /// 0: bit for bit.
    double tolerance;
  };
  auto floats = [](DType dtype, std::vector<int64_t> shape,
                   const std::vector<float> &values) {
    HostTensor t = ofType(dtype, shape, values);
    return TensorData(t.type(), t.bytes);
  };
  auto ints = [](std::vector<int64_t> shape, std::vector<int64_t> values) {
    return TensorData::fromValues<int64_t>(DType::I64, shape, values);
  };
  TensorData absent;
  std::vector<int64_t> big = {64, 37}, spatial = {4, 9, 6};
  std::vector<int64_t> bigLabels(64), spatialLabels(24);
  for (size_t i = 0; i < bigLabels.size(); ++i)
    bigLabels[i] = i % 11 == 3 ? -100 : static_cast<int64_t>(i * 7 % 37);
  for (size_t i = 0; i < spatialLabels.size(); ++i)
    spatialLabels[i] = static_cast<int64_t>(i * 5 % 9);
  std::vector<Case> cases;
  for (DType dtype : {DType::F32, DType::F16})
    for (const char *reduction : {"none", "sum", "mean"}) {
      bool none = std::string(reduction) == "none";
      double tolerance = dtype == DType::F32 ? 2e-5 : 2e-3;
      TensorData scores = floats(dtype, big, randomFloats(64 * 37, 5, -4, 4));
      TensorData weights = floats(dtype, {37}, randomFloats(37, 6, 0.1f, 2));
      TensorData labels = ints({64}, bigLabels);
      std::vector<int64_t> lossShape =
          none ? std::vector<int64_t>{64} : std::vector<int64_t>{};
      auto attrs = [&](bool ignoreAttr) {
        std::vector<NamedAttribute> a = {stringAttr("reduction", reduction)};
        if (ignoreAttr)
          a.push_back(intAttr("ignore_index", -100));
        return a;
      };
      cases.push_back(
          {"",
           "SoftmaxCrossEntropyLoss",
           {scores, labels, weights},
           {},
           {TensorType::get(dtype, lossShape), TensorType::get(dtype, big)},
           attrs(true),
           tolerance});
      cases.push_back({"",
                       "NegativeLogLikelihoodLoss",
                       {scores, labels, weights},
                       {},
                       {TensorType::get(dtype, lossShape)},
                       attrs(true),
                       none ? 0 : tolerance});
      cases.push_back({kMsDomain,
                       "NegativeLogLikelihoodLossInternal",
                       {floats(dtype, spatial, randomFloats(216, 7, -3, 0)),
                        ints({4, 6}, spatialLabels), absent, ints({}, {2})},
                       {false, false, false, true},
                       {TensorType::get(dtype, none ? std::vector<int64_t>{4, 6}
                                                    : std::vector<int64_t>{})},
                       attrs(false),
                       none ? 0 : tolerance});
      TensorData dY =
          floats(dtype, lossShape, randomFloats(none ? 64 : 1, 8, 0.5f, 2));
      TensorData logProb =
          floats(dtype, big, randomFloats(64 * 37, 9, -5, -0.1f));
      cases.push_back({kMsDomain,
                       "SoftmaxCrossEntropyLossInternalGrad",
                       {dY, logProb, labels, weights, ints({}, {-100}),
                        floats(dtype, big, randomFloats(64 * 37, 10, -1, 1))},
                       {false, false, false, false, true, false},
                       {TensorType::get(dtype, big)},
                       attrs(false),
                       tolerance});
      TensorData dense = floats(dtype, big, randomFloats(64 * 37, 11, 0, 0.1f));
      cases.push_back(
          {kMsDomain,
           "SoftmaxCrossEntropy",
           {scores, dense},
           {},
           {TensorType::get(dtype, lossShape), TensorType::get(dtype, big)},
           attrs(false),
           tolerance});
      cases.push_back({kMsDomain,
                       "SoftmaxCrossEntropyGrad",
                       {dY, logProb, dense},
                       {},
                       {TensorType::get(dtype, big)},
                       attrs(false),
                       tolerance});
    }
  // Every label ignored: a NaN mean on both backends.
  cases.push_back(
      {"",
       "NegativeLogLikelihoodLoss",
       {floats(DType::F32, {3, 4}, randomFloats(12, 12)), ints({3}, {1, 1, 1})},
       {},
       {TensorType::get(DType::F32, {})},
       {intAttr("ignore_index", 1)},
       0});
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (bool training : {false, true})
      cases.push_back(
          {kMsDomain,
           "BiasDropout",
           {floats(dtype, {33, 65}, randomFloats(33 * 65, 13, -2, 2)),
            floats(dtype, {65}, randomFloats(65, 14, -1, 1)),
            floats(dtype, {33, 65}, randomFloats(33 * 65, 15, -1, 1)),
            floats(DType::F32, {}, {0.4f}),
            TensorData::fromValues<uint8_t>(DType::Bool, {}, {training})},
           {false, false, false, true, false},
           {TensorType::get(dtype, {33, 65}),
            TensorType::get(DType::Bool, {33, 65})},
           {intAttr("seed", 9)},
           0});
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " +
                 (c.attrs.empty() ? "" : c.attrs[0].name));
    std::vector<TensorType> types;
    std::vector<std::optional<TensorData>> constants;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      types.push_back(c.inputs[i].isNull() ? TensorType()
                                           : c.inputs[i].getType());
      bool isConstant = i < c.constant.size() && c.constant[i];
      constants.push_back(isConstant ? std::optional<TensorData>(c.inputs[i])
                                     : std::nullopt);
    }
    std::vector<HostTensor> outputs[2];
    for (int onCuda = 0; onCuda < 2; ++onCuda) {
      Node *node = nullptr;
      auto module =
          oneNode(c.domain, c.op, types, c.results, c.attrs, &node, constants);
      ExecutorOptions options;
      options.mode = AllocationMode::Eager;
      options.threads = 1;
      options.seed = 21;
      auto exe = onCuda ? prepareCudaExecutable(*module, options)
                        : prepareCpuExecutable(*module, options);
      ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
      const Graph &graph = module->getGraph();
      for (const auto &input : graph.getInputs()) {
        size_t index = std::stoul(input->getName().substr(2).str());
        ASSERT_FALSE(bool((*exe)->setInput(input.get(), c.inputs[index])));
      }
      ASSERT_FALSE(bool((*exe)->runStep(3)));
      for (const Value *out : graph.getOutputs()) {
        auto value = (*exe)->readValue(out);
        ASSERT_TRUE(bool(value)) << llvm::toString(value.takeError());
        HostTensor host;
        host.dtype = value->getType().getDType();
        auto shape = value->getType().getStaticShape();
        host.shape.assign(shape.begin(), shape.end());
        host.bytes.assign(value->getBytes().begin(), value->getBytes().end());
        outputs[onCuda].push_back(std::move(host));
      }
    }
    for (size_t i = 0; i < outputs[0].size(); ++i) {
      if (outputs[0][i].dtype == DType::Bool) {
        EXPECT_EQ(outputs[1][i].bytes, outputs[0][i].bytes) << "output " << i;
      } else {
        expectClose(outputs[1][i], outputs[0][i], c.tolerance,
                    "output " + std::to_string(i));
      }
    }
  }
}

} // namespace
