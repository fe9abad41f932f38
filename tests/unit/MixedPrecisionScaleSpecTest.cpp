//===- MixedPrecisionScaleSpecTest.cpp - MixedPrecisionScale's layout -----===//
//
// ops::getMixedPrecisionScaleSpec, which the CPU kernel and the CUDA plan
// read: one output per input, fuse_outputs' back-to-back layout, `to`, and
// the errors for a wrong output count or size.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/MixedPrecisionScaleSpec.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

using MixedPrecisionScaleSpecTest = OpTest;

TEST_F(MixedPrecisionScaleSpecTest, OneOutputPerInput) {
  Value *scale = input("f32[1]"), *a = input("f32[2,3]"), *b = input("f32[4]");
  Node *node =
      make(msOp("MixedPrecisionScale"), {scale, a, b}, 2, {intAttr("to", 10)});
  auto spec = ops::getMixedPrecisionScaleSpec(*node, {6, 4}, {6, 4});
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_FALSE(spec->fused);
  EXPECT_EQ(spec->to, DType::F16);
  ASSERT_EQ(spec->tensors.size(), 2u);
  EXPECT_EQ(spec->tensors[1].result, 1u);
  EXPECT_EQ(spec->tensors[1].offset, 0u);
  EXPECT_EQ(spec->tensors[1].elements, 4u);
  auto wrongSize = ops::getMixedPrecisionScaleSpec(*node, {6, 4}, {6, 5});
  ASSERT_FALSE(bool(wrongSize));
  EXPECT_EQ(llvm::toString(wrongSize.takeError()),
            "output 1 has the wrong size");
  auto tooFew = ops::getMixedPrecisionScaleSpec(*node, {6, 4}, {6});
  ASSERT_FALSE(bool(tooFew));
  EXPECT_EQ(llvm::toString(tooFew.takeError()),
            "needs one output per scaled input");
}

TEST_F(MixedPrecisionScaleSpecTest, FusedOutputsLieBackToBack) {
  Value *scale = input("f32[1]"), *a = input("f32[2,3]"), *b = input("f32[4]");
  Node *node = make(msOp("MixedPrecisionScale"), {scale, a, b}, 1,
                    {intAttr("fuse_outputs", 1)});
  auto spec = ops::getMixedPrecisionScaleSpec(*node, {6, 4}, {10});
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_TRUE(spec->fused);
  EXPECT_FALSE(spec->to.has_value());
  EXPECT_EQ(spec->tensors[0].offset, 0u);
  EXPECT_EQ(spec->tensors[1].result, 0u);
  EXPECT_EQ(spec->tensors[1].offset, 6u);
  auto tooLarge = ops::getMixedPrecisionScaleSpec(*node, {6, 4}, {11});
  ASSERT_FALSE(bool(tooLarge));
  EXPECT_EQ(llvm::toString(tooLarge.takeError()),
            "fused output size differs from the inputs' total");
}

} // namespace
