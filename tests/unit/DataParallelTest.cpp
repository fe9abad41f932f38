//===- DataParallelTest.cpp - gmopt.AllReduce and the data-parallel pass --===//
//
// The collective op's schema (inference, its error cases, the traits that
// keep passes from dropping or merging it, the ring-traffic cost) and the
// data-parallel pass's bucket plan: backward order, the size threshold, and
// the rewrite's invariants (every trainable gradient reduced exactly once,
// its users reading the reduced value, the verifier satisfied).
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/Mpi.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "ir/Collectives.h"
#include "ir/Verifier.h"
#include "ir/serialization/TextIR.h"
#include "passes/PassManager.h"
#include "passes/distributed/DataParallel.h"
#include "passes/planning/Liveness.h"
#include "passes/planning/Schedule.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

OpName allReduce() { return {kGmoptDomain.str(), kAllReduceOp.str()}; }

using CollectiveOpsTest = OpTest;

TEST_F(CollectiveOpsTest, InfersOneResultPerOperand) {
  Value *a = input("f32[8,2]");
  Value *b = input("f16[batch,4]");
  EXPECT_EQ(infer(allReduce(), {a, b}, 2, {intAttr("ranks", 4)}),
            "f32[8,2] f16[batch,4]");
  EXPECT_TRUE(
      contains(infer(allReduce(), {a, b}, 1), "2 operands but 1 results"));
  EXPECT_TRUE(contains(infer(allReduce(), {input("i64[3]")}, 1),
                       "only floating-point tensors are reduced"));
  EXPECT_TRUE(
      contains(infer(allReduce(), {a}, 1, {stringAttr("reduction", "max")}),
               "reduction must be mean or sum, got 'max'"));
  EXPECT_TRUE(contains(infer(allReduce(), {a}, 1, {intAttr("ranks", 0)}),
                       "ranks must be at least 1"));
}

TEST_F(CollectiveOpsTest, SideEffectWithoutWrites) {
  const OpSchema *schema =
      OpRegistry::instance().lookup(kGmoptDomain, kAllReduceOp, 1);
  ASSERT_TRUE(schema);
  EXPECT_TRUE(schema->hasTrait(TraitSideEffect));
  EXPECT_FALSE(schema->hasTrait(TraitElementwise));
  EXPECT_EQ(schema->lookupAttr("reduction")->defaultValue->getString(), "mean");
  Node *node = make(allReduce(), {input("f32[4]"), input("f32[4]")}, 2);
  EXPECT_TRUE(getWrittenOperands(*node, schema).empty());
}

TEST_F(CollectiveOpsTest, CostCountsRingTraffic) {
  EXPECT_EQ(ringAllReduceTraffic(1024, 1), 0u);
  EXPECT_EQ(ringAllReduceTraffic(1024, 2), 1024u);
  EXPECT_EQ(ringAllReduceTraffic(1024, 4), 1536u);
  llvm::SmallVector<Value *, 2> results =
      build(allReduce(), {input("f32[64]"), input("f32[192]")}, 2,
            {intAttr("ranks", 4)});
  OpCost cost = estimateCost(*results[0]->getDefiningNode());
  // 1 KiB bucket read and written locally, 1.5 KiB each way on the ring.
  EXPECT_EQ(cost.bytesRead, 1024u + 1536u);
  EXPECT_EQ(cost.bytesWritten, 1024u + 1536u);
  EXPECT_EQ(cost.flops, 256u * 3);
}

