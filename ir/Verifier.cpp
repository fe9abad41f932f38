//===- Verifier.cpp - Structural and type checks of a module --------------===//
//
// Checks, in order: graph ownership, the size limit (kMaxTensorBytes) and
// use-list consistency of every value; that node order is a topological
// order (distinguishing a true cycle from a mere misordering); that every node
// is a registered op whose arity, attributes and result types agree with the
// registry; graph outputs; and that the training signature refers to live
// values of this graph, each of the right kind (parameters are inputs or
// initializers; accumulators, optimizer state, data inputs and step slots are
// graph inputs), gradients and accumulators of their parameter's type, no
// value in two roles, and every in-graph optimizer node that updates a
// signature parameter agreeing with its optimizer state and step slots.
//
//===----------------------------------------------------------------------===//

#include "ir/Verifier.h"
#include "ir/MemorySpaces.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/OptimizerOps.h"
#include "ir/SizeLimits.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <optional>

using namespace gmopt;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Error failAt(const Node &node, const llvm::Twine &message) {
  return fail(message + " (node " + node.describe() + ")");
}

std::string valueLabel(const Value *value) {
  if (!value->getName().empty())
    return "'" + value->getName().str() + "'";
  if (Node *def = value->getDefiningNode())
    return llvm::formatv("result {0} of node {1}", value->getResultIndex(),
                         def->describe())
        .str();
  return "<unnamed value>";
}

/// Verifies the structure of \p graph. Every node's operands must be defined
/// by an earlier node (or be inputs/initializers). When that fails we look
/// for a cycle so the message says what is really wrong.
class GraphVerifier {
public:
  GraphVerifier(const Module &module, VerifyOptions options)
      : module(module), graph(module.getGraph()), options(options) {}

