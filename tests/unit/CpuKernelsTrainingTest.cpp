//===- CpuKernelsTrainingTest.cpp - Element-wise training ops and Dropout -===//
//
// The activation gradients and DivGrad against central finite differences
// of their forward ops; Scale, MixedPrecisionScale, IsAllFinite and the
// gradient accumulators (in-place update, lazy reset); Dropout and
// BitmaskDropout: same seed and step give the same mask, another step or
// node another mask, the kept fraction is about 1 - ratio, inference is the
// identity, and the gradients apply the saved mask.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

/// Expects analytic and numeric gradients to agree to finite-difference
/// accuracy.
void expectGradient(const std::vector<float> &analytic,
                    const std::vector<double> &numeric, const std::string &what,
                    double tolerance = 2e-3) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i],
                tolerance * (1 + std::fabs(numeric[i])))
        << what << " element " << i;
}

/// Runs a one-output fp32 op on one input and returns its values.
std::function<std::vector<float>(const std::vector<float> &)>
forwardOf(llvm::StringRef domainRef, const char *op, std::vector<int64_t> shape,
          std::vector<NamedAttribute> attrs = {}) {
  std::string domain = domainRef.str();
  return [=](const std::vector<float> &x) {
    KernelRunner runner;
    HostTensor input = HostTensor::f32(shape, x);
    auto result = runner.run(domain, op, {&input}, {f32Type(shape)}, attrs);
    EXPECT_TRUE(static_cast<bool>(result)) << op;
    if (!result) {
      llvm::consumeError(result.takeError());
      return std::vector<float>(x.size(), 0.0f);
    }
    return (*result)[0].floats();
  };
}

