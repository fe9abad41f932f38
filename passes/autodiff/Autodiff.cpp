//===- Autodiff.cpp - Build the training step from a forward model --------===//
//
// The autodiff pass: loss construction, parameter selection, activity
// analysis, the reverse walk over the forward nodes that asks the gradient
// rule table (passes/autodiff/GradientRules.h) for each node's backward nodes,
// gradient accumulation for values with several consumers, and ONNX
// Runtime's accumulator pattern plus the training signature. See
// passes/autodiff/Autodiff.h for the contract.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/Autodiff.h"
#include "passes/DebugOutput.h"
#include "passes/autodiff/GradientRules.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <vector>

#define DEBUG_TYPE "gmopt-autodiff"

using namespace gmopt;

llvm::Expected<LossSpec> gmopt::parseLossSpec(llvm::StringRef text) {
  LossSpec spec;
  auto [kind, rest] = text.split(':');
  kind = kind.trim();
  if (kind == "output")
    spec.kind = LossKind::Output;
  else if (kind == "cross-entropy")
    spec.kind = LossKind::CrossEntropy;
  else if (kind == "mse")
    spec.kind = LossKind::MeanSquaredError;
  else if (kind == "bce-with-logits")
    spec.kind = LossKind::BceWithLogits;
  else if (kind == "l1")
    spec.kind = LossKind::L1;
  else
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "unknown loss kind '%s' (expected output, cross-entropy, mse, "
        "bce-with-logits or l1)",
        kind.str().c_str());
  llvm::SmallVector<llvm::StringRef, 3> fields;
  rest.split(fields, ',');
  if (fields.size() > 2)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "'%s' has a field too many (expected KIND[:OUTPUT[,TARGET]])",
        text.str().c_str());
  spec.output = fields.empty() ? std::string() : fields[0].trim().str();
  spec.target = fields.size() < 2 ? std::string() : fields[1].trim().str();
  if (fields.size() == 2 && spec.target.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "'%s' names an empty target",
                                   text.str().c_str());
  if (spec.kind == LossKind::Output && fields.size() == 2)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "loss kind 'output' takes no target");
  return spec;
}

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "autodiff: " + message.str());
}

/// The comma-separated names of \p list, trimmed, empty ones skipped.
std::vector<std::string> splitNames(llvm::StringRef list) {
  llvm::SmallVector<llvm::StringRef, 8> parts;
  list.split(parts, ',', -1, false);
  std::vector<std::string> names;
  for (llvm::StringRef part : parts)
    if (!part.trim().empty())
      names.push_back(part.trim().str());
  return names;
}

/// True for the names the default data rule recognises.
bool looksLikeData(llvm::StringRef name) {
  return name.starts_with("input") || name == "labels" ||
         name.starts_with("target");
}

/// Builds the loss of \p spec at the end of the forward graph.
class LossBuilder {
public:
  LossBuilder(Module &module, const LossSpec &spec)
      : graph(module.getGraph()), spec(spec), builder(graph) {
    builder.setPhase(Phase::Forward);
    builder.setInsertionPointToEnd();
  }

