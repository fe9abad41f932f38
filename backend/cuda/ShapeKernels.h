//===- ShapeKernels.h - Launchers of the CUDA shape kernels -----*- C++ -*-===//
//
// The launchers ShapeKernels.cu implements for CudaShapeDispatch.cpp:
// Range, Trilu, OneHot, NonZero, com.microsoft BroadcastGradientArgs and
// Einsum. Same conventions as CudaKernels.h: raw device pointers, enqueue
// on the stream, return the launch status, never allocate or synchronize.
// Operand values the CPU kernels read on the host are read on the device;
// one that contradicts the planned output shape raises
// KernelFault::OutputShapeMismatch, one the op rejects (a zero Range delta,
// shapes that do not broadcast) KernelFault::InvalidOperandValue, and the
// output is then left unwritten.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_SHAPEKERNELS_H
#define GMOPT_BACKEND_CUDA_SHAPEKERNELS_H

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/ShapeMath.h"

namespace gmopt {
namespace cuda {

/// Range: out[i] = rangeElement(*start, *delta, i) for the \p planned
/// elements, all of \p type (F32, F64, I64, I32 or I16); a length other
/// than \p planned or a zero delta faults.
cudaError_t launchRange(ScalarType type, const void *start, const void *limit,
                        const void *delta, void *out, int64_t planned,
                        cudaStream_t stream);

/// Trilu of \p elements (matrices of \p rows x \p cols, any element type of
/// \p elementBytes): kept elements are copied, the others zeroed. \p k (of
/// \p kType, one element) is read on the device; null: 0.
cudaError_t launchTrilu(const void *in, void *out, int64_t elementBytes,
                        int64_t elements, int64_t rows, int64_t cols,
                        bool upper, const void *k, ScalarType kType,
                        cudaStream_t stream);

/// OneHot into \p out (seen as \p shape, any element type of
/// \p elementBytes): \p values holds [off, on] of the output's type;
/// \p depth (one element of \p depthType) must equal shape.depth.
cudaError_t launchOneHot(const void *indices, ScalarType indexType,
                         const void *depth, ScalarType depthType,
                         const void *values, void *out, int64_t elementBytes,
                         const OneHotShape &shape, cudaStream_t stream);

/// NonZero of \p elements of \p elementBytes (floats ignore the sign bit):
/// the coordinates in row-major order into the [max(rank, 1),
/// \p plannedCount] \p coords; another count faults. One block scans the
/// input in order, so the output is deterministic.
cudaError_t launchNonZero(const void *x, int64_t elements, int elementBytes,
                          bool isFloat, const NonZeroShape &shape,
                          int64_t *coords, int64_t plannedCount,
                          cudaStream_t stream);

/// BroadcastGradientArgs of the int64 shapes \p a and \p b: the axes into
/// \p aAxes and \p bAxes, whose planned lengths are \p aCount and \p bCount
/// (-1: the output is absent and not checked).
cudaError_t launchBroadcastGradientArgs(const int64_t *a, int64_t aRank,
                                        const int64_t *b, int64_t bRank,
                                        int64_t *aAxes, int64_t aCount,
                                        int64_t *bAxes, int64_t bCount,
                                        cudaStream_t stream);

/// The operands of an einsum launch.
struct EinsumOperands {
  const void *data[kMaxEinsumOperands] = {};
};
/// Einsum: one thread per output element sums over \p g's summed labels,
/// accumulating in fp32 for F32 and in fp64 for F64 (\p storage).
cudaError_t launchEinsum(Storage storage, const EinsumOperands &operands,
                         void *out, const EinsumGeometry &g,
                         cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_SHAPEKERNELS_H
