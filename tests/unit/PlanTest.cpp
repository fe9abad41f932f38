//===- PlanTest.cpp - Unit tests of live intervals and the plan validator -===//
//
// The trivial plan of small graphs (no reuse, views aliased, persistent
// inputs and outputs), its figures, and the validator's detection of
// overlapping, misaligned and dangling assignments.
//
//===----------------------------------------------------------------------===//

#include "ir/Plan.h"
#include "ir/Module.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// x -> Relu -> Neg -> Reshape -> Abs -> output, 1 KiB per value.
class PlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    Graph &graph = module.getGraph();
    x = graph.addInput(f32({256}), "x");
    Value *shape = graph.addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, {2}, {16, 16}), "shape");
    Builder b(graph);
    relu = b.create({"", "Relu"}, {x}, {f32({256})}, {}, "relu")->getResult(0);
    neg = b.create({"", "Neg"}, {relu}, {f32({256})}, {}, "neg")->getResult(0);
    view =
        b.create({"", "Reshape"}, {neg, shape}, {f32({16, 16})}, {}, "reshape")
            ->getResult(0);
    out =
        b.create({"", "Abs"}, {view}, {f32({16, 16})}, {}, "abs")->getResult(0);
    graph.addOutput(out);
  }

  /// Inserts `late = Sigmoid(view)` before abs, which then reads it: a
  /// value defined at step 3, after relu died.
  Value *addLateReader() {
    Builder b(module.getGraph());
    b.setInsertionPoint(out->getDefiningNode());
    Value *late = b.create({"", "Sigmoid"}, {view}, {f32({16, 16})}, {}, "late")
                      ->getResult(0);
    out->getDefiningNode()->setOperand(0, late);
    return late;
  }

  Module module;
  Value *x, *relu, *neg, *view, *out;
};

TEST_F(PlanTest, LiveIntervalsFollowUsesAndViews) {
  auto intervals = computeLiveIntervals(module);
  EXPECT_EQ(intervals[relu].firstStep, 0u);
  EXPECT_EQ(intervals[relu].lastStep, 1u);
  // neg is read through the view by abs at step 3.
  EXPECT_EQ(intervals[neg].lastStep, 3u);
  EXPECT_EQ(intervals[x].firstStep, 0u);
  EXPECT_EQ(intervals[out].lastStep, 3u);
}

TEST_F(PlanTest, AViewThatIsAGraphOutputIsACopy) {
  // The one view rule (getViewSource): a Reshape whose result is a graph
  // output gets storage of its own, so it does not keep its source alive -
  // in liveness, in the trivial plan, and so in the eager baseline.
  Graph &graph = module.getGraph();
  Value *shape = graph.lookupValue("shape");
  Builder b(graph);
  Value *viewOut = b.create({"", "Reshape"}, {relu, shape}, {f32({16, 16})}, {},
                            "reshape_out")
                       ->getResult(0);
  graph.moveNode(viewOut->getDefiningNode(),
                 neg->getDefiningNode()->getIterator());
  graph.addOutput(viewOut);
  EXPECT_EQ(getViewSource(*view->getDefiningNode()), neg);
  EXPECT_EQ(getViewSource(*viewOut->getDefiningNode()), nullptr);
  auto intervals = computeLiveIntervals(module);
  // relu is last read by reshape_out (step 1) and neg (step 2).
  EXPECT_EQ(intervals[relu].lastStep, 2u);
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->lookup(viewOut)->kind, StorageKind::Persistent);
  EXPECT_EQ(plan->lookup(view)->kind, StorageKind::Alias);
}

TEST_F(PlanTest, ViewsOfAnotherSizeAreNotViews) {
  // Same byte size is part of the rule: a "view" that changes the size
  // (a malformed type) cannot share its source's bytes.
  Graph &graph = module.getGraph();
  Builder b(graph);
  Value *shape = graph.lookupValue("shape");
  Node *odd = b.create({"", "Reshape"}, {neg, shape}, {f32({8, 8})}, {}, "odd");
  EXPECT_EQ(getViewSource(*odd), nullptr);
  graph.eraseNode(odd);
}

TEST_F(PlanTest, TrivialPlanIsValidAndHasNoReuse) {
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  EXPECT_EQ(plan->lookup(x)->kind, StorageKind::Persistent);
  EXPECT_EQ(plan->lookup(out)->kind, StorageKind::Persistent);
  EXPECT_EQ(plan->lookup(view)->kind, StorageKind::Alias);
  EXPECT_EQ(plan->lookup(view)->aliasOf, neg);
  EXPECT_EQ(plan->lookup(relu)->kind, StorageKind::Arena);
  EXPECT_EQ(plan->arenaBytes, 2048u);
  // relu (steps 0..1) and neg (1..3) are live together at step 1.
  EXPECT_EQ(plan->figures.lowerBoundBytes, 2048u);
  EXPECT_EQ(plan->figures.lowerBoundStep, 1u);
  EXPECT_EQ(plan->figures.fragmentation(), 0.0);
}

TEST_F(PlanTest, ValidatorRejectsOverlapInTimeAndAddress) {
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  plan->buffers[neg].offset = plan->buffers[relu].offset;
  std::string message = errorText(plan->validate(module));
  EXPECT_NE(message.find("overlap"), std::string::npos) << message;
}

