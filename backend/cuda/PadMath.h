//===- PadMath.h - Source indices of Pad's reflect, edge, wrap --*- C++ -*-===//
//
// The index arithmetic of the CUDA Pad kernel for modes reflect, edge and
// wrap (ElementwiseKernels.cu): each output element reads one input
// element, found dimension by dimension from its output coordinate shifted
// by the leading pad (negative pads crop). Written once as `__host__
// __device__` functions with no CUDA header, so host tests run them element
// by element against the CPU backend's Pad kernel (padSource in
// backend/cpu/MovementKernels.cpp; tests/unit/CudaPadTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_PADMATH_H
#define GMOPT_BACKEND_CUDA_PADMATH_H

#include "backend/cuda/BroadcastIndexing.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Pad's mode attribute.
enum class PadMode : int32_t { Constant, Reflect, Edge, Wrap };

/// The source coordinate in [0, \p n) of coordinate \p coord of a padded
/// dimension of input extent \p n (the coordinate already shifted by the
/// leading pad), or -1 where constant mode pads. Reflect mirrors without
/// repeating the edge element (and repeats as often as the pads need);
/// edge repeats it; wrap is periodic. \p n must be positive unless the mode
/// is constant.
GMOPT_HD int64_t padSourceCoordinate(int64_t coord, int64_t n, PadMode mode) {
  if (coord >= 0 && coord < n)
    return coord;
  switch (mode) {
  case PadMode::Reflect: {
    if (n == 1)
      return 0;
    int64_t period = 2 * (n - 1);
    int64_t r = coord % period;
    if (r < 0)
      r += period;
    return r < n ? r : period - r;
  }
  case PadMode::Edge:
    return coord < 0 ? 0 : n - 1;
  case PadMode::Wrap: {
    int64_t r = coord % n;
    return r < 0 ? r + n : r;
  }
  default:
    return -1;
  }
}

/// The geometry of one Pad: the output extents, the input extents and
/// element strides, the leading pad per dimension, and the mode.
struct PadIndexing {
  int32_t rank = 0;
  PadMode mode = PadMode::Constant;
  int64_t outExtent[kMaxRank] = {};
  int64_t inExtent[kMaxRank] = {};
  int64_t inStride[kMaxRank] = {};
  int64_t begin[kMaxRank] = {};
};

/// The input element output element \p linear (row-major) reads, or -1
/// where constant mode pads.
GMOPT_HD int64_t padSourceOffset(const PadIndexing &ix, int64_t linear) {
  int64_t offset = 0;
  bool inside = true;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t coordinate = linear % ix.outExtent[d];
    linear /= ix.outExtent[d];
    int64_t source =
        padSourceCoordinate(coordinate - ix.begin[d], ix.inExtent[d], ix.mode);
    if (source < 0)
      inside = false;
    else
      offset += source * ix.inStride[d];
  }
  return inside ? offset : -1;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_PADMATH_H
