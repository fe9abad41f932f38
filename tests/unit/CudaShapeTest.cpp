//===- CudaShapeTest.cpp - Shape and constant ops on CUDA -----------------===//
//
// Constant, Range, Trilu, OneHot, NonZero, com.microsoft
// BroadcastGradientArgs and Einsum on CUDA (backend/cuda/CudaShapeDispatch.cpp,
// ShapeKernels.cu; EinsumPlan's host loops are CudaEinsumTest.cpp's). Without
// a GPU: ShapeMath.h's element arithmetic, run on the host, gives the CPU
// kernels' results (bit for bit), the lengths and counts
// the device checks are the ones the CPU kernels accept, and the
// prepare-time checks refuse what they must. With one: the CUDA kernels
// equal the CPU backend's, and data that contradict the planned output
// shape fail the step naming the node (skipped here).
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/EinsumPlan.h"
#include "backend/cuda/ShapeMath.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "tests/unit/TestSupport.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::ScalarType;

namespace {

//===----------------------------------------------------------------------===//
// Range
//===----------------------------------------------------------------------===//

template <typename T>
void expectRangeIsTheCpuKernel(DType dtype, T start, T limit, T delta) {
  SCOPED_TRACE(dtypeName(dtype).str() + " " + std::to_string(start) + ", " +
               std::to_string(limit) + ", " + std::to_string(delta));
  int64_t count = gmopt::rangeCount(start, limit, delta);
  HostTensor s = HostTensor::of<T>(dtype, {}, {start});
  HostTensor l = HostTensor::of<T>(dtype, {}, {limit});
  HostTensor d = HostTensor::of<T>(dtype, {}, {delta});
  KernelRunner runner;
  auto out =
      runner.run("", "Range", {&s, &l, &d}, {TensorType::get(dtype, {count})});
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  std::vector<T> expected = (*out)[0].values<T>();
  ASSERT_EQ(static_cast<int64_t>(expected.size()), count);
  for (int64_t i = 0; i < count; ++i) {
    T value = cuda::rangeElement(start, delta, i);
    EXPECT_EQ(std::memcmp(&value, &expected[i], sizeof(T)), 0)
        << "element " << i << ": " << value << " vs " << expected[i];
  }
  // The device faults on any other length; the CPU kernel refuses it too.
  EXPECT_NE(test::errorOf(runner.run("", "Range", {&s, &l, &d},
                                     {TensorType::get(dtype, {count + 1})})),
            "");
}

TEST(CudaShapeTest, RangeIsTheCpuKernel) {
  expectRangeIsTheCpuKernel<float>(DType::F32, 0.0f, 1.0f, 0.1f);
  expectRangeIsTheCpuKernel<float>(DType::F32, -3.7f, 12.3f, 0.37f);
  expectRangeIsTheCpuKernel<float>(DType::F32, 10.0f, -2.0f, -0.3f);
  expectRangeIsTheCpuKernel<float>(DType::F32, 1.0f, 1.0f, 0.5f);
  expectRangeIsTheCpuKernel<float>(DType::F32, 1.0f, 0.0f, 0.5f);
  expectRangeIsTheCpuKernel<double>(DType::F64, 0.1, 7.3, 0.0173);
  expectRangeIsTheCpuKernel<double>(DType::F64, 5.0, -5.0, -1.0 / 3.0);
  expectRangeIsTheCpuKernel<int64_t>(DType::I64, -7, 100, 3);
  expectRangeIsTheCpuKernel<int64_t>(DType::I64, 100, -7, -9);
  expectRangeIsTheCpuKernel<int32_t>(DType::I32, 3, 40, 7);
  expectRangeIsTheCpuKernel<int16_t>(DType::I16, -20, 20, 3);
  expectRangeIsTheCpuKernel<int16_t>(DType::I16, 5, 5, 1);
}

//===----------------------------------------------------------------------===//
// Trilu and OneHot
//===----------------------------------------------------------------------===//

TEST(CudaShapeTest, TriluIsTheCpuKernel) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  std::vector<float> values = randomFloats(120, 1, -2.0f, 2.0f);
  std::vector<int64_t> ints(120);
  for (size_t i = 0; i < ints.size(); ++i)
    ints[i] = static_cast<int64_t>(i) * 7 - 300;
  for (int64_t k : {-7, -2, 0, 1, 3, 9})
    for (int upper : {0, 1})
      for (DType kType : {DType::I64, DType::F32, DType::I32}) {
        SCOPED_TRACE("k " + std::to_string(k) + " upper " +
                     std::to_string(upper) + " k of " + dtypeName(kType).str());
        HostTensor kTensor = kType == DType::I64 ? HostTensor::i64({}, {k})
                             : kType == DType::F32
                                 ? HostTensor::f32({}, {float(k)})
                                 : HostTensor::i32({}, {int32_t(k)});
        HostTensor x = HostTensor::f32(shape, values);
        HostTensor xi = HostTensor::i64(shape, ints);
        KernelRunner runner;
        auto y = runner.run("", "Trilu", {&x, &kTensor},
                            {TensorType::get(DType::F32, shape)},
                            {intAttr("upper", upper)});
        ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
        auto yi = runner.run("", "Trilu", {&xi, &kTensor},
                             {TensorType::get(DType::I64, shape)},
                             {intAttr("upper", upper)});
        ASSERT_TRUE(bool(yi)) << llvm::toString(yi.takeError());
        std::vector<float> expected = (*y)[0].values<float>();
        std::vector<int64_t> expectedInts = (*yi)[0].values<int64_t>();
        // As ShapeKernels.cu reads k and walks the elements.
        int64_t diagonal = static_cast<int64_t>(
            cuda::loadAsDouble(kType == DType::I64   ? ScalarType::I64
                               : kType == DType::F32 ? ScalarType::F32
                                                     : ScalarType::I32,
                               kTensor.bytes.data(), 0));
        for (int64_t e = 0; e < 120; ++e) {
          bool keep =
              cuda::triluKeeps(upper != 0, diagonal, (e / 5) % 4, e % 5);
          float value = keep ? values[e] : 0.0f;
          EXPECT_EQ(std::memcmp(&value, &expected[e], 4), 0) << "element " << e;
          EXPECT_EQ(keep ? ints[e] : 0, expectedInts[e]) << "element " << e;
        }
      }
}

