//===- RowKernelsTest.cpp - The wide rows give the SSE rows' bits ---------===//
//
// backend/cpu/RowKernels.h: at every vector width this processor supports,
// softmax, log-softmax, GELU with a bias (and its gradient) and layer norm
// give bit for bit
// what the four-lane SSE code (Simd.h's arithmetic) gives, over every row
// length up to three AVX-512 vectors and a few longer, with NaN, infinities,
// -0 and huge values mixed in; and the SSE rows are close to a
// double-precision reference, so the comparison cannot pass vacuously.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace gmopt::cpu;

namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

bool sameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bitsOf(a) == bitsOf(b);
}

/// Row lengths: every length through 3 * 16 + 5, then some long rows.
std::vector<int64_t> rowLengths() {
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 53; ++n)
    lengths.push_back(n);
  for (int64_t n : {64, 127, 128, 768, 1027})
    lengths.push_back(n);
  return lengths;
}

/// Random values; with \p specials, every 13th one NaN, +-inf, -0 or huge.
std::vector<float> randomRow(std::mt19937 &rng, int64_t n, float spread,
                             bool specials) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> row(n);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           -0.0f,
                           1e30f,
                           -1e30f,
                           0.0f};
  for (int64_t i = 0; i < n; ++i)
    row[i] = specials && i % 13 == 5 ? special[(i / 13) % 7] : normal(rng);
  return row;
}

/// Softmax as the kernels computed it before RowKernels.h (Simd.h only).
void simdSoftmax(const float *x, float *y, int64_t n, bool log) {
  float maxValue = maxF32(x, n);
  if (log) {
    float shift = maxValue + std::log(expShiftedF32(x, nullptr, n, maxValue));
    scaleShiftF32(x, y, n, 1.0f, -shift);
  } else {
    float sum = expShiftedF32(x, y, n, maxValue);
    scaleShiftF32(y, y, n, 1.0f / sum, 0.0f);
  }
}

TEST(RowKernelsTest, SupportedLevelsStartWithSse) {
  llvm::ArrayRef<SimdLevel> levels = getSupportedSimdLevels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), SimdLevel::Sse);
  bool found = false;
  for (SimdLevel level : levels)
    found |= level == getSimdLevel();
  EXPECT_TRUE(found) << getSimdLevelName(getSimdLevel()).str();
  for (SimdLevel level : levels)
    std::printf("row kernels: %s supported%s\n",
                getSimdLevelName(level).str().c_str(),
                level == getSimdLevel() ? " (in use)" : "");
}

TEST(RowKernelsTest, SoftmaxIsTheSameAtEveryWidthAndNearTheReference) {
  std::mt19937 rng(7);
  for (bool log : {false, true})
    for (bool specials : {false, true})
      for (int64_t n : rowLengths()) {
        std::vector<float> x = randomRow(rng, n, 4.0f, specials);
        std::vector<float> want(n);
        softmaxRowF32(SimdLevel::Sse, x.data(), want.data(), n, log);
        std::vector<float> before(n);
        simdSoftmax(x.data(), before.data(), n, log);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(sameFloat(want[i], before[i])) << n << " " << i;
        if (!specials) {
          double maxValue = x[0], sum = 0;
          for (float v : x)
            maxValue = std::max<double>(maxValue, v);
          for (float v : x)
            sum += std::exp(v - maxValue);
          for (int64_t i = 0; i < n; ++i) {
            double ref = log ? x[i] - maxValue - std::log(sum)
                             : std::exp(x[i] - maxValue) / sum;
            EXPECT_NEAR(want[i], ref, 1e-5 * (log ? 1 + std::fabs(ref) : 1))
                << "n " << n << " i " << i;
          }
        }
        for (SimdLevel level : getSupportedSimdLevels()) {
          std::vector<float> got(n), inPlace = x;
          softmaxRowF32(level, x.data(), got.data(), n, log);
          softmaxRowF32(level, inPlace.data(), inPlace.data(), n, log);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(sameFloat(got[i], want[i]))
                << getSimdLevelName(level).str() << " log " << log << " n " << n
                << " i " << i << ": " << got[i] << " vs " << want[i];
            ASSERT_TRUE(sameFloat(inPlace[i], want[i]));
          }
        }
      }
}

TEST(RowKernelsTest, BiasGeluIsTheSameAtEveryWidthAndNearTheReference) {
  std::mt19937 rng(11);
  for (bool specials : {false, true})
    for (int64_t n : rowLengths()) {
      std::vector<float> x = randomRow(rng, n, 3.0f, specials);
      std::vector<float> b = randomRow(rng, n, 0.5f, false);
      std::vector<float> want(n, 0.0f);
      int64_t done =
          biasGeluRowF32(SimdLevel::Sse, x.data(), b.data(), want.data(), n);
      EXPECT_EQ(done, n / 4 * 4);
      for (int64_t i = 0; i + 4 <= n; i += 4) {
        F32x4 v = loadF32x4(x.data() + i) + loadF32x4(b.data() + i);
        F32x4 before =
            splatF32x4(0.5f) * v *
            (splatF32x4(1.0f) +
             erfF32x4(v * splatF32x4(static_cast<float>(std::sqrt(0.5)))));
        for (int j = 0; j < 4; ++j)
          ASSERT_TRUE(sameFloat(want[i + j], before[j])) << n << " " << i;
      }
      if (!specials)
        for (int64_t i = 0; i < done; ++i) {
          double v = static_cast<double>(x[i] + b[i]);
          double ref = 0.5 * v * (1 + std::erf(v * std::sqrt(0.5)));
          EXPECT_NEAR(want[i], ref, 1e-6 * (1 + std::fabs(ref)));
        }
      for (SimdLevel level : getSupportedSimdLevels()) {
        std::vector<float> got(n, 0.0f);
        EXPECT_EQ(biasGeluRowF32(level, x.data(), b.data(), got.data(), n),
                  done);
        for (int64_t i = 0; i < done; ++i)
          ASSERT_TRUE(sameFloat(got[i], want[i]))
              << getSimdLevelName(level).str() << " n " << n << " i " << i;
      }
    }
}

