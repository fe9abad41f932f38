//===- Module.h - A training module: graph, opsets, signature ---*- C++ -*-===//
//
// A Module is what gmopt compiles: one Graph plus the ONNX model-level facts
// needed to export it again (ir_version, opset imports, producer, metadata),
// the bindings of symbolic dimensions, and the training signature that says
// which values are parameters, gradients, accumulators and the loss.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_MODULE_H
#define GMOPT_IR_MODULE_H

#include "ir/IR.h"
#include "ir/Plan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gmopt {

/// One parameter of the training signature.
struct ParamInfo {
  /// The parameter value (a graph input, or an initializer).
  Value *param = nullptr;
  /// True for trainable parameters, false for frozen ones.
  bool trainable = true;
  /// The value holding d(loss)/d(param) for this step; null if frozen.
  Value *grad = nullptr;
  /// The gradient accumulation buffer input (ONNX Runtime's
  /// `X_grad.accumulation.buffer`), or null.
  Value *accumulator = nullptr;
  /// The InPlaceAccumulatorV2 node that adds grad into the accumulator.
  Node *accumulateNode = nullptr;
  /// The optimizer's persistent per-parameter state, as graph inputs, in
  /// the optimizer's order (AdamW: first moment, second moment); empty
  /// when the module has no in-graph optimizer. Plan category
  /// optimizer_state.
  llvm::SmallVector<Value *, 2> optimizerState;
};

/// Named values that belong to the whole training step rather than to one
/// parameter. Each slot names a graph input or is empty.
enum class StepSlot : unsigned {
  /// The learning rate, a scalar fed each step (so a schedule can drive
  /// it).
  LearningRate,
  /// The optimizer's step count (AdamW's bias correction), persistent.
  StepCount,
  /// The loss scale of mixed-precision training (f32 scalar), persistent.
  LossScale,
  /// The finite steps since the dynamic loss scale last changed (f32
  /// scalar), persistent.
  LossScaleGoodSteps,
};
/// Number of StepSlot values.
constexpr unsigned kNumStepSlots = 4;
/// The slot's name in the text IR and messages: learning_rate, step_count,
/// loss_scale, loss_scale_good_steps.
llvm::StringRef stepSlotName(StepSlot slot);
/// The slot named \p name (see stepSlotName), if any.
std::optional<StepSlot> parseStepSlotName(llvm::StringRef name);

/// Which values of a module play which role in a training step. The
/// signature only points at values and nodes of its module's graph; it is
/// read through the accessors and edited through the methods below (the
/// graph-aware edits that also erase values are Module methods). The
/// verifier checks every entry after every pass that edits the module.
/// Lookups by value and node take constant time.
class TrainingSignature {
public:
  /// Parameters, trainable and frozen, in graph-input order.
  llvm::ArrayRef<ParamInfo> getParams() const { return params; }
  /// Data inputs (features, labels...).
  llvm::ArrayRef<Value *> getDataInputs() const { return dataInputs; }
  /// The scalar loss, or null.
  Value *getLoss() const { return loss; }
  /// The constant d(loss)/d(loss) that seeds the backward pass, or null.
  Value *getLossGradSeed() const { return lossGradSeed; }
  /// ONNX Runtime's `lazy_reset_grad` input, or null.
  Value *getLazyResetGrad() const { return lazyResetGrad; }
  /// The value of step-state slot \p slot, or null when absent.
  Value *getStepSlot(StepSlot slot) const {
    return stepSlots[static_cast<unsigned>(slot)];
  }

  /// True when the module has no gradients at all (not a training graph).
  bool hasGradients() const;
  /// Finds the entry of \p param, or null.
  const ParamInfo *lookup(const Value *param) const;
  /// Number of trainable parameters.
  size_t numTrainable() const;
  /// True if no role is filled.
  bool empty() const;
  /// True if some entry names \p value (in any role).
  bool references(const Value *value) const;
  /// True if \p node is some parameter's accumulation node.
  bool references(const Node *node) const;