TEST(CudaShapeTest, OneHotIsTheCpuKernel) {
  std::vector<int64_t> indexShape = {3, 4};
  // Negative indices count from the end; those beyond the depth select
  // nothing; float indices truncate.
  std::vector<int64_t> raw = {0, 1, 4, -1, -5, -6, 5, 7, 2, 3, -2, 100};
  std::vector<float> rawFloats = {0.5f, 1.9f, 4.2f, -1.0f, -5.5f, -6.0f,
                                  5.0f, 7.0f, 2.0f, 3.7f,  -2.2f, NAN};
  const int64_t depth = 5;
  for (DType indexType : {DType::I64, DType::I32, DType::F32})
    for (DType outType : {DType::F32, DType::I64})
      for (int64_t axis : {-1, 0, 1, -3}) {
        SCOPED_TRACE("indices " + dtypeName(indexType).str() + " out " +
                     dtypeName(outType).str() + " axis " +
                     std::to_string(axis));
        HostTensor indices;
        if (indexType == DType::I64)
          indices = HostTensor::i64(indexShape, raw);
        else if (indexType == DType::I32)
          indices = HostTensor::i32(
              indexShape, std::vector<int32_t>(raw.begin(), raw.end()));
        else
          indices = HostTensor::f32(indexShape, rawFloats);
        HostTensor depthTensor = HostTensor::f32({}, {float(depth)});
        HostTensor values = outType == DType::F32
                                ? HostTensor::f32({2}, {-0.5f, 3.25f})
                                : HostTensor::i64({2}, {-7, 11});
        int64_t a = axis < 0 ? axis + 3 : axis;
        std::vector<int64_t> outShape = indexShape;
        outShape.insert(outShape.begin() + a, depth);
        KernelRunner runner;
        auto y = runner.run("", "OneHot", {&indices, &depthTensor, &values},
                            {TensorType::get(outType, outShape)},
                            {intAttr("axis", axis)});
        ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
        cuda::OneHotShape s;
        s.depth = static_cast<int64_t>(
            cuda::loadAsDouble(ScalarType::F32, depthTensor.bytes.data(), 0));
        ASSERT_EQ(s.depth, depth);
        s.outer = 1;
        for (int64_t d = 0; d < a; ++d)
          s.outer *= indexShape[d];
        s.inner = 12 / s.outer;
        ScalarType type = indexType == DType::I64   ? ScalarType::I64
                          : indexType == DType::I32 ? ScalarType::I32
                                                    : ScalarType::F32;
        const std::vector<uint8_t> &expected = (*y)[0].bytes;
        size_t size = dtypeSize(outType);
        for (int64_t e = 0; e < 60; ++e) {
          bool on = cuda::oneHotIsOn(s, type, indices.bytes.data(), e);
          EXPECT_EQ(std::memcmp(values.bytes.data() + (on ? size : 0),
                                expected.data() + e * size, size),
                    0)
              << "element " << e;
        }
      }
  EXPECT_EQ(cuda::truncateToInt64(-3.9), -3);
  EXPECT_EQ(cuda::truncateToInt64(1e300), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(cuda::truncateToInt64(NAN), 0);
}

//===----------------------------------------------------------------------===//
// NonZero
//===----------------------------------------------------------------------===//

/// NonZero as ShapeKernels.cu computes it: the elements in order, ranked.
std::vector<int64_t> nonZeroOnTheHost(const HostTensor &x, int64_t &count) {
  int size = static_cast<int>(dtypeSize(x.dtype));
  bool isFloat = isFloatingPoint(x.dtype);
  std::vector<int64_t> linear;
  for (int64_t i = 0; i < x.numElements(); ++i)
    if (cuda::isNonZeroBits(cuda::loadBits(x.bytes.data(), i, size), size,
                            isFloat))
      linear.push_back(i);
  count = linear.size();
  cuda::NonZeroShape shape;
  shape.rank = x.shape.size();
  for (size_t d = 0; d < x.shape.size(); ++d)
    shape.dims[d] = x.shape[d];
  std::vector<int64_t> coords(std::max<size_t>(x.shape.size(), 1) * count);
  for (int64_t k = 0; k < count; ++k)
    cuda::writeNonZeroCoordinates(shape, linear[k], coords.data(), count, k);
  return coords;
}

TEST(CudaShapeTest, NonZeroIsTheCpuKernel) {
  std::vector<float> floats = randomFloats(60, 4, -2.0f, 2.0f);
  for (size_t i = 0; i < floats.size(); i += 3)
    floats[i] = i % 2 ? -0.0f : 0.0f;
  floats[7] = NAN;
  floats[8] = std::numeric_limits<float>::denorm_min();
  std::vector<int64_t> ints(60);
  for (size_t i = 0; i < ints.size(); ++i)
    ints[i] = i % 4 == 1 ? 0 : static_cast<int64_t>(i) - 30;
  std::vector<uint8_t> bools(60);
  for (size_t i = 0; i < bools.size(); ++i)
    bools[i] = (i * 7) % 5 < 2;
  std::vector<HostTensor> inputs = {
      HostTensor::f32({3, 4, 5}, floats),
      HostTensor::f16({60}, floats),
      HostTensor::bf16({6, 10}, floats),
      HostTensor::f64({2, 30},
                      std::vector<double>(floats.begin(), floats.end())),
      HostTensor::i64({5, 12}, ints),
      HostTensor::i32({60}, std::vector<int32_t>(ints.begin(), ints.end())),
      HostTensor::boolean({2, 3, 2, 5}, bools),
      HostTensor::f32({}, {-0.0f}),
      HostTensor::f32({}, {2.0f}),
      HostTensor::f32({4, 0}, {}),
  };
  for (const HostTensor &input : inputs) {
    SCOPED_TRACE(dtypeName(input.dtype).str() + " rank " +
                 std::to_string(input.shape.size()));
    int64_t count = 0;
    std::vector<int64_t> coords = nonZeroOnTheHost(input, count);
    HostTensor x = input;
    int64_t rows = std::max<int64_t>(input.shape.size(), 1);
    KernelRunner runner;
    auto y = runner.run("", "NonZero", {&x},
                        {TensorType::get(DType::I64, {rows, count})});
    ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
    EXPECT_EQ((*y)[0].values<int64_t>(), coords);
    // Any other count: the CPU kernel refuses, the CUDA kernel faults.
    EXPECT_NE(test::errorOf(
                  runner.run("", "NonZero", {&x},
                             {TensorType::get(DType::I64, {rows, count + 1})})),
              "");
  }
}

//===----------------------------------------------------------------------===//
// BroadcastGradientArgs
//===----------------------------------------------------------------------===//

TEST(CudaShapeTest, BroadcastGradientArgsIsTheCpuKernel) {
  struct Case {
    std::vector<int64_t> a, b;
  };
  std::vector<Case> cases = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{1, 3, 1}, {5, 3, 7}},
      {{5, 1, 7}, {3, 1}},    {{}, {2, 3}},     {{6, 1}, {}},
      {{1}, {1, 1, 1}},       {{2, 3}, {3, 3}}, {{8, 1, 6, 1}, {7, 1, 5}},
      {{4, 5}, {4, 6}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::to_string(c.a.size()) + "-d and " +
                 std::to_string(c.b.size()) + "-d");
    int64_t longest = std::max(c.a.size(), c.b.size());
    std::vector<int64_t> aAxes(longest, -1), bAxes(longest, -1);
    cuda::GradientAxesCount count = cuda::broadcastGradientAxes(
        c.a.data(), c.a.size(), c.b.data(), c.b.size(), aAxes.data(), longest,
        bAxes.data(), longest);
    HostTensor a = HostTensor::i64({int64_t(c.a.size())}, c.a);
    HostTensor b = HostTensor::i64({int64_t(c.b.size())}, c.b);
    KernelRunner runner;
    if (!count.broadcastable) {
      EXPECT_NE(
          test::errorOf(runner.run(kMsDomain, "BroadcastGradientArgs", {&a, &b},
                                   {TensorType::get(DType::I64, {0}),
                                    TensorType::get(DType::I64, {0})})),
          "");
      continue;
    }
    auto y = runner.run(kMsDomain, "BroadcastGradientArgs", {&a, &b},
                        {TensorType::get(DType::I64, {count.a}),
                         TensorType::get(DType::I64, {count.b})});
    ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
    aAxes.resize(count.a);
    bAxes.resize(count.b);
    EXPECT_EQ((*y)[0].values<int64_t>(), aAxes);
    EXPECT_EQ((*y)[1].values<int64_t>(), bAxes);
    // A short output is written only up to its length, and still counted.
    if (count.a > 0) {
      std::vector<int64_t> shortAxes(count.a, -1);
      cuda::GradientAxesCount clipped = cuda::broadcastGradientAxes(
          c.a.data(), c.a.size(), c.b.data(), c.b.size(), shortAxes.data(),
          count.a - 1, nullptr, 0);
      EXPECT_EQ(clipped.a, count.a);
      EXPECT_EQ(shortAxes.back(), -1);
    }
  }
}