constexpr llvm::StringLiteral kThreeParams = R"(
module attributes {opsets = {"" = 17, "com.microsoft" = 1}} {
  graph @g(%x: f32[4,8], %a: f32[8,8], %b: f32[8,8], %c: f32[8,2], %a_acc: f32[8,8], %b_acc: f32[8,8], %c_acc: f32[8,2], %lazy_reset_grad: bool[1]) {
    %h1 = MatMul(%x, %a) : f32[4,8]
    %h2 = MatMul(%h1, %b) : f32[4,8]
    %y = MatMul(%h2, %c) : f32[4,2]
    %c_grad = Gemm(%h2, %y) {transA = 1} : f32[8,2] phase backward
    %oc, _ = com.microsoft.InPlaceAccumulatorV2(%c_acc, %c_grad, %lazy_reset_grad) : bool[1] name "ac" phase optimizer
    %dh2 = Gemm(%y, %c) {transB = 1} : f32[4,8] phase backward
    %b_grad = Gemm(%h1, %dh2) {transA = 1} : f32[8,8] phase backward
    %ob, _ = com.microsoft.InPlaceAccumulatorV2(%b_acc, %b_grad, %lazy_reset_grad) : bool[1] name "ab" phase optimizer
    %dh1 = Gemm(%dh2, %b) {transB = 1} : f32[4,8] phase backward
    %a_grad = Gemm(%x, %dh1) {transA = 1} : f32[8,8] phase backward
    %oa, _ = com.microsoft.InPlaceAccumulatorV2(%a_acc, %a_grad, %lazy_reset_grad) : bool[1] name "aa" phase optimizer
    return %y, %oa, %ob, %oc
  }
  signature {
    param %a trainable grad %a_grad accumulator %a_acc via "aa"
    param %b trainable grad %b_grad accumulator %b_acc via "ab"
    param %c trainable grad %c_grad accumulator %c_acc via "ac"
    data %x
  }
}
)";

std::unique_ptr<Module> parseThreeParams() {
  auto module = parseModule(kThreeParams, "three.gmir");
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

TEST(DataParallelPlanTest, BucketsInBackwardOrder) {
  std::unique_ptr<Module> module = parseThreeParams();
  ASSERT_TRUE(module);
  // Signature order a, b, c; backward order c, b, a.
  auto plan = planGradientBuckets(*module, 300);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->buckets.size(), 2u);
  EXPECT_EQ(plan->buckets[0].params, (std::vector<unsigned>{2, 1}));
  EXPECT_EQ(plan->buckets[0].bytes, 64u + 256u);
  EXPECT_EQ(plan->buckets[1].params, (std::vector<unsigned>{0}));
  std::string text;
  llvm::raw_string_ostream os(text);
  plan->print(os, *module);
  EXPECT_EQ(text, "bucket 0: 2 gradients, 320 bytes: c_grad b_grad\n"
                  "bucket 1: 1 gradients, 256 bytes: a_grad\n");

  auto one = planGradientBuckets(*module, 25u << 20);
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  ASSERT_EQ(one->buckets.size(), 1u);
  auto each = planGradientBuckets(*module, 1);
  ASSERT_TRUE(bool(each)) << llvm::toString(each.takeError());
  EXPECT_EQ(each->buckets.size(), 3u);
}

TEST(DataParallelPassTest, EveryGradientReducedOnceBeforeItsUsers) {
  std::unique_ptr<Module> module = parseThreeParams();
  ASSERT_TRUE(module);
  DataParallelPass::Options options;
  options.ranks = 2;
  options.bucketBytes = "300";
  options.inPlace = false;
  DataParallelPass pass(options);
  PassContext context;
  auto changed = pass.run(*module, context);
  ASSERT_TRUE(bool(changed)) << llvm::toString(changed.takeError());
  EXPECT_TRUE(*changed);
  if (llvm::Error err = verifyModule(*module))
    FAIL() << llvm::toString(std::move(err));
  unsigned collectives = 0;
  for (const Node &node : module->getGraph().getNodes())
    if (node.isa(kGmoptDomain, kAllReduceOp))
      ++collectives;
  EXPECT_EQ(collectives, 2u);
  for (const ParamInfo &info : module->getSignature().getParams()) {
    ASSERT_TRUE(info.grad);
    const Node *reduce = info.grad->getDefiningNode();
    ASSERT_TRUE(reduce && reduce->isa(kGmoptDomain, kAllReduceOp))
        << info.grad->getName().str();
    EXPECT_EQ(reduce->getAttr("ranks")->getInt(), 2);
    // The accumulator reads the reduced value and runs after the reduce.
    ASSERT_TRUE(info.accumulateNode);
    EXPECT_EQ(info.accumulateNode->getOperand(1), info.grad);
    bool seenReduce = false;
    for (const Node &node : module->getGraph().getNodes()) {
      if (&node == reduce)
        seenReduce = true;
      if (&node == info.accumulateNode) {
        EXPECT_TRUE(seenReduce) << info.grad->getName().str();
        break;
      }
    }
  }
}

