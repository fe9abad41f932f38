//===- Optimizer.cpp - Building the in-graph optimizer --------------------===//
//
// Implements Optimizer.h's builder and spec helpers: buildOptimizer checks
// everything first and then adds the step-state and moment inputs, the one
// optimizer node at the end of the graph (so the schedule keeps it after
// every accumulation and every read of a parameter, Phase::Optimizer), its
// flag output, and the signature entries (moments as each parameter's
// optimizer state, the learning rate and step count in their step slots).
//
//===----------------------------------------------------------------------===//

#include "ir/Optimizer.h"

#include "ir/Module.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The attributes of \p spec's node.
std::vector<NamedAttribute> optimizerAttributes(const OptimizerSpec &spec) {
  if (spec.kind != OptimizerKind::AdamW)
    return {};
  return {{"alpha", Attribute::getFloat(spec.alpha)},
          {"beta", Attribute::getFloat(spec.beta)},
          {"epsilon", Attribute::getFloat(spec.epsilon)},
          {"weight_decay", Attribute::getFloat(spec.weightDecay)},
          {"correct_bias", Attribute::getInt(spec.correctBias)},
          {"adam_mode", Attribute::getInt(spec.adamMode)}};
}

} // namespace

llvm::StringRef OptimizerSpec::kindName() const {
  return kind == OptimizerKind::AdamW ? "adamw" : "sgd";
}

std::string OptimizerSpec::str() const {
  if (kind == OptimizerKind::SGD)
    return "sgd";
  return llvm::formatv("adamw{{alpha={0}, beta={1}, epsilon={2}, "
                       "weight_decay={3}, correct_bias={4}, adam_mode={5}}",
                       llvm::format("%g", alpha), llvm::format("%g", beta),
                       llvm::format("%g", epsilon),
                       llvm::format("%g", weightDecay), correctBias, adamMode)
      .str();
}

llvm::Error OptimizerSpec::validate() const {
  if (kind == OptimizerKind::SGD)
    return llvm::Error::success();
  if (adamMode != 0 && adamMode != 1)
    return makeError(llvm::formatv("adam_mode must be 0 (PyTorch) or 1 "
                                   "(Hugging Face), got {0}",
                                   adamMode));
  if (correctBias != 0 && correctBias != 1)
    return makeError(
        llvm::formatv("correct_bias must be 0 or 1, got {0}", correctBias));
  auto inUnit = [](float v) { return std::isfinite(v) && v >= 0 && v < 1; };
  if (!inUnit(alpha) || !inUnit(beta))
    return makeError(llvm::formatv("alpha and beta must lie in [0, 1), got "
                                   "{0} and {1}",
                                   alpha, beta));
  if (!std::isfinite(epsilon) || epsilon < 0 || !std::isfinite(weightDecay) ||
      weightDecay < 0)
    return makeError(llvm::formatv("epsilon and weight_decay must be finite "
                                   "and not negative, got {0} and {1}",
                                   epsilon, weightDecay));
  return llvm::Error::success();
}

Node *gmopt::findOptimizerNode(const Module &module) {
  for (const Node &node : module.getGraph().getNodes())
    if (OptimizerOperands::kindOf(node))
      return const_cast<Node *>(&node);
  return nullptr;
}

Value *gmopt::findFedUpdateSignal(const Node &optimizer) {
  if (!OptimizerOperands::kindOf(optimizer))
    return nullptr;
  OptimizerOperands layout(optimizer);
  if (!layout.isWellFormed())
    return nullptr;
  Value *signal = layout.getUpdateSignal();
  if (!signal || signal->isGraphInput())
    return signal;
  const Node *def = signal->getDefiningNode();
  if (def && def->isa(kOnnxDomain, "And") && def->getNumOperands() == 2)
    for (Value *operand : def->getOperands())
      if (operand && operand->isGraphInput())
        return operand;
  return nullptr;
}

OptimizerSpec gmopt::readOptimizerSpec(const Node &node) {
  OptimizerSpec spec;
  spec.kind = *OptimizerOperands::kindOf(node);
  if (spec.kind == OptimizerKind::AdamW) {
    // The op's defaults (training_op_defs.cc), not OptimizerSpec's.
    spec.alpha = node.getFloatAttr("alpha", 0.9f);
    spec.beta = node.getFloatAttr("beta", 0.999f);
    spec.epsilon = node.getFloatAttr("epsilon", 1e-8f);
    spec.weightDecay = node.getFloatAttr("weight_decay", 1e-2f);
    spec.correctBias = node.getIntAttr("correct_bias", 1);
    spec.adamMode = node.getIntAttr("adam_mode", 0);
  }
  return spec;
}

