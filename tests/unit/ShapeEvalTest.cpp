//===- ShapeEvalTest.cpp - The one shape evaluator and ReduceAxes ---------===//
//
// ir/ops/ShapeEval.h, which shape inference, constant shape propagation,
// the shape folder, the gradient rules and both backends call: Reshape's
// target (copy, infer, allowzero and every error), broadcasting,
// BroadcastGradientArgs (static, and the walk over symbolic elements),
// Range's length (floats, exact int64 extremes), Expand, Tile, Squeeze,
// Unsqueeze and Concat shapes. And ir/ops/ReduceAxes.h: the reduction axes
// from the attribute or a constant operand, noop_with_empty_axes,
// keepdims, negative axes and the errors.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/ReduceAxes.h"
#include "ir/ops/ShapeEval.h"

#include <limits>

using namespace gmopt;
using namespace gmopt::test;

namespace {

using Ints = std::vector<int64_t>;

Ints ints(llvm::ArrayRef<int64_t> values) { return values.vec(); }

template <typename T> std::string failureOf(llvm::Expected<T> value) {
  if (value)
    return "";
  return llvm::toString(value.takeError());
}

TEST(ShapeEvalTest, ReshapeCopiesInfersAndHonoursAllowZero) {
  auto shape = ops::reshapeTarget({2, 3, 4}, {0, -1, 2}, false);
  ASSERT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  EXPECT_EQ(ints(*shape), (Ints{2, 6, 2}));
  // With allowzero a 0 is an extent: only an empty input reshapes to it.
  shape = ops::reshapeTarget({0, 3}, {0, 3}, true);
  ASSERT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  EXPECT_EQ(ints(*shape), (Ints{0, 3}));
  EXPECT_EQ(failureOf(ops::reshapeTarget({2, 3}, {0, 3}, true)),
            "cannot reshape [2,3] to [0,3]: element counts differ");
  shape = ops::reshapeTarget({}, {-1}, false);
  ASSERT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  EXPECT_EQ(ints(*shape), (Ints{1}));
}

TEST(ShapeEvalTest, ReshapeErrors) {
  EXPECT_EQ(failureOf(ops::reshapeTarget({4, 6}, {-1, -1}, false)),
            "shape contains more than one -1");
  EXPECT_EQ(failureOf(ops::reshapeTarget({4, 6}, {5, -1}, false)),
            "cannot reshape [4,6] to [5,-1]: 24 elements are not divisible "
            "by 5");
  EXPECT_EQ(failureOf(ops::reshapeTarget({4, 6}, {0, 0, 0}, false)),
            "shape element 2 is 0 (copy) but the input [4,6] has rank 2");
  EXPECT_EQ(failureOf(ops::reshapeTarget({4, 6}, {-2}, false)),
            "invalid shape element -2");
  EXPECT_EQ(failureOf(ops::reshapeTarget({0, 6}, {0, -1}, true)),
            "shape contains both 0 and -1 with allowzero=1");
  EXPECT_EQ(failureOf(ops::reshapeTarget({2, 0}, {-1, 0}, false)),
            "cannot reshape [2,0] to [-1,0]: 0 elements are not divisible "
            "by 0");
  // The markers of elements not known yet (symbolic) are extents.
  auto kinds = ops::classifyReshapeTarget({std::nullopt, 0, -1}, false);
  ASSERT_TRUE(bool(kinds));
  EXPECT_EQ((*kinds)[0], ops::ReshapeElement::Extent);
  EXPECT_EQ((*kinds)[1], ops::ReshapeElement::Copy);
  EXPECT_EQ((*kinds)[2], ops::ReshapeElement::Infer);
}

TEST(ShapeEvalTest, BroadcastAndItsGradientAxes) {
  int64_t first[] = {3, 1}, second[] = {2, 1, 4}, third[] = {1};
  llvm::ArrayRef<int64_t> three[] = {first, second, third};
  auto shape = ops::broadcastStaticShapes(three);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(ints(*shape), (Ints{2, 3, 4}));
  EXPECT_EQ(failureOf(ops::broadcastStaticShapes({3}, {4})),
            "shapes [3] and [4] do not broadcast");

  // ONNX Runtime's order: from the last axis to the first.
  auto axes = ops::broadcastGradientArgs({2, 1, 4}, {3, 1});
  ASSERT_TRUE(bool(axes));
  EXPECT_EQ(ints(axes->a), (Ints{1}));
  EXPECT_EQ(ints(axes->b), (Ints{2, 0}));
  axes = ops::broadcastGradientArgs({5, 6}, {5, 6});
  ASSERT_TRUE(bool(axes));
  EXPECT_TRUE(axes->a.empty() && axes->b.empty());
  axes = ops::broadcastGradientArgs({}, {2, 3});
  ASSERT_TRUE(bool(axes));
  EXPECT_EQ(ints(axes->a), (Ints{1, 0}));
  EXPECT_EQ(failureOf(ops::broadcastGradientArgs({3}, {4})),
            "shapes [3] and [4] do not broadcast");

  // A walk over elements it cannot always decide stops with Unknown.
  std::string a[] = {"n", "1"}, b[] = {"m", "4"};
  auto classify = [](const std::string &x, const std::string &y) {
    if (x == y)
      return ops::BroadcastPair::Same;
    if (x == "1")
      return ops::BroadcastPair::ReduceA;
    return ops::BroadcastPair::Unknown;
  };
  ops::GradientAxesResult walk = ops::walkBroadcastGradient(
      llvm::ArrayRef<std::string>(a), llvm::ArrayRef<std::string>(b), classify);
  EXPECT_EQ(walk.stop, ops::BroadcastPair::Unknown);
  EXPECT_EQ(ints(walk.axes.a), (Ints{1}));
}

TEST(ShapeEvalTest, RangeCountsFloatsAndExactIntegers) {
  EXPECT_EQ(ops::rangeCount(1.0f, 2.0f, 0.3f), 4);
  EXPECT_EQ(ops::rangeCount<int64_t>(10, 0, -3), 4);
  EXPECT_EQ(ops::rangeCount<int64_t>(0, 10, -1), 0);
  EXPECT_EQ(ops::rangeCount<int32_t>(0, 10, 5), 2);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Beyond 2^53 a double would round; the distance overflows int64.
  EXPECT_EQ(ops::rangeCount<int64_t>(0, (int64_t(1) << 60) + 1, 2),
            (int64_t(1) << 59) + 1);
  EXPECT_EQ(ops::rangeCount<int64_t>(kMax, kMin, kMin), 2);
  EXPECT_EQ(ops::rangeCount<int64_t>(kMin, kMax, 1), kMax);
  EXPECT_EQ(failureOf(ops::checkedRangeCount<int64_t>(0, 4, 0)),
            "delta must not be zero");
  EXPECT_EQ(ops::rangeCount(0.0, std::nan(""), 1.0), 0);
}

TEST(ShapeEvalTest, ExpandTileSqueezeUnsqueezeConcat) {
  auto shape = ops::expandShape({3, 1}, {2, 1, 4});
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{2, 3, 4}));
  EXPECT_EQ(failureOf(ops::expandShape({3}, {4})),
            "incompatible broadcast: cannot expand [3] to [4]");
  EXPECT_EQ(failureOf(ops::expandShape({3}, {-1})), "invalid shape element -1");

  shape = ops::tileShape({2, 3}, {3, 0});
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{6, 0}));
  EXPECT_EQ(failureOf(ops::tileShape({2, 3}, {1})),
            "repeats has 1 values but the input has rank 2");
  EXPECT_EQ(failureOf(ops::tileShape({2}, {-2})),
            "repeats value -2 is negative");

  shape = ops::unsqueezeShape({3}, {0, -1});
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{1, 3, 1}));
  EXPECT_EQ(failureOf(ops::unsqueezeShape({3}, {1, 1})),
            "axes contains axis 1 twice");
  EXPECT_EQ(failureOf(ops::unsqueezeShape({3}, {2})),
            "axes 2 is out of range for rank 2");

  shape = ops::squeezeShape({1, 3, 1}, std::nullopt);
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{3}));
  int64_t last[] = {-1};
  shape = ops::squeezeShape({1, 3, 1}, llvm::ArrayRef<int64_t>(last));
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{1, 3}));
  int64_t middle[] = {1};
  EXPECT_EQ(
      failureOf(ops::squeezeShape({1, 3}, llvm::ArrayRef<int64_t>(middle))),
      "cannot squeeze axis 1 of extent 3");

  int64_t left[] = {2, 3}, right[] = {2, 5};
  llvm::ArrayRef<int64_t> pieces[] = {left, right};
  shape = ops::concatShape(pieces, -1);
  ASSERT_TRUE(bool(shape));
  EXPECT_EQ(ints(*shape), (Ints{2, 8}));
  EXPECT_EQ(failureOf(ops::concatShape(pieces, 0)),
            "dimension 1 of input 1 is 5 but another input has 3");
  EXPECT_EQ(failureOf(ops::concatShape(pieces, 2)),
            "axis 2 is out of range for rank 2");
}

