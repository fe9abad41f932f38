//===- CanonicalizeTest.cpp - Unit tests of the canonicalize pass ---------===//
//
// Modules built with the Builder: dead-code elimination (and what it must
// keep: side effects, random ops, signature values, graph outputs),
// Identity removal with its naming rules and signature updates, Constant
// nodes becoming initializers, and shape folding that makes a Reshape
// static. The second half tests the folding kernels one op at a time,
// including the cases that must not fold (overflow, division by zero, out
// of range, too large, floating point).
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/Canonicalize.h"
#include "passes/PatternRewriter.h"
#include "passes/SignatureUtils.h"
#include "passes/transforms/ShapeFolding.h"

#include "ir/Module.h"
#include "ir/Verifier.h"

#include "gtest/gtest.h"

#include <limits>

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

class CanonicalizeTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    module.opsetImports["com.microsoft"] = 1;
  }

  Graph &graph() { return module.getGraph(); }

  Value *input(llvm::StringRef name, TensorType type) {
    return graph().addInput(std::move(type), name.str());
  }

  Value *i64Constant(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                     llvm::ArrayRef<int64_t> values) {
    return graph().addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, shape, values), name.str());
  }

  /// Appends a node whose result types come from inference; names result 0.
  Node *add(llvm::StringRef op, llvm::ArrayRef<Value *> operands,
            llvm::StringRef resultName,
            llvm::ArrayRef<NamedAttribute> attrs = {}, unsigned numResults = 1,
            llvm::StringRef domain = "") {
    Builder builder(graph());
    auto node = builder.createInferred({domain.str(), op.str()}, operands,
                                       numResults, attrs, resultName.str());
    EXPECT_TRUE(static_cast<bool>(node))
        << op.str() << ": " << errorText(node.takeError());
    if (!node)
      return nullptr;
    (*node)->getResult(0)->setName(resultName);
    return *node;
  }

  /// Runs canonicalize; the module must verify before and after.
  bool runPass(CanonicalizePass::Options options = {}) {
    EXPECT_EQ(errorText(verifyModule(module)), "<success>")
        << "before the pass";
    CanonicalizePass pass(options);
    llvm::Expected<bool> changed = pass.run(module, context);
    EXPECT_TRUE(static_cast<bool>(changed)) << errorText(changed.takeError());
    EXPECT_EQ(errorText(verifyModule(module)), "<success>") << "after the pass";
    return changed && *changed;
  }

  uint64_t stat(llvm::StringRef name) const {
    return context.getStatistic("canonicalize", name);
  }

  std::vector<std::string> opTypes() {
    std::vector<std::string> types;
    for (Node &node : graph())
      types.push_back(node.getOpType().str());
    return types;
  }

  Module module;
  PassContext context;
};

using Ops = std::vector<std::string>;

//===----------------------------------------------------------------------===//
// Dead-code elimination
//===----------------------------------------------------------------------===//

