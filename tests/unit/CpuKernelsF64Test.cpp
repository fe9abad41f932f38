//===- CpuKernelsF64Test.cpp - float64 kernels against float32 ones -------===//
//
// The float64 paths of the CPU kernels the gradient checker runs (softmax
// gradients, pooling and its gradients, the cross-entropy losses and their
// gradients, batch / instance / layer / RMS norm and their gradients,
// Einsum, Conv and ConvGrad, the matrix products): each kernel runs once
// on float32 tensors and once on the same values widened to float64, and
// the two results must agree within float32 rounding, while the float64
// result must carry more than float32 precision (not be float32 values
// widened), so a float64 path that rounds through float32 fails. Each run
// takes its scratch from exactly its declared workspace (KernelRunner's
// planned mode), so the workspace models are checked for float64 too.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

/// The com.microsoft domain, as a KernelCase field takes it.
const std::string kMs = kMsDomain.str();

/// One operand of a kernel under test: float values (float32 in one run,
/// float64 in the other), a fixed tensor (labels, indices) or absent.
struct Operand {
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::optional<HostTensor> fixed;
  bool absent = false;
};

/// A float operand of \p shape with seeded values uniform in [lo, hi).
Operand floats(std::vector<int64_t> shape, unsigned seed, float lo = -1.0f,
               float hi = 1.0f) {
  int64_t count = 1;
  for (int64_t extent : shape)
    count *= extent;
  Operand operand;
  operand.values = randomFloats(count, seed, lo, hi);
  operand.shape = std::move(shape);
  return operand;
}
/// A fixed (not float) operand.
Operand fixed(HostTensor tensor) {
  Operand operand;
  operand.fixed = std::move(tensor);
  return operand;
}
/// An absent optional operand.
Operand absent() {
  Operand operand;
  operand.absent = true;
  return operand;
}

/// A result: float (the run's type, or \p dtype when set) of \p shape.
struct Result {
  std::vector<int64_t> shape;
  /// Set for a result whose type does not follow the run's (indices).
  std::optional<DType> dtype;
  bool absent = false;
};
Result out(std::vector<int64_t> shape) {
  Result result;
  result.shape = std::move(shape);
  return result;
}
Result indicesOut(std::vector<int64_t> shape) {
  Result result = out(std::move(shape));
  result.dtype = DType::I64;
  return result;
}
Result absentOut() {
  Result result;
  result.absent = true;
  return result;
}

/// A kernel invocation to run in both float types.
struct KernelCase {
  KernelCase(std::string domain, std::string op, std::vector<Operand> operands,
             std::vector<Result> results,
             std::vector<NamedAttribute> attrs = {})
      : domain(std::move(domain)), op(std::move(op)),
        operands(std::move(operands)), results(std::move(results)),
        attrs(std::move(attrs)) {}
  std::string domain, op;
  std::vector<Operand> operands;
  std::vector<Result> results;
  std::vector<NamedAttribute> attrs;
  /// Agreement required: |f64 - f32| <= tolerance * max|f64| + 1e-6.
  double tolerance = 2e-5;
  /// Whether the float64 results must hold values no float32 can (false
  /// for results that only select or copy input values).
  bool expectWider = true;
};

/// Runs \p kernelCase with float operands and results of \p dtype.
std::vector<HostTensor> runIn(const KernelCase &kernelCase, DType dtype) {
  std::vector<HostTensor> tensors;
  tensors.reserve(kernelCase.operands.size());
  for (const Operand &operand : kernelCase.operands) {
    if (operand.fixed)
      tensors.push_back(*operand.fixed);
    else if (dtype == DType::F64)
      tensors.push_back(HostTensor::f64(
          operand.shape,
          std::vector<double>(operand.values.begin(), operand.values.end())));
    else
      tensors.push_back(HostTensor::f32(operand.shape, operand.values));
  }
  std::vector<HostTensor *> inputs;
  for (unsigned i = 0; i != tensors.size(); ++i)
    inputs.push_back(kernelCase.operands[i].absent ? nullptr : &tensors[i]);
  std::vector<TensorType> types;
  for (const Result &result : kernelCase.results)
    types.push_back(
        result.absent
            ? absentResult()
            : TensorType::get(result.dtype.value_or(dtype), result.shape));
  KernelRunner runner;
  runner.setOpset("", 18);
  auto results = runner.run(kernelCase.domain, kernelCase.op, inputs, types,
                            kernelCase.attrs);
  EXPECT_TRUE(bool(results))
      << kernelCase.op << " in " << dtypeName(dtype).str() << ": "
      << llvm::toString(results.takeError());
  return results ? std::move(*results) : std::vector<HostTensor>();
}

