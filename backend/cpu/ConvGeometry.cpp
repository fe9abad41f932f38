//===- ConvGeometry.cpp - Window geometry of convolution and pooling ------===//
//
// The CPU kernels' entry to backend/WindowGeometry.cpp (ONNX's padding and
// output-extent rules): the window attributes decoded at prepare, resolved
// over a launch's shapes, errors worded "OP: MESSAGE (node NAME)".
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/ConvGeometry.h"
#include "backend/cpu/KernelPrepare.h"

using namespace gmopt;
using namespace gmopt::cpu;

llvm::Expected<WindowState> cpu::decodeWindow(const Node &node) {
  auto attrs = getWindowAttributes(node);
  if (!attrs)
    return prepareError(node, llvm::toString(attrs.takeError()));
  WindowState window;
  window.attrs = std::move(*attrs);
  window.kernelShape = node.getIntsAttr("kernel_shape", {});
  window.ceilMode = node.getIntAttr("ceil_mode", 0) != 0;
  return window;
}

llvm::Expected<WindowGeometry>
cpu::resolveWindow(const KernelCall &call, const WindowState &window,
                   llvm::ArrayRef<int64_t> inputShape,
                   llvm::ArrayRef<int64_t> kernel,
                   llvm::ArrayRef<int64_t> outputShape) {
  auto geometry = resolveWindowGeometry(window.attrs, inputShape, kernel,
                                        outputShape, window.ceilMode);
  if (!geometry)
    return call.error(llvm::toString(geometry.takeError()));
  return *geometry;
}
