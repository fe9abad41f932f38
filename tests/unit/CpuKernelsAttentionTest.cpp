//===- CpuKernelsAttentionTest.cpp - FusedAttention and its gradient ------===//
//
// gmopt.FusedAttention and gmopt.FusedAttentionGrad against a naive
// reference in double: plain attention over several tiles (rows and
// columns, sq != sk), causal over several tiles (skipped ones too) with an
// additive broadcast bias, K transposed and dropout, a boolean mask with a
// finite fill under grouped-query heads and sq != sk. The reference drops
// with the mask the unfused Dropout kernel draws for a node of the same
// stream, so the fused kernels match it only if their masks are
// bit-identical to Dropout's. Also: results are the same bytes on one
// thread and on three, and a bad layout is an error, not a crash.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"
#include "ir/Collectives.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

/// One attention problem.
struct AttentionCase {
  const char *name;
  int64_t batch, heads, kvHeads, seqQ, seqK, headDim, valueDim;
  bool causal = false;
  bool kTransposed = false;
  /// "none", "additive" ([batch, 1, 1, sk]) or "bool" ([1, 1, sq, sk]).
  std::string mask = "none";
  /// The boolean mask's fill and polarity.
  float maskedValue = -INFINITY;
  bool maskTrueKeeps = true;
  float dropoutRatio = 0;
};

struct Reference {
  std::vector<double> o, lse, dQ, dK, dV;
};

/// Naive attention and its gradient for \p c, given the dropout keep mask
/// (one byte per score, empty without dropout).
Reference reference(const AttentionCase &c, const std::vector<float> &q,
                    const std::vector<float> &k, const std::vector<float> &v,
                    const std::vector<float> &additive,
                    const std::vector<uint8_t> &boolMask,
                    const std::vector<uint8_t> &keep,
                    const std::vector<float> &dO, float scale) {
  int64_t n = c.batch * c.heads, sq = c.seqQ, sk = c.seqK, d = c.headDim,
          dv = c.valueDim, group = c.heads / c.kvHeads;
  Reference r;
  r.o.assign(n * sq * dv, 0);
  r.lse.assign(n * sq, 0);
  r.dQ.assign(n * sq * d, 0);
  r.dK.assign(c.batch * c.kvHeads * sk * d, 0);
  r.dV.assign(c.batch * c.kvHeads * sk * dv, 0);
  double dropScale = 1.0 / (1.0 - c.dropoutRatio);
  for (int64_t m = 0; m < n; ++m) {
    int64_t b = m / c.heads, h = m % c.heads;
    int64_t kv = b * c.kvHeads + h / group;
    auto kAt = [&](int64_t j, int64_t e) -> double {
      return c.kTransposed ? k[(kv * d + e) * sk + j]
                           : k[(kv * sk + j) * d + e];
    };
    auto kIndex = [&](int64_t j, int64_t e) -> int64_t {
      return c.kTransposed ? (kv * d + e) * sk + j : (kv * sk + j) * d + e;
    };
    for (int64_t i = 0; i < sq; ++i) {
      std::vector<double> s(sk), p(sk), factor(sk, 1.0), dp(sk);
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += double(q[(m * sq + i) * d + e]) * kAt(j, e);
        s[j] = scale * dot;
        if (c.mask == "additive")
          s[j] += additive[b * sk + j];
        if (c.mask == "bool" && (boolMask[i * sk + j] != 0) != c.maskTrueKeeps)
          s[j] = c.maskedValue;
        if (c.causal && j > i + sk - sq)
          s[j] = -INFINITY;
        if (!keep.empty())
          factor[j] = keep[(m * sq + i) * sk + j] ? dropScale : 0.0;
      }
      double maxValue = -INFINITY, sum = 0;
      for (double x : s)
        maxValue = std::max(maxValue, x);
      for (int64_t j = 0; j < sk; ++j)
        sum += p[j] = std::exp(s[j] - maxValue);
      for (double &x : p)
        x /= sum;
      r.lse[m * sq + i] = maxValue + std::log(sum);
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < sk; ++j)
          acc += p[j] * factor[j] * v[(kv * sk + j) * dv + e];
        r.o[(m * sq + i) * dv + e] = acc;
      }
      // Backward: dV += Pd^T dO, dP = (dO V^T) * factor, dS = P (dP - P.dP).
      double rowDot = 0;
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < dv; ++e) {
          double g = dO[(m * sq + i) * dv + e];
          dot += g * v[(kv * sk + j) * dv + e];
          r.dV[(kv * sk + j) * dv + e] += p[j] * factor[j] * g;
        }
        dp[j] = dot * factor[j];
        rowDot += p[j] * dp[j];
      }
      for (int64_t j = 0; j < sk; ++j) {
        double ds = p[j] * (dp[j] - rowDot) * scale;
        for (int64_t e = 0; e < d; ++e) {
          r.dQ[(m * sq + i) * d + e] += ds * kAt(j, e);
          r.dK[kIndex(j, e)] += ds * q[(m * sq + i) * d + e];
        }
      }
    }
  }
  return r;
}