/// Runs \p kernelCase in float32 and in float64 and compares the results.
void expectFloat64AgreesWithFloat32(const KernelCase &kernelCase) {
  SCOPED_TRACE(kernelCase.op);
  std::vector<HostTensor> narrow = runIn(kernelCase, DType::F32);
  std::vector<HostTensor> wide = runIn(kernelCase, DType::F64);
  ASSERT_EQ(narrow.size(), kernelCase.results.size());
  ASSERT_EQ(wide.size(), kernelCase.results.size());
  unsigned widerElements = 0;
  for (unsigned r = 0; r != kernelCase.results.size(); ++r) {
    const Result &result = kernelCase.results[r];
    if (result.absent)
      continue;
    if (result.dtype) {
      EXPECT_EQ(narrow[r].bytes, wide[r].bytes) << "result " << r;
      continue;
    }
    ASSERT_EQ(wide[r].dtype, DType::F64);
    std::vector<float> a = narrow[r].values<float>();
    std::vector<double> b = wide[r].values<double>();
    ASSERT_EQ(a.size(), b.size()) << "result " << r;
    double largest = 0;
    for (double v : b)
      largest = std::max(largest, std::fabs(v));
    double bound = kernelCase.tolerance * largest + 1e-6;
    for (size_t i = 0; i != b.size(); ++i) {
      EXPECT_LE(std::fabs(b[i] - a[i]), bound)
          << "result " << r << " element " << i << ": float64 " << b[i]
          << ", float32 " << a[i];
      widerElements += static_cast<double>(static_cast<float>(b[i])) != b[i];
    }
  }
  if (kernelCase.expectWider) {
    EXPECT_GT(widerElements, 0u)
        << "every float64 result is a float32 value: computed in float32?";
  }
}

/// Labels in [0, classes) for \p count samples.
HostTensor labels(int64_t count, int64_t classes, unsigned seed) {
  std::vector<int64_t> values(count);
  std::mt19937 engine(seed);
  for (int64_t &v : values)
    v = std::uniform_int_distribution<int64_t>(0, classes - 1)(engine);
  return HostTensor::i64({count}, values);
}

TEST(CpuKernelsF64Test, SoftmaxGradients) {
  // 7 columns: the float32 path's four lanes and its tail.
  for (const char *op : {"SoftmaxGrad_13", "LogSoftmaxGrad_13"})
    for (int64_t axis : {-1, 0}) {
      KernelCase c{kMs,
                   op,
                   {floats({3, 7}, 1), floats({3, 7}, 2, -2.0f, -0.1f)},
                   {out({3, 7})},
                   {intAttr("axis", axis)}};
      expectFloat64AgreesWithFloat32(c);
    }
  expectFloat64AgreesWithFloat32({kMs,
                                  "SoftmaxGrad",
                                  {floats({2, 3, 5}, 3), floats({2, 3, 5}, 4)},
                                  {out({2, 3, 5})},
                                  {intAttr("axis", 1)}});
}

TEST(CpuKernelsF64Test, Pooling) {
  std::vector<NamedAttribute> window = {intsAttr("kernel_shape", {3, 3}),
                                        intsAttr("strides", {2, 2}),
                                        intsAttr("pads", {1, 1, 1, 1})};
  KernelCase maxPool{"",
                     "MaxPool",
                     {floats({2, 3, 6, 5}, 5)},
                     {out({2, 3, 3, 3}), indicesOut({2, 3, 3, 3})},
                     window};
  maxPool.expectWider = false; // a maximum is one of the inputs
  expectFloat64AgreesWithFloat32(maxPool);
  for (int64_t includePad : {0, 1}) {
    std::vector<NamedAttribute> attrs = window;
    attrs.push_back(intAttr("count_include_pad", includePad));
    expectFloat64AgreesWithFloat32({"",
                                    "AveragePool",
                                    {floats({2, 3, 6, 5}, 6)},
                                    {out({2, 3, 3, 3})},
                                    attrs});
    expectFloat64AgreesWithFloat32({"",
                                    "AveragePoolGrad",
                                    {floats({2, 3, 3, 3}, 7)},
                                    {out({2, 3, 6, 5})},
                                    attrs});
  }
  expectFloat64AgreesWithFloat32({"",
                                  "GlobalAveragePool",
                                  {floats({2, 3, 4, 5}, 8)},
                                  {out({2, 3, 1, 1})}});
  KernelCase globalMax{
      "", "GlobalMaxPool", {floats({2, 3, 4, 5}, 9)}, {out({2, 3, 1, 1})}};
  globalMax.expectWider = false;
  expectFloat64AgreesWithFloat32(globalMax);
  // MaxPoolGrad scatters dY by the indices MaxPool gave (repeats add up).
  std::vector<HostTensor> pooled = runIn(maxPool, DType::F32);
  ASSERT_EQ(pooled.size(), 2u);
  expectFloat64AgreesWithFloat32({"",
                                  "MaxPoolGrad",
                                  {floats({2, 3, 3, 3}, 10), fixed(pooled[1])},
                                  {out({2, 3, 6, 5})}});
}

