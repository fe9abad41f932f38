//===- LossScaling.cpp - In-graph loss scaling for fp16 training ----------===//

#include "passes/amp/LossScaling.h"

#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"

#include "llvm/ADT/STLExtras.h"
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

/// Builds the scaler's nodes, counting them. The ops are standard ones
/// over well-typed operands, so inference fails only on a bug: the first
/// failure is kept, later ops over its (null) result create nothing, and
/// insertLossScaling returns it once at the end.
class ScalerBuilder {
public:
  explicit ScalerBuilder(Graph &graph) : graph(graph), builder(graph) {}

  Builder &get() { return builder; }
  unsigned getNumNodes() const { return nodes; }
  /// The first inference failure, if any.
  llvm::Error takeError() { return std::move(error); }

  /// A node with inferred result types; its result 0 (named \p name when
  /// given), or null after a failure.
  Value *op(llvm::StringRef type, llvm::ArrayRef<Value *> operands,
            llvm::StringRef name = {},
            llvm::ArrayRef<NamedAttribute> attrs = {},
            llvm::StringRef domain = kOnnxDomain) {
    if (error || llvm::is_contained(operands, nullptr))
      return nullptr;
    auto node = builder.createInferred(OpName{domain.str(), type.str()},
                                       operands, 1, attrs);
    if (!node) {
      error = node.takeError();
      return nullptr;
    }
    ++nodes;
    Value *result = (*node)->getResult(0);
    if (!name.empty())
      result->setName(freshName(graph, name));
    return result;
  }
  /// Cast to \p to.
  Value *cast(Value *value, DType to, llvm::StringRef name = {}) {
    return op("Cast", {value}, name,
              {{"to", Attribute::getInt(static_cast<int64_t>(to))}});
  }
  /// A constant named \p name.
  Value *constant(TensorData data, llvm::StringRef name) {
    return builder.createConstant(std::move(data), freshName(graph, name));
  }
  /// An f32 scalar constant.
  Value *scalar(float value, llvm::StringRef name) {
    return constant(TensorData::fromValues<float>(DType::F32, {}, {value}),
                    name);
  }

private:
  Graph &graph;
  Builder builder;
  unsigned nodes = 0;
  llvm::Error error = llvm::Error::success();
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
  ScalerBuilder scaler(graph);
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
  Value *scaledSeed =
      scaler.op("Mul", {seed, scale}, seed->getName().str() + "_scaled");
  if (scaledSeed)
    for (OpOperand *use : seedUses)
      if (!use->isGraphOutput())
        use->set(scaledSeed);
  Value *inverse = scaler.op("Reciprocal", {scale}, "loss_scale.inverse");

  // Unscale each gradient where it is defined; the unscaled one is the
  // gradient (its name, its roles, its readers).
  for (Value *gradient : gradients) {
    Node *def = gradient->getDefiningNode();
    b.setInsertionPointAfter(def);
    b.setPhase(def->getPhase());
    llvm::SmallVector<OpOperand *, 8> uses = usesOf(gradient);
    Value *unscaled = scaler.op("Mul", {gradient, inverse});
    if (!unscaled)
      break;
    for (OpOperand *use : uses)
      use->set(unscaled);
    signature.replaceValue(gradient, unscaled);
    unscaled->setName(gradient->getName());
    gradient->setName((gradient->getName() + "_scaled").str());
    ++result.gradients;
  }

