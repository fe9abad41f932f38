//===- CudaIndexingTest.cpp - The CUDA kernels' index arithmetic ----------===//
//
// The elementwise, Where, comparison and strided-copy kernels find each
// operand's element with operandOffset over a BroadcastIndexing that the
// host collapsed (backend/cuda/IndexingPlan.h). These host tests run that
// same arithmetic over random shapes and compare every offset with a naive
// coordinate computation: numpy broadcasting of up to three operands,
// transposes (permuted strides), slices with positive and negative steps,
// Tile's repeat dimensions, Pad's overlap copy, and output strides that
// place a piece inside a larger tensor (Concat).
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/IndexingPlan.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <numeric>
#include <random>

using namespace gmopt::cuda;

namespace {

int64_t product(const IndexVector &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

/// The coordinates of row-major element \p linear of \p shape.
IndexVector unravel(int64_t linear, const IndexVector &shape) {
  IndexVector coordinates(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    coordinates[d] = linear % shape[d];
    linear /= shape[d];
  }
  return coordinates;
}

TEST(CudaIndexingTest, BroadcastOffsetsMatchNumpy) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    int rank = static_cast<int>(rng() % 6);
    IndexVector out(rank);
    for (int64_t &d : out)
      d = 1 + rng() % 4;
    // Up to three operands: trailing dimensions of out, some set to 1.
    int operands = 1 + static_cast<int>(rng() % 3);
    llvm::SmallVector<IndexVector, 3> shapes;
    llvm::SmallVector<IndexVector, 4> strides;
    for (int k = 0; k < operands; ++k) {
      int keep = static_cast<int>(rng() % (rank + 1));
      IndexVector shape(out.end() - keep, out.end());
      for (int64_t &d : shape)
        if (rng() % 3 == 0)
          d = 1;
      IndexVector s;
      ASSERT_TRUE(broadcastStrides(shape, out, s));
      shapes.push_back(shape);
      strides.push_back(s);
    }
    while (strides.size() < 3)
      strides.push_back(IndexVector(out.size(), 0));
    strides.push_back(contiguousStrides(out));
    BroadcastIndexing ix;
    ASSERT_TRUE(collapseIndexing(out, strides, ix));
    for (int64_t i = 0, n = product(out); i < n; ++i) {
      IndexVector coordinates = unravel(i, out);
      ASSERT_EQ(operandOffset(ix, BroadcastIndexing::kOutput, i), i);
      for (int k = 0; k < operands; ++k) {
        const IndexVector &shape = shapes[k];
        size_t lead = out.size() - shape.size();
        int64_t expected = 0;
        for (size_t d = 0; d < shape.size(); ++d)
          expected =
              expected * shape[d] + (shape[d] == 1 ? 0 : coordinates[lead + d]);
        ASSERT_EQ(operandOffset(ix, k, i), expected)
            << "trial " << trial << " operand " << k << " element " << i;
      }
    }
  }
}

TEST(CudaIndexingTest, NonBroadcastingShapesAreRefused) {
  IndexVector strides;
  EXPECT_FALSE(broadcastStrides({3}, {2, 4}, strides));
  EXPECT_FALSE(broadcastStrides({2, 2, 4}, {2, 4}, strides));
  EXPECT_TRUE(broadcastStrides({1, 4}, {2, 4}, strides));
  EXPECT_EQ(strides, (IndexVector{0, 1}));
}

TEST(CudaIndexingTest, TransposeOffsetsFollowThePermutation) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 5);
    IndexVector in(rank);
    for (int64_t &d : in)
      d = 1 + rng() % 4;
    IndexVector perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    IndexVector out, strides, inStrides = contiguousStrides(in);
    for (int64_t p : perm) {
      out.push_back(in[p]);
      strides.push_back(inStrides[p]);
    }
    BroadcastIndexing ix;
    ASSERT_TRUE(collapseIndexing(out,
                                 {strides, IndexVector(rank, 0),
                                  IndexVector(rank, 0), contiguousStrides(out)},
                                 ix));
    for (int64_t i = 0, n = product(out); i < n; ++i) {
      IndexVector coordinates = unravel(i, out);
      IndexVector source(rank);
      for (int d = 0; d < rank; ++d)
        source[perm[d]] = coordinates[d];
      int64_t expected = 0;
      for (int d = 0; d < rank; ++d)
        expected = expected * in[d] + source[d];
      ASSERT_EQ(operandOffset(ix, 0, i), expected) << "trial " << trial;
    }
  }
}