llvm::Expected<Node *> gmopt::buildOptimizer(Module &module,
                                             const OptimizerSpec &spec) {
  if (llvm::Error err = spec.validate())
    return err;
  if (Node *existing = findOptimizerNode(module))
    return makeError("the module already has an optimizer (" +
                     existing->describe() + ")");
  // Check everything before changing anything.
  TrainingSignature &signature = module.getSignature();
  llvm::SmallVector<StepSlot, 2> slots = {StepSlot::LearningRate};
  if (spec.kind == OptimizerKind::AdamW)
    slots.push_back(StepSlot::StepCount);
  for (StepSlot slot : slots)
    if (const Value *taken = signature.getStepSlot(slot))
      return makeError("the training signature's " + stepSlotName(slot) +
                       " slot is already '" + taken->getName() +
                       "'; the optimizer's would be a second one");
  std::vector<Value *> params, grads;
  for (const ParamInfo &info : signature.getParams()) {
    if (!info.trainable)
      continue;
    if (!info.optimizerState.empty())
      return makeError("trainable parameter '" + info.param->getName() +
                       "' already has optimizer state ('" +
                       info.optimizerState.front()->getName() + "')");
    Value *grad = info.accumulator ? info.accumulator : info.grad;
    if (!grad)
      return makeError("trainable parameter '" + info.param->getName() +
                       "' has neither an accumulation buffer nor a gradient");
    if (info.param->getType().getDType() != DType::F32 ||
        grad->getType().getDType() != DType::F32)
      return makeError("the in-graph optimizers update fp32 parameters with "
                       "fp32 gradients; '" +
                       info.param->getName() + "' is " +
                       info.param->getType().str() + " with gradient " +
                       grad->getType().str());
    params.push_back(info.param);
    grads.push_back(grad);
  }
  if (params.empty())
    return makeError("the module has no trainable parameter to optimize");

  Graph &graph = module.getGraph();
  auto &msOpset = module.opsetImports[std::string(kMsDomain)];
  msOpset = std::max<int64_t>(msOpset, 1);
  Value *learningRate =
      graph.addInput(TensorType::get(DType::F32, {1}), "learning_rate");
  Value *step = spec.kind == OptimizerKind::AdamW
                    ? graph.addInput(TensorType::get(DType::I64, {1}), "step")
                    : nullptr;
  Value *updateSignal = graph.addInput(TensorType::get(DType::Bool, {1}),
                                       "optimizer.update_signal");
  llvm::SmallVector<llvm::SmallVector<Value *, 8>, 2> states(
      OptimizerOperands::numStates(spec.kind));
  for (Value *param : params)
    for (unsigned k = 0; k != states.size(); ++k)
      states[k].push_back(graph.addInput(
          param->getType(),
          (param->getName() + ".momentum" + llvm::Twine(k)).str()));

  std::vector<Value *> operands = OptimizerOperands::layout(
      spec.kind, learningRate, step, updateSignal, params, grads, states);
  Builder builder(graph);
  builder.setInsertionPointToEnd();
  builder.setPhase(Phase::Optimizer);
  TensorType flagType = spec.kind == OptimizerKind::AdamW
                            ? TensorType::get(DType::I64, {1})
                            : TensorType::get(DType::Bool, {1});
  const char *opType =
      spec.kind == OptimizerKind::AdamW ? "AdamWOptimizer" : "SGDOptimizerV2";
  Node *node = builder.create(OpName{std::string(kMsDomain), opType}, operands,
                              {flagType}, optimizerAttributes(spec), opType);
  node->getResult(0)->setName("optimizer.updated_flag");
  graph.addOutput(node->getResult(0));

  // The signature is where the state is found from now on.
  signature.setStepSlot(StepSlot::LearningRate, learningRate);
  if (step)
    signature.setStepSlot(StepSlot::StepCount, step);
  for (size_t i = 0; i != params.size(); ++i) {
    llvm::SmallVector<Value *, 2> state;
    for (const auto &group : states)
      state.push_back(group[i]);
    signature.setOptimizerState(params[i], state);
  }
  module.plan.clear();
  return node;
}
