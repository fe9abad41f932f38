//===- CpuKernelsNormTest.cpp - Batch and layer normalization -------------===//
//
// BatchNormalization in inference and training mode (batch statistics,
// running mean/var updated with momentum, saved mean / inverse std) against
// a naive reference; BatchNormalizationGrad, LayerNormalizationGrad and
// SimplifiedLayerNormalizationGrad against finite differences of their
// forward ops (for X and for the scale and bias); LayerNormalization and
// SimplifiedLayerNormalization forward with their statistics outputs;
// ai.onnx RMSNormalization (opset 23) in float32 and float64 against a
// straightforward reference, and its errors.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

void expectGradient(const std::vector<float> &analytic,
                    const std::vector<double> &numeric, const std::string &what,
                    double tolerance = 3e-3) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i],
                tolerance * (1 + std::fabs(numeric[i])))
        << what << " element " << i;
}

TEST(CpuBatchNormTest, InferenceUsesRunningStatistics) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(2 * 3 * 4, 1);
  HostTensor hx = HostTensor::f32({2, 3, 2, 2}, x);
  HostTensor scale = HostTensor::f32({3}, {1, 2, 0.5f});
  HostTensor bias = HostTensor::f32({3}, {0, -1, 3});
  HostTensor mean = HostTensor::f32({3}, {0.1f, -0.2f, 0.3f});
  HostTensor var = HostTensor::f32({3}, {1, 0.5f, 2});
  auto result =
      runner.run("", "BatchNormalization", {&hx, &scale, &bias, &mean, &var},
                 {f32Type({2, 3, 2, 2})}, {floatAttr("epsilon", 1e-3f)});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::vector<float> got = (*result)[0].floats();
  std::vector<float> s = scale.floats(), b = bias.floats(), m = mean.floats(),
                     v = var.floats();
  for (int64_t i = 0; i < 24; ++i) {
    int64_t c = (i / 4) % 3;
    double want = (x[i] - m[c]) / std::sqrt(v[c] + double(1e-3f)) * s[c] + b[c];
    EXPECT_NEAR(got[i], want, 1e-5);
  }
}

TEST(CpuBatchNormTest, TrainingComputesBatchStatisticsAndUpdatesRunningOnes) {
  // BatchNormalization-9: five outputs, training mode because the running
  // statistics are asked for.
  KernelRunner runner;
  runner.setOpset("", 9);
  std::vector<float> x = randomFloats(3 * 2 * 5, 2, -2, 3);
  HostTensor hx = HostTensor::f32({3, 2, 5}, x);
  HostTensor scale = HostTensor::f32({2}, {1.5f, 0.5f});
  HostTensor bias = HostTensor::f32({2}, {0.25f, -1});
  HostTensor mean = HostTensor::f32({2}, {0, 1});
  HostTensor var = HostTensor::f32({2}, {1, 2});
  float momentum = 0.9f, eps = 1e-5f;
  std::vector<TensorType> types = {f32Type({3, 2, 5}), f32Type({2}),
                                   f32Type({2}), f32Type({2}), f32Type({2})};
  auto result =
      runner.run("", "BatchNormalization", {&hx, &scale, &bias, &mean, &var},
                 types, {floatAttr("momentum", momentum)});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  for (int64_t c = 0; c < 2; ++c) {
    double sum = 0, squares = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 5; ++i)
        sum += x[(n * 2 + c) * 5 + i];
    double mu = sum / 15;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 5; ++i)
        squares += std::pow(x[(n * 2 + c) * 5 + i] - mu, 2);
    double variance = squares / 15; // Population variance, as ONNX.
    EXPECT_NEAR((*result)[1].floats()[c],
                mean.floats()[c] * momentum + mu * (1 - momentum), 1e-6);
    EXPECT_NEAR((*result)[2].floats()[c],
                var.floats()[c] * momentum + variance * (1 - momentum), 1e-6);
    EXPECT_NEAR((*result)[3].floats()[c], mu, 1e-6);
    EXPECT_NEAR((*result)[4].floats()[c], 1 / std::sqrt(variance + eps), 1e-5);
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 5; ++i) {
        int64_t k = (n * 2 + c) * 5 + i;
        double want =
            (x[k] - mu) / std::sqrt(variance + eps) * scale.floats()[c] +
            bias.floats()[c];
        EXPECT_NEAR((*result)[0].floats()[k], want, 1e-5);
      }
  }
  // com.microsoft BatchNormInternal trains by default and agrees.
  auto internal = runner.run(kMsDomain, "BatchNormInternal",
                             {&hx, &scale, &bias, &mean, &var}, types,
                             {floatAttr("momentum", momentum)});
  ASSERT_TRUE(static_cast<bool>(internal));
  for (unsigned i = 0; i < 5; ++i)
    EXPECT_EQ((*internal)[i].bytes, (*result)[i].bytes) << i;
}

