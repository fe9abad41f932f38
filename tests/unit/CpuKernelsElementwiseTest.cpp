//===- CpuKernelsElementwiseTest.cpp - Element-wise CPU kernels -----------===//
//
// Binary arithmetic, comparisons, logic, Where and the variadic ops against a
// naive broadcasting reference; unary math and activations against std::
// functions; Clip, Cast (every type pair), CastLike, IsNaN/IsInf; integer
// wrapping and the integer-division-by-zero error.
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

/// Index of output element \p flat in an operand of \p shape broadcast to
/// \p outShape (numpy rules, by index arithmetic).
int64_t broadcastIndex(int64_t flat, const std::vector<int64_t> &outShape,
                       const std::vector<int64_t> &shape) {
  int64_t index = 0, stride = 1;
  for (int j = 0; j < static_cast<int>(outShape.size()); ++j) {
    int d = static_cast<int>(outShape.size()) - 1 - j;
    int64_t coord = flat % outShape[d];
    flat /= outShape[d];
    if (j < static_cast<int>(shape.size())) {
      int64_t extent = shape[shape.size() - 1 - j];
      index += (extent == 1 ? 0 : coord) * stride;
      stride *= extent;
    }
  }
  return index;
}

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

struct BroadcastCase {
  std::vector<int64_t> a, b, out;
};

const BroadcastCase kBroadcastCases[] = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {4}, {2, 3, 4}},
    {{2, 3, 4}, {3, 1}, {2, 3, 4}},
    {{1}, {5, 2}, {5, 2}},
    {{5, 1, 3}, {1, 4, 1}, {5, 4, 3}},
    {{2, 1, 3, 1}, {4, 1, 5}, {2, 4, 3, 5}},
    {{}, {3, 2}, {3, 2}},
    {{3, 1}, {}, {3, 1}},
    {{0, 3}, {3}, {0, 3}}};

template <typename Fn> void checkBinaryFloat(const char *op, Fn reference) {
  unsigned seed = 100;
  for (const BroadcastCase &c : kBroadcastCases) {
    KernelRunner runner;
    std::vector<float> a = randomFloats(count(c.a), ++seed, 0.5f, 2.0f);
    std::vector<float> b = randomFloats(count(c.b), ++seed, 0.5f, 2.0f);
    HostTensor ha = HostTensor::f32(c.a, a), hb = HostTensor::f32(c.b, b);
    auto result = runner.run("", op, {&ha, &hb}, {f32Type(c.out)});
    ASSERT_TRUE(static_cast<bool>(result))
        << op << ": " << llvm::toString(result.takeError());
    std::vector<float> got = (*result)[0].floats();
    for (int64_t i = 0; i < count(c.out); ++i) {
      float want = reference(a[broadcastIndex(i, c.out, c.a)],
                             b[broadcastIndex(i, c.out, c.b)]);
      EXPECT_FLOAT_EQ(got[i], want) << op << " element " << i;
    }
  }
}

TEST(CpuElementwiseTest, BinaryFloatOpsBroadcast) {
  checkBinaryFloat("Add", [](float x, float y) { return x + y; });
  checkBinaryFloat("Sub", [](float x, float y) { return x - y; });
  checkBinaryFloat("Mul", [](float x, float y) { return x * y; });
  checkBinaryFloat("Div", [](float x, float y) { return x / y; });
  checkBinaryFloat("Pow", [](float x, float y) { return std::pow(x, y); });
  checkBinaryFloat("Max", [](float x, float y) { return std::max(x, y); });
  checkBinaryFloat("Min", [](float x, float y) { return std::min(x, y); });
}

TEST(CpuElementwiseTest, LargeBroadcastUsesEveryPath) {
  // Big enough to be split across threads; rows of a [N,1] x [1,M] product.
  KernelRunner runner;
  std::vector<float> a = randomFloats(300, 1), b = randomFloats(700, 2);
  HostTensor ha = HostTensor::f32({300, 1}, a),
             hb = HostTensor::f32({1, 700}, b);
  auto result = runner.run("", "Mul", {&ha, &hb}, {f32Type({300, 700})});
  ASSERT_TRUE(static_cast<bool>(result));
  std::vector<float> got = (*result)[0].floats();
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 700; ++j)
      ASSERT_EQ(got[i * 700 + j], a[i] * b[j]);
}

