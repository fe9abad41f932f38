//===- ResizePlan.h - The CUDA kernel parameters of a Resize ----*- C++ -*-===//
//
// Host code (every build, no CUDA header) that resolves a Resize or
// com.microsoft ResizeGrad node into the ResizeParams its CUDA kernels read
// (ResizeMath.h): the attributes, scales, sizes and roi read through the
// shared decoding of ir/ops/ResizeParams.h, exactly as the CPU kernel reads
// them. The kernels read no operand values on the device, so roi, scales
// and sizes must be known at compile time: initializers, or what shape
// inference traces to constants (PyTorch's Concat of constant scales, sizes
// from Shape->Slice->Concat of a static shape); the plan refuses them
// otherwise, naming the node. Used by CudaResizeDispatch.cpp and by the host
// tests (tests/unit/CudaResizeTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_RESIZEPLAN_H
#define GMOPT_BACKEND_CUDA_RESIZEPLAN_H

#include "backend/cuda/ResizeMath.h"

#include "llvm/Support/Error.h"

namespace gmopt {

class Node;

namespace cuda {

/// The kernel parameters of Resize (any opset gmopt reads: 10, 11, 13, 18,
/// 19) or ResizeGrad \p node, whose shapes must be static; an error naming
/// the node for what the CUDA kernels cannot run (operands that are not
/// known at compile time, more than kResizeMaxRank axes) or what the CPU kernel
/// refuses.
llvm::Expected<ResizeParams> planResize(const Node &node);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_RESIZEPLAN_H
