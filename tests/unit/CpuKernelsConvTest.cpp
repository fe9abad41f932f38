//===- CpuKernelsConvTest.cpp - Convolution and pooling -------------------===//
//
// Conv (pads, strides, dilations, groups, 1-D, auto_pad SAME, 1x1 direct
// path, bias) against a naive direct convolution; ConvGrad's dX, dW and dB
// against finite differences of Conv; MaxPool with Indices, AveragePool
// (count_include_pad), GlobalAveragePool against naive references;
// MaxPoolGrad and AveragePoolGrad against finite differences.
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

void expectGradient(const std::vector<float> &analytic,
                    const std::vector<double> &numeric, const std::string &what,
                    double tolerance = 3e-3) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i],
                tolerance * (1 + std::fabs(numeric[i])))
        << what << " element " << i;
}

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// A 2-D convolution problem (1-D when h == 1 and is1D).
struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, group;
  std::vector<int64_t> strides, pads, dilations; // 2-D forms.
  bool is1D = false;
  bool bias = true;
  int64_t outH() const {
    return (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) /
               strides[0] +
           1;
  }
  int64_t outW() const {
    return (w + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) /
               strides[1] +
           1;
  }
  std::vector<int64_t> xShape() const {
    return is1D ? std::vector<int64_t>{n, c, w}
                : std::vector<int64_t>{n, c, h, w};
  }
  std::vector<int64_t> wShape() const {
    return is1D ? std::vector<int64_t>{m, c / group, kw}
                : std::vector<int64_t>{m, c / group, kh, kw};
  }
  std::vector<int64_t> yShape() const {
    return is1D ? std::vector<int64_t>{n, m, outW()}
                : std::vector<int64_t>{n, m, outH(), outW()};
  }
  std::vector<NamedAttribute> attrs() const {
    if (is1D)
      return {intsAttr("strides", {strides[1]}),
              intsAttr("pads", {pads[1], pads[3]}),
              intsAttr("dilations", {dilations[1]}), intAttr("group", group)};
    return {intsAttr("strides", strides), intsAttr("pads", pads),
            intsAttr("dilations", dilations), intAttr("group", group)};
  }
};

std::vector<double> naiveConv(const ConvCase &k, const std::vector<float> &x,
                              const std::vector<float> &w,
                              const std::vector<float> &b) {
  int64_t oh = k.outH(), ow = k.outW(), cg = k.c / k.group, mg = k.m / k.group;
  std::vector<double> y(k.n * k.m * oh * ow, 0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double sum = k.bias ? b[m] : 0;
          int64_t g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t p = 0; p < k.kh; ++p)
              for (int64_t q = 0; q < k.kw; ++q) {
                int64_t ih = i * k.strides[0] - k.pads[0] + p * k.dilations[0];
                int64_t iw = j * k.strides[1] - k.pads[1] + q * k.dilations[1];
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w)
                  continue;
                sum += x[((n * k.c + g * cg + c) * k.h + ih) * k.w + iw] *
                       w[((m * cg + c) * k.kh + p) * k.kw + q];
              }
          y[((n * k.m + m) * oh + i) * ow + j] = sum;
        }
  return y;
}

const ConvCase kConvCases[] = {
    {2, 3, 5, 6, 4, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}},
    {1, 4, 7, 7, 6, 3, 2, 2, {2, 1}, {0, 1, 2, 0}, {1, 2}},
    {2, 2, 6, 5, 2, 2, 2, 2, {2, 2}, {1, 0, 0, 1}, {2, 1}},       // Depthwise.
    {2, 3, 4, 4, 5, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},       // 1x1 direct.
    {2, 3, 1, 9, 4, 1, 3, 1, {1, 2}, {0, 1, 0, 1}, {1, 1}, true}, // 1-D.
    {1, 2, 4, 4, 3, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false}};