TEST(CpuElementwiseTest, PowWithIntegerExponentAndConstantFastPaths) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({4}, {1.5f, -2.0f, 3.0f, 0.25f});
  HostTensor two = HostTensor::i64({}, {2});
  auto squared = runner.run("", "Pow", {&x, &two}, {f32Type({4})});
  ASSERT_TRUE(static_cast<bool>(squared))
      << llvm::toString(squared.takeError());
  EXPECT_EQ((*squared)[0].floats(),
            (std::vector<float>{2.25f, 4.0f, 9.0f, 0.0625f}));
  HostTensor half = HostTensor::f32({}, {0.5f});
  auto root = runner.run("", "Pow", {&x, &half}, {f32Type({4})});
  ASSERT_TRUE(static_cast<bool>(root));
  EXPECT_FLOAT_EQ((*root)[0].floats()[0], std::sqrt(1.5f));
  EXPECT_TRUE(std::isnan((*root)[0].floats()[1]));
  HostTensor ints = HostTensor::i64({3}, {2, -3, 5});
  HostTensor exps = HostTensor::i64({3}, {10, 3, 0});
  auto intPow =
      runner.run("", "Pow", {&ints, &exps}, {TensorType::get(DType::I64, {3})});
  ASSERT_TRUE(static_cast<bool>(intPow));
  EXPECT_EQ((*intPow)[0].values<int64_t>(),
            (std::vector<int64_t>{1024, -27, 1}));
}

TEST(CpuElementwiseTest, IntegerArithmeticWrapsAndDivisionByZeroFails) {
  KernelRunner runner;
  int64_t big = std::numeric_limits<int64_t>::max();
  HostTensor a = HostTensor::i64({3}, {big, 7, -7});
  HostTensor b = HostTensor::i64({3}, {1, 2, 2});
  auto sum =
      runner.run("", "Add", {&a, &b}, {TensorType::get(DType::I64, {3})});
  ASSERT_TRUE(static_cast<bool>(sum));
  EXPECT_EQ((*sum)[0].values<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 9, -5}));
  auto quotient =
      runner.run("", "Div", {&a, &b}, {TensorType::get(DType::I64, {3})});
  ASSERT_TRUE(static_cast<bool>(quotient));
  EXPECT_EQ((*quotient)[0].values<int64_t>(),
            (std::vector<int64_t>{big, 3, -3}));
  HostTensor zero = HostTensor::i64({3}, {1, 0, 1});
  auto bad =
      runner.run("", "Div", {&a, &zero}, {TensorType::get(DType::I64, {3})});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("integer division by zero"),
            std::string::npos);
  HostTensor i32a =
      HostTensor::i32({2}, {std::numeric_limits<int32_t>::min(), 6});
  HostTensor minusOne = HostTensor::i32({2}, {-1, -1});
  auto wrapped = runner.run("", "Div", {&i32a, &minusOne},
                            {TensorType::get(DType::I32, {2})});
  ASSERT_TRUE(static_cast<bool>(wrapped));
  EXPECT_EQ((*wrapped)[0].values<int32_t>(),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -6}));
  HostTensor f = HostTensor::f32({3}, {1, 2, 3});
  auto mixed =
      runner.run("", "Add", {&a, &f}, {TensorType::get(DType::I64, {3})});
  EXPECT_FALSE(static_cast<bool>(mixed));
  llvm::consumeError(mixed.takeError());
}

