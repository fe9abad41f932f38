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

/// A ZeroGradient, PassThrough or InPlaceAccumulator node decoded once.
struct TrainingPlan {
  /// ZeroGradient: the output's bytes. PassThrough: each result's bytes (0
  /// for an absent or empty one).
  llvm::SmallVector<uint64_t, 4> bytes;
  /// InPlaceAccumulator: the sum's and the value's storage, and elements.
  Storage sum = Storage::F32, value = Storage::F32;
  int64_t elements = 0;
};

/// ZeroGradient(old_gradient, reset_signal) -> zeros of old_gradient's shape.
llvm::Error checkZeroGradient(const Node &node) {
  const Value *old = node.getOperand(0), *out = node.getResult(0);
  if (!old || !out)
    return nodeError(node, "needs the gradient and the output");
  if (old->getType().getDims() != out->getType().getDims())
    return nodeError(node, "the output must have the gradient's shape");
  return checkAnyElement(node);
}

llvm::Expected<TrainingPlan> decodeZeroGradient(const Node &node) {
  if (llvm::Error err = checkZeroGradient(node))
    return err;
  TrainingPlan p;
  p.bytes.push_back(bytesOf(node.getResult(0)));
  return p;
}

llvm::Error launchZeroGradient(CudaCall &call, const TrainingPlan &p) {
  return call.check(
      cudaMemsetAsync(call.outPtr(0), 0, p.bytes[0], call.ctx.stream),
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

llvm::Expected<TrainingPlan> decodePassThrough(const Node &node) {
  if (llvm::Error err = checkPassThrough(node))
    return err;
  TrainingPlan p;
  for (const Value *out : node.getResults())
    p.bytes.push_back(out ? bytesOf(out) : 0);
  return p;
}

llvm::Error launchPassThrough(CudaCall &call, const TrainingPlan &p) {
  for (unsigned i = 0; i < p.bytes.size(); ++i) {
    if (!p.bytes[i] || call.outPtr(i) == call.inPtr(i))
      continue;
    if (llvm::Error err = call.check(
            cudaMemcpyAsync(call.outPtr(i), call.inPtr(i), p.bytes[i],
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

llvm::Expected<TrainingPlan> decodeSumIf(const Node &node) {
  if (llvm::Error err = checkSumIf(node))
    return err;
  TrainingPlan p;
  p.sum = *storageOf(node.getOperand(0)->getType().getDType());
  p.value = *storageOf(node.getOperand(1)->getType().getDType());
  p.elements = node.getResult(0)->getType().getNumElements();
  return p;
}

llvm::Error launchSumIfPlan(CudaCall &call, const TrainingPlan &p) {
  return call.check(launchSumIf(p.sum, call.inPtr(0), p.value, call.inPtr(1),
                                call.inAs<uint8_t>(2), call.outPtr(0),
                                p.elements, call.ctx.stream),
                    "InPlaceAccumulator kernel");
}

} // namespace

void cuda::dispatch::addTrainingKernels(llvm::StringMap<KernelEntry> &table) {
  addEntry(
      table, kMsDomain, "ZeroGradient",
      decodedEntry<TrainingPlan, decodeZeroGradient, launchZeroGradient>());
  addEntry(table, kMsDomain, "PassThrough",
           decodedEntry<TrainingPlan, decodePassThrough, launchPassThrough>());
  addEntry(table, kMsDomain, "InPlaceAccumulator",
           decodedEntry<TrainingPlan, decodeSumIf, launchSumIfPlan>());
}
