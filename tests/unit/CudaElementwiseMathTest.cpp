//===- CudaElementwiseMathTest.cpp - CUDA kernel arithmetic vs the CPU ----===//
//
// Host tests of the CUDA kernels' per-element arithmetic
// (backend/cuda/ElementwiseMath.h, backend/Philox.h), which the kernels and
// these tests share: they run without a GPU, in every build. The 16-bit
// conversions and the Philox stream (hence dropout masks) must be
// bit-identical to the CPU backend's; the float ops, the softmax and
// layer-norm element steps and the optimizer updates must agree with the
// CPU kernels on random inputs (the optimizers exactly: same fp32
// operations in the same order). Also the CUDA workspace model and the
// out-of-memory message.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/ElementwiseMath.h"
#include "ir/Half.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;

namespace {

std::vector<float> randomFloats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

/// a == b or |a - b| <= atol + rtol * |b|, NaN matching NaN.
void expectClose(const std::vector<float> &actual,
                 const std::vector<float> &expected, double rtol, double atol,
                 const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << " element " << i;
      continue;
    }
    if (actual[i] == expected[i]) // Infinities included.
      continue;
    EXPECT_NEAR(actual[i], expected[i], atol + rtol * std::fabs(expected[i]))
        << what << " element " << i;
  }
}

std::vector<float> runCpu(const char *domain, const char *op,
                          std::vector<HostTensor *> inputs,
                          std::vector<int64_t> shape,
                          std::vector<NamedAttribute> attrs = {}) {
  KernelRunner runner;
  auto result = runner.run(domain, op, std::move(inputs), {f32Type(shape)},
                           std::move(attrs));
  EXPECT_TRUE(bool(result))
      << op << ": " << (result ? "" : llvm::toString(result.takeError()));
  return result ? (*result)[0].floats() : std::vector<float>();
}

TEST(CudaElementwiseMathTest, HalfConversionsAreBitIdenticalToTheCpu) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    EXPECT_EQ(floatBits(cuda::widenHalf(h)), floatBits(halfToFloat(h))) << bits;
    EXPECT_EQ(floatBits(cuda::widenBFloat16(h)), floatBits(bfloat16ToFloat(h)))
        << bits;
  }
  // Every rounding boundary region: random bit patterns over all exponents,
  // plus infinities, NaNs, subnormals and the overflow edge.
  std::mt19937 rng(7);
  std::vector<uint32_t> patterns = {0u,          0x80000000u, 0x7f800000u,
                                    0xff800000u, 0x7fc00001u, 0x00000001u,
                                    0x477fefffu, 0x477ff000u, 0x38800000u,
                                    0x387fffffu, 0x33000000u, 0x33000001u};
  for (int i = 0; i < 200000; ++i)
    patterns.push_back(rng());
  for (uint32_t p : patterns) {
    float v = floatFromBits(p);
    EXPECT_EQ(cuda::narrowToHalf(v), floatToHalf(v)) << std::hex << p;
    EXPECT_EQ(cuda::narrowToBFloat16(v), floatToBFloat16(v)) << std::hex << p;
  }
}

TEST(CudaElementwiseMathTest, DropoutMasksAreBitIdenticalToTheCpuKernel) {
  const std::vector<int64_t> shape = {7, 129}; // Not a multiple of four.
  int64_t n = shape[0] * shape[1];
  HostTensor x = HostTensor::f32(shape, randomFloats(n, -2, 2, 3));
  HostTensor ratio = HostTensor::f32({}, {0.3f});
  HostTensor training = HostTensor::boolean({}, {true});
  for (uint64_t step : {0ull, 1ull, 5ull, (1ull << 33) + 3}) {
    for (int64_t streamId : {1, 42, 123456789}) {
      KernelRunner runner;
      runner.getContext().setSeed(0x1234abcd5678ull);
      runner.getContext().setStep(step);
      auto result =
          runner.run("", "Dropout", {&x, &ratio, &training},
                     {f32Type(shape), TensorType::get(DType::Bool, shape)},
                     {intAttr("seed", streamId)});
      ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
      std::vector<uint8_t> mask = (*result)[1].values<uint8_t>();
      std::vector<float> y = (*result)[0].floats();
      PhiloxStreamKey key = makePhiloxStreamKey(
          0x1234abcd5678ull, static_cast<uint64_t>(streamId), step);
      std::vector<float> xs = x.floats();
      for (int64_t i = 0; i < n; ++i) {
        PhiloxWords words = philoxBlock(key, static_cast<uint32_t>(i / 4));
        bool keep = dropoutKeeps(words.w[i % 4], 0.3f);
        ASSERT_EQ(keep, mask[i] != 0) << "element " << i << " step " << step;
        EXPECT_EQ(y[i], keep ? xs[i] * (1.0f / (1.0f - 0.3f)) : 0.0f) << i;
      }
    }
  }
}

