//===- GradientRules.h - One gradient rule per differentiable op -*- C++ -*-===//
//
// The autodiff pass (passes/autodiff/Autodiff.h) walks the forward graph
// backwards and asks this table, for each node on the path from the parameters
// to the loss, how to turn the gradients of its results (dY) into gradients of
// its operands (dX). A rule names the operands that carry a gradient at all
// (indices, shapes, masks and ratios never do) and emits the backward nodes
// through a GradientBuilder, preferring ONNX Runtime's gradient ops
// (ReluGrad, SoftmaxGrad_13, LayerNormalizationGrad, GatherGrad, ...) where
// ONNX Runtime's gradient builder uses them, so the emitted graph stays one
// ONNX Runtime can train, and standard ONNX ops otherwise. A rule may add a
// result to its forward node (a Dropout's mask, SoftmaxCrossEntropyLoss's
// log-probabilities, LayerNormalization's mean and inverse deviation) so the
// backward pass reads the saved value instead of recomputing it.
//
// Rules live in GradientRules{Math,Activations,Nn,Shape,Indexing,Resize}.cpp,
// one function per op.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AUTODIFF_GRADIENTRULES_H
#define GMOPT_PASSES_AUTODIFF_GRADIENTRULES_H

#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace gmopt {

/// Creates the backward nodes of gradient rules: every node it makes is in
/// Phase::Backward, appended at the builder's insertion point, with result
/// types from the op registry and result names derived from the forward
/// value they are the gradient of.
class GradientBuilder {
public:
  explicit GradientBuilder(Graph &graph);

  /// The graph nodes are created in.
  Graph &getGraph() const { return graph; }

  /// Creates a backward node of op \p domain.\p opType with \p numResults
  /// inferred results. Errors come from the registry's inference.
  llvm::Expected<Node *> create(llvm::StringRef domain, llvm::StringRef opType,
                                llvm::ArrayRef<Value *> operands,
                                unsigned numResults = 1,
                                llvm::ArrayRef<NamedAttribute> attrs = {});
  /// create() for a single-result standard ONNX op; returns the result.
  llvm::Expected<Value *> onnx(llvm::StringRef opType,
                               llvm::ArrayRef<Value *> operands,
                               llvm::ArrayRef<NamedAttribute> attrs = {});
  /// create() for a single-result com.microsoft op; returns the result.
  llvm::Expected<Value *> microsoft(llvm::StringRef opType,
                                    llvm::ArrayRef<Value *> operands,
                                    llvm::ArrayRef<NamedAttribute> attrs = {});

  /// A rank-0 constant of \p dtype (a floating-point type) holding \p value.
  Value *scalar(DType dtype, double value);
  /// A 1-D int64 constant.
  Value *int64s(llvm::ArrayRef<int64_t> values);
  /// The shape of \p value as a 1-D int64 tensor: a constant when the shape
  /// is static, else one Shape node per value (reused).
  llvm::Expected<Value *> shapeOf(Value *value);
  /// \p grad (of a broadcast result) summed over the axes along which
  /// \p target was broadcast, reshaped to \p target's shape; \p grad itself
  /// when the shapes agree. Fails when the broadcast cannot be told from
  /// the types (unknown dimensions).
  llvm::Expected<Value *> reduceToShapeOf(Value *grad, Value *target);
  /// reduceToShapeOf with the axes found at run time
  /// (BroadcastGradientArgs + ReduceSumTraining + Reshape), for shapes the
  /// types do not pin down.
  llvm::Expected<Value *> reduceToShapeOfAtRunTime(Value *grad, Value *target);
  /// A tensor of zeros of \p like's type.
  llvm::Expected<Value *> zerosLike(Value *like);
  /// Elementwise helpers (standard ONNX ops).
  llvm::Expected<Value *> mul(Value *a, Value *b) {
    return onnx("Mul", {a, b});
  }
  llvm::Expected<Value *> div(Value *a, Value *b) {
    return onnx("Div", {a, b});
  }
  llvm::Expected<Value *> add(Value *a, Value *b) {
    return onnx("Add", {a, b});
  }
  llvm::Expected<Value *> sub(Value *a, Value *b) {
    return onnx("Sub", {a, b});
  }
  llvm::Expected<Value *> neg(Value *a) { return onnx("Neg", {a}); }

