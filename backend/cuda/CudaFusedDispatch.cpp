//===- CudaFusedDispatch.cpp - The fused ops' CUDA kernel entries ---------===//
//
// gmopt.FusedAttention(Grad) and gmopt.FusedLinearCrossEntropy(Grad) on
// CUDA (FusedKernels.h). Each node is decoded once, when prepared, from
// ir/ops' AttentionSpec / CrossEntropySpec (the one reading of the ops that
// shape inference, the cost model and the CPU kernels share) into the
// kernels' plain geometry, with its element type, its dropout mode (the
// node's stream id, a constant or device-read ratio, the training flag:
// CudaDropoutDispatch.cpp's decodeDropoutMode, so the Philox keys are the
// Dropout kernels' and the CPU's) and its scratch (FusedScratch.h, the
// same sizes the kernel table's scratch column gives the planner). A
// launch takes the node's planned workspace slice, or in an eager run
// stream-ordered memory from the device's pool, and reads nothing else.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/FusedKernels.h"

#include "ir/Collectives.h"
#include "ir/ops/AttentionSpec.h"
#include "ir/ops/CrossEntropySpec.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// A FusedAttention or FusedAttentionGrad node, decoded once.
struct AttentionPlan {
  Storage storage = Storage::F32;
  AttentionGeometry geometry;
  DropoutMode dropout;
  bool grad = false;
  /// The mask operand (absent: none).
  std::optional<unsigned> maskOperand;
  /// Forward: the log-sum-exp result is present.
  bool writesLse = false;
  /// Grad: the fp32 scratch of D, one float per query row.
  uint64_t scratchBytes = 0;
};

llvm::Expected<AttentionPlan> decodeAttention(const Node &node) {
  using namespace attention;
  AttentionPlan plan;
  plan.grad = node.getOpType() == kFusedAttentionGradOp;
  unsigned maskIndex = plan.grad ? kGradMask : kMask;
  unsigned ratioIndex = plan.grad ? kGradRatio : kRatio;
  unsigned trainingIndex = plan.grad ? kGradTrainingMode : kTrainingMode;
  auto spec = AttentionSpec::get(node);
  if (!spec)
    return nodeError(node, llvm::toString(spec.takeError()));
  llvm::SmallVector<unsigned, 4> skipOperands = {maskIndex, ratioIndex,
                                                 trainingIndex};
  if (plan.grad)
    skipOperands.push_back(kGradLse);
  llvm::SmallVector<unsigned, 1> skipResults;
  if (!plan.grad)
    skipResults.push_back(1);
  auto storage = commonFloatStorage(node, skipOperands, skipResults);
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;

  AttentionGeometry &g = plan.geometry;
  g.batch = spec->batch;
  g.heads = spec->heads;
  g.kvHeads = spec->kvHeads;
  g.seqQ = spec->seqQ;
  g.seqK = spec->seqK;
  g.headDim = spec->headDim;
  g.valueDim = spec->valueDim;
  g.scale = spec->scale;
  g.causal = spec->attrs.causal;
  g.kTransposed = spec->attrs.kTransposed;
  g.maskTrueKeeps = spec->attrs.maskTrueKeeps;
  g.maskedValue = spec->attrs.maskedValue;
  if (g.headDim > kAttentionMaxHeadDim || g.valueDim > kAttentionMaxHeadDim)
    return nodeError(node, llvm::formatv("head sizes above {0} (here {1} and "
                                         "{2}) have no CUDA kernel yet",
                                         kAttentionMaxHeadDim, g.headDim,
                                         g.valueDim));
  if (spec->batchShape.size() > static_cast<size_t>(kAttentionMaxBatchRank))
    return nodeError(node, "more than " + llvm::Twine(kAttentionMaxBatchRank) +
                               " batch dimensions");
  g.batchRank = static_cast<int32_t>(spec->batchShape.size());
  for (int32_t i = 0; i < g.batchRank; ++i)
    g.batchShape[i] = spec->batchShape[i];
  if (spec->hasMask) {
    const Value *mask = node.getOperand(maskIndex);
    if (!spec->boolMask &&
        storageOf(mask->getType().getDType()) != plan.storage)
      return nodeError(node, "the mask must be bool or Q's element type");
    plan.maskOperand = maskIndex;
    g.mask =
        spec->boolMask ? AttentionMaskKind::Bool : AttentionMaskKind::Additive;
    size_t rank = spec->maskStrides.size();
    assert(rank == spec->batchShape.size() + 2 && "mask strides per dim");
    for (int32_t i = 0; i < g.batchRank; ++i)
      g.maskBatchStrides[i] = spec->maskStrides[i];
    g.maskRowStride = spec->maskStrides[rank - 2];
    g.maskColStride = spec->maskStrides[rank - 1];
  }

  int64_t rows = spec->batch * spec->seqQ;
  auto checkLse = [&](const Value *lse) -> llvm::Error {
    if (lse && (lse->getType().getDType() != DType::F32 ||
                static_cast<int64_t>(lse->getType().getNumElements()) != rows))
      return nodeError(node,
                       "the log-sum-exp must be f32 with one entry per row");
    return llvm::Error::success();
  };
  if (plan.grad) {
    if (!node.getOperand(kGradLse))
      return nodeError(node, "the log-sum-exp is required");
    if (llvm::Error err = checkLse(node.getOperand(kGradLse)))
      return err;
    int64_t outputElements = rows * spec->valueDim;
    for (unsigned i : {kGradDO, kGradO})
      if (static_cast<int64_t>(
              node.getOperand(i)->getType().getNumElements()) != outputElements)
        return nodeError(node, "dO and O must have the attention output's "
                               "shape");
    plan.scratchBytes = static_cast<uint64_t>(attentionGradScratchFloats(
                            spec->batch, spec->seqQ)) *
                        sizeof(float);
  } else {
    const Value *lse = node.getNumResults() > 1 ? node.getResult(1) : nullptr;
    if (llvm::Error err = checkLse(lse))
      return err;
    plan.writesLse = lse != nullptr;
  }

  // As Dropout: ratio 0.5 and no training when the operands are absent;
  // only a node that may drop needs its stream.
  auto mode =
      decodeDropoutMode(node, ratioIndex, trainingIndex, /*random=*/false);
  if (!mode)
    return mode.takeError();
  plan.dropout = *mode;
  if (mode->trainingOperand && mode->ratioValue != 0.0f) {
    std::optional<uint64_t> streamId = node.getStreamId();
    if (!streamId)
      return nodeError(node, "the random node has no stream id");
    plan.dropout.streamId = *streamId;
    uint64_t scores = static_cast<uint64_t>(spec->batch) * spec->seqQ *
                      static_cast<uint64_t>(spec->seqK);
    if (scores > kPhiloxMaxElements)
      return nodeError(node, "the scores have more than 2^34 elements, more "
                             "than one Philox stream");
  }
  return plan;
}