  /// The scalar loss value.
  llvm::Expected<Value *> build() {
    auto output = findOutput();
    if (!output)
      return output.takeError();
    if (spec.kind == LossKind::Output)
      return *output;
    if (!isFloatingPoint((*output)->getType().getDType()))
      return makeError("the loss reads '" + (*output)->getName() +
                       "', which is not floating point");
    auto loss = spec.kind == LossKind::CrossEntropy ? crossEntropy(*output)
                                                    : elementwiseLoss(*output);
    if (!loss)
      return loss.takeError();
    // A loss the pass made is called `loss` unless the model has one.
    if (!graph.lookupValue("loss"))
      (*loss)->setName("loss");
    return *loss;
  }

private:
  llvm::Expected<Value *> findOutput() {
    if (!spec.output.empty()) {
      for (Value *output : graph.getOutputs())
        if (output->getName() == spec.output)
          return output;
      if (Value *value = graph.lookupValue(spec.output))
        return value;
      return makeError("no output named '" + spec.output + "'");
    }
    for (Value *output : graph.getOutputs()) {
      const TensorType &type = output->getType();
      bool scalar = type.hasStaticShape() && type.getNumElements() == 1;
      if (isFloatingPoint(type.getDType()) &&
          (spec.kind != LossKind::Output || scalar))
        return output;
    }
    return makeError(spec.kind == LossKind::Output
                         ? "the model has no one-element float output to "
                           "use as the loss (name it with loss=output:NAME)"
                         : "the model has no float output");
  }

public:
  /// The loss target (a data input) the loss reads, or null for kind
  /// `output`.
  Value *getTarget() const { return target; }
  /// Whether the target was created (the forward model had no such input).
  bool createdTarget() const { return created; }

private:
  /// The graph input named spec.target (or \p fallback), created with
  /// \p type when absent. A name that differs from an existing input's only
  /// in case or by a letter or two is taken for a misspelling.
  llvm::Expected<Value *> findTarget(llvm::StringRef fallback,
                                     const TensorType &type) {
    std::string name = spec.target.empty() ? fallback.str() : spec.target;
    for (const auto &input : graph.getInputs())
      if (input->getName() == name)
        return target = input.get();
    if (graph.lookupValue(name))
      return makeError("the loss target '" + name + "' is not a graph input");
    for (const auto &input : graph.getInputs()) {
      llvm::StringRef existing = input->getName();
      if (existing.equals_insensitive(name) ||
          (name.size() > 3 &&
           existing.edit_distance(name, /*AllowReplacements=*/true,
                                  /*MaxEditDistance=*/2) <= 2))
        return makeError("the loss target '" + name +
                         "' is not a graph input; did you mean '" + existing +
                         "'? (a target that is not an input is created as a "
                         "new data input only when no input has a similar "
                         "name)");
    }
    created = true;
    return target = graph.addInput(type, name);
  }

  llvm::Expected<Value *> create(llvm::StringRef op,
                                 llvm::ArrayRef<Value *> operands,
                                 llvm::ArrayRef<NamedAttribute> attrs = {}) {
    auto node =
        builder.createInferred(OpName{kOnnxDomain.str(), op.str()}, operands, 1,
                               attrs, ("loss/" + op).str());
    if (!node)
      return node.takeError();
    Value *result = (*node)->getResult(0);
    result->setName(llvm::formatv("loss/{0}_{1}", op, counter++).str());
    return result;
  }

  Value *int64s(llvm::ArrayRef<int64_t> values) {
    return builder.createConstant(
        TensorData::fromValues<int64_t>(
            DType::I64, {static_cast<int64_t>(values.size())}, values),
        llvm::formatv("loss/shape_{0}", counter++).str());
  }

  Value *scalar(DType dtype, double value) {
    if (dtype == DType::F64)
      return builder.createConstant(
          TensorData::fromValues<double>(dtype, {}, {value}),
          llvm::formatv("loss/const_{0}", counter++).str());
    return builder.createConstant(
        TensorData::fromValues<float>(DType::F32, {},
                                      {static_cast<float>(value)}),
        llvm::formatv("loss/const_{0}", counter++).str());
  }

