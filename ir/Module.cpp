//===- Module.cpp - Module facts and the training signature ---------------===//
//
// Implements the Module's opset queries and the recognition of the training
// signature: which graph inputs and initializers are trainable or frozen
// parameters, which value is each parameter's gradient and accumulation
// buffer, which output is the loss and which constant seeds the backward
// pass. The rules follow what ONNX Runtime's training artifact generator
// writes (see inferTrainingSignature in Module.h); they also cover gradient
// graphs that expose `P_grad` as plain outputs. inferNodePhases then gives
// every node its forward, backward or optimizer phase, once, at import.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"

#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace gmopt;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Module and TrainingSignature
//===----------------------------------------------------------------------===//

int64_t Module::getOpsetVersion(StringRef domain) const {
  if (domain == "ai.onnx")
    domain = kOnnxDomain;
  auto it = opsetImports.find(domain.str());
  return it == opsetImports.end() ? 0 : it->second;
}

bool TrainingSignature::hasGradients() const {
  return llvm::any_of(params, [](const ParamInfo &p) { return p.grad; });
}

const ParamInfo *TrainingSignature::lookup(const Value *param) const {
  auto it = paramIndex.find(param);
  return it == paramIndex.end() ? nullptr : &params[it->second];
}

ParamInfo *TrainingSignature::findParam(const Value *param) {
  auto it = paramIndex.find(param);
  return it == paramIndex.end() ? nullptr : &params[it->second];
}

void TrainingSignature::countRole(const Value *value, int delta) {
  if (!value)
    return;
  if (delta > 0) {
    ++roleCount[value];
    return;
  }
  auto it = roleCount.find(value);
  assert(it != roleCount.end() && "uncounting a value with no role");
  if (--it->second == 0)
    roleCount.erase(it);
}

void TrainingSignature::countRoles(const ParamInfo &info, int delta) {
  countRole(info.param, delta);
  countRole(info.grad, delta);
  countRole(info.accumulator, delta);
  for (const Value *state : info.optimizerState)
    countRole(state, delta);
  if (!info.accumulateNode)
    return;
  if (delta > 0) {
    ++accumulateNodes[info.accumulateNode];
    return;
  }
  auto it = accumulateNodes.find(info.accumulateNode);
  assert(it != accumulateNodes.end() && "uncounting an unknown node");
  if (--it->second == 0)
    accumulateNodes.erase(it);
}

void TrainingSignature::setRole(Value *&slot, Value *value) {
  countRole(slot, -1);
  slot = value;
  countRole(slot, 1);
}

void TrainingSignature::rebuildIndex() {
  paramIndex.clear();
  roleCount.clear();
  accumulateNodes.clear();
  for (unsigned i = 0, e = params.size(); i != e; ++i) {
    // The first entry of a parameter named twice (which the verifier
    // rejects) is the one lookup() finds, as the linear search did.
    paramIndex.try_emplace(params[i].param, i);
    countRoles(params[i], 1);
  }
  for (const Value *data : dataInputs)
    countRole(data, 1);
  countRole(loss, 1);
  countRole(lossGradSeed, 1);
  countRole(lazyResetGrad, 1);
  for (const Value *slot : stepSlots)
    countRole(slot, 1);
}

ParamInfo TrainingSignature::takeParam(unsigned index) {
  ParamInfo entry = std::move(params[index]);
  params.erase(params.begin() + index);
  rebuildIndex();
  return entry;
}

void TrainingSignature::appendParam(ParamInfo info) {
  paramIndex.try_emplace(info.param, params.size());
  countRoles(info, 1);
  params.push_back(std::move(info));
}

void TrainingSignature::addDataInput(Value *value) {
  countRole(value, 1);
  dataInputs.push_back(value);
}

size_t TrainingSignature::numTrainable() const {
  return llvm::count_if(params, [](const ParamInfo &p) { return p.trainable; });
}

bool TrainingSignature::empty() const {
  return params.empty() && dataInputs.empty() && !loss && !lossGradSeed &&
         !lazyResetGrad && llvm::all_of(stepSlots, [](Value *v) { return !v; });
}

bool TrainingSignature::references(const Value *value) const {
  return value && roleCount.count(value);
}

bool TrainingSignature::references(const Node *node) const {
  return node && accumulateNodes.count(node);
}

namespace {
bool replaceIn(Value *&slot, const Value *from, Value *to) {
  if (slot != from)
    return false;
  slot = to;
  return true;
}
} // namespace

bool TrainingSignature::setTrainable(const Value *param, bool trainable) {
  ParamInfo *info = findParam(param);
  if (info)
    info->trainable = trainable;
  return info;
}

bool TrainingSignature::setGrad(const Value *param, Value *grad) {
  ParamInfo *info = findParam(param);
  if (info)
    setRole(info->grad, grad);
  return info;
}

bool TrainingSignature::setAccumulation(const Value *param, Value *accumulator,
                                        Node *accumulateNode) {
  ParamInfo *info = findParam(param);
  if (!info)
    return false;
  countRoles(*info, -1);
  info->accumulator = accumulator;
  info->accumulateNode = accumulateNode;
  countRoles(*info, 1);
  return true;
}