void expectClose(const std::vector<float> &actual,
                 const std::vector<double> &expected, const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double maxRef = 1e-30;
  for (double x : expected)
    maxRef = std::max(maxRef, std::fabs(x));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 2e-5 * maxRef)
        << what << " element " << i;
}

void runCase(const AttentionCase &c) {
  SCOPED_TRACE(c.name);
  int64_t n = c.batch * c.heads, sq = c.seqQ, sk = c.seqK, d = c.headDim,
          dv = c.valueDim;
  std::vector<int64_t> qShape = {c.batch, c.heads, sq, d};
  std::vector<int64_t> kShape =
      c.kTransposed ? std::vector<int64_t>{c.batch, c.kvHeads, d, sk}
                    : std::vector<int64_t>{c.batch, c.kvHeads, sk, d};
  std::vector<int64_t> vShape = {c.batch, c.kvHeads, sk, dv};
  std::vector<int64_t> oShape = {c.batch, c.heads, sq, dv};
  std::vector<int64_t> lseShape = {c.batch, c.heads, sq};
  HostTensor q = HostTensor::f32(qShape, randomFloats(n * sq * d, 1, -1, 1));
  HostTensor k = HostTensor::f32(
      kShape, randomFloats(c.batch * c.kvHeads * sk * d, 2, -1, 1));
  HostTensor v = HostTensor::f32(
      vShape, randomFloats(c.batch * c.kvHeads * sk * dv, 3, -1, 1));
  HostTensor dO = HostTensor::f32(oShape, randomFloats(n * sq * dv, 4, -1, 1));
  std::vector<float> additive;
  std::vector<uint8_t> boolMask;
  std::optional<HostTensor> mask;
  if (c.mask == "additive") {
    additive = randomFloats(c.batch * sk, 5, -2, 0);
    mask = HostTensor::f32({c.batch, 1, 1, sk}, additive);
  } else if (c.mask == "bool") {
    for (int64_t i = 0; i < sq * sk; ++i)
      boolMask.push_back((i * 7 + i / sk) % 5 != 0);
    mask = HostTensor::boolean({1, 1, sq, sk}, boolMask);
  }
  HostTensor ratio = HostTensor::f32({}, {c.dropoutRatio});
  HostTensor training = HostTensor::boolean({}, {1});
  bool dropout = c.dropoutRatio > 0;

  KernelRunner runner;
  runner.setOpset("", 17);
  // The unfused graph's Dropout of the probabilities, same stream.
  std::vector<uint8_t> keep;
  if (dropout) {
    HostTensor probs = HostTensor::f32({c.batch, c.heads, sq, sk},
                                       std::vector<float>(n * sq * sk, 1.0f));
    auto dropped =
        runner.run("", "Dropout", {&probs, &ratio, &training},
                   {f32Type({c.batch, c.heads, sq, sk}),
                    TensorType::get(DType::Bool, {c.batch, c.heads, sq, sk})},
                   {}, "attention");
    ASSERT_TRUE(bool(dropped)) << llvm::toString(dropped.takeError());
    keep = (*dropped)[1].values<uint8_t>();
    size_t kept = std::count(keep.begin(), keep.end(), uint8_t(1));
    ASSERT_GT(kept, keep.size() / 2);
    ASSERT_LT(kept, keep.size());
  }
  float scale = 1.0f / std::sqrt(float(d)) * 1.3f;
  std::vector<NamedAttribute> attrs = {floatAttr("scale", scale)};
  if (c.causal)
    attrs.push_back(intAttr("causal", 1));
  if (c.kTransposed)
    attrs.push_back(intAttr("k_transposed", 1));
  if (c.mask == "bool") {
    attrs.push_back(intAttr("mask_true_keeps", c.maskTrueKeeps));
    attrs.push_back(floatAttr("masked_value", c.maskedValue));
  }
  HostTensor *maskInput = mask ? &*mask : nullptr;
  std::vector<HostTensor *> forwardInputs = {&q, &k, &v, maskInput};
  if (dropout) {
    forwardInputs.push_back(&ratio);
    forwardInputs.push_back(&training);
  }
  auto forward =
      runner.run(kGmoptDomain, "FusedAttention", forwardInputs,
                 {f32Type(oShape), f32Type(lseShape)}, attrs, "attention");
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  Reference want = reference(c, q.floats(), k.floats(), v.floats(), additive,
                             boolMask, keep, dO.floats(), scale);
  expectClose((*forward)[0].floats(), want.o, "O");
  expectClose((*forward)[1].floats(), want.lse, "LSE");

  HostTensor o = (*forward)[0], lse = (*forward)[1];
  std::vector<HostTensor *> gradInputs = {&dO, &q, &k, &v, &o, &lse, maskInput};
  if (dropout) {
    gradInputs.push_back(&ratio);
    gradInputs.push_back(&training);
  }
  auto backward = runner.run(
      kGmoptDomain, "FusedAttentionGrad", gradInputs,
      {f32Type(qShape), f32Type(kShape), f32Type(vShape)}, attrs, "attention");
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  expectClose((*backward)[0].floats(), want.dQ, "dQ");
  expectClose((*backward)[1].floats(), want.dK, "dK");
  expectClose((*backward)[2].floats(), want.dV, "dV");
}