  // The overflow check over what the optimizer applies, after the last
  // accumulation (reads of a buffer follow its writes in graph order). In
  // standard ops (ONNX Runtime's IsAllFinite has no CPU kernel): a sum is
  // inf or NaN if an element is, and 0 * sum is NaN exactly then.
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
  if (checked.empty())
    return makeError("the optimizer applies no gradient");
  b.setPhase(Phase::Optimizer);
  llvm::SmallVector<Value *, 16> sums;
  for (Value *value : checked)
    sums.push_back(scaler.op("ReduceSum", {value}, {},
                             {{"keepdims", Attribute::getInt(0)}}));
  Value *total = sums.size() == 1 ? sums[0] : scaler.op("Sum", sums);
  if (total)
    total->setName(freshName(graph, "amp.gradient_sum"));
  Value *zeroed = scaler.op("Mul", {total, scaler.scalar(0.0f, "amp.zero")});
  Value *foundInf = scaler.op("IsNaN", {zeroed}, "amp.found_inf");
  Value *finite = scaler.op("Not", {foundInf}, "amp.is_finite");
  if (foundInf)
    graph.addOutput(foundInf);
  result.foundInf = foundInf;
  if (optimizer) {
    OptimizerOperands layout(*optimizer);
    if (Value *gated =
            scaler.op("And", {fedSignal, finite}, "amp.update_signal")) {
      optimizer->setOperand(
          OptimizerOperands::updateSignalIndex(layout.getKind()), gated);
      result.gatesOptimizer = true;
    }
  }

  if (options.mode == LossScaleMode::Dynamic) {
    // The schedule, at the end of the step (after every read of the
    // state: writes follow earlier reads in graph order).
    b.setInsertionPointToEnd();
    b.setPhase(Phase::Optimizer);
    Value *one = scaler.scalar(1.0f, "amp.one");
    Value *zero = scaler.scalar(0.0f, "amp.zero");
    Value *interval =
        scaler.scalar(float(options.growthInterval), "amp.growth_interval");
    Value *growth =
        scaler.scalar(float(options.growthFactor), "amp.growth_factor");
    Value *backoff =
        scaler.scalar(float(options.backoffFactor), "amp.backoff_factor");
    Value *maxScale = scaler.scalar(float(options.maxScale), "amp.max_scale");
    Value *minScale = scaler.scalar(float(options.minScale), "amp.min_scale");
    // good + 1 when finite, else 0; grow when that reaches the interval.
    Value *finiteF = scaler.cast(finite, DType::F32, "amp.finite");
    Value *counted = scaler.op("Mul", {scaler.op("Add", {good, one}), finiteF},
                               "amp.finite_steps");
    Value *grow =
        scaler.op("Not", {scaler.op("Less", {counted, interval})}, "amp.grow");
    Value *grown =
        scaler.op("Min", {scaler.op("Mul", {scale, growth}), maxScale});
    Value *kept =
        scaler.op("Where", {grow, grown, scale}, "amp.scale_if_finite");
    Value *backedOff =
        scaler.op("Max", {scaler.op("Mul", {scale, backoff}), minScale});
    Value *nextScale =
        scaler.op("Where", {finite, kept, backedOff}, "amp.scale_if_due");
    Value *nextGood =
        scaler.op("Where", {grow, zero, counted}, "amp.finite_steps_if_due");
    // Only when the update is due (the last micro-step).
    if (fedSignal) {
      Value *scalarShape =
          scaler.constant(TensorData::fromValues<int64_t>(DType::I64, {0}, {}),
                          "amp.scalar_shape");
      Value *due =
          scaler.op("Reshape", {fedSignal, scalarShape}, "amp.update_due");
      nextScale = scaler.op("Where", {due, nextScale, scale});
      nextGood = scaler.op("Where", {due, nextGood, good});
    }
    if (nextScale && nextGood) {
      nextScale->setName(freshName(graph, "loss_scale.next"));
      nextGood->setName(freshName(graph, "loss_scale_good_steps.next"));
    }
    Value *overwrite =
        scaler.constant(TensorData::fromValues<bool>(DType::Bool, {1}, {true}),
                        "amp.overwrite");
    for (auto [state, next] :
         {std::pair{scale, nextScale}, std::pair{good, nextGood}})
      if (Value *flag =
              scaler.op("InPlaceAccumulatorV2", {state, next, overwrite},
                        state->getName().str() + ".updated", {}, kMsDomain))
        graph.addOutput(flag);
  }
  if (llvm::Error err = scaler.takeError())
    return err;
  result.nodes = scaler.getNumNodes();
  return result;
}