  llvm::Expected<Value *> crossEntropy(Value *logits) {
    const TensorType &type = logits->getType();
    if (!type.hasRank() || type.getRank() < 2)
      return makeError("cross-entropy needs logits of rank 2 or more, '" +
                       logits->getName() + "' is " + type.str());
    Value *scores = logits;
    llvm::SmallVector<Dim, 4> labelDims(type.getDims().begin(),
                                        type.getDims().end() - 1);
    if (type.getRank() > 2) {
      const Dim &classes = type.getDim(type.getRank() - 1);
      if (!classes.isStatic())
        return makeError("cross-entropy over rank-3 logits needs a static "
                         "class dimension");
      auto flat =
          create("Reshape", {logits, int64s({-1, classes.getExtent()})});
      if (!flat)
        return flat.takeError();
      scores = *flat;
    } else {
      labelDims.assign(1, type.getDim(0));
    }
    auto labels = findTarget("labels", TensorType(DType::I64, labelDims));
    if (!labels)
      return labels.takeError();
    Value *flatLabels = *labels;
    if (!isInteger((*labels)->getType().getDType()))
      return makeError("cross-entropy labels '" + (*labels)->getName() +
                       "' must be integers");
    if ((*labels)->getType().hasRank() && (*labels)->getType().getRank() != 1) {
      auto flat = create("Reshape", {*labels, int64s({-1})});
      if (!flat)
        return flat.takeError();
      flatLabels = *flat;
    }
    auto node = builder.createInferred(
        OpName{kOnnxDomain.str(), "SoftmaxCrossEntropyLoss"},
        {scores, flatLabels}, 1, {{"reduction", Attribute::getString("mean")}},
        "loss/SoftmaxCrossEntropyLoss");
    if (!node)
      return node.takeError();
    return (*node)->getResult(0);
  }

  llvm::Expected<Value *> elementwiseLoss(Value *prediction) {
    auto found = findTarget("target", prediction->getType());
    if (!found)
      return found.takeError();
    Value *target = *found;
    if (target->getType().getDType() != prediction->getType().getDType())
      return makeError("the loss target '" + target->getName() +
                       "' must have the prediction's element type");
    auto perElement = perElementLoss(prediction, target);
    if (!perElement)
      return perElement.takeError();
    return create("ReduceMean", {*perElement},
                  {{"keepdims", Attribute::getInt(0)}});
  }

  /// The unreduced loss of each element.
  llvm::Expected<Value *> perElementLoss(Value *prediction, Value *target) {
    DType dtype = prediction->getType().getDType();
    if (spec.kind == LossKind::MeanSquaredError || spec.kind == LossKind::L1) {
      auto diff = create("Sub", {prediction, target});
      if (!diff)
        return diff.takeError();
      if (spec.kind == LossKind::L1)
        return create("Abs", {*diff});
      return create("Mul", {*diff, *diff});
    }
    // max(x, 0) - x t + log(1 + exp(-|x|)): torch's
    // binary_cross_entropy_with_logits, stable for large |x|.
    auto positive = create("Relu", {prediction});
    if (!positive)
      return positive.takeError();
    auto product = create("Mul", {prediction, target});
    if (!product)
      return product.takeError();
    auto linear = create("Sub", {*positive, *product});
    if (!linear)
      return linear.takeError();
    auto magnitude = create("Abs", {prediction});
    if (!magnitude)
      return magnitude.takeError();
    auto negated = create("Neg", {*magnitude});
    if (!negated)
      return negated.takeError();
    auto exp = create("Exp", {*negated});
    if (!exp)
      return exp.takeError();
    auto onePlus = create("Add", {*exp, scalar(dtype, 1.0)});
    if (!onePlus)
      return onePlus.takeError();
    auto log = create("Log", {*onePlus});
    if (!log)
      return log.takeError();
    return create("Add", {*linear, *log});
  }

  Graph &graph;
  const LossSpec &spec;
  Builder builder;
  unsigned counter = 0;
  Value *target = nullptr;
  bool created = false;
};

/// True for a float tensor holding an infinity or a magnitude of 1e30 or
/// more: the "minus infinity" of an additive attention mask (torch fills
/// causal masks with finfo.min, -3.4e38). No weight holds such a value, and
/// no optimizer step could move one. Only data in memory is read: external
/// weights are never loaded at compile time for this.
bool holdsMaskValues(const Value &value) {
  const TensorData &data = value.getData();
  if (value.getData().isNull() || data.isExternal() ||
      !isFloatingPoint(data.getType().getDType()))
    return false;
  for (uint64_t i = 0, e = data.getNumElements(); i != e; ++i)
    if (!(std::fabs(data.getFloatElement(i)) < 1e30))
      return true;
  return false;
}

