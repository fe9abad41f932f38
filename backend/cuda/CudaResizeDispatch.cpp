//===- CudaResizeDispatch.cpp - The CUDA table's Resize entries -----------===//
//
// ONNX Resize (opsets 10, 11, 13, 18, 19) and com.microsoft ResizeGrad on
// CUDA (ResizeKernels.cu): every mode, nearest_mode, coordinate mode,
// cubic_coeff_a, exclude_outside, extrapolation_value, axes and
// keep_aspect_ratio_policy the CPU kernel runs, over f32, f16 and bf16
// storage. Preparing a node resolves its kernel parameters once
// (ResizePlan.cpp), refusing roi, scales and sizes that are not known at
// compile time; a launch reads them.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/ResizeKernels.h"
#include "backend/cuda/ResizePlan.h"

#include "ir/ops/ResizeParams.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

/// The storage of X and Y (Resize) or of dY, X and dX (ResizeGrad); roi,
/// scales and sizes are read on the host.
llvm::Expected<Storage> resizeStorage(const Node &node) {
  resize::ResizeOperands operands = resize::getResizeOperands(node);
  llvm::SmallVector<unsigned, 3> hostOperands;
  for (int index : {operands.roi, operands.scales, operands.sizes})
    if (index >= 0)
      hostOperands.push_back(unsigned(index));
  return commonFloatStorage(node, hostOperands);
}

/// A Resize or ResizeGrad node decoded once: its storage, kernel
/// parameters (ResizePlan.cpp) and the operands its launch reads.
struct ResizeDescriptor {
  Storage storage = Storage::F32;
  cuda::ResizeParams params;
  bool grad = false;
  /// X (Resize) or dY (ResizeGrad).
  unsigned source = 0;
  int64_t outputElements = 0;
};

llvm::Expected<ResizeDescriptor> decodeResize(const Node &node) {
  auto storage = resizeStorage(node);
  if (!storage)
    return storage.takeError();
  auto params = planResize(node);
  if (!params)
    return params.takeError();
  resize::ResizeOperands operands = resize::getResizeOperands(node);
  ResizeDescriptor d;
  d.storage = *storage;
  d.params = *params;
  d.grad = resize::isResizeGrad(node);
  d.source = unsigned(d.grad ? operands.dY : operands.x);
  d.outputElements = node.getResult(0)->getType().getNumElements();
  return d;
}

llvm::Error launchResizePlan(CudaCall &call, const ResizeDescriptor &d) {
  if (d.grad)
    return call.check(launchResizeGrad(d.storage, d.params,
                                       call.inPtr(d.source), call.outPtr(0),
                                       d.outputElements, call.ctx.stream),
                      "ResizeGrad kernel");
  return call.check(launchResize(d.storage, d.params, call.inPtr(d.source),
                                 call.outPtr(0), d.outputElements,
                                 call.ctx.stream),
                    "Resize kernel");
}

} // namespace

void cuda::dispatch::addResizeKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry entry =
      decodedEntry<ResizeDescriptor, decodeResize, launchResizePlan>();
  addEntry(table, "", "Resize", entry);
  addEntry(table, kMsDomain, "ResizeGrad", entry);
}
