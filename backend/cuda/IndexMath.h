//===- IndexMath.h - Index arithmetic of the CUDA indexing kernels -*- C++ -*-===//
//
// The per-element index arithmetic of GatherElements, ScatterElements,
// GatherElementsGrad, GatherND, ScatterND and GatherNDGrad (the scatter
// reductions are backend/ScatterMath.h's), as __host__ __device__ code:
// IndexKernels.cu runs it on the device and tests/unit/CudaIndexTest.cpp runs
// the same functions on the host against the CPU backend's kernels
// (backend/cpu/GatherKernels.cpp). Negative indices count from the end; an
// index still outside [0, extent) after that is reported invalid and the
// kernels raise a device fault for it instead of touching memory.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_INDEXMATH_H
#define GMOPT_BACKEND_CUDA_INDEXMATH_H

#include "backend/ScatterMath.h"
#include "backend/cuda/ElementwiseMath.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// The largest rank the element and ND indexing kernels handle.
constexpr int kMaxIndexRank = 8;

/// Wraps a negative \p index by \p extent; false when it stays out of range.
GMOPT_HD bool wrapIndexInto(int64_t &index, int64_t extent) {
  if (index < 0)
    index += extent;
  return index >= 0 && index < extent;
}

/// GatherElements / ScatterElements / GatherElementsGrad: the indices'
/// shape, data's contiguous strides and the axis.
struct ElementIndexing {
  int32_t rank = 0;
  int32_t axis = 0;
  int64_t extent = 0;
  int64_t indexShape[kMaxIndexRank] = {};
  int64_t dataStrides[kMaxIndexRank] = {};
};

/// The offset in data of indices element \p linear with its axis
/// coordinate set to 0.
GMOPT_HD int64_t elementBaseOffset(const ElementIndexing &g, int64_t linear) {
  int64_t base = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    int64_t c = linear % g.indexShape[d];
    linear /= g.indexShape[d];
    if (d != g.axis)
      base += c * g.dataStrides[d];
  }
  return base;
}

/// The data offset indices element \p linear (holding \p index) addresses;
/// false (and \p offset untouched) when the index is out of range.
GMOPT_HD bool elementOffset(const ElementIndexing &g, int64_t linear,
                            int64_t index, int64_t &offset) {
  if (!wrapIndexInto(index, g.extent))
    return false;
  offset = elementBaseOffset(g, linear) + index * g.dataStrides[g.axis];
  return true;
}

/// GatherND / ScatterND / GatherNDGrad over data seen as [batches,
/// batchSize]: each batch has `tuples` index tuples of `depth` entries, each
/// addressing a block of `block` elements.
struct NDIndexing {
  int64_t batches = 1, tuples = 0, depth = 0, block = 1, batchSize = 1;
  /// The extents the tuple entries index and their strides in blocks.
  int64_t extents[kMaxIndexRank] = {};
  int64_t strides[kMaxIndexRank] = {};
};

/// The data element offset of tuple \p tupleLinear (batch * tuples + t)
/// whose entries are \p tuple; false when an entry is out of range.
template <typename I>
GMOPT_HD bool ndBlockOffset(const NDIndexing &g, int64_t tupleLinear,
                            const I *tuple, int64_t &offset) {
  int64_t within = 0;
  for (int64_t j = 0; j < g.depth; ++j) {
    int64_t index = static_cast<int64_t>(tuple[j]);
    if (!wrapIndexInto(index, g.extents[j]))
      return false;
    within += index * g.strides[j];
  }
  offset = (tupleLinear / g.tuples) * g.batchSize + within * g.block;
  return true;
}

/// How a scatter combines an update with its target (ONNX `reduction`,
/// ir/ops/ScatterReduction.h).
using ScatterOp = ops::ScatterReduction;

/// The combination, the CPU kernel's (backend/ScatterMath.h).
using ::gmopt::combineScatter;

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_INDEXMATH_H
