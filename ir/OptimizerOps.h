//===- OptimizerOps.h - Operand layout of the in-graph optimizers -*- C++ -*-===//
//
// ONNX Runtime's com.microsoft AdamWOptimizer and SGDOptimizerV2 take their
// parameters, gradients and moments as tensor sequences. gmopt's IR has no
// sequences, so each sequence becomes a group of N consecutive operands, and
// ONNX Runtime's optional update_signal keeps a fixed slot ahead of them.
// A variadic op has no absent operands in the IR, so the slot always holds
// a bool value (buildOptimizer makes it a graph input the runtime feeds);
// the kernels still treat a missing one as true, as ONNX Runtime does:
//
//   AdamWOptimizer(lr, step, update_signal?, W_1..W_N, G_1..G_N,
//                  M1_1..M1_N, M2_1..M2_N) -> updated_flag
//   SGDOptimizerV2(lr, update_signal?, W_1..W_N, G_1..G_N)
//                  -> update_completed
//
// The weights and moments are updated in place (the schema's written
// operands); the gradients, lr and step are only read. OptimizerOperands
// reads this layout off a node so the registry, the kernels, the importer
// and buildOptimizer agree on one definition.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPTIMIZEROPS_H
#define GMOPT_IR_OPTIMIZEROPS_H

#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

namespace gmopt {

/// The in-graph optimizers gmopt models.
enum class OptimizerKind {
  /// com.microsoft AdamWOptimizer: two moments per parameter and a step.
  AdamW,
  /// com.microsoft SGDOptimizerV2: p -= lr * g.
  SGD,
};

/// The operand layout of one optimizer node (see the file comment).
class OptimizerOperands {
public:
  /// The optimizer \p node is, or nullopt for any other op.
  static std::optional<OptimizerKind> kindOf(const Node &node) {
    if (node.isa(kMsDomain, "AdamWOptimizer"))
      return OptimizerKind::AdamW;
    if (node.isa(kMsDomain, "SGDOptimizerV2"))
      return OptimizerKind::SGD;
    return std::nullopt;
  }
  /// Operands before the first group: lr, step, update_signal (AdamW);
  /// lr, update_signal (SGD).
  static unsigned numLeading(OptimizerKind kind) {
    return kind == OptimizerKind::AdamW ? 3 : 2;
  }
  /// Operand groups of N each: weights, gradients and, for AdamW, the two
  /// moments.
  static unsigned numGroups(OptimizerKind kind) {
    return kind == OptimizerKind::AdamW ? 4 : 2;
  }
  /// Per-parameter optimizer state groups (the moments): 2 for AdamW, 0
  /// for SGD.
  static unsigned numStates(OptimizerKind kind) { return numGroups(kind) - 2; }
  /// Index of the update_signal slot.
  static unsigned updateSignalIndex(OptimizerKind kind) {
    return numLeading(kind) - 1;
  }

  /// The operand list of an optimizer node: \p step is ignored for SGD,
  /// \p updateSignal may be null, \p states holds numStates(kind) groups of
  /// params.size() values each.
  static std::vector<Value *>
  layout(OptimizerKind kind, Value *learningRate, Value *step,
         Value *updateSignal, llvm::ArrayRef<Value *> params,
         llvm::ArrayRef<Value *> grads,
         llvm::ArrayRef<llvm::SmallVector<Value *, 8>> states) {
    std::vector<Value *> operands = {learningRate};
    if (kind == OptimizerKind::AdamW)
      operands.push_back(step);
    operands.push_back(updateSignal);
    operands.insert(operands.end(), params.begin(), params.end());
    operands.insert(operands.end(), grads.begin(), grads.end());
    for (const auto &group : states)
      operands.insert(operands.end(), group.begin(), group.end());
    return operands;
  }

  /// Reads the layout of \p node, an AdamWOptimizer or SGDOptimizerV2.
  explicit OptimizerOperands(const Node &node)
      : node(node), kind(*kindOf(node)) {}

  OptimizerKind getKind() const { return kind; }
  /// True when the operand count fits the layout with N >= 1.
  bool isWellFormed() const {
    unsigned lead = numLeading(kind), groups = numGroups(kind);
    unsigned total = node.getNumOperands();
    return total > lead && (total - lead) % groups == 0;
  }
  /// N, the number of parameters updated (0 when not well formed).
  unsigned size() const {
    return isWellFormed()
               ? (node.getNumOperands() - numLeading(kind)) / numGroups(kind)
               : 0;
  }
  /// Operand index of the learning rate.
  unsigned learningRateIndex() const { return 0; }
  /// Operand index of the step count (AdamW only).
  unsigned stepIndex() const { return 1; }
  /// Operand index of parameter \p i.
  unsigned paramIndex(unsigned i) const { return numLeading(kind) + i; }
  /// Operand index of gradient \p i.
  unsigned gradIndex(unsigned i) const { return numLeading(kind) + size() + i; }
  /// Operand index of state \p k (0: first moment, 1: second) of
  /// parameter \p i.
  unsigned stateIndex(unsigned k, unsigned i) const {
    return numLeading(kind) + (2 + k) * size() + i;
  }

  Value *getLearningRate() const { return node.getOperand(0); }
  /// The step count, or null for SGD.
  Value *getStep() const {
    return kind == OptimizerKind::AdamW ? node.getOperand(1) : nullptr;
  }
  /// The update signal (null only outside a verified module).
  Value *getUpdateSignal() const {
    return node.getOperand(updateSignalIndex(kind));
  }
  Value *getParam(unsigned i) const { return node.getOperand(paramIndex(i)); }
  Value *getGrad(unsigned i) const { return node.getOperand(gradIndex(i)); }
  Value *getState(unsigned k, unsigned i) const {
    return node.getOperand(stateIndex(k, i));
  }

  /// The operands the node writes in place: every parameter and state.
  llvm::SmallVector<unsigned, 8> writtenOperands() const {
    llvm::SmallVector<unsigned, 8> written;
    unsigned n = size();
    for (unsigned i = 0; i != n; ++i)
      written.push_back(paramIndex(i));
    for (unsigned k = 0, e = numStates(kind); k != e; ++k)
      for (unsigned i = 0; i != n; ++i)
        written.push_back(stateIndex(k, i));
    return written;
  }

private:
  const Node &node;
  OptimizerKind kind;
};

} // namespace gmopt

#endif // GMOPT_IR_OPTIMIZEROPS_H
