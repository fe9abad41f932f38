//===- SimdTest.cpp - Tests of the CPU backend's vector helpers -----------===//
//
// backend/cpu/Simd.h: the element-wise helpers give bit for bit what the
// scalar expressions they replace give (NaN, -0 and every tail length
// included), the lane sums agree with a double-precision reference, and
// the vector exp and erf stay within their stated error over their range.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Simd.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace gmopt::cpu;

namespace {

/// Bit pattern of \p value (so NaN and -0 compare exactly).
uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// Equal bits, or both NaN (arithmetic need not keep a NaN's payload).
/// Whether \p x is a NaN, by its bits.
bool isNaN(float x) {
  uint32_t bits = bitsOf(x);
  return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
}

bool sameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bitsOf(a) == bitsOf(b);
}

/// Random values with signed zeros, NaN and infinities mixed in.
std::vector<float> awkwardValues(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-4.0f, 4.0f);
  std::vector<float> values(count);
  for (float &value : values)
    value = distribution(generator);
  const float specials[] = {0.0f, -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < count; i += 7)
    values[i] = specials[(i / 7) % 5];
  return values;
}

TEST(SimdTest, ReluAndItsGradientMatchTheScalarExpressions) {
  for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 33}) {
    std::vector<float> x = awkwardValues(n, 1), dy = awkwardValues(n, 2);
    std::vector<float> y(n), dx(n);
    reluF32(x.data(), y.data(), n);
    reluGradF32(dy.data(), x.data(), dx.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bitsOf(y[i]), bitsOf(x[i] < 0.0f ? 0.0f : x[i])) << i;
      EXPECT_EQ(bitsOf(dx[i]), bitsOf(x[i] > 0.0f ? dy[i] : 0.0f)) << i;
    }
    // In place.
    std::vector<float> z = x;
    reluF32(z.data(), z.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(bitsOf(z[i]), bitsOf(y[i])) << i;
  }
}

TEST(SimdTest, AddAndScaleShiftMatchTheScalarExpressions) {
  for (int64_t n : {0, 1, 5, 8, 13}) {
    std::vector<float> a = awkwardValues(n, 3), b = awkwardValues(n, 4);
    std::vector<float> sum = b, scaled(n);
    addToF32(a.data(), sum.data(), n);
    scaleShiftF32(a.data(), scaled.data(), n, 1.5f, -0.25f);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(sameFloat(sum[i], b[i] + a[i])) << i;
      EXPECT_TRUE(sameFloat(scaled[i], a[i] * 1.5f + -0.25f)) << i;
    }
  }
}

TEST(SimdTest, LaneSumsAgreeWithADoubleReference) {
  std::mt19937 generator(5);
  std::uniform_real_distribution<float> distribution(-1.0f, 3.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 1000, 4099}) {
    std::vector<float> x(n), g(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = distribution(generator);
      g[i] = distribution(generator);
    }
    double sum = 0, squares = 0, sumG = 0, dot = 0, center = 0.75;
    for (int64_t i = 0; i < n; ++i) {
      sum += x[i];
      squares += (x[i] - center) * (x[i] - center);
      sumG += g[i];
      dot += g[i] * (x[i] - center);
    }
    double scale = 1e-12 * std::max<int64_t>(n, 1);
    EXPECT_NEAR(sumF32(x.data(), n), sum, scale * 4);
    EXPECT_NEAR(sumSquaredDeviationF32(x.data(), n, center), squares,
                scale * 16);
    SumAndDot sums = sumWithCenteredProductF32(g.data(), x.data(), n, center);
    EXPECT_NEAR(sums.sum, sumG, scale * 4);
    EXPECT_NEAR(sums.dot, dot, scale * 16);
  }
}

TEST(SimdTest, ExpIsWithinTwoUlpAndHandlesTheEnds) {
  for (double v = -87.0; v <= 88.0; v += 0.001) {
    float x = static_cast<float>(v);
    double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(expF32x4(splatF32x4(x))[0], want, 2.4e-7 * want) << x;
  }
  const float inf = std::numeric_limits<float>::infinity();
  F32x4 ends = expF32x4(F32x4{-100.0f, -inf, 100.0f, inf});
  EXPECT_EQ(ends[0], 0.0f);
  EXPECT_EQ(ends[1], 0.0f);
  EXPECT_EQ(ends[2], inf);
  EXPECT_EQ(ends[3], inf);
  // NaN in any lane stays NaN, its neighbours unaffected (a NaN once went
  // through a float-to-int conversion here: undefined, and clang -O1 made a
  // number of it).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  F32x4 mixed = expF32x4(F32x4{nan, 0.0f, nan, 1.0f});
  EXPECT_TRUE(isNaN(mixed[0]));
  EXPECT_EQ(mixed[1], 1.0f);
  EXPECT_TRUE(isNaN(mixed[2]));
  EXPECT_NEAR(mixed[3], 2.7182817f, 1e-6f);
}

TEST(SimdTest, ErfIsWithinItsStatedError) {
  for (double v = -12.0; v <= 12.0; v += 0.0005) {
    float x = static_cast<float>(v);
    double want = std::erf(static_cast<double>(x));
    // 1.5e-7 from the approximation plus float rounding; relative near 0.
    double tolerance = std::fabs(x) < 0.5 ? 4e-7 * std::fabs(want) : 4e-7;
    EXPECT_NEAR(erfF32x4(splatF32x4(x))[0], want, tolerance) << x;
  }
  const float inf = std::numeric_limits<float>::infinity();
  F32x4 ends = erfF32x4(F32x4{inf, -inf, 0.0f, -0.0f});
  EXPECT_EQ(ends[0], 1.0f);
  EXPECT_EQ(ends[1], -1.0f);
  EXPECT_EQ(bitsOf(ends[2]), bitsOf(0.0f));
  EXPECT_EQ(bitsOf(ends[3]), bitsOf(-0.0f));
  EXPECT_TRUE(
      isNaN(erfF32x4(splatF32x4(std::numeric_limits<float>::quiet_NaN()))[0]));
}

} // namespace