  /// The ai.onnx opset of the module (17 when unknown).
  int64_t getOnnxOpset() const;

private:
  Graph &graph;
  Builder builder;
  llvm::DenseMap<const Value *, Value *> shapes;
  unsigned constantCount = 0;
};

/// What a rule is given for one forward node.
struct GradientRequest {
  /// The forward node.
  Node &node;
  /// d(loss)/d(result i), or null where result i gets no gradient.
  llvm::ArrayRef<Value *> resultGrads;
  /// True for the operands whose gradient is wanted (active and
  /// differentiable); the rule may skip the others.
  llvm::ArrayRef<bool> wanted;
};

/// A rule fills \p operandGrads (one slot per operand, initially null) with
/// the gradient of each wanted operand, in that operand's type.
using GradientFn =
    std::function<llvm::Error(GradientBuilder &, const GradientRequest &,
                              llvm::MutableArrayRef<Value *> operandGrads)>;

/// The operand-gradient slots a rule fills.
using Grads = llvm::MutableArrayRef<Value *>;

/// Stores \p value in \p slot, or passes its error on (rules build each
/// gradient through the builder's Expected-returning helpers).
inline llvm::Error assign(Value *&slot, llvm::Expected<Value *> value) {
  if (!value)
    return value.takeError();
  slot = *value;
  return llvm::Error::success();
}

/// The gradient rule of one op.
struct GradientRule {
  /// Operand indices that carry a gradient; empty means all of them.
  std::vector<unsigned> differentiableOperands;
  /// Emits the backward nodes.
  GradientFn emit;
  /// True for ops whose results never carry a gradient (Shape, Equal,
  /// ArgMax...): the walk stops at them.
  bool nonDifferentiable = false;
  /// The forward rewrite that puts the op in training mode, as ONNX
  /// Runtime's training graph has it (Dropout's training_mode switched on,
  /// BatchNormalization replaced by BatchNormInternal); run before the
  /// backward walk when the pass's train-mode option is set. Returns
  /// whether it changed the node (which it may replace).
  std::function<llvm::Expected<bool>(Node &)> trainingRewrite;
};

/// The rule table, keyed by `domain.op` (`Relu`, `com.microsoft.Gelu`).
class GradientRuleTable {
public:
  /// The table of every rule gmopt knows.
  static const GradientRuleTable &instance();

  /// The rule of \p op, or null.
  const GradientRule *lookup(const OpName &op) const;
  /// True when \p node's operand \p index can carry a gradient (its rule
  /// lists it and its type is floating point).
  bool isDifferentiableOperand(const Node &node, unsigned index) const;
  /// Ops with a rule (nonDifferentiable ones excluded), sorted.
  std::vector<std::string> differentiableOps() const;

  /// Adds the rule of \p domain.\p opType.
  void add(llvm::StringRef domain, llvm::StringRef opType, GradientRule rule);
  /// Marks \p domain.\p opType as never carrying a gradient.
  void addNonDifferentiable(llvm::StringRef domain, llvm::StringRef opType);

private:
  GradientRuleTable() = default;
  llvm::StringMap<GradientRule> rules;
};

/// Registration of each family of rules (GradientRules*.cpp).
void registerMathGradients(GradientRuleTable &table);
void registerActivationGradients(GradientRuleTable &table);
void registerNnGradients(GradientRuleTable &table);
void registerShapeGradients(GradientRuleTable &table);
void registerIndexingGradients(GradientRuleTable &table);
/// Resize (GradientRulesResize.cpp).
void registerResizeGradients(GradientRuleTable &table);

/// In a rule returning llvm::Error or Expected: evaluates \p expr (an
/// llvm::Expected<Value *>), returns its error, else binds the value to a
/// new `Value *out`. Keeps the chains of backward nodes readable.
#define GMOPT_TRY(out, expr)                                                   \
  auto out##OrErr = (expr);                                                    \
  if (!out##OrErr)                                                             \
    return out##OrErr.takeError();                                             \
  Value *out = *out##OrErr;

/// An error naming \p node for a rule that cannot handle it.
llvm::Error gradientError(const Node &node, const llvm::Twine &message);

} // namespace gmopt

#endif // GMOPT_PASSES_AUTODIFF_GRADIENTRULES_H
