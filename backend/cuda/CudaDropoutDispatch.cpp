//===- CudaDropoutDispatch.cpp - The dropout family's table entries -------===//
//
// Dropout, BitmaskDropout, BiasDropout and the two gradients on CUDA
// (DropoutKernels.cu, BiasDropoutKernels.cu), each decoded once, when its
// node is prepared: the element type and count, the random stream (the
// node's stream id; the seed and step are the run's, so the Philox keys are
// the CPU kernels' and backend/Philox.h's), the ratio and the training
// mode. A constant ratio is read and checked at prepare, any other ratio
// operand is read on the device by the kernel, so no launch waits for the
// host; without a training_mode operand the op is the identity (Dropout)
// or adds and never drops (BiasDropout), as on the CPU. A launch only
// copies the decoded mode and its operands' addresses into the kernels'
// DropoutParams.
//
// com.microsoft BiasDropout(data, bias, residual?, ratio?, training_mode?)
// -> (Dropout(data + bias) + residual, mask?): the bias broadcasts along
// the last dimension; data, bias, residual and the output share one float
// type (f32, f16 or bf16), as the CPU kernel requires; the mask is bool.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/LossKernels.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

llvm::Expected<DropoutMode> dispatch::decodeDropoutMode(const Node &node,
                                                        unsigned ratioIndex,
                                                        unsigned trainingIndex,
                                                        bool random) {
  DropoutMode mode;
  if (random) {
    std::optional<uint64_t> streamId = node.getStreamId();
    if (!streamId)
      return nodeError(node, "the random node has no stream id");
    mode.streamId = *streamId;
  }
  const Value *ratio = ratioIndex < node.getNumOperands()
                           ? node.getOperand(ratioIndex)
                           : nullptr;
  if (ratio && ratio->getType().getDType() != DType::F32)
    return nodeError(node, "ratio must be float32");
  if (ratio && !ratio->isInitializer()) {
    mode.ratioOperand = ratioIndex;
  } else {
    if (ratio) {
      if (llvm::Error err = ratio->getData().load())
        return err;
      mode.ratioValue = static_cast<float>(ratio->getData().getFloatElement(0));
    } else {
      mode.ratioValue = node.getFloatAttr("ratio", 0.5f);
    }
    if (!(mode.ratioValue >= 0.0f && mode.ratioValue < 1.0f))
      return nodeError(node, "ratio " + std::to_string(mode.ratioValue) +
                                 " is outside [0, 1)");
  }
  const Value *training = trainingIndex < node.getNumOperands()
                              ? node.getOperand(trainingIndex)
                              : nullptr;
  if (training && training->getType().getDType() != DType::Bool)
    return nodeError(node, "training_mode must be bool");
  if (training)
    mode.trainingOperand = trainingIndex;
  return mode;
}

DropoutParams dispatch::dropoutParams(const CudaCall &call,
                                      const DropoutMode &mode) {
  DropoutParams p;
  p.seed = call.ctx.seed;
  p.streamId = mode.streamId;
  p.step = call.ctx.step;
  p.stepOnDevice = call.ctx.stepOnDevice;
  p.ratioValue = mode.ratioValue;
  if (mode.ratioOperand)
    p.ratio = call.inAs<float>(*mode.ratioOperand);
  if (mode.trainingOperand)
    p.training = call.inAs<uint8_t>(*mode.trainingOperand);
  p.inference = !mode.trainingOperand;
  return p;
}

