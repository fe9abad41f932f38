//===- LossScaling.cpp - In-graph loss scaling for fp16 training ----------===//

#include "passes/LossScaling.h"

#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"

#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "amp: " + message);
}

/// \p base, or `base.N` for the first N that no value of \p graph has.
std::string freshName(const Graph &graph, llvm::StringRef base) {
  std::string name = base.str();
  for (unsigned n = 1; graph.lookupValue(name); ++n)
    name = (base + "." + llvm::Twine(n)).str();
  return name;
}

/// Builds the scaler's nodes, counting them.
class ScalerBuilder {
public:
  explicit ScalerBuilder(Module &module)
      : module(module), graph(module.getGraph()), builder(graph) {}

  Builder &get() { return builder; }
  unsigned getNumNodes() const { return nodes; }

  /// A node whose result types come from inference; the ops used here are
  /// standard ones over well-typed operands, so inference cannot fail
  /// short of a bug.
  llvm::Expected<Value *> op(llvm::StringRef type,
                             llvm::ArrayRef<Value *> operands,
                             llvm::ArrayRef<NamedAttribute> attrs = {},
                             llvm::StringRef domain = kOnnxDomain,
                             unsigned numResults = 1) {
    auto node = builder.createInferred(OpName{domain.str(), type.str()},
                                       operands, numResults, attrs);
    if (!node)
      return node.takeError();
    ++nodes;
    return (*node)->getResult(0);
  }
  /// An f32 scalar constant.
  Value *scalar(float value, llvm::StringRef name) {
    return builder.createConstant(
        TensorData::fromValues<float>(DType::F32, {}, {value}),
        freshName(graph, name));
  }
  /// Cast to \p to.
  llvm::Expected<Value *> cast(Value *value, DType to) {
    return op("Cast", {value},
              {{"to", Attribute::getInt(static_cast<int64_t>(to))}});
  }

private:
  Module &module;
  Graph &graph;
  Builder builder;
  unsigned nodes = 0;
};

/// Every use of \p value (node operands and graph outputs).
llvm::SmallVector<OpOperand *, 8> usesOf(Value *value) {
  llvm::SmallVector<OpOperand *, 8> uses;
  for (OpOperand &use : value->getUses())
    uses.push_back(&use);
  return uses;
}

/// The first node of \p graph that reads \p value, or null.
Node *firstUser(Graph &graph, const Value *value) {
  for (Node &node : graph)
    for (Value *operand : node.getOperands())
      if (operand == value)
        return &node;
  return nullptr;
}

} // namespace

