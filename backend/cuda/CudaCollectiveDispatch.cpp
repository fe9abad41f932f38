//===- CudaCollectiveDispatch.cpp - The collectives' CUDA kernel entries --===//
//
// The CUDA kernel-table entries of gmopt's collectives (ir/Collectives.h):
// they enqueue the NCCL calls of NcclCollectives.h and the bucket's packing
// copies (by ir/Collectives.h's bucketPieces) on the backend's compute
// stream, the overlapped all-reduce on the device's communication stream
// (ordered by events both ways, no host wait), or, for one rank
// without a communicator, only the copies. The kernel checks and the
// workspace sizes they rely on are NcclCollectives.cpp's host code.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/NcclCollectives.h"

#include "ir/Collectives.h"
#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime_api.h>

using namespace gmopt;

namespace {
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

bool isMean(const Node &node) {
  return node.getStringAttr("reduction", "mean") == "mean";
}

/// The communicator a collective over \p ranks runs on: the device's
/// (whose world must be \p ranks), or null for one rank without one.
llvm::Expected<NcclCommunicator *> communicatorFor(CudaCall &call) {
  const Node &node = call.node;
  int64_t ranks = node.getIntAttr("ranks", 1);
  NcclCommunicator *communicator = call.ctx.communicator;
  if (communicator) {
    if (communicator->getWorldSize() != ranks)
      return nodeError(node,
                       llvm::formatv("compiled for {0} ranks but the "
                                     "NCCL communicator has {1}",
                                     ranks, communicator->getWorldSize()));
    return communicator;
  }
  if (ranks != 1)
    return nodeError(node, llvm::formatv("a collective over {0} ranks needs "
                                         "an NCCL communicator, and this run "
                                         "has none",
                                         ranks));
  return nullptr;
}

/// The element counts of bucket operands [first, end).
llvm::SmallVector<int64_t, 8> operandElements(const CudaCall &call,
                                              unsigned first) {
  llvm::SmallVector<int64_t, 8> elements;
  for (unsigned i = first, e = call.node.getNumOperands(); i < e; ++i)
    elements.push_back(call.in(i)->getType().getNumElements());
  return elements;
}

/// Copies flat bucket elements [begin, begin + count) of operands [first,
/// end) into \p range; range positions past the bucket become zero.
llvm::Error packBucket(CudaCall &call, unsigned first, int64_t begin,
                       int64_t count, float *range) {
  int64_t covered = 0;
  for (const BucketPiece &piece :
       bucketPieces(operandElements(call, first), begin, count)) {
    assert(piece.rangeOffset == covered && "operands tile the bucket");
    const float *from =
        call.inAs<float>(first + piece.operand) + piece.operandOffset;
    if (from != range + piece.rangeOffset)
      if (llvm::Error err = call.check(
              cudaMemcpyAsync(range + piece.rangeOffset, from,
                              size_t(piece.count) * sizeof(float),
                              cudaMemcpyDeviceToDevice, call.ctx.stream),
              "cudaMemcpyAsync (packing the bucket)"))
        return err;
    covered += piece.count;
  }
  if (covered == count)
    return llvm::Error::success();
  return call.check(cudaMemsetAsync(range + covered, 0,
                                    size_t(count - covered) * sizeof(float),
                                    call.ctx.stream),
                    "cudaMemsetAsync (the bucket's padding)");
}

/// Copies the flat bucket \p flat (from its element 0) back into operands
/// [first, end), in place.
llvm::Error unpackBucket(CudaCall &call, unsigned first, const float *flat) {
  llvm::SmallVector<int64_t, 8> elements = operandElements(call, first);
  int64_t total = 0;
  for (int64_t n : elements)
    total += n;
  for (const BucketPiece &piece : bucketPieces(elements, 0, total)) {
    float *into = static_cast<float *>(
                      const_cast<void *>(call.inPtr(first + piece.operand))) +
                  piece.operandOffset;
    if (into == flat + piece.rangeOffset)
      continue;
    if (llvm::Error err = call.check(
            cudaMemcpyAsync(into, flat + piece.rangeOffset,
                            size_t(piece.count) * sizeof(float),
                            cudaMemcpyDeviceToDevice, call.ctx.stream),
            "cudaMemcpyAsync (unpacking the bucket)"))
      return err;
  }
  return llvm::Error::success();
}

/// Sets the bool flag result \p index (when present) to true.
llvm::Error setDone(CudaCall &call, unsigned index) {
  const Value *flag = call.out(index);
  if (!flag || !call.outPtr(index))
    return llvm::Error::success();
  return call.check(cudaMemsetAsync(call.outPtr(index), 1,
                                    flag->getType().getSizeInBytes(),
                                    call.ctx.stream),
                    "cudaMemsetAsync (the done flag)");
}

/// Scratch of \p bytes for one launch: the node's planned workspace slice,
/// or in an eager run stream-ordered memory from the device's pool (part
/// of the baseline's measured high-water mark), freed after the launches
/// enqueued before release.
class LaunchScratch {
public:
  static llvm::Expected<LaunchScratch> acquire(CudaCall &call, uint64_t bytes) {
    LaunchScratch scratch;
    if (call.launch.planned) {
      if (call.launch.workspaceBytes < bytes || !call.launch.workspace)
        return nodeError(call.node,
                         llvm::formatv("needs {0} bytes of workspace and the "
                                       "plan gave it {1}: compile it for the "
                                       "CUDA workspace model",
                                       bytes, call.launch.workspaceBytes));
      scratch.address = call.launch.workspace;
      return scratch;
    }
    if (!call.ctx.scratchPool)
      return nodeError(call.node, "an eager run without the device's pool");
    if (llvm::Error err = call.check(
            cudaMallocFromPoolAsync(&scratch.address, bytes ? bytes : 1,
                                    call.ctx.scratchPool, call.ctx.stream),
            "cudaMallocFromPoolAsync (the bucket's scratch)"))
      return err;
    scratch.owned = true;
    return scratch;
  }
  void *get() const { return address; }
  llvm::Error release(CudaCall &call) {
    if (!owned)
      return llvm::Error::success();
    owned = false;
    return call.check(cudaFreeAsync(address, call.ctx.stream),
                      "cudaFreeAsync (the bucket's scratch)");
  }

private:
  void *address = nullptr;
  bool owned = false;
};

llvm::Error runAllReduce(CudaCall &call) {
  const Node &node = call.node;
  bool inPlace = node.getIntAttr("in_place", 0) != 0;
  unsigned count = node.getNumOperands();
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  if (*communicator) {
    llvm::SmallVector<const void *, 8> operands;
    llvm::SmallVector<void *, 8> results;
    llvm::SmallVector<int64_t, 8> counts;
    for (unsigned i = 0; i != count; ++i) {
      operands.push_back(call.inPtr(i));
      results.push_back(inPlace ? const_cast<void *>(call.inPtr(i))
                                : call.outPtr(i));
      counts.push_back(call.in(i)->getType().getNumElements());
    }
    if (llvm::Error err = (*communicator)
                              ->allReduce(node, operands, results, counts,
                                          call.in(0)->getType().getDType(),
                                          isMean(node), call.ctx.stream))
      return err;
  } else if (!inPlace) {
    // One rank without NCCL: the sum and the mean are the operand.
    for (unsigned i = 0; i != count; ++i)
      if (call.inPtr(i) != call.outPtr(i))
        if (llvm::Error err = call.check(
                cudaMemcpyAsync(call.outPtr(i), call.inPtr(i),
                                call.in(i)->getType().getSizeInBytes(),
                                cudaMemcpyDeviceToDevice, call.ctx.stream),
                "cudaMemcpyAsync (one-rank all-reduce)"))
          return err;
  }
  return inPlace ? setDone(call, 0) : llvm::Error::success();
}

/// gmopt.AllReduceStart(x1..xk) -> handle.
llvm::Error runAllReduceStart(CudaCall &call) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  llvm::SmallVector<int64_t, 8> elements = operandElements(call, 0);
  int64_t total = 0;
  for (int64_t n : elements)
    total += n;
  void *buffer = nullptr;
  if (elements.size() == 1) {
    buffer = const_cast<void *>(call.inPtr(0));
    if (llvm::Error err = setDone(call, 0))
      return err;
  } else {
    buffer = call.outPtr(0);
    if (llvm::Error err =
            packBucket(call, 0, 0, total, static_cast<float *>(buffer)))
      return err;
  }
  if (!*communicator)
    return llvm::Error::success();
  return (*communicator)
      ->startAllReduce(node, call.outPtr(0), {buffer}, {total}, isMean(node),
                       call.ctx.stream, call.ctx.commStream);
}