TEST(CpuKernelsF64Test, CrossEntropyLosses) {
  int64_t n = 6, classes = 7;
  for (const char *reduction : {"mean", "sum", "none"}) {
    std::vector<int64_t> lossShape = std::string(reduction) == "none"
                                         ? std::vector<int64_t>{n}
                                         : std::vector<int64_t>{};
    expectFloat64AgreesWithFloat32(
        {"",
         "SoftmaxCrossEntropyLoss",
         {floats({n, classes}, 11, -3, 3), fixed(labels(n, classes, 12))},
         {out(lossShape), out({n, classes})},
         {stringAttr("reduction", reduction)}});
    expectFloat64AgreesWithFloat32(
        {"",
         "NegativeLogLikelihoodLoss",
         {floats({n, classes}, 13), fixed(labels(n, classes, 14)),
          floats({classes}, 15, 0.5f, 1.5f)},
         {out(lossShape)},
         {stringAttr("reduction", reduction)}});
    // The gradient, with a bias added (the Internal variant).
    std::vector<int64_t> dYShape = lossShape;
    expectFloat64AgreesWithFloat32(
        {kMs,
         "SoftmaxCrossEntropyLossGrad",
         {floats(dYShape, 16), floats({n, classes}, 17, -3.0f, -0.5f),
          fixed(labels(n, classes, 18))},
         {out({n, classes})},
         {stringAttr("reduction", reduction)}});
    expectFloat64AgreesWithFloat32(
        {kMs,
         "SoftmaxCrossEntropyLossInternalGrad",
         {floats(dYShape, 19), floats({n, classes}, 20, -3.0f, -0.5f),
          fixed(labels(n, classes, 21)), absent(), absent(),
          floats({n, classes}, 22)},
         {out({n, classes})},
         {stringAttr("reduction", reduction)}});
  }
  // Scores [N, C, D]: the classes sit D apart.
  expectFloat64AgreesWithFloat32(
      {kMs,
       "SoftmaxCrossEntropyLossInternal",
       {floats({2, classes, 3}, 23, -3, 3),
        fixed(HostTensor::i64({2, 3}, {0, 6, 3, 2, 5, 1}))},
       {out({}), out({2, classes, 3})},
       {stringAttr("reduction", "mean")}});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "NegativeLogLikelihoodLossInternal2",
       {floats({n, classes}, 24), fixed(labels(n, classes, 25)),
        floats({classes}, 73, 0.5f, 1.5f)},
       {out({})},
       {stringAttr("reduction", "mean")}});
  // Dense (probability) labels.
  expectFloat64AgreesWithFloat32(
      {kMs,
       "SoftmaxCrossEntropy",
       {floats({n, classes}, 26, -3, 3), floats({n, classes}, 27, 0, 0.3f)},
       {out({}), out({n, classes})},
       {stringAttr("reduction", "mean")}});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "SoftmaxCrossEntropyGrad",
       {floats({}, 28), floats({n, classes}, 29, -3.0f, -0.5f),
        floats({n, classes}, 30, 0, 0.3f)},
       {out({n, classes})},
       {stringAttr("reduction", "sum")}});
}

