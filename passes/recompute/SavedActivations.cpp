//===- SavedActivations.cpp - What the backward pass keeps alive ----------===//
//
// One walk over the node order numbers the forward nodes, classifies them
// and finds, for every forward result, its first reader of a later phase.
// Regions are found by a backward walk from a value's producer that stops
// at kept and always-available values; positions come out sorted, so the
// clones run in forward order.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/SavedActivations.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace gmopt;

llvm::StringRef gmopt::recomputeBlockerName(RecomputeBlocker blocker) {
  switch (blocker) {
  case RecomputeBlocker::Recomputable:
    return "recomputable";
  case RecomputeBlocker::SideEffect:
    return "side effects";
  case RecomputeBlocker::UnknownOp:
    return "unknown op";
  case RecomputeBlocker::RandomWithoutStream:
    return "random op without a stream id";
  case RecomputeBlocker::GraphOutput:
    return "result is a graph output";
  case RecomputeBlocker::NonForwardOperand:
    return "reads a value of a later phase";
  }
  return "?";
}

llvm::Expected<SavedActivations>
SavedActivations::compute(const Module &module,
                          const StepThroughput &throughput) {
  SavedActivations result;
  const Graph &graph = module.getGraph();
  const OpRegistry &registry = OpRegistry::instance();
  for (const Value *output : graph.getOutputs())
    if (output)
      result.graphOutputs.insert(output);

  uint32_t index = 0;
  for (const Node &node : graph.getNodes()) {
    ++index;
    OpCost cost = estimateCost(node);
    result.stepFlops += cost.flops;
    uint64_t recomputeCost = recomputeCostFlops(node, throughput);
    result.stepCost += recomputeCost;
    if (node.getPhase() != Phase::Forward)
      continue;
    uint32_t position = result.forward.size();
    result.forward.push_back(&node);
    result.nodeIndex.push_back(index - 1);
    result.positionOf[&node] = position;
    result.flops.push_back(cost.flops);
    result.bytesWritten.push_back(cost.bytesWritten);
    result.costs.push_back(recomputeCost);

    RecomputeBlocker blocker = RecomputeBlocker::Recomputable;
    const OpSchema *schema = registry.lookup(node);
    if (!schema)
      blocker = RecomputeBlocker::UnknownOp;
    else if (schema->hasTrait(TraitSideEffect))
      blocker = RecomputeBlocker::SideEffect;
    else if (schema->hasTrait(TraitRandom) && !node.getStreamId())
      blocker = RecomputeBlocker::RandomWithoutStream;
    for (const Value *operand : node.getOperands())
      if (blocker == RecomputeBlocker::Recomputable && operand &&
          operand->getDefiningNode() &&
          operand->getDefiningNode()->getPhase() != Phase::Forward)
        blocker = RecomputeBlocker::NonForwardOperand;
    for (const Value *value : node.getResults()) {
      if (!value)
        continue;
      if (!value->getType().hasStaticShape())
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "value '%s' of node '%s' has no static shape: bind the symbolic "
            "dimensions (--dim NAME=N) before recompute",
            value->getName().str().c_str(), node.describe().c_str());
      result.forwardBytes[value] = value->getType().getSizeInBytes();
      if (blocker == RecomputeBlocker::Recomputable &&
          result.graphOutputs.contains(value))
        blocker = RecomputeBlocker::GraphOutput;
    }
    result.blockers.push_back(blocker);
  }

  // The last forward reader of each forward value (positions ascend).
  for (uint32_t position = 0, e = result.forward.size(); position != e;
       ++position)
    for (const Value *operand : result.forward[position]->getOperands())
      if (operand && result.forwardBytes.count(operand))
        result.lastForwardUse[operand] = position;

  // Values made from parameters and constants only, in forward order.
  for (uint32_t position = 0, e = result.forward.size(); position != e;
       ++position) {
    const Node *node = result.forward[position];
    if (!result.isRecomputable(position))
      continue;
    bool derived = true;
    for (const Value *operand : node->getOperands())
      derived &=
          !operand || operand->isInitializer() ||
          (operand->isGraphInput() && module.getSignature().lookup(operand)) ||
          result.parameterDerived.contains(operand);
    if (derived)
      for (const Value *value : node->getResults())
        if (value && !result.graphOutputs.contains(value))
          result.parameterDerived.insert(value);
  }

  // First later-phase reader of each forward value, in node order.
  llvm::DenseMap<const Value *, uint32_t> firstLaterUse;
  index = 0;
  for (const Node &node : graph.getNodes()) {
    uint32_t here = index++;
    if (node.getPhase() == Phase::Forward)
      continue;
    for (const Value *operand : node.getOperands())
      if (operand && result.forwardBytes.count(operand) &&
          !result.graphOutputs.contains(operand))
        firstLaterUse.try_emplace(operand, here);
  }
  for (uint32_t position = 0, e = result.forward.size(); position != e;
       ++position)
    for (const Value *value : result.forward[position]->getResults()) {
      auto it = value ? firstLaterUse.find(value) : firstLaterUse.end();
      if (it == firstLaterUse.end())
        continue;
      SavedActivation activation;
      activation.value = value;
      activation.bytes = result.forwardBytes.lookup(value);
      activation.producer = position;
      activation.firstLaterUse = it->second;
      result.savedIndex[value] = result.saved.size();
      result.saved.push_back(activation);
      result.savedBytes += activation.bytes;
    }
  return result;
}

