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
// ZeRO's collectives (see ir/Collectives.h) work on the same flat bucket,
// padded to ranks * shard elements: gmopt.ReduceScatter packs it into its
// workspace and keeps this rank's reduced block, gmopt.Shard copies this
// rank's block of the parameters, gmopt.AllGather gathers the updated
// blocks into its workspace and unpacks them into the parameters in place.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/CollectiveKernels.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Mpi.h"

#include "ir/Collectives.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

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

/// \p node's collective attributes (getCollectiveAttrs), decoded once, by
/// prepare and by the workspace rules alike; the error names the node.
llvm::Expected<CollectiveAttrs> readCollectiveAttrs(const Node &node) {
  auto attrs = getCollectiveAttrs(node);
  if (!attrs)
    return prepareError(node, llvm::toString(attrs.takeError()));
  return attrs;
}

/// The attributes of a node the verifier accepted (the workspace rules).
CollectiveAttrs readRankAttrs(const Node &node) {
  auto attrs = getCollectiveAttrs(node);
  if (!attrs) {
    llvm::consumeError(attrs.takeError());
    return CollectiveAttrs();
  }
  return *attrs;
}

/// Every collective kernel's state: its attributes.
llvm::Expected<std::unique_ptr<KernelState>>
prepareCollective(const Node &node) {
  auto attrs = readCollectiveAttrs(node);
  if (!attrs)
    return attrs.takeError();
  return makeKernelState(*attrs);
}

/// Fails unless \p ranks ranks can talk: a world (MPI or the TCP one) of
/// exactly \p ranks processes.
llvm::Error checkWorld(const KernelCall &call, int64_t ranks,
                       llvm::StringRef what) {
  if (!isMpiInitialized())
    return call.error(llvm::formatv(
        "{0} over {1} ranks needs MPI: {2}", what, ranks,
        isMpiBuilt()
            ? llvm::formatv("launch with `mpirun -np {0} gmopt-run ...`, or "
                            "set RANK, WORLD_SIZE, MASTER_ADDR and "
                            "MASTER_PORT for gmopt's TCP world",
                            ranks)
                  .str()
            : std::string("gmopt was built without MPI (install "
                          "libopenmpi-dev and reconfigure), or set RANK, "
                          "WORLD_SIZE, MASTER_ADDR and MASTER_PORT for "
                          "gmopt's TCP world")));
  if (getMpiWorldSize() != ranks)
    return call.error(llvm::formatv("compiled for {0} ranks but the MPI world "
                                    "has {1} processes",
                                    ranks, getMpiWorldSize()));
  return llvm::Error::success();
}

/// Checks inputs [first, end) are present fp32 tensors; returns their
/// element count.
llvm::Expected<int64_t> floatBucket(const KernelCall &call, unsigned first) {
  int64_t total = 0;
  for (unsigned i = first, e = call.getNumInputs(); i < e; ++i) {
    if (!call.in(i))
      return call.error(llvm::formatv("operand {0} is absent", i));
    if (call.in(i)->getDType() != DType::F32)
      return call.error("only float tensors are sharded");
    total += call.in(i)->getNumElements();
  }
  return total;
}

/// Copies flat bucket elements [begin, begin + count) of inputs [first,
/// end) to \p out; positions past the bucket (the padding) become zero.
void copyBucketRange(const KernelCall &call, unsigned first, int64_t begin,
                     int64_t count, float *out) {
  std::vector<int64_t> elements;
  for (unsigned i = first, e = call.getNumInputs(); i < e; ++i)
    elements.push_back(call.in(i)->getNumElements());
  std::fill(out, out + count, 0.0f);
  for (const BucketPiece &piece : bucketPieces(elements, begin, count))
    std::memcpy(out + piece.rangeOffset,
                call.in(first + piece.operand)->getDataAs<float>() +
                    piece.operandOffset,
                size_t(piece.count) * sizeof(float));
}

