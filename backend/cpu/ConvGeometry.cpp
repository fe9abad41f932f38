//===- ConvGeometry.cpp - Window geometry of convolution and pooling ------===//
//
// The CPU kernels' entry to backend/WindowGeometry.cpp (ONNX's padding and
// output-extent rules), errors worded "OP: MESSAGE (node NAME)".
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/ConvGeometry.h"

using namespace gmopt;
using namespace gmopt::cpu;

llvm::Expected<WindowGeometry>
cpu::resolveWindow(const KernelCall &call, llvm::ArrayRef<int64_t> inputShape,
                   llvm::ArrayRef<int64_t> kernel,
                   llvm::ArrayRef<int64_t> outputShape, bool ceilMode) {
  auto window = resolveWindowGeometry(call.getNode(), inputShape, kernel,
                                      outputShape, ceilMode);
  if (!window)
    return call.error(llvm::toString(window.takeError()));
  return *window;
}
