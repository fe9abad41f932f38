//===- ZeroShardTest.cpp - ZeRO's collectives and the zero-shard pass -----===//
//
// The shard arithmetic (ceil(E / N), padded traffic), the schemas of
// gmopt.ReduceScatter, gmopt.Shard and gmopt.AllGather (inferred shard
// types, their error cases, written operands, costs), their CPU kernels at
// one rank and without an MPI world, and the zero-shard pass's invariants
// at stages 1 and 2: the verifier holds, the optimizer runs over one flat
// shard per bucket, each rank's state is 1/N of the whole (padded), the
// sharding record reads back, and a module without an in-graph optimizer
// is refused.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/Mpi.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "ir/Collectives.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/Verifier.h"
#include "ir/ZeroSharding.h"
#include "ir/serialization/TextIR.h"
#include "passes/distributed/ZeroShard.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

OpName op(llvm::StringRef name) { return {kGmoptDomain.str(), name.str()}; }

using ZeroOpsTest = OpTest;

TEST(ZeroShardMathTest, BucketPiecesTileARangeAndLeaveThePadding) {
  // Operands of 3, 0 and 5 elements: a bucket of 8, padded to 9 for 3 ranks.
  std::vector<int64_t> elements = {3, 0, 5};
  auto pieces = bucketPieces(elements, 0, 8);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].operand, 0u);
  EXPECT_EQ(pieces[0].count, 3);
  EXPECT_EQ(pieces[1].operand, 2u);
  EXPECT_EQ(pieces[1].operandOffset, 0);
  EXPECT_EQ(pieces[1].rangeOffset, 3);
  EXPECT_EQ(pieces[1].count, 5);
  // Rank 1's shard [3, 6): the first three elements of the third operand.
  pieces = bucketPieces(elements, 3, 3);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].operand, 2u);
  EXPECT_EQ(pieces[0].operandOffset, 0);
  EXPECT_EQ(pieces[0].rangeOffset, 0);
  EXPECT_EQ(pieces[0].count, 3);
  // Rank 2's shard [6, 9): two elements and one of padding, no piece for it.
  pieces = bucketPieces(elements, 6, 3);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].operandOffset, 3);
  EXPECT_EQ(pieces[0].count, 2);
  // A shard straddling two operands, and one wholly in the padding.
  pieces = bucketPieces(elements, 2, 2);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].operandOffset, 2);
  EXPECT_EQ(pieces[1].rangeOffset, 1);
  EXPECT_TRUE(bucketPieces(elements, 8, 4).empty());
}

TEST(ZeroShardMathTest, ShardsRoundUpAndTrafficIsNMinusOneShards) {
  EXPECT_EQ(zeroShardElements(80, 3), 27);
  EXPECT_EQ(zeroShardElements(81, 3), 27);
  EXPECT_EQ(zeroShardElements(64, 1), 64);
  EXPECT_EQ(zeroShardElements(5, 1024), 1);
  EXPECT_EQ(ringShardTraffic(108, 1), 0u);
  EXPECT_EQ(ringShardTraffic(108, 3), 216u);
  // A reduce-scatter and an all-gather move what one all-reduce does.
  EXPECT_EQ(2 * ringShardTraffic(256, 4), ringAllReduceTraffic(1024, 4));
}

// A whole checkpoint restored on any world size: each rank cuts its shard
// out of the flat concatenation and the gathered shards give the tensors
// back, bit for bit, for world sizes that pad and ones that do not.
TEST(ZeroCheckpointTest, ShardsCutFromWholeTensorsGatherBackToThem) {
  ZeroShardGroup group;
  group.shard = "zero.bucket0.state0";
  group.whole = {"c.momentum0", "s.momentum0", "a.momentum0"};
  group.shapes = {{4, 6}, {}, {8, 8}};
  std::vector<std::vector<float>> whole = {
      std::vector<float>(24), std::vector<float>(1), std::vector<float>(64)};
  float next = 1.5f;
  for (std::vector<float> &tensor : whole)
    for (float &value : tensor)
      value = next++;
  llvm::SmallVector<llvm::ArrayRef<float>, 3> views(whole.begin(), whole.end());
  for (int64_t ranks : {1, 2, 3, 5, 89, 100}) {
    group.shardElements = zeroShardElements(89, ranks);
    std::vector<float> gathered;
    for (int64_t rank = 0; rank != ranks; ++rank) {
      auto shard = sliceZeroShard(group, rank, ranks, views);
      ASSERT_TRUE(bool(shard)) << llvm::toString(shard.takeError());
      ASSERT_EQ(int64_t(shard->size()), group.shardElements);
      gathered.insert(gathered.end(), shard->begin(), shard->end());
    }
    // The padding is zero.
    for (size_t i = 89; i < gathered.size(); ++i)
      EXPECT_EQ(gathered[i], 0.0f) << ranks << " ranks, element " << i;
    auto back = assembleZeroWhole(group, ranks, gathered);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, whole) << ranks << " ranks";
  }
}