bool TrainingSignature::setOptimizerState(const Value *param,
                                          llvm::ArrayRef<Value *> state) {
  ParamInfo *info = findParam(param);
  if (!info)
    return false;
  for (const Value *old : info->optimizerState)
    countRole(old, -1);
  info->optimizerState.assign(state.begin(), state.end());
  for (const Value *added : info->optimizerState)
    countRole(added, 1);
  return true;
}

bool TrainingSignature::replaceValue(const Value *from, Value *to) {
  // Most replaced values play no role: the index answers without a walk.
  if (!references(from))
    return false;
  bool changed = false;
  for (ParamInfo &param : params) {
    changed |= replaceIn(param.param, from, to);
    changed |= replaceIn(param.grad, from, to);
    changed |= replaceIn(param.accumulator, from, to);
    for (Value *&state : param.optimizerState)
      changed |= replaceIn(state, from, to);
  }
  for (Value *&data : dataInputs)
    changed |= replaceIn(data, from, to);
  changed |= replaceIn(loss, from, to);
  changed |= replaceIn(lossGradSeed, from, to);
  changed |= replaceIn(lazyResetGrad, from, to);
  for (Value *&slot : stepSlots)
    changed |= replaceIn(slot, from, to);
  // Every role \p from filled is now \p to's (or empty).
  auto count = roleCount.find(from);
  unsigned roles = count->second;
  roleCount.erase(count);
  if (to)
    roleCount[to] += roles;
  auto entry = paramIndex.find(from);
  if (entry != paramIndex.end()) {
    unsigned index = entry->second;
    paramIndex.erase(entry);
    if (to) {
      // lookup() finds the first entry of a value named twice.
      auto [it, inserted] = paramIndex.try_emplace(to, index);
      if (!inserted)
        it->second = std::min(it->second, index);
    }
  }
  return changed;
}

bool TrainingSignature::replaceNode(const Node *from, Node *to) {
  if (!references(from))
    return false;
  unsigned entries = 0;
  for (ParamInfo &param : params) {
    if (param.accumulateNode == from) {
      param.accumulateNode = to;
      ++entries;
    }
  }
  accumulateNodes.erase(from);
  if (to)
    accumulateNodes[to] += entries;
  return entries != 0;
}

StringRef gmopt::stepSlotName(StepSlot slot) {
  switch (slot) {
  case StepSlot::LearningRate:
    return "learning_rate";
  case StepSlot::StepCount:
    return "step_count";
  case StepSlot::LossScale:
    return "loss_scale";
  case StepSlot::LossScaleGoodSteps:
    return "loss_scale_good_steps";
  }
  llvm_unreachable("unknown step slot");
}