TEST(CpuElementwiseTest, ComparisonsAndLogic) {
  KernelRunner runner;
  HostTensor a = HostTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = HostTensor::f32({3}, {2, 2, 7});
  auto boolType = TensorType::get(DType::Bool, {2, 3});
  struct {
    const char *op;
    std::vector<uint8_t> want;
  } cases[] = {{"Equal", {0, 1, 0, 0, 0, 0}},
               {"Less", {1, 0, 1, 0, 0, 1}},
               {"Greater", {0, 0, 0, 1, 1, 0}},
               {"LessOrEqual", {1, 1, 1, 0, 0, 1}},
               {"GreaterOrEqual", {0, 1, 0, 1, 1, 0}}};
  for (auto &c : cases) {
    auto result = runner.run("", c.op, {&a, &b}, {boolType});
    ASSERT_TRUE(static_cast<bool>(result)) << c.op;
    EXPECT_EQ((*result)[0].values<uint8_t>(), c.want) << c.op;
  }
  HostTensor ia = HostTensor::i64({3}, {1, 5, -2});
  HostTensor ib = HostTensor::i64({}, {1});
  auto eq =
      runner.run("", "Equal", {&ia, &ib}, {TensorType::get(DType::Bool, {3})});
  ASSERT_TRUE(static_cast<bool>(eq));
  EXPECT_EQ((*eq)[0].values<uint8_t>(), (std::vector<uint8_t>{1, 0, 0}));
  HostTensor p = HostTensor::boolean({4}, {0, 0, 1, 1});
  HostTensor q = HostTensor::boolean({4}, {0, 1, 0, 1});
  auto t4 = TensorType::get(DType::Bool, {4});
  auto andResult = runner.run("", "And", {&p, &q}, {t4});
  auto orResult = runner.run("", "Or", {&p, &q}, {t4});
  auto xorResult = runner.run("", "Xor", {&p, &q}, {t4});
  auto notResult = runner.run("", "Not", {&p}, {t4});
  auto boolEq = runner.run("", "Equal", {&p, &q}, {t4});
  ASSERT_TRUE(andResult && orResult && xorResult && notResult && boolEq);
  EXPECT_EQ((*andResult)[0].values<uint8_t>(),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ((*orResult)[0].values<uint8_t>(),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ((*xorResult)[0].values<uint8_t>(),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ((*notResult)[0].values<uint8_t>(),
            (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ((*boolEq)[0].values<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 1}));
}

TEST(CpuElementwiseTest, WhereBroadcastsThreeOperands) {
  KernelRunner runner;
  HostTensor cond = HostTensor::boolean({2, 1}, {1, 0});
  HostTensor x = HostTensor::f32({3}, {1, 2, 3});
  HostTensor y = HostTensor::f32({2, 3}, {10, 20, 30, 40, 50, 60});
  auto result = runner.run("", "Where", {&cond, &x, &y}, {f32Type({2, 3})});
  ASSERT_TRUE(static_cast<bool>(result));
  EXPECT_EQ((*result)[0].floats(), (std::vector<float>{1, 2, 3, 40, 50, 60}));
  // Any element type: int64 values.
  HostTensor xi = HostTensor::i64({}, {7});
  HostTensor yi = HostTensor::i64({2, 2}, {1, 2, 3, 4});
  HostTensor c2 = HostTensor::boolean({2}, {0, 1});
  auto ints = runner.run("", "Where", {&c2, &xi, &yi},
                         {TensorType::get(DType::I64, {2, 2})});
  ASSERT_TRUE(static_cast<bool>(ints));
  EXPECT_EQ((*ints)[0].values<int64_t>(), (std::vector<int64_t>{1, 7, 3, 7}));
}

TEST(CpuElementwiseTest, VariadicSumMeanMaxMin) {
  KernelRunner runner;
  HostTensor a = HostTensor::f32({2, 2}, {1, 5, 3, -1});
  HostTensor b = HostTensor::f32({2}, {2, 2});
  HostTensor c = HostTensor::f32({2, 1}, {0, 10});
  auto sum = runner.run("", "Sum", {&a, &b, &c}, {f32Type({2, 2})});
  auto mean = runner.run("", "Mean", {&a, &b, &c}, {f32Type({2, 2})});
  auto max = runner.run("", "Max", {&a, &b, &c}, {f32Type({2, 2})});
  auto min = runner.run("", "Min", {&a, &b, &c}, {f32Type({2, 2})});
  auto single = runner.run("", "Sum", {&b}, {f32Type({2})});
  ASSERT_TRUE(sum && mean && max && min && single);
  EXPECT_EQ((*sum)[0].floats(), (std::vector<float>{3, 7, 15, 11}));
  EXPECT_EQ((*mean)[0].floats(),
            (std::vector<float>{1, 7.0f / 3, 5, 11.0f / 3}));
  EXPECT_EQ((*max)[0].floats(), (std::vector<float>{2, 5, 10, 10}));
  EXPECT_EQ((*min)[0].floats(), (std::vector<float>{0, 0, 2, -1}));
  EXPECT_EQ((*single)[0].floats(), (std::vector<float>{2, 2}));
  HostTensor nan = HostTensor::f32({2}, {std::nanf(""), 1});
  auto nanMax = runner.run("", "Max", {&nan, &b}, {f32Type({2})});
  ASSERT_TRUE(static_cast<bool>(nanMax));
  EXPECT_TRUE(std::isnan((*nanMax)[0].floats()[0]));
}

template <typename Fn>
void checkUnary(llvm::StringRef domain, const char *op, Fn reference,
                std::vector<NamedAttribute> attrs = {}, float low = -3.0f,
                float high = 3.0f) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(1000, 42, low, high);
  x[0] = 0.0f;
  HostTensor hx = HostTensor::f32({10, 100}, x);
  auto result = runner.run(domain, op, {&hx}, {f32Type({10, 100})}, attrs);
  ASSERT_TRUE(static_cast<bool>(result))
      << op << ": " << llvm::toString(result.takeError());
  std::vector<float> got = (*result)[0].floats();
  for (size_t i = 0; i < x.size(); ++i) {
    double want = reference(static_cast<double>(x[i]));
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got[i])) << op << " at " << x[i];
    else if (std::isinf(want))
      EXPECT_EQ(got[i], want) << op << " at " << x[i];
    else
      EXPECT_NEAR(got[i], want, 2e-6 * std::max(1.0, std::fabs(want)))
          << op << " at " << x[i];
  }
  // The same op on f64 agrees with the double reference closely.
  std::vector<double> xd(x.begin(), x.end());
  HostTensor hd = HostTensor::f64({10, 100}, xd);
  auto doubles = runner.run(domain, op, {&hd},
                            {TensorType::get(DType::F64, {10, 100})}, attrs);
  ASSERT_TRUE(static_cast<bool>(doubles)) << op;
  std::vector<double> gotD = (*doubles)[0].values<double>();
  for (size_t i = 0; i < xd.size(); ++i) {
    double want = reference(xd[i]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(gotD[i])) << op;
    else if (std::isinf(want))
      EXPECT_EQ(gotD[i], want) << op;
    else
      EXPECT_NEAR(gotD[i], want, 1e-12 * std::max(1.0, std::fabs(want))) << op;
  }
}

