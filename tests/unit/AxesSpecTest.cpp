//===- AxesSpecTest.cpp - The one reading of axis attributes --------------===//
//
// ir/ops/Axes.h, which shape inference, the shape folder and both backends
// read: negative axes and the range check with its one message, the
// softmax family's two axis conventions (before opset 13 and in ONNX
// Runtime's grads without _13: coerced to 2-D at axis, default 1; from 13
// and in the _13 grads: the one dimension axis, default -1) and
// Shape-15's clamped [start, end).
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/Axes.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

using AxesSpecTest = OpTest;

TEST(AxesTest, NormalizeAxisAcceptsMinusRankToRankMinusOne) {
  EXPECT_EQ(ops::normalizeAxis(0, 3), 0u);
  EXPECT_EQ(ops::normalizeAxis(2, 3), 2u);
  EXPECT_EQ(ops::normalizeAxis(-1, 3), 2u);
  EXPECT_EQ(ops::normalizeAxis(-3, 3), 0u);
  EXPECT_EQ(ops::normalizeAxis(3, 3), std::nullopt);
  EXPECT_EQ(ops::normalizeAxis(-4, 3), std::nullopt);
  EXPECT_EQ(ops::normalizeAxis(0, 0), std::nullopt);
  auto bad = ops::checkAxis(-5, 4, "perm entry");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "perm entry -5 is out of range for rank 4");
  auto good = ops::checkAxis(-2, 4);
  ASSERT_TRUE(bool(good));
  EXPECT_EQ(*good, 2u);
}

TEST_F(AxesSpecTest, SoftmaxFromOpset13RunsAlongOneAxis) {
  module.opsetImports[""] = 13;
  Node *node = make(onnxOp("Softmax"), {input("f32[2,3,4]")});
  EXPECT_FALSE(ops::isCoercedSoftmax(*node));
  EXPECT_EQ(ops::getSoftmaxAxisAttr(*node), -1);
  auto axes = ops::getSoftmaxAxes(*node, {2, 3, 4});
  ASSERT_TRUE(bool(axes)) << llvm::toString(axes.takeError());
  EXPECT_EQ(axes->axis, 2u);
  EXPECT_EQ(axes->outer, 6);
  EXPECT_EQ(axes->axisDim, 4);
  EXPECT_EQ(axes->inner, 1);
  Node *middle = make(onnxOp("LogSoftmax"), {input("f32[2,3,4]")}, 1,
                      {intAttr("axis", 1)});
  axes = ops::getSoftmaxAxes(*middle, {2, 3, 4});
  ASSERT_TRUE(bool(axes)) << llvm::toString(axes.takeError());
  EXPECT_EQ(axes->outer, 2);
  EXPECT_EQ(axes->axisDim, 3);
  EXPECT_EQ(axes->inner, 4);
}

TEST_F(AxesSpecTest, SoftmaxBeforeOpset13IsCoercedTo2D) {
  module.opsetImports[""] = 11;
  Node *node = make(onnxOp("Softmax"), {input("f32[2,3,4]")});
  EXPECT_TRUE(ops::isCoercedSoftmax(*node));
  EXPECT_EQ(ops::getSoftmaxAxisAttr(*node), 1);
  auto axes = ops::getSoftmaxAxes(*node, {2, 3, 4});
  ASSERT_TRUE(bool(axes)) << llvm::toString(axes.takeError());
  EXPECT_TRUE(axes->coerced2D);
  EXPECT_EQ(axes->outer, 2);
  EXPECT_EQ(axes->axisDim, 12);
  EXPECT_EQ(axes->inner, 1);
}

TEST_F(AxesSpecTest, SoftmaxGradsFollowTheirSuffix) {
  // The gradient ops' convention is their name's, whatever the opset.
  Value *dY = input("f32[2,3,4]"), *y = input("f32[2,3,4]");
  Node *old = make(msOp("SoftmaxGrad"), {dY, y});
  Node *newer = make(msOp("LogSoftmaxGrad_13"), {dY, y});
  EXPECT_TRUE(ops::isCoercedSoftmax(*old));
  EXPECT_FALSE(ops::isCoercedSoftmax(*newer));
  auto oldAxes = ops::getSoftmaxAxes(*old, {2, 3, 4});
  auto newAxes = ops::getSoftmaxAxes(*newer, {2, 3, 4});
  ASSERT_TRUE(bool(oldAxes) && bool(newAxes));
  EXPECT_EQ(oldAxes->axisDim, 12);
  EXPECT_EQ(newAxes->axisDim, 4);
}

TEST_F(AxesSpecTest, SoftmaxAxisErrorsAndScalars) {
  Node *node =
      make(onnxOp("Softmax"), {input("f32[2,3]")}, 1, {intAttr("axis", 2)});
  auto axes = ops::getSoftmaxAxes(*node, {2, 3});
  ASSERT_FALSE(bool(axes));
  EXPECT_EQ(llvm::toString(axes.takeError()),
            "axis 2 is out of range for rank 2");
  // A scalar is one row of one element, whatever the axis.
  auto scalar = ops::getSoftmaxAxes(*node, {});
  ASSERT_TRUE(bool(scalar)) << llvm::toString(scalar.takeError());
  EXPECT_EQ(scalar->outer * scalar->axisDim * scalar->inner, 1);
}

TEST_F(AxesSpecTest, SoftmaxAxisIsCheckedAgainstTheRankAlone) {
  // Shape inference and the gradient rules check the axis before any
  // extent is bound: the convention's default, normalized.
  module.opsetImports[""] = 11;
  Value *x = input("f32[2,3,4]");
  auto coerced = ops::getSoftmaxAxis(*make(onnxOp("Softmax"), {x}), 3);
  ASSERT_TRUE(bool(coerced)) << llvm::toString(coerced.takeError());
  EXPECT_EQ(*coerced, 1u);
  Value *dY = input("f32[2,3,4]");
  auto last = ops::getSoftmaxAxis(*make(msOp("SoftmaxGrad_13"), {dY, x}), 3);
  ASSERT_TRUE(bool(last)) << llvm::toString(last.takeError());
  EXPECT_EQ(*last, 2u);
  auto bad = ops::getSoftmaxAxis(
      *make(msOp("LogSoftmaxGrad"), {dY, x}, 1, {intAttr("axis", -4)}), 3);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "axis -4 is out of range for rank 3");
}

TEST_F(AxesSpecTest, ShapeSliceClampsNegativeAndLargeBounds) {
  Value *x = input("f32[2,3,4,5]");
  ops::ShapeSlice all = ops::getShapeSlice(*make(onnxOp("Shape"), {x}), 4);
  EXPECT_EQ(all.start, 0);
  EXPECT_EQ(all.end, 4);
  EXPECT_EQ(all.size(), 4);
  ops::ShapeSlice tail = ops::getShapeSlice(
      *make(onnxOp("Shape"), {x}, 1, {intAttr("start", -2)}), 4);
  EXPECT_EQ(tail.start, 2);
  EXPECT_EQ(tail.end, 4);
  ops::ShapeSlice clamped =
      ops::getShapeSlice(*make(onnxOp("Shape"), {x}, 1,
                               {intAttr("start", -10), intAttr("end", 10)}),
                         4);
  EXPECT_EQ(clamped.start, 0);
  EXPECT_EQ(clamped.end, 4);
  ops::ShapeSlice empty = ops::getShapeSlice(
      *make(onnxOp("Shape"), {x}, 1, {intAttr("start", 3), intAttr("end", 1)}),
      4);
  EXPECT_EQ(empty.size(), 0);
}

} // namespace
