//===- EinsumPlan.h - An einsum equation as CUDA loops ----------*- C++ -*-===//
//
// Host code (every build, no CUDA header) that lays an Einsum out for the
// CUDA kernel: the equation's EinsumSpec bound to the operands' shapes
// (ir/ops/EinsumSpec.h, the reading shape inference and the CPU kernel
// share) becomes an EinsumGeometry (ShapeMath.h) and, where it is one, a
// strided-batch GEMM. Used by CudaShapeDispatch.cpp and
// tests/unit/CudaShapeTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_EINSUMPLAN_H
#define GMOPT_BACKEND_CUDA_EINSUMPLAN_H

#include "backend/cuda/ShapeMath.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace gmopt {
class Node;
namespace cuda {

/// An einsum of two operands that is one strided-batch GEMM over the
/// operands as they are stored: row-major Y[b] = op(A[b]) op(B[b]) for
/// b < batch, A [m, k] ([k, m] when transA), B [k, n] ([n, k] when transB),
/// each batch a whole matrix further on. Its labels fall in groups: batch
/// (both operands and the output), M (A and the output), N (B and the
/// output) and K (both operands, summed), laid out as [batch, M, N] in the
/// output, [batch, M, K] or [batch, K, M] in A and [batch, K, N] or
/// [batch, N, K] in B, with nothing broadcast and nothing summed from one
/// operand alone.
struct EinsumGemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
  /// A is operand 1 and B operand 0 (else A is operand 0).
  bool swapOperands = false;
};

/// A planned einsum: the loops and the output shape they produce.
struct EinsumPlan {
  EinsumGeometry geometry;
  llvm::SmallVector<int64_t, 8> outShape;
  /// Set when the einsum is one strided-batch GEMM with every extent
  /// positive (the CUDA kernel then runs it on cuBLASLt).
  std::optional<EinsumGemm> gemm;
};

/// Plans \p equation over operands of \p operandShapes. Errors are
/// EinsumSpec's and bindEinsum's (a malformed equation, disagreeing
/// extents: what the CPU kernel refuses too) or the CUDA kernel's limits
/// (kMaxEinsumOperands operands, kMaxEinsumLabels output or summed labels).
llvm::Expected<EinsumPlan>
planEinsum(llvm::StringRef equation,
           llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> operandShapes);

/// True when the Einsum \p node runs on cuBLASLt: f32 operands and output
/// of static shape whose equation plans to one strided-batch GEMM. Such a
/// node gets the GEMM workspace in the plan (getCudaKernelWorkspaceBytes),
/// as MatMul does; any other node (or one the CUDA check refuses) gets
/// none.
bool isCublasEinsum(const Node &node);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_EINSUMPLAN_H
