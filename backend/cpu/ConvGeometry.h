//===- ConvGeometry.h - Convolution and pooling windows ---------*- C++ -*-===//
//
// Internal to the CPU backend: the backend-neutral window resolution
// (backend/WindowGeometry.h) with the CPU kernels' error wording.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_CONVGEOMETRY_H
#define GMOPT_BACKEND_CPU_CONVGEOMETRY_H

#include "backend/WindowGeometry.h"
#include "backend/cpu/KernelSupport.h"

namespace gmopt {
namespace cpu {

/// resolveWindowGeometry for \p call's node, failing with call.error.
llvm::Expected<WindowGeometry>
resolveWindow(const KernelCall &call, llvm::ArrayRef<int64_t> inputShape,
              llvm::ArrayRef<int64_t> kernel,
              llvm::ArrayRef<int64_t> outputShape, bool ceilMode);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_CONVGEOMETRY_H