TEST(CudaIndexingTest, SliceOffsetsWithSteps) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 4);
    IndexVector in(rank), start(rank), step(rank), out(rank);
    for (int d = 0; d < rank; ++d) {
      in[d] = 1 + rng() % 6;
      step[d] = (rng() % 2 ? 1 : -1) * (1 + static_cast<int64_t>(rng() % 2));
      start[d] = step[d] > 0 ? rng() % in[d] : in[d] - 1 - rng() % in[d];
      int64_t span = step[d] > 0 ? in[d] - start[d] : start[d] + 1;
      int64_t magnitude = step[d] > 0 ? step[d] : -step[d];
      out[d] = (span + magnitude - 1) / magnitude;
    }
    // As CudaDispatch's Slice: base offset plus stepped strides.
    IndexVector inStrides = contiguousStrides(in), strides;
    int64_t base = 0;
    for (int d = 0; d < rank; ++d) {
      base += start[d] * inStrides[d];
      strides.push_back(inStrides[d] * step[d]);
    }
    BroadcastIndexing ix;
    ASSERT_TRUE(collapseIndexing(out,
                                 {strides, IndexVector(rank, 0),
                                  IndexVector(rank, 0), contiguousStrides(out)},
                                 ix));
    for (int64_t i = 0, n = product(out); i < n; ++i) {
      IndexVector coordinates = unravel(i, out);
      int64_t expected = 0;
      for (int d = 0; d < rank; ++d)
        expected = expected * in[d] + start[d] + coordinates[d] * step[d];
      ASSERT_EQ(base + operandOffset(ix, 0, i), expected) << "trial " << trial;
    }
  }
}

TEST(CudaIndexingTest, TileCopiesEveryOutputElementOnceFromItsSource) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 4);
    IndexVector in(rank), repeats(rank), out(rank);
    for (int d = 0; d < rank; ++d) {
      in[d] = 1 + rng() % 5;
      repeats[d] = rng() % 4; // 0 makes an empty output
      out[d] = in[d] * repeats[d];
    }
    BroadcastIndexing ix;
    ASSERT_TRUE(tileIndexing(in, repeats, ix)) << "trial " << trial;
    int64_t iterations = 1;
    for (int d = 0; d < ix.rank; ++d)
      iterations *= ix.extent[d];
    ASSERT_EQ(iterations, product(out)) << "trial " << trial;
    // Every output element is written once, from input element
    // (c[0] % in[0], c[1] % in[1], ...) of its coordinates c.
    std::vector<int> writes(static_cast<size_t>(product(out)), 0);
    for (int64_t i = 0; i < iterations; ++i) {
      int64_t target = operandOffset(ix, BroadcastIndexing::kOutput, i);
      ASSERT_GE(target, 0);
      ASSERT_LT(target, product(out));
      ++writes[static_cast<size_t>(target)];
      IndexVector coordinates = unravel(target, out);
      int64_t source = 0;
      for (int d = 0; d < rank; ++d)
        source = source * in[d] + coordinates[d] % in[d];
      ASSERT_EQ(operandOffset(ix, 0, i), source) << "trial " << trial;
    }
    EXPECT_TRUE(
        std::all_of(writes.begin(), writes.end(), [](int n) { return n == 1; }))
        << "trial " << trial;
  }
  // Mismatched ranks and negative repeats are refused.
  BroadcastIndexing ix;
  EXPECT_FALSE(tileIndexing({2, 3}, {2}, ix));
  EXPECT_FALSE(tileIndexing({2, 3}, {1, -1}, ix));
}