TEST(CudaElementwiseMathTest, BitmaskDropoutWordsPackTheCpuDecisions) {
  // The CUDA kernel packs element i's decision into bit i % 32 of word
  // i / 32, as the CPU's BitmaskDropout does: same stream, same words.
  const std::vector<int64_t> shape = {3, 45}; // Not a multiple of 32.
  int64_t n = shape[0] * shape[1], words = (n + 31) / 32;
  HostTensor x = HostTensor::f32(shape, randomFloats(n, -2, 2, 13));
  HostTensor ratio = HostTensor::f32({}, {0.25f});
  HostTensor training = HostTensor::boolean({}, {true});
  KernelRunner runner;
  runner.getContext().setSeed(99);
  runner.getContext().setStep(4);
  auto result =
      runner.run("com.microsoft", "BitmaskDropout", {&x, &ratio, &training},
                 {f32Type(shape), TensorType::get(DType::U32, {words})},
                 {intAttr("seed", 7)});
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  std::vector<uint32_t> expected = (*result)[1].values<uint32_t>();
  PhiloxStreamKey key = makePhiloxStreamKey(99, 7, 4);
  for (int64_t word = 0; word < words; ++word) {
    uint32_t bits = 0;
    for (int64_t i = word * 32; i < std::min(n, word * 32 + 32); ++i)
      bits |=
          static_cast<uint32_t>(dropoutKeeps(
              philoxBlock(key, static_cast<uint32_t>(i / 4)).w[i % 4], 0.25f))
          << (i % 32);
    EXPECT_EQ(bits, expected[word]) << "word " << word;
  }
}

struct UnaryCase {
  const char *domain;
  const char *op;
  cuda::ElementwiseOp code;
  float lo, hi;
  std::vector<NamedAttribute> attrs;
};

TEST(CudaElementwiseMathTest, UnaryOpsAgreeWithTheCpuKernels) {
  using Op = cuda::ElementwiseOp;
  const std::vector<UnaryCase> cases = {
      {"", "Relu", Op::Relu, -3, 3, {}},
      {"", "Neg", Op::Neg, -3, 3, {}},
      {"", "Abs", Op::Abs, -3, 3, {}},
      {"", "Exp", Op::Exp, -10, 10, {}},
      {"", "Log", Op::Log, 0.01f, 50, {}},
      {"", "Sqrt", Op::Sqrt, 0, 50, {}},
      {"", "Reciprocal", Op::Reciprocal, 0.1f, 5, {}},
      {"", "Tanh", Op::Tanh, -6, 6, {}},
      {"", "Sigmoid", Op::Sigmoid, -30, 30, {}},
      {"", "Erf", Op::Erf, -4, 4, {}},
      {"com.microsoft", "Gelu", Op::GeluExact, -6, 6, {}},
      {"", "Gelu", Op::GeluTanh, -6, 6, {stringAttr("approximate", "tanh")}},
  };
  std::vector<int64_t> shape = {1000};
  for (const UnaryCase &c : cases) {
    HostTensor x = HostTensor::f32(shape, randomFloats(1000, c.lo, c.hi, 5));
    std::vector<float> expected = runCpu(c.domain, c.op, {&x}, shape, c.attrs);
    std::vector<float> actual;
    for (float v : x.floats())
      actual.push_back(cuda::applyElementwise(c.code, v, 0, 0));
    // The CPU's vector exp/erf/tanh are within a few ulp of libm.
    expectClose(actual, expected, 2e-6, 2e-7, c.op);
  }
}

