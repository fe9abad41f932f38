//===- OpRegistry.h - What gmopt knows about each operator ------*- C++ -*-===//
//
// gmopt's own operator registry, the source of truth for every op it
// supports (libonnx knows only opsets <= 17 and nothing of com.microsoft).
// Each OpSchema is keyed by (domain, op type, since-version) and gives arity,
// attributes with defaults, dtype/shape inference, a FLOP/byte cost model and
// traits that memory passes rely on: elementwise, may-write-in-place into an
// input, alias/view, random, side effects, and the mixed-precision class.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPREGISTRY_H
#define GMOPT_IR_OPREGISTRY_H

#include "ir/IR.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {

/// Operator traits (a bitmask).
enum OpTrait : uint32_t {
  TraitNone = 0,
  /// Output element i depends only on input elements i (with broadcasting).
  TraitElementwise = 1u << 0,
  /// Result 0 is a view of operand 0: same bytes, no copy (Reshape...).
  TraitView = 1u << 1,
  /// Draws random numbers (Dropout with ratio > 0...).
  TraitRandom = 1u << 2,
  /// Has effects beyond its results (writes an input in place...).
  TraitSideEffect = 1u << 3,
  /// Operands are interchangeable (Add, Mul, Sum...).
  TraitCommutative = 1u << 4,
  /// Computes shapes/indices only; never touches float payloads.
  TraitShapeOnly = 1u << 5,
  /// Works one slice along an axis at a time (softmax rows, a loss's class
  /// row): each result slice depends only on the same slice of the
  /// elementwise-sized operands, and the kernel reads a slice's elements
  /// before it writes the result elements at the same positions. With an
  /// in-place operand this makes writing into that operand's buffer safe,
  /// although the op is not elementwise.
  TraitRowwise = 1u << 6,
};

/// How mixed precision (the `amp` pass) treats an op: the registry's AMP
/// class is the one table of that policy (torch.autocast's lists; printed
/// by `gmopt-opt --list-ops`).
enum class AmpClass {
  /// Not a floating-point computation, or one whose operand types are
  /// fixed (shape/index ops, casts, accumulators, optimizers, side
  /// effects): operands keep their types.
  None,
  /// Safe and profitable in fp16/bf16: MatMul, Gemm, FusedMatMul, Conv and
  /// their gradients. Float operands are cast down, results are low.
  Allow,
  /// Must run in fp32: batch norm and its gradient, reductions,
  /// Exp/Log/Pow, log-softmax, losses and their gradients. Low-precision
  /// operands are cast up; results are fp32.
  Deny,
  /// Computes in fp32 but stores like Follow: softmax and its gradient,
  /// layer and RMS norm and their gradients. Their kernels widen 16-bit
  /// operands and accumulate in fp32 (rounding only on store), and their
  /// results are bounded or normalized, so storing them in fp16/bf16 loses
  /// only the storage rounding (Megatron-LM's fused softmax and Apex's
  /// fused layer norm do the same). The amp pass's `strict-fp32` option
  /// treats them as Deny (torch.autocast's fp32 tensors in and out).
  Fp32Compute,
  /// Runs in the precision of its inputs (elementwise, activations, views,
  /// Dropout): low when every AMP operand is low precision, a parameter or
  /// a constant (with at least one low activation among them); otherwise
  /// fp32, widest wins.
  Follow,
};

/// `none`, `allow`, `deny`, `fp32-compute` or `follow`.
llvm::StringRef ampClassName(AmpClass amp);

/// Specification of one attribute.
struct AttrSpec {
  std::string name;
  Attribute::Kind kind;
  /// Default when absent; nullopt means required (if \p required) or no
  /// default at all.
  std::optional<Attribute> defaultValue;
  bool required = false;
};

/// Work and traffic estimate of one node.
struct OpCost {
  uint64_t flops = 0;
  uint64_t bytesRead = 0;
  uint64_t bytesWritten = 0;
};

class OpSchema;

/// What a type inference function sees and produces.
class InferenceContext {
public:
  InferenceContext(const Node &node, const OpSchema &schema);

  const Node &getNode() const { return node; }
  unsigned getNumInputs() const { return node.getNumOperands(); }
  /// True if optional operand \p i is present.
  bool hasInput(unsigned i) const;
  /// Type of operand \p i; must be present.
  const TensorType &getInputType(unsigned i) const;
  /// Constant contents of operand \p i when known at compile time (an
  /// initializer, an input default, or a Constant node), else null.
  const TensorData *getConstantInput(unsigned i) const;

  /// Attribute or the schema default (null if neither).
  const Attribute *getAttr(llvm::StringRef name) const;
  int64_t getIntAttr(llvm::StringRef name, int64_t fallback = 0) const;
  float getFloatAttr(llvm::StringRef name, float fallback = 0) const;
  std::vector<int64_t> getIntsAttr(llvm::StringRef name) const;
  std::string getStringAttr(llvm::StringRef name) const;

  unsigned getNumOutputs() const { return outputs.size(); }
  /// Sets the inferred type of result \p i.
  void setOutputType(unsigned i, TensorType type) {
    outputs[i] = std::move(type);
  }
  const TensorType &getOutputType(unsigned i) const { return outputs[i]; }
  llvm::ArrayRef<TensorType> getOutputTypes() const { return outputs; }

