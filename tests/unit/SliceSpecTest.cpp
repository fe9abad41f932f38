//===- SliceSpecTest.cpp - The one reading of Slice's bounds --------------===//
//
// ops::resolveSlice, which the shape folder and the CPU Slice and SliceGrad
// kernels read: default axes and steps, negative indices, clamping on both
// sides, negative steps (down to INT64_MIN), empty extents, and the errors
// for lists of different lengths, bad or repeated axes and a zero step.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/SliceSpec.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

using Ints = std::vector<int64_t>;

Ints ints(llvm::ArrayRef<int64_t> values) { return Ints(values.vec()); }

std::string errorOf(llvm::Error err) { return llvm::toString(std::move(err)); }

TEST(SliceSpecTest, DefaultAxesAndStepsTakeTheLeadingDimensions) {
  auto spec = resolveSlice({4, 5, 6}, {1, -3}, {3, 100}, {}, {});
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  EXPECT_EQ(ints(spec->begin), (Ints{1, 2, 0}));
  EXPECT_EQ(ints(spec->step), (Ints{1, 1, 1}));
  EXPECT_EQ(ints(spec->shape), (Ints{2, 3, 6}));
}

TEST(SliceSpecTest, NamedAxesAndStepsWithClamping) {
  // Axis -1 from 1 by 2 up to the end; axis 0 from beyond its end
  // backwards by 3.
  auto spec = resolveSlice({4, 7}, {1, 10}, {100, -100}, {-1, 0}, {2, -3});
  ASSERT_TRUE(bool(spec)) << errorOf(spec.takeError());
  EXPECT_EQ(ints(spec->begin), (Ints{3, 1}));
  EXPECT_EQ(ints(spec->step), (Ints{-3, 2}));
  // Axis 0: indices 3, 0; axis 1: indices 1, 3, 5.
  EXPECT_EQ(ints(spec->shape), (Ints{2, 3}));
}

TEST(SliceSpecTest, EmptyRangesAndExtremeSteps) {
  auto empty = resolveSlice({0, 5}, {0, 4}, {-1, 1}, {}, {-1, 1});
  ASSERT_TRUE(bool(empty)) << errorOf(empty.takeError());
  EXPECT_EQ(ints(empty->shape), (Ints{0, 0}));
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  auto reversed = resolveSlice({5}, {-1}, {kMin}, {}, {kMin});
  ASSERT_TRUE(bool(reversed)) << errorOf(reversed.takeError());
  EXPECT_EQ(reversed->begin[0], 4);
  EXPECT_EQ(reversed->shape[0], 1);
}

TEST(SliceSpecTest, Errors) {
  EXPECT_EQ(errorOf(resolveSlice({4}, {0}, {1, 2}, {}, {}).takeError()),
            "starts, ends, axes and steps differ in length");
  EXPECT_EQ(errorOf(resolveSlice({4}, {0}, {1}, {0}, {1, 1}).takeError()),
            "starts, ends, axes and steps differ in length");
  EXPECT_EQ(errorOf(resolveSlice({4, 4}, {0}, {1}, {2}, {}).takeError()),
            "axes entry 2 is out of range for rank 2");
  EXPECT_EQ(
      errorOf(resolveSlice({4, 4}, {0, 0}, {1, 1}, {1, -1}, {}).takeError()),
      "repeated axis");
  EXPECT_EQ(errorOf(resolveSlice({4}, {0}, {1}, {}, {0}).takeError()),
            "steps must not be zero");
}

} // namespace