TEST(CudaElementwiseMathTest, RoundingTrigAndActivationsAgreeWithTheCpu) {
  using Op = cuda::ElementwiseOp;
  struct Case {
    const char *op;
    Op code;
    float lo, hi;
    std::vector<NamedAttribute> attrs;
    /// The attributes as the dispatch passes them (param, param2).
    float param = 0, param2 = 0;
  };
  const float seluAlpha = 1.67326319217681884765625f;
  const float seluGamma = 1.05070102214813232421875f;
  const std::vector<Case> cases = {
      {"Floor", Op::Floor, -5, 5, {}},
      {"Ceil", Op::Ceil, -5, 5, {}},
      // Halves included: round half to even.
      {"Round", Op::Round, -4, 4, {}},
      {"Sign", Op::Sign, -2, 2, {}},
      {"Sin", Op::Sin, -10, 10, {}},
      {"Cos", Op::Cos, -10, 10, {}},
      {"Tan", Op::Tan, -1.5f, 1.5f, {}},
      {"Asin", Op::Asin, -1, 1, {}},
      {"Acos", Op::Acos, -1, 1, {}},
      {"Atan", Op::Atan, -10, 10, {}},
      {"Sinh", Op::Sinh, -5, 5, {}},
      {"Cosh", Op::Cosh, -5, 5, {}},
      {"Asinh", Op::Asinh, -10, 10, {}},
      {"Acosh", Op::Acosh, 1, 10, {}},
      {"Atanh", Op::Atanh, -0.99f, 0.99f, {}},
      {"Softsign", Op::Softsign, -5, 5, {}},
      {"Softplus", Op::Softplus, -30, 30, {}},
      {"Mish", Op::Mish, -10, 10, {}},
      {"HardSwish", Op::HardSwish, -5, 5, {}},
      {"LeakyRelu", Op::LeakyRelu, -3, 3, {floatAttr("alpha", 0.1f)}, 0.1f},
      {"LeakyRelu", Op::LeakyRelu, -3, 3, {}, 0.01f},
      {"Elu", Op::Elu, -5, 5, {floatAttr("alpha", 0.7f)}, 0.7f},
      {"Celu", Op::Celu, -5, 5, {floatAttr("alpha", 2.5f)}, 2.5f},
      {"Selu", Op::Selu, -5, 5, {}, seluAlpha, seluGamma},
      {"Selu",
       Op::Selu,
       -5,
       5,
       {floatAttr("alpha", 1.5f), floatAttr("gamma", 0.5f)},
       1.5f,
       0.5f},
      {"HardSigmoid", Op::HardSigmoid, -6, 6, {}, 0.2f, 0.5f},
      {"HardSigmoid",
       Op::HardSigmoid,
       -6,
       6,
       {floatAttr("alpha", 0.3f), floatAttr("beta", 0.4f)},
       0.3f,
       0.4f},
      {"ThresholdedRelu", Op::ThresholdedRelu, -3, 3, {}, 1.0f},
      {"ThresholdedRelu",
       Op::ThresholdedRelu,
       -3,
       3,
       {floatAttr("alpha", 0.5f)},
       0.5f},
  };
  std::vector<int64_t> shape = {1000};
  for (const Case &c : cases) {
    std::vector<float> values = randomFloats(1000, c.lo, c.hi, 11);
    // Exact halves and zeros, where rounding and Sign have their edges.
    for (size_t i = 0; i < 40; ++i)
      values[i] = llvm::StringRef(c.op) == "Round" ? float(int(i) - 20) + 0.5f
                                                   : (i % 2 ? 0.0f : -0.0f);
    HostTensor x = HostTensor::f32(shape, values);
    std::vector<float> expected = runCpu("", c.op, {&x}, shape, c.attrs);
    std::vector<float> actual;
    for (float v : values)
      actual.push_back(
          cuda::applyElementwise(c.code, v, 0, 0, c.param, c.param2));
    // The same libm calls in the same fp32 order on the host: identical up
    // to contraction; the device's libm is within its documented ulp
    // bounds (the device parity test's tolerance).
    expectClose(actual, expected, 1e-6, 1e-7, c.op);
  }
}

