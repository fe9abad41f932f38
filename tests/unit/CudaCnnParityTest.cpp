//===- CudaCnnParityTest.cpp - CNN ops on CUDA against the CPU backend ----===//
//
// Per-op parity of the CUDA backend's CNN entries (CudnnDispatch.cpp):
// Conv (pads, strides, dilations, groups, bias, 1-D), ConvGrad (dX, dW,
// dB), MaxPool with Indices, MaxPoolGrad, AveragePool (ceil_mode,
// count_include_pad, asymmetric pads), AveragePoolGrad, GlobalAveragePool,
// GlobalMaxPool, BatchNormalization (inference), BatchNormInternal
// (training) and BatchNormalizationGrad. Each case is a one-node module on
// fresh random inputs, run eagerly on the CPU backend and on the CUDA
// backend; outputs must agree within fp32 tolerances (exactly for
// Indices). Without a GPU the CUDA half skips with the probe's reason;
// the CPU half runs everywhere, so the cases and the harness are checked
// in every build.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"

#include "tests/unit/BackendStep.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace gmopt;

namespace {

TensorType f32(std::vector<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}
TensorType i64(std::vector<int64_t> shape) {
  return TensorType::get(DType::I64, shape);
}
NamedAttribute ints(const char *name, std::vector<int64_t> values) {
  return {name, Attribute::getInts(std::move(values))};
}
NamedAttribute integer(const char *name, int64_t value) {
  return {name, Attribute::getInt(value)};
}

TensorData randomTensor(const TensorType &type, unsigned seed, float low,
                        float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(type.getNumElements());
  for (float &v : values)
    v = dist(rng);
  auto shape = type.getStaticShape();
  return TensorData::fromValues<float>(DType::F32, shape, values);
}

/// One op on given inputs.
struct OpCase {
  std::string what;
  std::string domain, op;
  std::vector<TensorData> inputs;
  std::vector<TensorType> results;
  std::vector<NamedAttribute> attrs;
};

/// A one-node module of \p c, every result a graph output.
std::unique_ptr<Module> buildModule(const OpCase &c) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 17;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    operands.push_back(
        graph.addInput(c.inputs[i].getType(), "in" + std::to_string(i)));
  Builder builder(graph);
  Node *node = builder.create(OpName{c.domain, c.op}, operands, c.results,
                              c.attrs, c.op);
  for (Value *result : node->getResults())
    graph.addOutput(result);
  return module;
}

/// \p c's results computed eagerly on the CUDA backend (\p onCuda) or the
/// CPU backend.
llvm::Expected<std::vector<TensorData>> runCase(const OpCase &c, bool onCuda) {
  std::unique_ptr<Module> module = buildModule(c);
  return test::runBackendStep(*module, c.inputs, onCuda);
}

/// The CPU backend's MaxPool Indices of \p x under \p attrs (MaxPoolGrad's
/// input).
TensorData maxPoolIndices(const TensorData &x, std::vector<int64_t> out,
                          std::vector<NamedAttribute> attrs) {
  OpCase c{"indices", "", "MaxPool", {x}, {f32(out), i64(out)}, attrs};
  auto results = runCase(c, /*onCuda=*/false);
  EXPECT_TRUE(bool(results)) << llvm::toString(results.takeError());
  return results ? (*results)[1] : TensorData();
}

