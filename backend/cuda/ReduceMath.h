//===- ReduceMath.h - Per-element arithmetic of CUDA reductions -*- C++ -*-===//
//
// What the CUDA reductions (ReduceKernels.cu) compute per element and per
// output, written once as `__host__ __device__` functions so host tests run
// it against the CPU kernels (tests/unit/CudaReduceTest.cpp): the Reduce*
// family's map / combine / finalize steps, ArgMax / ArgMin's choice of an
// index, InstanceNormalization's affine, InvertibleLayerNormalizationGrad's
// recovered input and gradients, and DivGrad's two partial derivatives.
// 16-bit tensors are widened to fp32; sums and products accumulate in double
// (ReduceKernels.cu combines them across a thread group in a fixed order),
// maxima compare the fp32 values exactly.
//
// ReduceIndexing maps an output and the position of a reduced element to
// element offsets in up to three operands, so one kernel reduces any set of
// axes without a transposed copy; planReduction builds it on the host.
//
// Products that feed an addition go through productOf so that the device
// compiler cannot fuse them into multiply-adds: the CPU kernels round each
// product (gmopt builds them without contraction).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_REDUCEMATH_H
#define GMOPT_BACKEND_CUDA_REDUCEMATH_H

#include "backend/UnfusedMath.h"
#include "backend/cuda/BroadcastIndexing.h"

#include <vector>