llvm::Expected<LossScalingResult>
gmopt::insertLossScaling(Module &module, const LossScalingOptions &options) {
  Graph &graph = module.getGraph();
  TrainingSignature &signature = module.getSignature();
  LossScalingResult result;
  if (options.mode == LossScaleMode::None)
    return result;

  // Check everything first: nothing changes on error.
  Value *seed = signature.getLossGradSeed();
  if (!seed)
    return makeError("loss scaling needs the loss-gradient seed; the training "
                     "signature has none");
  if (seed->getType().getDType() != DType::F32)
    return makeError("the loss-gradient seed is " + seed->getType().str() +
                     ", not fp32");
  Node *seedUser = firstUser(graph, seed);
  if (!seedUser)
    return makeError("nothing reads the loss-gradient seed");
  if (signature.getStepSlot(StepSlot::LossScale) ||
      signature.getStepSlot(StepSlot::LossScaleGoodSteps))
    return makeError("the training signature already has a loss scale");
  std::vector<Value *> gradients;
  for (const ParamInfo &param : signature.getParams()) {
    if (!param.trainable || !param.grad)
      continue;
    if (!param.grad->getDefiningNode())
      return makeError("the gradient of " + param.param->getName() +
                       " is not computed by the step");
    gradients.push_back(param.grad);
  }
  if (gradients.empty())
    return makeError("loss scaling needs trainable gradients; the module has "
                     "none");
  Node *optimizer = findOptimizerNode(module);
  Value *fedSignal = nullptr;
  if (optimizer) {
    OptimizerOperands layout(*optimizer);
    fedSignal = layout.isWellFormed() ? layout.getUpdateSignal() : nullptr;
    if (!fedSignal || !fedSignal->isGraphInput())
      return makeError("the optimizer " + optimizer->describe() +
                       " has no update-signal graph input, so an overflowing "
                       "step could not be skipped");
  }

  if (module.getOpsetVersion(kMsDomain) == 0)
    module.opsetImports[kMsDomain.str()] = 1;
  ScalerBuilder scaler(module);
  Builder &b = scaler.get();

  // The state.
  auto stateInput = [&](llvm::StringRef name, float initial) {
    Value *input =
        graph.addInput(TensorType::get(DType::F32, {}), freshName(graph, name));
    input->setData(TensorData::fromValues<float>(DType::F32, {}, {initial}));
    return input;
  };
  Value *scale = stateInput("loss_scale", float(options.scale));
  signature.setStepSlot(StepSlot::LossScale, scale);
  result.lossScale = scale;
  Value *good = nullptr;
  if (options.mode == LossScaleMode::Dynamic) {
    good = stateInput("loss_scale_good_steps", 0.0f);
    signature.setStepSlot(StepSlot::LossScaleGoodSteps, good);
    result.goodSteps = good;
  }

  // The scaled seed, and the reciprocal every gradient is multiplied by.
  b.setInsertionPoint(seedUser);
  b.setPhase(seedUser->getPhase());
  llvm::SmallVector<OpOperand *, 8> seedUses = usesOf(seed);
  auto scaledSeed = scaler.op("Mul", {seed, scale});
  if (!scaledSeed)
    return scaledSeed.takeError();
  (*scaledSeed)->setName(freshName(graph, seed->getName().str() + "_scaled"));
  for (OpOperand *use : seedUses)
    if (!use->isGraphOutput())
      use->set(*scaledSeed);
  auto inverse = scaler.op("Reciprocal", {scale});
  if (!inverse)
    return inverse.takeError();
  (*inverse)->setName(freshName(graph, "loss_scale.inverse"));

  // Unscale each gradient where it is defined; the unscaled one is the
  // gradient (its name, its roles, its readers).
  for (Value *gradient : gradients) {
    Node *def = gradient->getDefiningNode();
    b.setInsertionPointAfter(def);
    b.setPhase(def->getPhase());
    llvm::SmallVector<OpOperand *, 8> uses = usesOf(gradient);
    auto unscaled = scaler.op("Mul", {gradient, *inverse});
    if (!unscaled)
      return unscaled.takeError();
    for (OpOperand *use : uses)
      use->set(*unscaled);
    signature.replaceValue(gradient, *unscaled);
    (*unscaled)->setName(gradient->getName());
    gradient->setName((gradient->getName() + "_scaled").str());
    ++result.gradients;
  }

  // The overflow check over what the optimizer applies, after the last
  // accumulation (reads of a buffer follow its writes in graph order).
  llvm::SmallVector<Value *, 16> checked;
  if (optimizer) {
    OptimizerOperands layout(*optimizer);
    for (unsigned i = 0, n = layout.size(); i != n; ++i)
      checked.push_back(layout.getGrad(i));
    b.setInsertionPoint(optimizer);
  } else {
    for (const ParamInfo &param : signature.getParams())
      if (param.trainable && param.grad)
        checked.push_back(param.accumulator ? param.accumulator : param.grad);
    b.setInsertionPointToEnd();
  }
  b.setPhase(Phase::Optimizer);
  // In standard ops (ONNX Runtime's IsAllFinite has no CPU kernel): a sum
  // is inf or NaN if an element is, and 0 * sum is NaN exactly then.
  llvm::SmallVector<Value *, 16> sums;
  for (Value *value : checked) {
    auto sum = scaler.op("ReduceSum", {value},
                         {{"keepdims", Attribute::getInt(0)}});
    if (!sum)
      return sum.takeError();
    sums.push_back(*sum);
  }
  if (sums.empty())
    return makeError("the optimizer applies no gradient");
  Value *total = sums[0];
  if (sums.size() > 1) {
    auto added = scaler.op("Sum", sums);
    if (!added)
      return added.takeError();
    total = *added;
  }
  total->setName(freshName(graph, "amp.gradient_sum"));
  auto zeroed = scaler.op("Mul", {total, scaler.scalar(0.0f, "amp.zero")});
  if (!zeroed)
    return zeroed.takeError();
  auto foundInf = scaler.op("IsNaN", {*zeroed});
  if (!foundInf)
    return foundInf.takeError();
  (*foundInf)->setName(freshName(graph, "amp.found_inf"));
  auto finite = scaler.op("Not", {*foundInf});
  if (!finite)
    return finite.takeError();
  (*finite)->setName(freshName(graph, "amp.is_finite"));
  graph.addOutput(*foundInf);
  result.foundInf = *foundInf;
  if (optimizer) {
    OptimizerOperands layout(*optimizer);
    auto gated = scaler.op("And", {fedSignal, *finite});
    if (!gated)
      return gated.takeError();
    (*gated)->setName(freshName(graph, "amp.update_signal"));
    optimizer->setOperand(OptimizerOperands::updateSignalIndex(layout.getKind()),
                          *gated);
    result.gatesOptimizer = true;
  }

  if (options.mode == LossScaleMode::Dynamic) {
    // The schedule, at the end of the step (after every read of the
    // state: writes follow earlier reads in graph order).
    b.setInsertionPointToEnd();
    b.setPhase(Phase::Optimizer);
    llvm::SmallVector<Value *, 24> v;
    auto step = [&](llvm::Expected<Value *> value) -> llvm::Error {
      if (!value)
        return value.takeError();
      v.push_back(*value);
      return llvm::Error::success();
    };
    Value *one = scaler.scalar(1.0f, "amp.one");
    Value *zero = scaler.scalar(0.0f, "amp.zero");
    Value *interval = scaler.scalar(float(options.growthInterval),
                                    "amp.growth_interval");
    Value *growth = scaler.scalar(float(options.growthFactor), "amp.growth_factor");
    Value *backoff =
        scaler.scalar(float(options.backoffFactor), "amp.backoff_factor");
    Value *maxScale = scaler.scalar(float(options.maxScale), "amp.max_scale");
    Value *minScale = scaler.scalar(float(options.minScale), "amp.min_scale");
    // good + 1 when finite, else 0.
    if (llvm::Error err = step(scaler.cast(*finite, DType::F32)))
      return err;
    Value *finiteF = v.back();
    finiteF->setName(freshName(graph, "amp.finite"));
    if (llvm::Error err = step(scaler.op("Add", {good, one})))
      return err;
    if (llvm::Error err = step(scaler.op("Mul", {v.back(), finiteF})))
      return err;
    Value *counted = v.back();
    counted->setName(freshName(graph, "amp.finite_steps"));
    // Grow when the count reaches the interval.
    if (llvm::Error err = step(scaler.op("Less", {counted, interval})))
      return err;
    if (llvm::Error err = step(scaler.op("Not", {v.back()})))
      return err;
    Value *grow = v.back();
    grow->setName(freshName(graph, "amp.grow"));
    if (llvm::Error err = step(scaler.op("Mul", {scale, growth})))
      return err;
    if (llvm::Error err = step(scaler.op("Min", {v.back(), maxScale})))
      return err;
    if (llvm::Error err = step(scaler.op("Where", {grow, v.back(), scale})))
      return err;
    Value *kept = v.back();
    kept->setName(freshName(graph, "amp.scale_if_finite"));
    if (llvm::Error err = step(scaler.op("Mul", {scale, backoff})))
      return err;
    if (llvm::Error err = step(scaler.op("Max", {v.back(), minScale})))
      return err;
    if (llvm::Error err = step(scaler.op("Where", {*finite, kept, v.back()})))
      return err;
    Value *nextScale = v.back();
    nextScale->setName(freshName(graph, "amp.scale_if_due"));
    if (llvm::Error err = step(scaler.op("Where", {grow, zero, counted})))
      return err;
    Value *nextGood = v.back();
    nextGood->setName(freshName(graph, "amp.finite_steps_if_due"));
    // Only when the update is due (the last micro-step).
    if (fedSignal) {
      Value *scalarShape = b.createConstant(
          TensorData::fromValues<int64_t>(DType::I64, {0}, {}),
          freshName(graph, "amp.scalar_shape"));
      if (llvm::Error err = step(scaler.op("Reshape", {fedSignal, scalarShape})))
        return err;
      Value *due = v.back();
      due->setName(freshName(graph, "amp.update_due"));
      if (llvm::Error err = step(scaler.op("Where", {due, nextScale, scale})))
        return err;
      nextScale = v.back();
      if (llvm::Error err = step(scaler.op("Where", {due, nextGood, good})))
        return err;
      nextGood = v.back();
    }
    nextScale->setName(freshName(graph, "loss_scale.next"));
    nextGood->setName(freshName(graph, "loss_scale_good_steps.next"));
    Value *overwrite = b.createConstant(
        TensorData::fromValues<bool>(DType::Bool, {1}, {true}),
        freshName(graph, "amp.overwrite"));
    for (auto [state, next] : {std::pair{scale, nextScale},
                               std::pair{good, nextGood}}) {
      auto flag = scaler.op("InPlaceAccumulatorV2", {state, next, overwrite},
                            {}, kMsDomain);
      if (!flag)
        return flag.takeError();
      (*flag)->setName(freshName(graph, state->getName().str() + ".updated"));
      graph.addOutput(*flag);
    }
  }
  result.nodes = scaler.getNumNodes();
  return result;
}
