//===- CollectiveOps.cpp - Schemas of gmopt's collective ops -------------===//
//
// Registers the data-parallel collectives of the `gmopt` domain (see
// ir/Collectives.h). gmopt.AllReduce takes a bucket of gradients and returns
// each reduced over the ranks; it has TraitSideEffect because it talks to
// the other ranks: dead-code elimination must not drop it, CSE must not
// merge two of them and the scheduler keeps the collectives in one order on
// every rank (a reordering on one rank alone would deadlock). It writes none
// of its operands, unless `in_place = 1`: then it reduces the bucket's fp32
// operands in place (its written operands, so the scheduler orders every
// reader after it) and returns only a done flag, and the gradients are held
// once instead of as local value, packed bucket and reduced copy. Its cost
// counts the ring all-reduce's network traffic.
//
// ZeRO stages 1 and 2 (passes/distributed/ZeroShard.h) add three more over one
// flat, zero-padded bucket of E elements split into N shards of S = ceil(E /
// N): gmopt.ReduceScatter returns this rank's reduced gradient shard,
// gmopt.Shard this rank's slice of the parameters (local, no traffic) and
// gmopt.AllGather writes every rank's updated shard back into the
// parameters in place (its written operands, so the scheduler orders it
// against every other access of them). Their verifier rules are the
// inference checks below: fp32 static operands and a shard of exactly S.
//
//===----------------------------------------------------------------------===//

#include "ir/Collectives.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeInference.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace gmopt;
using namespace gmopt::ops;

uint64_t gmopt::ringAllReduceTraffic(uint64_t bucketBytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  return bucketBytes / static_cast<uint64_t>(ranks) * 2 *
         static_cast<uint64_t>(ranks - 1);
}

uint64_t gmopt::ringShardTraffic(uint64_t shardBytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  return shardBytes * static_cast<uint64_t>(ranks - 1);
}

std::vector<BucketPiece>
gmopt::bucketPieces(llvm::ArrayRef<int64_t> operandElements, int64_t begin,
                    int64_t count) {
  std::vector<BucketPiece> pieces;
  int64_t offset = 0, end = begin + count;
  for (unsigned i = 0, e = operandElements.size(); i != e; ++i) {
    int64_t n = operandElements[i];
    int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi)
      pieces.push_back({i, lo - offset, lo - begin, hi - lo});
    offset += n;
  }
  return pieces;
}

int64_t gmopt::zeroShardElements(int64_t elements, int64_t ranks) {
  if (ranks <= 1)
    return elements;
  return (elements + ranks - 1) / ranks;
}

bool gmopt::isReducingCollective(const Node &node) {
  return node.isa(kGmoptDomain, kAllReduceOp) ||
         node.isa(kGmoptDomain, kAllReduceStartOp) ||
         node.isa(kGmoptDomain, kAllReduceWaitOp) ||
         node.isa(kGmoptDomain, kReduceScatterOp);
}

llvm::Expected<CollectiveAttrs> gmopt::getCollectiveAttrs(const Node &node) {
  CollectiveAttrs attrs;
  attrs.ranks = node.getIntAttr("ranks", 1);
  if (attrs.ranks < 1)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("ranks must be at least 1, got {0}", attrs.ranks));
  if (isReducingCollective(node)) {
    llvm::StringRef reduction = node.getStringAttr("reduction", "mean");
    if (reduction != "mean" && reduction != "sum")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "reduction must be mean or sum, got '" +
                                         reduction + "'");
    attrs.mean = reduction == "mean";
  }
  attrs.inPlace = node.isa(kGmoptDomain, kAllReduceOp) &&
                  node.getIntAttr("in_place", 0) != 0;
  return attrs;
}

int64_t gmopt::getCollectiveRanks(const Node &node) {
  auto attrs = getCollectiveAttrs(node);
  if (!attrs) {
    llvm::consumeError(attrs.takeError());
    return 1;
  }
  return attrs->ranks;
}