TEST_F(PlanTest, ValidatorAcceptsReuseOfDeadSlice) {
  // A value defined after relu died may take relu's slice.
  Value *late = addLateReader();
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  plan->buffers[late].offset = plan->buffers[relu].offset;
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
}

TEST_F(PlanTest, ValidatorRejectsAnIntervalShorterThanTheGraphs) {
  // A tampered plan (a .gm whose CRC was recomputed) that ends neg's
  // storage, and the view of it, at step 2 although abs reads the view at
  // step 3, and hands the freed slice to a value defined at step 3: the
  // overlap sweep over the recorded intervals finds nothing, the liveness
  // re-derived from the graph does.
  Value *late = addLateReader();
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  plan->buffers[neg].lastStep = 2;
  plan->buffers[view].lastStep = 2;
  plan->buffers[late].offset = plan->buffers[neg].offset;
  std::string message = errorText(plan->validate(module));
  // neg (kept alive by its view) or the view itself is named, whichever
  // the check meets first.
  EXPECT_NE(message.find(" 3] but its arena storage"), std::string::npos)
      << message;
  EXPECT_NE(message.find("only over [1, 2]"), std::string::npos) << message;
  // Storage live as long as the graph needs it passes.
  plan->buffers[neg].lastStep = 3;
  plan->buffers[late].offset = plan->buffers[relu].offset;
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
}

TEST_F(PlanTest, ValidatorRejectsAnAliasOfAnUnrelatedValue) {
  // The view may share neg's bytes (its source), not relu's: relu is
  // neither its source nor an operand of its node. relu is kept live long
  // enough that only the relation is wrong.
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  plan->buffers[relu].lastStep = 3;
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  plan->buffers[view].aliasOf = relu;
  std::string message = errorText(plan->validate(module));
  EXPECT_NE(message.find("%<result 0 of reshape> aliases %<result 0 of relu>, "
                         "which is neither its view source nor an operand"),
            std::string::npos)
      << message;
  // Neg is elementwise and may overwrite its operand relu in place; the
  // view of neg then shares relu's storage too: both aliases are related.
  plan->buffers[neg].kind = StorageKind::Alias;
  plan->buffers[neg].aliasOf = relu;
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  // Relu may overwrite its operand by its semantics, but not x: a graph
  // input keeps its bytes for the whole step.
  plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  plan->buffers[relu].kind = StorageKind::Alias;
  plan->buffers[relu].aliasOf = x;
  message = errorText(plan->validate(module));
  EXPECT_NE(message.find("%<result 0 of relu> aliases %x, which is neither"),
            std::string::npos)
      << message;
}

TEST_F(PlanTest, ValidatorRejectsMisalignedAndMissing) {
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  plan->buffers[relu].offset += 8;
  EXPECT_NE(errorText(plan->validate(module)).find("aligned"),
            std::string::npos);
  plan->buffers.erase(relu);
  EXPECT_NE(errorText(plan->validate(module)).find("no buffer"),
            std::string::npos);
}

TEST_F(PlanTest, ValidatorChecksWorkspaces) {
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan));
  const Node *negNode = neg->getDefiningNode();
  // Above every value: fine. neg is step 1.
  plan->workspaces[negNode] = {plan->arenaBytes, 512, 1};
  plan->arenaBytes += 512;
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  // On relu's slice, which is live at step 1: an overlap.
  plan->workspaces[negNode].offset = plan->buffers[relu].offset;
  EXPECT_NE(errorText(plan->validate(module)).find("the workspace of"),
            std::string::npos);
  // relu is dead at step 2 (abs reads neg through the view), but neg's
  // slice is not: a workspace at step 2 may not sit on it.
  plan->workspaces.clear();
  const Node *absNode = out->getDefiningNode();
  plan->workspaces[absNode] = {plan->buffers[relu].offset, 1024, 3};
  EXPECT_EQ(errorText(plan->validate(module)), "<success>");
  plan->workspaces[absNode].step = 2;
  EXPECT_NE(errorText(plan->validate(module)).find("but the node is at step 3"),
            std::string::npos);
  plan->workspaces[absNode] = {plan->arenaBytes - 256, 512, 3};
  EXPECT_NE(errorText(plan->validate(module)).find("ends past the arena"),
            std::string::npos);
  plan->workspaces[absNode] = {0, 100, 3};
  EXPECT_NE(errorText(plan->validate(module)).find("not aligned"),
            std::string::npos);
}

TEST_F(PlanTest, TrivialPlanNeedsStaticShapes) {
  module.getGraph().addInput(TensorType(DType::F32, {Dim::symbolic("batch")}),
                             "dyn");
  auto plan = makeTrivialPlan(module);
  ASSERT_FALSE(bool(plan));
  EXPECT_NE(llvm::toString(plan.takeError()).find("--dim"), std::string::npos);
}

TEST(MemoryCategoryTest, NamesRoundTrip) {
  for (unsigned i = 0; i != kNumMemoryCategories; ++i) {
    auto category = static_cast<MemoryCategory>(i);
    EXPECT_EQ(parseMemoryCategory(memoryCategoryName(category)), category);
  }
  EXPECT_FALSE(parseMemoryCategory("weights").has_value());
  EXPECT_EQ(alignBuffer(1), 256u);
  EXPECT_EQ(alignBuffer(256), 256u);
  EXPECT_EQ(alignBuffer(0), 0u);
}

} // namespace