std::optional<StepSlot> gmopt::parseStepSlotName(StringRef name) {
  for (unsigned i = 0; i != kNumStepSlots; ++i)
    if (stepSlotName(static_cast<StepSlot>(i)) == name)
      return static_cast<StepSlot>(i);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Editing the signature together with the graph
//===----------------------------------------------------------------------===//

bool gmopt::hasSideEffects(const Node &node) {
  // Named explicitly as well as by trait: losing an accumulation silently
  // corrupts training, so this does not depend on the registry alone.
  if (node.getDomain() == kMsDomain &&
      (node.getOpType() == "InPlaceAccumulatorV2" ||
       node.getOpType() == "InPlaceAccumulator"))
    return true;
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  if (!schema)
    return true;
  return schema->hasTrait(TraitSideEffect) || schema->hasTrait(TraitRandom);
}

namespace {

llvm::Error editError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string label(const Value *value) {
  if (!value->getName().empty())
    return "'" + value->getName().str() + "'";
  if (const Node *def = value->getDefiningNode())
    return "result " + std::to_string(value->getResultIndex()) + " of node " +
           def->describe();
  return "<unnamed value>";
}

/// What removing one parameter entry erases, computed (and checked) before
/// anything changes.
struct ParamRemoval {
  /// Index of the entry in the parameter list.
  size_t index = 0;
  /// The accumulation node and the update nodes (readers of the optimizer
  /// state), in schedule order.
  std::vector<Node *> nodes;
  /// Graph outputs to drop (the gradient, results of the nodes above).
  llvm::SmallVector<unsigned, 4> outputs;
  /// Fused optimizer nodes that also update other parameters: each is
  /// rebuilt without this parameter's operands (weight, gradient, state).
  std::vector<Node *> split;
};

} // namespace

llvm::Error Module::addParameter(ParamInfo info) {
  if (!info.param)
    return editError("cannot add a parameter without a value");
  auto belongs = [&](const Value *value) { return value->getGraph() == &graph; };
  llvm::SmallPtrSet<const Value *, 8> seen;
  auto check = [&](const Value *value, llvm::StringRef role) -> llvm::Error {
    if (!belongs(value))
      return editError("cannot add parameter " + label(info.param) + ": its " +
                       role + " " + label(value) +
                       " is not a value of this module's graph");
    if (signature.references(value))
      return editError("cannot add parameter " + label(info.param) + ": its " +
                       role + " " + label(value) +
                       " already plays a role in the training signature");
    if (!seen.insert(value).second)
      return editError("cannot add parameter " + label(info.param) + ": " +
                       label(value) + " appears twice in its entry");
    return llvm::Error::success();
  };
  if (llvm::Error err = check(info.param, "value"))
    return err;
  if (info.param->isNodeResult())
    return editError("cannot add parameter " + label(info.param) +
                     ": it is a node result, not a graph input or "
                     "initializer");
  const TensorType &type = info.param->getType();
  if (info.grad) {
    if (!info.trainable)
      return editError("cannot add frozen parameter " + label(info.param) +
                       " with a gradient");
    if (llvm::Error err = check(info.grad, "gradient"))
      return err;
    if (info.grad->getType() != type)
      return editError("cannot add parameter " + label(info.param) +
                       ": its gradient has type " +
                       info.grad->getType().str() + ", not " + type.str());
  }
  if (info.accumulator) {
    if (llvm::Error err = check(info.accumulator, "accumulator"))
      return err;
    if (!info.accumulator->isGraphInput())
      return editError("cannot add parameter " + label(info.param) +
                       ": its accumulator " + label(info.accumulator) +
                       " is not a graph input");
    if (info.accumulator->getType() != type)
      return editError("cannot add parameter " + label(info.param) +
                       ": its accumulator has type " +
                       info.accumulator->getType().str() + ", not " +
                       type.str());
  }
  if (info.accumulateNode) {
    if (info.accumulateNode->getGraph() != &graph)
      return editError("cannot add parameter " + label(info.param) +
                       ": its accumulation node is not in this graph");
    if (signature.references(info.accumulateNode))
      return editError("cannot add parameter " + label(info.param) +
                       ": its accumulation node " +
                       info.accumulateNode->describe() +
                       " already accumulates another parameter");
  }
  for (const Value *state : info.optimizerState) {
    if (llvm::Error err = check(state, "optimizer state"))
      return err;
    if (!state->isGraphInput())
      return editError("cannot add parameter " + label(info.param) +
                       ": its optimizer state " + label(state) +
                       " is not a graph input");
  }
  signature.appendParam(std::move(info));
  return llvm::Error::success();
}

/// Plans the removal of entry \p param; \p allowParamUses lets other nodes
/// keep reading the parameter (a merge redirects them first).
static llvm::Expected<ParamRemoval>
planParamRemoval(const Module &module, const Value *param,
                 bool allowParamUses) {
  const TrainingSignature &signature = module.getSignature();
  llvm::ArrayRef<ParamInfo> params = signature.getParams();
  auto it = llvm::find_if(
      params, [&](const ParamInfo &info) { return info.param == param; });
  if (!param || it == params.end())
    return editError("cannot remove " +
                     (param ? label(param) : std::string("a null value")) +
                     ": it is not a parameter of the training signature");
  const ParamInfo &entry = *it;
  ParamRemoval removal;
  removal.index = it - params.begin();

  // The update nodes read this parameter's optimizer state; each must
  // update this parameter alone.
  llvm::SmallPtrSet<Node *, 8> doomed;
  if (entry.accumulateNode)
    doomed.insert(entry.accumulateNode);
  for (const Value *state : entry.optimizerState)
    for (Node *user : state->getUsers())
      doomed.insert(user);
  // An in-graph optimizer updating the parameter is an update node even
  // without state (SGD).
  for (Node *user : entry.param->getUsers())
    if (OptimizerOperands::kindOf(*user))
      doomed.insert(user);
  // A fused optimizer node that updates other parameters too is not erased
  // but rebuilt without this one's operands.
  llvm::SmallPtrSet<Node *, 2> split;
  for (Node *node : doomed)
    if (OptimizerOperands::kindOf(*node) &&
        OptimizerOperands(*node).size() > 1)
      split.insert(node);
  for (Node *node : split) {
    OptimizerOperands layout(*node);
    unsigned at = layout.size();
    for (unsigned i = 0; i != layout.size(); ++i)
      if (node->getOperand(layout.paramIndex(i)) == entry.param)
        at = i;
    if (at == layout.size())
      return editError("cannot remove parameter " + label(param) + ": node " +
                       node->describe() +
                       " reads its optimizer state but does not update it");
    doomed.erase(node);
    removal.split.push_back(node);
  }
  for (Node *node : doomed) {
    for (const Value *operand : node->getOperands()) {
      if (!operand)
        continue;
      for (const ParamInfo &other : params) {
        if (&other == &entry)
          continue;
        if (other.param == operand || other.grad == operand ||
            other.accumulator == operand ||
            llvm::is_contained(other.optimizerState, operand))
          return editError(
              "cannot remove parameter " + label(param) + ": node " +
              node->describe() + " also updates parameter " +
              label(other.param));
      }
    }
    for (const Value *result : node->getResults()) {
      if (!result)
        continue;
      for (OpOperand &use : result->getUses()) {
        if (use.isGraphOutput()) {
          removal.outputs.push_back(use.getIndex());
          continue;
        }
        if (!doomed.count(use.getOwner()))
          return editError("cannot remove parameter " + label(param) +
                           ": " + label(result) + " is read by node " +
                           use.getOwner()->describe());
      }
    }
  }
  auto checkReaders = [&](const Value *value,
                          llvm::StringRef role) -> llvm::Error {
    for (Node *user : value->getUsers())
      if (!doomed.count(user) && !split.count(user))
        return editError("cannot remove parameter " + label(param) + ": its " +
                         role + " is still read by node " + user->describe());
    return llvm::Error::success();
  };
  if (!allowParamUses)
    if (llvm::Error err = checkReaders(param, "value"))
      return err;
  if (entry.accumulator)
    if (llvm::Error err = checkReaders(entry.accumulator, "accumulator"))
      return err;
  if (entry.grad)
    for (OpOperand &use : entry.grad->getUses())
      if (use.isGraphOutput())
        removal.outputs.push_back(use.getIndex());
  if (!allowParamUses)
    for (OpOperand &use : param->getUses())
      if (use.isGraphOutput())
        removal.outputs.push_back(use.getIndex());
  llvm::sort(removal.outputs);
  removal.outputs.erase(std::unique(removal.outputs.begin(),
                                    removal.outputs.end()),
                        removal.outputs.end());
  for (const Node &node : module.getGraph().getNodes())
    if (doomed.count(const_cast<Node *>(&node)))
      removal.nodes.push_back(const_cast<Node *>(&node));
  return removal;
}

/// Erases the nodes feeding \p seeds that became unused (no side effects,
/// not named by \p signature), transitively, and the initializers they
/// leave unused.
static void eraseUnusedProducers(Graph &graph,
                                 const TrainingSignature &signature,
                                 llvm::ArrayRef<Value *> seeds) {
  llvm::SmallVector<Node *, 16> worklist;
  llvm::SmallPtrSet<Node *, 16> erased;
  llvm::SmallVector<Value *, 8> initializers;
  llvm::SmallPtrSet<Value *, 8> initializerSet;
  auto visit = [&](Value *value) {
    if (!value || !value->useEmpty() || signature.references(value))
      return;
    if (Node *def = value->getDefiningNode())
      worklist.push_back(def);
    else if (value->isInitializer() && initializerSet.insert(value).second)
      initializers.push_back(value);
  };
  for (Value *seed : seeds)
    visit(seed);
  while (!worklist.empty()) {
    Node *node = worklist.pop_back_val();
    if (erased.count(node) || !node->resultsUnused() || hasSideEffects(*node) ||
        signature.references(node) ||
        llvm::any_of(node->getResults(),
                     [&](Value *v) { return signature.references(v); }))
      continue;
    llvm::SmallVector<Value *, 4> operands = node->getOperands();
    for (unsigned i = 0, e = node->getNumOperands(); i != e; ++i)
      node->setOperand(i, nullptr);
    erased.insert(node);
    graph.eraseNode(node);
    for (Value *operand : operands)
      visit(operand);
  }
  llvm::erase_if(initializers, [](Value *v) { return !v->useEmpty(); });
  graph.removeValues(initializers);
}

/// Rebuilds fused optimizer node \p node without the operands of parameter
/// \p param (its weight, gradient and state), appending the dropped
/// operands to \p seeds. The new node takes the old one's place, name,
/// phase and attributes; the old one's results' uses move to it.
static void splitOptimizerNode(Graph &graph, Node &node, const Value *param,
                               llvm::SmallVectorImpl<Value *> &seeds) {
  OptimizerOperands layout(node);
  unsigned at = 0;
  while (node.getOperand(layout.paramIndex(at)) != param)
    ++at;
  llvm::SmallVector<unsigned, 4> drop = {layout.paramIndex(at),
                                         layout.gradIndex(at)};
  for (unsigned k = 0; k != OptimizerOperands::numStates(layout.getKind());
       ++k)
    drop.push_back(layout.stateIndex(k, at));
  llvm::SmallVector<Value *, 16> operands;
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    if (llvm::is_contained(drop, i))
      seeds.push_back(node.getOperand(i));
    else
      operands.push_back(node.getOperand(i));
  }
  llvm::SmallVector<TensorType, 2> types;
  for (Value *result : node.getResults())
    types.push_back(result ? result->getType() : TensorType());
  Builder builder(graph);
  builder.setInsertionPoint(&node);
  builder.setPhase(node.getPhase());
  Node *rebuilt = builder.create(node.getOp(), operands, types,
                                 node.getAttrs(), node.getName().str());
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (Value *result = node.getResult(i)) {
      std::string name = result->getName().str();
      result->replaceAllUsesWith(rebuilt->getResult(i));
      rebuilt->getResult(i)->setName(name);
    }
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
    node.setOperand(i, nullptr);
  graph.eraseNode(&node);
}

