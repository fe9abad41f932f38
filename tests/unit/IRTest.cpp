//===- IRTest.cpp - Unit tests of values, nodes, graphs and types ---------===//
//
// Use-def list maintenance, replaceAllUsesWith, erasure, node motion,
// subgraph cloning, the builder's insertion point, and the printed form of
// tensor types.
//
//===----------------------------------------------------------------------===//

#include "ir/IR.h"
#include "ir/Module.h"

#include "gtest/gtest.h"

#include <limits>

using namespace gmopt;

namespace {

OpName onnx(llvm::StringRef type) { return {"", type.str()}; }

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

TEST(TypesTest, PrintsHloLikeShapes) {
  EXPECT_EQ(f32({4, 784}).str(), "f32[4,784]");
  EXPECT_EQ(TensorType::get(DType::BF16, {}).str(), "bf16[]");
  EXPECT_EQ(TensorType::unranked(DType::I64).str(), "i64[*]");
  TensorType symbolic(DType::F16, {Dim::symbolic("batch"), Dim::fixed(3),
                                   Dim::unknown(), Dim::symbolic("seq len")});
  EXPECT_EQ(symbolic.str(), "f16[batch,3,?,\"seq len\"]");
  EXPECT_FALSE(symbolic.hasStaticShape());
  EXPECT_TRUE(f32({2, 3}).hasStaticShape());
  EXPECT_EQ(f32({2, 3}).getSizeInBytes(), 24u);
  EXPECT_EQ(TensorType::get(DType::I4, {3}).getSizeInBytes(), 2u);
}

TEST(TypesTest, DTypeNamesRoundTrip) {
  for (unsigned i = 0; i <= kMaxDType; ++i) {
    DType type = static_cast<DType>(i);
    auto parsed = parseDType(dtypeName(type));
    ASSERT_TRUE(parsed.has_value()) << i;
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_FALSE(parseDType("f33").has_value());
  EXPECT_FALSE(dtypeFromOnnx(99).has_value());
  EXPECT_EQ(dtypeFromOnnx(16), DType::BF16);
}

TEST(AttributeTest, TensorDataSharesBytesAndReadsElements) {
  TensorData data =
      TensorData::fromValues<int64_t>(DType::I64, {3}, {4, -1, 7});
  TensorData copy = data;
  EXPECT_EQ(copy.getBytes().data(), data.getBytes().data());
  EXPECT_EQ(data.getIntValues(), (std::vector<int64_t>{4, -1, 7}));
  EXPECT_EQ(data, copy);

  uint16_t halfOne = 0x3c00, bfloatTwo = 0x4000;
  TensorData half =
      TensorData::fromValues<uint16_t>(DType::F16, {1}, {halfOne});
  TensorData bf =
      TensorData::fromValues<uint16_t>(DType::BF16, {1}, {bfloatTwo});
  EXPECT_EQ(half.getFloatElement(0), 1.0);
  EXPECT_EQ(bf.getFloatElement(0), 2.0);
}

TEST(AttributeTest, FloatEqualityIsBitwise) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Attribute::getFloat(nan), Attribute::getFloat(nan));
  EXPECT_NE(Attribute::getFloat(0.0f), Attribute::getFloat(-0.0f));
  EXPECT_NE(Attribute::getInt(1), Attribute::getFloat(1.0f));
  EXPECT_EQ(Attribute::getInts({1, 2}), Attribute::getInts({1, 2}));
}

class GraphTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    x = graph().addInput(f32({4}), "x");
    y = graph().addInput(f32({4}), "y");
  }
  Graph &graph() { return module.getGraph(); }

  Module module;
  Value *x = nullptr;
  Value *y = nullptr;
};

TEST_F(GraphTest, UseListsTrackOperandsAndOutputs) {
  Builder b(graph());
  Node *add = b.create(onnx("Add"), {x, y}, {f32({4})});
  Node *mul = b.create(onnx("Mul"), {add->getResult(0), x}, {f32({4})});
  graph().addOutput(mul->getResult(0));

  EXPECT_EQ(x->getNumUses(), 2u);
  EXPECT_EQ(y->getNumUses(), 1u);
  EXPECT_TRUE(add->getResult(0)->hasOneUse());
  EXPECT_TRUE(mul->getResult(0)->isGraphOutput());
  EXPECT_EQ(x->getUsers().size(), 2u);

  mul->setOperand(1, y);
  EXPECT_EQ(x->getNumUses(), 1u);
  EXPECT_EQ(y->getNumUses(), 2u);
}

TEST_F(GraphTest, SameValueTwiceIsTwoUsesOneUser) {
  Builder b(graph());
  Node *square = b.create(onnx("Mul"), {x, x}, {f32({4})});
  EXPECT_EQ(x->getNumUses(), 2u);
  EXPECT_EQ(x->getUsers().size(), 1u);
  EXPECT_EQ(x->getUsers()[0], square);
}

TEST_F(GraphTest, ReplaceAllUsesWithMovesEveryUseIncludingOutputs) {
  Builder b(graph());
  Node *relu = b.create(onnx("Relu"), {x}, {f32({4})});
  Node *neg = b.create(onnx("Neg"), {relu->getResult(0)}, {f32({4})});
  graph().addOutput(relu->getResult(0));
  relu->getResult(0)->replaceAllUsesWith(y);
  EXPECT_TRUE(relu->getResult(0)->useEmpty());
  EXPECT_EQ(neg->getOperand(0), y);
  EXPECT_EQ(graph().getOutput(0), y);
  graph().eraseNode(relu);
  EXPECT_EQ(graph().getNumNodes(), 1u);
}

