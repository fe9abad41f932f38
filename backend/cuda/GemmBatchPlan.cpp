//===- GemmBatchPlan.cpp - Broadcast batches as strided GEMM calls --------===//
//
// Splits a broadcast MatMul batch into strided-batched GEMM calls; see
// GemmBatchPlan.h.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/GemmBatchPlan.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

/// One dimension of the output batch with each operand's matrix stride.
struct BatchDim {
  int64_t extent = 1;
  int64_t strideA = 0, strideB = 0, strideY = 0;
};

/// The batch dimensions of an operand of rank \p rank after numpy's 1-D
/// promotion: all but the last two, none for a 1-D operand.
llvm::ArrayRef<int64_t> batchOf(llvm::ArrayRef<int64_t> shape) {
  return shape.size() <= 2 ? llvm::ArrayRef<int64_t>() : shape.drop_back(2);
}

} // namespace

int64_t GemmBatchRuns::calls() const {
  if (count == 0)
    return 0;
  int64_t total = 1;
  for (int d = 0; d < outerRank; ++d)
    total *= outerExtent[d];
  return total;
}

GemmCallBase GemmBatchRuns::base(int64_t call) const {
  GemmCallBase base;
  for (int d = outerRank - 1; d >= 0; --d) {
    int64_t coordinate = call % outerExtent[d];
    call /= outerExtent[d];
    base.a += coordinate * outerStrideA[d];
    base.b += coordinate * outerStrideB[d];
    base.y += coordinate * outerStrideY[d];
  }
  return base;
}

uint32_t GemmBatchRuns::baseAlignment(int operand, int64_t matrixBytes,
                                      uint32_t limit) const {
  const int64_t *strides = operand == 0   ? outerStrideA
                           : operand == 1 ? outerStrideB
                                          : outerStrideY;
  uint32_t alignment = limit;
  for (int d = 0; d < outerRank; ++d)
    while (alignment > 1 && (strides[d] * matrixBytes) % alignment != 0)
      alignment /= 2;
  return alignment;
}

bool cuda::planGemmBatch(llvm::ArrayRef<int64_t> shapeA,
                         llvm::ArrayRef<int64_t> shapeB, GemmBatchRuns &runs) {
  runs = GemmBatchRuns();
  if (shapeA.empty() || shapeB.empty())
    return false;
  llvm::ArrayRef<int64_t> batchA = batchOf(shapeA), batchB = batchOf(shapeB);
  size_t rank = std::max(batchA.size(), batchB.size());
  // Each operand's extent along output dimension i (1 where left-padded).
  auto extentOf = [rank](llvm::ArrayRef<int64_t> batch, size_t i) {
    size_t pad = rank - batch.size();
    return i < pad ? int64_t(1) : batch[i - pad];
  };
  llvm::SmallVector<BatchDim, 8> dims(rank);
  int64_t matricesA = 1, matricesB = 1, matricesY = 1;
  for (size_t i = rank; i-- > 0;) {
    int64_t a = extentOf(batchA, i), b = extentOf(batchB, i);
    if (a != b && a != 1 && b != 1)
      return false;
    BatchDim &dim = dims[i];
    dim.extent = a == 1 ? b : a;
    // An operand of extent 1 repeats its matrices along the dimension.
    dim.strideA = a == 1 ? 0 : matricesA;
    dim.strideB = b == 1 ? 0 : matricesB;
    dim.strideY = matricesY;
    matricesA *= a;
    matricesB *= b;
    matricesY *= dim.extent;
  }
  if (matricesY == 0) {
    runs.count = 0;
    return true;
  }
  // Drop extent-1 dimensions and merge an outer dimension into the inner
  // one it follows wherever all three strides continue the inner ones.
  llvm::SmallVector<BatchDim, 8> merged;
  for (size_t i = rank; i-- > 0;) {
    const BatchDim &dim = dims[i];
    if (dim.extent == 1)
      continue;
    if (!merged.empty()) {
      BatchDim &inner = merged.back();
      if (dim.strideA == inner.strideA * inner.extent &&
          dim.strideB == inner.strideB * inner.extent &&
          dim.strideY == inner.strideY * inner.extent) {
        inner.extent *= dim.extent;
        continue;
      }
    }
    merged.push_back(dim);
  }
  if (merged.empty())
    return true;
  // The longest dimension is the run; the others, outermost first, the loop.
  auto longest = std::max_element(
      merged.begin(), merged.end(),
      [](const BatchDim &x, const BatchDim &y) { return x.extent < y.extent; });
  runs.count = longest->extent;
  runs.strideA = longest->strideA;
  runs.strideB = longest->strideB;
  runs.strideY = longest->strideY;
  merged.erase(longest);
  if (merged.size() > static_cast<size_t>(GemmBatchRuns::kMaxOuterRank))
    return false;
  runs.outerRank = static_cast<int32_t>(merged.size());
  for (size_t i = 0; i < merged.size(); ++i) {
    // merged runs innermost first; the loop is outermost first.
    const BatchDim &dim = merged[merged.size() - 1 - i];
    runs.outerExtent[i] = dim.extent;
    runs.outerStrideA[i] = dim.strideA;
    runs.outerStrideB[i] = dim.strideB;
    runs.outerStrideY[i] = dim.strideY;
  }
  return true;
}
