//===- ZeroShard.cpp - ZeRO stages 1 and 2: sharded optimizer state -------===//
//
// Implements the `zero-shard` pass (see ZeroShard.h): the optimizer's
// operand layout and the data-parallel buckets are read first and checked,
// then per bucket the gradient shard (stage 1: reduce-scatter of the whole
// accumulators before the optimizer; stage 2: reduce-scatter after the
// bucket's last gradient into a shard accumulator that replaces the whole
// ones), the parameter shard and the moment shards are made; the optimizer
// is rebuilt over the shards and one all-gather per bucket follows it; the
// signature, the old inputs and the sharding record are updated last.
//
//===----------------------------------------------------------------------===//

#include "passes/distributed/ZeroShard.h"
#include "passes/distributed/DataParallel.h"
#include "passes/planning/MemoryLimit.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/ZeroSharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "gmopt-zero-shard"

using namespace gmopt;

namespace {

llvm::Error zeroError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "zero-shard: " + message);
}

/// One bucket as the rewrite sees it.
struct ShardBucket {
  std::vector<Value *> params;
  /// Each parameter's operand index group in the optimizer.
  std::vector<unsigned> slots;
  int64_t elements = 0;
  int64_t shard = 0;
};

/// Removes \p node, an accumulation node replaced by a bucket's shard
/// accumulation: its results may only be graph outputs (ONNX Runtime's
/// accumulation flags), which go too.
llvm::Error eraseAccumulation(Graph &graph, Node *node) {
  for (unsigned r = 0, e = node->getNumResults(); r != e; ++r) {
    Value *result = node->getResult(r);
    if (!result)
      continue;
    for (unsigned i = graph.getNumOutputs(); i-- != 0;)
      if (graph.getOutput(i) == result)
        graph.removeOutput(i);
    if (!result->getUses().empty())
      return zeroError("the accumulation node '" + node->getName() +
                       "' has a result other nodes read; its gradient "
                       "cannot be sharded");
  }
  graph.eraseNode(node);
  return llvm::Error::success();
}

} // namespace

ZeroShardPass::ZeroShardPass() : ZeroShardPass(Options()) {}

ZeroShardPass::ZeroShardPass(Options initial) : options(initial) {
  declareOption("stage", options.stage,
                "1: optimizer state sharded; 2: gradients too", 1, 2);
  declareOption("ranks", options.ranks,
                "the world size; 1 places no collective", 1, int64_t(1) << 24);
  declareOption("bucket-bytes", options.bucketBytes,
                "smallest gradient bucket: bytes or `25MiB`, `4MB`");
  declareOption("reduction", options.reduction,
                "`mean` (global batch mean loss) or `sum` over ranks");
  declareStatistic("buckets", "flat buckets sharded");
  declareStatistic("parameters", "parameters sharded");
  declareStatistic("optimizer-state-shard-bytes",
                   "optimizer-state bytes one rank keeps");
  declareStatistic("gradient-shard-bytes",
                   "gradient accumulation bytes one rank keeps (stage 2)");
}