/// Applies \p removal: drops the outputs, erases the nodes, removes the
/// entry, then the values that lived only for it.
/// \p takeEntry erases entry \p removal.index from \p signature and returns
/// it.
static void
applyParamRemoval(Graph &graph, const TrainingSignature &signature,
                  llvm::function_ref<ParamInfo(unsigned)> takeEntry,
                  const ParamRemoval &removal) {
  ParamInfo entry = takeEntry(removal.index);
  // A gradient that is a node result is erased with its producers below;
  // whether it is a graph input must be known before that.
  bool gradIsInput = entry.grad && !entry.grad->isNodeResult();
  for (unsigned index : llvm::reverse(removal.outputs))
    graph.removeOutput(index);
  llvm::SmallVector<Value *, 16> seeds;
  for (Node *node : removal.split)
    splitOptimizerNode(graph, *node, entry.param, seeds);
  for (Node *node : removal.nodes)
    for (unsigned i = 0, e = node->getNumOperands(); i != e; ++i) {
      seeds.push_back(node->getOperand(i));
      node->setOperand(i, nullptr);
    }
  for (Node *node : llvm::reverse(removal.nodes))
    graph.eraseNode(node);
  seeds.push_back(entry.grad);
  eraseUnusedProducers(graph, signature, seeds);
  llvm::SmallVector<Value *, 4> inputs;
  auto removeIfUnused = [&](Value *value) {
    if (value && value->useEmpty() && !value->isNodeResult() &&
        !signature.references(value) && !llvm::is_contained(inputs, value))
      inputs.push_back(value);
  };
  removeIfUnused(entry.param);
  removeIfUnused(entry.accumulator);
  for (Value *state : entry.optimizerState)
    removeIfUnused(state);
  if (gradIsInput)
    removeIfUnused(entry.grad);
  graph.removeValues(inputs);
}