/// The backward pass over one module (steps 2-4 of the header).
class AutodiffBuilder {
public:
  AutodiffBuilder(Module &module, const AutodiffPass::Options &options)
      : module(module), graph(module.getGraph()), options(options),
        rules(GradientRuleTable::instance()), gradients(graph) {}

  llvm::Expected<bool> run(PassContext &context, const Pass &pass);

private:
  llvm::Error selectParameters(Value *loss, Value *target);
  void analyzeActivity(Value *loss);
  llvm::Error emitBackward(Value *loss);
  llvm::Expected<Value *> sumContributions(Value *forward);
  llvm::Error emitAccumulation(Value *loss);

  bool isDifferentiable(const Node &node, unsigned index) const {
    if (rules.lookup(node.getOp()))
      return rules.isDifferentiableOperand(node, index);
    // An op without a rule: assume every float operand matters, so a
    // gradient path through it is reported rather than silently cut.
    Value *operand = node.getOperand(index);
    return operand && isFloatingPoint(operand->getType().getDType());
  }
  bool isActive(const Value *value) const {
    return varying.contains(value) && useful.contains(value);
  }

  Module &module;
  Graph &graph;
  const AutodiffPass::Options &options;
  const GradientRuleTable &rules;
  GradientBuilder gradients;

  /// Trainable candidates and frozen parameters, by value.
  llvm::SmallPtrSet<Value *, 32> candidates;
  llvm::SmallPtrSet<Value *, 32> frozen;
  /// Forward nodes, in schedule order, before anything was added.
  std::vector<Node *> forwardNodes;
  /// Values depending on a candidate through differentiable operands.
  llvm::DenseSet<const Value *> varying;
  /// Values the loss depends on through differentiable operands.
  llvm::DenseSet<const Value *> useful;
  /// The gradient contributions of each forward value.
  llvm::DenseMap<const Value *, llvm::SmallVector<Value *, 2>> contributions;
  /// Values already given a role (a parameter's gradient).
  llvm::SmallPtrSet<Value *, 32> claimed;
  unsigned backwardNodes = 0;
  unsigned trainingRewrites = 0;
  /// Float initializers left out of the candidates: literals (Constant
  /// nodes' values) and masks.
  unsigned skippedLiterals = 0;
  unsigned skippedMasks = 0;
};