uint64_t gmopt::collectiveNetworkBytes(const Node &node) {
  int64_t ranks = getCollectiveRanks(node);
  auto bytesOf = [](const Value *value) -> uint64_t {
    return value && value->getType().hasStaticShape()
               ? value->getType().getSizeInBytes()
               : 0;
  };
  if (node.isa(kGmoptDomain, kAllReduceOp)) {
    uint64_t bucket = 0;
    for (const Value *operand : node.getOperands())
      bucket += bytesOf(operand);
    return ringAllReduceTraffic(bucket, ranks);
  }
  if (node.isa(kGmoptDomain, kAllReduceStartOp)) {
    // The split all-reduce's bytes are counted once, at its start.
    uint64_t bucket = 0;
    for (const Value *operand : node.getOperands())
      bucket += bytesOf(operand);
    return ringAllReduceTraffic(bucket, ranks);
  }
  if (node.isa(kGmoptDomain, kReduceScatterOp))
    return ringShardTraffic(bytesOf(node.getResult(0)), ranks);
  if (node.isa(kGmoptDomain, kAllGatherOp))
    return ringShardTraffic(bytesOf(node.getOperand(0)), ranks);
  return 0;
}

bool gmopt::isCommunicatingCollective(const Node &node) {
  return node.isa(kGmoptDomain, kAllReduceOp) ||
         node.isa(kGmoptDomain, kAllReduceStartOp) ||
         node.isa(kGmoptDomain, kAllReduceWaitOp) ||
         node.isa(kGmoptDomain, kReduceScatterOp) ||
         node.isa(kGmoptDomain, kAllGatherOp);
}

namespace {

/// The node's collective attributes, or getCollectiveAttrs' error naming
/// the node.
llvm::Expected<CollectiveAttrs> decodeAttrs(InferenceContext &ctx) {
  auto attrs = getCollectiveAttrs(ctx.getNode());
  if (!attrs)
    return ctx.error(llvm::toString(attrs.takeError()));
  return attrs;
}

/// Checks operands [first, end) are present, static fp32 tensors (the flat
/// bucket's parts) and returns their element count.
llvm::Expected<int64_t> bucketOperandElements(InferenceContext &ctx,
                                              unsigned first) {
  if (ctx.getNumInputs() <= first)
    return ctx.error("the bucket has no operands");
  int64_t elements = 0;
  for (unsigned i = first, e = ctx.getNumInputs(); i != e; ++i) {
    if (!ctx.hasInput(i))
      return ctx.error(llvm::formatv("operand {0} is absent", i));
    const TensorType &type = ctx.getInputType(i);
    if (type.getDType() != DType::F32 || !type.hasStaticShape())
      return ctx.error(llvm::formatv("operand {0} is {1}; a sharded bucket "
                                     "holds static fp32 tensors",
                                     i, type.str()));
    elements += type.getNumElements();
  }
  return elements;
}

/// ReduceScatter and Shard: one f32[S] result for the bucket's operands.
llvm::Error inferShardResult(InferenceContext &ctx) {
  auto attrs = decodeAttrs(ctx);
  if (!attrs)
    return attrs.takeError();
  auto elements = bucketOperandElements(ctx, 0);
  if (!elements)
    return elements.takeError();
  ctx.setOutputType(
      0, TensorType::get(DType::F32,
                         {zeroShardElements(*elements, attrs->ranks)}));
  return llvm::Error::success();
}

/// AllGather(shard, w1..wk) -> bool[1]; the shard is f32[S] of w1..wk.
llvm::Error inferAllGather(InferenceContext &ctx) {
  auto attrs = decodeAttrs(ctx);
  if (!attrs)
    return attrs.takeError();
  if (!ctx.hasInput(0))
    return ctx.error("the shard (operand 0) is absent");
  auto elements = bucketOperandElements(ctx, 1);
  if (!elements)
    return elements.takeError();
  int64_t shard = zeroShardElements(*elements, attrs->ranks);
  TensorType expected = TensorType::get(DType::F32, {shard});
  if (ctx.getInputType(0) != expected)
    return ctx.error(llvm::formatv("the shard is {0}, but a bucket of {1} "
                                   "elements over {2} ranks has shards of {3}",
                                   ctx.getInputType(0).str(), *elements,
                                   attrs->ranks, expected.str()));
  ctx.setOutputType(0, TensorType::get(DType::Bool, {1}));
  return llvm::Error::success();
}

/// Local traffic plus the ring reduce-scatter's: (N - 1) shards each way,
/// one addition per received element.
OpCost reduceScatterCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  int64_t ranks = getCollectiveRanks(node);
  uint64_t shardBytes = node.getResult(0)->getType().hasStaticShape()
                            ? node.getResult(0)->getType().getSizeInBytes()
                            : 0;
  uint64_t traffic = ringShardTraffic(shardBytes, ranks);
  cost.flops = traffic / sizeof(float);
  cost.bytesRead += traffic;
  cost.bytesWritten += traffic;
  return cost;
}