TEST(CpuKernelsF64Test, BatchAndInstanceNorm) {
  int64_t c = 3;
  std::vector<Operand> operands = {floats({4, c, 3, 5}, 31, -2, 2),
                                   floats({c}, 32, 0.5f, 1.5f), floats({c}, 33),
                                   floats({c}, 34, -0.5f, 0.5f),
                                   floats({c}, 35, 0.5f, 2.0f)};
  expectFloat64AgreesWithFloat32({"",
                                  "BatchNormalization",
                                  operands,
                                  {out({4, c, 3, 5})},
                                  {floatAttr("epsilon", 1e-5f)}});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "BatchNormInternal",
       operands,
       {out({4, c, 3, 5}), out({c}), out({c}), out({c}), out({c})},
       {floatAttr("epsilon", 1e-5f), floatAttr("momentum", 0.9f)}});
  // 15 spatial elements: the float32 path's two lanes and its tail.
  expectFloat64AgreesWithFloat32(
      {kMs,
       "BatchNormalizationGrad",
       {floats({4, c, 3, 5}, 36), floats({4, c, 3, 5}, 37, -2, 2),
        floats({c}, 38, 0.5f, 1.5f), floats({c}, 39, -0.5f, 0.5f),
        floats({c}, 40, 0.5f, 2.0f)},
       {out({4, c, 3, 5}), out({c}), out({c})}});
  expectFloat64AgreesWithFloat32(
      {"",
       "InstanceNormalization",
       {floats({2, c, 4, 3}, 41, -2, 2), floats({c}, 42, 0.5f, 1.5f),
        floats({c}, 43)},
       {out({2, c, 4, 3})},
       {floatAttr("epsilon", 1e-5f)}});
}

TEST(CpuKernelsF64Test, LayerAndRmsNorm) {
  // 37 columns: every lane width of the float32 paths and a tail.
  std::vector<int64_t> shape = {2, 3, 37}, stat = {2, 3, 1};
  std::vector<NamedAttribute> attrs = {intAttr("axis", -1),
                                       floatAttr("epsilon", 1e-5f),
                                       intAttr("stash_type", 1)};
  Operand x = floats(shape, 44, -2, 2), scale = floats({37}, 45, 0.5f, 1.5f),
          bias = floats({37}, 46);
  expectFloat64AgreesWithFloat32({"",
                                  "LayerNormalization",
                                  {x, scale, bias},
                                  {out(shape), out(stat), out(stat)},
                                  attrs});
  // A scale that broadcasts over the normalized [3, 37].
  expectFloat64AgreesWithFloat32(
      {"",
       "LayerNormalization",
       {x, scale},
       {out(shape)},
       {intAttr("axis", 1), floatAttr("epsilon", 1e-5f)}});
  expectFloat64AgreesWithFloat32({"",
                                  "SimplifiedLayerNormalization",
                                  {x, scale},
                                  {out(shape), out(stat)},
                                  attrs});
  Operand dY = floats(shape, 47), mean = floats(stat, 48, -0.3f, 0.3f),
          invStd = floats(stat, 49, 0.5f, 1.5f);
  expectFloat64AgreesWithFloat32({kMs,
                                  "LayerNormalizationGrad",
                                  {dY, x, scale, mean, invStd},
                                  {out(shape), out({37}), out({37})},
                                  {intAttr("axis", -1)}});
  expectFloat64AgreesWithFloat32({kMs,
                                  "SimplifiedLayerNormalizationGrad",
                                  {dY, x, scale, invStd},
                                  {out(shape), out({37})},
                                  {intAttr("axis", -1)}});
  expectFloat64AgreesWithFloat32({kMs,
                                  "InvertibleLayerNormalizationGrad",
                                  {dY, x, scale, bias, invStd},
                                  {out(shape), out({37}), out({37})},
                                  {intAttr("axis", -1)}});
}

