//===- BroadcastWalk.h - Which axes a broadcast's gradients sum -*- C++ -*-===//
//
// ONNX Runtime's BroadcastGradientArgs, written once: walking two shapes
// from their last dimensions, each aligned pair is the same, broadcast on
// one side (that side's gradient sums over it), incompatible, or not
// decidable yet; the leading dimensions only the longer shape has are
// summed by the shorter one's gradient. The shape evaluator (ShapeEval.h)
// runs it over static shapes, constant shape propagation over symbolic
// elements, the gradient rules over types, and the CUDA kernel over shapes
// it reads on the device, so the walk is a GMOPT_HD template over the
// dimension type with no LLVM dependence.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_BROADCASTWALK_H
#define GMOPT_IR_OPS_BROADCASTWALK_H

#include "backend/HostDevice.h"

#include <cstdint>

namespace gmopt {
namespace ops {

/// How one right-aligned pair of dimensions broadcasts, as a gradient sees
/// it.
enum class BroadcastPair : int32_t {
  /// Equal: neither side's gradient sums over it.
  Same,
  /// a is 1 and b is not: a's gradient sums over it.
  ReduceA,
  /// b is 1 and a is not: b's gradient sums over it.
  ReduceB,
  /// The extents differ and neither is 1.
  Incompatible,
  /// Not decidable yet (symbolic extents).
  Unknown,
};

/// The pair rule over static extents.
GMOPT_HD BroadcastPair classifyBroadcastPair(int64_t a, int64_t b) {
  if (a == b)
    return BroadcastPair::Same;
  if (a == 1)
    return BroadcastPair::ReduceA;
  if (b == 1)
    return BroadcastPair::ReduceB;
  return BroadcastPair::Incompatible;
}

/// Walks shapes \p a (\p aRank dimensions) and \p b from the last axis of
/// their broadcast to the first: \p classify(a[i], b[j]) decides each
/// aligned pair and \p push(toA, axis) receives each summed axis in that
/// order. Returns Same when the walk finished, or the pair (Incompatible,
/// Unknown) that stopped it.
template <typename DimT, typename ClassifyFn, typename PushFn>
GMOPT_HD BroadcastPair walkBroadcastGradientAxes(const DimT *a, int64_t aRank,
                                                 const DimT *b, int64_t bRank,
                                                 ClassifyFn classify,
                                                 PushFn push) {
  int64_t i = aRank - 1, j = bRank - 1;
  int64_t k = (aRank > bRank ? aRank : bRank) - 1;
  for (; i >= 0 && j >= 0; --i, --j, --k) {
    BroadcastPair pair = classify(a[i], b[j]);
    if (pair == BroadcastPair::Same)
      continue;
    if (pair == BroadcastPair::ReduceA)
      push(true, k);
    else if (pair == BroadcastPair::ReduceB)
      push(false, k);
    else
      return pair;
  }
  for (; k >= 0; --k)
    push(i < 0, k);
  return BroadcastPair::Same;
}

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_BROADCASTWALK_H