TEST(ShapeEvalTest, SplitSizesMustCoverTheAxis) {
  EXPECT_EQ(*ops::checkSplitSizes({2, 3}, 2, 1, 5), 5);
  EXPECT_EQ(*ops::checkSplitSizes({2, 3}, 2, 1, std::nullopt), 5);
  EXPECT_EQ(failureOf(ops::checkSplitSizes({2}, 2, 0, 2)),
            "split has 1 values but the node has 2 outputs");
  EXPECT_EQ(failureOf(ops::checkSplitSizes({3, -1}, 2, 0, 2)),
            "split size -1 is negative");
  EXPECT_EQ(failureOf(ops::checkSplitSizes({2, 4}, 2, 0, 7)),
            "split sizes sum to 6 but axis 0 has extent 7");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(failureOf(ops::checkSplitSizes({kMax, kMax}, 2, 0, std::nullopt)),
            "split sizes overflow");
}

TEST(ShapeEvalTest, CountElementsRefusesNegativeAndOverflow) {
  EXPECT_EQ(*ops::countElements({2, 3, 4}), 24);
  EXPECT_EQ(*ops::countElements({}), 1);
  EXPECT_FALSE(failureOf(ops::countElements({2, -1})).empty());
  EXPECT_FALSE(
      failureOf(ops::countElements({int64_t(1) << 40, int64_t(1) << 40}))
          .empty());
}

