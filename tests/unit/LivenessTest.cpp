//===- LivenessTest.cpp - Unit tests of liveness and in-place reuse -------===//
//
// Storage classes, live ranges, view groups and the live-byte profile of
// small graphs built with the Builder; the in-place rules (which ops and
// operands are candidates, and which decisions the schedule allows); and
// the printed form.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/Liveness.h"
#include "passes/planning/InPlace.h"

#include "ir/Module.h"

#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// x -> Relu -> Neg -> Reshape -> Abs -> Exp -> out, 1 KiB per value, and a
/// weight w read at the start and the end.
class LivenessTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    Graph &graph = module.getGraph();
    x = graph.addInput(f32({256}), "x");
    w = graph.addInput(f32({256}), "w");
    Value *shape = graph.addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, {2}, {16, 16}), "shape");
    Builder b(graph);
    relu = make(b, "Relu", {x}, f32({256}), "relu");
    neg = make(b, "Neg", {relu}, f32({256}), "neg");
    view = make(b, "Reshape", {neg, shape}, f32({16, 16}), "reshape");
    abs = make(b, "Abs", {view}, f32({16, 16}), "abs");
    exp = make(b, "Exp", {abs}, f32({16, 16}), "exp");
    out = make(b, "Reshape", {exp, shape}, f32({256}), "flat");
    sum = make(b, "Add", {out, w}, f32({256}), "add");
    graph.addOutput(sum);
  }

  /// A node named \p name whose one result has that name too.
  static Value *make(Builder &b, llvm::StringRef op,
                     llvm::ArrayRef<Value *> operands, TensorType type,
                     llvm::StringRef name) {
    Value *result = b.create({"", op.str()}, operands, {type}, {}, name.str())
                        ->getResult(0);
    result->setName(name);
    return result;
  }

  Liveness analyse() {
    auto liveness = Liveness::compute(module);
    EXPECT_TRUE(bool(liveness)) << errorText(liveness.takeError());
    return std::move(*liveness);
  }

  Module module;
  Value *x, *w, *relu, *neg, *view, *abs, *exp, *out, *sum;
};

TEST_F(LivenessTest, ClassesAndRanges) {
  Liveness liveness = analyse();
  EXPECT_EQ(liveness.getNumSteps(), 7u);
  EXPECT_EQ(liveness.getNumValues(), 10u);
  auto id = [&](const Value *value) { return *liveness.lookup(value); };
  EXPECT_EQ(liveness.getStorageClass(id(x)), StorageClass::Persistent);
  EXPECT_EQ(liveness.getStorageClass(id(sum)), StorageClass::Persistent);
  EXPECT_EQ(liveness.getStorageClass(id(relu)), StorageClass::Transient);
  EXPECT_EQ(liveness.getStorageClass(
                *liveness.lookup(module.getGraph().getInitializers()[0].get())),
            StorageClass::Constant);
  EXPECT_EQ(liveness.getDefStep(id(relu)), 0u);
  EXPECT_EQ(liveness.getLastUseStep(id(relu)), 1u);
  EXPECT_EQ(liveness.getDefStep(id(x)), 0u);
  EXPECT_EQ(liveness.getLastUseStep(id(w)), 6u);
  // The graph output is live to the last step.
  EXPECT_EQ(liveness.getLastUseStep(id(sum)), 6u);
  EXPECT_EQ(liveness.getBytes(id(relu)), 1024u);
  EXPECT_FALSE(liveness.lookup(nullptr).has_value());
}

TEST_F(LivenessTest, ViewsJoinTheirSourceAndExtendIt) {
  Liveness liveness = analyse();
  auto id = [&](const Value *value) { return *liveness.lookup(value); };
  EXPECT_TRUE(liveness.isView(id(view)));
  EXPECT_EQ(liveness.getAliasSource(id(view)), id(neg));
  EXPECT_EQ(liveness.getOwner(id(view)), id(neg));
  EXPECT_FALSE(liveness.isArenaOwner(id(view)));
  EXPECT_TRUE(liveness.isArenaOwner(id(neg)));
  // neg itself is last read by the view at step 2; abs reads the view at 3.
  EXPECT_EQ(liveness.getLastUseStep(id(neg)), 2u);
  LiveInterval storage = liveness.getStorageInterval(id(neg));
  EXPECT_EQ(storage.firstStep, 1u);
  EXPECT_EQ(storage.lastStep, 3u);
  // The view of exp ends at the Add at step 6, and so does exp's storage.
  EXPECT_EQ(liveness.getStorageInterval(id(exp)).lastStep, 6u);
}