TEST(CpuBatchNormTest, GradMatchesFiniteDifferences) {
  std::vector<int64_t> shape = {2, 3, 2, 2};
  std::vector<float> x = randomFloats(24, 3, -2, 2), dY = randomFloats(24, 4);
  std::vector<float> scale = {1.2f, 0.7f, -0.5f}, bias = {0.1f, 0.2f, 0.3f};
  auto forward = [&](const std::vector<float> &xv, const std::vector<float> &sv,
                     const std::vector<float> &bv) {
    // BatchNormalization-9 in training mode, with the saved statistics.
    KernelRunner runner;
    runner.setOpset("", 9);
    HostTensor hx = HostTensor::f32(shape, xv), hs = HostTensor::f32({3}, sv),
               hb = HostTensor::f32({3}, bv),
               hm = HostTensor::f32({3}, {0, 0, 0}),
               hv = HostTensor::f32({3}, {1, 1, 1});
    auto result =
        runner.run("", "BatchNormalization", {&hx, &hs, &hb, &hm, &hv},
                   {f32Type(shape), f32Type({3}), f32Type({3}), f32Type({3}),
                    f32Type({3})});
    return *result;
  };
  auto numericX = numericGradient(
      [&](auto &v) { return forward(v, scale, bias)[0].floats(); }, x, dY,
      1e-2f);
  auto numericScale =
      numericGradient([&](auto &v) { return forward(x, v, bias)[0].floats(); },
                      scale, dY, 1e-2f);
  auto numericBias =
      numericGradient([&](auto &v) { return forward(x, scale, v)[0].floats(); },
                      bias, dY, 1e-2f);
  std::vector<HostTensor> saved = forward(x, scale, bias);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(shape, dY), hx = HostTensor::f32(shape, x),
             hs = HostTensor::f32({3}, scale);
  auto grad = runner.run(kMsDomain, "BatchNormalizationGrad",
                         {&hdY, &hx, &hs, &saved[3], &saved[4]},
                         {f32Type(shape), f32Type({3}), f32Type({3})},
                         {floatAttr("epsilon", 1e-5f)});
  ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
  expectGradient((*grad)[0].floats(), numericX, "dX");
  expectGradient((*grad)[1].floats(), numericScale, "dScale");
  expectGradient((*grad)[2].floats(), numericBias, "dBias");
}

TEST(CpuBatchNormTest, InstanceNormalizationNormalizesEachPlane) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(2 * 3 * 6, 20, -2, 4);
  HostTensor hx = HostTensor::f32({2, 3, 6}, x);
  HostTensor scale = HostTensor::f32({3}, {1, 2, 3}),
             bias = HostTensor::f32({3}, {0, 1, -1});
  auto result = runner.run("", "InstanceNormalization", {&hx, &scale, &bias},
                           {f32Type({2, 3, 6})});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  for (int64_t p = 0; p < 6; ++p) {
    double mean = 0, var = 0;
    for (int i = 0; i < 6; ++i)
      mean += x[p * 6 + i] / 6.0;
    for (int i = 0; i < 6; ++i)
      var += std::pow(x[p * 6 + i] - mean, 2) / 6.0;
    for (int i = 0; i < 6; ++i)
      EXPECT_NEAR((*result)[0].floats()[p * 6 + i],
                  (x[p * 6 + i] - mean) / std::sqrt(var + double(1e-5f)) *
                          scale.floats()[p % 3] +
                      bias.floats()[p % 3],
                  1e-5);
  }
}