TEST_F(GraphTest, EraseUnlinksOperands) {
  Builder b(graph());
  Node *add = b.create(onnx("Add"), {x, y}, {f32({4})});
  EXPECT_EQ(x->getNumUses(), 1u);
  graph().eraseNode(add);
  EXPECT_TRUE(x->useEmpty());
  EXPECT_TRUE(y->useEmpty());
  graph().removeValue(y);
  EXPECT_EQ(graph().getInputs().size(), 1u);
}

TEST_F(GraphTest, RemoveValuesTakesInputsAndInitializersInOnePass) {
  std::vector<Value *> doomed;
  std::vector<std::string> kept;
  for (int i = 0; i < 100; ++i) {
    Value *init = graph().addInitializer(
        TensorData::fromValues<float>(DType::F32, {1}, {float(i)}),
        "w" + std::to_string(i));
    if (i % 3)
      doomed.push_back(init);
    else
      kept.push_back(init->getName().str());
  }
  doomed.push_back(y);
  graph().removeValues(doomed);
  ASSERT_EQ(graph().getInputs().size(), 1u);
  EXPECT_EQ(graph().getInputs()[0].get(), x);
  std::vector<std::string> left;
  for (const auto &init : graph().getInitializers())
    left.push_back(init->getName().str());
  EXPECT_EQ(left, kept); // Order kept.
  EXPECT_EQ(graph().lookupValue("w1"), nullptr);
}

TEST_F(GraphTest, BuilderRespectsInsertionPoint) {
  Builder b(graph());
  Node *last = b.create(onnx("Relu"), {x}, {f32({4})}, {}, "last");
  b.setInsertionPoint(last);
  Node *first = b.create(onnx("Neg"), {x}, {f32({4})}, {}, "first");
  b.setInsertionPointAfter(first);
  Node *middle = b.create(onnx("Abs"), {x}, {f32({4})}, {}, "middle");
  std::vector<std::string> order;
  for (Node &node : graph().getNodes())
    order.push_back(node.getName().str());
  EXPECT_EQ(order, (std::vector<std::string>{"first", "middle", "last"}));
  graph().moveNode(first, graph().end());
  EXPECT_EQ(&graph().getNodes().back(), first);
  (void)middle;
}

TEST_F(GraphTest, OptionalOperandsAndResults) {
  Builder b(graph());
  Node *dropout = b.create(onnx("Dropout"), {x, nullptr, nullptr},
                           {f32({4}), TensorType::get(DType::Bool, {4})});
  EXPECT_EQ(dropout->getOperand(1), nullptr);
  graph().dropResult(dropout, 1);
  EXPECT_EQ(dropout->getResult(1), nullptr);
  EXPECT_EQ(dropout->getNumResults(), 2u);
  Value *mask = graph().ensureResult(dropout, 1);
  EXPECT_EQ(mask->getDefiningNode(), dropout);
  EXPECT_EQ(mask->getResultIndex(), 1u);
}

TEST_F(GraphTest, CloneRemapsInternalValuesOnly) {
  Builder b(graph());
  Node *relu = b.create(onnx("Relu"), {x}, {f32({4})}, {}, "relu");
  Node *add =
      b.create(onnx("Add"), {relu->getResult(0), y}, {f32({4})}, {}, "add");
  add->setAttr("tag", Attribute::getString("keep"));
  graph().addOutput(add->getResult(0));

  ValueMapping mapping;
  std::vector<Node *> clones =
      graph().cloneNodes({relu, add}, graph().end(), mapping);
  ASSERT_EQ(clones.size(), 2u);
  EXPECT_EQ(clones[0]->getOperand(0), x);
  EXPECT_EQ(clones[1]->getOperand(0), clones[0]->getResult(0));
  EXPECT_EQ(clones[1]->getOperand(1), y);
  EXPECT_EQ(mapping[relu->getResult(0)], clones[0]->getResult(0));
  EXPECT_EQ(clones[1]->getStringAttr("tag", ""), "keep");
  EXPECT_EQ(clones[1]->getResult(0)->getType(), f32({4}));
  EXPECT_EQ(x->getNumUses(), 2u);
}

TEST_F(GraphTest, SetOperandsChangesArity) {
  Builder b(graph());
  Node *sum = b.create(onnx("Sum"), {x}, {f32({4})});
  sum->setOperands({x, y, x});
  EXPECT_EQ(sum->getNumOperands(), 3u);
  EXPECT_EQ(x->getNumUses(), 2u);
  sum->setOperands({sum->getOperand(1)});
  EXPECT_EQ(sum->getNumOperands(), 1u);
  EXPECT_TRUE(x->useEmpty());
  EXPECT_EQ(y->getNumUses(), 1u);
}

TEST_F(GraphTest, RemoveOutputRenumbers) {
  graph().addOutput(x);
  graph().addOutput(y);
  graph().addOutput(x);
  graph().removeOutput(0);
  EXPECT_EQ(graph().getNumOutputs(), 2u);
  EXPECT_EQ(graph().getOutput(0), y);
  EXPECT_EQ(graph().getOutput(1), x);
  graph().setOutput(1, y);
  EXPECT_TRUE(x->useEmpty());
  EXPECT_EQ(y->getNumUses(), 2u);
}

TEST_F(GraphTest, LargeGraphTeardownIsClean) {
  Builder b(graph());
  Value *current = x;
  for (int i = 0; i < 10000; ++i)
    current = b.create(onnx("Relu"), {current}, {f32({4})})->getResult(0);
  graph().addOutput(current);
  EXPECT_EQ(graph().getNumNodes(), 10000u);
  EXPECT_EQ(graph().countValues(), 10002u);
}

} // namespace