TEST_F(LivenessTest, LiveBytesAndPeak) {
  Liveness liveness = analyse();
  // relu 0..1, neg 1..3 (via the view), abs 3..4, exp 4..6.
  std::vector<uint64_t> live = liveness.computeLiveBytes();
  std::vector<uint64_t> expected = {1024, 2048, 1024, 2048, 2048, 1024, 1024};
  EXPECT_EQ(live, expected);
  LivePeak peak = liveness.computePeak();
  EXPECT_EQ(peak.bytes, 2048u);
  EXPECT_EQ(peak.step, 1u);
}

TEST_F(LivenessTest, InPlaceTakesDyingTransientOperandsOnly) {
  Liveness liveness = analyse();
  std::vector<InPlaceReuse> reuses = applyInPlaceReuse(liveness);
  auto id = [&](const Value *value) { return *liveness.lookup(value); };
  // relu reads the graph input x: never in place. neg overwrites relu,
  // which dies there; abs overwrites neg through the view; exp overwrites
  // abs; the Add result is a graph output: persistent, never in place.
  ASSERT_EQ(reuses.size(), 3u);
  EXPECT_EQ(reuses[0].node, neg->getDefiningNode());
  EXPECT_EQ(reuses[1].node, abs->getDefiningNode());
  EXPECT_EQ(reuses[2].node, exp->getDefiningNode());
  EXPECT_EQ(reuses[0].savedBytes, 1024u);
  EXPECT_TRUE(liveness.isArenaOwner(id(relu)));
  EXPECT_EQ(liveness.getOwner(id(exp)), id(relu));
  EXPECT_EQ(liveness.getOwner(id(out)), id(relu));
  EXPECT_EQ(liveness.getAliasSource(id(abs)), id(view));
  // One kilobyte lives from step 0 to 6.
  LiveInterval storage = liveness.getStorageInterval(id(relu));
  EXPECT_EQ(storage.firstStep, 0u);
  EXPECT_EQ(storage.lastStep, 6u);
  EXPECT_EQ(liveness.computePeak().bytes, 1024u);
}

TEST_F(LivenessTest, InPlaceNeverOverwritesValuesStillNeeded) {
  // A second reader of relu after neg keeps relu alive: neg may not
  // overwrite it.
  Builder b(module.getGraph());
  b.setInsertionPointToEnd();
  Value *late = make(b, "Sigmoid", {relu}, f32({256}), "late");
  module.getGraph().addOutput(late);
  Liveness liveness = analyse();
  std::vector<InPlaceReuse> reuses = applyInPlaceReuse(liveness);
  for (const InPlaceReuse &reuse : reuses)
    EXPECT_NE(reuse.node, neg->getDefiningNode());
  auto id = [&](const Value *value) { return *liveness.lookup(value); };
  EXPECT_EQ(liveness.getOwner(id(neg)), id(neg));
}

TEST_F(LivenessTest, ExplicitOrder) {
  std::vector<const Node *> order;
  for (const Node &node : module.getGraph().getNodes())
    order.push_back(&node);
  auto liveness = Liveness::compute(module, order);
  ASSERT_TRUE(bool(liveness));
  EXPECT_EQ(liveness->getStep(abs->getDefiningNode()), 3u);
  EXPECT_EQ(liveness->getNode(3), abs->getDefiningNode());
}