  /// An inference error mentioning the node.
  llvm::Error error(const llvm::Twine &message) const;

private:
  const Node &node;
  const OpSchema &schema;
  llvm::SmallVector<TensorType, 2> outputs;
  /// Constants materialized from a Constant node's value_float(s)/value_int(s)
  /// attributes, owned here so getConstantInput can return a stable pointer.
  mutable std::vector<std::unique_ptr<TensorData>> materializedConstants;
};

using InferenceFn = std::function<llvm::Error(InferenceContext &)>;
using CostFn = std::function<OpCost(const Node &)>;
/// The operands a side-effecting node writes in place, in operand order
/// (for ops whose written operands depend on the node, e.g. the variadic
/// operand groups of AdamWOptimizer).
using WrittenOperandsFn =
    std::function<llvm::SmallVector<unsigned, 8>(const Node &)>;

/// Everything gmopt knows about one (domain, op, since-version).
class OpSchema {
public:
  std::string domain;
  std::string name;
  int64_t sinceVersion = 1;
  unsigned minInputs = 0;
  /// Maximum inputs; UINT_MAX for variadic.
  unsigned maxInputs = 0;
  unsigned minOutputs = 1;
  unsigned maxOutputs = 1;
  std::vector<AttrSpec> attributes;
  /// Accept attributes not listed (for ops whose attribute set we do not
  /// model exhaustively); the verifier then checks only listed ones.
  bool allowUnknownAttributes = false;
  uint32_t traits = TraitNone;
  /// Result inPlaceResult may be written into the buffer of this operand
  /// when the operand dies here and the types match; -1 if never. Needs
  /// TraitElementwise or TraitRowwise.
  int inPlaceOperand = -1;
  /// The result that may take over inPlaceOperand's buffer.
  unsigned inPlaceResult = 0;
  /// For a TraitSideEffect op: the one operand whose storage it writes in
  /// place (InPlaceAccumulatorV2's buffer); -1 means unknown, and every
  /// operand is assumed written (unless writtenOperands is set).
  int writesOperand = -1;
  /// For a TraitSideEffect op that writes several operands (the optimizers
  /// write every parameter and moment): computes them per node. Takes
  /// precedence over writesOperand; see getWrittenOperands.
  WrittenOperandsFn writtenOperands;
  AmpClass amp = AmpClass::None;
  /// The operands (bit i: operand i; bit 31: operand 31 and every later
  /// one) whose precision follows the op's AMP decision; the others keep
  /// their type (Dropout's ratio stays fp32). Default: every operand.
  uint32_t ampOperands = ~0u;
  InferenceFn infer;
  /// Cost model; null means the default (one flop per output element,
  /// bytes = all operands + results).
  CostFn cost;

  bool hasTrait(OpTrait t) const { return (traits & t) != 0; }
  /// True if operand \p index follows the op's AMP precision.
  bool isAmpOperand(unsigned index) const {
    return (ampOperands >> (index < 31 ? index : 31)) & 1u;
  }
  const AttrSpec *lookupAttr(llvm::StringRef attrName) const;
};

/// The registry of all schemas.
class OpRegistry {
public:
  /// The process-wide registry with every built-in op registered.
  static const OpRegistry &instance();

  /// The schema with the largest since-version <= \p opsetVersion, or null.
  const OpSchema *lookup(llvm::StringRef domain, llvm::StringRef opType,
                         int64_t opsetVersion) const;
  /// The schema for \p node under its module's opset imports, or null.
  const OpSchema *lookup(const Node &node) const;
  /// True if some version of (domain, opType) is registered.
  bool knows(llvm::StringRef domain, llvm::StringRef opType) const;

  /// Registers \p schema (one per (domain, name, sinceVersion)).
  void add(OpSchema schema);
  /// All schemas, ordered by domain, name and version.
  std::vector<const OpSchema *> all() const;

private:
  OpRegistry() = default;
  // Key "domain::name" -> schemas sorted by sinceVersion.
  llvm::StringMap<std::vector<OpSchema>> schemas;
};

/// Runs inference for \p node and returns the result types. Checks arity
/// and attribute kinds first. Error messages name the node.
llvm::Expected<llvm::SmallVector<TensorType, 2>>
inferNodeTypes(const Node &node);

/// Sets the types of \p node's results from inference, refining (never
/// contradicting) types already present.
llvm::Error inferAndSetTypes(Node &node);

/// The operands whose storage \p node writes in place, ascending: none
/// unless \p schema (the node's schema, or null when unknown) has
/// TraitSideEffect; then the schema's writtenOperands function, else its
/// writesOperand, else (unknown) every operand. An unknown op (null
/// schema) is assumed to write every operand.
llvm::SmallVector<unsigned, 8> getWrittenOperands(const Node &node,
                                                  const OpSchema *schema);

/// Prints one line per registered op: domain::name, the versions
/// registered, the AMP class and, where only some operands follow the AMP
/// precision, which (`gmopt-opt --list-ops`).
void printOpTable(llvm::raw_ostream &os);

/// Cost of \p node (schema cost function, or the default model).
OpCost estimateCost(const Node &node);

/// Registration hooks, one per op family file in ir/ops/.
void registerOnnxOps(OpRegistry &registry);
void registerMicrosoftOps(OpRegistry &registry);

} // namespace gmopt

#endif // GMOPT_IR_OPREGISTRY_H