TEST(CpuElementwiseTest, UnaryMathAndActivations) {
  const double pi = 3.14159265358979323846;
  checkUnary(
      "", "Sqrt", [](double x) { return std::sqrt(x); }, {}, 0.0f, 4.0f);
  checkUnary("", "Exp", [](double x) { return std::exp(x); });
  checkUnary(
      "", "Log", [](double x) { return std::log(x); }, {}, 0.1f, 5.0f);
  checkUnary("", "Neg", [](double x) { return -x; });
  checkUnary("", "Abs", [](double x) { return std::fabs(x); });
  checkUnary(
      "", "Reciprocal", [](double x) { return 1 / x; }, {}, 0.5f, 3.0f);
  checkUnary("", "Relu", [](double x) { return x > 0 ? x : 0; });
  // Attributes are fp32: the reference uses alpha = 0.2f exactly.
  checkUnary("", "LeakyRelu",
             [](double x) { return x > 0 ? x : double(0.2f) * x; },
             {floatAttr("alpha", 0.2f)});
  checkUnary("", "Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); });
  checkUnary("", "Tanh", [](double x) { return std::tanh(x); });
  checkUnary("", "Erf", [](double x) { return std::erf(x); });
  checkUnary("", "Floor", [](double x) { return std::floor(x); });
  checkUnary("", "Ceil", [](double x) { return std::ceil(x); });
  checkUnary("", "Sign",
             [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); });
  auto exact = [](double x) {
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  };
  auto approx = [pi](double x) {
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
  };
  checkUnary("", "Gelu", exact);
  checkUnary("", "Gelu", approx, {stringAttr("approximate", "tanh")});
  checkUnary(kMsDomain, "Gelu", exact);
  checkUnary(kMsDomain, "FastGelu", approx);
  checkUnary("", "Clip", [](double x) { return std::clamp(x, -1.0, 0.5); },
             {floatAttr("min", -1.0f), floatAttr("max", 0.5f)});
}