//===----------------------------------------------------------------------===//
// Prepare-time checks and the device
//===----------------------------------------------------------------------===//

/// A one-node module of (\p domain, \p op).
std::unique_ptr<Module> oneNode(llvm::StringRef domain, llvm::StringRef op,
                                std::vector<TensorType> inputs,
                                std::vector<TensorType> results,
                                std::vector<NamedAttribute> attrs,
                                Node **node) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 18;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < inputs.size(); ++i)
    operands.push_back(graph.addInput(inputs[i], "in" + std::to_string(i)));
  Builder builder(graph);
  *node = builder.create(OpName{domain.str(), op.str()}, operands, results,
                         attrs, op.str());
  for (unsigned i = 0; i < (*node)->getNumResults(); ++i)
    graph.addOutput((*node)->getResult(i));
  return module;
}

std::string refusal(llvm::StringRef domain, llvm::StringRef op,
                    std::vector<TensorType> inputs,
                    std::vector<TensorType> results,
                    std::vector<NamedAttribute> attrs = {}) {
  Node *node = nullptr;
  auto module = oneNode(domain, op, inputs, results, attrs, &node);
  llvm::Error err = checkCudaNode(*node);
  return err ? llvm::toString(std::move(err)) : std::string();
}

TensorType typeOf(DType dtype, std::vector<int64_t> shape) {
  return TensorType::get(dtype, shape);
}

