//===- CudaReduceDispatchTest.cpp - CUDA reductions: checks, device -----===//
//
// The prepare-time checks of the CUDA reductions (Reduce*, ArgMax /
// ArgMin, InstanceNormalization, InvertibleLayerNormalizationGrad, DivGrad;
// backend/cuda/CudaReduceDispatch.cpp) refuse what the kernels cannot run,
// naming the node; every device case passes them and runs on the CPU
// backend; with a GPU the CUDA kernels equal the CPU backend's (skipped
// here). The host arithmetic is CudaReduceTest.cpp's.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/ReduceMath.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "tests/unit/CudaReduceCases.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::ArgBest;
using cuda::ReduceIndexing;
using cuda::ReduceKind;

namespace {

using namespace gmopt::testing::cudareduce;

//===----------------------------------------------------------------------===//
// Prepare-time checks
//===----------------------------------------------------------------------===//

/// A one-node module of (\p domain, \p op); operands listed in
/// \p constants are initializers with that data, the others graph inputs.
std::unique_ptr<Module> oneNode(llvm::StringRef domain, llvm::StringRef op,
                                std::vector<TensorType> inputs,
                                std::vector<TensorType> results,
                                std::vector<NamedAttribute> attrs,
                                const std::map<unsigned, TensorData> &constants,
                                Node **node) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 18;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (unsigned i = 0; i < inputs.size(); ++i) {
    auto constant = constants.find(i);
    operands.push_back(
        constant != constants.end()
            ? graph.addInitializer(constant->second, "c" + std::to_string(i))
            : graph.addInput(inputs[i], "in" + std::to_string(i)));
  }
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
                    std::vector<NamedAttribute> attrs = {},
                    const std::map<unsigned, TensorData> &constants = {}) {
  Node *node = nullptr;
  auto module = oneNode(domain, op, inputs, results, attrs, constants, &node);
  llvm::Error err = checkCudaNode(*node);
  return err ? llvm::toString(std::move(err)) : std::string();
}

TensorData int64s(const Shape &shape, const std::vector<int64_t> &values) {
  return TensorData::fromValues<int64_t>(DType::I64, shape, values);
}
TensorData floats(const Shape &shape, const std::vector<float> &values) {
  return TensorData::fromValues<float>(DType::F32, shape, values);
}

