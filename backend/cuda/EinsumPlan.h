//===- EinsumPlan.h - An einsum equation as CUDA loops ----------*- C++ -*-===//
//
// Host code (every build, no CUDA header) that parses an Einsum equation
// against its operands' shapes with the CPU kernel's rules
// (backend/cpu/MatMulKernels.cpp: letters a-z and A-Z, one ellipsis per
// term, right-aligned and broadcasting, numpy's implicit output, no
// repeated label within a term) and lays it out as an EinsumGeometry
// (ShapeMath.h) for the CUDA kernel. Used by CudaShapeDispatch.cpp and
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

namespace gmopt {
namespace cuda {

/// A planned einsum: the loops and the output shape they produce.
struct EinsumPlan {
  EinsumGeometry geometry;
  llvm::SmallVector<int64_t, 8> outShape;
};

/// Plans \p equation over operands of \p operandShapes. Errors say what the
/// CPU kernel refuses too (a malformed equation, disagreeing extents) or
/// what exceeds the CUDA kernel's limits (kMaxEinsumOperands operands,
/// kMaxEinsumLabels output or summed labels).
llvm::Expected<EinsumPlan>
planEinsum(llvm::StringRef equation,
           llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> operandShapes);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_EINSUMPLAN_H
