//===- LossReductionTest.cpp - How a loss combines its samples ------------===//
//
// ops::getLossReduction, the one reading of the classification losses'
// `reduction` that shape inference, the gradient rule, the CPU kernels and
// the CUDA plan share: its default, its three values and the one error.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/LossReduction.h"

using namespace gmopt;
using namespace gmopt::test;
using ops::LossReduction;

namespace {

using LossReductionTest = OpTest;

TEST_F(LossReductionTest, DefaultsToMeanAndReadsEveryValue) {
  Value *scores = input("f32[4,3]"), *labels = input("i64[4]");
  auto byDefault = ops::getLossReduction(
      *make(onnxOp("NegativeLogLikelihoodLoss"), {scores, labels}));
  ASSERT_TRUE(bool(byDefault)) << llvm::toString(byDefault.takeError());
  EXPECT_EQ(*byDefault, LossReduction::Mean);
  for (auto [name, expected] : {std::pair{"none", LossReduction::None},
                                std::pair{"sum", LossReduction::Sum},
                                std::pair{"mean", LossReduction::Mean}}) {
    auto read = ops::getLossReduction(
        *make(msOp("SoftmaxCrossEntropyLossInternal"), {scores, labels}, 2,
              {stringAttr("reduction", name)}));
    ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
    EXPECT_EQ(*read, expected) << name;
  }
  auto bad = ops::getLossReduction(*make(onnxOp("SoftmaxCrossEntropyLoss"),
                                         {scores, labels}, 1,
                                         {stringAttr("reduction", "max")}));
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "reduction must be none, sum or mean, got 'max'");
}

} // namespace