std::vector<OpCase> cnnCases() {
  unsigned seed = 1;
  auto rnd = [&](std::vector<int64_t> shape, float low = -1, float high = 1) {
    return randomTensor(f32(shape), seed++, low, high);
  };
  std::vector<OpCase> cases;
  auto pads1 = ints("pads", {1, 1, 1, 1});
  cases.push_back({"Conv 3x3 pads 1 bias",
                   "",
                   "Conv",
                   {rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3}), rnd({5})},
                   {f32({2, 5, 8, 8})},
                   {pads1}});
  cases.push_back({"Conv stride 2 dilation 2 groups 2",
                   "",
                   "Conv",
                   {rnd({2, 4, 9, 9}), rnd({6, 2, 3, 3})},
                   {f32({2, 6, 4, 4})},
                   {ints("strides", {2, 2}), ints("dilations", {2, 2}), pads1,
                    integer("group", 2)}});
  cases.push_back({"Conv 1-D",
                   "",
                   "Conv",
                   {rnd({2, 3, 12}), rnd({4, 3, 3}), rnd({4})},
                   {f32({2, 4, 6})},
                   {ints("strides", {2}), ints("pads", {1, 1})}});
  cases.push_back({"ConvGrad dX dW dB",
                   kMsDomain.str(),
                   "ConvGrad",
                   {rnd({2, 5, 8, 8}), rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3})},
                   {f32({2, 3, 8, 8}), f32({5, 3, 3, 3}), f32({5})},
                   {pads1}});
  cases.push_back({"ConvGrad groups stride",
                   kMsDomain.str(),
                   "ConvGrad",
                   {rnd({2, 6, 4, 4}), rnd({2, 4, 8, 8}), rnd({6, 2, 3, 3})},
                   {f32({2, 4, 8, 8}), f32({6, 2, 3, 3}), f32({6})},
                   {ints("strides", {2, 2}), pads1, integer("group", 2)}});
  std::vector<NamedAttribute> pool = {ints("kernel_shape", {3, 3}),
                                      ints("strides", {2, 2}), pads1};
  TensorData poolX = rnd({2, 3, 9, 9});
  cases.push_back({"MaxPool 3x3 stride 2",
                   "",
                   "MaxPool",
                   {poolX},
                   {f32({2, 3, 5, 5}), i64({2, 3, 5, 5})},
                   pool});
  cases.push_back(
      {"MaxPoolGrad",
       "",
       "MaxPoolGrad",
       {rnd({2, 3, 5, 5}), maxPoolIndices(poolX, {2, 3, 5, 5}, pool)},
       {f32({2, 3, 9, 9})},
       pool});
  std::vector<NamedAttribute> average = {
      ints("kernel_shape", {3, 2}), ints("strides", {2, 2}),
      ints("pads", {1, 0, 0, 1}), integer("ceil_mode", 1),
      integer("count_include_pad", 1)};
  cases.push_back({"AveragePool ceil_mode count_include_pad",
                   "",
                   "AveragePool",
                   {rnd({2, 3, 8, 7})},
                   {f32({2, 3, 4, 4})},
                   average});
  cases.push_back({"AveragePoolGrad",
                   "",
                   "AveragePoolGrad",
                   {rnd({2, 3, 4, 4})},
                   {f32({2, 3, 8, 7})},
                   average});
  cases.push_back({"GlobalAveragePool",
                   "",
                   "GlobalAveragePool",
                   {rnd({2, 5, 6, 7})},
                   {f32({2, 5, 1, 1})},
                   {}});
  cases.push_back({"GlobalMaxPool",
                   "",
                   "GlobalMaxPool",
                   {rnd({2, 5, 6, 7})},
                   {f32({2, 5, 1, 1})},
                   {}});
  cases.push_back(
      {"BatchNormalization inference",
       "",
       "BatchNormalization",
       {rnd({4, 6, 5, 5}), rnd({6}), rnd({6}), rnd({6}), rnd({6}, 0.5f, 2)},
       {f32({4, 6, 5, 5})},
       {}});
  cases.push_back({"BatchNormInternal training",
                   kMsDomain.str(),
                   "BatchNormInternal",
                   {rnd({4, 6, 5, 5}, -2, 3), rnd({6}), rnd({6}), rnd({6}),
                    rnd({6}, 0.5f, 2)},
                   {f32({4, 6, 5, 5}), f32({6}), f32({6}), f32({6}), f32({6})},
                   {}});
  cases.push_back({"BatchNormalizationGrad",
                   kMsDomain.str(),
                   "BatchNormalizationGrad",
                   {rnd({4, 6, 5, 5}), rnd({4, 6, 5, 5}), rnd({6}), rnd({6}),
                    rnd({6}, 0.5f, 2)},
                   {f32({4, 6, 5, 5}), f32({6}), f32({6})},
                   {}});
  return cases;
}

} // namespace

TEST(CudaCnnParityTest, CasesRunOnTheCpuBackend) {
  // The harness and the cases, in every build.
  for (const OpCase &c : cnnCases()) {
    SCOPED_TRACE(c.what);
    auto results = runCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
    ASSERT_EQ(results->size(), c.results.size());
    for (size_t r = 0; r < results->size(); ++r)
      EXPECT_EQ((*results)[r].getNumElements(), c.results[r].getNumElements());
  }
}

TEST(CudaCnnParityTest, CnnOpsMatchTheCpuBackend) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device: "
                 << llvm::toString(device.takeError());
  if (!isCudnnBuilt())
    GTEST_SKIP() << "the CUDA backend is built without cuDNN";
  for (const OpCase &c : cnnCases()) {
    SCOPED_TRACE(c.what);
    auto cpu = runCase(c, /*onCuda=*/false);
    auto cuda = runCase(c, /*onCuda=*/true);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
    ASSERT_EQ(cpu->size(), cuda->size());
    for (size_t r = 0; r < cpu->size(); ++r) {
      const TensorData &expected = (*cpu)[r], &actual = (*cuda)[r];
      ASSERT_EQ(expected.getNumElements(), actual.getNumElements());
      if (expected.getType().getDType() == DType::I64) {
        EXPECT_EQ(actual.getIntValues(), expected.getIntValues())
            << "result " << r << " (Indices)";
        continue;
      }
      for (uint64_t k = 0; k < expected.getNumElements(); ++k) {
        double e = expected.getFloatElement(k), a = actual.getFloatElement(k);
        ASSERT_NEAR(a, e, 1e-5 + 1e-4 * std::fabs(e))
            << "result " << r << " element " << k;
      }
    }
  }
}