/// gmopt.AllReduceWait(handle, x1..xk) -> done.
llvm::Error runAllReduceWait(CudaCall &call) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  if (*communicator)
    if (llvm::Error err =
            (*communicator)
                ->waitAllReduce(node, call.inPtr(0), call.ctx.stream))
      return err;
  // The average was taken by the all-reduce (ncclAvg): only the packed
  // bucket's values move back.
  if (node.getNumOperands() > 2)
    if (llvm::Error err = unpackBucket(call, 1, call.inAs<float>(0)))
      return err;
  return setDone(call, 0);
}

/// gmopt.ReduceScatter(x1..xk) -> this rank's f32[S] block.
llvm::Error runReduceScatter(CudaCall &call) {
  const Node &node = call.node;
  int64_t ranks = node.getIntAttr("ranks", 1);
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  int64_t shard = call.out(0)->getType().getNumElements();
  float *mine = call.outAs<float>(0);
  if (ranks == 1) {
    // The bucket is the only shard: packed into the result, reduced there.
    if (llvm::Error err = packBucket(call, 0, 0, shard, mine))
      return err;
    if (!*communicator)
      return llvm::Error::success();
    return (*communicator)
        ->reduceScatter(node, mine, mine, shard, isMean(node), call.ctx.stream);
  }
  auto scratch = LaunchScratch::acquire(
      call, static_cast<uint64_t>(shard * ranks) * sizeof(float));
  if (!scratch)
    return scratch.takeError();
  auto *flat = static_cast<float *>(scratch->get());
  llvm::Error err = packBucket(call, 0, 0, shard * ranks, flat);
  if (!err)
    err = (*communicator)
              ->reduceScatter(node, flat, mine, shard, isMean(node),
                              call.ctx.stream);
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  return released;
}