TEST(ZeroCheckpointTest, MisshapenTensorsAndWorldsAreRefusedByName) {
  ZeroShardGroup group;
  group.shard = "zero.bucket0.state1";
  group.whole = {"w.momentum1"};
  group.shapes = {{2, 3}};
  group.shardElements = 3;
  std::vector<float> five(5, 1.0f), six(6, 1.0f);
  llvm::ArrayRef<float> shortView(five), fullView(six);
  auto wrongSize = sliceZeroShard(group, 0, 2, {shortView});
  ASSERT_FALSE(bool(wrongSize));
  EXPECT_NE(llvm::toString(wrongSize.takeError()).find("'w.momentum1' has 5"),
            std::string::npos);
  auto wrongRank = sliceZeroShard(group, 2, 2, {fullView});
  ASSERT_FALSE(bool(wrongRank));
  EXPECT_NE(llvm::toString(wrongRank.takeError()).find("zero.bucket0.state1"),
            std::string::npos);
  auto tooFew = assembleZeroWhole(group, 2, five);
  ASSERT_FALSE(bool(tooFew));
  llvm::consumeError(tooFew.takeError());
  // A record from before the names were kept cannot say where they go.
  ZeroShardingRecord old;
  old.stage = 1;
  old.ranks = 2;
  old.buckets.resize(1);
  old.buckets[0].elements = 6;
  old.buckets[0].shardElements = 3;
  old.buckets[0].params = {"w"};
  old.buckets[0].stateShards = {"zero.bucket0.state0"};
  auto groups = getZeroShardGroups(old);
  ASSERT_FALSE(bool(groups));
  EXPECT_NE(llvm::toString(groups.takeError()).find("compile it again"),
            std::string::npos);
}

TEST_F(ZeroOpsTest, InfersPaddedShards) {
  Value *a = input("f32[8,2]");
  Value *b = input("f32[8,8]");
  EXPECT_EQ(infer(op(kReduceScatterOp), {a, b}, 1, {intAttr("ranks", 3)}),
            "f32[27]");
  EXPECT_EQ(infer(op(kShardOp), {a, b}, 1, {intAttr("ranks", 3)}), "f32[27]");
  EXPECT_EQ(infer(op(kAllGatherOp), {input("f32[27]"), a, b}, 1,
                  {intAttr("ranks", 3)}),
            "bool[1]");
  EXPECT_TRUE(contains(infer(op(kAllGatherOp), {input("f32[26]"), a, b}, 1,
                             {intAttr("ranks", 3)}),
                       "has shards of f32[27]"));
  EXPECT_TRUE(contains(
      infer(op(kReduceScatterOp), {input("f16[4]")}, 1, {intAttr("ranks", 2)}),
      "static fp32"));
  EXPECT_TRUE(
      contains(infer(op(kReduceScatterOp), {a}, 1,
                     {intAttr("ranks", 2), stringAttr("reduction", "max")}),
               "reduction must be"));
  EXPECT_TRUE(contains(infer(op(kShardOp), {a}, 1, {intAttr("ranks", 0)}),
                       "ranks must be at least 1"));
}

TEST_F(ZeroOpsTest, AllGatherWritesTheParametersAndCostsNMinusOneShards) {
  const OpRegistry &registry = OpRegistry::instance();
  Node *gather = make(op(kAllGatherOp),
                      {input("f32[27]"), input("f32[8,2]"), input("f32[8,8]")},
                      1, {intAttr("ranks", 3)});
  EXPECT_EQ(getWrittenOperands(*gather, registry.lookup(*gather)),
            (llvm::SmallVector<unsigned, 8>{1, 2}));
  Node *scatter =
      make(op(kReduceScatterOp), {input("f32[8,2]"), input("f32[8,8]")}, 1,
           {intAttr("ranks", 3)});
  EXPECT_TRUE(getWrittenOperands(*scatter, registry.lookup(*scatter)).empty());
  for (llvm::StringRef name : {kReduceScatterOp, kAllGatherOp, kShardOp})
    EXPECT_TRUE(
        registry.lookup(kGmoptDomain, name, 1)->hasTrait(TraitSideEffect))
        << name.str();
  // 27 floats per shard, two other ranks' shards each way: the cost above
  // the same node's at one rank.
  Node *alone = make(op(kAllGatherOp),
                     {input("f32[88]"), input("f32[8,3]"), input("f32[8,8]")},
                     1, {intAttr("ranks", 1)});
  Node *three = make(op(kAllGatherOp),
                     {input("f32[30]"), input("f32[8,3]"), input("f32[8,8]")},
                     1, {intAttr("ranks", 3)});
  OpCost one = estimateCost(*alone), many = estimateCost(*three);
  EXPECT_EQ(many.bytesRead + 58 * 4, one.bytesRead + 2 * 30 * 4);
  EXPECT_EQ(many.bytesWritten, one.bytesWritten + 2 * 30 * 4);
}

