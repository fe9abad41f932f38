//===- CudaBiasDropoutDispatch.cpp - BiasDropout's table entry ------------===//
//
// com.microsoft BiasDropout(data, bias, residual?, ratio?, training_mode?)
// -> (Dropout(data + bias) + residual, mask?) on CUDA
// (BiasDropoutKernels.cu), the bias broadcast along the last dimension. The
// random stream and mode are Dropout's (dispatch::dropoutParams): a constant
// ratio is checked here, any other read on the device; without a
// training_mode operand the op adds and never drops. data, bias, residual
// and the output share one float type (f32, f16 or bf16), as the CPU kernel
// requires; the mask is bool.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/LossKernels.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

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

/// The elements of one bias row: the data's last dimension (1 for a
/// scalar).
int64_t biasWidth(const Value *data) {
  llvm::ArrayRef<int64_t> shape = data->getType().getStaticShape();
  return shape.empty() ? 1 : shape.back();
}

llvm::Error checkBiasDropout(const Node &node) {
  if (node.getNumOperands() < 2 || !node.getOperand(0) || !node.getOperand(1))
    return nodeError(node, "data and bias are required");
  const Value *data = node.getOperand(0);
  if (kRatioOperand < node.getNumOperands() && node.getOperand(kRatioOperand) &&
      node.getOperand(kRatioOperand)->getType().getDType() != DType::F32)
    return nodeError(node, "ratio must be float32");
  if (kTrainingOperand < node.getNumOperands() &&
      node.getOperand(kTrainingOperand) &&
      node.getOperand(kTrainingOperand)->getType().getDType() != DType::Bool)
    return nodeError(node, "training_mode must be bool");
  if (static_cast<int64_t>(node.getOperand(1)->getType().getNumElements()) !=
      biasWidth(data))
    return nodeError(node, "bias must have one element per last-dimension "
                           "entry of the data");
  Shape shape = shapeOf(data);
  const Value *residual =
      node.getNumOperands() > 2 ? node.getOperand(2) : nullptr;
  if (residual && shapeOf(residual) != shape)
    return nodeError(node, "residual must have the shape of the data");
  if (shapeOf(node.getResult(0)) != shape)
    return nodeError(node, "the output must have the shape of the data");
  if (node.getNumResults() > 1 && node.getResult(1)) {
    const TensorType &mask = node.getResult(1)->getType();
    if (mask.getDType() != DType::Bool)
      return nodeError(node, "the mask must be bool");
    if (shapeOf(node.getResult(1)) != shape)
      return nodeError(node, "the mask must have the shape of the data");
  }
  if (!node.getStreamId())
    return nodeError(node, "the random node has no stream id");
  return commonFloatStorage(node, {kRatioOperand, kTrainingOperand}, {1})
      .takeError();
}

llvm::Error runBiasDropout(CudaCall &call) {
  Storage storage =
      *commonFloatStorage(call.node, {kRatioOperand, kTrainingOperand}, {1});
  auto p = dropoutParams(call, kRatioOperand, kTrainingOperand);
  if (!p)
    return p.takeError();
  LossFloat kind = lossFloatOf(storage);
  const void *residual = call.in(2) ? call.inPtr(2) : nullptr;
  return call.check(
      launchBiasDropout(
          LossTensor{call.inPtr(0), kind}, LossTensor{call.inPtr(1), kind},
          LossTensor{residual, kind}, LossOutput{call.outPtr(0), kind},
          call.outAs<uint8_t>(1), call.out(0)->getType().getNumElements(),
          biasWidth(call.in(0)), *p, call.ctx.stream),
      "BiasDropout kernel");
}

} // namespace

void dispatch::addBiasDropoutKernels(llvm::StringMap<KernelEntry> &table) {
  table[(llvm::Twine(kMsDomain) + "::BiasDropout").str()] = {checkBiasDropout,
                                                             runBiasDropout};
}