TEST(CpuLayerNormTest, ForwardAndStatistics) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(2 * 3 * 4, 5, -3, 3);
  std::vector<float> scale = randomFloats(12, 6), bias = randomFloats(12, 7);
  HostTensor hx = HostTensor::f32({2, 3, 4}, x);
  HostTensor hs = HostTensor::f32({3, 4}, scale),
             hb = HostTensor::f32({3, 4}, bias);
  auto result =
      runner.run("", "LayerNormalization", {&hx, &hs, &hb},
                 {f32Type({2, 3, 4}), f32Type({2, 1, 1}), f32Type({2, 1, 1})},
                 {intAttr("axis", 1), floatAttr("epsilon", 1e-4f)});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  for (int64_t r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < 12; ++j)
      mean += x[r * 12 + j] / 12.0;
    for (int64_t j = 0; j < 12; ++j)
      var += std::pow(x[r * 12 + j] - mean, 2) / 12.0;
    double inv = 1 / std::sqrt(var + double(1e-4f));
    EXPECT_NEAR((*result)[1].floats()[r], mean, 1e-6);
    EXPECT_NEAR((*result)[2].floats()[r], inv, 1e-5);
    for (int64_t j = 0; j < 12; ++j)
      EXPECT_NEAR((*result)[0].floats()[r * 12 + j],
                  (x[r * 12 + j] - mean) * inv * scale[j] + bias[j], 1e-5);
  }
  // A scale that broadcasts (one value per last-dim column) and no bias.
  HostTensor small = HostTensor::f32({4}, {1, 2, 3, 4});
  auto broadcast = runner.run("", "LayerNormalization", {&hx, &small},
                              {f32Type({2, 3, 4})}, {intAttr("axis", 1)});
  ASSERT_TRUE(static_cast<bool>(broadcast))
      << llvm::toString(broadcast.takeError());
  auto plain = runner.run("", "LayerNormalization", {&hx, &hs, &hb},
                          {f32Type({2, 3, 4})}, {intAttr("axis", 1)});
  ASSERT_TRUE(static_cast<bool>(plain));
  std::vector<float> got = (*broadcast)[0].floats(),
                     full = (*plain)[0].floats();
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_NEAR(got[i], (full[i] - bias[i % 12]) / scale[i % 12] * (i % 4 + 1),
                1e-3);
}

TEST(CpuLayerNormTest, GradMatchesFiniteDifferences) {
  std::vector<int64_t> shape = {3, 2, 5};
  std::vector<float> x = randomFloats(30, 8, -2, 2), dY = randomFloats(30, 9);
  std::vector<float> scale = randomFloats(5, 10, 0.5f, 1.5f),
                     bias = randomFloats(5, 11);
  auto forward = [&](const std::vector<float> &xv, const std::vector<float> &sv,
                     const std::vector<float> &bv) {
    KernelRunner runner;
    HostTensor hx = HostTensor::f32(shape, xv), hs = HostTensor::f32({5}, sv),
               hb = HostTensor::f32({5}, bv);
    auto result =
        runner.run("", "LayerNormalization", {&hx, &hs, &hb},
                   {f32Type(shape), f32Type({3, 2, 1}), f32Type({3, 2, 1})});
    return *result;
  };
  auto numericX = numericGradient(
      [&](auto &v) { return forward(v, scale, bias)[0].floats(); }, x, dY,
      1e-2f);
  auto numericScale =
      numericGradient([&](auto &v) { return forward(x, v, bias)[0].floats(); },
                      scale, dY, 1e-2f);
  auto numericBias =
      numericGradient([&](auto &v) { return forward(x, scale, v)[0].floats(); },
                      bias, dY, 1e-2f);
  std::vector<HostTensor> saved = forward(x, scale, bias);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(shape, dY), hx = HostTensor::f32(shape, x),
             hs = HostTensor::f32({5}, scale);
  auto grad = runner.run(kMsDomain, "LayerNormalizationGrad",
                         {&hdY, &hx, &hs, &saved[1], &saved[2]},
                         {f32Type(shape), f32Type({5}), f32Type({5})});
  ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
  expectGradient((*grad)[0].floats(), numericX, "dX");
  expectGradient((*grad)[1].floats(), numericScale, "dScale");
  expectGradient((*grad)[2].floats(), numericBias, "dBias");
  // InvertibleLayerNormalizationGrad recovers the normalized input from Y
  // (and the bias) instead of X and the mean: same gradients.
  HostTensor hb = HostTensor::f32({5}, bias);
  auto invertible = runner.run(kMsDomain, "InvertibleLayerNormalizationGrad",
                               {&hdY, &saved[0], &hs, &hb, &saved[2]},
                               {f32Type(shape), f32Type({5}), f32Type({5})});
  ASSERT_TRUE(static_cast<bool>(invertible))
      << llvm::toString(invertible.takeError());
  expectGradient((*invertible)[0].floats(), numericX, "invertible dX");
  expectGradient((*invertible)[1].floats(), numericScale, "invertible dScale");
  expectGradient((*invertible)[2].floats(), numericBias, "invertible dBias");
  // Only dX requested.
  auto onlyX = runner.run(kMsDomain, "LayerNormalizationGrad",
                          {&hdY, &hx, &hs, &saved[1], &saved[2]},
                          {f32Type(shape), absentResult(), absentResult()});
  ASSERT_TRUE(static_cast<bool>(onlyX));
  EXPECT_EQ((*onlyX)[0].bytes, (*grad)[0].bytes);
}