llvm::Error AutodiffBuilder::selectParameters(Value *loss, Value *target) {
  llvm::StringSet<> frozenSet, dataSet, trainableSet;
  for (const std::string &name : splitNames(options.frozen))
    frozenSet.insert(name);
  for (const std::string &name : splitNames(options.data))
    dataSet.insert(name);
  for (const std::string &name : splitNames(options.trainable))
    trainableSet.insert(name);
  for (llvm::StringRef name : frozenSet.keys()) {
    Value *value = graph.lookupValue(name);
    if (!value || (!value->isGraphInput() && !value->isInitializer()))
      return makeError("frozen=" + name +
                       ": no graph input or initializer of that name");
    if (trainableSet.contains(name))
      return makeError("'" + name + "' is both trainable and frozen");
  }
  for (llvm::StringRef name : trainableSet.keys()) {
    Value *value = graph.lookupValue(name);
    if (!value || (!value->isGraphInput() && !value->isInitializer()))
      return makeError("trainable=" + name +
                       ": no graph input or initializer of that name");
    if (!isFloatingPoint(value->getType().getDType()))
      return makeError("trainable=" + name + ": a " + value->getType().str() +
                       " value cannot be trained (not floating point)");
  }
  for (llvm::StringRef name : dataSet.keys()) {
    Value *value = graph.lookupValue(name);
    if (!value || !value->isGraphInput())
      return makeError("data=" + name + ": no graph input of that name");
  }
  // What is data: the loss target always; then the inputs named by `data`,
  // else the non-float inputs and those the default rule recognises.
  auto isDataInput = [&](const Value &value) {
    if (&value == target)
      return true;
    if (!dataSet.empty())
      return dataSet.contains(value.getName());
    return !isFloatingPoint(value.getType().getDType()) ||
           looksLikeData(value.getName());
  };
  for (const auto &input : graph.getInputs()) {
    Value *value = input.get();
    if (value == loss)
      return makeError("the loss '" + value->getName() + "' is a graph input");
    bool isFloat = isFloatingPoint(value->getType().getDType());
    llvm::StringRef name = value->getName();
    if (isDataInput(*value)) {
      llvm::StringRef role =
          value == target ? "the loss target" : "a data input";
      if (frozenSet.contains(name))
        return makeError("frozen=" + name + ": '" + name + "' is " + role +
                         ", not a parameter");
      if (trainableSet.contains(name))
        return makeError("trainable=" + name + ": '" + name + "' is " + role +
                         ", not a parameter");
      continue;
    }
    bool trainable = trainableSet.empty() ? !frozenSet.contains(name)
                                          : trainableSet.contains(name);
    if (trainable && isFloat)
      candidates.insert(value);
    else if (isFloat || frozenSet.contains(name))
      frozen.insert(value);
  }
  for (const auto &initializer : graph.getInitializers()) {
    Value *value = initializer.get();
    llvm::StringRef name = value->getName();
    if (frozenSet.contains(name)) {
      frozen.insert(value);
      continue;
    }
    if (!trainableSet.empty()) {
      if (trainableSet.contains(name))
        candidates.insert(value);
      continue;
    }
    const TensorType &type = value->getType();
    // Single numbers are the exporter's folded constants (a Pow exponent,
    // a Div's divisor); a Constant node's value is a literal; a mask is no
    // weight. Each is trainable only when named by `trainable`.
    if (!isFloatingPoint(type.getDType()) || !type.hasStaticShape() ||
        type.getNumElements() <= 1)
      continue;
    if (value->isLiteral()) {
      ++skippedLiterals;
      continue;
    }
    if (holdsMaskValues(*value)) {
      ++skippedMasks;
      continue;
    }
    candidates.insert(value);
  }
  return llvm::Error::success();
}

void AutodiffBuilder::analyzeActivity(Value *loss) {
  for (Value *candidate : candidates)
    varying.insert(candidate);
  for (Node *node : forwardNodes) {
    const GradientRule *rule = rules.lookup(node->getOp());
    if (rule && rule->nonDifferentiable)
      continue;
    bool anyVarying = false;
    for (unsigned i = 0; i != node->getNumOperands(); ++i)
      if (node->getOperand(i) && varying.contains(node->getOperand(i)) &&
          isDifferentiable(*node, i))
        anyVarying = true;
    if (!anyVarying)
      continue;
    for (Value *result : node->getResults())
      if (result && isFloatingPoint(result->getType().getDType()))
        varying.insert(result);
  }
  useful.insert(loss);
  for (Node *node : llvm::reverse(forwardNodes)) {
    bool anyUseful = llvm::any_of(node->getResults(), [&](Value *result) {
      return result && useful.contains(result) && varying.contains(result);
    });
    if (!anyUseful)
      continue;
    const GradientRule *rule = rules.lookup(node->getOp());
    if (rule && rule->nonDifferentiable)
      continue;
    for (unsigned i = 0; i != node->getNumOperands(); ++i)
      if (node->getOperand(i) && isDifferentiable(*node, i))
        useful.insert(node->getOperand(i));
  }
}

llvm::Expected<Value *> AutodiffBuilder::sumContributions(Value *forward) {
  auto found = contributions.find(forward);
  if (found == contributions.end() || found->second.empty())
    return nullptr;
  llvm::SmallVector<Value *, 2> &parts = found->second;
  std::string name = (forward->getName() + "_grad").str();
  if (parts.size() == 1) {
    Value *grad = parts.front();
    if (grad->isNodeResult() && !claimed.contains(grad) &&
        grad->getDefiningNode()->getPhase() == Phase::Backward &&
        !llvm::StringRef(grad->getName()).ends_with("_grad"))
      grad->setName(name);
    return grad;
  }
  auto sum = gradients.onnx("Sum", parts);
  if (!sum)
    return sum.takeError();
  (*sum)->setName(name);
  ++backwardNodes;
  return *sum;
}