/// gmopt.ReduceScatter(x1..xk) -> this rank's f32[S] block of the reduced
/// flat bucket.
llvm::Error reduceScatterKernel(KernelCall &call) {
  const CollectiveAttrs &attrs = call.getState<CollectiveAttrs>();
  int64_t ranks = attrs.ranks;
  auto total = floatBucket(call, 0);
  if (!total)
    return total.takeError();
  TensorView *out = call.out(0);
  int64_t shard = zeroShardElements(*total, ranks);
  if (!out || out->getDType() != DType::F32 || out->getNumElements() != shard)
    return call.error(llvm::formatv("the result must be f32[{0}]", shard));
  if (ranks == 1) {
    copyBucketRange(call, 0, 0, shard, out->getDataAs<float>());
    return llvm::Error::success();
  }
  if (auto err = checkWorld(call, ranks, "reduce-scatter"))
    return err;
  auto bucket = call.getContext().allocateScratch(DType::F32, {shard * ranks},
                                                  MemoryCategory::Workspace);
  if (!bucket)
    return bucket.takeError();
  float *flat = bucket->getView().getDataAs<float>();
  copyBucketRange(call, 0, 0, shard * ranks, flat);
  float *mine = out->getDataAs<float>();
  if (llvm::Error err = reduceScatterSumF32(flat, mine, size_t(shard)))
    return call.error(llvm::toString(std::move(err)));
  if (attrs.mean) {
    float scale = 1.0f / float(ranks);
    for (int64_t k = 0; k != shard; ++k)
      mine[k] *= scale;
  }
  return llvm::Error::success();
}

/// gmopt.Shard(x1..xk) -> this rank's f32[S] block of the flat bucket.
llvm::Error shardKernel(KernelCall &call) {
  int64_t ranks = call.getState<CollectiveAttrs>().ranks;
  auto total = floatBucket(call, 0);
  if (!total)
    return total.takeError();
  TensorView *out = call.out(0);
  int64_t shard = zeroShardElements(*total, ranks);
  if (!out || out->getDType() != DType::F32 || out->getNumElements() != shard)
    return call.error(llvm::formatv("the result must be f32[{0}]", shard));
  int64_t rank = 0;
  if (ranks != 1) {
    if (auto err = checkWorld(call, ranks, "a ZeRO shard"))
      return err;
    rank = getMpiRank();
  }
  copyBucketRange(call, 0, rank * shard, shard, out->getDataAs<float>());
  return llvm::Error::success();
}

/// gmopt.AllGather(shard, w1..wk): every rank's block, unpacked into
/// w1..wk in place.
llvm::Error allGatherKernel(KernelCall &call) {
  int64_t ranks = call.getState<CollectiveAttrs>().ranks;
  auto total = floatBucket(call, 1);
  if (!total)
    return total.takeError();
  int64_t shard = zeroShardElements(*total, ranks);
  const TensorView *mine = call.in(0);
  if (!mine || mine->getDType() != DType::F32 ||
      mine->getNumElements() != shard)
    return call.error(llvm::formatv("the shard must be f32[{0}]", shard));
  const float *flat = mine->getDataAs<float>();
  std::optional<TensorBuffer> gathered;
  if (ranks != 1) {
    if (auto err = checkWorld(call, ranks, "all-gather"))
      return err;
    auto bucket = call.getContext().allocateScratch(DType::F32, {shard * ranks},
                                                    MemoryCategory::Workspace);
    if (!bucket)
      return bucket.takeError();
    gathered.emplace(std::move(*bucket));
    float *into = gathered->getView().getDataAs<float>();
    if (llvm::Error err = allGatherF32(flat, into, size_t(shard)))
      return call.error(llvm::toString(std::move(err)));
    flat = into;
  }
  int64_t offset = 0;
  for (unsigned i = 1, e = call.getNumInputs(); i < e; ++i) {
    int64_t n = call.in(i)->getNumElements();
    std::memcpy(call.in(i)->getDataAs<float>(), flat + offset,
                size_t(n) * sizeof(float));
    offset += n;
  }
  if (TensorView *flag = call.out(0)) {
    if (flag->getDType() != DType::Bool)
      return call.error("the result must be bool");
    uint8_t *data = flag->getDataAs<uint8_t>();
    for (int64_t k = 0, n = flag->getNumElements(); k != n; ++k)
      data[k] = 1;
  }
  return llvm::Error::success();
}