llvm::Error Module::removeParameter(Value *param) {
  llvm::Expected<ParamRemoval> removal =
      planParamRemoval(*this, param, /*allowParamUses=*/false);
  if (!removal)
    return removal.takeError();
  applyParamRemoval(
      graph, signature,
      [&](unsigned index) { return signature.takeParam(index); }, *removal);
  return llvm::Error::success();
}

llvm::Error Module::mergeParameter(Value *into, Value *from) {
  if (!into || !from)
    return editError("cannot merge a null parameter");
  if (into == from)
    return editError("cannot merge parameter " + label(into) + " into itself");
  const ParamInfo *target = signature.lookup(into);
  const ParamInfo *source = signature.lookup(from);
  if (!target || !source)
    return editError("cannot merge " + label(from) + " into " + label(into) +
                     ": " + label(target ? from : into) +
                     " is not a parameter of the training signature");
  if (into->getType() != from->getType())
    return editError("cannot merge " + label(from) + " into " + label(into) +
                     ": their types differ (" + from->getType().str() +
                     " and " + into->getType().str() + ")");
  if (target->trainable != source->trainable)
    return editError("cannot merge " + label(from) + " into " + label(into) +
                     ": one is trainable and the other frozen");
  llvm::Expected<ParamRemoval> removal =
      planParamRemoval(*this, from, /*allowParamUses=*/true);
  if (!removal)
    return removal.takeError();
  Value *targetGrad = target->grad, *sourceGrad = source->grad;

  // Where the sum goes: right after the later of the two gradients. Nodes
  // between them that read the target's gradient (or read such a node)
  // move after the sum, keeping their order.
  std::vector<Node *> toMove;
  Node *sumAfter = nullptr;
  if (targetGrad && sourceGrad) {
    Node *targetDef = targetGrad->getDefiningNode();
    Node *sourceDef = sourceGrad->getDefiningNode();
    sumAfter = sourceDef ? sourceDef : targetDef;
    bool sourceLater = true;
    if (targetDef && sourceDef) {
      sourceLater = false;
      for (auto it = std::next(targetDef->getIterator()); it != graph.end();
           ++it)
        if (&*it == sourceDef) {
          sourceLater = true;
          break;
        }
      sumAfter = sourceLater ? sourceDef : targetDef;
    }
    if (sourceDef && sourceLater) {
      llvm::SmallPtrSet<const Value *, 16> tainted;
      tainted.insert(targetGrad);
      auto start = targetDef ? std::next(targetDef->getIterator())
                             : graph.begin();
      llvm::SmallPtrSet<Node *, 8> doomed(removal->nodes.begin(),
                                          removal->nodes.end());
      for (auto it = start;; ++it) {
        Node &node = *it;
        bool reads = !doomed.count(&node) &&
                     llvm::any_of(node.getOperands(), [&](Value *operand) {
                       return operand && tainted.count(operand);
                     });
        if (reads) {
          if (&node == sourceDef)
            return editError("cannot merge " + label(from) + " into " +
                             label(into) + ": the gradient of " + label(from) +
                             " depends on the gradient of " + label(into));
          toMove.push_back(&node);
          for (Value *result : node.getResults())
            if (result)
              tainted.insert(result);
        }
        if (&node == sourceDef)
          break;
      }
    }
  }

  // Nothing can fail from here on. Uses by the doomed nodes go away with
  // them; every other use of the source reads the target.
  llvm::SmallPtrSet<Node *, 8> doomed(removal->nodes.begin(),
                                      removal->nodes.end());
  // A fused optimizer node keeps reading the source until it is rebuilt
  // without it.
  doomed.insert(removal->split.begin(), removal->split.end());
  llvm::SmallVector<OpOperand *, 8> sourceUses;
  for (OpOperand &use : from->getUses())
    if (use.isGraphOutput() || !doomed.count(use.getOwner()))
      sourceUses.push_back(&use);
  for (OpOperand *use : sourceUses)
    use->set(into);

  if (targetGrad && sourceGrad) {
    Graph::iterator before =
        sumAfter ? std::next(sumAfter->getIterator()) : graph.begin();
    for (Node *node : toMove)
      graph.moveNode(node, before);
    Builder builder(graph);
    builder.setPhase(Phase::Backward);
    if (sumAfter)
      builder.setInsertionPointAfter(sumAfter);
    else
      builder.setInsertionPointToStart();
    Node *sum = builder.create(OpName{std::string(kOnnxDomain), "Add"},
                               {targetGrad, sourceGrad},
                               {targetGrad->getType()});
    Value *sumValue = sum->getResult(0);
    // The sum is the target's gradient now, so it takes the ONNX Runtime
    // name `P_grad`; the target's own contribution is renamed.
    sumValue->setName(targetGrad->getName());
    if (!targetGrad->getName().empty())
      targetGrad->setName((targetGrad->getName() + ".own").str());
    llvm::SmallVector<OpOperand *, 8> targetUses;
    for (OpOperand &use : targetGrad->getUses())
      if (use.getOwner() != sum)
        targetUses.push_back(&use);
    for (OpOperand *use : targetUses)
      use->set(sumValue);
    signature.setGrad(into, sumValue);
  } else if (sourceGrad) {
    // The source's gradient becomes the target's, outputs included.
    signature.setGrad(into, sourceGrad);
    llvm::erase_if(removal->outputs, [&](unsigned index) {
      return graph.getOutput(index) == sourceGrad;
    });
  }
  applyParamRemoval(
      graph, signature,
      [&](unsigned index) { return signature.takeParam(index); }, *removal);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Recognising ONNX Runtime's naming
//===----------------------------------------------------------------------===//

namespace {

/// ONNX Runtime's suffixes: `P_grad`, `P_grad.accumulation.buffer`.
constexpr StringRef kGradSuffix = "_grad";
constexpr StringRef kAccumulationBufferSuffix = ".accumulation.buffer";
constexpr StringRef kLazyResetGradName = "lazy_reset_grad";

/// Ops that add a gradient into its accumulation buffer.
bool isAccumulatorOp(const Node &node) {
  return node.isa(kMsDomain, "InPlaceAccumulatorV2") ||
         node.isa(kMsDomain, "InPlaceAccumulator");
}

/// Accumulation, zeroing and parameter-update ops of ONNX Runtime.
bool isOptimizerOp(const Node &node) {
  if (node.getDomain() != kMsDomain)
    return false;
  return isAccumulatorOp(node) ||
         llvm::is_contained(
             {StringRef("ZeroGradient"), StringRef("AdamOptimizer"),
              StringRef("AdamWOptimizer"), StringRef("SGDOptimizer"),
              StringRef("SGDOptimizerV2"), StringRef("LambOptimizer")},
             node.getOpType());
}

/// ONNX Runtime's gradient kernels: ReluGrad, SoftmaxGrad_13,
/// SoftmaxCrossEntropyLossInternalGrad, BiasGeluGrad_dX...
bool isGradientOp(const Node &node) {
  if (node.getDomain() != kMsDomain)
    return false;
  StringRef type = node.getOpType();
  return type.ends_with("Grad") || type.contains("Grad_");
}

/// Nodes that ONNX Runtime's gradient builder names `<forward node>_Grad/...`
/// or that define a `..._grad` value belong to the backward pass even when
/// they only read forward values (a Transpose of a weight, a Shape...).
bool hasGradientName(const Node &node) {
  if (node.getName().contains("_Grad/"))
    return true;
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (const Value *result = node.getResult(i))
      if (result->getName().ends_with(kGradSuffix))
        return true;
  return false;
}

/// PyTorch parameter and buffer names (`fc1.weight`, `bn.running_mean`).
bool looksLikeParameterName(StringRef name) {
  return name.contains('.') &&
         (name.ends_with(".weight") || name.ends_with(".bias") ||
          name.ends_with(".running_mean") || name.ends_with(".running_var"));
}

bool isScalarLike(const TensorType &type) {
  return type.hasStaticShape() && type.getNumElements() == 1;
}

/// The phase rule shared by inferNodePhases and the frozen-initializer test.
llvm::DenseMap<const Node *, Phase> computePhases(const Graph &graph,
                                                  const Value *lossGradSeed) {
  llvm::DenseMap<const Node *, Phase> phases;
  phases.reserve(graph.getNumNodes());
  for (const Node &node : graph.getNodes()) {
    bool afterOptimizer = false, afterBackward = false;
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      const Value *operand = node.getOperand(i);
      if (!operand)
        continue;
      if (lossGradSeed && operand == lossGradSeed)
        afterBackward = true;
      const Node *producer = operand->getDefiningNode();
      if (!producer)
        continue;
      auto it = phases.find(producer);
      // Node order is a topological order, so producers are classified;
      // an unordered graph (mid-rewrite) just sees fewer edges.
      if (it == phases.end())
        continue;
      afterOptimizer |= it->second == Phase::Optimizer;
      afterBackward |= it->second == Phase::Backward;
    }
    Phase phase = Phase::Forward;
    if (isOptimizerOp(node) || afterOptimizer)
      phase = Phase::Optimizer;
    else if (afterBackward || isGradientOp(node) || hasGradientName(node))
      phase = Phase::Backward;
    phases[&node] = phase;
  }
  return phases;
}

} // namespace