TEST_F(LivenessTest, RescheduleMatchesAFreshAnalysis) {
  // The identity permutation changes nothing; a real permutation (on a
  // graph with independent nodes) matches analysing that order afresh.
  Liveness liveness = analyse();
  std::vector<uint32_t> identity = {0, 1, 2, 3, 4, 5, 6};
  Liveness same = liveness.reschedule(identity);
  EXPECT_EQ(same.computeLiveBytes(), liveness.computeLiveBytes());

  Module other;
  other.opsetImports[""] = 17;
  Graph &graph = other.getGraph();
  Value *in = graph.addInput(f32({64}), "in");
  Builder b(graph);
  Value *p = make(b, "Relu", {in}, f32({64}), "p");
  Value *q = make(b, "Neg", {in}, f32({1024}), "q");
  Value *r = make(b, "Add", {p, p}, f32({64}), "r");
  graph.addOutput(r);
  graph.addOutput(make(b, "Exp", {q}, f32({1024}), "e"));
  auto base = Liveness::compute(other);
  ASSERT_TRUE(bool(base));
  // p, r first, then q: a different peak than the input order.
  std::vector<uint32_t> order = {0, 2, 1, 3};
  Liveness moved = base->reschedule(order);
  std::vector<const Node *> nodes;
  for (uint32_t index : order)
    nodes.push_back(base->getNode(index));
  auto fresh = Liveness::compute(other, nodes);
  ASSERT_TRUE(bool(fresh));
  EXPECT_EQ(moved.computeLiveBytes(), fresh->computeLiveBytes());
  EXPECT_EQ(moved.getStep(r->getDefiningNode()), 1u);
  EXPECT_EQ(moved.getNodeIndex(1), 2u);
  auto id = [&](const Value *value) { return *moved.lookup(value); };
  EXPECT_EQ(moved.getLastUseStep(id(p)), 1u);
  EXPECT_EQ(base->getLastUseStep(id(p)), 2u);
  EXPECT_NE(moved.computeLiveBytes(), base->computeLiveBytes());
}

