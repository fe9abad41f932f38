//===- CpuKernelsSoftmaxLossTest.cpp - Softmax family and losses ----------===//
//
// Softmax and LogSoftmax under both axis conventions (opset < 13 coerces to
// 2-D; 13+ normalizes one axis) against a naive reference; SoftmaxGrad(_13)
// and LogSoftmaxGrad(_13) against finite differences of the forward op;
// SoftmaxCrossEntropyLoss, its Internal variant and NegativeLogLikelihoodLoss
// against a naive reference (weights, ignore_index, every reduction, N-D
// scores); the loss gradients against finite differences of the loss.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <optional>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

void expectGradient(const std::vector<float> &analytic,
                    const std::vector<double> &numeric, const std::string &what,
                    double tolerance = 2e-3) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i],
                tolerance * (1 + std::fabs(numeric[i])))
        << what << " element " << i;
}

/// Naive softmax of x viewed as [outer, n, inner] along the middle.
std::vector<double> referenceSoftmax(const std::vector<float> &x, int64_t outer,
                                     int64_t n, int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double maxValue = -1e300, sum = 0;
      for (int64_t i = 0; i < n; ++i)
        maxValue = std::max<double>(maxValue, x[(o * n + i) * inner + j]);
      for (int64_t i = 0; i < n; ++i)
        sum += std::exp(x[(o * n + i) * inner + j] - maxValue);
      for (int64_t i = 0; i < n; ++i) {
        double v = x[(o * n + i) * inner + j] - maxValue;
        y[(o * n + i) * inner + j] =
            log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

std::vector<float> runSoftmax(const char *op, const std::vector<float> &x,
                              std::vector<int64_t> shape, int64_t opset,
                              std::optional<int64_t> axis) {
  KernelRunner runner;
  runner.setOpset("", opset);
  HostTensor hx = HostTensor::f32(shape, x);
  std::vector<NamedAttribute> attrs;
  if (axis)
    attrs.push_back(intAttr("axis", *axis));
  auto result = runner.run("", op, {&hx}, {f32Type(shape)}, attrs);
  EXPECT_TRUE(static_cast<bool>(result)) << op;
  if (!result) {
    llvm::consumeError(result.takeError());
    return {};
  }
  return (*result)[0].floats();
}

TEST(CpuSoftmaxTest, AxisConventions) {
  std::vector<float> x = randomFloats(2 * 3 * 4, 1, -4, 4);
  for (bool log : {false, true}) {
    const char *op = log ? "LogSoftmax" : "Softmax";
    // Opset 13, default axis -1: rows of 4.
    auto last = runSoftmax(op, x, {2, 3, 4}, 13, std::nullopt);
    auto want = referenceSoftmax(x, 6, 4, 1, log);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(last[i], want[i], 1e-6) << op;
    // Opset 13, axis 1: strided columns.
    auto middle = runSoftmax(op, x, {2, 3, 4}, 13, 1);
    want = referenceSoftmax(x, 2, 3, 4, log);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(middle[i], want[i], 1e-6) << op;
    // Opset 11, default axis 1: coerced to [2, 12].
    auto coerced = runSoftmax(op, x, {2, 3, 4}, 11, std::nullopt);
    want = referenceSoftmax(x, 2, 12, 1, log);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(coerced[i], want[i], 1e-6) << op;
  }
  // Large inputs do not overflow.
  auto stable =
      runSoftmax("Softmax", {1000, 1001, 1002}, {3}, 17, std::nullopt);
  auto want = referenceSoftmax({0, 1, 2}, 1, 3, 1, false);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(stable[i], want[i], 1e-6);
}

void checkSoftmaxGrad(const char *grad, const char *forward, int64_t opset,
                      std::optional<int64_t> axis) {
  std::vector<int64_t> shape = {2, 3, 4};
  std::vector<float> x = randomFloats(24, 2, -2, 2), dY = randomFloats(24, 3);
  auto f = [&](const std::vector<float> &in) {
    return runSoftmax(forward, in, shape, opset, axis);
  };
  std::vector<double> numeric = numericGradient(f, x, dY, 1e-2f);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(shape, dY),
             hy = HostTensor::f32(shape, f(x));
  std::vector<NamedAttribute> attrs;
  if (axis)
    attrs.push_back(intAttr("axis", *axis));
  auto result =
      runner.run(kMsDomain, grad, {&hdY, &hy}, {f32Type(shape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(result))
      << grad << ": " << llvm::toString(result.takeError());
  expectGradient((*result)[0].floats(), numeric, grad);
}

TEST(CpuSoftmaxTest, GradientsMatchFiniteDifferences) {
  checkSoftmaxGrad("SoftmaxGrad", "Softmax", 11,
                   std::nullopt); // Coerced at axis 1.
  checkSoftmaxGrad("SoftmaxGrad", "Softmax", 11, 2);
  checkSoftmaxGrad("SoftmaxGrad_13", "Softmax", 13, std::nullopt); // Last axis.
  checkSoftmaxGrad("SoftmaxGrad_13", "Softmax", 13, 1);            // Strided.
  checkSoftmaxGrad("LogSoftmaxGrad", "LogSoftmax", 11, std::nullopt);
  checkSoftmaxGrad("LogSoftmaxGrad_13", "LogSoftmax", 13, std::nullopt);
  checkSoftmaxGrad("LogSoftmaxGrad_13", "LogSoftmax", 13, 0);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// A cross-entropy problem: scores [N, C, D...] and labels [N, D...].
struct LossCase {
  std::vector<int64_t> scoreShape;
  std::vector<int64_t> labels;
  std::vector<float> weights; // Empty: none.
  std::optional<int64_t> ignoreIndex;
};

std::vector<int64_t> labelShape(const std::vector<int64_t> &scoreShape) {
  std::vector<int64_t> shape = {scoreShape[0]};
  shape.insert(shape.end(), scoreShape.begin() + 2, scoreShape.end());
  return shape;
}

/// Naive loss: per-sample -log_softmax[label] * weight, reduced.
std::vector<double> referenceLoss(const LossCase &c,
                                  const std::vector<float> &scores,
                                  const std::string &reduction,
                                  bool scoresAreLogProbs) {
  int64_t n = c.scoreShape[0], classes = c.scoreShape[1];
  int64_t inner = 1;
  for (size_t d = 2; d < c.scoreShape.size(); ++d)
    inner *= c.scoreShape[d];
  std::vector<double> perSample;
  double weightSum = 0, sum = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t label = c.labels[b * inner + j];
      if (c.ignoreIndex && label == *c.ignoreIndex) {
        perSample.push_back(0);
        continue;
      }
      std::vector<float> row;
      for (int64_t k = 0; k < classes; ++k)
        row.push_back(scores[(b * classes + k) * inner + j]);
      double logProb = scoresAreLogProbs
                           ? row[label]
                           : referenceSoftmax(row, 1, classes, 1, true)[label];
      double weight = c.weights.empty() ? 1.0 : c.weights[label];
      perSample.push_back(-logProb * weight);
      weightSum += weight;
      sum += -logProb * weight;
    }
  if (reduction == "none")
    return perSample;
  if (reduction == "mean")
    sum /= weightSum; // NaN over zero counted samples, as in PyTorch.
  return {sum};
}

const LossCase kLossCases[] = {
    {{4, 5}, {0, 3, 4, 1}, {}, std::nullopt},
    {{4, 5}, {0, 3, 4, 1}, {0.5f, 1, 2, 1.5f, 0.25f}, std::nullopt},
    {{4, 5}, {0, -100, 4, 1}, {}, -100},
    {{2, 3, 4}, {0, 1, 2, 0, 2, 2, 1, 0}, {1, 2, 3}, 1},
    {{2, 3, 2, 2}, {0, 1, 2, 0, 2, 2, 1, 0}, {}, std::nullopt}};

std::vector<NamedAttribute>
lossAttrs(const LossCase &c, const std::string &reduction, bool ignoreAsAttr) {
  std::vector<NamedAttribute> attrs = {stringAttr("reduction", reduction)};
  if (c.ignoreIndex && ignoreAsAttr)
    attrs.push_back(intAttr("ignore_index", *c.ignoreIndex));
  return attrs;
}

TEST(CpuLossTest, SoftmaxCrossEntropyMatchesReference) {
  unsigned seed = 20;
  for (const LossCase &c : kLossCases)
    for (const char *reduction : {"none", "sum", "mean"})
      for (bool internal : {false, true}) {
        KernelRunner runner;
        int64_t count = 1;
        for (int64_t d : c.scoreShape)
          count *= d;
        std::vector<float> scores = randomFloats(count, ++seed, -3, 3);
        HostTensor hs = HostTensor::f32(c.scoreShape, scores);
        HostTensor hl = HostTensor::i64(labelShape(c.scoreShape), c.labels);
        HostTensor hw = HostTensor::f32({c.scoreShape[1]}, c.weights);
        HostTensor hi = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
        std::vector<HostTensor *> inputs = {&hs, &hl,
                                            c.weights.empty() ? nullptr : &hw};
        if (internal && c.ignoreIndex)
          inputs.push_back(&hi);
        std::vector<int64_t> lossShape = std::string(reduction) == "none"
                                             ? labelShape(c.scoreShape)
                                             : std::vector<int64_t>{};
        auto result = runner.run(
            internal ? llvm::StringRef(kMsDomain) : llvm::StringRef(""),
            internal ? "SoftmaxCrossEntropyLossInternal"
                     : "SoftmaxCrossEntropyLoss",
            inputs, {f32Type(lossShape), f32Type(c.scoreShape)},
            lossAttrs(c, reduction, !internal));
        ASSERT_TRUE(static_cast<bool>(result))
            << llvm::toString(result.takeError());
        std::vector<double> want = referenceLoss(c, scores, reduction, false);
        std::vector<float> got = (*result)[0].floats();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << reduction;
        // log_prob is the log-softmax over the class dimension.
        int64_t inner = count / (c.scoreShape[0] * c.scoreShape[1]);
        auto logProb = referenceSoftmax(scores, c.scoreShape[0],
                                        c.scoreShape[1], inner, true);
        std::vector<float> gotLogProb = (*result)[1].floats();
        for (size_t i = 0; i < logProb.size(); ++i)
          EXPECT_NEAR(gotLogProb[i], logProb[i], 1e-5);
      }
}

TEST(CpuLossTest, NegativeLogLikelihoodMatchesReference) {
  unsigned seed = 40;
  for (const LossCase &c : kLossCases)
    for (const char *reduction : {"none", "sum", "mean"}) {
      KernelRunner runner;
      int64_t count = 1;
      for (int64_t d : c.scoreShape)
        count *= d;
      std::vector<float> input = randomFloats(count, ++seed, -3, 0);
      HostTensor hx = HostTensor::f32(c.scoreShape, input);
      HostTensor hl = HostTensor::i64(labelShape(c.scoreShape), c.labels);
      HostTensor hw = HostTensor::f32({c.scoreShape[1]}, c.weights);
      std::vector<int64_t> lossShape = std::string(reduction) == "none"
                                           ? labelShape(c.scoreShape)
                                           : std::vector<int64_t>{};
      auto result =
          runner.run("", "NegativeLogLikelihoodLoss",
                     {&hx, &hl, c.weights.empty() ? nullptr : &hw},
                     {f32Type(lossShape)}, lossAttrs(c, reduction, true));
      ASSERT_TRUE(static_cast<bool>(result))
          << llvm::toString(result.takeError());
      std::vector<double> want = referenceLoss(c, input, reduction, true);
      std::vector<float> got = (*result)[0].floats();
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
            << reduction;
      // The Internal variant takes ignore_index as an input.
      HostTensor hi = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
      auto internal =
          runner.run(kMsDomain, "NegativeLogLikelihoodLossInternal",
                     {&hx, &hl, c.weights.empty() ? nullptr : &hw,
                      c.ignoreIndex ? &hi : nullptr},
                     {f32Type(lossShape)}, lossAttrs(c, reduction, false));
      ASSERT_TRUE(static_cast<bool>(internal))
          << llvm::toString(internal.takeError());
      EXPECT_EQ((*internal)[0].bytes, (*result)[0].bytes);
    }
}

TEST(CpuLossTest, GradientsMatchFiniteDifferencesOfTheLoss) {
  unsigned seed = 60;
  for (const LossCase &c : kLossCases)
    for (const char *reduction : {"none", "sum", "mean"})
      for (bool internal : {false, true}) {
        int64_t count = 1;
        for (int64_t d : c.scoreShape)
          count *= d;
        std::vector<int64_t> lShape = labelShape(c.scoreShape);
        std::vector<int64_t> lossShape =
            std::string(reduction) == "none" ? lShape : std::vector<int64_t>{};
        int64_t lossCount = 1;
        for (int64_t d : lossShape)
          lossCount *= d;
        std::vector<float> scores = randomFloats(count, ++seed, -2, 2);
        std::vector<float> dY = randomFloats(lossCount, ++seed, 0.5f, 1.5f);
        HostTensor hl = HostTensor::i64(lShape, c.labels);
        HostTensor hw = HostTensor::f32({c.scoreShape[1]}, c.weights);
        HostTensor hi = HostTensor::i64({}, {c.ignoreIndex.value_or(0)});
        auto loss = [&](const std::vector<float> &s) {
          KernelRunner runner;
          HostTensor hs = HostTensor::f32(c.scoreShape, s);
          auto result =
              runner.run("", "SoftmaxCrossEntropyLoss",
                         {&hs, &hl, c.weights.empty() ? nullptr : &hw},
                         {f32Type(lossShape)}, lossAttrs(c, reduction, true));
          return (*result)[0].floats();
        };
        std::vector<double> numeric = numericGradient(loss, scores, dY, 1e-2f);
        // log_prob from the forward op, then the gradient op.
        KernelRunner runner;
        HostTensor hs = HostTensor::f32(c.scoreShape, scores);
        auto forward = runner.run("", "SoftmaxCrossEntropyLoss",
                                  {&hs, &hl, c.weights.empty() ? nullptr : &hw},
                                  {f32Type(lossShape), f32Type(c.scoreShape)},
                                  lossAttrs(c, reduction, true));
        ASSERT_TRUE(static_cast<bool>(forward));
        HostTensor hdY = HostTensor::f32(lossShape, dY);
        std::vector<HostTensor *> inputs = {&hdY, &(*forward)[1], &hl,
                                            c.weights.empty() ? nullptr : &hw};
        std::vector<float> bias = randomFloats(count, ++seed);
        HostTensor hb = HostTensor::f32(c.scoreShape, bias);
        if (internal) {
          inputs.push_back(c.ignoreIndex ? &hi : nullptr);
          inputs.push_back(&hb);
        }
        auto grad = runner.run(kMsDomain,
                               internal ? "SoftmaxCrossEntropyLossInternalGrad"
                                        : "SoftmaxCrossEntropyLossGrad",
                               inputs, {f32Type(c.scoreShape)},
                               lossAttrs(c, reduction, !internal));
        ASSERT_TRUE(static_cast<bool>(grad))
            << llvm::toString(grad.takeError());
        std::vector<float> got = (*grad)[0].floats();
        if (internal) // The fused bias is added to the gradient.
          for (size_t i = 0; i < got.size(); ++i)
            got[i] -= bias[i];
        expectGradient(got, numeric,
                       std::string(internal ? "internal " : "") + reduction);
      }
}

/// Runs a node twice, into fresh memory and with result \p result written
/// over operand \p operand (as the planner's row-wise in-place reuse does),
/// and expects bitwise-equal results.
void expectSameInPlace(llvm::StringRef domain, llvm::StringRef op,
                       std::vector<HostTensor *> inputs,
                       std::vector<TensorType> resultTypes,
                       std::vector<NamedAttribute> attrs, unsigned result,
                       unsigned operand) {
  SCOPED_TRACE(op.str());
  KernelRunner fresh;
  auto want = fresh.run(domain, op, inputs, resultTypes, attrs);
  ASSERT_TRUE(static_cast<bool>(want)) << llvm::toString(want.takeError());
  KernelRunner inPlace;
  inPlace.setInPlace(result, operand);
  auto got = inPlace.run(domain, op, inputs, resultTypes, attrs);
  ASSERT_TRUE(static_cast<bool>(got)) << llvm::toString(got.takeError());
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i)
    EXPECT_EQ((*got)[i].bytes, (*want)[i].bytes) << "result " << i;
}

TEST(CpuRowwiseInPlaceTest, RowwiseKernelsMayOverwriteTheirOperand) {
  // Softmax rows (last axis) and strided columns (axis 0).
  for (int64_t axis : {-1, 0}) {
    HostTensor x = HostTensor::f32({6, 5}, randomFloats(30, 90, -3, 3));
    for (const char *op : {"Softmax", "LogSoftmax"})
      expectSameInPlace("", op, {&x}, {f32Type({6, 5})},
                        {intAttr("axis", axis)}, 0, 0);
    HostTensor dY = HostTensor::f32({6, 5}, randomFloats(30, 91, -1, 1));
    HostTensor y = HostTensor::f32({6, 5}, randomFloats(30, 92, 0, 1));
    for (const char *op : {"SoftmaxGrad_13", "LogSoftmaxGrad_13"})
      expectSameInPlace(kMsDomain, op, {&dY, &y}, {f32Type({6, 5})},
                        {intAttr("axis", axis)}, 0, 0);
  }
  // The loss: log_prob (result 1) over the scores, 2-D and N-D, then the
  // gradient over log_prob.
  for (const LossCase &c : kLossCases)
    for (const char *reduction : {"none", "mean"}) {
      int64_t count = 1;
      for (int64_t d : c.scoreShape)
        count *= d;
      HostTensor scores =
          HostTensor::f32(c.scoreShape, randomFloats(count, 93, -3, 3));
      std::vector<int64_t> lShape = labelShape(c.scoreShape);
      HostTensor labels = HostTensor::i64(lShape, c.labels);
      HostTensor weights = HostTensor::f32({c.scoreShape[1]}, c.weights);
      std::vector<int64_t> lossShape =
          std::string(reduction) == "none" ? lShape : std::vector<int64_t>{};
      HostTensor *w = c.weights.empty() ? nullptr : &weights;
      expectSameInPlace("", "SoftmaxCrossEntropyLoss", {&scores, &labels, w},
                        {f32Type(lossShape), f32Type(c.scoreShape)},
                        lossAttrs(c, reduction, true), 1, 0);
      int64_t lossCount = 1;
      for (int64_t d : lossShape)
        lossCount *= d;
      HostTensor dY =
          HostTensor::f32(lossShape, randomFloats(lossCount, 94, 0.5f, 1.5f));
      HostTensor logProb =
          HostTensor::f32(c.scoreShape, randomFloats(count, 95, -4, 0));
      expectSameInPlace(kMsDomain, "SoftmaxCrossEntropyLossGrad",
                        {&dY, &logProb, &labels, w}, {f32Type(c.scoreShape)},
                        lossAttrs(c, reduction, true), 0, 1);
    }
}

TEST(CpuLossTest, DenseLabelSoftmaxCrossEntropy) {
  std::vector<int64_t> shape = {2, 3, 4};
  std::vector<float> logits = randomFloats(24, 90, -2, 2);
  std::vector<float> labels = randomFloats(24, 91, 0, 1);
  for (int s = 0; s < 6; ++s) { // Rows of probabilities.
    float sum = 0;
    for (int c = 0; c < 4; ++c)
      sum += labels[s * 4 + c];
    for (int c = 0; c < 4; ++c)
      labels[s * 4 + c] /= sum;
  }
  HostTensor hl = HostTensor::f32(shape, labels);
  for (const char *reduction : {"none", "sum", "mean"}) {
    std::vector<int64_t> lossShape = std::string(reduction) == "none"
                                         ? std::vector<int64_t>{2, 3}
                                         : std::vector<int64_t>{};
    auto loss = [&](const std::vector<float> &x,
                    std::vector<HostTensor> *all = nullptr) {
      KernelRunner runner;
      HostTensor hx = HostTensor::f32(shape, x);
      auto result = runner.run(kMsDomain, "SoftmaxCrossEntropy", {&hx, &hl},
                               {f32Type(lossShape), f32Type(shape)},
                               {stringAttr("reduction", reduction)});
      EXPECT_TRUE(static_cast<bool>(result));
      if (all)
        *all = *result;
      return (*result)[0].floats();
    };
    std::vector<HostTensor> forward;
    std::vector<float> got = loss(logits, &forward);
    std::vector<double> perSample;
    for (int s = 0; s < 6; ++s) {
      std::vector<float> row(logits.begin() + s * 4,
                             logits.begin() + s * 4 + 4);
      auto lp = referenceSoftmax(row, 1, 4, 1, true);
      double value = 0;
      for (int c = 0; c < 4; ++c)
        value -= labels[s * 4 + c] * lp[c];
      perSample.push_back(value);
    }
    double total = 0;
    for (double v : perSample)
      total += v;
    std::vector<double> want = std::string(reduction) == "none" ? perSample
                               : std::string(reduction) == "sum"
                                   ? std::vector<double>{total}
                                   : std::vector<double>{total / 6};
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5);
    std::vector<float> dY = randomFloats(want.size(), 92, 0.5f, 1.5f);
    auto numeric =
        numericGradient([&](const std::vector<float> &x) { return loss(x); },
                        logits, dY, 1e-2f);
    KernelRunner runner;
    HostTensor hdY = HostTensor::f32(lossShape, dY);
    auto grad = runner.run(kMsDomain, "SoftmaxCrossEntropyGrad",
                           {&hdY, &forward[1], &hl}, {f32Type(shape)},
                           {stringAttr("reduction", reduction)});
    ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
    expectGradient((*grad)[0].floats(), numeric,
                   std::string("dense ") + reduction);
  }
}

TEST(CpuLossTest, MeanOverNoCountedSamplesIsNaN) {
  // Every label ignored: a mean over nothing is NaN (PyTorch's answer; a
  // silent 0 would look like a perfect fit), a sum is 0, and the gradient
  // is zero everywhere, as ONNX Runtime and PyTorch give.
  HostTensor scores = HostTensor::f32({3, 4}, randomFloats(12, 7, -2, 2));
  HostTensor labels = HostTensor::i64({3}, {-100, -100, -100});
  HostTensor ignore = HostTensor::i64({}, {-100});
  HostTensor weights = HostTensor::f32({4}, {1, 2, 3, 4});
  std::vector<NamedAttribute> mean = {stringAttr("reduction", "mean"),
                                      intAttr("ignore_index", -100)};
  std::vector<NamedAttribute> sum = {stringAttr("reduction", "sum"),
                                     intAttr("ignore_index", -100)};
  for (HostTensor *w : {static_cast<HostTensor *>(nullptr), &weights}) {
    KernelRunner runner;
    auto loss = runner.run("", "SoftmaxCrossEntropyLoss", {&scores, &labels, w},
                           {f32Type({}), f32Type({3, 4})}, mean);
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    EXPECT_TRUE(std::isnan((*loss)[0].floats()[0]));
    auto summed = runner.run("", "SoftmaxCrossEntropyLoss",
                             {&scores, &labels, w}, {f32Type({})}, sum);
    ASSERT_TRUE(static_cast<bool>(summed));
    EXPECT_EQ((*summed)[0].floats()[0], 0.0f);
    auto nll = runner.run("", "NegativeLogLikelihoodLoss",
                          {&(*loss)[1], &labels, w}, {f32Type({})}, mean);
    ASSERT_TRUE(static_cast<bool>(nll)) << llvm::toString(nll.takeError());
    EXPECT_TRUE(std::isnan((*nll)[0].floats()[0]));
    // ONNX Runtime's form takes ignore_index as input 3.
    auto internal = runner.run(kMsDomain, "SoftmaxCrossEntropyLossInternal",
                               {&scores, &labels, w, &ignore}, {f32Type({})},
                               {stringAttr("reduction", "mean")});
    ASSERT_TRUE(static_cast<bool>(internal))
        << llvm::toString(internal.takeError());
    EXPECT_TRUE(std::isnan((*internal)[0].floats()[0]));

    HostTensor dY = HostTensor::f32({}, {1});
    auto grad =
        runner.run(kMsDomain, "SoftmaxCrossEntropyLossGrad",
                   {&dY, &(*loss)[1], &labels, w}, {f32Type({3, 4})}, mean);
    ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
    for (float g : (*grad)[0].floats())
      EXPECT_EQ(g, 0.0f);
  }

  // An empty batch: no samples at all.
  KernelRunner runner;
  HostTensor noScores = HostTensor::f32({0, 4}, {});
  HostTensor noLabels = HostTensor::i64({0}, {});
  auto empty = runner.run("", "SoftmaxCrossEntropyLoss", {&noScores, &noLabels},
                          {f32Type({})}, {stringAttr("reduction", "mean")});
  ASSERT_TRUE(static_cast<bool>(empty)) << llvm::toString(empty.takeError());
  EXPECT_TRUE(std::isnan((*empty)[0].floats()[0]));
  auto dense =
      runner.run(kMsDomain, "SoftmaxCrossEntropy", {&noScores, &noScores},
                 {f32Type({})}, {stringAttr("reduction", "mean")});
  ASSERT_TRUE(static_cast<bool>(dense)) << llvm::toString(dense.takeError());
  EXPECT_TRUE(std::isnan((*dense)[0].floats()[0]));
}

TEST(CpuLossTest, LabelOutOfRangeIsAnError) {
  KernelRunner runner;
  HostTensor scores = HostTensor::f32({2, 3}, {0, 0, 0, 0, 0, 0});
  HostTensor labels = HostTensor::i64({2}, {1, 3});
  auto result = runner.run("", "SoftmaxCrossEntropyLoss", {&scores, &labels},
                           {f32Type({})});
  ASSERT_FALSE(static_cast<bool>(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("label 3 is out of range"),
            std::string::npos);
  HostTensor i32Labels = HostTensor::i32({2}, {2, 0});
  auto ok = runner.run("", "SoftmaxCrossEntropyLoss", {&scores, &i32Labels},
                       {f32Type({})});
  ASSERT_TRUE(static_cast<bool>(ok));
  EXPECT_NEAR((*ok)[0].floats()[0], std::log(3.0), 1e-6);
}

} // namespace
