//===- VectorAccess.h - 16-byte vector access of CUDA kernels ---*- C++ -*-===//
//
// The index arithmetic of the elementwise kernel's vector path: when every
// operand and the output are contiguous in iteration order (no broadcast)
// and their base addresses are 16-byte aligned, each thread loads and
// stores whole 16-byte vectors (4 fp32 or 8 f16/bf16 elements: one
// LDG.E.128 / STG.E.128 each), and the elements after the last whole
// vector run one at a time. This header decides when that path applies,
// where the tail begins, which vectors and tail elements a thread of a
// grid-stride launch owns, and what one vector step computes (each lane
// through the scalar path's applyElementwiseAt). Plain `__host__
// __device__` code with no CUDA header, so host tests check that every
// element is visited exactly once, that only aligned addresses are
// vector-accessed and that the vector step writes the scalar path's bits
// (tests/unit/CudaVectorAccessTest.cpp), with the same code the kernel
// runs (ElementwiseKernels.cu).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_VECTORACCESS_H
#define GMOPT_BACKEND_CUDA_VECTORACCESS_H

#include "backend/cuda/BroadcastIndexing.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Bytes of one vector access: the widest global load and store (128 bits).
constexpr int kVectorBytes = 16;

/// Elements of storage type \p T in one vector (4 fp32, 8 f16 or bf16).
/// A constant rather than a function: nvcc runs no host constexpr
/// function in device code.
template <typename T>
constexpr int kVectorLanes = kVectorBytes / static_cast<int>(sizeof(T));

/// One vector of \p T: aligned to its size, so that a load or store of it
/// is a single 128-bit access.
template <typename T> struct alignas(kVectorBytes) ElementVector {
  static_assert(kVectorBytes % sizeof(T) == 0, "whole elements per vector");
  T lane[kVectorLanes<T>];
};

/// True when \p address may be accessed as a vector.
GMOPT_HD bool isVectorAligned(uintptr_t address) {
  return address % kVectorBytes == 0;
}
GMOPT_HD bool isVectorAligned(const void *pointer) {
  return isVectorAligned(reinterpret_cast<uintptr_t>(pointer));
}

/// How a contiguous range of elements splits into whole vectors, elements
/// [0, tailBegin), and a scalar tail, elements [tailBegin, elements), of
/// fewer than `lanes` elements.
struct VectorPartition {
  /// All elements of the range.
  int64_t elements = 0;
  /// Elements per vector.
  int32_t lanes = 1;
  /// Whole vectors; vector v covers elements [v * lanes, (v + 1) * lanes).
  int64_t vectors = 0;
  /// The first element of the scalar tail (vectors * lanes).
  int64_t tailBegin = 0;
};

/// The partition of \p elements (>= 0) into vectors of \p lanes (> 0).
GMOPT_HD VectorPartition partitionIntoVectors(int64_t elements, int lanes) {
  VectorPartition partition;
  partition.elements = elements;
  partition.lanes = lanes;
  partition.vectors = elements / lanes;
  partition.tailBegin = partition.vectors * lanes;
  return partition;
}

/// The first element of vector \p vector.
GMOPT_HD int64_t vectorFirstElement(const VectorPartition &partition,
                                    int64_t vector) {
  return vector * partition.lanes;
}

/// The grid-stride schedule of thread \p thread of \p threads over \p
/// partition: onVector(first element) for each whole vector it owns, then
/// onElement(element) for each tail element it owns. The tail is shorter
/// than a vector, so it falls to the first threads of the grid.
template <typename VectorFn, typename ElementFn>
GMOPT_HD void forEachOwned(const VectorPartition &partition, int64_t thread,
                           int64_t threads, VectorFn &&onVector,
                           ElementFn &&onElement) {
  for (int64_t v = thread; v < partition.vectors; v += threads)
    onVector(vectorFirstElement(partition, v));
  for (int64_t i = partition.tailBegin + thread; i < partition.elements;
       i += threads)
    onElement(i);
}

/// True when slot \p slot of \p ix reads element i at iteration i (flat
/// with stride 1): neither broadcast nor strided.
GMOPT_HD bool isIdentitySlot(const BroadcastIndexing &ix, int slot) {
  return ix.flat[slot] && ix.stride[slot][0] == 1;
}

/// Whether an elementwise launch may take the vector path: the first \p
/// operands slots (the ones the op reads, with base addresses \p
/// operandPointers) and the output (\p out) all index element i at
/// iteration i, and every base address is vector-aligned. Then every whole
/// vector's address is aligned too (base + v * kVectorBytes).
GMOPT_HD bool canAccessAsVectors(const BroadcastIndexing &ix, int operands,
                                 const void *const *operandPointers,
                                 const void *out) {
  if (!isIdentitySlot(ix, BroadcastIndexing::kOutput) || !isVectorAligned(out))
    return false;
  for (int slot = 0; slot < operands; ++slot)
    if (!isIdentitySlot(ix, slot) || !isVectorAligned(operandPointers[slot]))
      return false;
  return true;
}

/// The vector path's step: elements [first, first + lanes) of out = op(a,
/// b, c), with one vector load per operand the op reads (\p operands) and
/// one vector store, each lane through applyElementwiseAt like the scalar
/// path (hence the same bits). \p first is a multiple of the lanes and the
/// pointers are vector-aligned (canAccessAsVectors); \p out may be \p a,
/// \p b or \p c (every lane is read before the store).
template <typename T>
GMOPT_HD void applyElementwiseVector(ElementwiseOp op, int operands, const T *a,
                                     const T *b, const T *c, T *out,
                                     int64_t first, float param, float param2) {
  using Vector = ElementVector<T>;
  Vector va = *reinterpret_cast<const Vector *>(a + first);
  Vector vb =
      operands > 1 ? *reinterpret_cast<const Vector *>(b + first) : Vector();
  Vector vc =
      operands > 2 ? *reinterpret_cast<const Vector *>(c + first) : Vector();
  Vector result;
  // Unrolled, the lanes stay in registers (no local memory). Only in the
  // device pass: the host compiler knows no such pragma.
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int lane = 0; lane < kVectorLanes<T>; ++lane)
    applyElementwiseAt(op, operands, va.lane, lane, vb.lane, lane, vc.lane,
                       lane, result.lane, lane, param, param2);
  *reinterpret_cast<Vector *>(out + first) = result;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_VECTORACCESS_H