llvm::Expected<bool> ZeroShardPass::run(Module &module, PassContext &context) {
  if (options.reduction != "mean" && options.reduction != "sum")
    return zeroError("reduction must be mean or sum, got '" +
                     options.reduction + "'");
  auto limit =
      parseMemoryLimit(options.bucketBytes, "zero-shard: bucket-bytes");
  if (!limit)
    return limit.takeError();
  if (!limit->bytes)
    return zeroError("bucket-bytes must be bytes, not a percentage");
  Graph &graph = module.getGraph();
  for (const Node &node : graph.getNodes())
    if (node.getOp().domain == kGmoptDomain)
      return zeroError("the module already has collectives (node '" +
                       node.getName() + "')");
  if (options.ranks == 1)
    return false;
  TrainingSignature &signature = module.getSignature();
  if (!signature.hasGradients())
    return zeroError("the module has no gradients to shard");
  Node *optimizer = findOptimizerNode(module);
  if (!optimizer)
    return zeroError(llvm::formatv(
        "ZeRO stage {0} shards the in-graph optimizer's state, and the "
        "module has none: compile with --optimizer=adamw|sgd or "
        "--optimizer-model",
        options.stage));
  OptimizerOperands layout(*optimizer);
  if (!layout.isWellFormed())
    return zeroError("the optimizer " + optimizer->describe() +
                     " has a malformed operand list");
  OptimizerKind kind = layout.getKind();
  unsigned numStates = OptimizerOperands::numStates(kind);
  llvm::DenseMap<const Value *, unsigned> slotOf;
  for (unsigned i = 0, n = layout.size(); i != n; ++i)
    slotOf[layout.getParam(i)] = i;

  auto plan = planGradientBuckets(module, *limit->bytes);
  if (!plan)
    return plan.takeError();

  // Check everything before changing anything.
  std::vector<ShardBucket> buckets;
  size_t covered = 0;
  for (const GradientBucket &bucket : plan->buckets) {
    ShardBucket shardBucket;
    for (unsigned index : bucket.params) {
      const ParamInfo &info = signature.getParams()[index];
      auto slot = slotOf.find(info.param);
      if (slot == slotOf.end())
        return zeroError("trainable parameter '" + info.param->getName() +
                         "' is not updated by the in-graph optimizer");
      const TensorType &type = info.param->getType();
      if (type.getDType() != DType::F32 || !type.hasStaticShape())
        return zeroError("parameter '" + info.param->getName() + "' is " +
                         type.str() + "; ZeRO shards static fp32 parameters");
      if (options.stage == 2) {
        Value *read = layout.getGrad(slot->second);
        if (read != info.grad && read != info.accumulator)
          return zeroError("the optimizer reads '" + read->getName() +
                           "' for parameter '" + info.param->getName() +
                           "', neither its gradient nor its accumulator");
        if (info.accumulator && !info.accumulateNode)
          return zeroError("parameter '" + info.param->getName() +
                           "' has an accumulator but no accumulation node");
        if (!shardBucket.params.empty() &&
            bool(info.accumulator) !=
                bool(signature.lookup(shardBucket.params.front())->accumulator))
          return zeroError("bucket of '" + info.param->getName() +
                           "' mixes accumulated and unaccumulated gradients");
      }
      shardBucket.params.push_back(info.param);
      shardBucket.slots.push_back(slot->second);
      shardBucket.elements += type.getNumElements();
    }
    shardBucket.shard = zeroShardElements(shardBucket.elements, options.ranks);
    covered += shardBucket.params.size();
    buckets.push_back(std::move(shardBucket));
  }
  if (covered != layout.size())
    return zeroError(llvm::formatv("the optimizer updates {0} parameters but "
                                   "{1} have gradients",
                                   layout.size(), covered));

  if (!module.opsetImports.count(kGmoptDomain.str()))
    module.opsetImports[kGmoptDomain.str()] = 1;
  ZeroShardingRecord record;
  record.stage = options.stage;
  record.ranks = options.ranks;
  std::vector<Value *> removed;
  std::vector<Value *> paramShards, gradShards;
  llvm::SmallVector<llvm::SmallVector<Value *, 8>, 2> stateShards(numStates);
  NamedAttribute ranksAttr{"ranks", Attribute::getInt(options.ranks)};
  NamedAttribute reductionAttr{"reduction",
                               Attribute::getString(options.reduction)};
  Builder builder(graph);
  for (size_t b = 0, e = buckets.size(); b != e; ++b) {
    const ShardBucket &bucket = buckets[b];
    std::string tag = "zero.bucket" + std::to_string(b);
    TensorType shardType = TensorType::get(DType::F32, {bucket.shard});
    ZeroBucketRecord entry;
    entry.elements = bucket.elements;
    entry.shardElements = bucket.shard;
    for (Value *param : bucket.params) {
      entry.params.push_back(param->getName().str());
      llvm::SmallVector<int64_t, 4> dims = param->getType().getStaticShape();
      entry.paramShapes.emplace_back(dims.begin(), dims.end());
    }

    Value *gradShard = nullptr;
    if (options.stage == 1) {
      std::vector<Value *> whole;
      for (unsigned slot : bucket.slots)
        whole.push_back(layout.getGrad(slot));
      builder.setInsertionPoint(optimizer);
      builder.setPhase(Phase::Optimizer);
      gradShard =
          builder
              .create(OpName{kGmoptDomain.str(), kReduceScatterOp.str()}, whole,
                      {shardType}, {reductionAttr, ranksAttr},
                      tag + ".reducescatter")
              ->getResult(0);
      gradShard->setName(tag + ".gradient");
    } else {
      // After the producer of the bucket's last local gradient.
      std::vector<Value *> local;
      for (Value *param : bucket.params)
        local.push_back(signature.lookup(param)->grad);
      if (Node *last = findProducerSpan(graph, local).last)
        builder.setInsertionPointAfter(last);
      else
        builder.setInsertionPointToStart();
      builder.setPhase(Phase::Backward);
      Node *scatter = builder.create(
          OpName{kGmoptDomain.str(), kReduceScatterOp.str()}, local,
          {shardType}, {reductionAttr, ranksAttr}, tag + ".reducescatter");
      gradShard = scatter->getResult(0);
      const ParamInfo *first = signature.lookup(bucket.params.front());
      if (first->accumulator) {
        gradShard->setName(tag + ".gradient.local");
        Value *lazyReset = first->accumulateNode->getNumOperands() > 2
                               ? first->accumulateNode->getOperand(2)
                               : nullptr;
        Value *buffer = graph.addInput(shardType, tag + ".gradient");
        std::vector<Value *> operands = {buffer, gradShard};
        if (lazyReset)
          operands.push_back(lazyReset);
        builder.setInsertionPointAfter(scatter);
        builder.setPhase(Phase::Optimizer);
        Node *accumulate = builder.create(
            OpName{kMsDomain.str(), "InPlaceAccumulatorV2"}, operands,
            {TensorType::get(DType::Bool, {1})}, {}, tag + ".accumulation");
        accumulate->getResult(0)->setName(tag + ".accumulation.out");
        for (Value *param : bucket.params) {
          const ParamInfo *info = signature.lookup(param);
          Node *old = info->accumulateNode;
          removed.push_back(info->accumulator);
          signature.setAccumulation(param, nullptr, nullptr);
          if (auto err = eraseAccumulation(graph, old))
            return err;
        }
        gradShard = buffer;
      } else {
        gradShard->setName(tag + ".gradient");
      }
      entry.gradientShard = gradShard->getName().str();
    }
    gradShards.push_back(gradShard);

    std::vector<Value *> params(bucket.params.begin(), bucket.params.end());
    builder.setInsertionPoint(optimizer);
    builder.setPhase(Phase::Optimizer);
    Value *paramShard =
        builder
            .create(OpName{kGmoptDomain.str(), kShardOp.str()}, params,
                    {shardType}, {ranksAttr}, tag + ".shard")
            ->getResult(0);
    paramShard->setName(tag + ".params");
    paramShards.push_back(paramShard);
    for (unsigned k = 0; k != numStates; ++k) {
      Value *state =
          graph.addInput(shardType, tag + ".state" + std::to_string(k));
      stateShards[k].push_back(state);
      entry.stateShards.push_back(state->getName().str());
      std::vector<std::string> whole;
      for (unsigned slot : bucket.slots) {
        whole.push_back(layout.getState(k, slot)->getName().str());
        removed.push_back(layout.getState(k, slot));
      }
      entry.wholeStates.push_back(std::move(whole));
    }
    record.buckets.push_back(std::move(entry));
  }

  // The optimizer over the shards, in the old one's place.
  std::vector<Value *> operands = OptimizerOperands::layout(
      kind, layout.getLearningRate(), layout.getStep(),
      layout.getUpdateSignal(), paramShards, gradShards, stateShards);
  llvm::SmallVector<TensorType, 1> resultTypes;
  for (unsigned r = 0, e = optimizer->getNumResults(); r != e; ++r)
    resultTypes.push_back(optimizer->getResult(r)
                              ? optimizer->getResult(r)->getType()
                              : TensorType::get(DType::Bool, {1}));
  builder.setInsertionPoint(optimizer);
  builder.setPhase(optimizer->getPhase());
  std::vector<NamedAttribute> attrs(optimizer->getAttrs().begin(),
                                    optimizer->getAttrs().end());
  std::string name = optimizer->getName().str();
  Node *sharded = builder.create(optimizer->getOp(), operands, resultTypes,
                                 attrs, name + ".sharded");
  for (unsigned r = 0, e = optimizer->getNumResults(); r != e; ++r) {
    Value *old = optimizer->getResult(r);
    if (!old) {
      graph.dropResult(sharded, r);
      continue;
    }
    std::string resultName = old->getName().str();
    old->replaceAllUsesWith(sharded->getResult(r));
    old->setName(resultName + ".replaced");
    sharded->getResult(r)->setName(resultName);
  }
  graph.eraseNode(optimizer);
  sharded->setName(name);

  // Every rank's updated shard back into the parameters.
  builder.setInsertionPointAfter(sharded);
  for (size_t b = 0, e = buckets.size(); b != e; ++b) {
    std::vector<Value *> gatherOperands = {paramShards[b]};
    gatherOperands.insert(gatherOperands.end(), buckets[b].params.begin(),
                          buckets[b].params.end());
    Node *gather = builder.create(
        OpName{kGmoptDomain.str(), kAllGatherOp.str()}, gatherOperands,
        {TensorType::get(DType::Bool, {1})}, {ranksAttr},
        "zero.bucket" + std::to_string(b) + ".allgather");
    gather->getResult(0)->setName((gather->getName() + ".done").str());
    builder.setInsertionPointAfter(gather);
  }

  // The signature: each bucket's state shards on its first parameter.
  uint64_t stateBytes = 0, gradientShardBytes = 0;
  for (size_t b = 0, e = buckets.size(); b != e; ++b) {
    for (Value *param : buckets[b].params)
      signature.setOptimizerState(param, {});
    llvm::SmallVector<Value *, 2> state;
    for (unsigned k = 0; k != numStates; ++k) {
      state.push_back(stateShards[k][b]);
      stateBytes += stateShards[k][b]->getType().getSizeInBytes();
    }
    signature.setOptimizerState(buckets[b].params.front(), state);
    if (options.stage == 2)
      gradientShardBytes += gradShards[b]->getType().getSizeInBytes();
  }
  graph.removeValues(removed);
  recordZeroSharding(module, record);
  module.plan.clear();

  addStatistic(context, "buckets", buckets.size());
  addStatistic(context, "parameters", covered);
  addStatistic(context, "optimizer-state-shard-bytes", stateBytes);
  addStatistic(context, "gradient-shard-bytes", gradientShardBytes);
  return true;
}
