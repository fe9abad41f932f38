//===- CpuKernelsCrossEntropyTest.cpp - Fused linear cross entropy --------===//
//
// gmopt.FusedLinearCrossEntropy and gmopt.FusedLinearCrossEntropyGrad
// against a naive reference in double (logits, softmax, loss, then dh and
// dW from the logits' gradient): several vocabulary blocks with a partial
// last one and more rows than one task, W as [V, D] and as [D, V], mean /
// sum / none reductions, ignore_index rows, int32 labels, bf16 through the
// staging. The harness gives each kernel a scratch slice of exactly its
// declared workspace, so a kernel that holds more than its planned tile
// fails.
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

/// One problem.
struct CrossEntropyCase {
  CrossEntropyCase(const char *name, int64_t rows, int64_t hidden,
                   int64_t vocab)
      : name(name), rows(rows), hidden(hidden), vocab(vocab) {}
  const char *name;
  int64_t rows, hidden, vocab;
  bool transW = true;
  std::string reduction = "mean";
  std::optional<int64_t> ignoreIndex;
  bool int32Labels = false;
};

struct Reference {
  std::vector<double> loss, lse, dh, dW;
};

Reference reference(const CrossEntropyCase &c, const std::vector<float> &h,
                    const std::vector<float> &w,
                    const std::vector<int64_t> &labels,
                    const std::vector<float> &dLoss) {
  int64_t n = c.rows, d = c.hidden, v = c.vocab;
  auto wAt = [&](int64_t j, int64_t e) -> double {
    return c.transW ? w[j * d + e] : w[e * v + j];
  };
  auto wIndex = [&](int64_t j, int64_t e) -> int64_t {
    return c.transW ? j * d + e : e * v + j;
  };
  Reference r;
  r.lse.assign(n, 0);
  r.dh.assign(n * d, 0);
  r.dW.assign(v * d, 0);
  std::vector<double> rowLoss(n, 0);
  int64_t counted = 0;
  std::vector<std::vector<double>> probs(n, std::vector<double>(v));
  for (int64_t i = 0; i < n; ++i) {
    double maxValue = -INFINITY, sum = 0;
    std::vector<double> z(v);
    for (int64_t j = 0; j < v; ++j) {
      for (int64_t e = 0; e < d; ++e)
        z[j] += double(h[i * d + e]) * wAt(j, e);
      maxValue = std::max(maxValue, z[j]);
    }
    for (int64_t j = 0; j < v; ++j)
      sum += std::exp(z[j] - maxValue);
    r.lse[i] = maxValue + std::log(sum);
    for (int64_t j = 0; j < v; ++j)
      probs[i][j] = std::exp(z[j] - r.lse[i]);
    bool ignored = c.ignoreIndex && labels[i] == *c.ignoreIndex;
    if (!ignored) {
      rowLoss[i] = r.lse[i] - z[labels[i]];
      ++counted;
    }
  }
  double total = 0;
  for (double x : rowLoss)
    total += x;
  if (c.reduction == "none")
    r.loss = rowLoss;
  else
    r.loss = {c.reduction == "mean" ? total / counted : total};
  for (int64_t i = 0; i < n; ++i) {
    if (c.ignoreIndex && labels[i] == *c.ignoreIndex)
      continue;
    double factor = c.reduction == "none"   ? dLoss[i]
                    : c.reduction == "mean" ? dLoss[0] / counted
                                            : dLoss[0];
    for (int64_t j = 0; j < v; ++j) {
      double g = (probs[i][j] - (j == labels[i] ? 1.0 : 0.0)) * factor;
      for (int64_t e = 0; e < d; ++e) {
        r.dh[i * d + e] += g * wAt(j, e);
        r.dW[wIndex(j, e)] += g * h[i * d + e];
      }
    }
  }
  return r;
}

void expectClose(const std::vector<float> &actual,
                 const std::vector<double> &expected, const std::string &what,
                 double tolerance = 2e-5) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double maxRef = 1e-30;
  for (double x : expected)
    maxRef = std::max(maxRef, std::fabs(x));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tolerance * maxRef)
        << what << " element " << i;
}

std::vector<NamedAttribute> attrsOf(const CrossEntropyCase &c) {
  std::vector<NamedAttribute> attrs = {intAttr("trans_w", c.transW ? 1 : 0),
                                       stringAttr("reduction", c.reduction)};
  if (c.ignoreIndex)
    attrs.push_back(intAttr("ignore_index", *c.ignoreIndex));
  return attrs;
}

