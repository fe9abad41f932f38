//===- PadMath.h - Source indices of Pad's reflect, edge, wrap --*- C++ -*-===//
//
// The index arithmetic of the CUDA Pad kernel for modes reflect, edge and
// wrap: each output element reads one input element, found dimension by
// dimension from its output coordinate shifted by the leading pad
// (negative pads crop) with padSourceCoordinate, the function the CPU
// backend's Pad kernel calls too (backend/WindowMath.h). Written as
// `__host__ __device__` functions with no CUDA header, so host tests run
// them element by element against the CPU kernel
// (tests/unit/CudaPadTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_PADMATH_H
#define GMOPT_BACKEND_CUDA_PADMATH_H

#include "backend/WindowMath.h"
#include "backend/cuda/BroadcastIndexing.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

// The element arithmetic is the CPU kernel's, in backend/WindowMath.h.
using gmopt::PadMode;

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