NamedAttribute tensorAttr(const std::string &name, TensorData data) {
  return attr(name, Attribute::getTensor(std::move(data)));
}

/// The planned scratch of a lone (domain, op) node (the CUDA workspace
/// model; host code in every build).
uint64_t plannedWorkspace(llvm::StringRef op, std::vector<TensorType> inputs,
                          std::vector<TensorType> results,
                          std::vector<NamedAttribute> attrs) {
  Node *node = nullptr;
  auto module = oneNode("", op, inputs, results, attrs, &node);
  return getCudaKernelWorkspaceBytes(*node);
}

// An Einsum that runs on cuBLASLt gets MatMul's planned GEMM scratch, so
// cuBLASLt never runs it without a workspace in planned mode; equations on
// the general kernel, f64 and equations the check refuses get none.
TEST(CudaShapeTest, CublasEinsumGetsTheGemmWorkspace) {
  auto f32 = [](std::vector<int64_t> shape) {
    return typeOf(DType::F32, shape);
  };
  auto equation = [](const char *text) {
    return std::vector<NamedAttribute>{stringAttr("equation", text)};
  };
  EXPECT_EQ(
      plannedWorkspace("MatMul", {f32({4, 8}), f32({8, 3})}, {f32({4, 3})}, {}),
      kCudaGemmWorkspaceBytes);
  // Batched, transposed and operand-swapped GEMM forms.
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({2, 4, 8}), f32({2, 8, 3})},
                             {f32({2, 4, 3})}, equation("bik,bkj->bij")),
            kCudaGemmWorkspaceBytes);
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({8, 4}), f32({3, 8})},
                             {f32({4, 3})}, equation("ki,jk->ij")),
            kCudaGemmWorkspaceBytes);
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({8, 3}), f32({4, 8})},
                             {f32({4, 3})}, equation("kj,ik->ij")),
            kCudaGemmWorkspaceBytes);
  // General-kernel forms: a trace-like sum of one operand, a broadcast
  // operand, three operands.
  EXPECT_EQ(
      plannedWorkspace("Einsum", {f32({4, 8})}, {f32({4})}, equation("ij->i")),
      0u);
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({2, 4, 8}), f32({1, 8, 3})},
                             {f32({2, 4, 3})}, equation("bik,bkj->bij")),
            0u);
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({2, 3}), f32({3, 4}), f32({4, 5})},
                             {f32({2, 5})}, equation("ij,jk,kl->il")),
            0u);
  // f64 runs on the general kernel; a malformed equation is the check's to
  // refuse and plans nothing.
  EXPECT_EQ(
      plannedWorkspace("Einsum",
                       {typeOf(DType::F64, {4, 8}), typeOf(DType::F64, {8, 3})},
                       {typeOf(DType::F64, {4, 3})}, equation("ik,kj->ij")),
      0u);
  EXPECT_EQ(plannedWorkspace("Einsum", {f32({4, 8}), f32({8, 3})},
                             {f32({4, 3})}, equation("ik,kj->iq")),
            0u);
}