//===----------------------------------------------------------------------===//
// inferTrainingSignature
//===----------------------------------------------------------------------===//

namespace {

/// Applies the rules documented at inferTrainingSignature, one step per
/// method, to one graph.
class SignatureRecognizer {
public:
  explicit SignatureRecognizer(Graph &graph) : graph(graph) {}

  TrainingSignature run() {
    indexValuesByName();
    findAccumulations();
    findGradients();
    findLoss();
    findOptimizers();
    classifyInputs();
    classifyInitializers();
    recordOptimizerState();
    signature.setLazyResetGrad(lazyResetGrad);
    return std::move(signature);
  }

private:
  /// An InPlaceAccumulator(V2) node and the buffer it accumulates into.
  struct Accumulation {
    Value *buffer;
    Node *node;
  };

  /// Every value by name; the first definition of a name wins.
  void indexValuesByName() {
    size_t numValues = graph.getInputs().size() + graph.getInitializers().size();
    for (const Node &node : graph.getNodes())
      numValues += node.getNumResults();
    byName = llvm::StringMap<Value *>(numValues);
    auto index = [&](Value *value) {
      if (value && !value->getName().empty())
        byName.try_emplace(value->getName(), value);
    };
    for (const std::unique_ptr<Value> &input : graph.getInputs())
      index(input.get());
    for (const std::unique_ptr<Value> &init : graph.getInitializers())
      index(init.get());
    for (Node &node : graph.getNodes())
      for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
        index(node.getResult(i));
  }

