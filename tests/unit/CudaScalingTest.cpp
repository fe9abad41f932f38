//===- CudaScalingTest.cpp - Mixed-precision ops on CUDA ------------------===//
//
// IsFinite, IsAllFinite and MixedPrecisionScale on CUDA
// (backend/cuda/CudaScalingDispatch.cpp, ScalingKernels.cu). Without a GPU:
// ScalingMath.h's element arithmetic, run on the host, gives the CPU
// kernels' results bit for bit (inf, NaN, signed zeros and 16-bit storage
// included), and the prepare-time checks refuse what they must. With one:
// the CUDA kernels equal the CPU backend's (skipped here).
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/ScalingMath.h"
#include "ir/Half.h"
#include "ir/Module.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::FiniteTest;

namespace {

/// Random values with infinities, NaN and signed zeros mixed in.
std::vector<float> edgyFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  const float specials[] = {INFINITY,
                            -INFINITY,
                            std::nanf(""),
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min()};
  for (size_t i = 0; i < n; i += 13)
    v[i] = specials[(i / 13) % 7];
  return v;
}

HostTensor ofStorage(DType dtype, std::vector<int64_t> shape,
                     const std::vector<float> &values) {
  if (dtype == DType::F16)
    return HostTensor::f16(std::move(shape), values);
  if (dtype == DType::BF16)
    return HostTensor::bf16(std::move(shape), values);
  return HostTensor::f32(std::move(shape), values);
}

TEST(CudaScalingTest, FiniteTestsAreTheCpuKernels) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dtype).str());
    HostTensor x = ofStorage(dtype, {7, 13}, edgyFloats(91, 3));
    std::vector<float> widened = x.floats();
    KernelRunner runner;
    auto each = runner.run("com.microsoft", "IsFinite", {&x},
                           {TensorType::get(DType::Bool, {7, 13})});
    ASSERT_TRUE(bool(each)) << llvm::toString(each.takeError());
    std::vector<uint8_t> expected = (*each)[0].values<uint8_t>();
    for (size_t i = 0; i < widened.size(); ++i)
      EXPECT_EQ(uint8_t(cuda::passesFiniteTest(widened[i], FiniteTest::Finite)),
                expected[i])
          << "element " << i << " = " << widened[i];
    // IsAllFinite over one clean input and x, each mode: the flag starts
    // at 1 and any failing element clears it (as ScalingKernels.cu does).
    HostTensor clean = ofStorage(dtype, {5}, {1, 2, 3, 4, 5});
    struct Mode {
      const char *attr;
      FiniteTest test;
    };
    for (const Mode &mode : {Mode{nullptr, FiniteTest::Finite},
                             Mode{"isinf_only", FiniteTest::NotInf},
                             Mode{"isnan_only", FiniteTest::NotNaN}}) {
      for (std::vector<HostTensor *> inputs :
           {std::vector<HostTensor *>{&clean},
            std::vector<HostTensor *>{&clean, &x}}) {
        std::vector<NamedAttribute> attrs;
        if (mode.attr)
          attrs.push_back(intAttr(mode.attr, 1));
        auto all = runner.run("com.microsoft", "IsAllFinite", inputs,
                              {TensorType::get(DType::Bool, {})}, attrs);
        ASSERT_TRUE(bool(all)) << llvm::toString(all.takeError());
        uint8_t flag = 1;
        for (HostTensor *input : inputs)
          for (float v : input->floats())
            if (!cuda::passesFiniteTest(v, mode.test))
              flag = 0;
        EXPECT_EQ(flag, (*all)[0].values<uint8_t>()[0])
            << (mode.attr ? mode.attr : "default") << ", " << inputs.size()
            << " inputs";
      }
    }
  }
}

TEST(CudaScalingTest, ScaledElementsAreTheCpuKernels) {
  std::vector<float> values = edgyFloats(200, 9);
  for (float scale : {1.0f / 1024.0f, 65536.0f, 0.3f}) {
    for (DType from : {DType::F32, DType::F16, DType::BF16})
      for (DType to : {DType::F32, DType::F16, DType::BF16}) {
        SCOPED_TRACE(dtypeName(from).str() + " -> " + dtypeName(to).str() +
                     " by " + std::to_string(scale));
        HostTensor x = ofStorage(from, {200}, values);
        HostTensor s = HostTensor::f32({}, {scale});
        KernelRunner runner;
        auto y = runner.run("com.microsoft", "MixedPrecisionScale", {&s, &x},
                            {TensorType::get(to, {200})});
        ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
        std::vector<float> widened = x.floats(), expected = (*y)[0].floats();
        for (size_t i = 0; i < widened.size(); ++i) {
          float product = cuda::scaledElement(widened[i], scale);
          // Stored as the output type, as storeFromFloat rounds it.
          float stored = to == DType::F16 ? halfToFloat(floatToHalf(product))
                         : to == DType::BF16
                             ? bfloat16ToFloat(floatToBFloat16(product))
                             : product;
          if (std::isnan(expected[i]))
            EXPECT_TRUE(std::isnan(stored)) << "element " << i;
          else
            EXPECT_EQ(stored, expected[i])
                << "element " << i << " = " << widened[i];
        }
      }
  }
}