TEST(CpuElementwiseTest, MoreUnaryFunctions) {
  auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  checkUnary("", "Sin", [](double x) { return std::sin(x); });
  checkUnary("", "Cos", [](double x) { return std::cos(x); });
  checkUnary(
      "", "Tan", [](double x) { return std::tan(x); }, {}, -1.2f, 1.2f);
  checkUnary(
      "", "Asin", [](double x) { return std::asin(x); }, {}, -0.99f, 0.99f);
  checkUnary(
      "", "Acos", [](double x) { return std::acos(x); }, {}, -0.99f, 0.99f);
  checkUnary("", "Atan", [](double x) { return std::atan(x); });
  checkUnary("", "Sinh", [](double x) { return std::sinh(x); });
  checkUnary("", "Cosh", [](double x) { return std::cosh(x); });
  checkUnary("", "Asinh", [](double x) { return std::asinh(x); });
  checkUnary(
      "", "Acosh", [](double x) { return std::acosh(x); }, {}, 1.0f, 5.0f);
  checkUnary(
      "", "Atanh", [](double x) { return std::atanh(x); }, {}, -0.9f, 0.9f);
  checkUnary("", "Round", [](double x) { return std::nearbyint(x); });
  checkUnary("", "Softsign", [](double x) { return x / (1 + std::fabs(x)); });
  checkUnary("", "Softplus", softplus);
  checkUnary("", "Mish", [&](double x) { return x * std::tanh(softplus(x)); });
  checkUnary("", "HardSwish",
             [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); });
  checkUnary("", "Elu",
             [](double x) { return x >= 0 ? x : double(0.5f) * std::expm1(x); },
             {floatAttr("alpha", 0.5f)});
  checkUnary(
      "", "Celu",
      [](double x) { return x >= 0 ? x : double(2.0f) * std::expm1(x / 2); },
      {floatAttr("alpha", 2.0f)});
  checkUnary("", "Selu", [](double x) {
    return double(1.05070102214813232421875f) *
           (x > 0 ? x : double(1.67326319217681884765625f) * std::expm1(x));
  });
  checkUnary("", "HardSigmoid", [](double x) {
    return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0);
  });
  checkUnary("", "ThresholdedRelu", [](double x) { return x > 1 ? x : 0; });
  checkUnary(kMsDomain, "QuickGelu",
             [](double x) { return x / (1 + std::exp(-double(1.702f) * x)); });
  // Round: halves go to even.
  KernelRunner runner;
  HostTensor halves = HostTensor::f32({4}, {0.5f, 1.5f, 2.5f, -0.5f});
  auto rounded = runner.run("", "Round", {&halves}, {f32Type({4})});
  ASSERT_TRUE(static_cast<bool>(rounded));
  EXPECT_EQ((*rounded)[0].floats(), (std::vector<float>{0, 2, 2, -0.0f}));
}

