//===- CudaCollectiveDispatch.cpp - The collectives' CUDA kernel entries --===//
//
// The CUDA kernel-table entries of gmopt's collectives (ir/Collectives.h):
// they enqueue the NCCL calls of NcclCollectives.h and the bucket's packing
// copies (by ir/Collectives.h's bucketPieces) on the backend's compute
// stream, the overlapped all-reduce on the device's communication stream
// (ordered by events both ways, no host wait), or, for one rank
// without a communicator, only the copies. Each node is decoded once, when
// it is prepared (the kernel check of NcclCollectives.cpp's host code, the
// rank count, the reduction, the element type, the bucket's operand sizes,
// its shard and its packing pieces, the scratch the workspace rule sizes);
// a launch reads only that plan and the communicator.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/NcclCollectives.h"

#include "ir/Collectives.h"
#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime_api.h>

#include <algorithm>

using namespace gmopt;

namespace {
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

/// A collective node, decoded once.
struct CollectivePlan {
  /// The ranks it was placed for (the `ranks` attribute).
  int64_t ranks = 1;
  /// Averaged over the ranks (reduction "mean"), else summed.
  bool mean = true;
  /// AllReduce with `in_place = 1`: the operands are reduced in place and
  /// the one result is a done flag.
  bool inPlace = false;
  /// The operands' element type (AllReduce may reduce f16 and bf16).
  DType dtype = DType::F32;
  /// The bucket's first operand (after the handle or shard) and each
  /// bucket operand's elements.
  unsigned firstBucketOperand = 0;
  llvm::SmallVector<int64_t, 8> operandElements;
  /// The bucket's elements, and one rank's shard of it (ZeRO's S).
  int64_t total = 0, shard = 0;
  /// The bucket's pieces from its element 0: packing the whole bucket
  /// (AllReduceStart), the padded ranks x shard range (ReduceScatter) or
  /// unpacking it (AllReduceWait, AllGather). Shard's range depends on the
  /// rank the step runs on and is cut at launch.
  std::vector<BucketPiece> pieces;
  /// The packed range's elements (pieces cover [0, covered)).
  int64_t packed = 0;
  /// The flat bucket's scratch of a ReduceScatter or AllGather over
  /// several ranks (ranks x shard floats; the workspace rule's size).
  uint64_t scratchBytes = 0;
  /// AllReduce's operands' bytes (the one-rank copies).
  llvm::SmallVector<uint64_t, 8> operandBytes;
  /// The bool done flag's bytes (result 0), 0 where the op has none.
  uint64_t flagBytes = 0;
};

/// Decodes \p node after \p check accepted it.
llvm::Expected<CollectivePlan>
decodeCollective(const Node &node, llvm::Error (*check)(const Node &)) {
  if (llvm::Error err = check(node))
    return err;
  CollectivePlan plan;
  llvm::StringRef op = node.getOpType();
  // check accepted the attributes: they decode.
  CollectiveAttrs attrs = llvm::cantFail(getCollectiveAttrs(node));
  plan.ranks = attrs.ranks;
  plan.mean = attrs.mean;
  plan.inPlace = attrs.inPlace;
  plan.dtype = node.getOperand(0)->getType().getDType();
  plan.firstBucketOperand =
      op == kAllReduceWaitOp || op == kAllGatherOp ? 1 : 0;
  for (unsigned i = plan.firstBucketOperand, e = node.getNumOperands(); i < e;
       ++i) {
    int64_t elements = node.getOperand(i)->getType().getNumElements();
    plan.operandElements.push_back(elements);
    plan.total += elements;
  }
  plan.shard = zeroShardElements(plan.total, std::max<int64_t>(plan.ranks, 1));
  if (op == kReduceScatterOp || op == kShardOp)
    plan.shard = node.getResult(0)->getType().getNumElements();
  else if (op == kAllGatherOp)
    plan.shard = node.getOperand(0)->getType().getNumElements();
  if (op == kAllReduceStartOp || op == kAllReduceWaitOp)
    plan.packed = plan.total;
  else if (op == kReduceScatterOp || op == kAllGatherOp)
    plan.packed = plan.shard * plan.ranks;
  if (op == kAllReduceWaitOp || op == kAllGatherOp)
    plan.pieces = bucketPieces(plan.operandElements, 0, plan.total);
  else if (plan.packed)
    plan.pieces = bucketPieces(plan.operandElements, 0, plan.packed);
  plan.scratchBytes = static_cast<uint64_t>(plan.shard * plan.ranks) *
                      (plan.ranks > 1 ? sizeof(float) : 0);
  for (unsigned i = plan.firstBucketOperand, e = node.getNumOperands(); i < e;
       ++i)
    plan.operandBytes.push_back(node.getOperand(i)->getType().getSizeInBytes());
  const Value *flag = node.getNumResults() ? node.getResult(0) : nullptr;
  if (flag && flag->getType().getDType() == DType::Bool)
    plan.flagBytes = flag->getType().getSizeInBytes();
  return plan;
}

llvm::Expected<CollectivePlan> decodeAllReduce(const Node &node) {
  return decodeCollective(node, checkCudaAllReduce);
}

llvm::Expected<CollectivePlan> decodeShardedCollective(const Node &node) {
  return decodeCollective(node, checkCudaShardedCollective);
}

/// The communicator a collective over \p plan's ranks runs on: the
/// device's (whose world must be the plan's), or null for one rank without
/// one.
llvm::Expected<NcclCommunicator *> communicatorFor(CudaCall &call,
                                                   const CollectivePlan &plan) {
  const Node &node = call.node;
  int64_t ranks = plan.ranks;
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

/// Copies \p pieces (bucket operands from \p first) into \p range, which
/// they tile from its element 0; range positions past them, up to
/// \p count, become zero.
llvm::Error packBucket(CudaCall &call, unsigned first,
                       llvm::ArrayRef<BucketPiece> pieces, int64_t count,
                       float *range) {
  int64_t covered = 0;
  for (const BucketPiece &piece : pieces) {
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

/// Copies the flat bucket \p flat (from its element 0) back into the
/// plan's bucket operands, in place.
llvm::Error unpackBucket(CudaCall &call, const CollectivePlan &plan,
                         const float *flat) {
  for (const BucketPiece &piece : plan.pieces) {
    float *into = static_cast<float *>(const_cast<void *>(
                      call.inPtr(plan.firstBucketOperand + piece.operand))) +
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

/// Sets the plan's bool done flag (result 0, when present) to true.
llvm::Error setDone(CudaCall &call, const CollectivePlan &plan) {
  if (!plan.flagBytes || !call.outPtr(0))
    return llvm::Error::success();
  return call.check(
      cudaMemsetAsync(call.outPtr(0), 1, plan.flagBytes, call.ctx.stream),
      "cudaMemsetAsync (the done flag)");
}

llvm::Error runAllReduce(CudaCall &call, const CollectivePlan &plan) {
  const Node &node = call.node;
  unsigned count = plan.operandElements.size();
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  if (*communicator) {
    llvm::SmallVector<const void *, 8> operands;
    llvm::SmallVector<void *, 8> results;
    for (unsigned i = 0; i != count; ++i) {
      operands.push_back(call.inPtr(i));
      results.push_back(plan.inPlace ? const_cast<void *>(call.inPtr(i))
                                     : call.outPtr(i));
    }
    if (llvm::Error err =
            (*communicator)
                ->allReduce(node, operands, results, plan.operandElements,
                            plan.dtype, plan.mean, call.ctx.stream))
      return err;
  } else if (!plan.inPlace) {
    // One rank without NCCL: the sum and the mean are the operand.
    for (unsigned i = 0; i != count; ++i)
      if (call.inPtr(i) != call.outPtr(i))
        if (llvm::Error err = call.check(
                cudaMemcpyAsync(call.outPtr(i), call.inPtr(i),
                                plan.operandBytes[i], cudaMemcpyDeviceToDevice,
                                call.ctx.stream),
                "cudaMemcpyAsync (one-rank all-reduce)"))
          return err;
  }
  return plan.inPlace ? setDone(call, plan) : llvm::Error::success();
}

/// gmopt.AllReduceStart(x1..xk) -> handle.
llvm::Error runAllReduceStart(CudaCall &call, const CollectivePlan &plan) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  void *buffer = nullptr;
  if (plan.operandElements.size() == 1) {
    buffer = const_cast<void *>(call.inPtr(0));
    if (llvm::Error err = setDone(call, plan))
      return err;
  } else {
    buffer = call.outPtr(0);
    if (llvm::Error err = packBucket(call, 0, plan.pieces, plan.total,
                                     static_cast<float *>(buffer)))
      return err;
  }
  if (!*communicator)
    return llvm::Error::success();
  return (*communicator)
      ->startAllReduce(node, call.outPtr(0), {buffer}, {plan.total}, plan.mean,
                       call.ctx.stream, call.ctx.commStream);
}

/// gmopt.AllReduceWait(handle, x1..xk) -> done.
llvm::Error runAllReduceWait(CudaCall &call, const CollectivePlan &plan) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  if (*communicator)
    if (llvm::Error err =
            (*communicator)
                ->waitAllReduce(node, call.inPtr(0), call.ctx.stream))
      return err;
  // The average was taken by the all-reduce (ncclAvg): only the packed
  // bucket's values move back.
  if (plan.operandElements.size() > 1)
    if (llvm::Error err = unpackBucket(call, plan, call.inAs<float>(0)))
      return err;
  return setDone(call, plan);
}

/// gmopt.ReduceScatter(x1..xk) -> this rank's f32[S] block.
llvm::Error runReduceScatter(CudaCall &call, const CollectivePlan &plan) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  int64_t shard = plan.shard;
  float *mine = call.outAs<float>(0);
  if (plan.ranks == 1) {
    // The bucket is the only shard: packed into the result, reduced there.
    if (llvm::Error err = packBucket(call, 0, plan.pieces, shard, mine))
      return err;
    if (!*communicator)
      return llvm::Error::success();
    return (*communicator)
        ->reduceScatter(node, mine, mine, shard, plan.mean, call.ctx.stream);
  }
  auto scratch = LaunchScratch::acquire(call, plan.scratchBytes);
  if (!scratch)
    return scratch.takeError();
  auto *flat = static_cast<float *>(scratch->get());
  llvm::Error err = packBucket(call, 0, plan.pieces, plan.packed, flat);
  if (!err)
    err = (*communicator)
              ->reduceScatter(node, flat, mine, shard, plan.mean,
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
llvm::Error runAllGather(CudaCall &call, const CollectivePlan &plan) {
  const Node &node = call.node;
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  int64_t shard = plan.shard;
  // The shard operand is read only; NCCL's in-place all-gather of one rank
  // writes what it reads.
  auto *mine = static_cast<float *>(const_cast<void *>(call.inPtr(0)));
  if (plan.ranks == 1) {
    if (*communicator)
      if (llvm::Error err =
              (*communicator)
                  ->allGather(node, mine, mine, shard, call.ctx.stream))
        return err;
    if (llvm::Error err = unpackBucket(call, plan, mine))
      return err;
    return setDone(call, plan);
  }
  auto scratch = LaunchScratch::acquire(call, plan.scratchBytes);
  if (!scratch)
    return scratch.takeError();
  auto *flat = static_cast<float *>(scratch->get());
  llvm::Error err =
      (*communicator)->allGather(node, mine, flat, shard, call.ctx.stream);
  if (!err)
    err = unpackBucket(call, plan, flat);
  llvm::Error released = scratch->release(call);
  if (err) {
    llvm::consumeError(std::move(released));
    return err;
  }
  if (released)
    return released;
  return setDone(call, plan);
}

/// gmopt.Shard(x1..xk) -> this rank's f32[S] block of the flat bucket (the
/// range depends on the rank the step runs on, so its pieces are cut
/// here, from the decoded operand sizes).
llvm::Error runShard(CudaCall &call, const CollectivePlan &plan) {
  auto communicator = communicatorFor(call, plan);
  if (!communicator)
    return communicator.takeError();
  int64_t rank = *communicator ? (*communicator)->getRank() : 0;
  std::vector<BucketPiece> pieces =
      bucketPieces(plan.operandElements, rank * plan.shard, plan.shard);
  return packBucket(call, 0, pieces, plan.shard, call.outAs<float>(0));
}

} // namespace

void cuda::dispatch::addCollectiveKernels(llvm::StringMap<KernelEntry> &table) {
  addEntry(table, kGmoptDomain, kAllReduceOp,
           decodedEntry<CollectivePlan, decodeAllReduce, runAllReduce>());
  addEntry(table, kGmoptDomain, kAllReduceStartOp,
           decodedEntry<CollectivePlan, decodeShardedCollective,
                        runAllReduceStart>());
  addEntry(table, kGmoptDomain, kAllReduceWaitOp,
           decodedEntry<CollectivePlan, decodeShardedCollective,
                        runAllReduceWait>());
  addEntry(table, kGmoptDomain, kReduceScatterOp,
           decodedEntry<CollectivePlan, decodeShardedCollective,
                        runReduceScatter>());
  addEntry(
      table, kGmoptDomain, kAllGatherOp,
      decodedEntry<CollectivePlan, decodeShardedCollective, runAllGather>());
  addEntry(table, kGmoptDomain, kShardOp,
           decodedEntry<CollectivePlan, decodeShardedCollective, runShard>());
}