/// A one-node module of (com.microsoft, \p op).
std::unique_ptr<Module> oneNode(llvm::StringRef op,
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
  *node = builder.create(OpName{std::string(kMsDomain), op.str()}, operands,
                         results, attrs, op.str());
  for (unsigned i = 0; i < (*node)->getNumResults(); ++i)
    graph.addOutput((*node)->getResult(i));
  return module;
}

std::string refusal(llvm::StringRef op, std::vector<TensorType> inputs,
                    std::vector<TensorType> results,
                    std::vector<NamedAttribute> attrs = {}) {
  Node *node = nullptr;
  auto module = oneNode(op, inputs, results, attrs, &node);
  llvm::Error err = checkCudaNode(*node);
  return err ? llvm::toString(std::move(err)) : std::string();
}

TEST(CudaScalingTest, ChecksRefuseWhatTheKernelsCannotRun) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  TensorType f32 = TensorType::get(DType::F32, {4});
  TensorType f16 = TensorType::get(DType::F16, {4});
  TensorType one = TensorType::get(DType::F32, {});
  TensorType flag = TensorType::get(DType::Bool, {});
  EXPECT_EQ(refusal("IsFinite", {f16}, {TensorType::get(DType::Bool, {4})}),
            "");
  EXPECT_EQ(refusal("IsAllFinite", {f32, f16}, {flag}), "");
  EXPECT_EQ(refusal("MixedPrecisionScale", {one, f32, f32}, {f16, f16},
                    {intAttr("to", 10)}),
            "");
  EXPECT_EQ(refusal("MixedPrecisionScale", {one, f32, f32},
                    {TensorType::get(DType::F16, {8})},
                    {intAttr("fuse_outputs", 1)}),
            "");
  EXPECT_NE(refusal("IsFinite", {TensorType::get(DType::I64, {4})},
                    {TensorType::get(DType::Bool, {4})})
                .find("float tensor"),
            std::string::npos);
  EXPECT_NE(refusal("IsAllFinite", {f32}, {flag},
                    {intAttr("isinf_only", 1), intAttr("isnan_only", 1)})
                .find("exclusive"),
            std::string::npos);
  EXPECT_NE(refusal("MixedPrecisionScale", {f32, f32}, {f16})
                .find("one float32 value"),
            std::string::npos);
  EXPECT_NE(
      refusal("MixedPrecisionScale", {one, f32}, {f16}, {intAttr("to", 1)})
          .find("disagrees with attribute 'to'"),
      std::string::npos);
  EXPECT_NE(refusal("MixedPrecisionScale", {one, f32, f32},
                    {TensorType::get(DType::F16, {6})},
                    {intAttr("fuse_outputs", 1)})
                .find("wrong size"),
            std::string::npos);
}

TEST(CudaScalingTest, KernelsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  struct Case {
    const char *op;
    std::vector<TensorData> inputs;
    std::vector<TensorType> results;
    std::vector<NamedAttribute> attrs;
  };
  std::vector<float> values = edgyFloats(300, 5);
  auto f32 = [](std::vector<int64_t> shape, const std::vector<float> &v) {
    return TensorData::fromValues<float>(DType::F32, shape, v);
  };
  std::vector<Case> cases = {
      {"IsFinite",
       {f32({300}, values)},
       {TensorType::get(DType::Bool, {300})},
       {}},
      {"IsAllFinite",
       {f32({300}, values), f32({2}, {1, 2})},
       {TensorType::get(DType::Bool, {})},
       {}},
      {"IsAllFinite",
       {f32({2}, {1, 2})},
       {TensorType::get(DType::Bool, {})},
       {}},
      {"IsAllFinite",
       {f32({300}, values)},
       {TensorType::get(DType::Bool, {})},
       {intAttr("isnan_only", 1)}},
      {"MixedPrecisionScale",
       {f32({}, {0.125f}), f32({300}, values), f32({2}, {1, 2})},
       {TensorType::get(DType::F16, {302})},
       {intAttr("fuse_outputs", 1), intAttr("to", 10)}},
      {"MixedPrecisionScale",
       {f32({}, {1024.0f}), f32({300}, values)},
       {TensorType::get(DType::BF16, {300})},
       {}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.op);
    std::vector<TensorType> types;
    for (const TensorData &input : c.inputs)
      types.push_back(input.getType());
    std::vector<TensorData> outputs[2];
    for (int onCuda = 0; onCuda < 2; ++onCuda) {
      Node *node = nullptr;
      auto module = oneNode(c.op, types, c.results, c.attrs, &node);
      ExecutorOptions options;
      options.mode = AllocationMode::Eager;
      options.threads = 1;
      auto exe = onCuda ? prepareCudaExecutable(*module, options)
                        : prepareCpuExecutable(*module, options);
      ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
      const Graph &graph = module->getGraph();
      for (size_t i = 0; i < c.inputs.size(); ++i)
        ASSERT_FALSE(
            bool((*exe)->setInput(graph.getInputs()[i].get(), c.inputs[i])));
      ASSERT_FALSE(bool((*exe)->runStep(0)));
      for (const Value *out : graph.getOutputs()) {
        auto value = (*exe)->readValue(out);
        ASSERT_TRUE(bool(value)) << llvm::toString(value.takeError());
        outputs[onCuda].push_back(std::move(*value));
      }
    }
    for (size_t i = 0; i < outputs[0].size(); ++i)
      EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "output " << i;
  }
}

} // namespace