TEST(CudaElementwiseMathTest, ClipPReluModAndMeanAgreeWithTheCpu) {
  using Op = cuda::ElementwiseOp;
  std::vector<int64_t> shape = {10, 100};
  std::vector<float> values = randomFloats(1000, -4, 4, 21);
  values[0] = std::nanf("");
  values[1] = -INFINITY;
  values[2] = INFINITY;
  HostTensor x = HostTensor::f32(shape, values);
  // Clip with min and max inputs, with only max, and with neither (the
  // float range's ends: -inf clamps to the lowest float, as on the CPU).
  HostTensor lo = HostTensor::f32({}, {-1.25f}),
             hi = HostTensor::f32({}, {2.5f});
  const float inf = std::numeric_limits<float>::max();
  struct ClipCase {
    std::vector<HostTensor *> inputs;
    float lo, hi;
  };
  for (const ClipCase &c :
       {ClipCase{{&x, &lo, &hi}, -1.25f, 2.5f},
        ClipCase{{&x, nullptr, &hi}, -inf, 2.5f}, ClipCase{{&x}, -inf, inf}}) {
    std::vector<float> expected = runCpu("", "Clip", c.inputs, shape);
    std::vector<float> actual;
    for (float v : values)
      actual.push_back(cuda::applyElementwise(Op::Clip, v, 0, 0, c.lo, c.hi));
    expectClose(actual, expected, 0, 0, "Clip");
  }
  // PRelu with a slope per column (broadcast).
  HostTensor slope = HostTensor::f32({100}, randomFloats(100, 0, 0.5f, 22));
  std::vector<float> expected = runCpu("", "PRelu", {&x, &slope}, shape);
  std::vector<float> s = slope.floats(), actual;
  for (size_t i = 0; i < values.size(); ++i)
    actual.push_back(
        cuda::applyElementwise(Op::PRelu, values[i], s[i % 100], 0));
  expectClose(actual, expected, 0, 0, "PRelu");
  // Mod with fmod = 1 (C's fmod; the dividend's sign), divisors both signs.
  std::vector<float> divisors = randomFloats(1000, 0.25f, 3, 25);
  for (size_t i = 0; i < divisors.size(); i += 2)
    divisors[i] = -divisors[i];
  HostTensor d = HostTensor::f32(shape, divisors);
  expected = runCpu("", "Mod", {&x, &d}, shape, {intAttr("fmod", 1)});
  actual.clear();
  for (size_t i = 0; i < values.size(); ++i)
    actual.push_back(
        cuda::applyElementwise(Op::Fmod, values[i], divisors[i], 0));
  expectClose(actual, expected, 0, 0, "Mod");
  // Mean of three: the running sum in input order, then / 3.
  HostTensor y = HostTensor::f32(shape, randomFloats(1000, -4, 4, 23));
  HostTensor z = HostTensor::f32(shape, randomFloats(1000, -4, 4, 24));
  expected = runCpu("", "Mean", {&x, &y, &z}, shape);
  std::vector<float> yv = y.floats(), zv = z.floats();
  actual.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    float sum = cuda::applyElementwise(Op::Add, values[i], yv[i], 0);
    sum = cuda::applyElementwise(Op::Add, sum, zv[i], 0);
    actual.push_back(cuda::applyElementwise(Op::DivParam, sum, 0, 0, 3.0f));
  }
  expectClose(actual, expected, 0, 0, "Mean");
}

