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
  size_t numTrainable() const;
};

/// The phase of a training step that a node belongs to.
enum class Phase { Forward, Backward, Optimizer };
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
void inferTrainingSignature(Module &module);

/// Classifies every node: Backward if it depends on the loss-gradient seed
/// (or any gradient), Optimizer if it is an accumulation/update node,
/// Forward otherwise.
llvm::DenseMap<const Node *, Phase> classifyNodes(const Module &module);

} // namespace gmopt

#endif // GMOPT_IR_MODULE_H
