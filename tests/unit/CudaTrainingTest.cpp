//===- CudaTrainingTest.cpp - The CUDA training-plumbing entries ----------===//
//
// ZeroGradient, PassThrough and InPlaceAccumulator on the CUDA kernel table
// (backend/cuda/CudaTrainingDispatch.cpp). Here, without a GPU: the
// prepare-time checks accept what the CPU kernels accept and refuse the
// rest with errors naming the node. On a GPU: each op's outputs equal the
// CPU backend's bit for bit (the accumulator adds in fp32 and rounds once,
// as the CPU does), for f32, f16 and bf16 sums, with the update signal
// true, false and absent.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Half.h"
#include "ir/Module.h"

#include "tests/unit/BackendStep.h"
#include "tests/unit/OpParityHarness.h"

#include "gtest/gtest.h"

#include <random>

using namespace gmopt;

namespace {

using Dims = std::vector<int64_t>;

struct Case {
  std::string what;
  std::string op;
  std::vector<TensorData> inputs;
  std::vector<TensorType> results;
};

std::unique_ptr<Module> buildModule(const Case &c, Node **nodeOut = nullptr) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 18;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    operands.push_back(
        graph.addInput(c.inputs[i].getType(), "in" + std::to_string(i)));
  Builder builder(graph);
  Node *node = builder.create(OpName{std::string(kMsDomain), c.op}, operands,
                              c.results, {}, c.op);
  for (unsigned i = 0; i < node->getNumResults(); ++i)
    graph.addOutput(node->getResult(i));
  if (nodeOut)
    *nodeOut = node;
  return module;
}

llvm::Expected<std::vector<TensorData>> runCase(const Case &c, bool onCuda) {
  std::unique_ptr<Module> module = buildModule(c);
  return test::runBackendStep(*module, c.inputs, onCuda);
}

/// Random values of \p dtype in [-3, 3), each tensor from the next seed
/// \p rng draws.
TensorData randomTensor(DType dtype, const Dims &shape, std::mt19937 &rng) {
  return test::randomTensor(dtype, shape, rng(), -3.0f, 3.0f);
}

TensorData flag(bool value) {
  return TensorData::fromValues<uint8_t>(DType::Bool, {1}, {uint8_t(value)});
}

std::vector<Case> cases() {
  std::mt19937 rng(17);
  std::vector<Case> out;
  Dims shape = {3, 257};
  for (DType sum : {DType::F32, DType::F16, DType::BF16}) {
    for (int signal : {-1, 0, 1}) {
      Case c;
      c.what = "InPlaceAccumulator " + dtypeName(sum).str() + " signal " +
               std::to_string(signal);
      c.op = "InPlaceAccumulator";
      c.inputs = {randomTensor(sum, shape, rng), randomTensor(sum, shape, rng)};
      if (signal >= 0)
        c.inputs.push_back(flag(signal == 1));
      c.results = {TensorType::get(sum, shape)};
      out.push_back(c);
    }
    Case zero;
    zero.what = "ZeroGradient " + dtypeName(sum).str();
    zero.op = "ZeroGradient";
    zero.inputs = {randomTensor(sum, shape, rng), flag(true)};
    zero.results = {TensorType::get(sum, shape)};
    out.push_back(zero);
  }
  Case pass;
  pass.what = "PassThrough f32 + i64";
  pass.op = "PassThrough";
  pass.inputs = {randomTensor(DType::F32, {5, 7}, rng),
                 TensorData::fromValues<int64_t>(DType::I64, {3}, {4, -2, 9})};
  pass.results = {TensorType::get(DType::F32, {5, 7}),
                  TensorType::get(DType::I64, {3})};
  out.push_back(pass);
  return out;
}

/// The first prepare-time refusal of \p c's node, or success.
llvm::Error check(const Case &c) {
  Node *node = nullptr;
  std::unique_ptr<Module> module = buildModule(c, &node);
  return checkCudaNode(*node);
}

TEST(CudaTrainingTest, ChecksAcceptWhatTheCpuRunsAndRefuseTheRest) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.what);
    EXPECT_FALSE(bool(check(c))) << "refused";
    auto cpu = runCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  }
  std::mt19937 rng(3);
  auto refusal = [](const Case &c) {
    llvm::Error err = check(c);
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  Case intSum{"int sum",
              "InPlaceAccumulator",
              {TensorData::fromValues<int64_t>(DType::I64, {2}, {1, 2}),
               TensorData::fromValues<int64_t>(DType::I64, {2}, {3, 4})},
              {TensorType::get(DType::I64, {2})}};
  EXPECT_NE(refusal(intSum).find("must be float tensors"), std::string::npos)
      << refusal(intSum);
  Case badSignal{"float signal",
                 "InPlaceAccumulator",
                 {randomTensor(DType::F32, {4}, rng),
                  randomTensor(DType::F32, {4}, rng),
                  randomTensor(DType::F32, {1}, rng)},
                 {TensorType::get(DType::F32, {4})}};
  EXPECT_NE(refusal(badSignal).find("update_signal must be one bool"),
            std::string::npos)
      << refusal(badSignal);
  Case badPass{"PassThrough type change",
               "PassThrough",
               {randomTensor(DType::F32, {4}, rng)},
               {TensorType::get(DType::F16, {4})}};
  EXPECT_NE(refusal(badPass).find("does not match its input"),
            std::string::npos)
      << refusal(badPass);
  Case badZero{"ZeroGradient shape",
               "ZeroGradient",
               {randomTensor(DType::F32, {4}, rng), flag(true)},
               {TensorType::get(DType::F32, {2, 2})}};
  EXPECT_NE(refusal(badZero).find("gradient's shape"), std::string::npos)
      << refusal(badZero);
}

TEST(CudaTrainingTest, OutputsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.what);
    auto cpu = runCase(c, /*onCuda=*/false);
    auto gpu = runCase(c, /*onCuda=*/true);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    ASSERT_TRUE(bool(gpu)) << llvm::toString(gpu.takeError());
    ASSERT_EQ(cpu->size(), gpu->size());
    for (size_t i = 0; i < cpu->size(); ++i)
      EXPECT_TRUE((*cpu)[i] == (*gpu)[i]) << "output " << i << " differs";
  }
}

} // namespace