TEST(CudaElementwiseMathTest, BinaryAndGradientOpsAgreeWithTheCpuKernels) {
  using Op = cuda::ElementwiseOp;
  struct Case {
    const char *domain, *op;
    Op code;
    float lo, hi;
  };
  const std::vector<Case> cases = {
      {"", "Add", Op::Add, -5, 5},
      {"", "Sub", Op::Sub, -5, 5},
      {"", "Mul", Op::Mul, -5, 5},
      {"", "Div", Op::Div, 0.5f, 5},
      {"", "Pow", Op::Pow, 0.1f, 3},
      {"", "Max", Op::Max, -5, 5},
      {"", "Min", Op::Min, -5, 5},
      {"com.microsoft", "BiasGelu", Op::BiasGeluExact, -4, 4},
      {"com.microsoft", "ReluGrad", Op::ReluGrad, -3, 3},
      {"com.microsoft", "GeluGrad", Op::GeluGrad, -5, 5},
      {"com.microsoft", "FastGeluGrad", Op::FastGeluGrad, -5, 5},
      {"com.microsoft", "SigmoidGrad", Op::SigmoidGrad, 0, 1},
      {"com.microsoft", "TanhGrad", Op::TanhGrad, -1, 1},
  };
  std::vector<int64_t> shape = {20, 50};
  for (const Case &c : cases) {
    HostTensor a = HostTensor::f32(shape, randomFloats(1000, c.lo, c.hi, 8));
    // BiasGelu's bias is a row vector broadcast along the last dimension.
    bool bias = llvm::StringRef(c.op) == "BiasGelu";
    std::vector<int64_t> bShape = bias ? std::vector<int64_t>{50} : shape;
    HostTensor b =
        HostTensor::f32(bShape, randomFloats(bias ? 50 : 1000, c.lo, c.hi, 9));
    std::vector<float> expected = runCpu(c.domain, c.op, {&a, &b}, shape);
    std::vector<float> av = a.floats(), bv = b.floats(), actual;
    for (size_t i = 0; i < av.size(); ++i)
      actual.push_back(
          cuda::applyElementwise(c.code, av[i], bv[bias ? i % 50 : i], 0));
    // The CPU's BiasGelu rows use a vector erf within 4e-7 of erf.
    expectClose(actual, expected, 2e-6, bias ? 2e-6 : 2e-7, c.op);
  }
  // QuickGelu(X), QuickGeluGrad(dY, X) with alpha; Scale(X, s) both ways.
  {
    HostTensor x = HostTensor::f32(shape, randomFloats(1000, -6, 6, 31));
    HostTensor dy = HostTensor::f32(shape, randomFloats(1000, -1, 1, 32));
    HostTensor scale = HostTensor::f32({}, {3.0f});
    std::vector<float> quick = runCpu("com.microsoft", "QuickGelu", {&x}, shape,
                                      {floatAttr("alpha", 1.5f)});
    std::vector<float> quickGrad =
        runCpu("com.microsoft", "QuickGeluGrad", {&dy, &x}, shape,
               {floatAttr("alpha", 1.5f)});
    std::vector<float> up =
        runCpu("com.microsoft", "Scale", {&x, &scale}, shape);
    std::vector<float> down = runCpu("com.microsoft", "Scale", {&x, &scale},
                                     shape, {intAttr("scale_down", 1)});
    std::vector<float> xs = x.floats(), gs = dy.floats();
    std::vector<float> aQuick, aQuickGrad, aUp, aDown;
    for (size_t i = 0; i < xs.size(); ++i) {
      aQuick.push_back(
          cuda::applyElementwise(Op::QuickGelu, xs[i], 0, 0, 1.5f));
      aQuickGrad.push_back(
          cuda::applyElementwise(Op::QuickGeluGrad, gs[i], xs[i], 0, 1.5f));
      aUp.push_back(cuda::applyElementwise(Op::ScaleUp, xs[i], 3.0f, 0));
      aDown.push_back(cuda::applyElementwise(Op::ScaleDown, xs[i], 3.0f, 0));
    }
    expectClose(aQuick, quick, 2e-6, 2e-7, "QuickGelu");
    expectClose(aQuickGrad, quickGrad, 2e-6, 2e-7, "QuickGeluGrad");
    expectClose(aUp, up, 0, 0, "Scale");
    expectClose(aDown, down, 0, 0, "Scale (scale_down)");
  }
  // BiasGeluGrad_dX(dY, X, B) -> dY * gelu'(X + B).
  HostTensor dy = HostTensor::f32(shape, randomFloats(1000, -2, 2, 1));
  HostTensor x = HostTensor::f32(shape, randomFloats(1000, -4, 4, 2));
  HostTensor b = HostTensor::f32({50}, randomFloats(50, -1, 1, 3));
  std::vector<float> expected =
      runCpu("com.microsoft", "BiasGeluGrad_dX", {&dy, &x, &b}, shape);
  std::vector<float> g = dy.floats(), xv = x.floats(), bv = b.floats(), actual;
  for (size_t i = 0; i < g.size(); ++i)
    actual.push_back(
        cuda::applyElementwise(Op::BiasGeluGradExact, g[i], xv[i], bv[i % 50]));
  expectClose(actual, expected, 2e-6, 2e-7, "BiasGeluGrad_dX");
}

