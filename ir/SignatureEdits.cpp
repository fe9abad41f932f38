//===- SignatureEdits.cpp - Editing the signature with the graph ----------===//
//
// The Module's parameter edits (addParameter, removeParameter,
// mergeParameter) and hasSideEffects, which they and dead-code elimination
// share. A removal is planned and checked first (planParamRemoval) and
// applied only when nothing can fail; a fused optimizer node that also
// updates other parameters is rebuilt without the removed one's operands.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"

#include "ir/OpRegistry.h"
#include "ir/OptimizerOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>

using namespace gmopt;
using llvm::StringRef;

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
  auto belongs = [&](const Value *value) {
    return value->getGraph() == &graph;
  };
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
                       ": its gradient has type " + info.grad->getType().str() +
                       ", not " + type.str());
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
static llvm::Expected<ParamRemoval> planParamRemoval(const Module &module,
                                                     const Value *param,
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
    if (OptimizerOperands::kindOf(*node) && OptimizerOperands(*node).size() > 1)
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
          return editError("cannot remove parameter " + label(param) +
                           ": node " + node->describe() +
                           " also updates parameter " + label(other.param));
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
          return editError("cannot remove parameter " + label(param) + ": " +
                           label(result) + " is read by node " +
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
  removal.outputs.erase(
      std::unique(removal.outputs.begin(), removal.outputs.end()),
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
  for (unsigned k = 0; k != OptimizerOperands::numStates(layout.getKind()); ++k)
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
  Node *rebuilt = builder.create(node.getOp(), operands, types, node.getAttrs(),
                                 node.getName().str());
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
static void applyParamRemoval(Graph &graph, const TrainingSignature &signature,
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
      auto start =
          targetDef ? std::next(targetDef->getIterator()) : graph.begin();
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
    Node *sum =
        builder.create(OpName{std::string(kOnnxDomain), "Add"},
                       {targetGrad, sourceGrad}, {targetGrad->getType()});
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