std::optional<uint32_t>
SavedActivations::getForwardPosition(const Node *node) const {
  auto it = positionOf.find(node);
  if (it == positionOf.end())
    return std::nullopt;
  return it->second;
}

const SavedActivation *SavedActivations::lookupSaved(const Value *value) const {
  auto it = savedIndex.find(value);
  return it == savedIndex.end() ? nullptr : &saved[it->second];
}

bool SavedActivations::isForwardValue(const Value *value) const {
  return forwardBytes.count(value) && !graphOutputs.contains(value);
}

bool SavedActivations::isAlwaysAvailable(const Value *value) const {
  return !value->isNodeResult() || graphOutputs.contains(value);
}

uint32_t SavedActivations::getLastForwardUse(const Value *value) const {
  auto it = lastForwardUse.find(value);
  if (it != lastForwardUse.end())
    return it->second;
  return *getForwardPosition(value->getDefiningNode());
}

uint64_t SavedActivations::getBytes(const Value *value) const {
  return forwardBytes.lookup(value);
}

llvm::Expected<RecomputeRegion> SavedActivations::computeRegion(
    const Value *value, const llvm::DenseSet<const Value *> &kept) const {
  RecomputeRegion region;
  llvm::DenseSet<uint32_t> visited;
  llvm::DenseSet<const Value *> sourceSet;
  std::vector<const Value *> stack{value};
  while (!stack.empty()) {
    const Value *current = stack.back();
    stack.pop_back();
    if (current != value &&
        (kept.contains(current) || isAlwaysAvailable(current) ||
         !isForwardValue(current))) {
      if (sourceSet.insert(current).second)
        region.sources.push_back(current);
      continue;
    }
    std::optional<uint32_t> position =
        getForwardPosition(current->getDefiningNode());
    if (!position)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "value '%s' is not a forward value",
                                     current->getName().str().c_str());
    if (!isRecomputable(*position)) {
      if (sourceSet.insert(current).second) {
        region.sources.push_back(current);
        region.mustKeep.push_back(current);
      }
      continue;
    }
    if (!visited.insert(*position).second)
      continue;
    region.nodes.push_back(*position);
    region.flops += flops[*position];
    region.cost += costs[*position];
    for (const Value *operand : forward[*position]->getOperands())
      if (operand)
        stack.push_back(operand);
  }
  llvm::sort(region.nodes);
  return region;
}

void SavedActivations::print(llvm::raw_ostream &os) const {
  os << "saved activations: " << saved.size() << " values, " << savedBytes
     << " bytes (forward nodes: " << forward.size() << ")\n";
  for (const SavedActivation &activation : saved)
    os << "  " << activation.value->getName() << ": " << activation.bytes
       << " bytes, from " << forward[activation.producer]->describe()
       << ", first read at node " << activation.firstLaterUse << "\n";
  for (uint32_t position = 0, e = forward.size(); position != e; ++position)
    if (!isRecomputable(position))
      os << "  not recomputable: " << forward[position]->describe() << " ("
         << recomputeBlockerName(blockers[position]) << ")\n";
}

std::optional<uint64_t> gmopt::savedActivationBytes(const Module &module) {
  llvm::Expected<SavedActivations> saved = SavedActivations::compute(module);
  if (!saved) {
    llvm::consumeError(saved.takeError());
    return std::nullopt;
  }
  return saved->getSavedBytes();
}