TEST(RowKernelsTest, BiasGeluGradIsTheSameAtEveryWidthAndNearTheReference) {
  std::mt19937 rng(17);
  for (bool specials : {false, true})
    for (int64_t n : rowLengths()) {
      std::vector<float> x = randomRow(rng, n, 3.0f, specials);
      std::vector<float> b = randomRow(rng, n, 0.5f, false);
      std::vector<float> dy = randomRow(rng, n, 1.0f, false);
      std::vector<float> want(n, 0.0f);
      int64_t done = biasGeluGradRowF32(SimdLevel::Sse, dy.data(), x.data(),
                                        b.data(), want.data(), n);
      EXPECT_EQ(done, n / 4 * 4);
      const F32x4 half = splatF32x4(0.5f), one = splatF32x4(1.0f),
                  sqrtHalf = splatF32x4(static_cast<float>(std::sqrt(0.5))),
                  invSqrtTwoPi =
                      splatF32x4(static_cast<float>(1 / std::sqrt(2 * M_PI)));
      for (int64_t i = 0; i + 4 <= n; i += 4) {
        F32x4 v = loadF32x4(x.data() + i) + loadF32x4(b.data() + i);
        F32x4 u = v * sqrtHalf;
        F32x4 gauss = expF32x4(-(u * u));
        F32x4 before =
            loadF32x4(dy.data() + i) *
            (half * (one + erfF32x4(u, gauss)) + v * (invSqrtTwoPi * gauss));
        for (int j = 0; j < 4; ++j)
          ASSERT_TRUE(sameFloat(want[i + j], before[j])) << n << " " << i;
      }
      if (!specials)
        for (int64_t i = 0; i < done; ++i) {
          double v = static_cast<double>(x[i] + b[i]);
          double ref =
              dy[i] * (0.5 * (1 + std::erf(v * std::sqrt(0.5))) +
                       v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
          EXPECT_NEAR(want[i], ref, 1e-5 * (1 + std::fabs(ref)));
        }
      for (SimdLevel level : getSupportedSimdLevels()) {
        std::vector<float> got(n, 0.0f);
        EXPECT_EQ(biasGeluGradRowF32(level, dy.data(), x.data(), b.data(),
                                     got.data(), n),
                  done);
        for (int64_t i = 0; i < done; ++i)
          ASSERT_TRUE(sameFloat(got[i], want[i]))
              << getSimdLevelName(level).str() << " n " << n << " i " << i;
      }
    }
}

TEST(RowKernelsTest, LayerNormIsTheSameAtEveryWidthAndNearTheReference) {
  std::mt19937 rng(13);
  for (bool rms : {false, true})
    for (bool withBias : {false, true})
      for (int64_t n : rowLengths()) {
        // Offset rows make the variance sum's centring matter.
        std::vector<float> x = randomRow(rng, n, 2.0f, false);
        for (float &v : x)
          v += 3.0f;
        std::vector<float> scale = randomRow(rng, n, 1.0f, false);
        std::vector<float> bias = randomRow(rng, n, 1.0f, false);
        const float *pb = withBias ? bias.data() : nullptr;
        std::vector<float> want(n);
        float wantMean, wantInv;
        layerNormRowF32(SimdLevel::Sse, x.data(), scale.data(), pb, want.data(),
                        n, 1e-5, rms, wantMean, wantInv);
        double simdMean = rms ? 0 : sumF32(x.data(), n) / n;
        double simdInv =
            1.0 /
            std::sqrt(sumSquaredDeviationF32(x.data(), n, simdMean) / n + 1e-5);
        ASSERT_TRUE(sameFloat(wantMean, static_cast<float>(simdMean)));
        ASSERT_TRUE(sameFloat(wantInv, static_cast<float>(simdInv)));
        double mean = 0, squares = 0;
        if (!rms) {
          for (float v : x)
            mean += v;
          mean /= n;
        }
        for (float v : x)
          squares += (v - mean) * (v - mean);
        double inv = 1 / std::sqrt(squares / n + 1e-5);
        EXPECT_NEAR(wantMean, mean, 1e-5 * (1 + std::fabs(mean)));
        EXPECT_NEAR(wantInv, inv, 1e-5 * inv);
        for (int64_t i = 0; i < n; ++i) {
          double ref = (x[i] - mean) * inv * scale[i] + (pb ? pb[i] : 0);
          EXPECT_NEAR(want[i], ref, 1e-4 * (1 + std::fabs(ref)));
        }
        for (SimdLevel level : getSupportedSimdLevels()) {
          std::vector<float> got(n);
          float gotMean, gotInv;
          layerNormRowF32(level, x.data(), scale.data(), pb, got.data(), n,
                          1e-5, rms, gotMean, gotInv);
          ASSERT_TRUE(sameFloat(gotMean, wantMean));
          ASSERT_TRUE(sameFloat(gotInv, wantInv));
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(sameFloat(got[i], want[i]))
                << getSimdLevelName(level).str() << " n " << n << " i " << i;
        }
      }
}

} // namespace