std::vector<float> runConv(const ConvCase &k, const std::vector<float> &x,
                           const std::vector<float> &w,
                           const std::vector<float> &b) {
  KernelRunner runner;
  HostTensor hx = HostTensor::f32(k.xShape(), x),
             hw = HostTensor::f32(k.wShape(), w),
             hb = HostTensor::f32({k.m}, b);
  auto result = runner.run("", "Conv", {&hx, &hw, k.bias ? &hb : nullptr},
                           {f32Type(k.yShape())}, k.attrs());
  EXPECT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  return result ? (*result)[0].floats() : std::vector<float>();
}

TEST(CpuConvTest, MatchesNaiveConvolution) {
  unsigned seed = 1;
  for (const ConvCase &k : kConvCases) {
    std::vector<float> x = randomFloats(count(k.xShape()), ++seed);
    std::vector<float> w = randomFloats(count(k.wShape()), ++seed);
    std::vector<float> b = randomFloats(k.m, ++seed);
    std::vector<float> got = runConv(k, x, w, b);
    std::vector<double> want = naiveConv(k, x, w, b);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
          << "case seed " << seed;
  }
}

TEST(CpuConvTest, AutoPadSameAndErrors) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(1 * 1 * 5 * 5, 7), w = randomFloats(9, 8);
  HostTensor hx = HostTensor::f32({1, 1, 5, 5}, x),
             hw = HostTensor::f32({1, 1, 3, 3}, w);
  auto same = runner.run(
      "", "Conv", {&hx, &hw}, {f32Type({1, 1, 3, 3})},
      {stringAttr("auto_pad", "SAME_UPPER"), intsAttr("strides", {2, 2})});
  ASSERT_TRUE(static_cast<bool>(same)) << llvm::toString(same.takeError());
  // out = ceil(5 / 2) = 3; total pad = (3 - 1) * 2 + 3 - 5 = 2, split 1 / 1.
  ConvCase k{1,      1,     5,    5, 1, 3, 3, 1, {2, 2}, {1, 1, 1, 1},
             {1, 1}, false, false};
  std::vector<double> want = naiveConv(k, x, w, {});
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR((*same)[0].floats()[i], want[i], 1e-5);
  auto wrongShape = runner.run("", "Conv", {&hx, &hw}, {f32Type({1, 1, 4, 4})});
  ASSERT_FALSE(static_cast<bool>(wrongShape));
  EXPECT_NE(llvm::toString(wrongShape.takeError())
                .find("disagrees with the computed 3"),
            std::string::npos);
  HostTensor x3d = HostTensor::f32({1, 1, 2, 2, 2}, std::vector<float>(8, 1));
  HostTensor w3d = HostTensor::f32({1, 1, 1, 1, 1}, {1});
  auto threeD =
      runner.run("", "Conv", {&x3d, &w3d}, {f32Type({1, 1, 2, 2, 2})});
  ASSERT_FALSE(static_cast<bool>(threeD));
  EXPECT_NE(llvm::toString(threeD.takeError()).find("only 1-D and 2-D"),
            std::string::npos);
}

