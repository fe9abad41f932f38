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

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <map>
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
};

/// Which values of a module play which role in a training step.
struct TrainingSignature {
  /// Parameters, trainable and frozen, in graph-input order.
  std::vector<ParamInfo> params;
  /// Data inputs (features, labels...).
  std::vector<Value *> dataInputs;
  /// The scalar loss.
  Value *loss = nullptr;
  /// The constant d(loss)/d(loss) that seeds the backward pass, or null.
  Value *lossGradSeed = nullptr;
  /// ONNX Runtime's `lazy_reset_grad` input, or null.
  Value *lazyResetGrad = nullptr;

  /// True when the module has no gradients at all (not a training graph).
  bool hasGradients() const;
  /// Finds the entry of \p param, or null.
  const ParamInfo *lookup(const Value *param) const;
  /// Number of trainable parameters.
  size_t numTrainable() const;
};

/// The phase of a training step that a node belongs to.
enum class Phase { Forward, Backward, Optimizer };
/// Lower-case name of \p phase: forward, backward, optimizer.
llvm::StringRef phaseName(Phase phase);

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
  /// Roles of values in a training step.
  TrainingSignature signature;
  /// Buffer plan for the current schedule; empty until a planner runs.
  /// Any pass that changes the graph must clear it.
  ExecutionPlan plan;

  /// The opset version imported for \p domain, or 0 if none.
  int64_t getOpsetVersion(llvm::StringRef domain) const;

private:
  Graph graph;
};

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
///  - Graph inputs, in order, excluding buffers, lazy_reset_grad and the
///    seed: trainable if they have a gradient; otherwise frozen if their
///    element type is floating point and they have a default initializer,
///    or have a static shape and come after the first trainable parameter
///    (ONNX Runtime appends all parameters after the user inputs), or have a
///    PyTorch parameter name (`a.weight`, `a.bias`, `a.running_mean`,
///    `a.running_var`); otherwise data inputs.
///  - Initializers, in order: trainable if they have a gradient; frozen if
///    they are floating-point tensors with more than one element, not the
///    seed, and read by at least one Forward node; otherwise constants
///    (not in the signature).
void inferTrainingSignature(Module &module);

/// Classifies every node: Backward if it depends on the loss-gradient seed
/// (or any gradient), Optimizer if it is an accumulation/update node,
/// Forward otherwise.
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
llvm::DenseMap<const Node *, Phase> classifyNodes(const Module &module);

} // namespace gmopt

#endif // GMOPT_IR_MODULE_H