TEST(CudaIndexingTest, PadCopiesTheOverlapAndLeavesThePadding) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 4);
    IndexVector in(rank), begin(rank), out(rank);
    for (int d = 0; d < rank; ++d) {
      in[d] = 1 + rng() % 5;
      // Leading and trailing pads in [-2, 2]; negative crops.
      begin[d] = static_cast<int64_t>(rng() % 5) - 2;
      int64_t end = static_cast<int64_t>(rng() % 5) - 2;
      out[d] = std::max<int64_t>(in[d] + begin[d] + end, 0);
    }
    PadCopy copy;
    ASSERT_TRUE(padCopy(in, out, begin, copy));
    // As CudaDispatch's Pad: fill (-1 here), then the strided copy.
    std::vector<int64_t> result(static_cast<size_t>(product(out)), -1);
    if (product(copy.extents)) {
      BroadcastIndexing ix;
      ASSERT_TRUE(
          collapseIndexing(copy.extents,
                           {contiguousStrides(in), IndexVector(rank, 0),
                            IndexVector(rank, 0), contiguousStrides(out)},
                           ix));
      for (int64_t i = 0, n = product(copy.extents); i < n; ++i) {
        int64_t target =
            copy.outOffset + operandOffset(ix, BroadcastIndexing::kOutput, i);
        ASSERT_GE(target, 0);
        ASSERT_LT(target, product(out));
        result[static_cast<size_t>(target)] =
            copy.inOffset + operandOffset(ix, 0, i);
      }
    }
    for (int64_t o = 0, n = product(out); o < n; ++o) {
      IndexVector coordinates = unravel(o, out);
      int64_t expected = 0;
      for (int d = 0; d < rank && expected >= 0; ++d) {
        int64_t c = coordinates[d] - begin[d];
        expected = c < 0 || c >= in[d] ? -1 : expected * in[d] + c;
      }
      ASSERT_EQ(result[static_cast<size_t>(o)], expected)
          << "trial " << trial << " element " << o;
    }
  }
  PadCopy copy;
  EXPECT_FALSE(padCopy({2, 3}, {2}, {0, 0}, copy));
}

TEST(CudaIndexingTest, OutputStridesPlaceAPieceOfAConcat) {
  // [2, 3, 4] and [2, 5, 4] concatenated along axis 1 into [2, 8, 4].
  IndexVector out = {2, 8, 4};
  IndexVector outStrides = contiguousStrides(out);
  int64_t offset = 0;
  std::vector<int> owner(product(out), -1);
  int piece = 0;
  for (IndexVector in : {IndexVector{2, 3, 4}, IndexVector{2, 5, 4}}) {
    BroadcastIndexing ix;
    ASSERT_TRUE(collapseIndexing(in,
                                 {contiguousStrides(in), IndexVector(3, 0),
                                  IndexVector(3, 0), outStrides},
                                 ix));
    for (int64_t i = 0, n = product(in); i < n; ++i) {
      IndexVector c = unravel(i, in);
      int64_t target =
          offset + operandOffset(ix, BroadcastIndexing::kOutput, i);
      int64_t expected = (c[0] * 8 + (piece == 0 ? 0 : 3) + c[1]) * 4 + c[2];
      ASSERT_EQ(target, expected);
      ASSERT_EQ(operandOffset(ix, 0, i), i);
      owner[target] = piece;
    }
    offset += in[1] * outStrides[1];
    ++piece;
  }
  EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0)
      << "every output element is written once";
}

TEST(CudaIndexingTest, ScalarsAndEmptyRanks) {
  BroadcastIndexing ix;
  ASSERT_TRUE(collapseIndexing({}, {{}, {}, {}, {}}, ix));
  EXPECT_EQ(operandOffset(ix, 0, 0), 0);
  EXPECT_EQ(operandOffset(ix, BroadcastIndexing::kOutput, 0), 0);
  // A scalar operand against [3, 1, 5]: always element 0.
  IndexVector s;
  ASSERT_TRUE(broadcastStrides({}, {3, 1, 5}, s));
  ASSERT_TRUE(collapseIndexing(
      {3, 1, 5},
      {s, IndexVector(3, 0), IndexVector(3, 0), contiguousStrides({3, 1, 5})},
      ix));
  EXPECT_EQ(ix.rank, 1);
  for (int64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(operandOffset(ix, 0, i), 0);
    EXPECT_EQ(operandOffset(ix, BroadcastIndexing::kOutput, i), i);
  }
}

} // namespace