TEST(CpuConvTest, ConvGradMatchesFiniteDifferences) {
  unsigned seed = 30;
  for (const ConvCase &k : kConvCases) {
    std::vector<float> x = randomFloats(count(k.xShape()), ++seed);
    std::vector<float> w = randomFloats(count(k.wShape()), ++seed);
    std::vector<float> b = randomFloats(k.m, ++seed);
    std::vector<float> dY = randomFloats(count(k.yShape()), ++seed);
    auto numericX = numericGradient(
        [&](auto &v) { return runConv(k, v, w, b); }, x, dY, 1e-2f);
    auto numericW = numericGradient(
        [&](auto &v) { return runConv(k, x, v, b); }, w, dY, 1e-2f);
    KernelRunner runner;
    HostTensor hdY = HostTensor::f32(k.yShape(), dY),
               hx = HostTensor::f32(k.xShape(), x),
               hw = HostTensor::f32(k.wShape(), w);
    auto grad = runner.run(
        kMsDomain, "ConvGrad", {&hdY, &hx, &hw},
        {f32Type(k.xShape()), f32Type(k.wShape()), f32Type({k.m})}, k.attrs());
    ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
    expectGradient((*grad)[0].floats(), numericX, "dX");
    expectGradient((*grad)[1].floats(), numericW, "dW");
    // dB is the sum of dY over everything but the channel.
    int64_t spatial = count(k.yShape()) / (k.n * k.m);
    for (int64_t m = 0; m < k.m; ++m) {
      double sum = 0;
      for (int64_t n = 0; n < k.n; ++n)
        for (int64_t i = 0; i < spatial; ++i)
          sum += dY[(n * k.m + m) * spatial + i];
      EXPECT_NEAR((*grad)[2].floats()[m], sum, 1e-5);
    }
    // Subsets of the outputs give the same values.
    auto onlyW = runner.run(kMsDomain, "ConvGrad", {&hdY, &hx, &hw},
                            {absentResult(), f32Type(k.wShape())}, k.attrs());
    ASSERT_TRUE(static_cast<bool>(onlyW));
    EXPECT_EQ((*onlyW)[1].bytes, (*grad)[1].bytes);
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

TEST(CpuPoolTest, MaxPoolWithIndices) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(2 * 2 * 5 * 6, 50);
  HostTensor hx = HostTensor::f32({2, 2, 5, 6}, x);
  // kernel 3x2, strides 2, pads 1 top, 1 right: out (5+1-3)/2+1 = 2 by
  // (6+1-2)/2+1 = 3.
  std::vector<NamedAttribute> attrs = {intsAttr("kernel_shape", {3, 2}),
                                       intsAttr("strides", {2, 2}),
                                       intsAttr("pads", {1, 0, 0, 1})};
  std::vector<int64_t> yShape = {2, 2, 2, 3};
  auto result =
      runner.run("", "MaxPool", {&hx},
                 {f32Type(yShape), TensorType::get(DType::I64, yShape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::vector<float> y = (*result)[0].floats();
  std::vector<int64_t> idx = (*result)[1].values<int64_t>();
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t bestIndex = -1;
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t b = 0; b < 2; ++b) {
            int64_t h = i * 2 - 1 + a, w = j * 2 + b;
            if (h < 0 || h >= 5 || w < 0 || w >= 6)
              continue;
            int64_t flat = (p * 5 + h) * 6 + w;
            if (x[flat] > best) {
              best = x[flat];
              bestIndex = flat;
            }
          }
        int64_t o = (p * 2 + i) * 3 + j;
        EXPECT_EQ(y[o], best);
        EXPECT_EQ(idx[o], bestIndex);
      }
  // Column-major indices.
  attrs.push_back(intAttr("storage_order", 1));
  auto columnMajor =
      runner.run("", "MaxPool", {&hx},
                 {f32Type(yShape), TensorType::get(DType::I64, yShape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(columnMajor));
  std::vector<int64_t> colIdx = (*columnMajor)[1].values<int64_t>();
  for (size_t o = 0; o < idx.size(); ++o) {
    int64_t plane = idx[o] / 30, within = idx[o] % 30;
    EXPECT_EQ(colIdx[o], plane * 30 + (within % 6) * 5 + within / 6);
  }
}

std::vector<float> runPool(const char *op, const std::vector<float> &x,
                           std::vector<int64_t> xShape,
                           std::vector<int64_t> yShape,
                           std::vector<NamedAttribute> attrs) {
  KernelRunner runner;
  HostTensor hx = HostTensor::f32(xShape, x);
  auto result = runner.run("", op, {&hx}, {f32Type(yShape)}, attrs);
  EXPECT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  return result ? (*result)[0].floats() : std::vector<float>();
}

TEST(CpuPoolTest, AveragePoolCountsPadsAsAsked) {
  std::vector<float> x = randomFloats(1 * 1 * 4 * 4, 51);
  std::vector<NamedAttribute> attrs = {intsAttr("kernel_shape", {3, 3}),
                                       intsAttr("pads", {1, 1, 1, 1}),
                                       intsAttr("strides", {2, 2})};
  for (int includePad : {0, 1}) {
    auto withAttr = attrs;
    withAttr.push_back(intAttr("count_include_pad", includePad));
    std::vector<float> got =
        runPool("AveragePool", x, {1, 1, 4, 4}, {1, 1, 2, 2}, withAttr);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        double sum = 0;
        int valid = 0;
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t b = 0; b < 3; ++b) {
            int64_t h = i * 2 - 1 + a, w = j * 2 - 1 + b;
            if (h >= 0 && h < 4 && w >= 0 && w < 4) {
              sum += x[h * 4 + w];
              ++valid;
            }
          }
        EXPECT_NEAR(got[i * 2 + j], sum / (includePad ? 9 : valid), 1e-6);
      }
  }
  std::vector<float> big = randomFloats(2 * 3 * 7, 52);
  std::vector<float> global =
      runPool("GlobalAveragePool", big, {2, 3, 7}, {2, 3, 1}, {});
  for (int64_t p = 0; p < 6; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < 7; ++i)
      sum += big[p * 7 + i];
    EXPECT_NEAR(global[p], sum / 7, 1e-6);
  }
  std::vector<float> globalMax =
      runPool("GlobalMaxPool", big, {2, 3, 7}, {2, 3, 1}, {});
  for (int64_t p = 0; p < 6; ++p)
    EXPECT_EQ(globalMax[p],
              *std::max_element(big.begin() + p * 7, big.begin() + p * 7 + 7));
}

TEST(CpuPoolTest, PoolGradsMatchFiniteDifferences) {
  std::vector<int64_t> xShape = {2, 2, 5, 5}, yShape = {2, 2, 3, 3};
  // Distinct values so the max is unique (max pooling is differentiable).
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i)
    x[i] = static_cast<float>((i * 37) % 100) / 10.0f;
  std::vector<float> dY = randomFloats(36, 53);
  std::vector<NamedAttribute> attrs = {intsAttr("kernel_shape", {3, 3}),
                                       intsAttr("strides", {2, 2}),
                                       intsAttr("pads", {1, 1, 1, 1})};
  auto numericMax = numericGradient(
      [&](auto &v) { return runPool("MaxPool", v, xShape, yShape, attrs); }, x,
      dY, 1e-2f);
  KernelRunner runner;
  HostTensor hx = HostTensor::f32(xShape, x);
  auto forward =
      runner.run("", "MaxPool", {&hx},
                 {f32Type(yShape), TensorType::get(DType::I64, yShape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(forward));
  HostTensor hdY = HostTensor::f32(yShape, dY);
  auto maxGrad = runner.run("", "MaxPoolGrad", {&hdY, &(*forward)[1]},
                            {f32Type(xShape)}, attrs);
  ASSERT_TRUE(static_cast<bool>(maxGrad))
      << llvm::toString(maxGrad.takeError());
  expectGradient((*maxGrad)[0].floats(), numericMax, "MaxPoolGrad");

  for (int includePad : {0, 1}) {
    auto avgAttrs = attrs;
    avgAttrs.push_back(intAttr("count_include_pad", includePad));
    auto numericAvg = numericGradient(
        [&](auto &v) {
          return runPool("AveragePool", v, xShape, yShape, avgAttrs);
        },
        x, dY, 1e-2f);
    auto avgGrad =
        runner.run("", "AveragePoolGrad", {&hdY}, {f32Type(xShape)}, avgAttrs);
    ASSERT_TRUE(static_cast<bool>(avgGrad))
        << llvm::toString(avgGrad.takeError());
    expectGradient((*avgGrad)[0].floats(), numericAvg, "AveragePoolGrad");
  }
  HostTensor badIndices =
      HostTensor::i64(yShape, std::vector<int64_t>(36, 1000));
  auto bad =
      runner.run("", "MaxPoolGrad", {&hdY, &badIndices}, {f32Type(xShape)});
  EXPECT_FALSE(static_cast<bool>(bad));
  llvm::consumeError(bad.takeError());
}

} // namespace