/// Local traffic plus the ring all-gather's (N - 1) shards each way.
OpCost allGatherCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  const Value *shard = node.getOperand(0);
  uint64_t shardBytes = shard && shard->getType().hasStaticShape()
                            ? shard->getType().getSizeInBytes()
                            : 0;
  uint64_t traffic = ringShardTraffic(shardBytes, getCollectiveRanks(node));
  cost.flops = 0;
  cost.bytesRead += traffic;
  cost.bytesWritten += traffic;
  return cost;
}

llvm::Error inferAllReduce(InferenceContext &ctx) {
  auto attrs = decodeAttrs(ctx);
  if (!attrs)
    return attrs.takeError();
  bool inPlace = attrs->inPlace;
  if (inPlace && ctx.getNumOutputs() != 1)
    return ctx.error(llvm::formatv("an in-place bucket has one result (its "
                                   "done flag), not {0}",
                                   ctx.getNumOutputs()));
  if (!inPlace && ctx.getNumOutputs() != ctx.getNumInputs())
    return ctx.error(llvm::formatv("{0} operands but {1} results: a bucket "
                                   "returns one reduced value per operand",
                                   ctx.getNumInputs(), ctx.getNumOutputs()));
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i) {
    if (!ctx.hasInput(i))
      return ctx.error(llvm::formatv("operand {0} is absent", i));
    const TensorType &type = ctx.getInputType(i);
    if (!isFloatingPoint(type.getDType()))
      return ctx.error(llvm::formatv("operand {0} is {1}; only floating-point "
                                     "tensors are reduced",
                                     i, type.str()));
    if (inPlace && type.getDType() != DType::F32)
      return ctx.error(llvm::formatv("operand {0} is {1}; an in-place bucket "
                                     "holds fp32 tensors",
                                     i, type.str()));
    if (!inPlace)
      setOutput(ctx, i, type);
  }
  if (inPlace)
    ctx.setOutputType(0, TensorType::get(DType::Bool, {1}));
  return llvm::Error::success();
}

llvm::Error checkReduction(InferenceContext &ctx) {
  return decodeAttrs(ctx).takeError();
}

/// The handle type of a split all-reduce of operands [first, end).
TensorType allReduceHandleType(unsigned operands, int64_t elements) {
  return operands == 1 ? TensorType::get(DType::Bool, {1})
                       : TensorType::get(DType::F32, {elements});
}

llvm::Error inferAllReduceStart(InferenceContext &ctx) {
  if (auto err = checkReduction(ctx))
    return err;
  auto elements = bucketOperandElements(ctx, 0);
  if (!elements)
    return elements.takeError();
  ctx.setOutputType(0, allReduceHandleType(ctx.getNumInputs(), *elements));
  return llvm::Error::success();
}

llvm::Error inferAllReduceWait(InferenceContext &ctx) {
  if (auto err = checkReduction(ctx))
    return err;
  if (!ctx.hasInput(0))
    return ctx.error("the handle (operand 0) is absent");
  auto elements = bucketOperandElements(ctx, 1);
  if (!elements)
    return elements.takeError();
  TensorType expected = allReduceHandleType(ctx.getNumInputs() - 1, *elements);
  if (ctx.getInputType(0) != expected)
    return ctx.error(llvm::formatv("the handle is {0}, but the bucket's "
                                   "AllReduceStart returns {1}",
                                   ctx.getInputType(0).str(), expected.str()));
  ctx.setOutputType(0, TensorType::get(DType::Bool, {1}));
  return llvm::Error::success();
}

