//===- CudaStreamsTest.cpp - Copies and collectives on the side streams ---===//
//
// The CUDA device's copy stream, through the plan interpreter: a value
// moved to the host arena (page-locked on CUDA) and back between two
// kernels, with gmopt's copy-start / copy-wait ops, planned for the CUDA
// workspace model. Without a GPU: the module plans with its host arena and
// the CUDA side accepts it for a CUDA graph. With a GPU (skipped elsewhere,
// with the reason): the bytes come back through the copy stream's events
// as the CPU computes them, uncaptured and as a CUDA graph's replays (the
// copy stream forked from and joined into the captured compute stream).
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaGraphCapture.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/serialization/TextIR.h"
#include "passes/planning/PlanBuffers.h"
#include "tests/unit/BackendStep.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace gmopt;

namespace {

/// %h goes to the host while %y is computed, and comes back for the sum.
constexpr llvm::StringLiteral kOffload = R"(
module attributes {opsets = {"" = 17, "gmopt" = 1}} {
  graph @offload(%x: f32[64,64], %w: f32[64,64]) {
    %h = MatMul(%x, %w) : f32[64,64]
    %h_host = gmopt.CopyToHostStart(%h) : f32[64,64]
    %h_saved = gmopt.CopyWait(%h_host, %h) : f32[64,64]
    %y = Relu(%x) : f32[64,64]
    %h_back = gmopt.CopyToDeviceStart(%h_saved) : f32[64,64]
    %h_again = gmopt.CopyWait(%h_back, %h_saved) : f32[64,64]
    %out = Add(%h_again, %y) : f32[64,64]
    return %out
  }
}
)";

/// kOffload planned with plan-buffers for \p target's kernels.
std::unique_ptr<Module> plannedModule(WorkspaceTarget target) {
  auto parsed = parseModule(kOffload, "offload.gmir");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (!parsed)
    return nullptr;
  Module &module = **parsed;
  auto plan = computeBufferPlan(module, PlanBuffersPass::Options(), nullptr,
                                getWorkspaceModel(target));
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return nullptr;
  plan->workspaceModel = workspaceModelName(target).str();
  module.plan = std::move(*plan);
  llvm::Error err = module.plan.validate(module);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  return std::move(*parsed);
}

std::vector<TensorData> inputs() {
  std::vector<float> x(64 * 64), w(64 * 64);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.1f * float(i));
    w[i] = std::cos(0.07f * float(i)) / 8;
  }
  return {TensorData::fromValues<float>(DType::F32, {64, 64}, x),
          TensorData::fromValues<float>(DType::F32, {64, 64}, w)};
}

TEST(CudaStreamsTest, OffloadPlansAHostArenaAndCanBeCaptured) {
  std::unique_ptr<Module> module = plannedModule(WorkspaceTarget::Cuda);
  ASSERT_TRUE(module);
  EXPECT_EQ(module->plan.hostArenaBytes, uint64_t(64 * 64 * 4));
  ExecutorOptions options;
  options.cudaGraph = true;
  llvm::Error err = checkCudaGraphCapturable(*module, options, "cuda");
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  // The reference the GPU half compares with: the CPU's planned step, whose
  // copies bring back what the MatMul wrote (out = x w + relu(x)).
  std::unique_ptr<Module> onCpu = plannedModule(WorkspaceTarget::Cpu);
  ASSERT_TRUE(onCpu);
  ExecutorOptions planned;
  planned.threads = 1;
  std::vector<TensorData> data = inputs();
  auto out = test::runBackendStep(*onCpu, data, false, planned);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  ASSERT_EQ(out->size(), 1u);
  for (int64_t row : {0, 17, 63})
    for (int64_t col : {0, 5, 63}) {
      double sum = 0;
      for (int64_t k = 0; k < 64; ++k)
        sum += data[0].getFloatElement(row * 64 + k) *
               data[1].getFloatElement(k * 64 + col);
      double x = data[0].getFloatElement(row * 64 + col);
      EXPECT_NEAR(out->front().getFloatElement(row * 64 + col),
                  sum + std::max(x, 0.0), 1e-4)
          << row << "," << col;
    }
}

TEST(CudaStreamsTest, CopiesThroughTheCopyStreamMatchTheCpu) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<Module> onCpu = plannedModule(WorkspaceTarget::Cpu);
  std::unique_ptr<Module> onCuda = plannedModule(WorkspaceTarget::Cuda);
  ASSERT_TRUE(onCpu && onCuda);
  ExecutorOptions planned;
  planned.threads = 1;
  auto expected = test::runBackendStep(*onCpu, inputs(), false, planned);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());
  ASSERT_EQ(expected->size(), 1u);
  auto compare = [&](const TensorData &got, const char *what) {
    const TensorData &want = expected->front();
    ASSERT_EQ(got.getNumElements(), want.getNumElements()) << what;
    for (uint64_t k = 0; k < want.getNumElements(); ++k)
      ASSERT_NEAR(got.getFloatElement(k), want.getFloatElement(k),
                  1e-5 + 1e-5 * std::fabs(want.getFloatElement(k)))
          << what << " element " << k;
  };
  auto uncaptured = test::runBackendStep(*onCuda, inputs(), true, planned);
  ASSERT_TRUE(bool(uncaptured)) << llvm::toString(uncaptured.takeError());
  compare(uncaptured->front(), "uncaptured");
  // Warm-up, capture, then replays: every step the same bytes.
  ExecutorOptions graphed = planned;
  graphed.cudaGraph = true;
  auto exe = prepareCudaExecutable(*onCuda, graphed);
  ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  std::vector<TensorData> data = inputs();
  const Graph &graph = onCuda->getGraph();
  for (size_t i = 0; i < data.size(); ++i)
    ASSERT_FALSE(bool((*exe)->setInput(graph.getInputs()[i].get(), data[i])));
  for (uint64_t step = 0; step < 4; ++step) {
    llvm::Error err = (*exe)->runStep(step);
    ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
    auto out = (*exe)->readValue(graph.getOutputs()[0]);
    ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
    compare(*out, step == 0 ? "warm-up" : step == 1 ? "captured" : "replayed");
  }
}

} // namespace