TEST(CudaShapeTest, ChecksRefuseWhatTheKernelsCannotRun) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  auto contains = [](const std::string &text, const char *part) {
    return text.find(part) != std::string::npos;
  };
  TensorType f32Scalar = typeOf(DType::F32, {});
  // Constant: every form the CPU kernel runs; strings refused.
  EXPECT_EQ(refusal("", "Constant", {}, {typeOf(DType::F16, {2})},
                    {tensorAttr("value", TensorData::fromValues<uint16_t>(
                                             DType::F16, {2}, {1, 2}))}),
            "");
  EXPECT_EQ(refusal("", "Constant", {}, {typeOf(DType::F32, {3})},
                    {attr("value_floats", Attribute::getFloats({1, 2, 3}))}),
            "");
  EXPECT_EQ(refusal("", "Constant", {}, {typeOf(DType::I64, {})},
                    {intAttr("value_int", 4)}),
            "");
  EXPECT_TRUE(
      contains(refusal("", "Constant", {}, {typeOf(DType::I64, {2})},
                       {attr("value_floats", Attribute::getFloats({1, 2}))}),
               "disagrees"));
  EXPECT_TRUE(
      contains(refusal("", "Constant", {}, {typeOf(DType::F32, {3})},
                       {tensorAttr("value", TensorData::fromValues<float>(
                                                DType::F32, {2}, {1, 2}))}),
               "bytes"));
  EXPECT_TRUE(contains(refusal("", "Constant", {}, {typeOf(DType::F32, {})},
                               {stringAttr("value_string", "x")}),
                       "string and sparse"));
  // Range.
  EXPECT_EQ(refusal("", "Range", {f32Scalar, f32Scalar, f32Scalar},
                    {typeOf(DType::F32, {5})}),
            "");
  EXPECT_TRUE(contains(refusal("", "Range",
                               {typeOf(DType::F16, {}), typeOf(DType::F16, {}),
                                typeOf(DType::F16, {})},
                               {typeOf(DType::F16, {5})}),
                       "not supported"));
  EXPECT_TRUE(contains(refusal("", "Range",
                               {f32Scalar, typeOf(DType::I64, {}), f32Scalar},
                               {typeOf(DType::F32, {5})}),
                       "scalars of the output type"));
  // Trilu.
  EXPECT_EQ(refusal("", "Trilu",
                    {typeOf(DType::BF16, {2, 3, 4}), typeOf(DType::I64, {})},
                    {typeOf(DType::BF16, {2, 3, 4})}),
            "");
  EXPECT_TRUE(contains(refusal("", "Trilu", {typeOf(DType::F32, {4})},
                               {typeOf(DType::F32, {4})}),
                       "rank >= 2"));
  EXPECT_TRUE(
      contains(refusal("", "Trilu",
                       {typeOf(DType::F32, {3, 3}), typeOf(DType::I64, {2})},
                       {typeOf(DType::F32, {3, 3})}),
               "exactly one element"));
  // OneHot.
  EXPECT_EQ(refusal("", "OneHot",
                    {typeOf(DType::I32, {2, 3}), typeOf(DType::I64, {}),
                     typeOf(DType::F16, {2})},
                    {typeOf(DType::F16, {2, 7, 3})}, {intAttr("axis", 1)}),
            "");
  EXPECT_TRUE(
      contains(refusal("", "OneHot",
                       {typeOf(DType::F16, {2, 3}), typeOf(DType::I64, {}),
                        typeOf(DType::F32, {2})},
                       {typeOf(DType::F32, {2, 3, 7})}),
               "indices of element type f16"));
  EXPECT_TRUE(
      contains(refusal("", "OneHot",
                       {typeOf(DType::I64, {2, 3}), typeOf(DType::I64, {}),
                        typeOf(DType::F32, {2})},
                       {typeOf(DType::F32, {2, 7, 3})}),
               "does not match the indices"));
  EXPECT_TRUE(
      contains(refusal("", "OneHot",
                       {typeOf(DType::I64, {2, 3}), typeOf(DType::I64, {}),
                        typeOf(DType::I64, {2})},
                       {typeOf(DType::F32, {2, 3, 7})}),
               "[off, on]"));
  EXPECT_TRUE(
      contains(refusal("", "OneHot",
                       {typeOf(DType::I64, {2, 3}), typeOf(DType::I64, {}),
                        typeOf(DType::F32, {2})},
                       {typeOf(DType::F32, {2, 3, 7})}, {intAttr("axis", 3)}),
               "out of range"));
  // NonZero.
  EXPECT_EQ(refusal("", "NonZero", {typeOf(DType::F16, {4, 5})},
                    {typeOf(DType::I64, {2, 7})}),
            "");
  EXPECT_EQ(refusal("", "NonZero", {typeOf(DType::Bool, {})},
                    {typeOf(DType::I64, {1, 1})}),
            "");
  EXPECT_TRUE(contains(refusal("", "NonZero", {typeOf(DType::F32, {4, 5})},
                               {typeOf(DType::I64, {3, 7})}),
                       "int64 [2, count]"));
  EXPECT_TRUE(contains(refusal("", "NonZero", {typeOf(DType::F32, {4, 5})},
                               {typeOf(DType::I64, {2, 21})}),
                       "exceeds"));
  EXPECT_TRUE(contains(
      refusal("", "NonZero", {typeOf(DType::F32, {4, 5})},
              {TensorType(DType::I64, {Dim::fixed(2), Dim::unknown()})}),
      "must be static"));
  // BroadcastGradientArgs.
  EXPECT_EQ(refusal(kMsDomain, "BroadcastGradientArgs",
                    {typeOf(DType::I64, {3}), typeOf(DType::I64, {2})},
                    {typeOf(DType::I64, {1}), typeOf(DType::I64, {2})}),
            "");
  EXPECT_TRUE(
      contains(refusal(kMsDomain, "BroadcastGradientArgs",
                       {typeOf(DType::I32, {3}), typeOf(DType::I64, {2})},
                       {typeOf(DType::I64, {1})}),
               "int64 tensors"));
  EXPECT_TRUE(
      contains(refusal(kMsDomain, "BroadcastGradientArgs",
                       {typeOf(DType::I64, {3}), typeOf(DType::I64, {2})},
                       {typeOf(DType::I64, {4})}),
               "more axes"));
  // Einsum.
  EXPECT_EQ(refusal("", "Einsum",
                    {typeOf(DType::F32, {3, 4}), typeOf(DType::F32, {4, 5})},
                    {typeOf(DType::F32, {3, 5})},
                    {stringAttr("equation", "ij,jk->ik")}),
            "");
  EXPECT_TRUE(
      contains(refusal("", "Einsum",
                       {typeOf(DType::F16, {3, 4}), typeOf(DType::F16, {4, 5})},
                       {typeOf(DType::F16, {3, 5})},
                       {stringAttr("equation", "ij,jk->ik")}),
               "not supported (f32, f64)"));
  EXPECT_TRUE(contains(refusal("", "Einsum", {typeOf(DType::F32, {3, 3})},
                               {typeOf(DType::F32, {3})},
                               {stringAttr("equation", "ii->i")}),
                       "diagonal"));
  EXPECT_TRUE(
      contains(refusal("", "Einsum",
                       {typeOf(DType::F32, {3, 4}), typeOf(DType::F32, {4, 5})},
                       {typeOf(DType::F32, {5, 3})},
                       {stringAttr("equation", "ij,jk->ik")}),
               "output shape differs"));
}