TEST(CpuAttentionTest, PlainOverSeveralTiles) {
  runCase({"plain", 2, 3, 3, 70, 150, 8, 8});
}

TEST(CpuAttentionTest, CausalAdditiveBiasTransposedKDropout) {
  AttentionCase c{"causal+bias+dropout", 2, 2, 2, 140, 140, 16, 12};
  c.causal = true;
  c.kTransposed = true;
  c.mask = "additive";
  c.dropoutRatio = 0.3f;
  runCase(c);
}

TEST(CpuAttentionTest, BoolMaskGroupedQueryRectangularCausal) {
  AttentionCase c{"bool+gqa", 1, 4, 2, 33, 80, 8, 8};
  c.causal = true;
  c.mask = "bool";
  c.maskedValue = -1e4f;
  c.maskTrueKeeps = false;
  c.dropoutRatio = 0.2f;
  runCase(c);
}

TEST(CpuAttentionTest, ResultsDoNotDependOnTheThreadCount) {
  std::vector<int64_t> shape = {2, 3, 150, 16}, lseShape = {2, 3, 150};
  HostTensor q = HostTensor::f32(shape, randomFloats(2 * 3 * 150 * 16, 1));
  HostTensor k = HostTensor::f32(shape, randomFloats(2 * 3 * 150 * 16, 2));
  HostTensor v = HostTensor::f32(shape, randomFloats(2 * 3 * 150 * 16, 3));
  HostTensor dO = HostTensor::f32(shape, randomFloats(2 * 3 * 150 * 16, 4));
  HostTensor ratio = HostTensor::f32({}, {0.25f});
  HostTensor training = HostTensor::boolean({}, {1});
  std::vector<NamedAttribute> attrs = {intAttr("causal", 1)};
  std::vector<std::vector<uint8_t>> first;
  for (unsigned threads : {1u, 3u}) {
    KernelRunner runner;
    runner.getContext().setNumThreads(threads);
    auto forward = runner.run(kGmoptDomain, "FusedAttention",
                              {&q, &k, &v, nullptr, &ratio, &training},
                              {f32Type(shape), f32Type(lseShape)}, attrs, "a");
    ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
    HostTensor o = (*forward)[0], lse = (*forward)[1];
    auto backward = runner.run(
        kGmoptDomain, "FusedAttentionGrad",
        {&dO, &q, &k, &v, &o, &lse, nullptr, &ratio, &training},
        {f32Type(shape), f32Type(shape), f32Type(shape)}, attrs, "a");
    ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
    std::vector<std::vector<uint8_t>> results = {o.bytes, lse.bytes};
    for (const HostTensor &gradient : *backward)
      results.push_back(gradient.bytes);
    if (first.empty())
      first = results;
    else
      EXPECT_TRUE(results == first) << threads << " threads";
  }
}

TEST(CpuAttentionTest, ShapeErrorsAreReported) {
  KernelRunner runner;
  HostTensor q = HostTensor::f32({1, 2, 4, 8}, std::vector<float>(64, 0.5f));
  HostTensor k = HostTensor::f32({1, 2, 4, 6}, std::vector<float>(48, 0.5f));
  HostTensor v = HostTensor::f32({1, 2, 4, 8}, std::vector<float>(64, 0.5f));
  auto result =
      runner.run(kGmoptDomain, "FusedAttention", {&q, &k, &v},
                 {f32Type({1, 2, 4, 8}), f32Type({1, 2, 4})}, {}, "bad");
  ASSERT_FALSE(bool(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("head size"),
            std::string::npos);
}

} // namespace
