//===- CudaResizeDispatch.cpp - The CUDA table's Resize entries -----------===//
//
// ONNX Resize (opsets 10, 11, 13, 18, 19) and com.microsoft ResizeGrad on
// CUDA (ResizeKernels.cu): every mode, nearest_mode, coordinate mode,
// cubic_coeff_a, exclude_outside, extrapolation_value, axes and
// keep_aspect_ratio_policy the CPU kernel runs, over f32, f16 and bf16
// storage. The prepare-time check resolves the node's kernel parameters
// (ResizePlan.cpp), which refuses roi, scales and sizes that are not known
// at compile time; the run resolves them again, as cheap as the check.
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

llvm::Error checkResize(const Node &node) {
  if (auto storage = resizeStorage(node); !storage)
    return storage.takeError();
  if (auto params = planResize(node); !params)
    return params.takeError();
  return llvm::Error::success();
}

llvm::Error runResize(CudaCall &call) {
  auto storage = resizeStorage(call.node);
  if (!storage)
    return storage.takeError();
  auto params = planResize(call.node);
  if (!params)
    return params.takeError();
  resize::ResizeOperands operands = resize::getResizeOperands(call.node);
  if (resize::isResizeGrad(call.node))
    return call.check(launchResizeGrad(*storage, *params,
                                       call.inPtr(unsigned(operands.dY)),
                                       call.outPtr(0),
                                       call.out(0)->getType().getNumElements(),
                                       call.ctx.stream),
                      "ResizeGrad kernel");
  return call.check(
      launchResize(*storage, *params, call.inPtr(unsigned(operands.x)),
                   call.outPtr(0), call.out(0)->getType().getNumElements(),
                   call.ctx.stream),
      "Resize kernel");
}

} // namespace

void cuda::dispatch::addResizeKernels(llvm::StringMap<KernelEntry> &table) {
  table["::Resize"] = {checkResize, runResize};
  table[(kMsDomain + "::ResizeGrad").str()] = {checkResize, runResize};
}