TEST_F(LivenessTest, PrintsValuesGroupsAndPeak) {
  Liveness liveness = analyse();
  applyInPlaceReuse(liveness);
  std::string text;
  llvm::raw_string_ostream os(text);
  liveness.print(os);
  EXPECT_NE(text.find("%x persistent size 1024 steps 0..0"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%relu transient size 1024 steps 0..1 storage 0..6"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%reshape transient size 1024 steps 2..3 shares %neg "
                      "(view)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%neg transient size 1024 steps 1..2 shares %relu "
                      "(in-place)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("peak 1024 at step 0 (relu)"), std::string::npos) << text;
}

TEST(LivenessErrorsTest, SymbolicShapesAreAnError) {
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  TensorType dynamic = TensorType::get(DType::F32, {4});
  Value *x = graph.addInput(dynamic, "x");
  Builder b(graph);
  Value *y = b.create({"", "Relu"}, {x}, {TensorType::unranked(DType::F32)}, {},
                      "relu")
                 ->getResult(0);
  graph.addOutput(y);
  auto liveness = Liveness::compute(module);
  ASSERT_FALSE(bool(liveness));
  std::string message = errorText(liveness.takeError());
  EXPECT_NE(message.find("not static"), std::string::npos) << message;
  EXPECT_NE(message.find("--dim"), std::string::npos) << message;
}

TEST(InPlaceCandidatesTest, FollowTheRegistryAndTypes) {
  Module module;
  module.opsetImports[""] = 17;
  module.opsetImports["com.microsoft"] = 1;
  Graph &graph = module.getGraph();
  Value *a = graph.addInput(f32({4, 8}), "a");
  Value *b = graph.addInput(f32({4, 8}), "b");
  Value *row = graph.addInput(f32({8}), "row");
  Value *m = graph.addInput(f32({8, 8}), "m");
  Builder builder(graph);
  auto node = [&](OpName op, llvm::ArrayRef<Value *> operands,
                  TensorType type) {
    return builder.create(op, operands, {type});
  };
  // Unary elementwise: operand 0.
  EXPECT_EQ(getInPlaceOperandCandidates(*node({"", "Relu"}, {a}, f32({4, 8}))),
            (llvm::SmallVector<unsigned, 2>{0}));
  // Commutative: both leading operands; not a broadcast one.
  EXPECT_EQ(
      getInPlaceOperandCandidates(*node({"", "Add"}, {a, b}, f32({4, 8}))),
      (llvm::SmallVector<unsigned, 2>{0, 1}));
  EXPECT_EQ(
      getInPlaceOperandCandidates(*node({"", "Add"}, {row, a}, f32({4, 8}))),
      (llvm::SmallVector<unsigned, 2>{1}));
  // Not commutative: only the registry's operand.
  EXPECT_EQ(
      getInPlaceOperandCandidates(*node({"", "Sub"}, {a, b}, f32({4, 8}))),
      (llvm::SmallVector<unsigned, 2>{0}));
  EXPECT_TRUE(
      getInPlaceOperandCandidates(*node({"", "Sub"}, {row, a}, f32({4, 8})))
          .empty());
  // Activation gradients (com.microsoft) write into dY.
  EXPECT_EQ(getInPlaceOperandCandidates(
                *node({"com.microsoft", "ReluGrad"}, {a, b}, f32({4, 8}))),
            (llvm::SmallVector<unsigned, 2>{0}));
  // Not elementwise, a type change, or random: never.
  EXPECT_TRUE(
      getInPlaceOperandCandidates(*node({"", "MatMul"}, {m, m}, f32({8, 8})))
          .empty());
  EXPECT_TRUE(
      getInPlaceOperandCandidates(
          *node({"", "Equal"}, {a, b}, TensorType::get(DType::Bool, {4, 8})))
          .empty());
  EXPECT_TRUE(getInPlaceOperandCandidates(
                  *node({"", "Cast"}, {a}, TensorType::get(DType::F16, {4, 8})))
                  .empty());
  EXPECT_TRUE(
      getInPlaceOperandCandidates(
          *builder.create({"", "Dropout"}, {a},
                          {f32({4, 8}), TensorType::get(DType::Bool, {4, 8})}))
          .empty());
  EXPECT_TRUE(
      getInPlaceOperandCandidates(*node({"", "Reshape"}, {a, a}, f32({32})))
          .empty());
  // Operands beyond the second of a variadic op are never offered.
  EXPECT_EQ(getInPlaceOperandCandidates(
                *node({"", "Sum"}, {row, row, a}, f32({4, 8})))
                .size(),
            0u);
}

TEST(InPlaceDecisionsTest, SideEffectResultsAndSharedOperandsAreExcluded) {
  Module module;
  module.opsetImports[""] = 17;
  module.opsetImports["com.microsoft"] = 1;
  Graph &graph = module.getGraph();
  Value *x = graph.addInput(f32({64}), "x");
  Value *buffer = graph.addInput(f32({64}), "buffer");
  Builder b(graph);
  Value *a = b.create({"", "Neg"}, {x}, {f32({64})}, {}, "a")->getResult(0);
  // Add(a, a): both operands share a's storage; writing into one would
  // clobber the other.
  Value *twice =
      b.create({"", "Add"}, {a, a}, {f32({64})}, {}, "twice")->getResult(0);
  Node *accumulate =
      b.create({"com.microsoft", "InPlaceAccumulatorV2"}, {buffer, twice},
               {TensorType::get(DType::Bool, {1}), f32({64})}, {}, "acc");
  Value *updated = accumulate->getResult(1);
  // Relu of a side-effect result: the result is pinned.
  Value *r =
      b.create({"", "Relu"}, {updated}, {f32({64})}, {}, "r")->getResult(0);
  Value *s = b.create({"", "Sigmoid"}, {r}, {f32({64})}, {}, "s")->getResult(0);
  graph.addOutput(s);
  graph.addOutput(accumulate->getResult(0));

  auto liveness = Liveness::compute(module);
  ASSERT_TRUE(bool(liveness));
  std::vector<InPlaceReuse> reuses = applyInPlaceReuse(*liveness);
  auto id = [&](const Value *value) { return *liveness->lookup(value); };
  EXPECT_TRUE(liveness->isPinned(id(updated)));
  EXPECT_EQ(liveness->getOwner(id(twice)), id(twice));
  EXPECT_EQ(liveness->getOwner(id(r)), id(r));
  EXPECT_TRUE(reuses.empty());
}

} // namespace