/// One device comparison: a node run on the CPU and the CUDA backends.
struct DeviceCase {
  DeviceCase(llvm::StringRef domain, llvm::StringRef op,
             std::vector<TensorData> inputs, std::vector<TensorType> results,
             std::vector<NamedAttribute> attrs, double tolerance = 0)
      : domain(domain.str()), op(op.str()), inputs(std::move(inputs)),
        results(std::move(results)), attrs(std::move(attrs)),
        tolerance(tolerance) {}
  std::string domain;
  std::string op;
  std::vector<TensorData> inputs;
  std::vector<TensorType> results;
  std::vector<NamedAttribute> attrs;
  /// Einsum: the relative tolerance; 0: bit for bit.
  double tolerance;
};

/// Runs \p c on the CPU (onCuda false) or CUDA backend; the step's error
/// is returned as text.
std::string runCase(const DeviceCase &c, bool onCuda,
                    std::vector<TensorData> &outputs) {
  std::vector<TensorType> types;
  for (const TensorData &input : c.inputs)
    types.push_back(input.getType());
  Node *node = nullptr;
  auto module = oneNode(c.domain, c.op, types, c.results, c.attrs, &node);
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto exe = onCuda ? prepareCudaExecutable(*module, options)
                    : prepareCpuExecutable(*module, options);
  if (!exe)
    return "prepare: " + llvm::toString(exe.takeError());
  const Graph &graph = module->getGraph();
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (llvm::Error err =
            (*exe)->setInput(graph.getInputs()[i].get(), c.inputs[i]))
      return "input: " + llvm::toString(std::move(err));
  if (llvm::Error err = (*exe)->runStep(0))
    return llvm::toString(std::move(err));
  for (const Value *out : graph.getOutputs()) {
    auto value = (*exe)->readValue(out);
    if (!value)
      return "read: " + llvm::toString(value.takeError());
    outputs.push_back(std::move(*value));
  }
  return "";
}