llvm::Error AutodiffBuilder::emitBackward(Value *loss) {
  const TensorType &lossType = loss->getType();
  Value *seed = graph.addInitializer(
      lossType.getDType() == DType::F64
          ? TensorData::fromValues<double>(DType::F64,
                                           lossType.getStaticShape(), {1.0})
          : TensorData::fromValues<float>(DType::F32, lossType.getStaticShape(),
                                          {1.0f}),
      (loss->getName() + "_grad").str());
  module.getSignature().setLossGradSeed(seed);
  contributions[loss].push_back(seed);

  unsigned before = graph.getNumNodes();
  for (Node *node : llvm::reverse(forwardNodes)) {
    llvm::SmallVector<bool, 4> wanted(node->getNumOperands(), false);
    bool anyWanted = false;
    for (unsigned i = 0; i != node->getNumOperands(); ++i) {
      Value *operand = node->getOperand(i);
      if (operand && isActive(operand) && isDifferentiable(*node, i))
        wanted[i] = anyWanted = true;
    }
    if (!anyWanted)
      continue;
    llvm::SmallVector<Value *, 2> resultGrads(node->getNumResults(), nullptr);
    bool anyGrad = false;
    for (unsigned i = 0; i != node->getNumResults(); ++i) {
      Value *result = node->getResult(i);
      if (!result || !isActive(result))
        continue;
      auto grad = sumContributions(result);
      if (!grad)
        return grad.takeError();
      resultGrads[i] = *grad;
      anyGrad |= *grad != nullptr;
    }
    if (!anyGrad)
      continue;
    const GradientRule *rule = rules.lookup(node->getOp());
    if (!rule)
      return gradientError(*node, "no gradient rule for op " +
                                      node->getOp().str() +
                                      ", which lies between a parameter and "
                                      "the loss");
    llvm::SmallVector<Value *, 4> operandGrads(node->getNumOperands(), nullptr);
    GradientRequest request{*node, resultGrads, wanted};
    if (llvm::Error err = rule->emit(gradients, request, operandGrads))
      return llvm::joinErrors(gradientError(*node, "the gradient rule of " +
                                                       node->getOp().str() +
                                                       " failed"),
                              std::move(err));
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] gradient of " << node->describe()
                       << '\n');
    for (unsigned i = 0; i != node->getNumOperands(); ++i)
      if (wanted[i] && operandGrads[i]) {
        assert(operandGrads[i]->getType().getDType() ==
                   node->getOperand(i)->getType().getDType() &&
               "a gradient has its value's element type");
        contributions[node->getOperand(i)].push_back(operandGrads[i]);
      }
  }
  backwardNodes += graph.getNumNodes() - before;
  return llvm::Error::success();
}