void runCase(const CrossEntropyCase &c) {
  SCOPED_TRACE(c.name);
  int64_t n = c.rows, d = c.hidden, v = c.vocab;
  std::vector<int64_t> wShape =
      c.transW ? std::vector<int64_t>{v, d} : std::vector<int64_t>{d, v};
  // h is [2, n / 2, d]: the kernels flatten the leading dimensions.
  std::vector<int64_t> hShape = {2, n / 2, d};
  HostTensor h = HostTensor::f32(hShape, randomFloats(n * d, 11, -1, 1));
  HostTensor w = HostTensor::f32(wShape, randomFloats(v * d, 12, -1, 1));
  std::vector<int64_t> labelValues(n);
  for (int64_t i = 0; i < n; ++i)
    labelValues[i] = (i * 7919 + 13) % v;
  if (c.ignoreIndex)
    for (int64_t i = 0; i < n; i += 5)
      labelValues[i] = *c.ignoreIndex;
  HostTensor labels =
      c.int32Labels
          ? HostTensor::i32({n}, std::vector<int32_t>(labelValues.begin(),
                                                      labelValues.end()))
          : HostTensor::i64({n}, labelValues);
  std::vector<int64_t> lossShape =
      c.reduction == "none" ? std::vector<int64_t>{n} : std::vector<int64_t>{};
  HostTensor dLoss = HostTensor::f32(
      lossShape, randomFloats(c.reduction == "none" ? n : 1, 13, 0.5, 2));

  KernelRunner runner;
  std::vector<NamedAttribute> attrs = attrsOf(c);
  auto forward =
      runner.run(kGmoptDomain, "FusedLinearCrossEntropy", {&h, &w, &labels},
                 {f32Type(lossShape), f32Type({n})}, attrs, "ce");
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  Reference want =
      reference(c, h.floats(), w.floats(), labelValues, dLoss.floats());
  expectClose((*forward)[0].floats(), want.loss, "loss");
  expectClose((*forward)[1].floats(), want.lse, "lse");

  HostTensor lse = (*forward)[1];
  auto backward = runner.run(kGmoptDomain, "FusedLinearCrossEntropyGrad",
                             {&dLoss, &h, &w, &labels, &lse},
                             {f32Type(hShape), f32Type(wShape)}, attrs, "ce");
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  expectClose((*backward)[0].floats(), want.dh, "dh");
  expectClose((*backward)[1].floats(), want.dW, "dW");
}

TEST(CpuCrossEntropyTest, SeveralBlocksMeanIgnoreIndex) {
  CrossEntropyCase c{"blocks+mean+ignore", 140, 16, 1100};
  c.ignoreIndex = -100;
  runCase(c);
}

TEST(CpuCrossEntropyTest, WeightAsHiddenByVocabSum) {
  CrossEntropyCase c{"[D,V]+sum", 70, 12, 530};
  c.transW = false;
  c.reduction = "sum";
  c.int32Labels = true;
  runCase(c);
}

TEST(CpuCrossEntropyTest, NoReductionIgnoringAClass) {
  CrossEntropyCase c{"none+ignore class 3", 10, 8, 37};
  c.reduction = "none";
  c.ignoreIndex = 3;
  runCase(c);
}

TEST(CpuCrossEntropyTest, Bf16IsStagedAsFloat) {
  int64_t n = 6, d = 8, v = 600;
  std::vector<float> hValues = randomFloats(n * d, 21, -1, 1);
  std::vector<float> wValues = randomFloats(v * d, 22, -1, 1);
  HostTensor h = HostTensor::bf16({n, d}, hValues);
  HostTensor w = HostTensor::bf16({v, d}, wValues);
  // The reference reads the bf16-rounded values the kernel reads.
  HostTensor hWide = HostTensor::f32({n, d}, h.floats());
  HostTensor wWide = HostTensor::f32({v, d}, w.floats());
  std::vector<int64_t> labelValues = {0, 599, 5, 300, 511, 512};
  HostTensor labels = HostTensor::i64({n}, labelValues);
  KernelRunner runner;
  CrossEntropyCase c{"bf16", n, d, v};
  auto forward = runner.run(
      kGmoptDomain, "FusedLinearCrossEntropy", {&h, &w, &labels},
      {TensorType::get(DType::BF16, {}), f32Type({n})}, attrsOf(c), "ce");
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  Reference want = reference(c, hWide.floats(), wWide.floats(), labelValues,
                             std::vector<float>{1.0f});
  expectClose((*forward)[0].floats(), want.loss, "loss", 1e-2);
  expectClose((*forward)[1].floats(), want.lse, "lse", 1e-5);
}

TEST(CpuCrossEntropyTest, LabelsOutsideTheVocabularyAreReported) {
  KernelRunner runner;
  HostTensor h = HostTensor::f32({2, 4}, std::vector<float>(8, 0.5f));
  HostTensor w = HostTensor::f32({5, 4}, std::vector<float>(20, 0.5f));
  HostTensor labels = HostTensor::i64({2}, {1, 5});
  auto result = runner.run(kGmoptDomain, "FusedLinearCrossEntropy",
                           {&h, &w, &labels}, {f32Type({}), f32Type({2})},
                           {stringAttr("reduction", "mean")}, "bad");
  ASSERT_FALSE(bool(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("outside the vocabulary"),
            std::string::npos);
  // A W that does not fit h is refused too.
  HostTensor wrong = HostTensor::f32({5, 3}, std::vector<float>(15, 0.5f));
  HostTensor ok = HostTensor::i64({2}, {1, 2});
  result =
      runner.run(kGmoptDomain, "FusedLinearCrossEntropy", {&h, &wrong, &ok},
                 {f32Type({}), f32Type({2})}, {}, "bad");
  ASSERT_FALSE(bool(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("does not fit"),
            std::string::npos);
}

} // namespace