llvm::Error launchAttention(CudaCall &call, const AttentionPlan &plan) {
  using namespace attention;
  DropoutParams dropout = dropoutParams(call, plan.dropout);
  const void *mask = plan.maskOperand ? call.inPtr(*plan.maskOperand) : nullptr;
  if (!plan.grad)
    return call.check(
        launchFusedAttention(
            plan.storage, plan.geometry, call.inPtr(kQ), call.inPtr(kK),
            call.inPtr(kV), mask, dropout, call.outPtr(0),
            plan.writesLse ? call.outAs<float>(1) : nullptr, call.ctx.stream),
        "FusedAttention kernel");
  auto scratch = LaunchScratch::acquire(call, plan.scratchBytes);
  if (!scratch)
    return scratch.takeError();
  llvm::Error err = call.check(
      launchFusedAttentionGrad(
          plan.storage, plan.geometry, call.inPtr(kGradDO), call.inPtr(kGradQ),
          call.inPtr(kGradK), call.inPtr(kGradV), call.inPtr(kGradO),
          call.inAs<float>(kGradLse), mask, dropout,
          static_cast<float *>(scratch->get()), call.outPtr(0), call.outPtr(1),
          call.outPtr(2), call.ctx.stream),
      "FusedAttentionGrad kernel");
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  return released;
}

//===----------------------------------------------------------------------===//
// Cross entropy
//===----------------------------------------------------------------------===//

/// A FusedLinearCrossEntropy or its gradient, decoded once.
struct CrossEntropyPlan {
  Storage storage = Storage::F32;
  CrossEntropyGeometry geometry;
  bool grad = false;
  uint64_t scratchBytes = 0;
};