/// Checks Grad(dY, saved) against finite differences of Forward, where the
/// saved tensor is X or, when \p savesOutput, Y = Forward(X).
void checkActivationGrad(llvm::StringRef forwardDomain, const char *forward,
                         const char *grad, bool savesOutput,
                         std::vector<NamedAttribute> attrs = {}) {
  std::vector<int64_t> shape = {4, 10};
  std::vector<float> x = randomFloats(40, 5, -2.5f, 2.5f);
  for (float &v : x) // Keep away from ReLU's kink.
    if (std::fabs(v) < 0.05f)
      v = 0.3f;
  std::vector<float> dY = randomFloats(40, 6);
  auto f = forwardOf(forwardDomain, forward, shape, attrs);
  std::vector<double> numeric = numericGradient(f, x, dY, 1e-2f);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(shape, dY);
  HostTensor saved = HostTensor::f32(shape, savesOutput ? f(x) : x);
  auto result =
      runner.run(kMsDomain, grad, {&hdY, &saved}, {f32Type(shape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(result))
      << grad << ": " << llvm::toString(result.takeError());
  expectGradient((*result)[0].floats(), numeric, grad);
}

TEST(CpuTrainingKernelsTest, ActivationGradsMatchFiniteDifferences) {
  checkActivationGrad("", "Relu", "ReluGrad", false);
  checkActivationGrad(kMsDomain, "Gelu", "GeluGrad", false);
  checkActivationGrad(kMsDomain, "FastGelu", "FastGeluGrad", false);
  checkActivationGrad("", "Sigmoid", "SigmoidGrad", true);
  checkActivationGrad("", "Tanh", "TanhGrad", true);
}

TEST(CpuTrainingKernelsTest, QuickGeluGradMatchesItsDefinition) {
  // QuickGelu(x) = x * sigmoid(1.702 x); compare with differences of that.
  std::vector<float> x = randomFloats(20, 9, -3, 3), dY = randomFloats(20, 10);
  auto f = [](const std::vector<float> &in) {
    std::vector<float> out;
    for (float v : in)
      out.push_back(v / (1 + std::exp(-1.702f * v)));
    return out;
  };
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32({20}, dY), hx = HostTensor::f32({20}, x);
  auto result =
      runner.run(kMsDomain, "QuickGeluGrad", {&hdY, &hx}, {f32Type({20})});
  ASSERT_TRUE(static_cast<bool>(result));
  expectGradient((*result)[0].floats(), numericGradient(f, x, dY, 1e-2f),
                 "QuickGeluGrad");
}

TEST(CpuTrainingKernelsTest, BiasGeluGradsMatchFiniteDifferences) {
  std::vector<int64_t> shape = {3, 8};
  std::vector<float> x = randomFloats(24, 14, -2, 2),
                     bias = randomFloats(8, 15);
  std::vector<float> dY = randomFloats(24, 16);
  for (bool fast : {false, true}) {
    auto f = [&](const std::vector<float> &v) {
      KernelRunner runner;
      HostTensor hx = HostTensor::f32(shape, v),
                 hb = HostTensor::f32({8}, bias);
      auto result = runner.run(kMsDomain, fast ? "FastGelu" : "BiasGelu",
                               {&hx, &hb}, {f32Type(shape)});
      return (*result)[0].floats();
    };
    KernelRunner runner;
    HostTensor hdY = HostTensor::f32(shape, dY), hx = HostTensor::f32(shape, x),
               hb = HostTensor::f32({8}, bias);
    auto grad =
        runner.run(kMsDomain, fast ? "BiasFastGeluGrad_dX" : "BiasGeluGrad_dX",
                   {&hdY, &hx, &hb}, {f32Type(shape)});
    ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
    expectGradient((*grad)[0].floats(), numericGradient(f, x, dY, 1e-2f),
                   fast ? "BiasFastGeluGrad_dX" : "BiasGeluGrad_dX");
  }
}

TEST(CpuTrainingKernelsTest, IsFiniteZeroGradientPassThrough) {
  KernelRunner runner;
  float inf = std::numeric_limits<float>::infinity();
  HostTensor x = HostTensor::f32({4}, {1, inf, std::nanf(""), -2});
  auto finite = runner.run(kMsDomain, "IsFinite", {&x},
                           {TensorType::get(DType::Bool, {4})});
  ASSERT_TRUE(static_cast<bool>(finite));
  EXPECT_EQ((*finite)[0].values<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 1}));
  HostTensor signal = HostTensor::boolean({}, {1});
  auto zeros =
      runner.run(kMsDomain, "ZeroGradient", {&x, &signal}, {f32Type({4})});
  ASSERT_TRUE(static_cast<bool>(zeros));
  EXPECT_EQ((*zeros)[0].floats(), std::vector<float>(4, 0));
  HostTensor ints = HostTensor::i64({2}, {3, 4});
  auto passed = runner.run(
      kMsDomain, "PassThrough", {&ints, &signal},
      {TensorType::get(DType::I64, {2}), TensorType::get(DType::Bool, {})});
  ASSERT_TRUE(static_cast<bool>(passed));
  EXPECT_EQ((*passed)[0].values<int64_t>(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ((*passed)[1].values<uint8_t>(), (std::vector<uint8_t>{1}));
}

TEST(CpuTrainingKernelsTest, DivGradMatchesFiniteDifferencesWithBroadcast) {
  std::vector<int64_t> aShape = {3, 4}, bShape = {4};
  std::vector<float> a = randomFloats(12, 11),
                     b = randomFloats(4, 12, 0.8f, 2.0f);
  std::vector<float> dY = randomFloats(12, 13);
  auto divide = [&](const std::vector<float> &av,
                    const std::vector<float> &bv) {
    KernelRunner runner;
    HostTensor ha = HostTensor::f32(aShape, av),
               hb = HostTensor::f32(bShape, bv);
    auto result = runner.run("", "Div", {&ha, &hb}, {f32Type(aShape)});
    return (*result)[0].floats();
  };
  auto numericA = numericGradient(
      [&](const std::vector<float> &v) { return divide(v, b); }, a, dY, 1e-2f);
  auto numericB = numericGradient(
      [&](const std::vector<float> &v) { return divide(a, v); }, b, dY, 1e-2f);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32(aShape, dY), ha = HostTensor::f32(aShape, a),
             hb = HostTensor::f32(bShape, b);
  auto result = runner.run(kMsDomain, "DivGrad", {&hdY, &ha, &hb},
                           {f32Type(aShape), f32Type(bShape)});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  expectGradient((*result)[0].floats(), numericA, "dA");
  expectGradient((*result)[1].floats(), numericB, "dB");
  // Only dB requested.
  auto onlyB = runner.run(kMsDomain, "DivGrad", {&hdY, &ha, &hb},
                          {absentResult(), f32Type(bShape)});
  ASSERT_TRUE(static_cast<bool>(onlyB));
  EXPECT_EQ((*onlyB)[1].floats(), (*result)[1].floats());
}

TEST(CpuTrainingKernelsTest, ScaleMultipliesOrDivides) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({3}, {1, -2, 4});
  HostTensor s = HostTensor::f32({}, {4});
  auto up = runner.run(kMsDomain, "Scale", {&x, &s}, {f32Type({3})});
  auto down = runner.run(kMsDomain, "Scale", {&x, &s}, {f32Type({3})},
                         {intAttr("scale_down", 1)});
  ASSERT_TRUE(up && down);
  EXPECT_EQ((*up)[0].floats(), (std::vector<float>{4, -8, 16}));
  EXPECT_EQ((*down)[0].floats(), (std::vector<float>{0.25f, -0.5f, 1}));
  HostTensor si = HostTensor::i64({1}, {2});
  auto intScale = runner.run(kMsDomain, "Scale", {&x, &si}, {f32Type({3})});
  ASSERT_TRUE(static_cast<bool>(intScale));
  EXPECT_EQ((*intScale)[0].floats(), (std::vector<float>{2, -4, 8}));
}

TEST(CpuTrainingKernelsTest, MixedPrecisionScaleCastsAndFuses) {
  KernelRunner runner;
  HostTensor s = HostTensor::f32({}, {0.5f});
  HostTensor a = HostTensor::f32({2}, {3, 1.0f / 3});
  HostTensor b = HostTensor::f32({1, 2}, {-8, 65536});
  int64_t f16 = static_cast<int64_t>(DType::F16);
  auto separate = runner.run(
      kMsDomain, "MixedPrecisionScale", {&s, &a, &b},
      {TensorType::get(DType::F16, {2}), TensorType::get(DType::F16, {1, 2})},
      {intAttr("to", f16)});
  ASSERT_TRUE(static_cast<bool>(separate))
      << llvm::toString(separate.takeError());
  EXPECT_EQ((*separate)[0].values<uint16_t>(),
            (std::vector<uint16_t>{floatToHalf(1.5f), floatToHalf(1.0f / 6)}));
  EXPECT_EQ((*separate)[1].values<uint16_t>(),
            (std::vector<uint16_t>{floatToHalf(-4), floatToHalf(32768)}));
  auto fused = runner.run(kMsDomain, "MixedPrecisionScale", {&s, &a, &b},
                          {TensorType::get(DType::F32, {4})},
                          {intAttr("to", static_cast<int64_t>(DType::F32)),
                           intAttr("fuse_outputs", 1)});
  ASSERT_TRUE(static_cast<bool>(fused)) << llvm::toString(fused.takeError());
  EXPECT_EQ((*fused)[0].floats(),
            (std::vector<float>{1.5f, 1.0f / 6, -4, 32768}));
}

TEST(CpuTrainingKernelsTest, IsAllFinite) {
  KernelRunner runner;
  float inf = std::numeric_limits<float>::infinity();
  HostTensor good = HostTensor::f32({3}, {1, 2, 3});
  HostTensor withInf = HostTensor::f16({2}, {1, inf});
  HostTensor withNaN = HostTensor::f32({2}, {std::nanf(""), 0});
  auto boolScalar = TensorType::get(DType::Bool, {});
  auto check = [&](std::vector<HostTensor *> inputs,
                   std::vector<NamedAttribute> attrs = {}) {
    auto result =
        runner.run(kMsDomain, "IsAllFinite", inputs, {boolScalar}, attrs);
    EXPECT_TRUE(static_cast<bool>(result));
    return result ? (*result)[0].values<uint8_t>()[0] : 2;
  };
  EXPECT_EQ(check({&good}), 1);
  EXPECT_EQ(check({&good, &withInf}), 0);
  EXPECT_EQ(check({&withNaN, &good}), 0);
  EXPECT_EQ(check({&withNaN}, {intAttr("isinf_only", 1)}), 1);
  EXPECT_EQ(check({&withInf}, {intAttr("isinf_only", 1)}), 0);
  EXPECT_EQ(check({&withInf}, {intAttr("isnan_only", 1)}), 1);
}

TEST(CpuTrainingKernelsTest, InPlaceAccumulatorV2WritesTheBufferInPlace) {
  KernelRunner runner;
  HostTensor buffer = HostTensor::f32({3}, {1, 2, 3});
  HostTensor grad = HostTensor::f32({3}, {10, 20, 30});
  HostTensor no = HostTensor::boolean({}, {0}),
             yes = HostTensor::boolean({}, {1});
  auto flag = TensorType::get(DType::Bool, {1});
  auto accumulate = runner.run(kMsDomain, "InPlaceAccumulatorV2",
                               {&buffer, &grad, &no}, {flag, f32Type({3})});
  ASSERT_TRUE(static_cast<bool>(accumulate))
      << llvm::toString(accumulate.takeError());
  EXPECT_EQ(buffer.floats(),
            (std::vector<float>{11, 22, 33})); // The input itself.
  EXPECT_EQ((*accumulate)[0].values<uint8_t>(), (std::vector<uint8_t>{1}));
  EXPECT_EQ((*accumulate)[1].floats(), (std::vector<float>{11, 22, 33}));
  // Without the flag input: accumulate again; without output 1: fine.
  auto again =
      runner.run(kMsDomain, "InPlaceAccumulatorV2", {&buffer, &grad}, {flag});
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(buffer.floats(), (std::vector<float>{21, 42, 63}));
  // lazy_reset_grad: overwrite.
  auto reset = runner.run(kMsDomain, "InPlaceAccumulatorV2",
                          {&buffer, &grad, &yes}, {flag, f32Type({3})});
  ASSERT_TRUE(static_cast<bool>(reset));
  EXPECT_EQ(buffer.floats(), (std::vector<float>{10, 20, 30}));
  // An f16 buffer accumulating an fp32 gradient rounds on store.
  HostTensor halfBuffer = HostTensor::f16({2}, {1, 2048});
  HostTensor step = HostTensor::f32({2}, {0.25f, 1});
  auto mixed = runner.run(kMsDomain, "InPlaceAccumulatorV2",
                          {&halfBuffer, &step, &no}, {flag});
  ASSERT_TRUE(static_cast<bool>(mixed)) << llvm::toString(mixed.takeError());
  EXPECT_EQ(halfBuffer.floats(),
            (std::vector<float>{1.25f, 2048})); // 2049 rounds to even.
}

TEST(CpuTrainingKernelsTest, InPlaceAccumulatorHonoursUpdateSignal) {
  KernelRunner runner;
  HostTensor sum = HostTensor::f32({2}, {1, 1});
  HostTensor value = HostTensor::f32({2}, {2, 3});
  HostTensor no = HostTensor::boolean({}, {0});
  auto updated = runner.run(kMsDomain, "InPlaceAccumulator", {&sum, &value},
                            {f32Type({2})});
  auto skipped = runner.run(kMsDomain, "InPlaceAccumulator",
                            {&sum, &value, &no}, {f32Type({2})});
  ASSERT_TRUE(updated && skipped);
  EXPECT_EQ((*updated)[0].floats(), (std::vector<float>{3, 4}));
  EXPECT_EQ((*skipped)[0].floats(), (std::vector<float>{1, 1}));
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

struct DropoutRun {
  std::vector<float> output;
  std::vector<uint8_t> mask;
};

DropoutRun runDropout(const std::vector<float> &x, float ratio, uint64_t seed,
                      uint64_t step, const std::string &name = "dropout",
                      unsigned threads = 2) {
  KernelRunner runner;
  runner.getContext().setSeed(seed);
  runner.getContext().setStep(step);
  runner.getContext().setNumThreads(threads);
  int64_t n = x.size();
  HostTensor hx = HostTensor::f32({n}, x);
  HostTensor hr = HostTensor::f32({}, {ratio});
  HostTensor training = HostTensor::boolean({}, {1});
  auto result =
      runner.run("", "Dropout", {&hx, &hr, &training},
                 {f32Type({n}), TensorType::get(DType::Bool, {n})}, {}, name);
  EXPECT_TRUE(static_cast<bool>(result));
  if (!result) {
    llvm::consumeError(result.takeError());
    return {};
  }
  return {(*result)[0].floats(), (*result)[1].values<uint8_t>()};
}

TEST(CpuDropoutTest, ReproducibleAndStepDependent) {
  std::vector<float> x(100000, 1.0f);
  DropoutRun first = runDropout(x, 0.3f, 1234, 7);
  DropoutRun again = runDropout(x, 0.3f, 1234, 7, "dropout", 1);
  EXPECT_EQ(first.mask, again.mask); // Same seed and step, any thread count.
  EXPECT_EQ(first.output, again.output);
  DropoutRun nextStep = runDropout(x, 0.3f, 1234, 8);
  DropoutRun otherSeed = runDropout(x, 0.3f, 99, 7);
  DropoutRun otherNode = runDropout(x, 0.3f, 1234, 7, "another_dropout");
  EXPECT_NE(first.mask, nextStep.mask);
  EXPECT_NE(first.mask, otherSeed.mask);
  EXPECT_NE(first.mask, otherNode.mask);
  // Kept fraction ~ 0.7 (5 sigma ~ 0.007 for 1e5 Bernoulli draws); kept
  // elements scaled by 1 / 0.7, dropped ones zero.
  int64_t kept = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    kept += first.mask[i];
    EXPECT_FLOAT_EQ(first.output[i], first.mask[i] ? 1.0f / 0.7f : 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.size(), 0.7, 0.007);
  // Masks of different steps are not correlated: about 0.7^2 overlap.
  int64_t both = 0;
  for (size_t i = 0; i < x.size(); ++i)
    both += first.mask[i] & nextStep.mask[i];
  EXPECT_NEAR(static_cast<double>(both) / x.size(), 0.49, 0.01);
}

TEST(CpuDropoutTest, RatioStatisticsAndInference) {
  std::vector<float> x = randomFloats(50000, 3);
  for (float ratio : {0.1f, 0.5f, 0.9f}) {
    DropoutRun run = runDropout(x, ratio, 5, 0);
    double kept = 0;
    for (uint8_t m : run.mask)
      kept += m;
    EXPECT_NEAR(kept / x.size(), 1 - ratio, 0.01) << ratio;
  }
  KernelRunner runner;
  HostTensor hx = HostTensor::f32({4}, {1, 2, 3, 4});
  HostTensor ratio = HostTensor::f32({}, {0.5f});
  HostTensor off = HostTensor::boolean({}, {0});
  auto types =
      std::vector<TensorType>{f32Type({4}), TensorType::get(DType::Bool, {4})};
  auto inference = runner.run("", "Dropout", {&hx, &ratio, &off}, types);
  auto noMode = runner.run("", "Dropout", {&hx, &ratio}, types);
  ASSERT_TRUE(inference && noMode);
  EXPECT_EQ((*inference)[0].floats(), hx.floats());
  EXPECT_EQ((*inference)[1].values<uint8_t>(),
            (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ((*noMode)[0].floats(), hx.floats());
  HostTensor bad = HostTensor::f32({}, {1.0f});
  HostTensor on = HostTensor::boolean({}, {1});
  auto invalid = runner.run("", "Dropout", {&hx, &bad, &on}, types);
  EXPECT_FALSE(static_cast<bool>(invalid));
  llvm::consumeError(invalid.takeError());
}

TEST(CpuDropoutTest, GradientsApplyTheSavedMask) {
  std::vector<float> x = randomFloats(1000, 4);
  DropoutRun forward = runDropout(x, 0.25f, 77, 3);
  std::vector<float> dY = randomFloats(1000, 5);
  KernelRunner runner;
  HostTensor hdY = HostTensor::f32({1000}, dY);
  HostTensor mask = HostTensor::boolean({1000}, forward.mask);
  HostTensor ratio = HostTensor::f32({}, {0.25f});
  HostTensor on = HostTensor::boolean({}, {1});
  auto grad = runner.run(kMsDomain, "DropoutGrad", {&hdY, &mask, &ratio, &on},
                         {f32Type({1000})});
  ASSERT_TRUE(static_cast<bool>(grad));
  // Dropout is linear in x: dX = d(output)/dx applied to dY.
  std::vector<float> got = (*grad)[0].floats();
  for (size_t i = 0; i < 1000; ++i)
    EXPECT_FLOAT_EQ(got[i], forward.mask[i] ? dY[i] / 0.75f : 0.0f);
}

TEST(CpuDropoutTest, BitmaskDropoutPacksTheSameDecisions) {
  int64_t n = 1000; // Not a multiple of 32.
  std::vector<float> x = randomFloats(n, 8);
  DropoutRun plain = runDropout(x, 0.4f, 11, 2, "drop");
  KernelRunner runner;
  runner.getContext().setSeed(11);
  runner.getContext().setStep(2);
  HostTensor hx = HostTensor::f32({n}, x);
  HostTensor ratio = HostTensor::f32({}, {0.4f});
  HostTensor on = HostTensor::boolean({}, {1});
  int64_t words = (n + 31) / 32;
  auto result = runner.run(kMsDomain, "BitmaskDropout", {&hx, &ratio, &on},
                           {f32Type({n}), TensorType::get(DType::U32, {words})},
                           {}, "drop");
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  EXPECT_EQ((*result)[0].floats(), plain.output);
  std::vector<uint32_t> bits = (*result)[1].values<uint32_t>();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ((bits[i / 32] >> (i % 32)) & 1u, plain.mask[i]) << i;
  for (int64_t i = n; i < words * 32; ++i)
    EXPECT_EQ((bits[i / 32] >> (i % 32)) & 1u, 0u) << "padding bit " << i;
  std::vector<float> dY = randomFloats(n, 9);
  HostTensor hdY = HostTensor::f32({n}, dY);
  auto grad = runner.run(kMsDomain, "BitmaskDropoutGrad",
                         {&hdY, &(*result)[1], &ratio, &on}, {f32Type({n})});
  ASSERT_TRUE(static_cast<bool>(grad));
  std::vector<float> got = (*grad)[0].floats();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_FLOAT_EQ(got[i], plain.mask[i] ? dY[i] / 0.6f : 0.0f);
}

TEST(CpuDropoutTest, BiasDropoutAddsBiasAndResidual) {
  int64_t rows = 64, width = 16, n = rows * width;
  std::vector<float> x = randomFloats(n, 30), bias = randomFloats(width, 31),
                     res = randomFloats(n, 32);
  KernelRunner runner;
  runner.getContext().setSeed(3);
  HostTensor hx = HostTensor::f32({rows, width}, x),
             hb = HostTensor::f32({width}, bias),
             hr = HostTensor::f32({rows, width}, res);
  HostTensor ratio = HostTensor::f32({}, {0.5f}),
             on = HostTensor::boolean({}, {1});
  auto result = runner.run(
      kMsDomain, "BiasDropout", {&hx, &hb, &hr, &ratio, &on},
      {f32Type({rows, width}), TensorType::get(DType::Bool, {rows, width})});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::vector<float> y = (*result)[0].floats();
  std::vector<uint8_t> mask = (*result)[1].values<uint8_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    float want = (mask[i] ? (x[i] + bias[i % width]) * 2.0f : 0.0f) + res[i];
    EXPECT_FLOAT_EQ(y[i], want);
  }
  EXPECT_GT(kept, n / 4);
  EXPECT_LT(kept, 3 * n / 4);
}

TEST(CpuDropoutTest, SeedAttributeNamesTheStream) {
  std::vector<float> x(4096, 1.0f);
  auto run = [&](const std::string &name) {
    KernelRunner runner;
    HostTensor hx = HostTensor::f32({4096}, x);
    HostTensor ratio = HostTensor::f32({}, {0.5f});
    HostTensor on = HostTensor::boolean({}, {1});
    auto result =
        runner.run("", "Dropout", {&hx, &ratio, &on},
                   {f32Type({4096}), TensorType::get(DType::Bool, {4096})},
                   {intAttr("seed", 42)}, name);
    return result ? (*result)[1].values<uint8_t>() : std::vector<uint8_t>();
  };
  // A recompute clone with another name but the same seed draws the same mask.
  EXPECT_EQ(run("dropout_1"), run("dropout_1_recompute"));
  EXPECT_FALSE(run("dropout_1").empty());
}

} // namespace