TEST(DataParallelPassTest, InPlaceBucketsWriteTheGradientsThemselves) {
  std::unique_ptr<Module> module = parseThreeParams();
  ASSERT_TRUE(module);
  DataParallelPass::Options options;
  options.ranks = 2;
  options.bucketBytes = "300";
  DataParallelPass pass(options);
  PassContext context;
  auto changed = pass.run(*module, context);
  ASSERT_TRUE(bool(changed)) << llvm::toString(changed.takeError());
  if (llvm::Error err = verifyModule(*module))
    FAIL() << llvm::toString(std::move(err));
  const OpRegistry &registry = OpRegistry::instance();
  llvm::DenseMap<const Value *, const Node *> reducedBy;
  for (const Node &node : module->getGraph().getNodes()) {
    if (!node.isa(kGmoptDomain, kAllReduceOp))
      continue;
    EXPECT_EQ(node.getIntAttr("in_place", 0), 1);
    ASSERT_EQ(node.getNumResults(), 1u);
    EXPECT_EQ(node.getResult(0)->getType().str(), "bool[1]");
    llvm::SmallVector<unsigned, 8> written =
        getWrittenOperands(node, registry.lookup(node));
    EXPECT_EQ(written.size(), node.getNumOperands());
    for (const Value *operand : node.getOperands())
      reducedBy[operand] = &node;
  }
  // Every gradient is reduced once, keeps its slot (no copy) and its
  // accumulator reads it after the collective.
  for (const ParamInfo &info : module->getSignature().getParams()) {
    ASSERT_TRUE(reducedBy.count(info.grad)) << info.grad->getName().str();
    EXPECT_FALSE(info.grad->getName().ends_with(".local"));
    EXPECT_EQ(info.accumulateNode->getOperand(1), info.grad);
    bool seenReduce = false;
    for (const Node &node : module->getGraph().getNodes()) {
      seenReduce |= &node == reducedBy[info.grad];
      if (&node == info.accumulateNode) {
        EXPECT_TRUE(seenReduce) << info.grad->getName().str();
        break;
      }
    }
  }
}

/// Runs the data-parallel pass with overlap on kThreeParams (buckets c+b
/// and a) and, with \p schedule, the schedule pass after it.
std::unique_ptr<Module> overlappedThreeParams(bool schedule) {
  std::unique_ptr<Module> module = parseThreeParams();
  if (!module)
    return nullptr;
  DataParallelPass::Options options;
  options.ranks = 2;
  options.bucketBytes = "300";
  options.overlap = true;
  DataParallelPass pass(options);
  PassContext context;
  auto changed = pass.run(*module, context);
  if (!changed) {
    ADD_FAILURE() << llvm::toString(changed.takeError());
    return nullptr;
  }
  if (schedule) {
    SchedulePass scheduler;
    auto scheduled = scheduler.run(*module, context);
    if (!scheduled) {
      ADD_FAILURE() << llvm::toString(scheduled.takeError());
      return nullptr;
    }
  }
  if (llvm::Error err = verifyModule(*module)) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return nullptr;
  }
  return module;
}

