//===- GemmBatchPlan.h - Broadcast batches as GEMM calls ----*- C++ -*-===//
//
// Host code (every build, no CUDA header) that splits the numpy-broadcast
// batch of a MatMul or FusedMatMul into strided-batched GEMM calls that
// cuBLASLt runs: each call is `count` products whose A, B and Y matrices
// advance by one stride each (0 for an operand broadcast along that run),
// and the calls differ only in their base matrices, which an outer loop on
// the host walks. The output's batch dimensions of extent 1 are dropped and
// neighbours whose three strides line up are merged; the largest merged
// dimension becomes the run, the others the outer loop. Everything is
// counted in matrices: the caller scales by the operands' matrix sizes.
// Used by CudaMatMul.cpp and tested against a brute-force enumeration of
// numpy broadcasting (tests/unit/CudaGemmBatchPlanTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_GEMMBATCHPLAN_H
#define GMOPT_BACKEND_CUDA_GEMMBATCHPLAN_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// The base matrices (indices into each operand's batch) of one GEMM call.
struct GemmCallBase {
  int64_t a = 0, b = 0, y = 0;
};

/// A broadcast batch as `calls()` strided-batched GEMM calls of `count`
/// products each.
struct GemmBatchRuns {
  /// Most outer-loop dimensions (after merging) a plan may have.
  static constexpr int kMaxOuterRank = 8;
  /// Products per call (0 when the output batch is empty).
  int64_t count = 1;
  /// Matrices between consecutive products of a call, for A, B and Y.
  int64_t strideA = 0, strideB = 0, strideY = 0;
  /// The outer loop: its extents and, per dimension, the matrices A, B and
  /// Y advance by between calls.
  int32_t outerRank = 0;
  int64_t outerExtent[kMaxOuterRank] = {};
  int64_t outerStrideA[kMaxOuterRank] = {};
  int64_t outerStrideB[kMaxOuterRank] = {};
  int64_t outerStrideY[kMaxOuterRank] = {};

  /// The number of calls (0 when the output batch is empty).
  int64_t calls() const;
  /// The base matrices of call \p call, in [0, calls()).
  GemmCallBase base(int64_t call) const;
  /// The largest power of two up to \p limit that divides the byte offset
  /// of every call's base matrix of operand \p operand (0: A, 1: B, 2: Y),
  /// whose matrices are \p matrixBytes long: what cuBLASLt may assume of
  /// the calls' pointers beyond the operand's own alignment.
  uint32_t baseAlignment(int operand, int64_t matrixBytes,
                         uint32_t limit = 256) const;
};

/// Plans the batch of a matrix product of operands shaped \p shapeA and \p
/// shapeB (ONNX MatMul's numpy semantics: a 1-D A is a row, a 1-D B a
/// column, neither has batch dimensions; the batches before the last two
/// dimensions broadcast). False when the batches do not broadcast, an
/// operand has no dimension, or the outer loop would need more than
/// kMaxOuterRank dimensions.
bool planGemmBatch(llvm::ArrayRef<int64_t> shapeA,
                   llvm::ArrayRef<int64_t> shapeB, GemmBatchRuns &runs);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_GEMMBATCHPLAN_H