/// gmopt.AllReduce {in_place = 1}: the bucket's operands reduced where
/// they are; one operand needs no packing.
llvm::Error allReduceInPlace(KernelCall &call, const CollectiveAttrs &attrs) {
  int64_t ranks = attrs.ranks;
  auto total = floatBucket(call, 0);
  if (!total)
    return total.takeError();
  if (ranks != 1) {
    if (auto err = checkWorld(call, ranks, "all-reduce"))
      return err;
    unsigned count = call.getNumInputs();
    float scale = attrs.mean ? 1.0f / float(ranks) : 1.0f;
    if (count == 1) {
      float *data = call.in(0)->getDataAs<float>();
      if (llvm::Error err = allReduceSumF32(data, size_t(*total)))
        return call.error(llvm::toString(std::move(err)));
      for (int64_t k = 0; k != *total; ++k)
        data[k] *= scale;
    } else {
      auto bucket = call.getContext().allocateScratch(
          DType::F32, {*total}, MemoryCategory::Workspace);
      if (!bucket)
        return bucket.takeError();
      float *flat = bucket->getView().getDataAs<float>();
      copyBucketRange(call, 0, 0, *total, flat);
      if (llvm::Error err = allReduceSumF32(flat, size_t(*total)))
        return call.error(llvm::toString(std::move(err)));
      int64_t offset = 0;
      for (unsigned i = 0; i != count; ++i) {
        int64_t n = call.in(i)->getNumElements();
        float *data = call.in(i)->getDataAs<float>();
        for (int64_t k = 0; k != n; ++k)
          data[k] = flat[offset + k] * scale;
        offset += n;
      }
    }
  }
  if (TensorView *flag = call.out(0)) {
    if (flag->getDType() != DType::Bool)
      return call.error("the result must be bool");
    uint8_t *data = flag->getDataAs<uint8_t>();
    for (int64_t k = 0, n = flag->getNumElements(); k != n; ++k)
      data[k] = 1;
  }
  return llvm::Error::success();
}

llvm::Error allReduceKernel(KernelCall &call) {
  const CollectiveAttrs &attrs = call.getState<CollectiveAttrs>();
  int64_t ranks = attrs.ranks;
  if (attrs.inPlace)
    return allReduceInPlace(call, attrs);
  unsigned count = call.getNumInputs();
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
  if (auto err = checkWorld(call, ranks, "all-reduce"))
    return err;
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
  float scale = attrs.mean ? 1.0f / float(ranks) : 1.0f;
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

/// Writes true into the done flag \p flag (when present).
llvm::Error setDone(const KernelCall &call, TensorView *flag) {
  if (!flag)
    return llvm::Error::success();
  if (flag->getDType() != DType::Bool)
    return call.error("the result must be bool");
  uint8_t *data = flag->getDataAs<uint8_t>();
  for (int64_t k = 0, n = flag->getNumElements(); k != n; ++k)
    data[k] = 1;
  return llvm::Error::success();
}

/// gmopt.AllReduceStart(x1..xk) -> handle: packs a bucket of several
/// tensors into the handle (the f32 bucket) and starts its all-reduce; a
/// bucket of one tensor is started in the tensor's own buffer.
llvm::Error allReduceStartKernel(KernelCall &call) {
  int64_t ranks = call.getState<CollectiveAttrs>().ranks;
  auto total = floatBucket(call, 0);
  if (!total)
    return total.takeError();
  TensorView *handle = call.out(0);
  unsigned count = call.getNumInputs();
  if (!handle)
    return call.error("the handle is absent");
  if (count == 1) {
    if (auto err = setDone(call, handle))
      return err;
  } else {
    if (handle->getDType() != DType::F32 || handle->getNumElements() != *total)
      return call.error(llvm::formatv("the handle must be f32[{0}]", *total));
    copyBucketRange(call, 0, 0, *total, handle->getDataAs<float>());
  }
  if (ranks == 1)
    return llvm::Error::success();
  if (auto err = checkWorld(call, ranks, "all-reduce"))
    return err;
  float *data =
      count == 1 ? call.in(0)->getDataAs<float>() : handle->getDataAs<float>();
  if (llvm::Error err = startAllReduceSumF32(data, size_t(*total)))
    return call.error(llvm::toString(std::move(err)));
  return llvm::Error::success();
}

/// gmopt.AllReduceWait(handle, x1..xk): completes the all-reduce and
/// writes the (scaled) sums into x1..xk.
llvm::Error allReduceWaitKernel(KernelCall &call) {
  const CollectiveAttrs &attrs = call.getState<CollectiveAttrs>();
  int64_t ranks = attrs.ranks;
  auto total = floatBucket(call, 1);
  if (!total)
    return total.takeError();
  const TensorView *handle = call.in(0);
  unsigned count = call.getNumInputs() - 1;
  if (!handle)
    return call.error("the handle is absent");
  if (count != 1 &&
      (handle->getDType() != DType::F32 || handle->getNumElements() != *total))
    return call.error(llvm::formatv("the handle must be f32[{0}]", *total));
  float *data =
      count == 1 ? call.in(1)->getDataAs<float>() : handle->getDataAs<float>();
  if (ranks != 1) {
    if (auto err = checkWorld(call, ranks, "all-reduce"))
      return err;
    if (llvm::Error err = finishAllReduceSumF32(data))
      return call.error(llvm::toString(std::move(err)));
  }
  float scale = attrs.mean && ranks != 1 ? 1.0f / float(ranks) : 1.0f;
  int64_t offset = 0;
  for (unsigned i = 1; i <= count; ++i) {
    int64_t n = call.in(i)->getNumElements();
    float *into = call.in(i)->getDataAs<float>();
    for (int64_t k = 0; k != n; ++k)
      into[k] = data[offset + k] * scale;
    offset += n;
  }
  return setDone(call, call.out(0));
}

/// The packed fp32 bucket, when the op talks to other ranks (none for an
/// in-place bucket of one tensor).
uint64_t allReduceWorkspace(const Node &node) {
  CollectiveAttrs attrs = readRankAttrs(node);
  if (attrs.ranks <= 1)
    return 0;
  // In place, one operand is reduced where it is.
  if (attrs.inPlace && node.getNumOperands() == 1)
    return 0;
  return scratchBytes(DType::F32, bucketElements(node));
}

/// The padded flat bucket (ranks * shard floats) of a reduce-scatter or
/// all-gather that talks to other ranks; operands from \p first.
uint64_t paddedBucketWorkspace(const Node &node, unsigned first) {
  int64_t ranks = readRankAttrs(node).ranks;
  if (ranks <= 1)
    return 0;
  int64_t elements = 0;
  for (unsigned i = first, e = node.getNumOperands(); i < e; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand || !operand->getType().hasStaticShape())
      return 0;
    elements += operand->getType().getNumElements();
  }
  return scratchBytes(DType::F32, zeroShardElements(elements, ranks) * ranks);
}

