//===- ShapeMath.h - Element arithmetic of the shape kernels ----*- C++ -*-===//
//
// The per-element arithmetic of Range, Trilu, OneHot, NonZero,
// com.microsoft BroadcastGradientArgs and Einsum on CUDA (ShapeKernels.cu),
// written once as `__host__ __device__` functions so host tests run it
// against the CPU kernels in backend/cpu/ShapeKernels.cpp, MovementKernels.cpp
// and MatMulKernels.cpp (tests/unit/CudaShapeTest.cpp). Scalars the CPU
// kernels read on the host (Range's start / limit / delta, Trilu's k,
// OneHot's depth and values) are read here on the device, with the CPU
// kernels' conversions; a value that contradicts the static output shape is
// a kernel fault, not a wrong answer.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_SHAPEMATH_H
#define GMOPT_BACKEND_CUDA_SHAPEMATH_H

#include "backend/RangeMath.h"
#include "backend/UnfusedMath.h"
#include "backend/cuda/ElementwiseMath.h"
#include "ir/ops/BroadcastWalk.h"

#include <type_traits>

namespace gmopt {
namespace cuda {

//===----------------------------------------------------------------------===//
// Scalars and indices of any numeric type
//===----------------------------------------------------------------------===//

/// The element types scalars and indices are read from (the CPU kernels'
/// readScalar and OneHot index types).
enum class ScalarType : int32_t {
  F32,
  F64,
  F16,
  BF16,
  I64,
  I32,
  I16,
  I8,
  U8,
  U16,
  U32,
  U64,
  Bool,
};

/// Element \p i of \p data as double (cpu::readScalar's conversion: bool is
/// 0 or 1, 16-bit floats widen exactly).
GMOPT_HD double loadAsDouble(ScalarType type, const void *data, int64_t i) {
  switch (type) {
  case ScalarType::F32:
    return static_cast<const float *>(data)[i];
  case ScalarType::F64:
    return static_cast<const double *>(data)[i];
  case ScalarType::F16:
    return widenHalf(static_cast<const uint16_t *>(data)[i]);
  case ScalarType::BF16:
    return widenBFloat16(static_cast<const uint16_t *>(data)[i]);
  case ScalarType::I64:
    return static_cast<double>(static_cast<const int64_t *>(data)[i]);
  case ScalarType::I32:
    return static_cast<const int32_t *>(data)[i];
  case ScalarType::I16:
    return static_cast<const int16_t *>(data)[i];
  case ScalarType::I8:
    return static_cast<const int8_t *>(data)[i];
  case ScalarType::U8:
    return static_cast<const uint8_t *>(data)[i];
  case ScalarType::U16:
    return static_cast<const uint16_t *>(data)[i];
  case ScalarType::U32:
    return static_cast<const uint32_t *>(data)[i];
  case ScalarType::U64:
    return static_cast<double>(static_cast<const uint64_t *>(data)[i]);
  case ScalarType::Bool:
    return static_cast<const uint8_t *>(data)[i] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

/// A float truncated to int64 as cpu::convertElement does it: NaN is 0,
/// values beyond the range saturate.
GMOPT_HD int64_t truncateToInt64(double value) {
  if (value != value)
    return 0;
  if (value >= 9223372036854775807.0)
    return INT64_MAX;
  if (value <= -9223372036854775808.0)
    return INT64_MIN;
  return static_cast<int64_t>(value);
}

/// Element \p i of an index tensor as int64 (OneHot's indices: integers
/// converted exactly, uint64 reinterpreted, floats truncated).
GMOPT_HD int64_t loadAsInt64(ScalarType type, const void *data, int64_t i) {
  switch (type) {
  case ScalarType::I64:
    return static_cast<const int64_t *>(data)[i];
  case ScalarType::U64:
    return static_cast<int64_t>(static_cast<const uint64_t *>(data)[i]);
  case ScalarType::I32:
    return static_cast<const int32_t *>(data)[i];
  case ScalarType::U32:
    return static_cast<const uint32_t *>(data)[i];
  case ScalarType::I16:
    return static_cast<const int16_t *>(data)[i];
  case ScalarType::U16:
    return static_cast<const uint16_t *>(data)[i];
  case ScalarType::I8:
    return static_cast<const int8_t *>(data)[i];
  case ScalarType::U8:
  case ScalarType::Bool:
    return static_cast<const uint8_t *>(data)[i];
  default:
    return truncateToInt64(loadAsDouble(type, data, i));
  }
}

//===----------------------------------------------------------------------===//
// Range
//===----------------------------------------------------------------------===//

// rangeCount is the shape evaluator's (ir/ops/RangeCount.h) and
// rangeElement backend/RangeMath.h's; the CPU kernel calls both too.
using ::gmopt::rangeCount;
using ::gmopt::rangeElement;

//===----------------------------------------------------------------------===//
// Trilu and OneHot
//===----------------------------------------------------------------------===//

/// Whether Trilu keeps the element at (\p row, \p col) of its matrix.
GMOPT_HD bool triluKeeps(bool upper, int64_t k, int64_t row, int64_t col) {
  return upper ? col - row >= k : col - row <= k;
}

/// The class an OneHot index selects (negative indices count from the end),
/// or -1 when it is outside [-depth, depth) and selects none.
GMOPT_HD int64_t oneHotClass(int64_t index, int64_t depth) {
  if (index < 0)
    index += depth;
  return index >= 0 && index < depth ? index : -1;
}

/// OneHot's output seen as [outer, depth, inner], with the indices as
/// [outer, inner].
struct OneHotShape {
  int64_t outer = 1, depth = 1, inner = 1;
};

/// Whether output element \p e is `on`, given the indices.
GMOPT_HD bool oneHotIsOn(const OneHotShape &s, ScalarType indexType,
                         const void *indices, int64_t e) {
  int64_t j = e % s.inner;
  int64_t c = (e / s.inner) % s.depth;
  int64_t o = e / (s.inner * s.depth);
  return oneHotClass(loadAsInt64(indexType, indices, o * s.inner + j),
                     s.depth) == c;
}

//===----------------------------------------------------------------------===//
// NonZero
//===----------------------------------------------------------------------===//

/// The most dimensions NonZero's input may have on CUDA.
constexpr int kMaxNonZeroRank = 12;

/// The bits of element \p i of \p elementBytes (1, 2, 4 or 8).
GMOPT_HD uint64_t loadBits(const void *data, int64_t i, int elementBytes) {
  switch (elementBytes) {
  case 1:
    return static_cast<const uint8_t *>(data)[i];
  case 2:
    return static_cast<const uint16_t *>(data)[i];
  case 4:
    return static_cast<const uint32_t *>(data)[i];
  default:
    return static_cast<const uint64_t *>(data)[i];
  }
}

/// Whether an element with \p bits is nonzero: any bit set, ignoring a
/// float's sign bit (-0.0 is zero, NaN is not), as the CPU kernel tests it.
GMOPT_HD bool isNonZeroBits(uint64_t bits, int elementBytes, bool isFloat) {
  uint64_t mask = elementBytes >= 8 ? ~uint64_t(0)
                                    : (uint64_t(1) << (8 * elementBytes)) - 1;
  if (isFloat)
    mask &= ~(uint64_t(1) << (8 * elementBytes - 1));
  return (bits & mask) != 0;
}

/// NonZero's input dimensions.
struct NonZeroShape {
  int32_t rank = 0;
  int64_t dims[kMaxNonZeroRank] = {};
};

/// Writes the coordinates of input element \p linear as column \p k of the
/// [max(rank, 1), count] output.
GMOPT_HD void writeNonZeroCoordinates(const NonZeroShape &s, int64_t linear,
                                      int64_t *coords, int64_t count,
                                      int64_t k) {
  if (s.rank == 0) {
    coords[k] = 0;
    return;
  }
  for (int d = s.rank - 1; d >= 0; --d) {
    coords[d * count + k] = linear % s.dims[d];
    linear /= s.dims[d];
  }
}

//===----------------------------------------------------------------------===//
// BroadcastGradientArgs
//===----------------------------------------------------------------------===//

/// What BroadcastGradientArgs found.
struct GradientAxesCount {
  /// False when the shapes do not broadcast.
  bool broadcastable = true;
  int64_t a = 0, b = 0;
};

/// The axes of the broadcast of shapes \p a and \p b that each operand's
/// gradient sums over, from last to first (the shape evaluator's walk,
/// ir/ops/BroadcastWalk.h, run where the shapes live): they are written to
/// \p aAxes / \p bAxes (either may be null) up to \p aCapacity /
/// \p bCapacity elements and counted in full.
GMOPT_HD GradientAxesCount broadcastGradientAxes(
    const int64_t *a, int64_t aRank, const int64_t *b, int64_t bRank,
    int64_t *aAxes, int64_t aCapacity, int64_t *bAxes, int64_t bCapacity) {
  GradientAxesCount count;
  ops::BroadcastPair stop = ops::walkBroadcastGradientAxes(
      a, aRank, b, bRank,
      [](int64_t x, int64_t y) { return ops::classifyBroadcastPair(x, y); },
      [&](bool toA, int64_t axis) {
        int64_t &n = toA ? count.a : count.b;
        int64_t *axes = toA ? aAxes : bAxes;
        if (axes && n < (toA ? aCapacity : bCapacity))
          axes[n] = axis;
        ++n;
      });
  count.broadcastable = stop == ops::BroadcastPair::Same;
  return count;
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// The most operands and labels (output and summed, each) an einsum may
/// have on CUDA.
constexpr int kMaxEinsumOperands = 8;
constexpr int kMaxEinsumLabels = 16;

/// An einsum as loops: every output element (row-major over the output
/// labels) sums, over every combination of the summed labels, the product
/// of one element of each operand. An operand's stride for a label it lacks
/// or broadcasts is 0. Made by planEinsum (EinsumPlan.h).
struct EinsumGeometry {
  int32_t operands = 0;
  int32_t outLabels = 0;
  int32_t sumLabels = 0;
  int64_t outExtent[kMaxEinsumLabels] = {};
  int64_t sumExtent[kMaxEinsumLabels] = {};
  int64_t outStride[kMaxEinsumOperands][kMaxEinsumLabels] = {};
  int64_t sumStride[kMaxEinsumOperands][kMaxEinsumLabels] = {};
  /// Elements of the output and combinations of the summed labels.
  int64_t outElements = 1;
  int64_t sumElements = 1;
};

/// Output element \p e of the einsum of \p operands (each of T), accumulated
/// in Acc in the summed labels' row-major order.
template <typename Acc, typename T>
GMOPT_HD Acc einsumElement(const EinsumGeometry &g, const T *const *operands,
                           int64_t e) {
  int64_t base[kMaxEinsumOperands] = {};
  for (int l = g.outLabels - 1; l >= 0; --l) {
    int64_t index = e % g.outExtent[l];
    e /= g.outExtent[l];
    for (int p = 0; p < g.operands; ++p)
      base[p] += index * g.outStride[p][l];
  }
  int64_t counter[kMaxEinsumLabels] = {};
  int64_t offset[kMaxEinsumOperands];
  for (int p = 0; p < g.operands; ++p)
    offset[p] = base[p];
  Acc sum = Acc(0);
  for (int64_t s = 0; s < g.sumElements; ++s) {
    Acc product = static_cast<Acc>(operands[0][offset[0]]);
    for (int p = 1; p < g.operands; ++p)
      product *= static_cast<Acc>(operands[p][offset[p]]);
    sum += product;
    // Steps the summed labels like an odometer, last label fastest.
    for (int l = g.sumLabels - 1; l >= 0; --l) {
      for (int p = 0; p < g.operands; ++p)
        offset[p] += g.sumStride[p][l];
      if (++counter[l] < g.sumExtent[l])
        break;
      for (int p = 0; p < g.operands; ++p)
        offset[p] -= g.sumStride[p][l] * g.sumExtent[l];
      counter[l] = 0;
    }
  }
  return sum;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_SHAPEMATH_H
