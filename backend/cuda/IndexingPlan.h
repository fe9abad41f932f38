//===- IndexingPlan.h - Building CUDA index arithmetic ----------*- C++ -*-===//
//
// Host code (every build, no CUDA header) that turns shapes and strides
// into a BroadcastIndexing: numpy broadcast strides, contiguous strides,
// and the collapse of unit and evenly stepping dimensions that keeps the
// kernels' per-element division loop short. Used by CudaDispatch.cpp and
// checked on random shapes by tests/unit/CudaIndexingTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_INDEXINGPLAN_H
#define GMOPT_BACKEND_CUDA_INDEXINGPLAN_H

#include "backend/cuda/BroadcastIndexing.h"
#include "backend/cuda/PadMath.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

namespace gmopt {
namespace cuda {

/// A shape or a stride list.
using IndexVector = llvm::SmallVector<int64_t, 6>;

/// Row-major element strides of \p shape.
IndexVector contiguousStrides(llvm::ArrayRef<int64_t> shape);

/// The strides that read \p operand broadcast (numpy rules) to \p out:
/// the operand's own strides, 0 along broadcast dimensions, left-padded.
/// False when the shapes do not broadcast.
bool broadcastStrides(llvm::ArrayRef<int64_t> operand,
                      llvm::ArrayRef<int64_t> out, IndexVector &strides);

/// Collapses the iteration space \p extents with one stride list per slot
/// (up to four: operands 0-2 and the output, BroadcastIndexing::kOutput;
/// missing slots are zero) into \p ix: unit dimensions are dropped and
/// neighbours merged where every slot steps evenly across both. False
/// when more than kMaxRank dimensions remain.
bool collapseIndexing(IndexVector extents,
                      llvm::SmallVector<IndexVector, 4> strides,
                      BroadcastIndexing &ix);

/// The strided copy of ONNX Tile: \p in repeated \p repeats times along
/// each dimension (same rank). The iteration runs over [repeats[0], in[0],
/// repeats[1], in[1], ...] with input strides 0 along the repeat
/// dimensions and the tiled output's strides (a repeat steps over a whole
/// copy of its dimension); slot 0 is the input, kOutput the output. False
/// when the ranks differ, a repeat is negative, or more than kMaxRank
/// dimensions remain after collapsing.
bool tileIndexing(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> repeats,
                  BroadcastIndexing &ix);

/// The region ONNX Pad (constant mode) copies from its input into its
/// output, once the output is filled with the constant: per dimension the
/// extent of the overlap, and the element offsets of its first element in
/// the input and in the output (contiguous strides of each).
struct PadCopy {
  IndexVector extents;
  int64_t inOffset = 0;
  int64_t outOffset = 0;
};

/// The PadCopy of \p in padded to \p out with \p begin leading elements
/// per dimension (negative crops). False when the ranks differ.
bool padCopy(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
             llvm::ArrayRef<int64_t> begin, PadCopy &copy);

/// The PadIndexing of \p in padded to \p out with \p begin leading
/// elements per dimension (negative crops) in \p mode. False when the
/// ranks differ, there are more than kMaxRank dimensions, or a non-constant
/// mode would pad from an empty dimension (the CPU kernel refuses that).
bool padIndexing(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
                 llvm::ArrayRef<int64_t> begin, PadMode mode, PadIndexing &ix);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_INDEXINGPLAN_H