  /// InPlaceAccumulatorV2(buffer, grad, lazy_reset_grad) nodes.
  void findAccumulations() {
    lazyResetGrad = byName.lookup(kLazyResetGradName);
    if (lazyResetGrad && !lazyResetGrad->isGraphInput())
      lazyResetGrad = nullptr;
    // Mixed precision's state, by name.
    for (StepSlot slot : {StepSlot::LossScale, StepSlot::LossScaleGoodSteps}) {
      Value *state = byName.lookup(stepSlotName(slot));
      if (state && state->isGraphInput() &&
          state->getType().getDType() == DType::F32 &&
          state->getType().hasRank() && state->getType().getRank() == 0) {
        optimizerSlots[static_cast<unsigned>(slot)] = state;
        optimizerInputs.insert(state);
      }
    }
    for (Node &node : graph.getNodes()) {
      if (!isAccumulatorOp(node) || node.getNumOperands() < 2 ||
          !node.getOperand(0) || !node.getOperand(1))
        continue;
      if (optimizerInputs.count(node.getOperand(0))) {
        // The dynamic loss scale's update, not a gradient's accumulation.
        for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
          if (Value *result = node.getResult(i))
            accumulationOutputs.insert(result);
        continue;
      }
      accumulationOfGrad.try_emplace(node.getOperand(1),
                                     Accumulation{node.getOperand(0), &node});
      buffers.insert(node.getOperand(0));
      for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
        if (Value *result = node.getResult(i))
          accumulationOutputs.insert(result);
      if (!lazyResetGrad && node.getNumOperands() > 2 && node.getOperand(2) &&
          node.getOperand(2)->isGraphInput())
        lazyResetGrad = node.getOperand(2);
    }
  }

  bool isParamCandidate(const Value *value) const {
    return value && (value->isGraphInput() || value->isInitializer()) &&
           !buffers.count(value) && value != lazyResetGrad;
  }

  /// The gradient of each parameter: the value accumulated into
  /// `P_grad.accumulation.buffer`, or the value named `P_grad`.
  void findGradients() {
    for (auto &[grad, accumulation] : accumulationOfGrad) {
      StringRef bufferName = accumulation.buffer->getName();
      if (!bufferName.consume_back(kAccumulationBufferSuffix) ||
          !bufferName.consume_back(kGradSuffix))
        continue;
      Value *param = byName.lookup(bufferName);
      if (isParamCandidate(param) && param != grad) {
        gradOfParam[param] = grad;
        grads.insert(grad);
      }
    }
    auto considerByName = [&](Value *param) {
      if (!isParamCandidate(param) || gradOfParam.count(param) ||
          param->getName().empty())
        return;
      Value *grad = byName.lookup((param->getName() + kGradSuffix).str());
      if (!grad || grad == param || grad->isGraphInput())
        return;
      gradOfParam[param] = grad;
      grads.insert(grad);
    };
    for (const std::unique_ptr<Value> &input : graph.getInputs())
      considerByName(input.get());
    for (const std::unique_ptr<Value> &init : graph.getInitializers())
      considerByName(init.get());
  }

  /// The value named `<loss>_grad`, if it can be a seed.
  Value *seedOf(const Value *loss) const {
    if (loss->getName().empty())
      return nullptr;
    Value *seed = byName.lookup((loss->getName() + kGradSuffix).str());
    return seed && !grads.count(seed) && seed != loss ? seed : nullptr;
  }

  /// The first float output (not an accumulation output, not a gradient)
  /// that has a seed; else the first scalar one; else, in a training graph,
  /// the first one.
  void findLoss() {
    llvm::SmallVector<Value *, 4> candidates;
    for (Value *output : graph.getOutputs())
      if (output && !accumulationOutputs.count(output) &&
          !grads.count(output) && isFloatingPoint(output->getType().getDType()))
        candidates.push_back(output);
    auto pick = [&](auto predicate) -> Value * {
      auto it = llvm::find_if(candidates, predicate);
      return it == candidates.end() ? nullptr : *it;
    };
    Value *loss = pick([&](Value *v) { return seedOf(v) != nullptr; });
    if (!loss)
      loss = pick([](Value *v) { return isScalarLike(v->getType()); });
    if (!loss && !gradOfParam.empty() && !candidates.empty())
      loss = candidates.front();
    signature.setLoss(loss);
    signature.setLossGradSeed(loss ? seedOf(loss) : nullptr);
  }