uint64_t reduceScatterWorkspace(const Node &node) {
  return paddedBucketWorkspace(node, 0);
}

uint64_t allGatherWorkspace(const Node &node) {
  return paddedBucketWorkspace(node, 1);
}

} // namespace

void cpu::registerCollectiveKernels(KernelTable &table) {
  table.add(kGmoptDomain, kAllReduceOp,
            KernelInfo{allReduceKernel, KernelMode::StageHalfAsFloat,
                       allReduceWorkspace});
  table.setPrepare(kGmoptDomain, kAllReduceOp, prepareCollective);
  // The handle is a planned value, not a workspace: it lives from the
  // start to the wait.
  table.add(kGmoptDomain, kAllReduceStartOp, allReduceStartKernel,
            KernelMode::Native);
  table.setPrepare(kGmoptDomain, kAllReduceStartOp, prepareCollective);
  table.add(kGmoptDomain, kAllReduceWaitOp, allReduceWaitKernel,
            KernelMode::Native);
  table.setPrepare(kGmoptDomain, kAllReduceWaitOp, prepareCollective);
  table.add(kGmoptDomain, kReduceScatterOp,
            KernelInfo{reduceScatterKernel, KernelMode::Native,
                       reduceScatterWorkspace});
  table.setPrepare(kGmoptDomain, kReduceScatterOp, prepareCollective);
  table.add(kGmoptDomain, kAllGatherOp,
            KernelInfo{allGatherKernel, KernelMode::Native, allGatherWorkspace,
                       KernelResults::MayBeAbsent});
  table.setPrepare(kGmoptDomain, kAllGatherOp, prepareCollective);
  table.add(kGmoptDomain, kShardOp, shardKernel, KernelMode::Native);
  table.setPrepare(kGmoptDomain, kShardOp, prepareCollective);
}