llvm::Expected<CrossEntropyPlan> decodeCrossEntropy(const Node &node) {
  using namespace crossentropy;
  CrossEntropyPlan plan;
  plan.grad = node.getOpType() == kFusedLinearCrossEntropyGradOp;
  auto spec = CrossEntropySpec::get(node);
  if (!spec)
    return nodeError(node, llvm::toString(spec.takeError()));
  unsigned labelsIndex = plan.grad ? kGradLabels : kLabels;
  llvm::SmallVector<unsigned, 2> skipOperands = {labelsIndex};
  if (plan.grad)
    skipOperands.push_back(kGradLse);
  llvm::SmallVector<unsigned, 1> skipResults;
  if (!plan.grad)
    skipResults.push_back(1);
  auto storage = commonFloatStorage(node, skipOperands, skipResults);
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;
  DType labelType = node.getOperand(labelsIndex)->getType().getDType();
  if (labelType != DType::I64 && labelType != DType::I32)
    return nodeError(node, "labels must be int64 or int32");

  CrossEntropyGeometry &g = plan.geometry;
  g.rows = spec->rows;
  g.hidden = spec->hidden;
  g.vocab = spec->vocab;
  g.blockColumns = spec->blockColumns();
  g.transW = spec->transW;
  g.hasIgnoreIndex = spec->ignoreIndex.has_value();
  g.ignoreIndex = spec->ignoreIndex.value_or(0);
  g.reduction = spec->reduction == ops::LossReduction::None
                    ? CrossEntropyReduction::None
                : spec->reduction == ops::LossReduction::Sum
                    ? CrossEntropyReduction::Sum
                    : CrossEntropyReduction::Mean;
  g.labels32 = labelType == DType::I32;

  int64_t lossElements =
      spec->reduction == ops::LossReduction::None ? spec->rows : 1;
  auto elements = [](const Value *value) {
    return value ? static_cast<int64_t>(value->getType().getNumElements())
                 : int64_t(-1);
  };
  if (plan.grad) {
    const Value *lse = node.getOperand(kGradLse);
    if (!lse || lse->getType().getDType() != DType::F32 ||
        elements(lse) != spec->rows)
      return nodeError(node,
                       "the log-sum-exp must be f32 with one entry per row");
    if (elements(node.getOperand(kGradDLoss)) != lossElements)
      return nodeError(node, "dloss does not fit the reduction");
    if (elements(node.getResult(0)) != elements(node.getOperand(kGradH)) ||
        elements(node.getResult(1)) != elements(node.getOperand(kGradW)))
      return nodeError(node, "dh and dW must have the shapes of h and W");
    plan.scratchBytes =
        static_cast<uint64_t>(crossEntropyBackwardScratchFloats(
            g.rows, g.blockColumns, g.hidden, plan.storage != Storage::F32)) *
        sizeof(float);
  } else {
    const Value *lse = node.getNumResults() > 1 ? node.getResult(1) : nullptr;
    if (elements(node.getResult(0)) != lossElements || !lse ||
        lse->getType().getDType() != DType::F32 || elements(lse) != spec->rows)
      return nodeError(node, "the loss or the log-sum-exp has the wrong size");
    plan.scratchBytes = static_cast<uint64_t>(crossEntropyForwardScratchFloats(
                            g.rows, g.blockColumns)) *
                        sizeof(float);
  }
  return plan;
}

llvm::Error launchCrossEntropy(CudaCall &call, const CrossEntropyPlan &plan) {
  using namespace crossentropy;
  auto scratch = LaunchScratch::acquire(call, plan.scratchBytes);
  if (!scratch)
    return scratch.takeError();
  auto *floats = static_cast<float *>(scratch->get());
  llvm::Error err = llvm::Error::success();
  if (plan.grad) {
    err =
        call.check(launchFusedCrossEntropyGrad(
                       plan.storage, plan.geometry, call.inPtr(kGradDLoss),
                       call.inPtr(kGradH), call.inPtr(kGradW),
                       call.inPtr(kGradLabels), call.inAs<float>(kGradLse),
                       call.outPtr(0), call.outPtr(1), floats, call.ctx.stream),
                   "FusedLinearCrossEntropyGrad kernel");
  } else {
    // A label outside the vocabulary raises the launch's fault.
    err = call.markFaultable();
    if (!err)
      err = call.check(launchFusedCrossEntropy(
                           plan.storage, plan.geometry, call.inPtr(kH),
                           call.inPtr(kW), call.inPtr(kLabels), call.outPtr(0),
                           call.outAs<float>(1), floats, call.ctx.stream),
                       "FusedLinearCrossEntropy kernel");
  }
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  return released;
}

} // namespace

void dispatch::addFusedKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry attention =
      decodedEntry<AttentionPlan, decodeAttention, launchAttention>();
  addEntry(table, kGmoptDomain, kFusedAttentionOp, attention);
  addEntry(table, kGmoptDomain, kFusedAttentionGradOp, attention);
  KernelEntry crossEntropy =
      decodedEntry<CrossEntropyPlan, decodeCrossEntropy, launchCrossEntropy>();
  addEntry(table, kGmoptDomain, kFusedLinearCrossEntropyOp, crossEntropy);
  addEntry(table, kGmoptDomain, kFusedLinearCrossEntropyGradOp, crossEntropy);
}