  /// The in-graph optimizer nodes (OptimizerOperands): each parameter
  /// operand's state operands, when graph inputs, and the learning rate
  /// and step count graph inputs; those and the update signal input are
  /// neither parameters nor data.
  void findOptimizers() {
    for (Node &node : graph.getNodes()) {
      if (!OptimizerOperands::kindOf(node))
        continue;
      OptimizerOperands layout(node);
      if (!layout.isWellFormed())
        continue;
      unsigned numStates = OptimizerOperands::numStates(layout.getKind());
      for (unsigned i = 0, n = layout.size(); i != n; ++i) {
        Value *param = layout.getParam(i);
        llvm::SmallVector<Value *, 2> state;
        for (unsigned k = 0; k != numStates; ++k)
          state.push_back(layout.getState(k, i));
        if (!param || !llvm::all_of(state, [](const Value *value) {
              return value && value->isGraphInput();
            }))
          continue;
        if (stateOfParam.try_emplace(param, state).second)
          optimizerInputs.insert(state.begin(), state.end());
      }
      auto fillSlot = [&](Value *value, StepSlot slot) {
        Value *&filled = optimizerSlots[static_cast<unsigned>(slot)];
        if (value && value->isGraphInput() && !filled) {
          filled = value;
          optimizerInputs.insert(value);
        }
      };
      fillSlot(layout.getLearningRate(), StepSlot::LearningRate);
      fillSlot(layout.getStep(), StepSlot::StepCount);
      if (Value *signal = findFedUpdateSignal(node))
        optimizerInputs.insert(signal);
    }
  }

  /// Records what findOptimizers found for the parameters and slots.
  void recordOptimizerState() {
    for (const auto &[param, state] : stateOfParam)
      signature.setOptimizerState(param, state);
    for (unsigned i = 0; i != kNumStepSlots; ++i)
      if (Value *value = optimizerSlots[i])
        signature.setStepSlot(static_cast<StepSlot>(i), value);
  }

  void addParam(Value *param, bool trainable) {
    ParamInfo info;
    info.param = param;
    info.trainable = trainable;
    if (trainable) {
      info.grad = gradOfParam.lookup(param);
      auto it = accumulationOfGrad.find(info.grad);
      if (it != accumulationOfGrad.end()) {
        info.accumulator = it->second.buffer;
        info.accumulateNode = it->second.node;
      }
    }
    signature.appendParam(info);
  }

  /// Graph inputs are parameters (ONNX Runtime moves every parameter, frozen
  /// or not, behind the user inputs) or data.
  void classifyInputs() {
    bool seenTrainable = false;
    for (const std::unique_ptr<Value> &inputPtr : graph.getInputs()) {
      Value *input = inputPtr.get();
      if (buffers.count(input) || input == lazyResetGrad ||
          input == signature.getLossGradSeed() || optimizerInputs.count(input))
        continue;
      if (gradOfParam.count(input)) {
        addParam(input, /*trainable=*/true);
        seenTrainable = true;
        continue;
      }
      // Data inputs usually have a symbolic batch dimension; parameters
      // never do, so only static inputs count as parameters by position.
      const TensorType &type = input->getType();
      bool frozen =
          isFloatingPoint(type.getDType()) &&
          (input->hasData() || (seenTrainable && type.hasStaticShape()) ||
           looksLikeParameterName(input->getName()));
      if (frozen)
        addParam(input, /*trainable=*/false);
      else
        signature.addDataInput(input);
    }
  }

  /// Initializers are trainable when they have a gradient, frozen when they
  /// are float tensors (not scalars, not the seed) read by the forward pass,
  /// and otherwise constants outside the signature.
  void classifyInitializers() {
    llvm::DenseMap<const Node *, Phase> phases;
    bool phasesComputed = false;
    for (const std::unique_ptr<Value> &initPtr : graph.getInitializers()) {
      Value *init = initPtr.get();
      if (gradOfParam.count(init)) {
        addParam(init, /*trainable=*/true);
        continue;
      }
      const TensorType &type = init->getType();
      if (init == signature.getLossGradSeed() || !isFloatingPoint(type.getDType()) ||
          !type.hasRank() || type.getRank() == 0 || isScalarLike(type))
        continue;
      if (!phasesComputed) {
        phases = computePhases(graph, signature.getLossGradSeed());
        phasesComputed = true;
      }
      bool readByForward = llvm::any_of(init->getUsers(), [&](Node *user) {
        return phases.lookup(user) == Phase::Forward;
      });
      if (readByForward)
        addParam(init, /*trainable=*/false);
    }
  }

  Graph &graph;
  TrainingSignature signature;
  llvm::StringMap<Value *> byName;
  llvm::DenseMap<Value *, Accumulation> accumulationOfGrad;
  llvm::DenseSet<const Value *> buffers, accumulationOutputs;
  Value *lazyResetGrad = nullptr;
  llvm::DenseMap<const Value *, Value *> gradOfParam;
  llvm::DenseSet<const Value *> grads;
  llvm::DenseMap<const Value *, llvm::SmallVector<Value *, 2>> stateOfParam;
  std::array<Value *, kNumStepSlots> optimizerSlots{};
  llvm::DenseSet<const Value *> optimizerInputs;
};

} // namespace

void gmopt::inferTrainingSignature(Module &module) {
  module.setSignature(SignatureRecognizer(module.getGraph()).run());
}

void gmopt::inferNodePhases(Module &module) {
  llvm::DenseMap<const Node *, Phase> phases = computePhases(
      module.getGraph(), module.getSignature().getLossGradSeed());
  for (Node &node : module.getGraph().getNodes())
    node.setPhase(phases.lookup(&node));
}