namespace gmopt {
namespace cuda {

/// The reductions of the Reduce* family (and of global pooling).
enum class ReduceKind : int32_t {
  Sum,
  Mean,
  Max,
  Min,
  SumSquare,
  Prod,
  L1,
  L2,
  LogSum,
  LogSumExp,
};

GMOPT_HD bool isNaNValue(double v) { return v != v; }

//===----------------------------------------------------------------------===//
// Reduce*
//===----------------------------------------------------------------------===//

/// The accumulator of \p kind before any element (the empty reduction's,
/// once finalized: 0, NaN for the mean, -inf / inf for max / min, 1 for the
/// product, -inf for the logarithms).
GMOPT_HD double reduceInit(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::Max:
    return -INFINITY;
  case ReduceKind::Min:
    return INFINITY;
  case ReduceKind::Prod:
    return 1.0;
  default:
    return 0.0;
  }
}

/// The term element \p x contributes. \p shift is LogSumExp's row maximum
/// (finite when the terms are taken; see reduceFinalize).
GMOPT_HD double reducePre(ReduceKind kind, float x, double shift) {
  double v = x;
  switch (kind) {
  case ReduceKind::SumSquare:
  case ReduceKind::L2:
    return mulUnfused(v, v);
  case ReduceKind::L1:
    return v < 0 ? -v : v;
  case ReduceKind::LogSumExp:
    return ::exp(v - shift);
  default:
    return v;
  }
}

/// Combines two partial accumulators (the order of a thread group's
/// combination is fixed by the kernel). Max and Min propagate NaN.
GMOPT_HD double reduceCombine(ReduceKind kind, double a, double b) {
  switch (kind) {
  case ReduceKind::Max:
    if (isNaNValue(a) || isNaNValue(b))
      return NAN;
    return a < b ? b : a;
  case ReduceKind::Min:
    if (isNaNValue(a) || isNaNValue(b))
      return NAN;
    return b < a ? b : a;
  case ReduceKind::Prod:
    return a * b;
  default:
    return a + b;
  }
}

/// The result from the accumulator of \p count elements. LogSumExp is
/// shift + log(sum(exp(x - shift))) with shift the maximum; a maximum that
/// is NaN or infinite is the result itself (-inf: every element is -inf or
/// there are none).
GMOPT_HD float reduceFinalize(ReduceKind kind, double acc, int64_t count,
                              double shift) {
  switch (kind) {
  case ReduceKind::Mean:
    return static_cast<float>(count ? acc / static_cast<double>(count) : NAN);
  case ReduceKind::L2:
    return static_cast<float>(::sqrt(acc));
  case ReduceKind::LogSum:
    return static_cast<float>(::log(acc));
  case ReduceKind::LogSumExp:
    if (isNaNValue(shift) || shift == INFINITY || shift == -INFINITY)
      return static_cast<float>(shift);
    return static_cast<float>(shift + ::log(acc));
  default:
    return static_cast<float>(acc);
  }
}

//===----------------------------------------------------------------------===//
// ArgMax / ArgMin
//===----------------------------------------------------------------------===//

/// The best element seen so far of one arg-reduction line; index < 0: none.
/// Trivial, so kernels can keep it in shared memory.
struct ArgBest {
  float value;
  int64_t index;
};

/// No element seen yet.
GMOPT_HD ArgBest argNone() {
  ArgBest none;
  none.value = 0.0f;
  none.index = -1;
  return none;
}

/// The better of two candidates (NaN never enters): the larger (ArgMax) or
/// smaller value, equal values (+0 and -0 are equal) resolved to the first
/// index or, with \p selectLast, the last. Commutative and associative, so
/// any combination order gives the CPU kernel's sequential scan.
GMOPT_HD ArgBest argCombine(ArgBest a, ArgBest b, bool isMax, bool selectLast) {
  if (b.index < 0)
    return a;
  if (a.index < 0)
    return b;
  bool takeB;
  if (a.value == b.value)
    takeB = selectLast ? b.index > a.index : b.index < a.index;
  else
    takeB = isMax ? b.value > a.value : b.value < a.value;
  return takeB ? b : a;
}

/// \p best after seeing element \p index of value \p v (NaN is skipped: the
/// CPU scan never moves to a NaN, whose comparisons are false).
GMOPT_HD ArgBest argConsider(ArgBest best, float v, int64_t index, bool isMax,
                             bool selectLast) {
  if (v != v)
    return best;
  ArgBest candidate;
  candidate.value = v;
  candidate.index = index;
  return argCombine(best, candidate, isMax, selectLast);
}

/// The index ArgMax / ArgMin writes: the CPU scan starts at element 0 and
/// stays there when that element is NaN (nothing compares better than it).
GMOPT_HD int64_t argResult(ArgBest best, float first) {
  return first != first || best.index < 0 ? 0 : best.index;
}

//===----------------------------------------------------------------------===//
// InstanceNormalization
//===----------------------------------------------------------------------===//

/// y = x * scale + shift of one (image, channel) plane.
struct NormAffine {
  float scale = 1.0f;
  float shift = 0.0f;
};

/// 1 / sqrt(variance + epsilon) from the plane's sum of squared deviations.
GMOPT_HD double instanceNormInvStd(double squares, int64_t size,
                                   double epsilon) {
  return 1.0 /
         ::sqrt((size ? squares / static_cast<double>(size) : 0.0) + epsilon);
}

/// The plane's affine from its channel's scale and bias, mean and inverse
/// standard deviation, each rounded to fp32 as the CPU kernel does.
GMOPT_HD NormAffine instanceNormAffine(float scale, float bias, double mean,
                                       double invStd) {
  NormAffine affine;
  affine.scale =
      static_cast<float>(mulUnfused(static_cast<double>(scale), invStd));
  affine.shift = static_cast<float>(
      bias - mulUnfused(mulUnfused(mean, static_cast<double>(scale)), invStd));
  return affine;
}

GMOPT_HD float instanceNormElement(float x, NormAffine affine) {
  return mulUnfused(x, affine.scale) + affine.shift;
}

//===----------------------------------------------------------------------===//
// InvertibleLayerNormalizationGrad
//===----------------------------------------------------------------------===//

/// Rows per fp32 partial of the scale and bias gradients; the partials are
/// summed in double in row order (backend/cpu/NormKernels.cpp's kRowBlock).
constexpr int64_t kNormGradRowBlock = 64;

/// The normalized input recovered from the output: (y - bias) / scale.
GMOPT_HD double invertibleXhat(float y, float bias, float scale) {
  return (static_cast<double>(y) - bias) / scale;
}

/// b = dy * scale * inv_std of one element.
GMOPT_HD double normGradB(float dy, float scale, float invStd) {
  return mulUnfused(
      mulUnfused(static_cast<double>(dy), static_cast<double>(scale)),
      static_cast<double>(invStd));
}

/// dx = b - mean(b) - xhat * mean(b * xhat).
GMOPT_HD float normGradDx(double b, double xhat, double meanB, double meanBX) {
  return static_cast<float>(b - meanB - mulUnfused(xhat, meanBX));
}

/// One element's term of the scale gradient, dy * xhat in fp32.
GMOPT_HD float scaleGradTerm(float dy, double xhat) {
  return static_cast<float>(mulUnfused(static_cast<double>(dy), xhat));
}

//===----------------------------------------------------------------------===//
// DivGrad
//===----------------------------------------------------------------------===//

/// dA's element before the reduction to A's shape: dy / b.
GMOPT_HD float divGradA(float dy, float b) { return dy / b; }

/// dB's element before the reduction to B's shape: -dy * a / b^2.
GMOPT_HD float divGradB(float dy, float a, float b) {
  return mulUnfused(-dy, a) / mulUnfused(b, b);
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

/// Operands one reduction reads (DivGrad's dY, A and B).
constexpr int kReduceSlots = 3;

/// A reduction's iteration space: the kept dimensions, whose row-major
/// linearization is the (contiguous) output, and the reduced ones, each
/// with every slot's element stride. Built by planReduction.
struct ReduceIndexing {
  int32_t keptRank = 0, reducedRank = 0;
  int64_t keptExtent[kMaxRank] = {};
  int64_t reducedExtent[kMaxRank] = {};
  int64_t keptStride[kReduceSlots][kMaxRank] = {};
  int64_t reducedStride[kReduceSlots][kMaxRank] = {};
  /// Output elements (the product of keptExtent).
  int64_t outputs = 1;
  /// Elements reduced into each output (the product of reducedExtent).
  int64_t count = 1;
};

/// The offset of row-major position \p linear of the space \p extent with
/// \p stride.
GMOPT_HD int64_t stridedOffset(int32_t rank, const int64_t *extent,
                               const int64_t *stride, int64_t linear) {
  if (rank == 1)
    return linear * stride[0];
  int64_t offset = 0;
  for (int32_t d = rank - 1; d >= 0; --d) {
    offset += (linear % extent[d]) * stride[d];
    linear /= extent[d];
  }
  return offset;
}

/// Where output \p out starts in slot \p slot.
GMOPT_HD int64_t keptOffset(const ReduceIndexing &ix, int slot, int64_t out) {
  return stridedOffset(ix.keptRank, ix.keptExtent, ix.keptStride[slot], out);
}

/// Where reduced element \p r of an output lies in slot \p slot, relative
/// to keptOffset.
GMOPT_HD int64_t reducedOffset(const ReduceIndexing &ix, int slot, int64_t r) {
  return stridedOffset(ix.reducedRank, ix.reducedExtent, ix.reducedStride[slot],
                       r);
}

/// One dimension of a reduction's space as planReduction takes it.
struct ReduceDim {
  int64_t extent = 1;
  bool reduced = false;
  /// Element strides of the slots (unused slots 0).
  int64_t stride[kReduceSlots] = {};
};

/// The ReduceIndexing of \p dims (outermost first) into \p ix: unit
/// dimensions dropped, neighbouring kept (or reduced) dimensions merged
/// where every slot steps evenly across both. False when more than
/// kMaxRank kept or reduced dimensions remain.
inline bool planReduction(const std::vector<ReduceDim> &dims,
                          ReduceIndexing &ix) {
  ix = ReduceIndexing();
  for (const ReduceDim &dim : dims) {
    if (dim.extent == 1)
      continue;
    int32_t &rank = dim.reduced ? ix.reducedRank : ix.keptRank;
    int64_t *extent = dim.reduced ? ix.reducedExtent : ix.keptExtent;
    auto strideOf = [&](int slot) -> int64_t * {
      return dim.reduced ? ix.reducedStride[slot] : ix.keptStride[slot];
    };
    bool merges = rank > 0;
    for (int s = 0; merges && s < kReduceSlots; ++s)
      merges = strideOf(s)[rank - 1] == dim.stride[s] * dim.extent;
    if (merges) {
      extent[rank - 1] *= dim.extent;
      for (int s = 0; s < kReduceSlots; ++s)
        strideOf(s)[rank - 1] = dim.stride[s];
    } else {
      if (rank == kMaxRank)
        return false;
      extent[rank] = dim.extent;
      for (int s = 0; s < kReduceSlots; ++s)
        strideOf(s)[rank] = dim.stride[s];
      ++rank;
    }
    (dim.reduced ? ix.count : ix.outputs) *= dim.extent;
  }
  return true;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_REDUCEMATH_H