// ONNX's LayerNormalization keeps Mean and InvStdDev in float32 (stash_type
// 1) whatever X is, and ONNX Runtime's CPU kernel does so for a float64 X:
// the statistics are the float64 ones rounded, and LayerNormalizationGrad
// takes them back.
TEST(CpuKernelsF64Test, LayerNormFloat32StatisticsOfAFloat64Input) {
  std::vector<int64_t> shape = {4, 9}, stat = {4, 1};
  std::vector<float> values = randomFloats(36, 50, -2, 2);
  HostTensor x =
      HostTensor::f64(shape, std::vector<double>(values.begin(), values.end()));
  HostTensor scale = HostTensor::f64({9}, std::vector<double>(9, 1.25));
  KernelRunner runner;
  auto wide = runner.run("", "LayerNormalization", {&x, &scale},
                         {TensorType::get(DType::F64, shape),
                          TensorType::get(DType::F64, stat),
                          TensorType::get(DType::F64, stat)});
  ASSERT_TRUE(bool(wide)) << llvm::toString(wide.takeError());
  auto mixed = runner.run(
      "", "LayerNormalization", {&x, &scale},
      {TensorType::get(DType::F64, shape), f32Type(stat), f32Type(stat)});
  ASSERT_TRUE(bool(mixed)) << llvm::toString(mixed.takeError());
  EXPECT_EQ((*mixed)[0].bytes, (*wide)[0].bytes);
  for (unsigned r : {1u, 2u})
    for (int64_t i = 0; i != 4; ++i)
      EXPECT_EQ((*mixed)[r].values<float>()[i],
                static_cast<float>((*wide)[r].values<double>()[i]));
  HostTensor dY = HostTensor::f64(shape, std::vector<double>(36, 0.5));
  auto grad = runner.run(kMsDomain, "LayerNormalizationGrad",
                         {&dY, &x, &scale, &(*mixed)[1], &(*mixed)[2]},
                         {TensorType::get(DType::F64, shape),
                          TensorType::get(DType::F64, {9}),
                          TensorType::get(DType::F64, {9})});
  ASSERT_TRUE(bool(grad)) << llvm::toString(grad.takeError());
  // A float64 statistic of a float32 X is refused.
  HostTensor narrowX = HostTensor::f32(shape, values);
  HostTensor narrowScale = HostTensor::f32({9}, std::vector<float>(9, 1.25f));
  auto refused = runner.run(
      "", "LayerNormalization", {&narrowX, &narrowScale},
      {f32Type(shape), TensorType::get(DType::F64, stat), f32Type(stat)});
  EXPECT_FALSE(bool(refused));
  if (!refused)
    llvm::consumeError(refused.takeError());
}

TEST(CpuKernelsF64Test, Einsum) {
  expectFloat64AgreesWithFloat32(
      {"",
       "Einsum",
       {floats({2, 3, 4}, 51), floats({2, 4, 5}, 52)},
       {out({2, 3, 5})},
       {stringAttr("equation", "bij,bjk->bik")}});
  // Labels summed away before the product, and an output permutation.
  expectFloat64AgreesWithFloat32({"",
                                  "Einsum",
                                  {floats({3, 4, 2}, 53), floats({4, 5}, 54)},
                                  {out({5, 3})},
                                  {stringAttr("equation", "ijx,jk->ki")}});
}

TEST(CpuKernelsF64Test, Convolution) {
  std::vector<NamedAttribute> attrs = {
      intsAttr("kernel_shape", {3, 2}), intsAttr("pads", {1, 0, 1, 1}),
      intsAttr("strides", {2, 1}), intAttr("group", 2)};
  // X [2, 4, 7, 6], W [6, 2, 3, 2]: output [2, 6, 4, 6].
  expectFloat64AgreesWithFloat32(
      {"",
       "Conv",
       {floats({2, 4, 7, 6}, 55), floats({6, 2, 3, 2}, 56), floats({6}, 57)},
       {out({2, 6, 4, 6})},
       attrs});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "ConvGrad",
       {floats({2, 6, 4, 6}, 58), floats({2, 4, 7, 6}, 59),
        floats({6, 2, 3, 2}, 60)},
       {out({2, 4, 7, 6}), out({6, 2, 3, 2}), out({6})},
       attrs});
  // 1x1, stride 1, unpadded: the image multiplied directly.
  expectFloat64AgreesWithFloat32(
      {"",
       "Conv",
       {floats({2, 3, 4, 4}, 61), floats({5, 3, 1, 1}, 62)},
       {out({2, 5, 4, 4})}});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "ConvGrad",
       {floats({2, 5, 4, 4}, 63), floats({2, 3, 4, 4}, 64),
        floats({5, 3, 1, 1}, 65)},
       {out({2, 3, 4, 4}), out({5, 3, 1, 1}), absentOut()}});
}

TEST(CpuKernelsF64Test, MatrixProducts) {
  expectFloat64AgreesWithFloat32({"",
                                  "MatMul",
                                  {floats({2, 3, 5}, 66), floats({5, 4}, 67)},
                                  {out({2, 3, 4})}});
  expectFloat64AgreesWithFloat32(
      {"",
       "Gemm",
       {floats({5, 3}, 68), floats({4, 5}, 69), floats({4}, 70)},
       {out({3, 4})},
       {intAttr("transA", 1), intAttr("transB", 1), floatAttr("alpha", 0.5f),
        floatAttr("beta", 1.5f)}});
  expectFloat64AgreesWithFloat32(
      {kMs,
       "FusedMatMul",
       {floats({2, 5, 3}, 71), floats({4, 5}, 72)},
       {out({2, 3, 4})},
       {intAttr("transA", 1), intAttr("transB", 1), floatAttr("alpha", 0.5f)}});
}

} // namespace