TEST(CudaElementwiseMathTest, SoftmaxStepsAgreeWithTheCpuKernels) {
  const int64_t rows = 6, width = 37;
  std::vector<int64_t> shape = {rows, width};
  HostTensor x = HostTensor::f32(shape, randomFloats(rows * width, -8, 8, 4));
  HostTensor dy = HostTensor::f32(shape, randomFloats(rows * width, -1, 1, 6));
  std::vector<float> y = runCpu("", "Softmax", {&x}, shape);
  std::vector<float> logY = runCpu("", "LogSoftmax", {&x}, shape);
  HostTensor yTensor = HostTensor::f32(shape, y);
  HostTensor logYTensor = HostTensor::f32(shape, logY);
  std::vector<float> dx =
      runCpu("com.microsoft", "SoftmaxGrad_13", {&dy, &yTensor}, shape);
  std::vector<float> logDx =
      runCpu("com.microsoft", "LogSoftmaxGrad_13", {&dy, &logYTensor}, shape);
  std::vector<float> xs = x.floats(), gs = dy.floats();
  std::vector<float> actualY, actualLog, actualDx, actualLogDx;
  for (int64_t r = 0; r < rows; ++r) {
    // The kernel's row statistics: fp32 max, the exp sum in double.
    float rowMax = -INFINITY;
    for (int64_t j = 0; j < width; ++j)
      rowMax = std::max(rowMax, xs[r * width + j]);
    double sum = 0, dot = 0, sumDy = 0;
    for (int64_t j = 0; j < width; ++j)
      sum += std::exp(xs[r * width + j] - rowMax);
    for (int64_t j = 0; j < width; ++j) {
      dot += gs[r * width + j] * y[r * width + j];
      sumDy += gs[r * width + j];
    }
    for (int64_t j = 0; j < width; ++j) {
      int64_t k = r * width + j;
      actualY.push_back(cuda::softmaxElement(xs[k], rowMax, float(sum)));
      actualLog.push_back(cuda::logSoftmaxElement(xs[k], rowMax, float(sum)));
      actualDx.push_back(cuda::softmaxGradElement(gs[k], y[k], float(dot)));
      actualLogDx.push_back(
          cuda::logSoftmaxGradElement(gs[k], logY[k], float(sumDy)));
    }
  }
  expectClose(actualY, y, 1e-5, 1e-7, "Softmax");
  expectClose(actualLog, logY, 1e-5, 1e-6, "LogSoftmax");
  expectClose(actualDx, dx, 1e-5, 1e-7, "SoftmaxGrad_13");
  expectClose(actualLogDx, logDx, 1e-5, 1e-6, "LogSoftmaxGrad_13");
}

TEST(CudaElementwiseMathTest, LayerNormStepsAgreeWithTheCpuKernels) {
  const int64_t rows = 5, width = 48;
  std::vector<int64_t> shape = {rows, width};
  HostTensor x = HostTensor::f32(shape, randomFloats(rows * width, -3, 5, 12));
  HostTensor scale = HostTensor::f32({width}, randomFloats(width, 0.5f, 2, 13));
  HostTensor bias = HostTensor::f32({width}, randomFloats(width, -1, 1, 14));
  HostTensor dy = HostTensor::f32(shape, randomFloats(rows * width, -1, 1, 15));
  KernelRunner runner;
  auto forward =
      runner.run("", "LayerNormalization", {&x, &scale, &bias},
                 {f32Type(shape), f32Type({rows, 1}), f32Type({rows, 1})},
                 {floatAttr("epsilon", 1e-5f)});
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  HostTensor mean = (*forward)[1], invStd = (*forward)[2];
  auto backward =
      runner.run("com.microsoft", "LayerNormalizationGrad",
                 {&dy, &x, &scale, &mean, &invStd},
                 {f32Type(shape), f32Type({width}), f32Type({width})});
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  std::vector<float> xs = x.floats(), ss = scale.floats(), bs = bias.floats(),
                     gs = dy.floats();
  std::vector<float> y, means, invs, dx;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, squares = 0;
    for (int64_t j = 0; j < width; ++j)
      sum += xs[r * width + j];
    double mu = sum / width;
    for (int64_t j = 0; j < width; ++j)
      squares += (xs[r * width + j] - mu) * (xs[r * width + j] - mu);
    float m = static_cast<float>(mu);
    float inv = static_cast<float>(1.0 / std::sqrt(squares / width + 1e-5));
    means.push_back(m);
    invs.push_back(inv);
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < width; ++j) {
      int64_t k = r * width + j;
      y.push_back(cuda::layerNormElement(xs[k], m, inv, ss[j], bs[j]));
      float ds = gs[k] * ss[j];
      s1 += ds;
      s2 += ds * ((xs[k] - m) * inv);
    }
    for (int64_t j = 0; j < width; ++j) {
      int64_t k = r * width + j;
      dx.push_back(cuda::layerNormGradElement(
          gs[k], xs[k], m, inv, ss[j], float(s1), float(s2), float(width)));
    }
  }
  expectClose(y, (*forward)[0].floats(), 1e-5, 1e-6, "LayerNormalization");
  expectClose(means, mean.floats(), 1e-6, 1e-7, "mean");
  expectClose(invs, invStd.floats(), 1e-6, 1e-7, "inv_std_dev");
  expectClose(dx, (*backward)[0].floats(), 1e-4, 1e-5,
              "LayerNormalizationGrad");
}