  /// Appends \p info as the last parameter. No checks: the verifier
  /// checks the result; Module::addParameter checks first.
  void appendParam(ParamInfo info);
  /// Appends a data input.
  void addDataInput(Value *value);
  /// Sets (or, with null, clears) the loss.
  void setLoss(Value *value) { setRole(loss, value); }
  /// Sets (or clears) the loss-gradient seed.
  void setLossGradSeed(Value *value) { setRole(lossGradSeed, value); }
  /// Sets (or clears) `lazy_reset_grad`.
  void setLazyResetGrad(Value *value) { setRole(lazyResetGrad, value); }
  /// Sets step-state slot \p slot to \p value (null clears it).
  void setStepSlot(StepSlot slot, Value *value) {
    setRole(stepSlots[static_cast<unsigned>(slot)], value);
  }
  /// Clears step-state slot \p slot.
  void clearStepSlot(StepSlot slot) { setStepSlot(slot, nullptr); }
  /// Marks \p param's entry trainable or frozen. Returns false if \p param
  /// is not a parameter.
  bool setTrainable(const Value *param, bool trainable);
  /// Sets the gradient of \p param's entry. Returns false if \p param is
  /// not a parameter.
  bool setGrad(const Value *param, Value *grad);
  /// Sets the accumulation buffer and node of \p param's entry.
  bool setAccumulation(const Value *param, Value *accumulator,
                       Node *accumulateNode);
  /// Sets the optimizer state of \p param's entry.
  bool setOptimizerState(const Value *param, llvm::ArrayRef<Value *> state);
  /// Points every entry naming \p from at \p to instead. Returns whether
  /// any entry changed.
  bool replaceValue(const Value *from, Value *to);
  /// Points every accumulation node entry naming \p from at \p to.
  bool replaceNode(const Node *from, Node *to);

private:
  friend class Module;
  /// Points \p slot at \p value, keeping the index.
  void setRole(Value *&slot, Value *value);
  /// Counts \p value as filling one more role (\p delta 1) or one fewer
  /// (-1) in roleCount.
  void countRole(const Value *value, int delta);
  /// Counts every value and node of \p info (see countRole).
  void countRoles(const ParamInfo &info, int delta);
  /// Rebuilds paramIndex, roleCount and accumulateNodes from the entries.
  void rebuildIndex();
  /// Erases entry \p index and returns it (Module's removals, which also
  /// erase the values it names).
  ParamInfo takeParam(unsigned index);
  /// The entry to edit for \p param, or null.
  ParamInfo *findParam(const Value *param);

  std::vector<ParamInfo> params;
  std::vector<Value *> dataInputs;
  Value *loss = nullptr;
  Value *lossGradSeed = nullptr;
  Value *lazyResetGrad = nullptr;
  std::array<Value *, kNumStepSlots> stepSlots{};
  // The index behind lookup() and references(), kept up to date by every
  // edit: a module of thousands of parameters looks them up once per node
  // or rewrite, which linear scans made quadratic.
  /// The position in params of each parameter value.
  llvm::DenseMap<const Value *, unsigned> paramIndex;
  /// How many roles (of any entry) each value fills; absent when none.
  llvm::DenseMap<const Value *, unsigned> roleCount;
  /// How many entries name each accumulation node; absent when none.
  llvm::DenseMap<const Node *, unsigned> accumulateNodes;
};

/// A compiled unit: graph + model facts + training signature.
class Module {
public:
  Module() : graph(this) {}
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  Graph &getGraph() { return graph; }
  const Graph &getGraph() const { return graph; }

  /// ONNX IR version of the model this came from (or will be exported as).
  int64_t irVersion = 8;
  /// Opset version per domain ("" = ai.onnx).
  std::map<std::string, int64_t> opsetImports;
  std::string producerName;
  std::string producerVersion;
  std::string modelDomain;
  int64_t modelVersion = 0;
  std::string docString;
  /// metadata_props, in order.
  std::vector<std::pair<std::string, std::string>> metadata;
  /// Symbolic dimension bindings (--dim NAME=N).
  std::map<std::string, int64_t> dimBindings;
  /// Buffer plan for the current schedule; empty until a planner runs.
  /// The pass manager clears it after every pass that reports a change.
  ExecutionPlan plan;

  /// The opset version imported for \p domain, or 0 if none.
  int64_t getOpsetVersion(llvm::StringRef domain) const;

  /// Roles of values in a training step.
  const TrainingSignature &getSignature() const { return signature; }
  /// The signature, for the edits that only re-point entries.
  TrainingSignature &getSignature() { return signature; }
  /// Replaces the whole signature (an importer or parser that built one).
  void setSignature(TrainingSignature newSignature) {
    signature = std::move(newSignature);
  }

  /// Adds parameter \p info to the signature after checking it: its values
  /// and node belong to this graph, the parameter is a graph input or
  /// initializer not yet in the signature, the gradient (if any) has the
  /// parameter's type, the accumulator and the optimizer state are graph
  /// inputs of the parameter's type (state of another type, such as a
  /// per-parameter step count, is allowed when it is a graph input) and
  /// none of them already plays a role. Nothing changes on error.
  llvm::Error addParameter(ParamInfo info);

  /// Removes parameter \p param with everything that exists only for it:
  /// graph outputs exposing its gradient or its accumulation node's
  /// results, the accumulation node, the nodes that read its optimizer
  /// state or update it as an in-graph optimizer, the accumulator and
  /// optimizer-state inputs, the parameter value itself, and every node and
  /// initializer that becomes unused and has no side effects (the gradient's
  /// computation). Fails, changing nothing, if \p param is not a parameter, if
  /// the parameter is still read by a node other than its accumulation or
  /// update nodes, or if an update node also updates another parameter. An
  /// in-graph optimizer node (AdamWOptimizer, SGDOptimizerV2) that updates
  /// several parameters is not such a node: it is rebuilt without the
  /// parameter's weight, gradient and state operands (same op, attributes, name
  /// and phase; its result's uses move to the new node). The sole parameter of
  /// an optimizer node takes the node with it (step slots stay).
  llvm::Error removeParameter(Value *param);