TEST_F(CanonicalizeTest, DeadChainIsErasedOutputProducersKept) {
  Value *x = input("x", f32({2, 3}));
  Node *relu = add("Relu", {x}, "a");
  add("Neg", {relu->getResult(0)}, "b");
  Node *sum = add("Add", {x, x}, "y");
  graph().addOutput(sum->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Add"});
  EXPECT_EQ(graph().getOutput(0), sum->getResult(0));
  EXPECT_EQ(stat("nodes-erased"), 2u);
  EXPECT_EQ(stat("identities-removed"), 0u);
}

TEST_F(CanonicalizeTest, SideEffectsAndRandomOpsSurvive) {
  Value *x = input("x", f32({2, 3}));
  Value *buffer = input("w_grad.accumulation.buffer", f32({2, 3}));
  Node *grad = add("Relu", {x}, "w_grad");
  add("InPlaceAccumulatorV2", {buffer, grad->getResult(0)}, "updated", {}, 1,
      kMsDomain);
  add("Dropout", {x}, "dropped", {}, 2)->setStreamId(1);
  Node *sum = add("Add", {x, x}, "y");
  graph().addOutput(sum->getResult(0));

  EXPECT_FALSE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Relu", "InPlaceAccumulatorV2", "Dropout", "Add"}));
  EXPECT_EQ(stat("nodes-erased"), 0u);
}

TEST_F(CanonicalizeTest, SignatureValuesAreLive) {
  Value *w = input("w", f32({2, 3}));
  Node *grad = add("Neg", {w}, "w_grad");
  Node *sum = add("Add", {w, w}, "y");
  graph().addOutput(sum->getResult(0));
  ParamInfo param;
  param.param = w;
  param.grad = grad->getResult(0);
  module.getSignature().appendParam(param);

  EXPECT_FALSE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Neg", "Add"}));
}

TEST_F(CanonicalizeTest, UnusedInitializersGoInputsStay) {
  Value *x = input("x", f32({2}));
  input("unused_input", f32({2}));
  i64Constant("unused_constant", {2}, {1, 2});
  Node *relu = add("Relu", {x}, "y");
  graph().addOutput(relu->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_TRUE(graph().getInitializers().empty());
  EXPECT_EQ(graph().getInputs().size(), 2u);
  EXPECT_EQ(stat("initializers-removed"), 1u);
}

//===----------------------------------------------------------------------===//
// Identity removal
//===----------------------------------------------------------------------===//

TEST_F(CanonicalizeTest, IdentityIsBypassed) {
  Value *x = input("x", f32({2, 3}));
  Node *relu = add("Relu", {x}, "a");
  add("Identity", {relu->getResult(0)}, "i");
  Node *neg = add("Neg", {graph().lookupValue("i")}, "y");
  graph().addOutput(neg->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Relu", "Neg"}));
  EXPECT_EQ(neg->getOperand(0), relu->getResult(0));
  EXPECT_EQ(stat("identities-removed"), 1u);
  EXPECT_EQ(stat("nodes-erased"), 1u);
}

TEST_F(CanonicalizeTest, IdentityFeedingAnOutputPassesItsNameOn) {
  Value *x = input("x", f32({2, 3}));
  Node *relu = add("Relu", {x}, "a");
  Node *identity = add("Identity", {relu->getResult(0)}, "y");
  graph().addOutput(identity->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Relu"});
  EXPECT_EQ(graph().getOutput(0), relu->getResult(0));
  EXPECT_EQ(relu->getResult(0)->getName(), "y");
}

TEST_F(CanonicalizeTest, IdentityOfAGraphInputFeedingAnOutputStays) {
  Value *x = input("x", f32({2, 3}));
  Node *identity = add("Identity", {x}, "y");
  graph().addOutput(identity->getResult(0));

  EXPECT_FALSE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Identity"});
  EXPECT_EQ(x->getName(), "x");
  EXPECT_EQ(graph().getOutput(0)->getName(), "y");
}

TEST_F(CanonicalizeTest, IdentityBetweenTwoOutputsStays) {
  Value *x = input("x", f32({2, 3}));
  Node *relu = add("Relu", {x}, "a");
  Node *identity = add("Identity", {relu->getResult(0)}, "b");
  graph().addOutput(relu->getResult(0));
  graph().addOutput(identity->getResult(0));

  EXPECT_FALSE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Relu", "Identity"}));
  EXPECT_EQ(graph().getOutput(0)->getName(), "a");
  EXPECT_EQ(graph().getOutput(1)->getName(), "b");
}

TEST_F(CanonicalizeTest, IdentityRemovalUpdatesTheSignature) {
  Value *x = input("x", f32({}));
  Node *relu = add("Relu", {x}, "raw_loss");
  Node *identity = add("Identity", {relu->getResult(0)}, "loss");
  Node *neg = add("Neg", {identity->getResult(0)}, "y");
  graph().addOutput(neg->getResult(0));
  module.getSignature().setLoss(identity->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(module.getSignature().getLoss(), relu->getResult(0));
}

TEST_F(CanonicalizeTest, GradientNamedBySignatureKeepsItsName) {
  Value *b = input("b", f32({4}));
  Value *buffer = input("b_grad.accumulation.buffer", f32({4}));
  Node *reduced = add("Neg", {b}, "dC_reduced");
  Node *identity = add("Identity", {reduced->getResult(0)}, "b_grad");
  Node *accumulate =
      add("InPlaceAccumulatorV2", {buffer, identity->getResult(0)}, "done", {},
          1, kMsDomain);
  graph().addOutput(accumulate->getResult(0));
  ParamInfo param;
  param.param = b;
  param.grad = identity->getResult(0);
  param.accumulator = buffer;
  param.accumulateNode = accumulate;
  module.getSignature().appendParam(param);

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Neg", "InPlaceAccumulatorV2"}));
  EXPECT_EQ(module.getSignature().getParams()[0].grad, reduced->getResult(0));
  EXPECT_EQ(reduced->getResult(0)->getName(), "b_grad");
  EXPECT_EQ(accumulate->getOperand(1), reduced->getResult(0));
}

TEST_F(CanonicalizeTest, UnusedIdentityNamedBySignatureIsReplacedThere) {
  Value *w = input("w", f32({2}));
  Node *grad = add("Neg", {w}, "raw");
  Node *identity = add("Identity", {grad->getResult(0)}, "w_grad");
  Node *relu = add("Relu", {w}, "y");
  graph().addOutput(relu->getResult(0));
  ParamInfo param;
  param.param = w;
  param.grad = identity->getResult(0);
  module.getSignature().appendParam(param);

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Neg", "Relu"}));
  EXPECT_EQ(module.getSignature().getParams()[0].grad, grad->getResult(0));
  EXPECT_EQ(grad->getResult(0)->getName(), "w_grad");
}

TEST_F(CanonicalizeTest, RewriterSignatureIndexFollowsReplacements) {
  Value *w = input("w", f32({2}));
  Value *buffer = input("w_grad.accumulation.buffer", f32({2}));
  Value *a = add("Neg", {w}, "a")->getResult(0);
  Value *b = add("Relu", {w}, "b")->getResult(0);
  Value *c = add("Abs", {w}, "c")->getResult(0);
  Node *accumulate =
      add("InPlaceAccumulatorV2", {buffer, a}, "done", {}, 1, kMsDomain);
  Node *sum = add("Add", {b, c}, "y");
  graph().addOutput(sum->getResult(0));
  ParamInfo param;
  param.param = w;
  param.grad = a;
  param.accumulator = buffer;
  param.accumulateNode = accumulate;
  module.getSignature().appendParam(param);
  module.getSignature().setLoss(c);

  PatternRewriter rewriter(module);
  EXPECT_TRUE(rewriter.isInSignature(w));
  EXPECT_TRUE(rewriter.isInSignature(a));
  EXPECT_TRUE(rewriter.isInSignature(buffer));
  EXPECT_TRUE(rewriter.isInSignature(c));
  EXPECT_FALSE(rewriter.isInSignature(b));
  EXPECT_FALSE(rewriter.isInSignature(static_cast<const Value *>(nullptr)));
  EXPECT_TRUE(rewriter.isInSignature(accumulate));
  EXPECT_FALSE(rewriter.isInSignature(sum));

  // A named value replaced: the signature and the index follow it.
  rewriter.replaceAllUsesWith(a, b);
  EXPECT_EQ(module.getSignature().getParams()[0].grad, b);
  EXPECT_EQ(accumulate->getOperand(1), b);
  EXPECT_FALSE(rewriter.isInSignature(a));
  EXPECT_TRUE(rewriter.isInSignature(b));
  // An unnamed value replaced by a formerly named one: nothing to update.
  Value *d = add("Sqrt", {w}, "d")->getResult(0);
  add("Neg", {d}, "e");
  rewriter.replaceAllUsesWith(d, a);
  EXPECT_EQ(module.getSignature().getParams()[0].grad, b);
  EXPECT_FALSE(rewriter.isInSignature(a));
  // A value named in two roles (gradient and loss) after replacement.
  rewriter.replaceAllUsesWith(b, c);
  EXPECT_EQ(module.getSignature().getParams()[0].grad, c);
  EXPECT_EQ(module.getSignature().getLoss(), c);
  EXPECT_TRUE(rewriter.isInSignature(c));
  EXPECT_FALSE(rewriter.isInSignature(b));
  for (const Value *value : {w, a, b, c, d, buffer})
    EXPECT_EQ(rewriter.isInSignature(value),
              isReferencedBySignature(module.getSignature(), value))
        << value->getName().str();
}

/// A broken pattern that claims a change every time it is asked.
class NeverConverges : public RewritePattern {
public:
  NeverConverges() : RewritePattern("never-converges") {}
  llvm::Expected<bool> matchAndRewrite(Node &node,
                                       PatternRewriter &) const override {
    return node.isa("", "Relu");
  }
};

TEST_F(CanonicalizeTest, GreedyDriverStopsPatternsThatNeverConverge) {
  Value *x = input("x", f32({2}));
  Node *relu = add("Relu", {x}, "y");
  graph().addOutput(relu->getResult(0));
  NeverConverges pattern;
  GreedyRewriteConfig config;
  config.maxRewrites = 10;
  auto result = applyPatternsGreedily(module, {&pattern}, config);
  ASSERT_FALSE(static_cast<bool>(result));
  EXPECT_EQ(llvm::toString(result.takeError()),
            "pattern rewriting did not converge after 10 rewrites (last: "
            "never-converges)");
}

//===----------------------------------------------------------------------===//
// Constants and shape folding
//===----------------------------------------------------------------------===//

class ShapeFoldingTest : public CanonicalizeTest {
protected:
  /// x -> Shape -> Gather(0) -> Unsqueeze -> Concat(.., [-1]) -> Reshape(x, .)
  /// with the Reshape result recorded as f32[?,?]; returns the Reshape.
  Node *buildFlatten(Value *x) {
    Node *shape = add("Shape", {x}, "shape");
    Node *dim0 = add(
        "Gather", {shape->getResult(0), i64Constant("zero", {}, {0})}, "dim0");
    Node *unsqueezed =
        add("Unsqueeze", {dim0->getResult(0), i64Constant("axes", {1}, {0})},
            "dim0_1d");
    Node *target =
        add("Concat",
            {unsqueezed->getResult(0), i64Constant("minus_one", {1}, {-1})},
            "target", {{"axis", Attribute::getInt(0)}});
    Builder builder(graph());
    Node *reshape = builder.create(
        {"", "Reshape"}, {x, target->getResult(0)},
        {TensorType(DType::F32, {Dim::unknown(), Dim::unknown()})}, {},
        "reshape");
    reshape->getResult(0)->setName("flat");
    graph().addOutput(reshape->getResult(0));
    return reshape;
  }
};

TEST_F(ShapeFoldingTest, ShapeArithmeticFoldsAndReshapeBecomesStatic) {
  Value *x = input("x", f32({2, 3, 4}));
  Node *reshape = buildFlatten(x);

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Reshape"});
  EXPECT_EQ(reshape->getResult(0)->getType(), f32({2, 12}));
  Value *target = reshape->getOperand(1);
  ASSERT_TRUE(target->isInitializer());
  EXPECT_EQ(target->getName(), "target");
  EXPECT_EQ(target->getData().getIntValues(), (std::vector<int64_t>{2, -1}));
  // Only the folded target is left; the inputs of the chain are gone.
  EXPECT_EQ(graph().getInitializers().size(), 1u);
  EXPECT_EQ(stat("constants-folded"), 4u);
  EXPECT_EQ(stat("nodes-erased"), 4u);
  EXPECT_GE(stat("types-refined"), 1u);

  // Canonical means a second run finds nothing to do.
  EXPECT_FALSE(runPass());
}

TEST_F(ShapeFoldingTest, SymbolicDimensionsAreNotFolded) {
  Value *x = input("x", TensorType(DType::F32, {Dim::symbolic("batch"),
                                                Dim::fixed(3), Dim::fixed(4)}));
  buildFlatten(x);

  runPass();
  EXPECT_EQ(opTypes(),
            (Ops{"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"}));
  EXPECT_EQ(stat("constants-folded"), 0u);
}

TEST_F(ShapeFoldingTest, ShapeSliceOfStaticDimsFoldsDespiteSymbolicOnes) {
  Value *x = input("x", TensorType(DType::F32, {Dim::symbolic("batch"),
                                                Dim::fixed(3), Dim::fixed(4)}));
  Value *scale = input("scale", TensorType::get(DType::I64, {2}));
  Node *tail = add("Shape", {x}, "tail", {{"start", Attribute::getInt(1)}});
  Node *product = add("Mul", {tail->getResult(0), scale}, "scaled");
  graph().addOutput(product->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Mul"});
  Value *folded = graph().lookupValue("tail");
  ASSERT_NE(folded, nullptr);
  ASSERT_TRUE(folded->isInitializer());
  EXPECT_EQ(folded->getData().getIntValues(), (std::vector<int64_t>{3, 4}));
}

TEST_F(ShapeFoldingTest, ConstantNodesBecomeInitializers) {
  Value *x = input("x", TensorType::get(DType::I64, {2}));
  Node *constant =
      add("Constant", {}, "c", {{"value_ints", Attribute::getInts({5, 6})}});
  Node *sum = add("Add", {x, constant->getResult(0)}, "y");
  graph().addOutput(sum->getResult(0));

  EXPECT_TRUE(runPass());
  EXPECT_EQ(opTypes(), Ops{"Add"});
  Value *c = sum->getOperand(1);
  ASSERT_TRUE(c->isInitializer());
  EXPECT_EQ(c->getName(), "c");
  EXPECT_EQ(c->getData().getIntValues(), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(stat("constant-nodes-converted"), 1u);
}

TEST_F(ShapeFoldingTest, FloatMathIsNeverFolded) {
  Value *a = graph().addInitializer(
      TensorData::fromValues<float>(DType::F32, {2}, {1.0f, 2.0f}), "a");
  Value *b = graph().addInitializer(
      TensorData::fromValues<float>(DType::F32, {2}, {3.0f, 4.0f}), "b");
  Node *sum = add("Add", {a, b}, "s");
  Node *relu = add("Relu", {sum->getResult(0)}, "y");
  graph().addOutput(relu->getResult(0));

  EXPECT_FALSE(runPass());
  EXPECT_EQ(opTypes(), (Ops{"Add", "Relu"}));
}

TEST_F(ShapeFoldingTest, OptionsSwitchRewritesOff) {
  Value *x = input("x", f32({2, 3, 4}));
  buildFlatten(x);
  Node *identity = add("Identity", {x}, "i");
  add("Neg", {identity->getResult(0)}, "dead");

  CanonicalizePass::Options noFolding;
  noFolding.foldConstants = false;
  noFolding.removeIdentity = false;
  EXPECT_TRUE(runPass(noFolding));
  // DCE removed the dead Neg and then the Identity that only it used.
  EXPECT_EQ(opTypes(),
            (Ops{"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"}));

  Node *dead = add("Neg", {x}, "dead2");
  CanonicalizePass::Options noDce;
  noDce.dce = false;
  EXPECT_TRUE(runPass(noDce));
  EXPECT_EQ(opTypes(), (Ops{"Reshape", "Neg"}));
  EXPECT_EQ(&*std::next(graph().begin()), dead);
  // Without DCE the chain's original constants stay.
  EXPECT_NE(graph().lookupValue("minus_one"), nullptr);
}

TEST_F(ShapeFoldingTest, FoldLimitIsRespected) {
  Value *x = input("x", f32({2, 3, 4}));
  buildFlatten(x);
  CanonicalizePass::Options tiny;
  tiny.maxFoldElements = 1;
  runPass(tiny);
  // Shape (3 elements) is over the limit; nothing downstream folds.
  EXPECT_EQ(stat("constants-folded"), 0u);
}

//===----------------------------------------------------------------------===//
// Folding kernels
//===----------------------------------------------------------------------===//

class FoldKernelTest : public CanonicalizeTest {
protected:
  /// Builds `op(operands)` and folds it.
  std::optional<TensorData> fold(llvm::StringRef op,
                                 llvm::ArrayRef<Value *> operands,
                                 llvm::ArrayRef<NamedAttribute> attrs = {},
                                 ShapeFoldLimits limits = {}) {
    Builder builder(graph());
    Node *node =
        builder.create({"", op.str()}, operands, {TensorType()}, attrs);
    std::vector<const TensorData *> constants;
    for (Value *operand : operands)
      constants.push_back(operand && operand->hasData() ? &operand->getData()
                                                        : nullptr);
    return foldShapeNode(*node, constants, limits);
  }

  Value *i64(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> values) {
    return i64Constant("", shape, values);
  }

  static std::vector<int64_t> values(const std::optional<TensorData> &data) {
    return data ? data->getIntValues() : std::vector<int64_t>{-999};
  }
};

TEST_F(FoldKernelTest, SliceWithNegativeStepAndClamping) {
  Value *data = i64({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto result = fold("Slice", {data, i64({1}, {-1}), i64({1}, {-100}),
                               i64({1}, {0}), i64({1}, {-3})});
  EXPECT_EQ(values(result), (std::vector<int64_t>{9, 6, 3, 0}));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->getType(), TensorType::get(DType::I64, {4}));
}

TEST_F(FoldKernelTest, SliceOneAxisOfAMatrix) {
  Value *data = i64({2, 3}, {0, 1, 2, 3, 4, 5});
  auto result = fold("Slice", {data, i64({1}, {1}),
                               i64({1}, {std::numeric_limits<int64_t>::max()}),
                               i64({1}, {-1})});
  EXPECT_EQ(values(result), (std::vector<int64_t>{1, 2, 4, 5}));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->getType(), TensorType::get(DType::I64, {2, 2}));
  // A zero step is invalid: not folded.
  EXPECT_FALSE(fold("Slice", {data, i64({1}, {0}), i64({1}, {2}), i64({1}, {0}),
                              i64({1}, {0})}));
}

TEST_F(FoldKernelTest, GatherNegativeAndOutOfRangeIndices) {
  Value *data = i64({3}, {10, 20, 30});
  EXPECT_EQ(values(fold("Gather", {data, i64({2}, {-1, 0})})),
            (std::vector<int64_t>{30, 10}));
  EXPECT_FALSE(fold("Gather", {data, i64({1}, {3})}));
  Value *matrix = i64({2, 2}, {1, 2, 3, 4});
  auto column =
      fold("Gather", {matrix, i64({}, {1})}, {{"axis", Attribute::getInt(1)}});
  EXPECT_EQ(values(column), (std::vector<int64_t>{2, 4}));
  ASSERT_TRUE(column);
  EXPECT_EQ(column->getType(), TensorType::get(DType::I64, {2}));
}

TEST_F(FoldKernelTest, ArithmeticBroadcastsTruncatesAndRefusesOverflow) {
  EXPECT_EQ(values(fold("Div", {i64({2}, {-7, 7}), i64({2}, {2, -2})})),
            (std::vector<int64_t>{-3, -3}));
  EXPECT_FALSE(fold("Div", {i64({1}, {1}), i64({1}, {0})}));
  EXPECT_EQ(values(fold("Sub", {i64({2, 1}, {10, 20}), i64({2}, {1, 2})})),
            (std::vector<int64_t>{9, 8, 19, 18}));
  EXPECT_FALSE(fold(
      "Mul", {i64({}, {std::numeric_limits<int64_t>::max()}), i64({}, {2})}));
  Value *big32 = graph().addInitializer(
      TensorData::fromValues<int32_t>(DType::I32, {1},
                                      {std::numeric_limits<int32_t>::max()}),
      "");
  Value *one32 = graph().addInitializer(
      TensorData::fromValues<int32_t>(DType::I32, {1}, {1}), "");
  EXPECT_FALSE(fold("Add", {big32, one32}));
  // Mismatched element types are not folded.
  EXPECT_FALSE(fold("Add", {i64({1}, {1}), one32}));
}

TEST_F(FoldKernelTest, RangeCountsUpAndDown) {
  EXPECT_EQ(values(fold("Range", {i64({}, {0}), i64({}, {10}), i64({}, {3})})),
            (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(values(fold("Range", {i64({}, {5}), i64({}, {0}), i64({}, {-2})})),
            (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(values(fold("Range", {i64({}, {5}), i64({}, {0}), i64({}, {2})})),
            std::vector<int64_t>{});
  EXPECT_FALSE(fold("Range", {i64({}, {0}), i64({}, {4}), i64({}, {0})}));
  EXPECT_FALSE(fold("Range", {i64({}, {0}), i64({}, {2000}), i64({}, {1})}));
}

TEST_F(FoldKernelTest, EqualAndWhere) {
  auto equal = fold("Equal", {i64({3}, {1, 2, 3}), i64({3}, {1, 0, 3})});
  ASSERT_TRUE(equal);
  EXPECT_EQ(equal->getType(), TensorType::get(DType::Bool, {3}));
  EXPECT_EQ(values(equal), (std::vector<int64_t>{1, 0, 1}));
  Value *condition = graph().addInitializer(*equal, "condition");
  EXPECT_EQ(
      values(fold("Where", {condition, i64({3}, {4, 5, 6}), i64({}, {7})})),
      (std::vector<int64_t>{4, 7, 6}));
}

TEST_F(FoldKernelTest, ConstantOfShapeNeedsAnIntegerValue) {
  Attribute seven = Attribute::getTensor(
      TensorData::fromValues<int64_t>(DType::I64, {1}, {7}));
  auto filled = fold("ConstantOfShape", {i64({2}, {2, 2})}, {{"value", seven}});
  EXPECT_EQ(values(filled), (std::vector<int64_t>{7, 7, 7, 7}));
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->getType(), TensorType::get(DType::I64, {2, 2}));
  // The default value is float zero: a float payload is never folded.
  EXPECT_FALSE(fold("ConstantOfShape", {i64({2}, {2, 2})}));
  Attribute half = Attribute::getTensor(
      TensorData::fromValues<float>(DType::F32, {1}, {0.5f}));
  EXPECT_FALSE(fold("ConstantOfShape", {i64({1}, {4})}, {{"value", half}}));
}

TEST_F(FoldKernelTest, SqueezeUnsqueezeReshapeAndCast) {
  auto unsqueezed = fold("Unsqueeze", {i64({2}, {1, 2}), i64({2}, {0, -1})});
  ASSERT_TRUE(unsqueezed);
  EXPECT_EQ(unsqueezed->getType(), TensorType::get(DType::I64, {1, 2, 1}));
  Value *column = i64({2, 1}, {1, 2});
  auto squeezed = fold("Squeeze", {column});
  ASSERT_TRUE(squeezed);
  EXPECT_EQ(squeezed->getType(), TensorType::get(DType::I64, {2}));
  EXPECT_FALSE(fold("Squeeze", {column, i64({1}, {0})}));

  Value *six = i64({6}, {0, 1, 2, 3, 4, 5});
  auto reshaped = fold("Reshape", {six, i64({2}, {-1, 3})});
  ASSERT_TRUE(reshaped);
  EXPECT_EQ(reshaped->getType(), TensorType::get(DType::I64, {2, 3}));
  EXPECT_FALSE(fold("Reshape", {six, i64({2}, {4, -1})}));

  auto narrowed = fold("Cast", {i64({2}, {1, -(int64_t(1) << 32) + 5})},
                       {{"to", Attribute::getInt(int64_t(DType::I32))}});
  ASSERT_TRUE(narrowed);
  EXPECT_EQ(narrowed->getType(), TensorType::get(DType::I32, {2}));
  EXPECT_EQ(values(narrowed), (std::vector<int64_t>{1, 5}));
  auto truth = fold("Cast", {i64({3}, {0, 2, -1})},
                    {{"to", Attribute::getInt(int64_t(DType::Bool))}});
  EXPECT_EQ(values(truth), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_FALSE(fold("Cast", {i64({1}, {1})},
                    {{"to", Attribute::getInt(int64_t(DType::F32))}}));
}

TEST_F(FoldKernelTest, ShapeAndSizeReadOnlyTheType) {
  Value *x = input("x", f32({2, 5}));
  EXPECT_EQ(values(fold("Shape", {x})), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(values(fold("Shape", {x}, {{"start", Attribute::getInt(-1)}})),
            std::vector<int64_t>{5});
  auto size = fold("Size", {x});
  ASSERT_TRUE(size);
  EXPECT_EQ(size->getType(), TensorType::get(DType::I64, {}));
  EXPECT_EQ(values(size), std::vector<int64_t>{10});
  Value *unranked = input("u", TensorType::unranked(DType::F32));
  EXPECT_FALSE(fold("Shape", {unranked}));
  EXPECT_FALSE(fold("Size", {unranked}));
}

TEST_F(FoldKernelTest, ConcatAlongAnAxis) {
  auto joined = fold("Concat", {i64({1, 2}, {1, 2}), i64({1, 1}, {3})},
                     {{"axis", Attribute::getInt(-1)}});
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->getType(), TensorType::get(DType::I64, {1, 3}));
  EXPECT_EQ(values(joined), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(fold("Concat", {i64({1, 2}, {1, 2}), i64({2, 1}, {3, 4})},
                    {{"axis", Attribute::getInt(1)}}));
}

} // namespace
