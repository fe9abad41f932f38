//===- CudaGraphCapture.cpp - Whether a step can be a CUDA graph ----------===//
//
// The --cuda-graph eligibility rules of CudaGraphCapture.h. The capture
// itself is CudaRuntimeDevice.cpp's; this file needs no toolkit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaGraphCapture.h"

#include "backend/Executor.h"
#include "backend/cuda/NcclCollectives.h"
#include "ir/Collectives.h"
#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/ops/AttentionSpec.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;

namespace {
llvm::Error refuse(const llvm::Twine &reason) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--cuda-graph: " + reason);
}

/// The random ops whose CUDA kernels read the step from the device counter
/// while captured (DropoutParams::stepOnDevice).
bool readsStepOnDevice(const Node &node) {
  llvm::StringRef op = node.getOpType();
  if (node.getDomain() == kOnnxDomain)
    return op == "Dropout";
  if (node.getDomain() == kMsDomain)
    return op == "BitmaskDropout" || op == "BiasDropout";
  if (node.getDomain() == kGmoptDomain)
    return op == kFusedAttentionOp || op == kFusedAttentionGradOp;
  return false;
}
} // namespace

llvm::Error gmopt::checkCudaGraphNode(const Node &node) {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  if (schema && schema->hasTrait(TraitRandom) && !readsStepOnDevice(node))
    return refuse("node " + node.describe() +
                  " draws random numbers keyed by the step, and its CUDA "
                  "kernel takes the step from the host, so a replay would "
                  "repeat the captured step's numbers");
  if (isCudaCollective(node) && getCollectiveRanks(node) > 1 && !isNcclBuilt())
    return refuse(llvm::formatv("node {0} exchanges data with {1} ranks from "
                                "the host (MPI/TCP; gmopt was built without "
                                "NCCL), which a CUDA graph cannot capture",
                                node.describe(), getCollectiveRanks(node)));
  return llvm::Error::success();
}

llvm::Error gmopt::checkCudaGraphOptions(const ExecutorOptions &options,
                                         llvm::StringRef backend) {
  if (backend != "cuda")
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--cuda-graph needs the CUDA backend; this run uses the " +
            backend.str() + " backend");
  if (options.mode != AllocationMode::Planned)
    return refuse("a CUDA graph replays fixed addresses, and an eager step "
                  "allocates and frees each tensor as it goes (--mode=eager); "
                  "use --mode=planned");
  if (options.profile)
    return refuse("--profile and --trace time every kernel by synchronizing "
                  "the host after it, which a captured step cannot do");
  return llvm::Error::success();
}

llvm::Error gmopt::checkCudaGraphCapturable(const Module &module,
                                            const ExecutorOptions &options,
                                            llvm::StringRef backend) {
  if (llvm::Error err = checkCudaGraphOptions(options, backend))
    return err;
  for (const Node &node : module.getGraph().getNodes())
    if (llvm::Error err = checkCudaGraphNode(node))
      return err;
  return llvm::Error::success();
}
