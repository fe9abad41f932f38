//===- CudaGemmBatchPlanTest.cpp - Broadcast MatMul batches on cuBLASLt ---===//
//
// The CUDA MatMul runs a broadcast batch as strided-batched GEMM calls
// (backend/cuda/GemmBatchPlan.h). These host tests enumerate, for many pairs
// of operand shapes (batch ranks 0-4, 1-D operands, extents 0-3, both
// sides broadcasting), every product the planned calls issue and compare it
// with a brute-force enumeration of numpy broadcasting: each output matrix
// is written exactly once, from the A and B matrices numpy pairs with it.
// Shapes that do not broadcast are refused.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/GemmBatchPlan.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace gmopt::cuda;

namespace {

using Shape = std::vector<int64_t>;

std::string shapeText(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

/// numpy's pairing of A and B matrices for each output matrix of a matrix
/// product, in output order; false when the batches do not broadcast.
bool numpyPairs(const Shape &a, const Shape &b,
                std::vector<std::pair<int64_t, int64_t>> &pairs) {
  Shape batchA = a.size() > 2 ? Shape(a.begin(), a.end() - 2) : Shape();
  Shape batchB = b.size() > 2 ? Shape(b.begin(), b.end() - 2) : Shape();
  size_t rank = std::max(batchA.size(), batchB.size());
  batchA.insert(batchA.begin(), rank - batchA.size(), 1);
  batchB.insert(batchB.begin(), rank - batchB.size(), 1);
  Shape batchY(rank);
  int64_t total = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (batchA[i] != batchB[i] && batchA[i] != 1 && batchB[i] != 1)
      return false;
    batchY[i] = batchA[i] == 1 ? batchB[i] : batchA[i];
    total *= batchY[i];
  }
  pairs.clear();
  for (int64_t y = 0; y < total; ++y) {
    // Row-major coordinates of y; each operand's matrix index.
    int64_t rest = y, indexA = 0, indexB = 0, scaleA = 1, scaleB = 1;
    for (size_t i = rank; i-- > 0;) {
      int64_t coordinate = rest % batchY[i];
      rest /= batchY[i];
      indexA += (batchA[i] == 1 ? 0 : coordinate) * scaleA;
      indexB += (batchB[i] == 1 ? 0 : coordinate) * scaleB;
      scaleA *= batchA[i];
      scaleB *= batchB[i];
    }
    pairs.emplace_back(indexA, indexB);
  }
  return true;
}

void expectPlanIsNumpy(const Shape &a, const Shape &b) {
  SCOPED_TRACE(shapeText(a) + " x " + shapeText(b));
  std::vector<std::pair<int64_t, int64_t>> expected;
  bool broadcasts = numpyPairs(a, b, expected);
  GemmBatchRuns runs;
  ASSERT_EQ(planGemmBatch(a, b, runs), broadcasts);
  if (!broadcasts)
    return;
  ASSERT_LE(runs.outerRank, GemmBatchRuns::kMaxOuterRank);
  std::vector<int> written(expected.size(), 0);
  int64_t calls = runs.calls();
  if (expected.empty()) {
    EXPECT_EQ(calls * runs.count, 0);
  }
  // Every call's base pointer keeps the alignment cuBLASLt is told of
  // (matrices of 6, 12 and 64 bytes).
  uint32_t alignA = runs.baseAlignment(0, 6),
           alignB = runs.baseAlignment(1, 12),
           alignY = runs.baseAlignment(2, 64);
  for (int64_t call = 0; call < calls; ++call) {
    GemmCallBase base = runs.base(call);
    EXPECT_EQ(base.a * 6 % alignA, 0) << "call " << call;
    EXPECT_EQ(base.b * 12 % alignB, 0) << "call " << call;
    EXPECT_EQ(base.y * 64 % alignY, 0) << "call " << call;
    for (int64_t i = 0; i < runs.count; ++i) {
      int64_t y = base.y + i * runs.strideY;
      ASSERT_GE(y, 0);
      ASSERT_LT(y, static_cast<int64_t>(expected.size()));
      ++written[y];
      EXPECT_EQ(base.a + i * runs.strideA, expected[y].first)
          << "A of output matrix " << y;
      EXPECT_EQ(base.b + i * runs.strideB, expected[y].second)
          << "B of output matrix " << y;
    }
  }
  for (size_t y = 0; y < written.size(); ++y)
    EXPECT_EQ(written[y], 1) << "output matrix " << y;
}

TEST(CudaGemmBatchPlanTest, NamedShapes) {
  expectPlanIsNumpy({3, 1, 6, 5}, {2, 5, 7});
  expectPlanIsNumpy({6, 5}, {5, 7});
  expectPlanIsNumpy({5}, {5});
  expectPlanIsNumpy({5}, {2, 3, 5, 7});
  expectPlanIsNumpy({4, 2, 6, 5}, {5});
  expectPlanIsNumpy({2, 3, 6, 5}, {2, 3, 5, 7});
  expectPlanIsNumpy({2, 1, 4, 1, 6, 5}, {1, 3, 1, 5, 5, 7});
  expectPlanIsNumpy({2, 0, 6, 5}, {1, 5, 7});
  expectPlanIsNumpy({2, 3, 6, 5}, {3, 2, 5, 7});
}

TEST(CudaGemmBatchPlanTest, RunsAreAsLongAsTheStridesAllow) {
  // [3,1] x [2]: A repeats along the inner dimension, B along the outer.
  GemmBatchRuns runs;
  ASSERT_TRUE(planGemmBatch({3, 1, 6, 5}, {2, 5, 7}, runs));
  EXPECT_EQ(runs.count * runs.calls(), 6);
  EXPECT_EQ(runs.count, 3);
  EXPECT_EQ(runs.baseAlignment(1, 4 * 35), 4u);
  EXPECT_EQ(runs.baseAlignment(1, 256), 256u);
  // Equal batches merge into one call; so does a batch over one matrix.
  ASSERT_TRUE(planGemmBatch({2, 3, 4, 6, 5}, {2, 3, 4, 5, 7}, runs));
  EXPECT_EQ(runs.count, 24);
  EXPECT_EQ(runs.calls(), 1);
  ASSERT_TRUE(planGemmBatch({2, 3, 4, 6, 5}, {5, 7}, runs));
  EXPECT_EQ(runs.count, 24);
  EXPECT_EQ(runs.strideB, 0);
  EXPECT_EQ(runs.calls(), 1);
  // No batch: one call of one product.
  ASSERT_TRUE(planGemmBatch({6}, {6, 7}, runs));
  EXPECT_EQ(runs.count, 1);
  EXPECT_EQ(runs.calls(), 1);
}

TEST(CudaGemmBatchPlanTest, RandomShapesAreNumpy) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> rankOf(0, 4), extentOf(0, 3), coin(0, 9);
  for (int trial = 0; trial < 3000; ++trial) {
    // Batch ranks 0-4; occasionally a 1-D operand. Extents 0-3, mostly
    // shared so that most pairs broadcast.
    int rank = rankOf(rng);
    Shape common(rank);
    for (int64_t &d : common)
      d = coin(rng) == 0 ? extentOf(rng) : 1 + extentOf(rng) % 3;
    auto operand = [&](bool left) {
      if (coin(rng) == 0)
        return Shape{3};
      int own = std::min(rank, rankOf(rng));
      Shape shape(common.end() - own, common.end());
      for (int64_t &d : shape) {
        int pick = coin(rng);
        if (pick < 3)
          d = 1;
        else if (pick == 3)
          d = extentOf(rng);
      }
      shape.push_back(left ? 2 : 3);
      shape.push_back(left ? 3 : 4);
      return shape;
    };
    Shape a = operand(true), b = operand(false);
    expectPlanIsNumpy(a, b);
    if (HasFatalFailure() || HasNonfatalFailure())
      return;
  }
}

TEST(CudaGemmBatchPlanTest, RefusesWhatDoesNotBroadcast) {
  GemmBatchRuns runs;
  EXPECT_FALSE(planGemmBatch({2, 6, 5}, {3, 5, 7}, runs));
  EXPECT_FALSE(planGemmBatch({}, {5, 7}, runs));
  EXPECT_FALSE(planGemmBatch({4, 2, 6, 5}, {3, 1, 5, 7}, runs));
}

} // namespace