TEST(ZeroCpuKernelTest, OneRankIsTheFlatBucket) {
  cpu::testing::KernelRunner runner;
  cpu::testing::HostTensor a = cpu::testing::HostTensor::f32({2}, {1, 2});
  cpu::testing::HostTensor b = cpu::testing::HostTensor::f32({3}, {3, 4, 5});
  TensorType flat = TensorType::get(DType::F32, {5});
  for (llvm::StringRef name : {kReduceScatterOp, kShardOp}) {
    auto results = runner.run(kGmoptDomain, name, {&a, &b}, {flat},
                              {cpu::testing::intAttr("ranks", 1)});
    ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
    EXPECT_EQ((*results)[0].floats(), (std::vector<float>{1, 2, 3, 4, 5}))
        << name.str();
  }
}

TEST(ZeroCpuKernelTest, SeveralRanksNeedTheirMpiWorld) {
  ASSERT_FALSE(cpu::isMpiInitialized());
  cpu::testing::KernelRunner runner;
  cpu::testing::HostTensor a = cpu::testing::HostTensor::f32({4}, {1, 2, 3, 4});
  auto results = runner.run(kGmoptDomain, kReduceScatterOp, {&a},
                            {TensorType::get(DType::F32, {2})},
                            {cpu::testing::intAttr("ranks", 2)});
  ASSERT_FALSE(bool(results));
  std::string message = llvm::toString(results.takeError());
  EXPECT_TRUE(contains(message, "reduce-scatter over 2 ranks needs MPI"))
      << message;
}

TEST(ZeroCpuKernelTest, WorkspaceIsThePaddedBucket) {
  Module module;
  Graph &graph = module.getGraph();
  Value *a = graph.addInput(TensorType::get(DType::F32, {100}), "a");
  Value *b = graph.addInput(TensorType::get(DType::F32, {29}), "b");
  Builder builder(graph);
  // 129 elements over 2 ranks: shards of 65, a padded bucket of 130.
  Node *scatter = builder.create(
      op(kReduceScatterOp), {a, b}, {TensorType::get(DType::F32, {65})},
      {NamedAttribute{"ranks", Attribute::getInt(2)}});
  Node *alone = builder.create(op(kReduceScatterOp), {a, b},
                               {TensorType::get(DType::F32, {129})},
                               {NamedAttribute{"ranks", Attribute::getInt(1)}});
  EXPECT_GE(cpu::getCpuKernelWorkspaceBytes(*scatter), 130u * 4);
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(*alone), 0u);
}

constexpr llvm::StringLiteral kAdamW = R"(
module attributes {opsets = {"" = 17, "com.microsoft" = 1}} {
  graph @g(%x: f32[4,8], %a: f32[8,8], %c: f32[8,3], %a_acc: f32[8,8], %c_acc: f32[8,3], %lazy_reset_grad: bool[1], %lr: f32[1], %step: i64[1], %signal: bool[1], %a_m: f32[8,8], %c_m: f32[8,3], %a_v: f32[8,8], %c_v: f32[8,3]) {
    %h = MatMul(%x, %a) : f32[4,8]
    %y = MatMul(%h, %c) : f32[4,3]
    %c_grad = Gemm(%h, %y) {transA = 1} : f32[8,3] phase backward
    %oc, _ = com.microsoft.InPlaceAccumulatorV2(%c_acc, %c_grad, %lazy_reset_grad) : bool[1] name "ac" phase optimizer
    %dh = Gemm(%y, %c) {transB = 1} : f32[4,8] phase backward
    %a_grad = Gemm(%x, %dh) {transA = 1} : f32[8,8] phase backward
    %oa, _ = com.microsoft.InPlaceAccumulatorV2(%a_acc, %a_grad, %lazy_reset_grad) : bool[1] name "aa" phase optimizer
    %flag = com.microsoft.AdamWOptimizer(%lr, %step, %signal, %a, %c, %a_acc, %c_acc, %a_m, %c_m, %a_v, %c_v) : i64[1] name "adamw" phase optimizer
    return %y, %oa, %oc, %flag
  }
  signature {
    param %a trainable grad %a_grad accumulator %a_acc via "aa" state %a_m, %a_v
    param %c trainable grad %c_grad accumulator %c_acc via "ac" state %c_m, %c_v
    data %x
    learning_rate %lr
    step_count %step
  }
}
)";

