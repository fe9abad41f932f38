//===- ConvGeometry.h - Convolution and pooling windows ---------*- C++ -*-===//
//
// Internal to the CPU backend: the window attributes of a convolution or
// pool decoded once, at prepare (WindowState), and the backend-neutral
// window resolution (backend/WindowGeometry.h) over them at launch, with
// the CPU kernels' error wording.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_CONVGEOMETRY_H
#define GMOPT_BACKEND_CPU_CONVGEOMETRY_H

#include "backend/WindowGeometry.h"
#include "backend/cpu/KernelSupport.h"

#include <vector>

namespace gmopt {
namespace cpu {

/// A convolution's or pool's window, decoded once from its node.
struct WindowState {
  /// strides, dilations, pads and auto_pad.
  WindowAttributes attrs;
  /// `kernel_shape` (empty when absent: a convolution takes W's).
  std::vector<int64_t> kernelShape;
  /// `ceil_mode` (pools).
  bool ceilMode = false;
};

/// Decodes \p node's window; an unknown auto_pad fails, naming the node.
llvm::Expected<WindowState> decodeWindow(const Node &node);

/// resolveWindowGeometry of \p window for \p call, failing with call.error.
llvm::Expected<WindowGeometry>
resolveWindow(const KernelCall &call, const WindowState &window,
              llvm::ArrayRef<int64_t> inputShape,
              llvm::ArrayRef<int64_t> kernel,
              llvm::ArrayRef<int64_t> outputShape);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_CONVGEOMETRY_H