TEST(CpuLayerNormTest, SimplifiedForwardAndGrad) {
  std::vector<int64_t> shape = {4, 6};
  std::vector<float> x = randomFloats(24, 12, -2, 2), dY = randomFloats(24, 13);
  std::vector<float> scale = randomFloats(6, 14, 0.5f, 1.5f);
  auto forward = [&](const std::vector<float> &xv,
                     const std::vector<float> &sv) {
    KernelRunner runner;
    HostTensor hx = HostTensor::f32(shape, xv), hs = HostTensor::f32({6}, sv);
    auto result = runner.run(kMsDomain, "SimplifiedLayerNormalization",
                             {&hx, &hs}, {f32Type(shape), f32Type({4, 1})},
                             {floatAttr("epsilon", 1e-5f)});
    return *result;
  };
  std::vector<HostTensor> saved = forward(x, scale);
  for (int64_t r = 0; r < 4; ++r) {
    double squares = 0;
    for (int64_t j = 0; j < 6; ++j)
      squares += x[r * 6 + j] * x[r * 6 + j] / 6.0;
    double inv = 1 / std::sqrt(squares + double(1e-5f));
    EXPECT_NEAR(saved[1].floats()[r], inv, 1e-5);
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_NEAR(saved[0].floats()[r * 6 + j], x[r * 6 + j] * inv * scale[j],
                  1e-5);
  }
  auto numericX = numericGradient(
      [&](auto &v) { return forward(v, scale)[0].floats(); }, x, dY, 1e-2f);
  auto numericScale = numericGradient(
      [&](auto &v) { return forward(x, v)[0].floats(); }, scale, dY, 1e-2f);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(shape, dY), hx = HostTensor::f32(shape, x),
             hs = HostTensor::f32({6}, scale);
  auto grad =
      runner.run(kMsDomain, "SimplifiedLayerNormalizationGrad",
                 {&hdY, &hx, &hs, &saved[1]}, {f32Type(shape), f32Type({6})});
  ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
  expectGradient((*grad)[0].floats(), numericX, "dX");
  expectGradient((*grad)[1].floats(), numericScale, "dScale");
}

/// RMSNormalization's definition, written out in double: per row of the
/// dims from \p axis on, x / sqrt(mean(x^2) + epsilon) * scale, with the
/// scale broadcast over the normalized shape \p normalized.
std::vector<double> rmsNormReference(const std::vector<double> &x,
                                     const std::vector<int64_t> &normalized,
                                     const std::vector<double> &scale,
                                     const std::vector<int64_t> &scaleShape,
                                     double epsilon) {
  int64_t cols = 1;
  for (int64_t d : normalized)
    cols *= d;
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size() / cols; ++row) {
    double squares = 0;
    for (int64_t j = 0; j < cols; ++j)
      squares += x[row * cols + j] * x[row * cols + j];
    double rms = std::sqrt(squares / cols + epsilon);
    for (int64_t j = 0; j < cols; ++j) {
      // Index of column j in the (right-aligned, numpy) broadcast scale.
      int64_t index = 0, rest = j, stride = 1;
      for (size_t d = 0; d < normalized.size(); ++d) {
        size_t fromEnd = normalized.size() - 1 - d;
        int64_t coord = rest % normalized[fromEnd];
        rest /= normalized[fromEnd];
        if (d < scaleShape.size()) {
          int64_t extent = scaleShape[scaleShape.size() - 1 - d];
          index += (extent == 1 ? 0 : coord) * stride;
          stride *= extent;
        }
      }
      y[row * cols + j] = x[row * cols + j] / rms * scale[index];
    }
  }
  return y;
}