template <typename T>
TensorData tensorOf(DType dtype, std::vector<int64_t> shape,
                    const std::vector<T> &values) {
  return TensorData::fromValues<T>(dtype, shape, values);
}

TEST(CudaShapeTest, KernelsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  std::vector<float> values = randomFloats(4096, 8, -2.0f, 2.0f);
  for (size_t i = 0; i < values.size(); i += 3)
    values[i] = 0.0f;
  values[5] = -0.0f;
  values[7] = NAN;
  std::vector<int64_t> indices = {0, 3, -1, -4, 4, 9, 2, 1};
  auto f32 = [](std::vector<int64_t> shape, std::vector<float> v) {
    return tensorOf<float>(DType::F32, shape, v);
  };
  auto i64 = [](std::vector<int64_t> shape, std::vector<int64_t> v) {
    return tensorOf<int64_t>(DType::I64, shape, v);
  };
  int64_t nonZeroCount = 0;
  for (float v : values)
    nonZeroCount += v != 0.0f || std::isnan(v);
  std::vector<float> einsumA(values.begin(), values.begin() + 2 * 8 * 16);
  std::vector<float> einsumB(values.begin() + 1000,
                             values.begin() + 1000 + 2 * 16 * 12);
  for (float *v : {einsumA.data(), einsumB.data()})
    for (size_t i = 0; i < 256; ++i)
      if (std::isnan(v[i]))
        v[i] = 1.0f;
  std::vector<DeviceCase> cases = {
      {"",
       "Constant",
       {},
       {TensorType::get(DType::F16, {3})},
       {tensorAttr("value", tensorOf<uint16_t>(DType::F16, {3},
                                               {0x3c00, 0xc000, 0x7c00}))}},
      {"",
       "Constant",
       {},
       {TensorType::get(DType::F32, {4})},
       {attr("value_floats", Attribute::getFloats({1.5f, -2, 0, 1e30f}))}},
      {"",
       "Constant",
       {},
       {TensorType::get(DType::I64, {})},
       {intAttr("value_int", -42)}},
      {"",
       "Range",
       {f32({}, {-3.7f}), f32({}, {12.3f}), f32({}, {0.37f})},
       {TensorType::get(DType::F32, {44})},
       {}},
      {"",
       "Range",
       {tensorOf<int16_t>(DType::I16, {}, {-20}),
        tensorOf<int16_t>(DType::I16, {}, {20}),
        tensorOf<int16_t>(DType::I16, {}, {3})},
       {TensorType::get(DType::I16, {14})},
       {}},
      {"",
       "Trilu",
       {f32({4, 8, 16},
            std::vector<float>(values.begin(), values.begin() + 512)),
        i64({}, {-2})},
       {TensorType::get(DType::F32, {4, 8, 16})},
       {intAttr("upper", 0)}},
      {"",
       "Trilu",
       {i64({3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})},
       {TensorType::get(DType::I64, {3, 5})},
       {}},
      {"",
       "OneHot",
       {i64({2, 4}, indices), f32({}, {5.0f}), f32({2}, {0.25f, 4.0f})},
       {TensorType::get(DType::F32, {2, 5, 4})},
       {intAttr("axis", 1)}},
      {"",
       "NonZero",
       {f32({16, 256}, values)},
       {TensorType::get(DType::I64, {2, nonZeroCount})},
       {}},
      {kMsDomain,
       "BroadcastGradientArgs",
       {i64({4}, {8, 1, 6, 1}), i64({3}, {7, 1, 5})},
       {TensorType::get(DType::I64, {2}), TensorType::get(DType::I64, {2})},
       {}},
      {"",
       "Einsum",
       {f32({2, 8, 16}, einsumA), f32({2, 16, 12}, einsumB)},
       {TensorType::get(DType::F32, {2, 8, 12})},
       {stringAttr("equation", "bij,bjk->bik")},
       1e-4},
      {"",
       "Einsum",
       {f32({2, 8, 16}, einsumA), f32({2, 16, 12}, einsumB)},
       {TensorType::get(DType::F32, {2, 12, 8})},
       {stringAttr("equation", "bij,bjk->bki")},
       1e-4},
      {"",
       "Einsum",
       {tensorOf<double>(DType::F64, {2, 8, 16},
                         std::vector<double>(einsumA.begin(), einsumA.end())),
        tensorOf<double>(DType::F64, {2, 16, 12},
                         std::vector<double>(einsumB.begin(), einsumB.end()))},
       {TensorType::get(DType::F64, {2, 8, 12})},
       {stringAttr("equation", "bij,bjk->bik")},
       1e-12},
      {"",
       "Einsum",
       {f32({2, 8, 16}, einsumA)},
       {TensorType::get(DType::F32, {16, 2})},
       {stringAttr("equation", "bij->jb")},
       1e-4},
  };
  for (const DeviceCase &c : cases) {
    SCOPED_TRACE(c.op);
    std::vector<TensorData> outputs[2];
    for (int onCuda = 0; onCuda < 2; ++onCuda)
      ASSERT_EQ(runCase(c, onCuda != 0, outputs[onCuda]), "")
          << (onCuda ? "CUDA" : "CPU");
    ASSERT_EQ(outputs[0].size(), outputs[1].size());
    for (size_t i = 0; i < outputs[0].size(); ++i) {
      if (c.tolerance == 0) {
        EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "output " << i;
        continue;
      }
      llvm::ArrayRef<uint8_t> cpu = outputs[0][i].getBytes(),
                              gpu = outputs[1][i].getBytes();
      ASSERT_EQ(cpu.size(), gpu.size());
      auto compare = [&](auto zero) {
        using T = decltype(zero);
        const T *a = reinterpret_cast<const T *>(cpu.data());
        const T *b = reinterpret_cast<const T *>(gpu.data());
        for (size_t e = 0; e < cpu.size() / sizeof(T); ++e)
          EXPECT_NEAR(a[e], b[e], c.tolerance * (1 + std::abs(a[e])))
              << "element " << e;
      };
      if (outputs[0][i].getType().getDType() == DType::F64)
        compare(0.0);
      else
        compare(0.0f);
    }
  }
}