llvm::Error AutodiffBuilder::emitAccumulation(Value *loss) {
  Builder builder(graph);
  builder.setPhase(Phase::Optimizer);
  builder.setInsertionPointToEnd();
  Value *lazyReset = nullptr;
  struct Trained {
    Value *param;
    Value *grad;
    Value *buffer;
    Node *accumulate;
  };
  std::vector<Trained> trained;
  // Graph inputs in order (converted initializers were appended).
  llvm::SmallVector<Value *, 32> params;
  for (const auto &input : graph.getInputs())
    if (candidates.contains(input.get()) || frozen.contains(input.get()))
      params.push_back(input.get());
  // Initializers named frozen (buffers such as rotary tables) stay
  // constants, listed as frozen parameters as the importer would.
  for (const auto &initializer : graph.getInitializers())
    if (frozen.contains(initializer.get()))
      params.push_back(initializer.get());
  for (Value *param : params) {
    if (!candidates.contains(param))
      continue;
    auto grad = sumContributions(param);
    if (!grad)
      return grad.takeError();
    if (!*grad)
      continue;
    Value *gradient = *grad;
    std::string name = (param->getName() + "_grad").str();
    if (claimed.contains(gradient) || !gradient->isNodeResult()) {
      auto copy = gradients.onnx("Identity", {gradient});
      if (!copy)
        return copy.takeError();
      gradient = *copy;
      ++backwardNodes;
    }
    gradient->setName(name);
    claimed.insert(gradient);
    Value *buffer =
        graph.addInput(param->getType(), name + ".accumulation.buffer");
    trained.push_back({param, gradient, buffer, nullptr});
  }
  // ONNX Runtime's input order: the buffers, then lazy_reset_grad.
  if (!trained.empty())
    lazyReset =
        graph.addInput(TensorType::get(DType::Bool, {1}), "lazy_reset_grad");
  for (Trained &entry : trained) {
    std::string name = entry.grad->getName().str();
    auto node = builder.createInferred(
        OpName{kMsDomain.str(), "InPlaceAccumulatorV2"},
        {entry.buffer, entry.grad, lazyReset}, 1, {}, name + ".accumulation");
    if (!node)
      return node.takeError();
    (*node)->getResult(0)->setName(name + ".accumulation.out");
    entry.accumulate = *node;
  }
  if (trained.empty())
    return makeError("no trainable parameter has a gradient (is every "
                     "parameter frozen, or is the loss independent of "
                     "them?)");

  // Outputs: the loss, then the accumulators' flags.
  while (graph.getNumOutputs())
    graph.removeOutput(graph.getNumOutputs() - 1);
  graph.addOutput(loss);
  for (const Trained &entry : trained)
    graph.addOutput(entry.accumulate->getResult(0));

  TrainingSignature &signature = module.getSignature();
  signature.setLoss(loss);
  signature.setLazyResetGrad(lazyReset);
  llvm::SmallPtrSet<Value *, 32> roles;
  for (const Trained &entry : trained)
    roles.insert(entry.buffer);
  roles.insert(lazyReset);
  for (Value *param : params) {
    ParamInfo info;
    info.param = param;
    info.trainable = false;
    for (const Trained &entry : trained)
      if (entry.param == param) {
        info.trainable = true;
        info.grad = entry.grad;
        info.accumulator = entry.buffer;
        info.accumulateNode = entry.accumulate;
      }
    if (llvm::Error err = module.addParameter(info))
      return err;
    roles.insert(param);
  }
  for (const auto &input : graph.getInputs())
    if (!roles.contains(input.get()))
      signature.addDataInput(input.get());
  return llvm::Error::success();
}