TEST(DataParallelPassTest, OverlapStartsAfterTheLastGradientWaitsBeforeUse) {
  std::unique_ptr<Module> module = overlappedThreeParams(false);
  ASSERT_TRUE(module);
  std::vector<const Node *> order;
  for (const Node &node : module->getGraph().getNodes())
    order.push_back(&node);
  auto at = [&](const Node *node) {
    return size_t(llvm::find(order, node) - order.begin());
  };
  unsigned pairs = 0, overlapped = 0;
  for (const Node *wait : order) {
    EXPECT_FALSE(wait->isa(kGmoptDomain, kAllReduceOp));
    if (!wait->isa(kGmoptDomain, kAllReduceWaitOp))
      continue;
    ++pairs;
    const Node *start = wait->getOperand(0)->getDefiningNode();
    ASSERT_TRUE(start && start->isa(kGmoptDomain, kAllReduceStartOp));
    llvm::SmallVector<Value *, 4> grads = wait->getOperands();
    grads.erase(grads.begin());
    ASSERT_EQ(start->getNumOperands(), grads.size());
    size_t lastProducer = 0;
    for (const Value *grad : grads)
      lastProducer = std::max(lastProducer, at(grad->getDefiningNode()));
    // The start right after the last gradient's producer.
    EXPECT_EQ(at(start), lastProducer + 1);
    overlapped += at(wait) > at(start) + 1;
    // Between start and wait nothing touches the bucket; its first
    // reader after the start is the wait.
    for (size_t k = at(start) + 1; k < at(wait); ++k)
      for (const Value *operand : order[k]->getOperands())
        EXPECT_FALSE(llvm::is_contained(grads, operand))
            << order[k]->getName().str() << " reads a gradient in flight";
  }
  EXPECT_EQ(pairs, 2u);
  // Bucket 0 (c, b) overlaps a's gradient and bucket 1's start; bucket 1
  // overlaps bucket 0's wait and accumulators.
  EXPECT_EQ(overlapped, 2u);
}

TEST(DataParallelPassTest, OverlapKeepsTheBucketLiveFromStartToWait) {
  // The invariant the planner relies on: the wait reads the handle and
  // every gradient of the bucket, so after scheduling each of them is live
  // (its storage reserved, reused by nothing) over the whole exchange.
  std::unique_ptr<Module> module = overlappedThreeParams(true);
  ASSERT_TRUE(module);
  auto liveness = Liveness::compute(*module);
  ASSERT_TRUE(bool(liveness)) << llvm::toString(liveness.takeError());
  unsigned overlapped = 0;
  for (const Node &wait : module->getGraph().getNodes()) {
    if (!wait.isa(kGmoptDomain, kAllReduceWaitOp))
      continue;
    uint32_t waitStep = liveness->getStep(&wait);
    uint32_t startStep =
        liveness->getStep(wait.getOperand(0)->getDefiningNode());
    ASSERT_LT(startStep, waitStep);
    overlapped += waitStep > startStep + 1;
    for (const Value *value : wait.getOperands()) {
      std::optional<Liveness::ValueId> id = liveness->lookup(value);
      ASSERT_TRUE(id.has_value());
      Liveness::ValueId owner = liveness->getOwner(*id);
      LiveInterval interval = liveness->getStorageInterval(owner);
      EXPECT_LE(interval.firstStep, startStep) << value->getName().str();
      EXPECT_GE(interval.lastStep, waitStep) << value->getName().str();
      // Nothing inside the exchange reads the bucket or shares its storage.
      for (uint32_t step = startStep + 1; step < waitStep; ++step)
        EXPECT_FALSE(
            llvm::is_contained(liveness->getNode(step)->getOperands(), value))
            << liveness->getNode(step)->getName().str() << " reads "
            << value->getName().str() << " in flight";
      for (uint32_t step = startStep + 1; step < waitStep; ++step)
        for (const Value *result : liveness->getNode(step)->getResults())
          if (result) {
            std::optional<Liveness::ValueId> other = liveness->lookup(result);
            ASSERT_TRUE(other.has_value());
            EXPECT_NE(liveness->getOwner(*other), owner)
                << result->getName().str() << " shares "
                << value->getName().str();
          }
    }
  }
  // The scheduler kept the overlap the pass placed (both buckets).
  EXPECT_EQ(overlapped, 2u);
}

