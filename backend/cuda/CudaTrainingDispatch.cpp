//===- CudaTrainingDispatch.cpp - The CUDA table's training plumbing -----===//
//
// The com.microsoft training-loop entries that move or reset whole tensors:
// ZeroGradient (the output zeroed), PassThrough (each output a copy of its
// input unless the plan put both in one buffer) and InPlaceAccumulator
// (new_sum = update_signal ? old_sum + value : old_sum, the signal read on
// the device, as OptimizerKernels.cu's accumulator kernel does for
// InPlaceAccumulatorV2). The checks refuse what the CPU kernels in
// backend/cpu/TrainingKernels.cpp refuse.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

uint64_t bytesOf(const Value *value) {
  return value->getType().getNumElements() * uint64_t(elementBytes(value));
}

/// ZeroGradient(old_gradient, reset_signal) -> zeros of old_gradient's shape.
llvm::Error checkZeroGradient(const Node &node) {
  const Value *old = node.getOperand(0), *out = node.getResult(0);
  if (!old || !out)
    return nodeError(node, "needs the gradient and the output");
  if (old->getType().getDims() != out->getType().getDims())
    return nodeError(node, "the output must have the gradient's shape");
  return checkAnyElement(node);
}

llvm::Error runZeroGradient(CudaCall &call) {
  return call.check(
      cudaMemsetAsync(call.outPtr(0), 0, bytesOf(call.out(0)), call.ctx.stream),
      "cudaMemsetAsync");
}

/// PassThrough(inputs...) -> the same tensors.
llvm::Error checkPassThrough(const Node &node) {
  if (node.getNumResults() > node.getNumOperands())
    return nodeError(node, "more outputs than inputs");
  for (unsigned i = 0; i < node.getNumResults(); ++i) {
    const Value *in = node.getOperand(i), *out = node.getResult(i);
    if (!out)
      continue;
    if (!in || in->getType().getDType() != out->getType().getDType() ||
        bytesOf(in) != bytesOf(out))
      return nodeError(node, "output " + llvm::Twine(i) +
                                 " does not match its input");
  }
  return checkAnyElement(node);
}

llvm::Error runPassThrough(CudaCall &call) {
  for (unsigned i = 0; i < call.node.getNumResults(); ++i) {
    if (!call.out(i) || call.outPtr(i) == call.inPtr(i) ||
        bytesOf(call.out(i)) == 0)
      continue;
    if (llvm::Error err = call.check(
            cudaMemcpyAsync(call.outPtr(i), call.inPtr(i), bytesOf(call.out(i)),
                            cudaMemcpyDeviceToDevice, call.ctx.stream),
            "cudaMemcpyAsync"))
      return err;
  }
  return llvm::Error::success();
}

/// InPlaceAccumulator(old_sum, value, update_signal?) -> new_sum.
llvm::Error checkSumIf(const Node &node) {
  const Value *oldSum = node.getOperand(0), *value = node.getOperand(1);
  const Value *newSum = node.getResult(0);
  if (!oldSum || !value || !newSum)
    return nodeError(node, "needs old_sum, value and new_sum");
  if (oldSum->getType().getDims() != value->getType().getDims() ||
      oldSum->getType().getDims() != newSum->getType().getDims())
    return nodeError(node, "old_sum, value and new_sum must have one shape");
  std::optional<Storage> sum = storageOf(oldSum->getType().getDType());
  std::optional<Storage> add = storageOf(value->getType().getDType());
  if (!sum || !isFloatStorage(*sum) || !add || !isFloatStorage(*add) ||
      newSum->getType().getDType() != oldSum->getType().getDType())
    return nodeError(node, "old_sum, value and new_sum must be float tensors "
                           "(f32, f16 or bf16 on CUDA)");
  const Value *signal =
      node.getNumOperands() > 2 ? node.getOperand(2) : nullptr;
  if (signal && (signal->getType().getDType() != DType::Bool ||
                 signal->getType().getNumElements() != 1))
    return nodeError(node, "update_signal must be one bool");
  return llvm::Error::success();
}

llvm::Error runSumIf(CudaCall &call) {
  return call.check(
      launchSumIf(*storageOf(call.in(0)->getType().getDType()), call.inPtr(0),
                  *storageOf(call.in(1)->getType().getDType()), call.inPtr(1),
                  call.inAs<uint8_t>(2), call.outPtr(0),
                  call.out(0)->getType().getNumElements(), call.ctx.stream),
      "InPlaceAccumulator kernel");
}

} // namespace

void cuda::dispatch::addTrainingKernels(llvm::StringMap<KernelEntry> &table) {
  auto add = [&](llvm::StringRef op, CheckFn check, RunFn run) {
    table[(kMsDomain + "::" + op).str()] = {check, run};
  };
  add("ZeroGradient", checkZeroGradient, runZeroGradient);
  add("PassThrough", checkPassThrough, runPassThrough);
  add("InPlaceAccumulator", checkSumIf, runSumIf);
}