TEST(CudaElementwiseMathTest, OptimizerUpdatesAreTheCpuKernels) {
  const int64_t n = 300;
  std::vector<float> w0 = randomFloats(n, -1, 1, 21),
                     g = randomFloats(n, -0.1f, 0.1f, 22),
                     m10 = randomFloats(n, -0.01f, 0.01f, 23),
                     m20 = randomFloats(n, 0, 1e-4f, 24);
  for (int64_t mode : {0, 1}) {
    for (int64_t step : {1, 7, 1000}) {
      HostTensor lr = HostTensor::f32({}, {3e-3f});
      HostTensor stepTensor = HostTensor::i64({}, {step});
      HostTensor w = HostTensor::f32({n}, w0), grad = HostTensor::f32({n}, g),
                 m1 = HostTensor::f32({n}, m10), m2 = HostTensor::f32({n}, m20);
      KernelRunner runner;
      auto result = runner.run(
          "com.microsoft", "AdamWOptimizer",
          {&lr, &stepTensor, nullptr, &w, &grad, &m1, &m2},
          {TensorType::get(DType::I64, {})},
          {floatAttr("alpha", 0.9f), floatAttr("beta", 0.999f),
           floatAttr("epsilon", 1e-8f), floatAttr("weight_decay", 0.01f),
           intAttr("adam_mode", mode)});
      ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
      cuda::AdamWConstants s;
      s.alpha = 0.9f;
      s.beta = 0.999f;
      s.epsilon = 1e-8f;
      s.weightDecay = 0.01f;
      s.mode = static_cast<int32_t>(mode);
      cuda::setAdamWStep(s, 3e-3f, step, /*correctBias=*/true);
      std::vector<float> ws = w.floats(), m1s = m1.floats(), m2s = m2.floats();
      for (int64_t i = 0; i < n; ++i) {
        float wi = w0[i], a = m10[i], b = m20[i];
        cuda::adamWElement(s, wi, g[i], a, b);
        // The same fp32 operations in the same order: equal bits.
        EXPECT_EQ(wi, ws[i]) << "mode " << mode << " step " << step << " " << i;
        EXPECT_EQ(a, m1s[i]) << i;
        EXPECT_EQ(b, m2s[i]) << i;
      }
    }
  }
  HostTensor lr = HostTensor::f32({}, {0.05f});
  HostTensor w = HostTensor::f32({n}, w0), grad = HostTensor::f32({n}, g);
  KernelRunner runner;
  auto result =
      runner.run("com.microsoft", "SGDOptimizerV2", {&lr, nullptr, &w, &grad},
                 {TensorType::get(DType::Bool, {})});
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  std::vector<float> ws = w.floats();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(cuda::sgdElement(w0[i], g[i], -0.05f), ws[i]) << i;
}