TEST(CudaReduceDispatchTest, ChecksRefuseWhatTheKernelsCannotRun) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  auto t = [](DType dtype, Shape shape) {
    return TensorType::get(dtype, shape);
  };
  TensorType x = t(DType::F32, {4, 5, 6});
  TensorType axes2 = t(DType::I64, {2});
  std::map<unsigned, TensorData> axes02 = {{1, int64s({2}, {0, 2})}};
  auto contains = [](const std::string &message, const char *what) {
    return message.find(what) != std::string::npos;
  };
  // Non-adjacent axes reduce; a non-constant axes operand cannot.
  EXPECT_EQ(refusal("", "ReduceL2", {x, axes2}, {t(DType::F32, {5})},
                    {intAttr("keepdims", 0)}, axes02),
            "");
  EXPECT_EQ(refusal("", "ReduceLogSumExp", {t(DType::BF16, {4, 5, 6}), axes2},
                    {t(DType::BF16, {1, 5, 1})}, {}, axes02),
            "");
  EXPECT_TRUE(contains(refusal("", "ReduceProd", {x, axes2},
                               {t(DType::F32, {5})}, {intAttr("keepdims", 0)}),
                       "must be a constant"));
  EXPECT_TRUE(
      contains(refusal("", "ReduceSum", {t(DType::I64, {4, 5, 6}), axes2},
                       {t(DType::I64, {5})}, {intAttr("keepdims", 0)}, axes02),
               "not supported"));
  EXPECT_TRUE(
      contains(refusal("", "ReduceMean", {x, axes2}, {t(DType::F32, {4})},
                       {intAttr("keepdims", 0)}, axes02),
               "reduced shape"));
  EXPECT_TRUE(contains(
      refusal("", "ReduceL1", {x, t(DType::I64, {1})}, {t(DType::F32, {4, 5})},
              {intAttr("keepdims", 0)}, {{1, int64s({1}, {3})}}),
      "out of range"));
  // ArgMax / ArgMin.
  EXPECT_EQ(refusal("", "ArgMax", {t(DType::F16, {4, 5})},
                    {t(DType::I64, {4, 1})}, {intAttr("axis", 1)}),
            "");
  EXPECT_EQ(refusal("", "ArgMin", {t(DType::F32, {})}, {t(DType::I64, {})},
                    {intAttr("axis", -1)}),
            "");
  EXPECT_TRUE(contains(refusal("", "ArgMax", {t(DType::F32, {4, 5})},
                               {t(DType::I32, {4, 1})}, {intAttr("axis", 1)}),
                       "must be int64"));
  EXPECT_TRUE(contains(refusal("", "ArgMin", {t(DType::I32, {4, 5})},
                               {t(DType::I64, {4, 1})}, {intAttr("axis", 1)}),
                       "not supported"));
  EXPECT_TRUE(contains(refusal("", "ArgMax", {t(DType::F32, {4, 0})},
                               {t(DType::I64, {4, 1})}, {intAttr("axis", 1)}),
                       "empty axis"));
  // InstanceNormalization.
  TensorType image = t(DType::F16, {2, 3, 8, 8});
  TensorType perChannel = t(DType::F16, {3});
  EXPECT_EQ(refusal("", "InstanceNormalization",
                    {image, perChannel, perChannel}, {image}),
            "");
  EXPECT_TRUE(contains(
      refusal("", "InstanceNormalization",
              {t(DType::F32, {2, 3}), t(DType::F32, {3}), t(DType::F32, {3})},
              {t(DType::F32, {2, 3})}),
      "rank >= 3"));
  EXPECT_TRUE(
      contains(refusal("", "InstanceNormalization",
                       {image, t(DType::F16, {4}), perChannel}, {image}),
               "one element per channel"));
  EXPECT_TRUE(
      contains(refusal("", "InstanceNormalization",
                       {image, t(DType::F32, {3}), perChannel}, {image}),
               "mix element types"));
  // InvertibleLayerNormalizationGrad(dY, Y, scale, bias, inv_std_var).
  TensorType rows = t(DType::F32, {6, 10});
  TensorType cols = t(DType::F32, {10});
  TensorType stats = t(DType::F32, {6, 1});
  const char *invertible = "InvertibleLayerNormalizationGrad";
  EXPECT_EQ(refusal(kMsDomain, invertible, {rows, rows, cols, cols, stats},
                    {rows, cols, cols}),
            "");
  EXPECT_TRUE(contains(refusal(kMsDomain, invertible,
                               {rows, rows, cols, cols, t(DType::F16, {6, 1})},
                               {rows, cols, cols}),
                       "inv_std_var must be float32"));
  EXPECT_TRUE(contains(refusal(kMsDomain, invertible,
                               {rows, rows, t(DType::F32, {6}), cols, stats},
                               {rows, cols, cols}),
                       "per normalized column"));
  EXPECT_TRUE(contains(refusal(kMsDomain, invertible,
                               {rows, rows, cols, cols, t(DType::F32, {5, 1})},
                               {rows, cols, cols}),
                       "one element per row"));
  std::vector<float> zeroScale(10, 1.0f);
  zeroScale[3] = 0.0f;
  EXPECT_TRUE(
      contains(refusal(kMsDomain, invertible, {rows, rows, cols, cols, stats},
                       {rows, cols, cols}, {}, {{2, floats({10}, zeroScale)}}),
               "not invertible"));
  // DivGrad(dY, A, B) -> (dA, dB).
  TensorType full = t(DType::BF16, {2, 3, 4});
  TensorType column = t(DType::BF16, {3, 1});
  EXPECT_EQ(refusal(kMsDomain, "DivGrad", {full, full, column}, {full, column}),
            "");
  EXPECT_TRUE(contains(refusal(kMsDomain, "DivGrad",
                               {t(DType::BF16, {2, 3, 5}), full, column},
                               {full, column}),
                       "broadcast of A's and B's"));
  EXPECT_TRUE(contains(
      refusal(kMsDomain, "DivGrad", {full, full, column}, {column, column}),
      "dA must have A's shape"));
}