TEST(CpuRmsNormTest, MatchesTheDefinitionInFloat32AndFloat64) {
  std::vector<int64_t> shape = {2, 3, 4};
  std::vector<float> x = randomFloats(24, 21, -3, 3);
  std::vector<double> wideX(x.begin(), x.end());
  std::vector<float> scale = randomFloats(12, 22, 0.5f, 1.5f);
  std::vector<double> wideScale(scale.begin(), scale.end());
  std::vector<float> lastScale(scale.begin(), scale.begin() + 4);
  std::vector<double> wideLastScale(wideScale.begin(), wideScale.begin() + 4);
  float epsilon = 1e-3f;
  struct Case {
    int64_t axis;
    std::vector<int64_t> normalized, scaleShape;
  };
  // axis 1 with a full [3,4] scale and with a [4] one broadcast over it;
  // axis -1 (the default) with a [4] scale.
  for (const Case &c :
       {Case{1, {3, 4}, {3, 4}}, Case{1, {3, 4}, {4}}, Case{-1, {4}, {4}}}) {
    bool full = c.scaleShape.size() == 2;
    std::vector<double> want =
        rmsNormReference(wideX, c.normalized, full ? wideScale : wideLastScale,
                         c.scaleShape, epsilon);
    std::vector<NamedAttribute> attrs = {intAttr("axis", c.axis),
                                         floatAttr("epsilon", epsilon)};
    std::string what = "axis " + std::to_string(c.axis) + ", scale of " +
                       std::to_string(c.scaleShape.size()) + " dims";
    KernelRunner runner;
    runner.setOpset("", 23);
    HostTensor x32 = HostTensor::f32(shape, x);
    HostTensor s32 = HostTensor::f32(c.scaleShape, full ? scale : lastScale);
    auto narrow = runner.run("", "RMSNormalization", {&x32, &s32},
                             {f32Type(shape)}, attrs);
    ASSERT_TRUE(static_cast<bool>(narrow))
        << what << ": " << llvm::toString(narrow.takeError());
    HostTensor x64 = HostTensor::f64(shape, wideX);
    HostTensor s64 =
        HostTensor::f64(c.scaleShape, full ? wideScale : wideLastScale);
    auto wide = runner.run("", "RMSNormalization", {&x64, &s64},
                           {TensorType::get(DType::F64, shape)}, attrs);
    ASSERT_TRUE(static_cast<bool>(wide))
        << what << ": " << llvm::toString(wide.takeError());
    std::vector<float> got32 = (*narrow)[0].floats();
    std::vector<double> got64 = (*wide)[0].values<double>();
    ASSERT_EQ(got32.size(), want.size()) << what;
    ASSERT_EQ(got64.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got32[i], want[i], 2e-6 * (1 + std::fabs(want[i])))
          << what << " float32 element " << i;
      EXPECT_NEAR(got64[i], want[i], 1e-13 * (1 + std::fabs(want[i])))
          << what << " float64 element " << i;
    }
  }
}

TEST(CpuRmsNormTest, BadAxisScalarInputAndScaleShapeAreErrors) {
  KernelRunner runner;
  runner.setOpset("", 23);
  HostTensor x = HostTensor::f32({2, 3}, randomFloats(6, 23));
  HostTensor scale = HostTensor::f32({3}, {1, 2, 3});
  auto badAxis = runner.run("", "RMSNormalization", {&x, &scale},
                            {f32Type({2, 3})}, {intAttr("axis", 2)});
  ASSERT_FALSE(static_cast<bool>(badAxis));
  EXPECT_NE(llvm::toString(badAxis.takeError())
                .find("axis 2 is out of range for rank 2"),
            std::string::npos);
  HostTensor scalar = HostTensor::f32({}, {2});
  HostTensor one = HostTensor::f32({}, {1});
  auto rankZero =
      runner.run("", "RMSNormalization", {&scalar, &one}, {f32Type({})});
  ASSERT_FALSE(static_cast<bool>(rankZero));
  EXPECT_NE(llvm::toString(rankZero.takeError()).find("rank >= 1"),
            std::string::npos);
  HostTensor wrong = HostTensor::f32({2}, {1, 2});
  auto badScale =
      runner.run("", "RMSNormalization", {&x, &wrong}, {f32Type({2, 3})});
  ASSERT_FALSE(static_cast<bool>(badScale));
  EXPECT_NE(llvm::toString(badScale.takeError())
                .find("does not broadcast to the normalized shape [3]"),
            std::string::npos);
}

} // namespace