llvm::Expected<bool> AutodiffBuilder::run(PassContext &context,
                                          const Pass &pass) {
  if (module.getSignature().hasGradients())
    return makeError("the module already has gradients (a training graph); "
                     "autodiff takes a forward model");
  auto spec = parseLossSpec(options.loss);
  if (!spec)
    return makeError("loss=" + options.loss + ": " +
                     llvm::toString(spec.takeError()));
  if (module.getOpsetVersion(kOnnxDomain) &&
      module.getOpsetVersion(kOnnxDomain) < 13)
    return makeError("the forward model's ai.onnx opset must be 13 or newer");
  if (!module.getOpsetVersion(kMsDomain))
    module.opsetImports[kMsDomain.str()] = 1;
  // The importer's guess at roles (no gradients: all frozen or data) is
  // replaced by the signature built here.
  module.setSignature(TrainingSignature());

  LossBuilder lossBuilder(module, *spec);
  auto loss = lossBuilder.build();
  if (!loss)
    return loss.takeError();
  const TensorType &lossType = (*loss)->getType();
  if (!isFloatingPoint(lossType.getDType()) || !lossType.hasStaticShape() ||
      lossType.getNumElements() != 1)
    return makeError("the loss '" + (*loss)->getName() +
                     "' must be a one-element float tensor, not " +
                     lossType.str());
  if ((*loss)->getName().empty())
    (*loss)->setName("loss");

  if (options.trainMode) {
    // Collect first: a rewrite may replace its node.
    std::vector<Node *> nodes;
    for (Node &node : graph)
      nodes.push_back(&node);
    for (Node *node : nodes) {
      const GradientRule *rule = rules.lookup(node->getOp());
      if (!rule || !rule->trainingRewrite)
        continue;
      auto rewritten = rule->trainingRewrite(*node);
      if (!rewritten)
        return rewritten.takeError();
      trainingRewrites += *rewritten;
    }
  }
  if (llvm::Error err = selectParameters(*loss, lossBuilder.getTarget()))
    return err;
  for (Node &node : graph)
    forwardNodes.push_back(&node);
  analyzeActivity(*loss);

  // Trainable initializers on a gradient path become graph inputs
  // with their data as the default, as ONNX Runtime's artifacts have them.
  llvm::SmallVector<Value *, 8> converted;
  for (const auto &initializer : graph.getInitializers()) {
    Value *value = initializer.get();
    if (candidates.contains(value) && isActive(value))
      converted.push_back(value);
  }
  for (Value *value : converted) {
    Value *input = graph.addInput(value->getType(), value->getName().str());
    input->setData(value->getData());
    value->replaceAllUsesWith(input);
    bool wasCandidate = candidates.erase(value);
    frozen.erase(value);
    if (wasCandidate)
      candidates.insert(input);
    else
      frozen.insert(input);
    if (varying.erase(value))
      varying.insert(input);
    if (useful.erase(value))
      useful.insert(input);
  }
  graph.removeValues(converted);
  // Candidates nothing differentiates are frozen parameters (initializers
  // among them, such as BatchNorm running statistics, stay constants, as
  // the importer lists them).
  llvm::SmallVector<Value *, 8> inactive;
  for (Value *candidate : candidates)
    if (!isActive(candidate))
      inactive.push_back(candidate);
  for (Value *value : inactive) {
    candidates.erase(value);
    frozen.insert(value);
  }

  if (llvm::Error err = emitBackward(*loss))
    return err;
  if (llvm::Error err = emitAccumulation(*loss))
    return err;

  const TrainingSignature &signature = module.getSignature();
  pass.addStatistic(context, "backward-nodes", backwardNodes);
  pass.addStatistic(context, "training-mode-rewrites", trainingRewrites);
  pass.addStatistic(context, "trainable-parameters", signature.numTrainable());
  pass.addStatistic(context, "frozen-parameters",
                    signature.getParams().size() - signature.numTrainable());
  pass.addStatistic(context, "literal-constants", skippedLiterals);
  pass.addStatistic(context, "mask-constants", skippedMasks);
  return true;
}

} // namespace

AutodiffPass::AutodiffPass() : AutodiffPass(Options()) {}

AutodiffPass::AutodiffPass(Options opts) : options(std::move(opts)) {
  declareOption("loss", options.loss,
                "KIND[:OUTPUT[,TARGET]]; KIND: output, cross-entropy, mse, "
                "bce-with-logits, l1");
  declareOption("frozen", options.frozen,
                "comma-separated parameters that get no gradient");
  declareOption("trainable", options.trainable,
                "comma-separated parameters to train; every other candidate "
                "is frozen (default: every float initializer of more than "
                "one element that is neither a Constant node's value nor a "
                "mask, and every float graph input that is not data)");
  declareOption("data", options.data,
                "comma-separated data inputs (default: non-float inputs and "
                "those named input*, labels, target*)");
  declareOption("train-mode", options.trainMode,
                "run Dropout and BatchNormalization in training mode (as "
                "ONNX Runtime's training graph does)");
  declareStatistic("backward-nodes", "backward nodes emitted");
  declareStatistic("training-mode-rewrites",
                   "forward ops switched to training mode");
  declareStatistic("trainable-parameters", "parameters given a gradient");
  declareStatistic("frozen-parameters", "parameters without a gradient");
  declareStatistic("literal-constants",
                   "float Constant-node values left constant (never parameters "
                   "unless named by trainable)");
  declareStatistic("mask-constants", "float initializers holding mask values "
                                     "(inf or |x| >= 1e30) left constant");
}

llvm::Expected<bool> AutodiffPass::run(Module &module, PassContext &context) {
  AutodiffBuilder builder(module, options);
  return builder.run(context, *this);
}