//===----------------------------------------------------------------------===//
// On the device
//===----------------------------------------------------------------------===//

/// One node run on both backends.
struct DeviceCase {
  std::string what;
  std::string domain, op;
  std::vector<TensorData> inputs;
  std::map<unsigned, TensorData> constants;
  std::vector<TensorType> results;
  std::vector<NamedAttribute> attrs;
  /// Relative tolerance (0: bit for bit).
  double tolerance = 0;
};

TensorData ofStorageData(DType dtype, const Shape &shape,
                         const std::vector<float> &values) {
  HostTensor host = ofStorage(dtype, shape, values);
  return TensorData(host.type(), host.bytes);
}

llvm::Expected<std::vector<TensorData>> runDeviceCase(const DeviceCase &c,
                                                      bool onCuda) {
  std::vector<TensorType> types;
  for (unsigned i = 0; i < c.inputs.size(); ++i)
    types.push_back(c.constants.count(i) ? c.constants.at(i).getType()
                                         : c.inputs[i].getType());
  Node *node = nullptr;
  auto module =
      oneNode(c.domain, c.op, types, c.results, c.attrs, c.constants, &node);
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto exe = onCuda ? prepareCudaExecutable(*module, options)
                    : prepareCpuExecutable(*module, options);
  if (!exe)
    return exe.takeError();
  const Graph &graph = module->getGraph();
  unsigned input = 0;
  for (unsigned i = 0; i < c.inputs.size(); ++i)
    if (!c.constants.count(i))
      if (llvm::Error err =
              (*exe)->setInput(graph.getInputs()[input++].get(), c.inputs[i]))
        return err;
  if (llvm::Error err = (*exe)->runStep(0))
    return err;
  std::vector<TensorData> outputs;
  for (const Value *out : graph.getOutputs()) {
    auto value = (*exe)->readValue(out);
    if (!value)
      return value.takeError();
    outputs.push_back(std::move(*value));
  }
  return outputs;
}

std::vector<DeviceCase> deviceCases() {
  std::vector<DeviceCase> cases;
  unsigned seed = 100;
  for (DType dtype : kFloatTypes) {
    std::string type = dtypeName(dtype).str();
    for (const ReduceOp &op : kReduceOps)
      for (const ReduceShape &s : reduceShapes()) {
        int64_t n = 1;
        for (int64_t d : s.shape)
          n *= d;
        DeviceCase c{
            std::string(op.name) + " " + describe(s) + " " + type,
            "",
            op.name,
            {ofStorageData(dtype, s.shape, uniform(n, ++seed, op.low, op.high)),
             int64s({int64_t(s.axes.size())}, s.axes)},
            {{1, int64s({int64_t(s.axes.size())}, s.axes)}},
            {TensorType::get(dtype, reducedShape(s))},
            {intAttr("keepdims", s.keepDims),
             intAttr("noop_with_empty_axes", s.noop)},
            isExactKind(op.kind) ? 0.0 : storageEpsilon(dtype) + 1e-5};
        cases.push_back(std::move(c));
      }
    std::vector<float> ties = uniform(3 * 300, 5, -4, 4);
    for (float &v : ties)
      v = std::round(v);
    ties[7] = std::numeric_limits<float>::quiet_NaN();
    for (const char *op : {"ArgMax", "ArgMin"})
      for (int64_t axis : {0, 1})
        for (int selectLast = 0; selectLast < 2; ++selectLast)
          cases.push_back(
              {std::string(op) + " " + type,
               "",
               op,
               {ofStorageData(dtype, {3, 300}, ties)},
               {},
               {TensorType::get(DType::I64, axis ? Shape{3} : Shape{300})},
               {intAttr("axis", axis), intAttr("keepdims", 0),
                intAttr("select_last_index", selectLast)}});
    cases.push_back(
        {"InstanceNormalization " + type,
         "",
         "InstanceNormalization",
         {ofStorageData(dtype, {2, 3, 40, 50}, uniform(12000, ++seed, -3, 5)),
          ofStorageData(dtype, {3}, {0.5f, -1.5f, 2.0f}),
          ofStorageData(dtype, {3}, {0.1f, 0.0f, -0.7f})},
         {},
         {TensorType::get(dtype, {2, 3, 40, 50})},
         {floatAttr("epsilon", 1e-5f)},
         storageEpsilon(dtype) + 1e-5});
    std::vector<float> scale = uniform(37, ++seed, 0.5f, 1.5f);
    cases.push_back(
        {"InvertibleLayerNormalizationGrad " + type,
         std::string(kMsDomain),
         "InvertibleLayerNormalizationGrad",
         {ofStorageData(dtype, {150, 37}, uniform(150 * 37, ++seed, -1, 1)),
          ofStorageData(dtype, {150, 37}, uniform(150 * 37, ++seed, -2, 2)),
          ofStorageData(dtype, {37}, scale),
          ofStorageData(dtype, {37}, uniform(37, ++seed, -0.5f, 0.5f)),
          floats({150, 1}, uniform(150, ++seed, 0.5f, 2.0f))},
         {},
         {TensorType::get(dtype, {150, 37}), TensorType::get(dtype, {37}),
          TensorType::get(dtype, {37})},
         {intAttr("axis", -1)},
         storageEpsilon(dtype) + 1e-5});
    for (const DivGradShapes &s : divGradShapes()) {
      auto count = [](const Shape &shape) {
        int64_t n = 1;
        for (int64_t d : shape)
          n *= d;
        return n;
      };
      cases.push_back(
          {"DivGrad " + type,
           std::string(kMsDomain),
           "DivGrad",
           {ofStorageData(dtype, s.dy, uniform(count(s.dy), ++seed, -1, 1)),
            ofStorageData(dtype, s.a, uniform(count(s.a), ++seed, -2, 2)),
            ofStorageData(dtype, s.b, uniform(count(s.b), ++seed, 0.5f, 2))},
           {},
           {TensorType::get(dtype, s.a), TensorType::get(dtype, s.b)},
           {},
           storageEpsilon(dtype) + 1e-5});
    }
  }
  return cases;
}