std::unique_ptr<Module> parseAdamW() {
  auto module = parseModule(kAdamW, "adamw.gmir");
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

class ZeroShardPassTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ZeroShardPassTest, EachRankKeepsOneShardOfTheState) {
  std::unique_ptr<Module> module = parseAdamW();
  ASSERT_TRUE(module);
  ZeroShardPass::Options options;
  options.stage = GetParam();
  options.ranks = 5;
  ZeroShardPass pass(options);
  PassContext context;
  auto changed = pass.run(*module, context);
  ASSERT_TRUE(bool(changed)) << llvm::toString(changed.takeError());
  EXPECT_TRUE(*changed);
  if (llvm::Error err = verifyModule(*module))
    FAIL() << llvm::toString(std::move(err));

  // One 25 MiB bucket: c (24) and a (64) flat, 88 -> shards of 18 (90).
  std::optional<ZeroShardingRecord> record = readZeroSharding(*module);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->stage, GetParam());
  EXPECT_EQ(record->ranks, 5);
  ASSERT_EQ(record->buckets.size(), 1u);
  const ZeroBucketRecord &bucket = record->buckets[0];
  EXPECT_EQ(bucket.params, (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(bucket.elements, 88);
  EXPECT_EQ(bucket.shardElements, 18);
  EXPECT_EQ(bucket.gradientShard.empty(), GetParam() == 1);
  // What a whole checkpoint needs: the shapes and the unsharded names (the
  // graph's own moment inputs).
  int64_t recorded = 0;
  for (const std::vector<int64_t> &shape : bucket.paramShapes) {
    int64_t count = 1;
    for (int64_t dim : shape)
      count *= dim;
    recorded += count;
  }
  EXPECT_EQ(recorded, 88);
  ASSERT_EQ(bucket.wholeStates.size(), 2u);
  EXPECT_EQ(bucket.wholeStates[0], (std::vector<std::string>{"c_m", "a_m"}));
  EXPECT_EQ(bucket.wholeStates[1], (std::vector<std::string>{"c_v", "a_v"}));
  auto groups = getZeroShardGroups(*record);
  ASSERT_TRUE(bool(groups)) << llvm::toString(groups.takeError());
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[1].shard, bucket.stateShards[1]);
  EXPECT_EQ((*groups)[1].whole, bucket.wholeStates[1]);

  Node *optimizer = findOptimizerNode(*module);
  ASSERT_TRUE(optimizer);
  OptimizerOperands layout(*optimizer);
  ASSERT_EQ(layout.size(), 1u);
  TensorType shard = TensorType::get(DType::F32, {18});
  EXPECT_EQ(layout.getParam(0)->getType(), shard);
  EXPECT_EQ(layout.getGrad(0)->getType(), shard);
  uint64_t stateBytes = 0;
  for (const ParamInfo &info : module->getSignature().getParams())
    for (const Value *state : info.optimizerState) {
      EXPECT_EQ(state->getType(), shard);
      stateBytes += state->getType().getSizeInBytes();
    }
  // Two moments of 18 floats: 1/5 of the padded 2 x 90.
  EXPECT_EQ(stateBytes, 2u * 18 * 4);
  for (const ParamInfo &info : module->getSignature().getParams())
    EXPECT_EQ(bool(info.accumulator), GetParam() == 1);
  unsigned gathers = 0;
  for (const Node &node : module->getGraph().getNodes())
    gathers += node.isa(kGmoptDomain, kAllGatherOp);
  EXPECT_EQ(gathers, 1u);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroShardPassTest, ::testing::Values(1, 2));

TEST(ZeroShardRefusalTest, NeedsTheOptimizerInTheGraph) {
  auto module = parseModule(R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[4], %w: f32[4]) {
    %y = Mul(%x, %w) : f32[4]
    %w_grad = Neg(%x) : f32[4] phase backward
    return %y, %w_grad
  }
  signature {
    param %w trainable grad %w_grad
    data %x
  }
}
)",
                            "plain.gmir");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  ZeroShardPass::Options options;
  options.ranks = 2;
  ZeroShardPass pass(options);
  PassContext context;
  auto changed = pass.run(**module, context);
  ASSERT_FALSE(bool(changed));
  std::string message = llvm::toString(changed.takeError());
  EXPECT_TRUE(contains(message, "in-graph optimizer")) << message;
}

} // namespace
