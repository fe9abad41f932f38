//===- ScatterReductionTest.cpp - How a scatter combines updates ----------===//
//
// ops::getScatterReduction, the one reading of ScatterElements' and
// ScatterND's `reduction` (the CPU kernels and the CUDA plan read it), and
// backend/ScatterMath.h's combineScatter, which both backends' scatters
// apply per element.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "backend/ScatterMath.h"
#include "ir/ops/ScatterReduction.h"

#include <cmath>
#include <cstdint>

using namespace gmopt;
using namespace gmopt::test;
using ops::ScatterReduction;

namespace {

using ScatterReductionTest = OpTest;

TEST_F(ScatterReductionTest, ReadsEveryValueAndDefaultsToNone) {
  module.opsetImports[""] = 18;
  Value *data = input("f32[4]"), *indices = input("i64[2]"),
        *updates = input("f32[2]");
  auto none = ops::getScatterReduction(
      *make(onnxOp("ScatterElements"), {data, indices, updates}));
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_EQ(*none, ScatterReduction::None);
  for (auto [name, expected] : {std::pair{"none", ScatterReduction::None},
                                std::pair{"add", ScatterReduction::Add},
                                std::pair{"mul", ScatterReduction::Mul},
                                std::pair{"max", ScatterReduction::Max},
                                std::pair{"min", ScatterReduction::Min}}) {
    auto read = ops::getScatterReduction(
        *make(onnxOp("ScatterND"), {data, indices, updates}, 1,
              {stringAttr("reduction", name)}));
    ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
    EXPECT_EQ(*read, expected) << name;
  }
  auto bad = ops::getScatterReduction(*make(onnxOp("ScatterElements"),
                                            {data, indices, updates}, 1,
                                            {stringAttr("reduction", "mean")}));
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "unknown reduction 'mean'");
}

TEST(ScatterMathTest, CombinesInTheElementType) {
  EXPECT_EQ(combineScatter(ScatterReduction::None, 3.0f, 5.0f), 5.0f);
  EXPECT_EQ(combineScatter(ScatterReduction::Add, 3.0f, 5.0f), 8.0f);
  EXPECT_EQ(combineScatter(ScatterReduction::Mul, 3.0f, 5.0f), 15.0f);
  EXPECT_EQ(combineScatter(ScatterReduction::Max, 3.0f, 5.0f), 5.0f);
  EXPECT_EQ(combineScatter(ScatterReduction::Min, 3.0f, 5.0f), 3.0f);
  EXPECT_EQ(combineScatter<int64_t>(ScatterReduction::Mul, -4, 3), -12);
  // A NaN update loses a comparison: max and min keep the target.
  float nan = std::nanf("");
  EXPECT_EQ(combineScatter(ScatterReduction::Max, 2.0f, nan), 2.0f);
  EXPECT_EQ(combineScatter(ScatterReduction::Min, 2.0f, nan), 2.0f);
}

} // namespace
