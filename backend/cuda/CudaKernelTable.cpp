//===- CudaKernelTable.cpp - The CUDA kernel table's scratch column -----===//
//
// One rule per op whose CUDA kernel takes planned scratch, keyed as the
// kernel table keys its entries; the rules themselves live with the
// geometry they size (CudnnGeometry.cpp, EinsumPlan.cpp,
// NcclCollectives.cpp, FusedScratch.h over ir/ops' attention and
// cross-entropy specs), which builds without the toolkit. With the toolkit,
// prepareCudaKernelOnHost is CudaDispatch.cpp's.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernelTable.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudnnGeometry.h"
#include "backend/cuda/EinsumPlan.h"
#include "backend/cuda/FusedScratch.h"
#include "backend/cuda/NcclCollectives.h"
#include "ir/Collectives.h"
#include "ir/Plan.h"
#include "ir/ops/AttentionSpec.h"
#include "ir/ops/CrossEntropySpec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

/// cuBLASLt's workspace, the same for every GEMM node.
uint64_t gemmScratch(const Node &) { return kCudaGemmWorkspaceBytes; }

/// An Einsum that lowers to one strided-batch GEMM runs on cuBLASLt.
uint64_t einsumScratch(const Node &node) {
  return isCublasEinsum(node) ? kCudaGemmWorkspaceBytes : 0;
}

/// FusedAttentionGrad's D, one float per query row (FusedScratch.h; the
/// forward needs none).
uint64_t attentionGradScratch(const Node &node) {
  auto spec = attention::AttentionSpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  return alignBuffer(static_cast<uint64_t>(
                         attentionGradScratchFloats(spec->batch, spec->seqQ)) *
                     sizeof(float));
}

/// The fused cross entropy's logits tile and per-row values (and, for a
/// 16-bit gradient, its fp32 dh accumulator; FusedScratch.h).
uint64_t crossEntropyScratch(const Node &node) {
  auto spec = crossentropy::CrossEntropySpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  bool grad = node.getOpType() == kFusedLinearCrossEntropyGradOp;
  const Value *h =
      node.getOperand(grad ? crossentropy::kGradH : crossentropy::kH);
  bool sixteenBit = h->getType().getDType() != DType::F32;
  int64_t floats =
      grad ? crossEntropyBackwardScratchFloats(spec->rows, spec->blockColumns(),
                                               spec->hidden, sixteenBit)
           : crossEntropyForwardScratchFloats(spec->rows, spec->blockColumns());
  return alignBuffer(static_cast<uint64_t>(floats) * sizeof(float));
}

const llvm::StringMap<ScratchFn> &getScratchRules() {
  static const llvm::StringMap<ScratchFn> rules = [] {
    llvm::StringMap<ScratchFn> r;
    auto add = [&](llvm::StringRef domain, llvm::StringRef op, ScratchFn fn) {
      r[(domain + "::" + op).str()] = fn;
    };
    add("", "MatMul", gemmScratch);
    add("", "Gemm", gemmScratch);
    add(kMsDomain, "FusedMatMul", gemmScratch);
    add("", "Einsum", einsumScratch);
    add("", "Conv", getCudnnConvWorkspaceBytes);
    add("", "ConvGrad", getCudnnConvWorkspaceBytes);
    add(kMsDomain, "ConvGrad", getCudnnConvWorkspaceBytes);
    add("", "BatchNormalization", getCudnnBatchNormWorkspaceBytes);
    add(kMsDomain, "BatchNormInternal", getCudnnBatchNormWorkspaceBytes);
    add(kMsDomain, "BatchNormalizationGrad", getCudnnBatchNormWorkspaceBytes);
    add("", "MaxPoolGrad", getScatterAccumulatorBytes);
    add(kMsDomain, "GatherGrad", getScatterAccumulatorBytes);
    add(kGmoptDomain, kReduceScatterOp, getCudaCollectiveWorkspaceBytes);
    add(kGmoptDomain, kAllGatherOp, getCudaCollectiveWorkspaceBytes);
    add(kGmoptDomain, kFusedAttentionGradOp, attentionGradScratch);
    add(kGmoptDomain, kFusedLinearCrossEntropyOp, crossEntropyScratch);
    add(kGmoptDomain, kFusedLinearCrossEntropyGradOp, crossEntropyScratch);
    return r;
  }();
  return rules;
}

} // namespace

ScratchFn cuda::getKernelScratchRule(llvm::StringRef domain,
                                     llvm::StringRef opType) {
  return getScratchRules().lookup((domain + "::" + opType).str());
}

std::vector<std::string> cuda::listKernelScratchOps() {
  std::vector<std::string> ops;
  for (const auto &rule : getScratchRules())
    ops.push_back(rule.getKey().str());
  llvm::sort(ops);
  return ops;
}

#ifndef GMOPT_HAVE_CUDA
bool cuda::isCudaKernelDecodedAtPrepare(llvm::StringRef, llvm::StringRef) {
  return false;
}

llvm::Expected<HostPreparedKernel>
cuda::prepareCudaKernelOnHost(const Node &node) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "no CUDA kernel for '" + node.getOp().str() +
                                     "': the CUDA backend is not built (node " +
                                     node.describe() + ")");
}
#endif