TEST(CpuElementwiseTest, PReluAndMod) {
  checkBinaryFloat("PRelu",
                   [](float x, float slope) { return x < 0 ? x * slope : x; });
  KernelRunner runner;
  HostTensor a = HostTensor::i64({4}, {7, -7, 7, -7});
  HostTensor b = HostTensor::i64({4}, {3, 3, -3, -3});
  auto i64 = TensorType::get(DType::I64, {4});
  auto floorMod = runner.run("", "Mod", {&a, &b}, {i64});
  auto cMod = runner.run("", "Mod", {&a, &b}, {i64}, {intAttr("fmod", 1)});
  ASSERT_TRUE(floorMod && cMod);
  EXPECT_EQ((*floorMod)[0].values<int64_t>(),
            (std::vector<int64_t>{1, 2, -2, -1}));
  EXPECT_EQ((*cMod)[0].values<int64_t>(), (std::vector<int64_t>{1, -1, 1, -1}));
  HostTensor fa = HostTensor::f32({2}, {5.5f, -5.5f}),
             fb = HostTensor::f32({}, {2});
  auto fmod =
      runner.run("", "Mod", {&fa, &fb}, {f32Type({2})}, {intAttr("fmod", 1)});
  ASSERT_TRUE(static_cast<bool>(fmod));
  EXPECT_EQ((*fmod)[0].floats(), (std::vector<float>{1.5f, -1.5f}));
  auto floatFloorMod = runner.run("", "Mod", {&fa, &fb}, {f32Type({2})});
  EXPECT_FALSE(static_cast<bool>(floatFloorMod));
  llvm::consumeError(floatFloorMod.takeError());
  HostTensor zero = HostTensor::i64({}, {0});
  auto byZero = runner.run("", "Mod", {&a, &zero}, {i64});
  EXPECT_FALSE(static_cast<bool>(byZero));
  llvm::consumeError(byZero.takeError());
}