using ReduceAxesTest = OpTest;

TEST_F(ReduceAxesTest, AttributeAxesBeforeOpset18) {
  module.opsetImports[""] = 13;
  Node *node = make(onnxOp("ReduceMean"), {input("f32[2,3,4]")}, 1,
                    {intsAttr("axes", {-1, 0}), intAttr("keepdims", 0)});
  ops::ReduceSpec spec = ops::getReduceSpec(*node);
  EXPECT_FALSE(spec.axesFromOperand);
  EXPECT_FALSE(spec.keepDims);
  auto axes = ops::resolveStaticReduceAxes(*node, spec, 3);
  ASSERT_TRUE(bool(axes)) << llvm::toString(axes.takeError());
  ASSERT_TRUE(axes->has_value());
  EXPECT_EQ((*axes)->axes, (llvm::SmallVector<unsigned, 6>{0, 2}));
  EXPECT_EQ(ints((*axes)->resultShape({2, 3, 4})), (Ints{3}));
  EXPECT_EQ(ints((*axes)->keptShape({2, 3, 4})), (Ints{1, 3, 1}));
  EXPECT_EQ((*axes)->reducedCount({2, 3, 4}), 8);
}

TEST_F(ReduceAxesTest, OperandAxesEmptyListsAndNoop) {
  module.opsetImports[""] = 18;
  Node *node = make(onnxOp("ReduceSum"), {input("f32[2,3]"), i64s({1})});
  ops::ReduceSpec spec = ops::getReduceSpec(*node);
  EXPECT_TRUE(spec.axesFromOperand);
  auto axes = ops::resolveStaticReduceAxes(*node, spec, 2);
  ASSERT_TRUE(bool(axes) && axes->has_value());
  EXPECT_EQ(ints((*axes)->resultShape({2, 3})), (Ints{2, 1}));

  // An axes operand known only at run time resolves then.
  Node *dynamic =
      make(onnxOp("ReduceSum"), {input("f32[2,3]"), input("i64[1]")});
  auto none =
      ops::resolveStaticReduceAxes(*dynamic, ops::getReduceSpec(*dynamic), 2);
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(none->has_value());

  // No axes reduce everything, or nothing with noop_with_empty_axes.
  Node *all = make(onnxOp("ReduceSum"), {input("f32[2,3]")});
  auto every = ops::getReduceSpec(*all).resolve(2);
  ASSERT_TRUE(bool(every));
  EXPECT_EQ(ints(every->resultShape({2, 3})), (Ints{1, 1}));
  Node *noop = make(onnxOp("ReduceSum"), {input("f32[2,3]"), i64s({})}, 1,
                    {intAttr("noop_with_empty_axes", 1)});
  auto nothing = ops::getReduceSpec(*noop).resolve(2, {});
  ASSERT_TRUE(bool(nothing));
  EXPECT_TRUE(nothing->axes.empty());
  EXPECT_EQ(ints(nothing->resultShape({2, 3})), (Ints{2, 3}));
}