TEST(AllReduceCpuKernelTest, SplitStartPacksTheBucketIntoItsHandle) {
  cpu::testing::KernelRunner runner;
  cpu::testing::HostTensor a = cpu::testing::HostTensor::f32({2}, {1, -2});
  cpu::testing::HostTensor b = cpu::testing::HostTensor::f32({3}, {3, 4, 5});
  auto handle = runner.run(kGmoptDomain, kAllReduceStartOp, {&a, &b},
                           {TensorType::get(DType::F32, {5})},
                           {cpu::testing::intAttr("ranks", 1)});
  ASSERT_TRUE(bool(handle)) << llvm::toString(handle.takeError());
  EXPECT_EQ((*handle)[0].floats(), (std::vector<float>{1, -2, 3, 4, 5}));
  // Over two ranks without a world the start fails with the launch.
  auto unlaunched = runner.run(kGmoptDomain, kAllReduceStartOp, {&a, &b},
                               {TensorType::get(DType::F32, {5})},
                               {cpu::testing::intAttr("ranks", 2)});
  ASSERT_FALSE(bool(unlaunched));
  std::string message = llvm::toString(unlaunched.takeError());
  EXPECT_TRUE(contains(message, "all-reduce over 2 ranks needs MPI"))
      << message;
  // A wait whose start never ran is an error, not a silent no-op.
  EXPECT_EQ(cpu::getPendingCollectiveCount(), 0u);
}

TEST(AllReduceCpuKernelTest, InPlaceBucketOfOneNeedsNoWorkspace) {
  Module module;
  Graph &graph = module.getGraph();
  Value *a = graph.addInput(TensorType::get(DType::F32, {100}), "a");
  Value *b = graph.addInput(TensorType::get(DType::F32, {28}), "b");
  Builder builder(graph);
  OpName op{kGmoptDomain.str(), kAllReduceOp.str()};
  std::vector<NamedAttribute> attrs = {
      NamedAttribute{"ranks", Attribute::getInt(2)},
      NamedAttribute{"in_place", Attribute::getInt(1)}};
  Node *one =
      builder.create(op, {a}, {TensorType::get(DType::Bool, {1})}, attrs);
  Node *two =
      builder.create(op, {a, b}, {TensorType::get(DType::Bool, {1})}, attrs);
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(*one), 0u);
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(*two), 512u);
}

TEST(AllReduceCpuKernelTest, OneRankIsTheIdentityWithoutWorkspace) {
  cpu::testing::KernelRunner runner;
  cpu::testing::HostTensor a =
      cpu::testing::HostTensor::f32({2, 2}, {1, -2, 3, 4});
  cpu::testing::HostTensor b =
      cpu::testing::HostTensor::f16({3}, {0.5f, 1.5f, -8});
  auto results =
      runner.run(kGmoptDomain, kAllReduceOp, {&a, &b}, {a.type(), b.type()},
                 {cpu::testing::intAttr("ranks", 1)});
  ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
  EXPECT_EQ((*results)[0].floats(), a.floats());
  EXPECT_EQ((*results)[1].floats(), b.floats());
}

TEST(AllReduceCpuKernelTest, SeveralRanksNeedTheirMpiWorld) {
  // The unit tests never start MPI, so an all-reduce over two ranks must
  // fail with the launch it needs, not run as if alone.
  ASSERT_FALSE(cpu::isMpiInitialized());
  cpu::testing::KernelRunner runner;
  cpu::testing::HostTensor a = cpu::testing::HostTensor::f32({4}, {1, 2, 3, 4});
  auto results = runner.run(kGmoptDomain, kAllReduceOp, {&a}, {a.type()},
                            {cpu::testing::intAttr("ranks", 2)});
  ASSERT_FALSE(bool(results));
  std::string message = llvm::toString(results.takeError());
  EXPECT_TRUE(contains(message, "all-reduce over 2 ranks needs MPI"))
      << message;
}

TEST(AllReduceCpuKernelTest, WorkspaceIsThePackedBucket) {
  Module module;
  Graph &graph = module.getGraph();
  Value *a = graph.addInput(TensorType::get(DType::F32, {100}), "a");
  Value *b = graph.addInput(TensorType::get(DType::F32, {28}), "b");
  Builder builder(graph);
  OpName op{kGmoptDomain.str(), kAllReduceOp.str()};
  Node *two = builder.create(op, {a, b}, {a->getType(), b->getType()},
                             {NamedAttribute{"ranks", Attribute::getInt(2)}});
  Node *one = builder.create(op, {a, b}, {a->getType(), b->getType()},
                             {NamedAttribute{"ranks", Attribute::getInt(1)}});
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(*two), 512u);
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(*one), 0u);
}

} // namespace