  /// Merges parameter \p from into parameter \p into (weight tying): every
  /// use of \p from reads \p into instead; \p from's gradient is added
  /// into \p into's through an Add node (created with a Builder after the
  /// later of the two gradients; users of the old gradient that came
  /// earlier move after it) so \p into's gradient, accumulation and update
  /// see the sum; \p from's accumulation, update, accumulator and state are
  /// removed as by removeParameter. Fails, changing nothing, unless both
  /// are parameters of the same type and trainability, or if the sum
  /// cannot be placed (\p from's gradient depends on \p into's).
  llvm::Error mergeParameter(Value *into, Value *from);

private:
  Graph graph;
  TrainingSignature signature;
};

/// True if \p node must run even when its results are unused: the registry
/// gives it TraitSideEffect (InPlaceAccumulatorV2 writes its buffer) or
/// TraitRandom (a Dropout draws from its stream), or its op is unknown.
/// Signature edits and dead-code elimination keep such nodes.
bool hasSideEffects(const Node &node);

/// Recognises the training signature of \p module: ONNX Runtime's pattern
/// (parameters as graph inputs, `P_grad` values, InPlaceAccumulatorV2 into
/// `P_grad.accumulation.buffer`, `lazy_reset_grad`, the loss-gradient seed)
/// or gradients exposed as plain graph outputs named `P_grad`. Parameters
/// with no gradient are frozen. Fills module.signature; never fails on a
/// graph without gradients (hasGradients() is then false).
///
/// The rules, in order:
///  - Accumulation: every com.microsoft InPlaceAccumulator(V2) node
///    (buffer, grad[, lazy_reset_grad]) records buffer and node for grad.
///    lazyResetGrad is the graph input named `lazy_reset_grad`, else the
///    graph input feeding operand 2 of an accumulation node.
///  - Gradients: a graph input or initializer P (not a buffer, not
///    lazy_reset_grad) is trainable when some value other than a graph
///    input is named `P_grad`, or when its gradient is accumulated into a
///    buffer named `P_grad.accumulation.buffer`.
///  - Loss: among graph outputs that are float, not accumulation outputs
///    and not gradients, the first one X for which a value `X_grad` exists;
///    else the first scalar (one element); else, if there are gradients, the
///    first one. lossGradSeed is the value named `<loss>_grad` (ONNX
///    Runtime's initializer holding 1), or null.
///  - Optimizer: every well-formed com.microsoft AdamWOptimizer or
///    SGDOptimizerV2 node (ir/OptimizerOps.h) gives each parameter operand
///    its state operands (AdamW's two moments), when they are graph inputs,
///    as optimizerState; its learning rate and step count graph inputs fill
///    the learning_rate and step_count slots (the first node's win). These
///    inputs and its update signal input are neither parameters nor data.
///  - Loss scale: graph inputs named `loss_scale` and
///    `loss_scale_good_steps` (f32 scalars; the amp pass's state) fill
///    those slots; an accumulator writing one of them (the dynamic
///    scale's update) is not a gradient's accumulation.
///  - Graph inputs, in order, excluding buffers, lazy_reset_grad, the seed
///    and the optimizer's inputs: trainable if they have a gradient; otherwise
///    frozen if their element type is floating point and they have a default
///    initializer, or have a static shape and come after the first trainable
///    parameter (ONNX Runtime appends all parameters after the user inputs), or
///    have a PyTorch parameter name (`a.weight`, `a.bias`, `a.running_mean`,
///    `a.running_var`); otherwise data inputs.
///  - Initializers, in order: trainable if they have a gradient; frozen if
///    they are floating-point tensors with more than one element, not the
///    seed, and read by at least one Forward node; otherwise constants
///    (not in the signature).
void inferTrainingSignature(Module &module);

/// Sets every node's phase from ONNX Runtime's conventions, once, at import
/// (the ONNX importer calls it after inferTrainingSignature; nothing after
/// import re-derives phases: passes read and carry Node::getPhase()).
/// Backward if a node depends on the loss-gradient seed (or any gradient),
/// Optimizer if it is an accumulation/update node, Forward otherwise.
///
/// Precisely, visiting nodes in schedule order:
///  - Optimizer: a com.microsoft accumulation or update op
///    (InPlaceAccumulator(V2), ZeroGradient, AdamOptimizer, AdamWOptimizer,
///    SGDOptimizer(V2), LambOptimizer), or a node reading a result of an
///    Optimizer node.
///  - Backward: otherwise, a node that reads signature.lossGradSeed or a
///    result of a Backward node, a com.microsoft gradient op (type ending in
///    `Grad` or containing `Grad_`, e.g. ReluGrad, SoftmaxGrad_13), a node
///    named `..._Grad/...` (ONNX Runtime's gradient builder), or a node
///    defining a value whose name ends in `_grad`.
///  - Forward: every other node.
void inferNodePhases(Module &module);

} // namespace gmopt

#endif // GMOPT_IR_MODULE_H
