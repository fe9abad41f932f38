//===- CudaGraphCaptureTest.cpp - Which steps --cuda-graph captures -------===//
//
// Without a GPU: checkCudaGraphCapturable's decision (CudaGraphCapture.h)
// for another backend, eager mode, profiling, the random ops (whose CUDA
// kernels read the step on the device while captured) and a collective
// over several ranks; and that both ways in - the runtime's
// prepareExecutable and prepareCudaExecutable - refuse before they look
// for a device or allocate, so the reasons read the same on any machine.
// With a GPU (skipped elsewhere, with the reason): a dropout step warmed
// up, captured and replayed gives, at every step, the CPU's bits for that
// step - the replay reads the step from the device counter, not the
// captured one.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaGraphCapture.h"

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/NcclCollectives.h"
#include "ir/Module.h"
#include "ir/serialization/TextIR.h"
#include "tests/unit/BackendStep.h"
#include "tools/driver/Runtime.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

/// Every random op gmopt registers, plus an optimizer that reads its
/// learning rate and step on the device.
constexpr llvm::StringLiteral kRandom = R"(
module attributes {opsets = {"" = 17, "com.microsoft" = 1}} {
  graph @g(%x: f32[4,8], %bias: f32[8], %ratio: f32[], %training: bool[]) {
    %d, %m = Dropout(%x, %ratio, %training) : (f32[4,8], bool[4,8]) stream 1
    %b, %bits = com.microsoft.BitmaskDropout(%d, %ratio, %training) : (f32[4,8], u32[1]) stream 2
    %y, %ym = com.microsoft.BiasDropout(%b, %bias, %x, %ratio, %training) : (f32[4,8], bool[4,8]) stream 3
    return %y, %m, %bits, %ym
  }
}
)";

/// An all-reduce placed for two data-parallel ranks.
constexpr llvm::StringLiteral kTwoRanks = R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @g(%a: f32[8]) {
    %r = gmopt.AllReduce(%a) {reduction = "sum", ranks = 2} : f32[8] name "bucket"
    return %r
  }
}
)";