/// gmopt.AllGather(shard, w1..wk) -> done: every rank's block unpacked into
/// w1..wk.
llvm::Error runAllGather(CudaCall &call) {
  const Node &node = call.node;
  int64_t ranks = node.getIntAttr("ranks", 1);
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  int64_t shard = call.in(0)->getType().getNumElements();
  // The shard operand is read only; NCCL's in-place all-gather of one rank
  // writes what it reads.
  auto *mine = static_cast<float *>(const_cast<void *>(call.inPtr(0)));
  if (ranks == 1) {
    if (*communicator)
      if (llvm::Error err =
              (*communicator)
                  ->allGather(node, mine, mine, shard, call.ctx.stream))
        return err;
    if (llvm::Error err = unpackBucket(call, 1, mine))
      return err;
    return setDone(call, 0);
  }
  auto scratch = LaunchScratch::acquire(
      call, static_cast<uint64_t>(shard * ranks) * sizeof(float));
  if (!scratch)
    return scratch.takeError();
  auto *flat = static_cast<float *>(scratch->get());
  llvm::Error err =
      (*communicator)->allGather(node, mine, flat, shard, call.ctx.stream);
  if (!err)
    err = unpackBucket(call, 1, flat);
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  if (released)
    return released;
  return setDone(call, 0);
}

/// gmopt.Shard(x1..xk) -> this rank's f32[S] block of the flat bucket.
llvm::Error runShard(CudaCall &call) {
  auto communicator = communicatorFor(call);
  if (!communicator)
    return communicator.takeError();
  int64_t rank = *communicator ? (*communicator)->getRank() : 0;
  int64_t shard = call.out(0)->getType().getNumElements();
  return packBucket(call, 0, rank * shard, shard, call.outAs<float>(0));
}

} // namespace

void cuda::dispatch::addCollectiveKernels(llvm::StringMap<KernelEntry> &table) {
  table[(kGmoptDomain + "::" + kAllReduceOp).str()] = {checkCudaAllReduce,
                                                       runAllReduce};
  table[(kGmoptDomain + "::" + kAllReduceStartOp).str()] = {
      checkCudaShardedCollective, runAllReduceStart};
  table[(kGmoptDomain + "::" + kAllReduceWaitOp).str()] = {
      checkCudaShardedCollective, runAllReduceWait};
  table[(kGmoptDomain + "::" + kReduceScatterOp).str()] = {
      checkCudaShardedCollective, runReduceScatter};
  table[(kGmoptDomain + "::" + kAllGatherOp).str()] = {
      checkCudaShardedCollective, runAllGather};
  table[(kGmoptDomain + "::" + kShardOp).str()] = {checkCudaShardedCollective,
                                                   runShard};
}
