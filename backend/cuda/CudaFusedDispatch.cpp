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

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

/// What a fused node's plan holds whatever the op: the element type, the
/// kernels' geometry, forward or gradient, and the fp32 scratch a launch
/// takes.
template <typename Geometry> struct FusedPlan {
  Storage storage = Storage::F32;
  Geometry geometry;
  bool grad = false;
  uint64_t scratchBytes = 0;
};

/// The float storage common to a fused node's tensors but its operands
/// \p skipOperands (labels, mask, ratio, training flag) and its fp32
/// log-sum-exp: a gradient's operand \p gradLse, a forward's result 1.
llvm::Expected<Storage>
fusedStorage(const Node &node, bool grad,
             llvm::SmallVector<unsigned, 4> skipOperands, unsigned gradLse) {
  if (grad)
    skipOperands.push_back(gradLse);
  llvm::SmallVector<unsigned, 1> skipResults;
  if (!grad)
    skipResults.push_back(1);
  return commonFloatStorage(node, skipOperands, skipResults);
}

/// The elements of \p value (-1 when it is absent).
int64_t elementCount(const Value *value) {
  return value ? static_cast<int64_t>(value->getType().getNumElements())
               : int64_t(-1);
}

/// Whether \p lse is a log-sum-exp of \p rows rows: f32, one per row.
bool isRowLse(const Value *lse, int64_t rows) {
  return lse && lse->getType().getDType() == DType::F32 &&
         elementCount(lse) == rows;
}

/// Runs \p launch with \p bytes of fp32 scratch (LaunchScratch), released
/// after the launch is enqueued; the launch's error comes first.
llvm::Error launchWithScratch(CudaCall &call, uint64_t bytes,
                              llvm::function_ref<llvm::Error(float *)> launch) {
  auto scratch = LaunchScratch::acquire(call, bytes);
  if (!scratch)
    return scratch.takeError();
  llvm::Error err = launch(static_cast<float *>(scratch->get()));
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  return released;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// A FusedAttention or FusedAttentionGrad node, decoded once; its scratch
/// (the gradient's) is D, one float per query row.
struct AttentionPlan : FusedPlan<AttentionGeometry> {
  DropoutMode dropout;
  /// The mask operand (absent: none).
  std::optional<unsigned> maskOperand;
  /// Forward: the log-sum-exp result is present.
  bool writesLse = false;
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
  auto storage = fusedStorage(node, plan.grad,
                              {maskIndex, ratioIndex, trainingIndex}, kGradLse);
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
  const Value *lse = plan.grad                  ? node.getOperand(kGradLse)
                     : node.getNumResults() > 1 ? node.getResult(1)
                                                : nullptr;
  if (plan.grad && !lse)
    return nodeError(node, "the log-sum-exp is required");
  if (lse && !isRowLse(lse, rows))
    return nodeError(node,
                     "the log-sum-exp must be f32 with one entry per row");
  if (plan.grad) {
    int64_t outputElements = rows * spec->valueDim;
    for (unsigned i : {kGradDO, kGradO})
      if (elementCount(node.getOperand(i)) != outputElements)
        return nodeError(node, "dO and O must have the attention output's "
                               "shape");
    plan.scratchBytes = static_cast<uint64_t>(attentionGradScratchFloats(
                            spec->batch, spec->seqQ)) *
                        sizeof(float);
  } else {
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
  return launchWithScratch(call, plan.scratchBytes, [&](float *rowDot) {
    return call.check(launchFusedAttentionGrad(
                          plan.storage, plan.geometry, call.inPtr(kGradDO),
                          call.inPtr(kGradQ), call.inPtr(kGradK),
                          call.inPtr(kGradV), call.inPtr(kGradO),
                          call.inAs<float>(kGradLse), mask, dropout, rowDot,
                          call.outPtr(0), call.outPtr(1), call.outPtr(2),
                          call.ctx.stream),
                      "FusedAttentionGrad kernel");
  });
}

//===----------------------------------------------------------------------===//
// Cross entropy
//===----------------------------------------------------------------------===//

/// A FusedLinearCrossEntropy or its gradient, decoded once.
using CrossEntropyPlan = FusedPlan<CrossEntropyGeometry>;

llvm::Expected<CrossEntropyPlan> decodeCrossEntropy(const Node &node) {
  using namespace crossentropy;
  CrossEntropyPlan plan;
  plan.grad = node.getOpType() == kFusedLinearCrossEntropyGradOp;
  auto spec = CrossEntropySpec::get(node);
  if (!spec)
    return nodeError(node, llvm::toString(spec.takeError()));
  unsigned labelsIndex = plan.grad ? kGradLabels : kLabels;
  auto storage = fusedStorage(node, plan.grad, {labelsIndex}, kGradLse);
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
  if (plan.grad) {
    if (!isRowLse(node.getOperand(kGradLse), spec->rows))
      return nodeError(node,
                       "the log-sum-exp must be f32 with one entry per row");
    if (elementCount(node.getOperand(kGradDLoss)) != lossElements)
      return nodeError(node, "dloss does not fit the reduction");
    if (elementCount(node.getResult(0)) !=
            elementCount(node.getOperand(kGradH)) ||
        elementCount(node.getResult(1)) !=
            elementCount(node.getOperand(kGradW)))
      return nodeError(node, "dh and dW must have the shapes of h and W");
    plan.scratchBytes =
        static_cast<uint64_t>(crossEntropyBackwardScratchFloats(
            g.rows, g.blockColumns, g.hidden, plan.storage != Storage::F32)) *
        sizeof(float);
  } else {
    const Value *lse = node.getNumResults() > 1 ? node.getResult(1) : nullptr;
    if (elementCount(node.getResult(0)) != lossElements ||
        !isRowLse(lse, spec->rows))
      return nodeError(node, "the loss or the log-sum-exp has the wrong size");
    plan.scratchBytes = static_cast<uint64_t>(crossEntropyForwardScratchFloats(
                            g.rows, g.blockColumns)) *
                        sizeof(float);
  }
  return plan;
}

llvm::Error launchCrossEntropy(CudaCall &call, const CrossEntropyPlan &plan) {
  using namespace crossentropy;
  return launchWithScratch(call, plan.scratchBytes, [&](float *scratch) {
    if (plan.grad)
      return call.check(launchFusedCrossEntropyGrad(
                            plan.storage, plan.geometry, call.inPtr(kGradDLoss),
                            call.inPtr(kGradH), call.inPtr(kGradW),
                            call.inPtr(kGradLabels), call.inAs<float>(kGradLse),
                            call.outPtr(0), call.outPtr(1), scratch,
                            call.ctx.stream),
                        "FusedLinearCrossEntropyGrad kernel");
    // A label outside the vocabulary raises the launch's fault.
    if (llvm::Error err = call.markFaultable())
      return err;
    return call.check(launchFusedCrossEntropy(
                          plan.storage, plan.geometry, call.inPtr(kH),
                          call.inPtr(kW), call.inPtr(kLabels), call.outPtr(0),
                          call.outAs<float>(1), scratch, call.ctx.stream),
                      "FusedLinearCrossEntropy kernel");
  });
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