TEST(CudaShapeTest, DataThatContradictThePlanFailTheStepOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  auto f32 = [](std::vector<int64_t> shape, std::vector<float> v) {
    return tensorOf<float>(DType::F32, shape, v);
  };
  std::vector<DeviceCase> cases = {
      {"",
       "NonZero",
       {f32({2, 3}, {0, 1, 2, 0, 0, 3})},
       {TensorType::get(DType::I64, {2, 4})},
       {}},
      {"",
       "Range",
       {f32({}, {0}), f32({}, {1}), f32({}, {0.25f})},
       {TensorType::get(DType::F32, {5})},
       {}},
      {"",
       "Range",
       {f32({}, {0}), f32({}, {1}), f32({}, {0})},
       {TensorType::get(DType::F32, {0})},
       {}},
      {"",
       "OneHot",
       {tensorOf<int64_t>(DType::I64, {2}, {0, 1}), f32({}, {3.0f}),
        f32({2}, {0, 1})},
       {TensorType::get(DType::F32, {2, 4})},
       {}},
      {kMsDomain,
       "BroadcastGradientArgs",
       {tensorOf<int64_t>(DType::I64, {2}, {4, 5}),
        tensorOf<int64_t>(DType::I64, {2}, {4, 6})},
       {TensorType::get(DType::I64, {0})},
       {}},
      {kMsDomain,
       "BroadcastGradientArgs",
       {tensorOf<int64_t>(DType::I64, {2}, {1, 5}),
        tensorOf<int64_t>(DType::I64, {2}, {4, 5})},
       {TensorType::get(DType::I64, {0})},
       {}},
  };
  for (const DeviceCase &c : cases) {
    SCOPED_TRACE(c.op);
    std::vector<TensorData> outputs;
    std::string error = runCase(c, /*onCuda=*/true, outputs);
    EXPECT_NE(error.find("CUDA kernel"), std::string::npos) << error;
    EXPECT_NE(error.find(c.op), std::string::npos) << error;
    // The fault is cleared: the next step of a good node succeeds.
    std::vector<TensorData> good;
    DeviceCase constant{"",
                        "Constant",
                        {},
                        {TensorType::get(DType::I64, {})},
                        {intAttr("value_int", 1)}};
    EXPECT_EQ(runCase(constant, /*onCuda=*/true, good), "");
  }
}

} // namespace
