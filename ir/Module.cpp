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
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
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
    size_t numValues =
        graph.getInputs().size() + graph.getInitializers().size();
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
      if (init == signature.getLossGradSeed() ||
          !isFloatingPoint(type.getDType()) || !type.hasRank() ||
          type.getRank() == 0 || isScalarLike(type))
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
  llvm::DenseMap<const Node *, Phase> phases =
      computePhases(module.getGraph(), module.getSignature().getLossGradSeed());
  for (Node &node : module.getGraph().getNodes())
    node.setPhase(phases.lookup(&node));
}
