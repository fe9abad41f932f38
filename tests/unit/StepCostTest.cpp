//===- StepCostTest.cpp - The stated step cost model ----------------------===//
//
// passes/planning/StepCost.h's model, checked against its own statement on a
// small step: a node costs the dispatch overhead plus the larger of FLOPs over
// throughput (the matrix rate of its element type for products, the vector
// rate otherwise) and bytes over bandwidth; views cost nothing; a step of K
// micro-steps repeats everything but the optimizer update.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/StepCost.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/serialization/TextIR.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace gmopt;

namespace {

constexpr const char *kStep = R"(
module attributes {opsets = {"" = 17}} {
  graph @step(%x: f32[64,128], %w: f32[128,256], %h: f16[64,128], %hw: f16[128,256]) {
    %shape = constant i64[2] dense<[256, 64]>
    %y = MatMul(%x, %w) : f32[64,256]
    %r = Relu(%y) : f32[64,256]
    %v = Reshape(%r, %shape) : f32[256,64]
    %hy = MatMul(%h, %hw) : f16[64,256]
    %g = Mul(%r, %r) : f32[64,256] phase backward
    %u = Add(%w, %w) : f32[128,256] phase optimizer
    return %v, %hy, %g, %u
  }
}
)";

StepThroughput testThroughput() {
  StepThroughput t;
  t.name = "test";
  t.matrixFp32 = 1e9;
  t.matrixFp16 = 4e9;
  t.matrixBf16 = 4e9;
  t.vector = 1e8;
  t.bandwidth = 1e9;
  t.nodeOverhead = 1e-6;
  return t;
}

double expected(const Node &node, double rate, const StepThroughput &t) {
  OpCost cost = estimateCost(node);
  return t.nodeOverhead +
         std::max(double(cost.flops) / rate,
                  double(cost.bytesRead + cost.bytesWritten) / t.bandwidth);
}

const Node *findNode(const Module &module, llvm::StringRef result) {
  for (const Node &node : module.getGraph().getNodes())
    if (node.getNumResults() && node.getResult(0)->getName() == result)
      return &node;
  return nullptr;
}

} // namespace

TEST(StepCostTest, NodesFollowTheStatedRoofline) {
  auto module = parseModule(kStep, "step");
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  StepThroughput t = testThroughput();
  const Node *matmul = findNode(**module, "y");
  const Node *half = findNode(**module, "hy");
  const Node *relu = findNode(**module, "r");
  const Node *view = findNode(**module, "v");
  ASSERT_TRUE(matmul && half && relu && view);
  EXPECT_EQ(estimateCost(*matmul).flops, 2u * 64 * 128 * 256);
  EXPECT_DOUBLE_EQ(predictNodeSeconds(*matmul, t), expected(*matmul, 1e9, t));
  EXPECT_DOUBLE_EQ(predictNodeSeconds(*half, t), expected(*half, 4e9, t));
  EXPECT_LT(predictNodeSeconds(*half, t), predictNodeSeconds(*matmul, t));
  EXPECT_DOUBLE_EQ(predictNodeSeconds(*relu, t), expected(*relu, 1e8, t));
  EXPECT_EQ(predictNodeSeconds(*view, t), 0.0);
}

TEST(StepCostTest, AccumulationRepeatsAllButTheUpdate) {
  auto module = parseModule(kStep, "step");
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  StepThroughput t = testThroughput();
  StepCost cost = estimateStepCost(**module, t);
  const unsigned fwd = unsigned(Phase::Forward),
                 bwd = unsigned(Phase::Backward),
                 opt = unsigned(Phase::Optimizer);
  double forward = 0, backward = 0, update = 0;
  for (const Node &node : (*module)->getGraph().getNodes()) {
    double s = predictNodeSeconds(node, t);
    (node.getPhase() == Phase::Forward    ? forward
     : node.getPhase() == Phase::Backward ? backward
                                          : update) += s;
  }
  EXPECT_DOUBLE_EQ(cost.seconds[fwd], forward);
  EXPECT_DOUBLE_EQ(cost.seconds[bwd], backward);
  EXPECT_DOUBLE_EQ(cost.seconds[opt], update);
  EXPECT_EQ(cost.kernels, 5u); // six nodes; the view dispatches nothing
  EXPECT_DOUBLE_EQ(cost.accumulatedSeconds(1), cost.totalSeconds());
  EXPECT_DOUBLE_EQ(cost.accumulatedSeconds(3),
                   3 * (forward + backward) + update);
  EXPECT_EQ(cost.accumulatedFlops(3),
            3 * (cost.totalFlops() - cost.flops[opt]) + cost.flops[opt]);
}

TEST(StepCostTest, PresetsByName) {
  auto cpu = StepThroughput::lookup("cpu");
  ASSERT_TRUE(static_cast<bool>(cpu));
  EXPECT_EQ(cpu->name, "cpu");
  auto cuda = StepThroughput::lookup("cuda");
  ASSERT_TRUE(static_cast<bool>(cuda));
  // Tensor cores make 16-bit products faster on CUDA; the CPU kernels
  // convert them, so they are slower there.
  EXPECT_GT(cuda->matrixFp16, cuda->matrixFp32);
  EXPECT_LT(cpu->matrixFp16, cpu->matrixFp32);
  auto bad = StepThroughput::lookup("tpu");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "unknown cost model 'tpu' (expected cpu or cuda)");
}

TEST(StepCostTest, RecomputeIsPricedByBytesWhereMemoryBound) {
  auto module = parseModule(kStep, "step");
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  StepThroughput t = testThroughput();
  t.bandwidth = 1e8; // ten FLOPs per byte moved
  EXPECT_DOUBLE_EQ(t.balance(), 10.0);
  const Node *matmul = findNode(**module, "y");
  const Node *relu = findNode(**module, "r");
  const Node *view = findNode(**module, "v");
  ASSERT_TRUE(matmul && relu && view);
  // A product does more FLOPs than ten per byte it moves: its FLOPs.
  OpCost product = estimateCost(*matmul);
  ASSERT_GT(double(product.flops),
            10.0 * double(product.bytesRead + product.bytesWritten));
  EXPECT_EQ(recomputeCostFlops(*matmul, t), product.flops);
  // Relu does one FLOP per eight bytes: priced by its bytes, far above its
  // FLOPs.
  OpCost pointwise = estimateCost(*relu);
  uint64_t moved = pointwise.bytesRead + pointwise.bytesWritten;
  EXPECT_EQ(moved, 2u * 64 * 256 * 4);
  EXPECT_EQ(recomputeCostFlops(*relu, t), 10 * moved);
  EXPECT_GT(recomputeCostFlops(*relu, t), 10 * pointwise.flops);
  // A view moves nothing.
  EXPECT_EQ(recomputeCostFlops(*view, t), 0u);
  // The presets' balance: fp32 matrix throughput over bandwidth.
  EXPECT_DOUBLE_EQ(StepThroughput::cpu().balance(), 4.5);
  EXPECT_DOUBLE_EQ(StepThroughput::cuda().balance(), 12.5);
}
