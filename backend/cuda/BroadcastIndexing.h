//===- BroadcastIndexing.h - Index arithmetic of CUDA kernels ---*- C++ -*-===//
//
// How the CUDA elementwise, strided-copy, Where and comparison kernels map
// the linear index of an iteration to each operand's element: extents of
// the (collapsed) iteration space and per-slot element strides, 0 where an
// operand is broadcast. Plain data and one `__host__ __device__` function,
// with no CUDA header, so host tests check the arithmetic the kernels run
// (tests/unit/CudaIndexingTest.cpp). IndexingPlan.h builds it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_BROADCASTINDEXING_H
#define GMOPT_BACKEND_CUDA_BROADCASTINDEXING_H

#include "backend/cuda/ElementwiseMath.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Most dimensions a broadcast or a strided tensor may have.
constexpr int kMaxRank = 8;

/// Index arithmetic of an n-ary broadcast: the iteration extents and, per
/// operand (0-2) and for the output (3), the element stride along each
/// dimension (0 where an operand is broadcast). Dimensions are collapsed by
/// the host first.
struct BroadcastIndexing {
  /// The slot of the output's strides.
  static constexpr int kOutput = 3;
  int32_t rank = 0;
  int64_t extent[kMaxRank] = {};
  int64_t stride[4][kMaxRank] = {};
  /// True when the slot is contiguous in iteration order (stride[.][0] is
  /// then 1), or a scalar (stride[.][0] is 0): no index arithmetic.
  bool flat[4] = {true, true, true, true};
};

/// The element offset of iteration \p linear in slot \p slot.
GMOPT_HD int64_t operandOffset(const BroadcastIndexing &ix, int slot,
                               int64_t linear) {
  if (ix.flat[slot])
    return ix.stride[slot][0] ? linear : 0;
  int64_t offset = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t extent = ix.extent[d];
    int64_t coordinate = linear % extent;
    linear /= extent;
    offset += coordinate * ix.stride[slot][d];
  }
  return offset;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_BROADCASTINDEXING_H
