//===- CollectiveKernels.cpp - CPU kernels of the collectives -------------===//
//
// gmopt.AllReduce on the CPU: the bucket's operands are packed into one
// contiguous fp32 scratch buffer (the kernel's planned workspace, so the
// planner counts the bucket), summed over the ranks with one MPI call (see
// Mpi.h), scaled by 1/N for the mean and unpacked into the results. f16/bf16
// operands arrive as fp32 staging copies (StageHalfAsFloat). With ranks = 1
// the op is the identity and needs no MPI; otherwise the run must be an MPI
// world of exactly `ranks` processes, or the kernel fails with an error
// saying how to launch it.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/CollectiveKernels.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Mpi.h"

#include "ir/Collectives.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

int64_t bucketElements(const Node &node) {
  int64_t elements = 0;
  for (const Value *operand : node.getOperands())
    if (operand) {
      if (!operand->getType().hasStaticShape())
        return 0;
      elements += operand->getType().getNumElements();
    }
  return elements;
}

llvm::Error allReduceKernel(KernelCall &call) {
  const Node &node = call.getNode();
  int64_t ranks = node.getIntAttr("ranks", 1);
  std::string reduction = node.getStringAttr("reduction", "mean").str();
  if (reduction != "mean" && reduction != "sum")
    return call.error("reduction must be mean or sum, got '" + reduction + "'");
  unsigned count = node.getNumOperands();
  int64_t total = 0;
  for (unsigned i = 0; i != count; ++i) {
    if (!call.in(i) || !call.out(i))
      return call.error(llvm::formatv("operand or result {0} is absent", i));
    if (call.in(i)->getDType() != DType::F32 ||
        call.out(i)->getDType() != DType::F32)
      return call.error("only float tensors are reduced");
    total += call.in(i)->getNumElements();
  }
  if (ranks == 1) {
    for (unsigned i = 0; i != count; ++i)
      if (call.in(i)->getData() != call.out(i)->getData())
        std::memcpy(call.out(i)->getData(), call.in(i)->getData(),
                    size_t(call.in(i)->getNumElements()) * sizeof(float));
    return llvm::Error::success();
  }
  if (!isMpiInitialized())
    return call.error(llvm::formatv(
        "all-reduce over {0} ranks needs MPI: {1}", ranks,
        isMpiBuilt() ? llvm::formatv("launch with `mpirun -np {0} gmopt-run "
                                     "...`",
                                     ranks)
                           .str()
                     : std::string("gmopt was built without MPI (install "
                                   "libopenmpi-dev and reconfigure)")));
  if (getMpiWorldSize() != ranks)
    return call.error(llvm::formatv("compiled for {0} ranks but the MPI world "
                                    "has {1} processes",
                                    ranks, getMpiWorldSize()));
  auto bucket = call.getContext().allocateScratch(DType::F32, {total},
                                                  MemoryCategory::Workspace);
  if (!bucket)
    return bucket.takeError();
  float *flat = bucket->getView().getDataAs<float>();
  int64_t offset = 0;
  for (unsigned i = 0; i != count; ++i) {
    int64_t n = call.in(i)->getNumElements();
    std::memcpy(flat + offset, call.in(i)->getDataAs<float>(),
                size_t(n) * sizeof(float));
    offset += n;
  }
  if (llvm::Error err = allReduceSumF32(flat, size_t(total)))
    return call.error(llvm::toString(std::move(err)));
  float scale = reduction == "mean" ? 1.0f / float(ranks) : 1.0f;
  offset = 0;
  for (unsigned i = 0; i != count; ++i) {
    int64_t n = call.in(i)->getNumElements();
    float *out = call.out(i)->getDataAs<float>();
    for (int64_t k = 0; k != n; ++k)
      out[k] = flat[offset + k] * scale;
    offset += n;
  }
  return llvm::Error::success();
}

/// The packed fp32 bucket, when the op talks to other ranks.
uint64_t allReduceWorkspace(const Node &node) {
  if (node.getIntAttr("ranks", 1) <= 1)
    return 0;
  return scratchBytes(DType::F32, bucketElements(node));
}

} // namespace

void cpu::registerCollectiveKernels(KernelTable &table) {
  table.add(kGmoptDomain, kAllReduceOp,
            KernelInfo{allReduceKernel, 1, 1, KernelMode::StageHalfAsFloat,
                       allReduceWorkspace});
}