/// One addition per element and rank; the bucket is read and written once
/// locally, and the ring all-reduce's traffic is added to both directions.
OpCost allReduceCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  int64_t ranks = 1;
  if (const Attribute *attr = node.getAttr("ranks"))
    ranks = attr->getInt();
  uint64_t elements = 0;
  for (const Value *operand : node.getOperands())
    if (operand)
      elements += staticElements(operand->getType());
  cost.flops = elements * static_cast<uint64_t>(ranks > 1 ? ranks - 1 : 0);
  uint64_t traffic = ringAllReduceTraffic(cost.bytesRead, ranks);
  cost.bytesRead += traffic;
  cost.bytesWritten += traffic;
  return cost;
}

} // namespace

void ops::registerCollectiveOps(OpRegistry &registry) {
  SchemaBuilder(kGmoptDomain, kAllReduceOp, 1)
      .inputs(1, kVariadic)
      .outputs(1, kVariadic)
      .attrString("reduction", "mean")
      .attrInt("ranks", 1)
      .attrInt("in_place", 0)
      .traits(TraitSideEffect)
      .writesOperands([](const Node &node) {
        llvm::SmallVector<unsigned, 8> written;
        auto attrs = getCollectiveAttrs(node);
        if (!attrs)
          llvm::consumeError(attrs.takeError());
        else if (attrs->inPlace)
          for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
            written.push_back(i);
        return written;
      })
      .amp(AmpClass::None)
      .infer(inferAllReduce)
      .cost(allReduceCost)
      .add(registry);
  // A one-tensor bucket is reduced in its own buffer from the start on:
  // the start writes it (nothing may be placed in it until the wait).
  SchemaBuilder(kGmoptDomain, kAllReduceStartOp, 1)
      .inputs(1, kVariadic)
      .outputs(1, 1)
      .attrString("reduction", "mean")
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands([](const Node &node) {
        llvm::SmallVector<unsigned, 8> written;
        if (node.getNumOperands() == 1)
          written.push_back(0);
        return written;
      })
      .amp(AmpClass::None)
      .infer(inferAllReduceStart)
      .cost(allReduceCost)
      .add(registry);
  SchemaBuilder(kGmoptDomain, kAllReduceWaitOp, 1)
      .inputs(2, kVariadic)
      .outputs(1, 1)
      .attrString("reduction", "mean")
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands([](const Node &node) {
        llvm::SmallVector<unsigned, 8> written;
        for (unsigned i = 1, e = node.getNumOperands(); i < e; ++i)
          written.push_back(i);
        return written;
      })
      .amp(AmpClass::None)
      .infer(inferAllReduceWait)
      .add(registry);
  SchemaBuilder(kGmoptDomain, kReduceScatterOp, 1)
      .inputs(1, kVariadic)
      .outputs(1, 1)
      .attrString("reduction", "mean")
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands(
          [](const Node &) { return llvm::SmallVector<unsigned, 8>(); })
      .amp(AmpClass::None)
      .infer(inferShardResult)
      .cost(reduceScatterCost)
      .add(registry);
  SchemaBuilder(kGmoptDomain, kAllGatherOp, 1)
      .inputs(2, kVariadic)
      .outputs(1, 1)
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands([](const Node &node) {
        llvm::SmallVector<unsigned, 8> written;
        for (unsigned i = 1, e = node.getNumOperands(); i < e; ++i)
          written.push_back(i);
        return written;
      })
      .amp(AmpClass::None)
      .infer(inferAllGather)
      .cost(allGatherCost)
      .add(registry);
  // Its value depends on the rank the step runs on: marked a side effect
  // so no pass folds it at compile time (as if on one rank) or merges it.
  SchemaBuilder(kGmoptDomain, kShardOp, 1)
      .inputs(1, kVariadic)
      .outputs(1, 1)
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands(
          [](const Node &) { return llvm::SmallVector<unsigned, 8>(); })
      .amp(AmpClass::None)
      .infer(inferShardResult)
      .add(registry);
}