TEST(CudaWorkspaceModelTest, OnlyGemmsReserveCublasLtScratch) {
  Module module;
  module.opsetImports[""] = 17;
  module.opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module.getGraph();
  Value *a = graph.addInput(f32Type({4, 8}), "a");
  Value *b = graph.addInput(f32Type({8, 2}), "b");
  Builder builder(graph);
  Node *matMul =
      builder.create(OpName{"", "MatMul"}, {a, b}, {f32Type({4, 2})}, {}, "mm");
  Node *fused = builder.create(OpName{std::string(kMsDomain), "FusedMatMul"},
                               {a, b}, {f32Type({4, 2})}, {}, "fmm");
  Node *relu =
      builder.create(OpName{"", "Relu"}, {a}, {f32Type({4, 8})}, {}, "relu");
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*matMul), kCudaGemmWorkspaceBytes);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*fused), kCudaGemmWorkspaceBytes);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*relu), 0u);
  if (isCudaBackendBuilt()) {
    EXPECT_TRUE(hasCudaKernelFor("", "Relu"));
    EXPECT_TRUE(hasCudaKernelFor(kMsDomain, "SoftmaxCrossEntropyLossGrad"));
    EXPECT_TRUE(hasCudaKernelFor("", "Conv")); // Refused without cuDNN.
    EXPECT_TRUE(hasCudaKernelFor("", "Floor"));
    // One of CudaCoverageTest's known gaps.
    EXPECT_FALSE(hasCudaKernelFor(kMsDomain, "YieldOp"));
    EXPECT_FALSE(bool(checkCudaNode(*relu)));
  }
}

TEST(CudaWorkspaceModelTest, CheckKernelNamesWhatIsMissing) {
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  Value *x = graph.addInput(f32Type({1, 3, 8, 8}), "x");
  Value *w = graph.addInput(f32Type({4, 3, 3, 3}), "w");
  Value *i = graph.addInput(TensorType::get(DType::I32, {4}), "i");
  Builder builder(graph);
  Node *conv = builder.create(OpName{"", "Conv"}, {x, w},
                              {f32Type({1, 4, 6, 6})}, {}, "conv");
  Node *intAdd = builder.create(OpName{"", "Add"}, {i, i},
                                {TensorType::get(DType::I32, {4})}, {}, "iadd");
  Node *relu = builder.create(OpName{"", "Relu"}, {x}, {f32Type({1, 3, 8, 8})},
                              {}, "relu");
  // YieldOp is one of CudaCoverageTest's known gaps.
  Node *yield =
      builder.create(OpName{std::string(kMsDomain), "YieldOp"}, {x},
                     {f32Type({1, 3, 8, 8})}, {}, "yield_without_kernel");
  std::string yieldError = llvm::toString(checkCudaNode(*yield));
  EXPECT_NE(yieldError.find("YieldOp"), std::string::npos) << yieldError;
  EXPECT_NE(yieldError.find("yield_without_kernel"), std::string::npos)
      << yieldError;
  if (!isCudaBackendBuilt()) {
    EXPECT_NE(yieldError.find("not built"), std::string::npos) << yieldError;
    return;
  }
  EXPECT_NE(yieldError.find("no CUDA kernel"), std::string::npos) << yieldError;
  // Conv has one now (cuDNN, CudnnDispatch.cpp) where cuDNN was found.
  std::string convError = llvm::toString(checkCudaNode(*conv));
  if (isCudnnBuilt())
    EXPECT_EQ(convError, "") << convError;
  else
    EXPECT_NE(convError.find("built without cuDNN"), std::string::npos)
        << convError;
  std::string addError = llvm::toString(checkCudaNode(*intAdd));
  EXPECT_NE(addError.find("i32"), std::string::npos) << addError;
  EXPECT_NE(addError.find("iadd"), std::string::npos) << addError;
  EXPECT_FALSE(bool(checkCudaNode(*relu)));
}

TEST(CudaMemoryFitTest, ThePlanMustFitTheFreeBytes) {
  EXPECT_FALSE(bool(checkPlannedBytesFit(100, 1ull << 30, "GPU")));
  llvm::Error err = checkPlannedBytesFit(3ull << 30, 1ull << 30, "NVIDIA X");
  ASSERT_TRUE(bool(err));
  std::string message = llvm::toString(std::move(err));
  EXPECT_NE(message.find("3221225472 bytes (3.00 GiB)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("NVIDIA X has 1073741824 bytes (1.00 GiB) free"),
            std::string::npos)
      << message;
  // The free bytes less the CUDA runtime's slack (CudaMeasurementTest).
  EXPECT_NE(message.find("--memory-limit=" +
                         std::to_string((1ull << 30) - kCudaRuntimeSlackBytes)),
            std::string::npos)
      << message;
}

} // namespace
