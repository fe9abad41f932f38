//===- ScatterReduction.h - How a scatter combines updates ------*- C++ -*-===//
//
// The `reduction` attribute of ScatterElements and ScatterND (none, add and
// mul from opset 16, max and min from 18), read once from a node: the CPU
// kernels and the CUDA plan switch on the value, and both combine an
// update with its target through backend/ScatterMath.h. The enumeration is
// plain C++ so that nvcc can include this header; the decoding is host
// code.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_SCATTERREDUCTION_H
#define GMOPT_IR_OPS_SCATTERREDUCTION_H

#include <cstdint>

#if !defined(__CUDACC__)
#include "llvm/Support/Error.h"
#endif

namespace gmopt {

class Node;

namespace ops {

/// How a scatter combines an update with the element it lands on.
enum class ScatterReduction : int32_t { None, Add, Mul, Max, Min };

#if !defined(__CUDACC__)
/// The `reduction` of scatter \p node (default none), or "unknown
/// reduction 'NAME'" (a plain message; callers name the node).
llvm::Expected<ScatterReduction> getScatterReduction(const Node &node);
#endif

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_SCATTERREDUCTION_H