TEST(CpuElementwiseTest, ClipInputsBiasGeluAndPredicates) {
  KernelRunner runner;
  HostTensor x = HostTensor::i64({4}, {-5, 0, 3, 9});
  HostTensor lo = HostTensor::i64({}, {-1});
  HostTensor hi = HostTensor::i64({}, {4});
  auto clipped = runner.run("", "Clip", {&x, &lo, &hi},
                            {TensorType::get(DType::I64, {4})});
  ASSERT_TRUE(static_cast<bool>(clipped));
  EXPECT_EQ((*clipped)[0].values<int64_t>(),
            (std::vector<int64_t>{-1, 0, 3, 4}));
  auto onlyMax = runner.run("", "Clip", {&x, nullptr, &hi},
                            {TensorType::get(DType::I64, {4})});
  ASSERT_TRUE(static_cast<bool>(onlyMax));
  EXPECT_EQ((*onlyMax)[0].values<int64_t>(),
            (std::vector<int64_t>{-5, 0, 3, 4}));

  HostTensor a = HostTensor::f32({2, 3}, {-1, 0, 1, 2, 3, -2});
  HostTensor bias = HostTensor::f32({3}, {0.5f, -0.5f, 1});
  auto biased =
      runner.run(kMsDomain, "BiasGelu", {&a, &bias}, {f32Type({2, 3})});
  ASSERT_TRUE(static_cast<bool>(biased));
  std::vector<float> av = a.floats(), bv = bias.floats(),
                     got = (*biased)[0].floats();
  for (int i = 0; i < 6; ++i) {
    double v = av[i] + bv[i % 3];
    EXPECT_NEAR(got[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
  }

  float inf = std::numeric_limits<float>::infinity();
  HostTensor special = HostTensor::f32({4}, {1, inf, -inf, std::nanf("")});
  auto t4 = TensorType::get(DType::Bool, {4});
  auto isNaN = runner.run("", "IsNaN", {&special}, {t4});
  auto isInf = runner.run("", "IsInf", {&special}, {t4});
  auto isPosInf = runner.run("", "IsInf", {&special}, {t4},
                             {intAttr("detect_negative", 0)});
  ASSERT_TRUE(isNaN && isInf && isPosInf);
  EXPECT_EQ((*isNaN)[0].values<uint8_t>(), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ((*isInf)[0].values<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ((*isPosInf)[0].values<uint8_t>(),
            (std::vector<uint8_t>{0, 1, 0, 0}));
}

TEST(CpuElementwiseTest, CastBetweenEveryTypePair) {
  // Values every type can hold exactly (bool sees nonzero as true).
  std::vector<double> values = {0, 1, 2, 5, 100, 127};
  DType types[] = {DType::F32, DType::F16,  DType::BF16, DType::F64, DType::I64,
                   DType::I32, DType::Bool, DType::U8,   DType::I8};
  auto make = [&](DType type) {
    std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
    switch (type) {
    case DType::F32:
      return HostTensor::f32(shape,
                             std::vector<float>(values.begin(), values.end()));
    case DType::F16:
      return HostTensor::f16(shape,
                             std::vector<float>(values.begin(), values.end()));
    case DType::BF16:
      return HostTensor::bf16(shape,
                              std::vector<float>(values.begin(), values.end()));
    case DType::F64:
      return HostTensor::f64(shape, values);
    case DType::I64:
      return HostTensor::i64(
          shape, std::vector<int64_t>(values.begin(), values.end()));
    case DType::I32:
      return HostTensor::i32(
          shape, std::vector<int32_t>(values.begin(), values.end()));
    case DType::Bool: {
      std::vector<uint8_t> bits;
      for (double v : values)
        bits.push_back(v != 0);
      return HostTensor::boolean(shape, bits);
    }
    case DType::U8:
      return HostTensor::of(DType::U8, shape,
                            std::vector<uint8_t>(values.begin(), values.end()));
    default:
      return HostTensor::of(DType::I8, shape,
                            std::vector<int8_t>(values.begin(), values.end()));
    }
  };
  KernelRunner runner;
  for (DType from : types)
    for (DType to : types) {
      HostTensor input = make(from);
      auto result = runner.run(
          "", "Cast", {&input},
          {TensorType::get(to, {static_cast<int64_t>(values.size())})},
          {intAttr("to", static_cast<int64_t>(to))});
      ASSERT_TRUE(static_cast<bool>(result))
          << dtypeName(from).str() << "->" << dtypeName(to).str() << ": "
          << llvm::toString(result.takeError());
      // Expected: the source's values (as bools if either side is bool).
      HostTensor want = make(to);
      if (from == DType::Bool) {
        std::vector<double> saved = values;
        for (double &v : values)
          v = v != 0;
        want = make(to);
        values = saved;
      }
      EXPECT_EQ((*result)[0].bytes, want.bytes)
          << dtypeName(from).str() << "->" << dtypeName(to).str();
    }
}

TEST(CpuElementwiseTest, CastRoundsSaturatesAndCastLike) {
  KernelRunner runner;
  float inf = std::numeric_limits<float>::infinity();
  HostTensor x =
      HostTensor::f32({6}, {2.7f, -2.7f, 1e10f, -inf, std::nanf(""), 300.0f});
  auto toI32 = runner.run("", "Cast", {&x}, {TensorType::get(DType::I32, {6})},
                          {intAttr("to", static_cast<int64_t>(DType::I32))});
  ASSERT_TRUE(static_cast<bool>(toI32));
  EXPECT_EQ(
      (*toI32)[0].values<int32_t>(),
      (std::vector<int32_t>{2, -2, std::numeric_limits<int32_t>::max(),
                            std::numeric_limits<int32_t>::min(), 0, 300}));
  HostTensor fine = HostTensor::f32({2}, {1.0f + std::ldexp(1.0f, -11), 0.1f});
  auto toF16 =
      runner.run("", "Cast", {&fine}, {TensorType::get(DType::F16, {2})},
                 {intAttr("to", static_cast<int64_t>(DType::F16))});
  ASSERT_TRUE(static_cast<bool>(toF16));
  EXPECT_EQ((*toF16)[0].values<uint16_t>(),
            (std::vector<uint16_t>{floatToHalf(1.0f + std::ldexp(1.0f, -11)),
                                   floatToHalf(0.1f)}));
  HostTensor like = HostTensor::i64({1}, {0});
  HostTensor y = HostTensor::f32({2}, {3.9f, -1.2f});
  auto castLike = runner.run("", "CastLike", {&y, &like},
                             {TensorType::get(DType::I64, {2})});
  ASSERT_TRUE(static_cast<bool>(castLike));
  EXPECT_EQ((*castLike)[0].values<int64_t>(), (std::vector<int64_t>{3, -1}));
  auto wrongTo =
      runner.run("", "Cast", {&y}, {TensorType::get(DType::I64, {2})},
                 {intAttr("to", static_cast<int64_t>(DType::F64))});
  EXPECT_FALSE(static_cast<bool>(wrongTo));
  llvm::consumeError(wrongTo.takeError());
}

} // namespace