std::unique_ptr<Module> parse(llvm::StringRef text) {
  auto module = parseModule(text, "capture.gmir");
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

ExecutorOptions graphOptions() {
  ExecutorOptions options;
  options.cudaGraph = true;
  return options;
}

TEST(CudaGraphCaptureTest, NeedsTheCudaBackend) {
  auto module = parse(kRandom);
  ASSERT_TRUE(module);
  EXPECT_EQ(errorText(checkCudaGraphCapturable(*module, graphOptions(), "cpu")),
            "--cuda-graph needs the CUDA backend; this run uses the cpu "
            "backend");
}

TEST(CudaGraphCaptureTest, RefusesEagerModeAndProfiling) {
  auto module = parse(kRandom);
  ASSERT_TRUE(module);
  ExecutorOptions eager = graphOptions();
  eager.mode = AllocationMode::Eager;
  std::string text =
      errorText(checkCudaGraphCapturable(*module, eager, "cuda"));
  EXPECT_NE(text.find("--cuda-graph: "), std::string::npos) << text;
  EXPECT_NE(text.find("--mode=eager"), std::string::npos) << text;
  ExecutorOptions profiled = graphOptions();
  profiled.profile = true;
  text = errorText(checkCudaGraphCapturable(*module, profiled, "cuda"));
  EXPECT_NE(text.find("--profile and --trace"), std::string::npos) << text;
  // The backend is the first reason: a CPU run never hears about its mode.
  text = errorText(checkCudaGraphCapturable(*module, eager, "cpu"));
  EXPECT_NE(text.find("needs the CUDA backend"), std::string::npos) << text;
  // The options alone (what the driver asks before loading a model) give
  // the same reasons, and pass a planned unprofiled CUDA run.
  EXPECT_EQ(errorText(checkCudaGraphOptions(eager, "cpu")), text);
  EXPECT_NE(
      errorText(checkCudaGraphOptions(eager, "cuda")).find("--mode=eager"),
      std::string::npos);
  EXPECT_EQ(errorText(checkCudaGraphOptions(graphOptions(), "cuda")), "");
}

TEST(CudaGraphCaptureTest, RandomOpsReadTheStepOnTheDevice) {
  auto module = parse(kRandom);
  ASSERT_TRUE(module);
  // Dropout, BitmaskDropout and BiasDropout key their streams with the
  // device counter while captured: a planned CUDA step of them replays.
  EXPECT_EQ(
      errorText(checkCudaGraphCapturable(*module, graphOptions(), "cuda")), "");
  for (const Node &node : module->getGraph().getNodes())
    EXPECT_EQ(errorText(checkCudaGraphNode(node)), "") << node.describe();
}

TEST(CudaGraphCaptureTest, MultiRankCollectiveNeedsNccl) {
  auto module = parse(kTwoRanks);
  ASSERT_TRUE(module);
  std::string text =
      errorText(checkCudaGraphCapturable(*module, graphOptions(), "cuda"));
  if (isNcclBuilt()) {
    // NCCL's calls are enqueued on the communication stream: captured.
    EXPECT_EQ(text, "");
  } else {
    EXPECT_NE(text.find("node "), std::string::npos) << text;
    EXPECT_NE(text.find("bucket"), std::string::npos) << text;
    EXPECT_NE(text.find("with 2 ranks from the host (MPI/TCP"),
              std::string::npos)
        << text;
  }
}

TEST(CudaGraphCaptureTest, RefusedBeforeLookingForADevice) {
  auto module = parse(kRandom);
  ASSERT_TRUE(module);
  // The runtime's way in: the CPU backend is refused by name.
  auto cpu = prepareExecutable(*module, BackendKind::Cpu, graphOptions());
  ASSERT_FALSE(cpu);
  EXPECT_EQ(errorText(cpu.takeError()),
            "--cuda-graph needs the CUDA backend; this run uses the cpu "
            "backend");
  // The CUDA backend's own entry refuses eager mode before it probes, so
  // a machine without a GPU (or a build without the toolkit) says the same.
  ExecutorOptions eager = graphOptions();
  eager.mode = AllocationMode::Eager;
  auto cuda = prepareCudaExecutable(*module, eager);
  ASSERT_FALSE(cuda);
  std::string text = errorText(cuda.takeError());
  EXPECT_NE(text.find("--cuda-graph: "), std::string::npos) << text;
  EXPECT_NE(text.find("--mode=eager"), std::string::npos) << text;
}

/// Dropout with a constant ratio in training mode: each step draws other
/// bits from the stream (seed, 7, step).
constexpr llvm::StringLiteral kDropoutStep = R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[1000]) {
    %ratio = constant f32[] dense<0.5>
    %training = constant bool[] dense<true>
    %y, %m = Dropout(%x, %ratio, %training) : (f32[1000], bool[1000]) stream 7
    return %y, %m
  }
}
)";

TEST(CudaGraphCaptureTest, ReplayedStepsDrawTheirOwnStepsBits) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  auto module = parse(kDropoutStep);
  ASSERT_TRUE(module);
  std::vector<float> ones(1000, 1.0f);
  TensorData x = TensorData::fromValues<float>(DType::F32, {1000}, ones);
  ExecutorOptions options;
  options.seed = 1234;
  ExecutorOptions captured = options;
  captured.cudaGraph = true;
  auto cpu = prepareCpuExecutable(*module, options);
  ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  auto cuda = prepareCudaExecutable(*module, captured);
  ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
  const Value *input = module->getGraph().getInputs()[0].get();
  const Value *y = module->getGraph().getOutputs()[0];
  ASSERT_FALSE(bool((*cpu)->setInput(input, x)));
  ASSERT_FALSE(bool((*cuda)->setInput(input, x)));
  std::vector<std::vector<uint8_t>> seen;
  // Step 0 warms up, 1 is captured, 2 to 4 replay (steps out of order too).
  for (uint64_t step : {0u, 1u, 2u, 3u, 9u}) {
    ASSERT_FALSE(bool((*cpu)->runStep(step)));
    llvm::Error ran = (*cuda)->runStep(step);
    ASSERT_FALSE(bool(ran)) << llvm::toString(std::move(ran));
    auto expected = (*cpu)->readValue(y);
    auto got = (*cuda)->readValue(y);
    ASSERT_TRUE(expected && got);
    std::vector<uint8_t> bytes(got->getBytes().begin(), got->getBytes().end());
    EXPECT_EQ(bytes, std::vector<uint8_t>(expected->getBytes().begin(),
                                          expected->getBytes().end()))
        << "step " << step;
    for (const auto &earlier : seen)
      EXPECT_NE(bytes, earlier) << "step " << step << " repeats a mask";
    seen.push_back(std::move(bytes));
  }
}

} // namespace
