//===- Module.cpp - Module facts and the training signature ---------------===//
//
// Implements the Module's opset queries and the recognition of the training
// signature: which graph inputs and initializers are trainable or frozen
// parameters, which value is each parameter's gradient and accumulation
// buffer, which output is the loss and which constant seeds the backward
// pass. The rules follow what ONNX Runtime's training artifact generator
// writes (see inferTrainingSignature in Module.h); they also cover gradient
// graphs that expose `P_grad` as plain outputs. classifyNodes then splits
// the schedule into forward, backward and optimizer phases.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"

#include "llvm/ADT/DenseSet.h"
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
  for (const ParamInfo &info : params)
    if (info.param == param)
      return &info;
  return nullptr;
}

size_t TrainingSignature::numTrainable() const {
  return llvm::count_if(params, [](const ParamInfo &p) { return p.trainable; });
}

StringRef gmopt::phaseName(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Backward:
    return "backward";
  case Phase::Optimizer:
    return "optimizer";
  }
  llvm_unreachable("unknown phase");
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

/// The phase rule shared by classifyNodes and the frozen-initializer test.
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
    classifyInputs();
    classifyInitializers();
    signature.lazyResetGrad = lazyResetGrad;
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
    for (Node &node : graph.getNodes()) {
      if (!isAccumulatorOp(node) || node.getNumOperands() < 2 ||
          !node.getOperand(0) || !node.getOperand(1))
        continue;
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
    signature.loss = loss;
    signature.lossGradSeed = loss ? seedOf(loss) : nullptr;
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
    signature.params.push_back(info);
  }

  /// Graph inputs are parameters (ONNX Runtime moves every parameter, frozen
  /// or not, behind the user inputs) or data.
  void classifyInputs() {
    bool seenTrainable = false;
    for (const std::unique_ptr<Value> &inputPtr : graph.getInputs()) {
      Value *input = inputPtr.get();
      if (buffers.count(input) || input == lazyResetGrad ||
          input == signature.lossGradSeed)
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
        signature.dataInputs.push_back(input);
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
      if (init == signature.lossGradSeed || !isFloatingPoint(type.getDType()) ||
          !type.hasRank() || type.getRank() == 0 || isScalarLike(type))
        continue;
      if (!phasesComputed) {
        phases = computePhases(graph, signature.lossGradSeed);
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
};

} // namespace

void gmopt::inferTrainingSignature(Module &module) {
  module.signature = SignatureRecognizer(module.getGraph()).run();
}

llvm::DenseMap<const Node *, Phase> gmopt::classifyNodes(const Module &module) {
  return computePhases(module.getGraph(), module.signature.lossGradSeed);
}