TEST_F(ReduceAxesTest, BadAxesAreErrors) {
  ops::ReduceSpec spec;
  spec.axesFromOperand = true;
  EXPECT_EQ(failureOf(spec.resolve(2, {2})),
            "axes 2 is out of range for rank 2");
  EXPECT_EQ(failureOf(spec.resolve(2, {1, -1})), "axes contains axis -1 twice");
}

TEST_F(ReduceAxesTest, ArgReduceHasOneAxisAndReadsAScalarAsOneLine) {
  Node *node = make(onnxOp("ArgMax"), {input("f32[2,3,4]")}, 1,
                    {intAttr("axis", -2), intAttr("keepdims", 0),
                     intAttr("select_last_index", 1)});
  ops::ArgReduceSpec spec = ops::getArgReduceSpec(*node);
  EXPECT_TRUE(spec.selectLastIndex);
  auto axes = spec.resolve(3);
  ASSERT_TRUE(bool(axes));
  EXPECT_EQ(axes->axes, (llvm::SmallVector<unsigned, 6>{1}));
  EXPECT_EQ(ints(axes->resultShape({2, 3, 4})), (Ints{2, 4}));
  spec.axis = -1;
  auto scalar = spec.resolve(0);
  ASSERT_TRUE(bool(scalar));
  EXPECT_TRUE(scalar->axes.empty());
  EXPECT_EQ(ints(scalar->resultShape({})), (Ints{}));
  spec.axis = 3;
  EXPECT_EQ(failureOf(spec.resolve(3)), "axis 3 is out of range for rank 3");
}

TEST_F(ReduceAxesTest, SqueezeAxesSourceAndAllowZeroFollowTheOpset) {
  module.opsetImports[""] = 11;
  Node *old =
      make(onnxOp("Squeeze"), {input("f32[1,3]")}, 1, {intsAttr("axes", {0})});
  ops::SqueezeAxesSource source = ops::getSqueezeAxesSource(*old);
  EXPECT_FALSE(source.fromOperand);
  EXPECT_TRUE(source.given);
  EXPECT_EQ(source.attrAxes, (Ints{0}));
  module.opsetImports[""] = 13;
  Node *newer = make(onnxOp("Unsqueeze"), {input("f32[3]"), i64s({0})});
  source = ops::getSqueezeAxesSource(*newer);
  EXPECT_TRUE(source.fromOperand && source.given);
  Node *all = make(onnxOp("Squeeze"), {input("f32[1,3]")});
  EXPECT_FALSE(ops::getSqueezeAxesSource(*all).given);
  module.opsetImports[""] = 14;
  Node *reshape = make(onnxOp("Reshape"), {input("f32[0,3]"), i64s({0, 3})}, 1,
                       {intAttr("allowzero", 1)});
  EXPECT_TRUE(ops::reshapeAllowsZero(*reshape));
}

} // namespace