/// The device cases are ones the CUDA checks accept and the CPU backend
/// runs, so a device run compares kernels rather than failing to prepare.
TEST(CudaReduceDispatchTest, DeviceCasesPassTheChecksAndRunOnTheCpu) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  for (const DeviceCase &c : deviceCases()) {
    SCOPED_TRACE(c.what);
    std::vector<TensorType> types;
    for (unsigned i = 0; i < c.inputs.size(); ++i)
      types.push_back(c.inputs[i].getType());
    Node *node = nullptr;
    auto module =
        oneNode(c.domain, c.op, types, c.results, c.attrs, c.constants, &node);
    llvm::Error err = checkCudaNode(*node);
    EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
    auto cpu = runDeviceCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    EXPECT_EQ(cpu->size(), c.results.size());
  }
}

TEST(CudaReduceDispatchTest, KernelsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  for (const DeviceCase &c : deviceCases()) {
    SCOPED_TRACE(c.what);
    auto cpu = runDeviceCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    auto gpu = runDeviceCase(c, /*onCuda=*/true);
    ASSERT_TRUE(bool(gpu)) << llvm::toString(gpu.takeError());
    ASSERT_EQ(cpu->size(), gpu->size());
    for (size_t i = 0; i < cpu->size(); ++i) {
      const TensorData &e = (*cpu)[i], &a = (*gpu)[i];
      ASSERT_EQ(e.getNumElements(), a.getNumElements()) << "output " << i;
      // Sums may differ by the summation order; their scale is the count of
      // reduced elements, which the magnitude of the inputs bounds.
      double scale =
          1.0 + double(c.inputs[0].getNumElements()) /
                    double(std::max<uint64_t>(e.getNumElements(), 1));
      for (uint64_t k = 0; k < e.getNumElements(); ++k)
        expectClose(
            static_cast<float>(e.getFloatElement(k)),
            static_cast<float>(a.getFloatElement(k)),
            c.tolerance * (std::fabs(e.getFloatElement(k)) + 4.0 * scale),
            "output " + std::to_string(i) + " element " + std::to_string(k));
    }
  }
}

} // namespace