  llvm::Error verify() {
    if (auto err = collectValues())
      return err;
    if (auto err = checkOrder())
      return err;
    if (auto err = checkUseLists())
      return err;
    if (auto err = checkNodes())
      return err;
    if (auto err = checkOutputs())
      return err;
    return checkSignature();
  }

private:
  // The messages below are built only on failure: the checks run over
  // every value after every pass.
  llvm::Error collectValues() {
    size_t numValues =
        graph.getInputs().size() + graph.getInitializers().size();
    for (const Node &node : graph.getNodes())
      numValues += node.getNumResults();
    live.reserve(numValues);
    nodePosition.reserve(graph.getNumNodes());
    for (const auto &value : graph.getInputs()) {
      if (value->getGraph() != &graph)
        return fail("graph input " + valueLabel(value.get()) +
                    " belongs to another graph");
      if (!fitsSizeLimit(value->getType()))
        return checkTensorSize(value->getType(),
                               "graph input " + valueLabel(value.get()));
      live.insert(value.get());
    }
    for (const auto &value : graph.getInitializers()) {
      if (!value->hasData())
        return fail("initializer " + valueLabel(value.get()) + " has no data");
      if (value->getData().getType() != value->getType())
        return fail("initializer " + valueLabel(value.get()) + " has type " +
                    value->getType().str() + " but its data is " +
                    value->getData().getType().str());
      if (!fitsSizeLimit(value->getType()))
        return checkTensorSize(value->getType(),
                               "initializer " + valueLabel(value.get()));
      live.insert(value.get());
    }
    unsigned position = 0;
    for (const Node &node : graph.getNodes()) {
      if (node.getGraph() != &graph)
        return failAt(node, "node belongs to another graph");
      nodePosition[&node] = position++;
      for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
        Value *result = node.getResult(i);
        if (!result)
          continue;
        if (result->getDefiningNode() != &node || result->getResultIndex() != i)
          return failAt(node,
                        llvm::formatv("result {0} has a wrong back link", i));
        if (!fitsSizeLimit(result->getType())) {
          std::string what = result->getName().empty()
                                 ? llvm::formatv("result {0}", i).str()
                                 : "result '" + result->getName().str() + "'";
          return failAt(
              node, llvm::toString(checkTensorSize(result->getType(), what)));
        }
        live.insert(result);
      }
    }
    return llvm::Error::success();
  }

  llvm::Error checkOrder() {
    for (const Node &node : graph.getNodes()) {
      unsigned here = nodePosition[&node];
      for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
        Value *operand = node.getOperand(i);
        if (!operand)
          continue;
        if (!live.count(operand))
          return failAt(node, llvm::formatv("operand {0} uses a value that is "
                                            "not defined in this graph",
                                            i));
        Node *def = operand->getDefiningNode();
        if (def && nodePosition[def] >= here) {
          if (const Node *inCycle = findCycle())
            return failAt(*inCycle, "graph has a cycle");
          return failAt(node, "operand " + llvm::Twine(i) + " uses " +
                                  valueLabel(operand) +
                                  " before its definition: node order is "
                                  "not a topological order");
        }
      }
    }
    return llvm::Error::success();
  }

  /// Kahn's algorithm over the def-use graph; returns a node on a cycle.
  const Node *findCycle() {
    llvm::DenseMap<const Node *, unsigned> pending;
    llvm::SmallVector<const Node *, 64> ready;
    for (const Node &node : graph.getNodes()) {
      unsigned count = 0;
      for (Value *operand : node.getOperands())
        if (operand && operand->getDefiningNode())
          ++count;
      pending[&node] = count;
      if (!count)
        ready.push_back(&node);
    }
    size_t visited = 0;
    while (!ready.empty()) {
      const Node *node = ready.pop_back_val();
      ++visited;
      for (Value *result : node->getResults()) {
        if (!result)
          continue;
        for (OpOperand &use : result->getUses())
          if (Node *user = use.getOwner())
            if (--pending[user] == 0)
              ready.push_back(user);
      }
    }
    if (visited == graph.getNumNodes())
      return nullptr;
    for (const Node &node : graph.getNodes())
      if (pending[&node] != 0)
        return &node;
    return nullptr;
  }

  llvm::Error checkUseLists() {
    size_t operandCount = graph.getNumOutputs();
    for (const Node &node : graph.getNodes())
      for (Value *operand : node.getOperands())
        operandCount += operand != nullptr;
    size_t useCount = 0;
    for (const Value *value : live) {
      for (OpOperand &use : value->getUses()) {
        ++useCount;
        if (use.get() != value)
          return fail("use list of " + valueLabel(value) + " is corrupt");
        if (Node *owner = use.getOwner()) {
          if (!nodePosition.count(owner))
            return fail("value " + valueLabel(value) +
                        " is used by a node outside the graph");
          if (use.getIndex() >= owner->getNumOperands() ||
              &owner->getOpOperand(use.getIndex()) != &use)
            return failAt(*owner, "operand back link is corrupt");
        } else if (use.getIndex() >= graph.getNumOutputs() ||
                   graph.getOutput(use.getIndex()) != value) {
          return fail("graph output use of " + valueLabel(value) +
                      " is corrupt");
        }
      }
    }
    if (useCount != operandCount)
      return fail(llvm::formatv("use lists hold {0} uses but the graph has {1} "
                                "operands",
                                useCount, operandCount));
    return llvm::Error::success();
  }

  llvm::Error checkNodes() {
    const OpRegistry &registry = OpRegistry::instance();
    for (const Node &node : graph.getNodes()) {
      const OpSchema *schema = registry.lookup(node);
      if (!schema) {
        if (!registry.knows(node.getDomain(), node.getOpType()))
          return failAt(node, "unknown op '" + node.getOp().str() + "'");
        return failAt(
            node, llvm::formatv("op '{0}' is not supported at opset {1}",
                                node.getOp().str(), node.getOpsetVersion()));
      }
      bool random = schema->hasTrait(TraitRandom);
      if (random && !node.getStreamId())
        return failAt(node, "random op '" + node.getOp().str() +
                                "' has no stream id");
      if (!random && node.getStreamId())
        return failAt(node, "op '" + node.getOp().str() +
                                "' draws no random numbers but has a stream "
                                "id");
      // Without checkTypes the caller has just run inference on every node
      // (an importer): running it again would repeat the same answers.
      llvm::SmallVector<TensorType, 2> inferred;
      if (options.checkTypes) {
        auto types = inferNodeTypes(node);
        if (!types)
          return types.takeError();
        inferred = std::move(*types);
      }
      for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
        Value *result = node.getResult(i);
        if (!result)
          continue;
        if (options.requireStaticShapes && !result->getType().hasStaticShape())
          return failAt(node, "result " + valueLabel(result) + " has type " +
                                  result->getType().str() +
                                  ", which is not static");
        if (!options.checkTypes || i >= inferred.size())
          continue;
        if (!compatible(result->getType(), inferred[i]))
          return failAt(node,
                        llvm::formatv("result {0} has type {1} but the op "
                                      "infers {2}",
                                      i, result->getType().str(),
                                      inferred[i].str()));
      }
      // Host memory is read only by copies, each start has its wait.
      if (llvm::Error err = checkMemorySpaceRules(node))
        return err;
    }
    if (options.requireStaticShapes)
      for (const auto &input : graph.getInputs())
        if (!input->getType().hasStaticShape())
          return fail("graph input " + valueLabel(input.get()) + " has type " +
                      input->getType().str() + ", which is not static");
    return llvm::Error::success();
  }

  /// A recorded type is compatible with an inferred one when nothing known
  /// about one contradicts the other.
  static bool compatible(const TensorType &recorded,
                         const TensorType &inferred) {
    if (recorded.getDType() != DType::Undefined &&
        inferred.getDType() != DType::Undefined &&
        recorded.getDType() != inferred.getDType())
      return false;
    if (!recorded.hasRank() || !inferred.hasRank())
      return true;
    if (recorded.getRank() != inferred.getRank())
      return false;
    for (unsigned d = 0, e = recorded.getRank(); d != e; ++d) {
      const Dim &a = recorded.getDim(d), &b = inferred.getDim(d);
      if (a.isStatic() && b.isStatic() && a.getExtent() != b.getExtent())
        return false;
    }
    return true;
  }

  llvm::Error checkOutputs() {
    for (unsigned i = 0, e = graph.getNumOutputs(); i != e; ++i)
      if (!graph.getOutput(i))
        return fail(llvm::formatv("graph output {0} is absent", i));
    return llvm::Error::success();
  }

  /// A role in the training signature, as messages name it: \p prefix,
  /// then the label of \p param when given, then \p suffix ("the gradient
  /// of parameter 'w'", "step slot learning_rate").
  struct Role {
    llvm::StringRef prefix;
    const Value *param = nullptr;
    llvm::StringRef suffix = {};

    std::string str() const {
      return (prefix + (param ? valueLabel(param) : std::string()) + suffix)
          .str();
    }
  };

  /// Checks that \p value (if any) is a live value of this graph, named by
  /// no other signature entry, and of \p kind when that is given.
  llvm::Error checkRef(const Value *value, const Role &role,
                       std::optional<Value::Kind> kind = std::nullopt) {
    if (!value)
      return llvm::Error::success();
    if (!live.count(value))
      return fail("training signature: " + role.str() +
                  " refers to a value that is not in the graph");
    if (kind && value->getKind() != *kind)
      return fail("training signature: " + role.str() + " " +
                  valueLabel(value) + " is " + kindName(value->getKind()) +
                  ", not " + kindName(*kind));
    auto [it, inserted] = signatureRoles.try_emplace(value, role);
    if (!inserted)
      return fail("training signature: " + valueLabel(value) + " is both " +
                  it->second.str() + " and " + role.str());
    return llvm::Error::success();
  }

  static llvm::StringRef kindName(Value::Kind kind) {
    switch (kind) {
    case Value::Kind::Input:
      return "a graph input";
    case Value::Kind::Initializer:
      return "an initializer";
    case Value::Kind::Result:
      return "a node result";
    }
    return "a value";
  }

  llvm::Error checkSignature() {
    const TrainingSignature &sig = module.getSignature();
    llvm::DenseSet<const Node *> accumulateNodes;
    for (const ParamInfo &param : sig.getParams()) {
      if (!param.param)
        return fail("training signature: parameter entry without a value");
      if (!live.count(param.param))
        return fail("training signature: a parameter refers to a value that "
                    "is not in the graph");
      auto of = [&] { return "of parameter " + valueLabel(param.param); };
      if (param.param->isNodeResult())
        return fail("training signature: parameter " + valueLabel(param.param) +
                    " is a node result, not an input or initializer");
      if (auto err = checkRef(param.param, {"parameter ", param.param}))
        return err;
      const TensorType &type = param.param->getType();
      if (param.grad) {
        if (!param.trainable)
          return fail("training signature: frozen parameter " +
                      valueLabel(param.param) + " has a gradient");
        if (auto err = checkRef(param.grad,
                                {"the gradient of parameter ", param.param}))
          return err;
        if (param.grad->getType() != type)
          return fail("training signature: the gradient " + of() +
                      " has type " + param.grad->getType().str() + ", not " +
                      type.str());
      }
      if (auto err = checkRef(param.accumulator,
                              {"the accumulator of parameter ", param.param},
                              Value::Kind::Input))
        return err;
      if (param.accumulator && param.accumulator->getType() != type)
        return fail("training signature: the accumulator " + of() +
                    " has type " + param.accumulator->getType().str() +
                    ", not " + type.str());
      if (param.accumulateNode) {
        if (!nodePosition.count(param.accumulateNode))
          return fail("training signature: the accumulation node " + of() +
                      " is not in the graph");
        if (!accumulateNodes.insert(param.accumulateNode).second)
          return fail("training signature: node " +
                      param.accumulateNode->describe() +
                      " is the accumulation node of two parameters");
      }
      for (const Value *state : param.optimizerState)
        if (auto err =
                checkRef(state, {"optimizer state of parameter ", param.param},
                         Value::Kind::Input))
          return err;
    }
    for (const Value *data : sig.getDataInputs())
      if (auto err = checkRef(data, {"data input"}, Value::Kind::Input))
        return err;
    if (auto err = checkRef(sig.getLoss(), {"the loss"}))
      return err;
    if (auto err = checkRef(sig.getLossGradSeed(), {"the loss-gradient seed"}))
      return err;
    if (auto err = checkRef(sig.getLazyResetGrad(), {"lazy_reset_grad"},
                            Value::Kind::Input))
      return err;
    for (unsigned i = 0; i != kNumStepSlots; ++i) {
      StepSlot slot = static_cast<StepSlot>(i);
      if (auto err = checkRef(sig.getStepSlot(slot),
                              {"step slot ", nullptr, stepSlotName(slot)},
                              Value::Kind::Input))
        return err;
    }
    return checkOptimizerNodes(sig);
  }

  static std::string labels(llvm::ArrayRef<const Value *> values) {
    if (values.empty())
      return "none";
    std::string text;
    for (const Value *value : values)
      text += (text.empty() ? "" : ", ") + valueLabel(value);
    return text;
  }

  /// The signature is where the in-graph optimizer's state is found (the
  /// planner, the runtime and checkpoints read it), so an optimizer node
  /// that updates a signature parameter must agree with it: the parameter's
  /// optimizerState is the node's state operands for it, in order, and the
  /// node's learning rate and step count, when graph inputs, are the
  /// learning_rate and step_count slots. Nodes over values outside the
  /// signature (a kernel test's one-node module) are not checked.
  llvm::Error checkOptimizerNodes(const TrainingSignature &sig) {
    for (const Node &node : graph.getNodes()) {
      if (!OptimizerOperands::kindOf(node))
        continue;
      OptimizerOperands layout(node);
      if (!layout.isWellFormed())
        continue;
      unsigned numStates = OptimizerOperands::numStates(layout.getKind());
      bool updatesSignature = false;
      for (unsigned i = 0, n = layout.size(); i != n; ++i) {
        const Value *param = layout.getParam(i);
        const ParamInfo *info = param ? sig.lookup(param) : nullptr;
        if (!info)
          continue;
        updatesSignature = true;
        llvm::SmallVector<const Value *, 2> state,
            recorded(info->optimizerState.begin(), info->optimizerState.end());
        for (unsigned k = 0; k != numStates; ++k)
          state.push_back(layout.getState(k, i));
        if (state != recorded)
          return fail("training signature: optimizer node " + node.describe() +
                      " updates parameter " + valueLabel(param) +
                      " with state " + labels(state) +
                      ", but the signature records " + labels(recorded));
      }
      if (!updatesSignature)
        continue;
      for (auto [read, slot] :
           {std::pair{layout.getLearningRate(), StepSlot::LearningRate},
            std::pair{layout.getStep(), StepSlot::StepCount}}) {
        if (!read || !read->isGraphInput() || sig.getStepSlot(slot) == read)
          continue;
        const Value *filled = sig.getStepSlot(slot);
        return fail("training signature: optimizer node " + node.describe() +
                    " reads " + valueLabel(read) + " but the " +
                    stepSlotName(slot).str() + " slot is " +
                    (filled ? valueLabel(filled) : std::string("empty")));
      }
    }
    return llvm::Error::success();
  }

  const Module &module;
  const Graph &graph;
  VerifyOptions options;
  llvm::DenseSet<const Value *> live;
  llvm::DenseMap<const Node *, unsigned> nodePosition;
  /// The role of each value the signature names, for duplicate checks.
  llvm::DenseMap<const Value *, Role> signatureRoles;
};

} // namespace

llvm::Error gmopt::verifyModule(const Module &module, VerifyOptions options) {
  return GraphVerifier(module, options).verify();
}
