//===- CudaKernelTable.cpp - The CUDA kernel table's scratch column -----===//
//
// One rule per op whose CUDA kernel takes planned scratch, keyed as the
// kernel table keys its entries; the rules themselves live with the
// geometry they size (CudnnGeometry.cpp, EinsumPlan.cpp,
// NcclCollectives.cpp), which builds without the toolkit. With the toolkit,
// prepareCudaKernelOnHost is CudaDispatch.cpp's.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernelTable.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudnnGeometry.h"
#include "backend/cuda/EinsumPlan.h"
#include "backend/cuda/NcclCollectives.h"
#include "ir/Collectives.h"

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