namespace {

bool isBitmaskDropout(const Node &node) {
  return node.getOpType().starts_with("Bitmask");
}

/// A Dropout, BitmaskDropout or gradient node, decoded once.
struct DropoutPlan {
  Storage storage = Storage::F32;
  int64_t elements = 0;
  /// The mask packed 32 elements a word (BitmaskDropout(Grad)).
  bool bitmask = false;
  DropoutMode mode;
};

/// Dropout(data, ratio?, training_mode?) -> (output, mask?).
llvm::Expected<DropoutPlan> decodeDropout(const Node &node) {
  DropoutPlan plan;
  plan.bitmask = isBitmaskDropout(node);
  DType maskType = plan.bitmask ? DType::U32 : DType::Bool;
  plan.elements = node.getResult(0)->getType().getNumElements();
  if (node.getNumResults() > 1 && node.getResult(1)) {
    const TensorType &mask = node.getResult(1)->getType();
    if (mask.getDType() != maskType)
      return nodeError(node, "the mask must be " + dtypeName(maskType));
    uint64_t elements = static_cast<uint64_t>(plan.elements);
    if (plan.bitmask && mask.getNumElements() != (elements + 31) / 32)
      return nodeError(node, "the mask must have one word per 32 elements");
  }
  auto mode = decodeDropoutMode(node, 1, 2, /*random=*/true);
  if (!mode)
    return mode.takeError();
  plan.mode = *mode;
  auto storage = commonFloatStorage(node, {1, 2}, {1});
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;
  return plan;
}

llvm::Error launchDropoutPlan(CudaCall &call, const DropoutPlan &plan) {
  DropoutParams p = dropoutParams(call, plan.mode);
  if (plan.bitmask)
    return call.check(launchBitmaskDropout(plan.storage, call.inPtr(0),
                                           call.outPtr(0),
                                           call.outAs<uint32_t>(1),
                                           plan.elements, p, call.ctx.stream),
                      "BitmaskDropout kernel");
  return call.check(launchDropout(plan.storage, call.inPtr(0), call.outPtr(0),
                                  call.outAs<uint8_t>(1), plan.elements, p,
                                  call.ctx.stream),
                    "Dropout kernel");
}

/// DropoutGrad(dY, mask, ratio?, training_mode?) -> dX.
llvm::Expected<DropoutPlan> decodeDropoutGrad(const Node &node) {
  DropoutPlan plan;
  plan.bitmask = isBitmaskDropout(node);
  DType maskType = plan.bitmask ? DType::U32 : DType::Bool;
  if (!node.getOperand(1) ||
      node.getOperand(1)->getType().getDType() != maskType)
    return nodeError(node, "the mask must be " + dtypeName(maskType));
  auto mode = decodeDropoutMode(node, 2, 3, /*random=*/false);
  if (!mode)
    return mode.takeError();
  plan.mode = *mode;
  auto storage = commonFloatStorage(node, {1, 2, 3});
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;
  plan.elements = node.getResult(0)->getType().getNumElements();
  return plan;
}

llvm::Error launchDropoutGradPlan(CudaCall &call, const DropoutPlan &plan) {
  DropoutParams p = dropoutParams(call, plan.mode);
  return call.check(launchDropoutGrad(plan.storage, call.inPtr(0),
                                      call.inPtr(1), plan.bitmask,
                                      call.outPtr(0), plan.elements, p,
                                      call.ctx.stream),
                    "DropoutGrad kernel");
}

constexpr unsigned kRatioOperand = 3, kTrainingOperand = 4;

/// The loss-kernel element type of float storage \p storage.
LossFloat lossFloatOf(Storage storage) {
  switch (storage) {
  case Storage::F16:
    return LossFloat::F16;
  case Storage::BF16:
    return LossFloat::BF16;
  default:
    return LossFloat::F32;
  }
}

/// A BiasDropout node, decoded once.
struct BiasDropoutPlan {
  LossFloat kind = LossFloat::F32;
  int64_t elements = 0;
  /// The elements of one bias row: the data's last dimension (1 for a
  /// scalar).
  int64_t biasWidth = 1;
  bool residual = false;
  DropoutMode mode;
};

llvm::Expected<BiasDropoutPlan> decodeBiasDropout(const Node &node) {
  if (node.getNumOperands() < 2 || !node.getOperand(0) || !node.getOperand(1))
    return nodeError(node, "data and bias are required");
  const Value *data = node.getOperand(0);
  BiasDropoutPlan plan;
  llvm::ArrayRef<int64_t> dims = data->getType().getStaticShape();
  plan.biasWidth = dims.empty() ? 1 : dims.back();
  if (static_cast<int64_t>(node.getOperand(1)->getType().getNumElements()) !=
      plan.biasWidth)
    return nodeError(node, "bias must have one element per last-dimension "
                           "entry of the data");
  Shape shape = shapeOf(data);
  const Value *residual =
      node.getNumOperands() > 2 ? node.getOperand(2) : nullptr;
  if (residual && shapeOf(residual) != shape)
    return nodeError(node, "residual must have the shape of the data");
  plan.residual = residual != nullptr;
  if (shapeOf(node.getResult(0)) != shape)
    return nodeError(node, "the output must have the shape of the data");
  if (node.getNumResults() > 1 && node.getResult(1)) {
    const TensorType &mask = node.getResult(1)->getType();
    if (mask.getDType() != DType::Bool)
      return nodeError(node, "the mask must be bool");
    if (shapeOf(node.getResult(1)) != shape)
      return nodeError(node, "the mask must have the shape of the data");
  }
  auto mode = decodeDropoutMode(node, kRatioOperand, kTrainingOperand,
                                /*random=*/true);
  if (!mode)
    return mode.takeError();
  plan.mode = *mode;
  auto storage =
      commonFloatStorage(node, {kRatioOperand, kTrainingOperand}, {1});
  if (!storage)
    return storage.takeError();
  plan.kind = lossFloatOf(*storage);
  plan.elements = node.getResult(0)->getType().getNumElements();
  return plan;
}

llvm::Error launchBiasDropoutPlan(CudaCall &call, const BiasDropoutPlan &plan) {
  DropoutParams p = dropoutParams(call, plan.mode);
  LossFloat kind = plan.kind;
  const void *residual = plan.residual ? call.inPtr(2) : nullptr;
  return call.check(launchBiasDropout(LossTensor{call.inPtr(0), kind},
                                      LossTensor{call.inPtr(1), kind},
                                      LossTensor{residual, kind},
                                      LossOutput{call.outPtr(0), kind},
                                      call.outAs<uint8_t>(1), plan.elements,
                                      plan.biasWidth, p, call.ctx.stream),
                    "BiasDropout kernel");
}

} // namespace

void dispatch::addDropoutKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry dropout =
      decodedEntry<DropoutPlan, decodeDropout, launchDropoutPlan>();
  KernelEntry dropoutGrad =
      decodedEntry<DropoutPlan, decodeDropoutGrad, launchDropoutGradPlan>();
  addEntry(table, "", "Dropout", dropout);
  addEntry(table, kMsDomain, "BitmaskDropout", dropout);
  addEntry(table, kMsDomain, "DropoutGrad", dropoutGrad);
  addEntry(table, kMsDomain, "BitmaskDropoutGrad", dropoutGrad);
  addEntry(table, kMsDomain, "BiasDropout",
           decodedEntry<BiasDropoutPlan, decodeBiasDropout,
                        launchBiasDropoutPlan>());
}
