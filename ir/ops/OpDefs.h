//===- OpDefs.h - Building blocks for op schema definitions -----*- C++ -*-===//
//
// What every ir/ops/*Ops.cpp file shares: a fluent SchemaBuilder (in the
// spirit of ONNX's OpSchema builder) so that each schema reads as a short
// declaration, the common inference functions (same type as an input,
// broadcasting), the common cost models, and the registration hook of each
// op family. Only the op registry and its family files include this header.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_OPDEFS_H
#define GMOPT_IR_OPS_OPDEFS_H

#include "ir/OpRegistry.h"
#include "ir/ops/ShapeInference.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/ADT/StringRef.h"

#include <climits>
#include <initializer_list>
#include <optional>
#include <vector>

namespace gmopt {
namespace ops {

/// Unbounded arity for variadic inputs or outputs.
constexpr unsigned kVariadic = UINT_MAX;

/// Floating-point element types (the `T` of most ONNX float ops).
llvm::ArrayRef<DType> floatDTypes();

/// Fluent construction of one OpSchema. A builder may be registered several
/// times under different since-versions when the semantics did not change.
class SchemaBuilder {
public:
  /// Starts a schema for (\p domain, \p name, \p sinceVersion) with one
  /// output, no inputs, no traits and AmpClass::None.
  SchemaBuilder(llvm::StringRef domain, llvm::StringRef name,
                int64_t sinceVersion);

  /// Exactly \p count inputs.
  SchemaBuilder &inputs(unsigned count) { return inputs(count, count); }
  /// Between \p min and \p max inputs (kVariadic for no upper bound).
  SchemaBuilder &inputs(unsigned min, unsigned max);
  /// Exactly \p count outputs.
  SchemaBuilder &outputs(unsigned count) { return outputs(count, count); }
  /// Between \p min and \p max outputs (kVariadic for no upper bound).
  SchemaBuilder &outputs(unsigned min, unsigned max);

  /// An optional attribute with a default value (its kind is the default's).
  SchemaBuilder &attr(llvm::StringRef name, Attribute defaultValue);
  /// An optional int attribute defaulting to \p defaultValue.
  SchemaBuilder &attrInt(llvm::StringRef name, int64_t defaultValue) {
    return attr(name, Attribute::getInt(defaultValue));
  }
  /// An optional float attribute defaulting to \p defaultValue.
  SchemaBuilder &attrFloat(llvm::StringRef name, float defaultValue) {
    return attr(name, Attribute::getFloat(defaultValue));
  }
  /// An optional string attribute defaulting to \p defaultValue.
  SchemaBuilder &attrString(llvm::StringRef name,
                            llvm::StringRef defaultValue) {
    return attr(name, Attribute::getString(defaultValue.str()));
  }
  /// An optional attribute without a default.
  SchemaBuilder &optionalAttr(llvm::StringRef name, Attribute::Kind kind);
  /// A required attribute.
  SchemaBuilder &requiredAttr(llvm::StringRef name, Attribute::Kind kind);
  /// Accepts attributes the schema does not list (ONNX Runtime's
  /// AllowUncheckedAttributes).
  SchemaBuilder &allowUnknownAttributes();

  /// Sets the OpTrait bitmask.
  SchemaBuilder &traits(uint32_t traits);
  /// Result \p result may reuse the buffer of operand \p operand (-1:
  /// never).
  SchemaBuilder &inPlace(int operand, unsigned result = 0);
  /// A side-effecting op writes operand \p operand's storage in place.
  SchemaBuilder &writes(int operand);
  /// A side-effecting op writes the operands \p fn computes per node.
  SchemaBuilder &writesOperands(WrittenOperandsFn fn);
  /// Sets the mixed-precision class.
  SchemaBuilder &amp(AmpClass amp);
  /// Only the operands \p operands follow the AMP precision (see
  /// OpSchema::ampOperands).
  SchemaBuilder &ampOperands(std::initializer_list<unsigned> operands);
  /// Sets the type inference function (required before registration).
  SchemaBuilder &infer(InferenceFn fn);
  /// Sets the cost model (default: one flop per result element).
  SchemaBuilder &cost(CostFn fn);

  /// Registers a copy of the schema under its current since-version.
  void add(OpRegistry &registry) const;
  /// Registers a copy of the schema under \p sinceVersion.
  void addAt(OpRegistry &registry, int64_t sinceVersion) const;

private:
  OpSchema schema;
};

//===----------------------------------------------------------------------===//
// Common inference functions
//===----------------------------------------------------------------------===//

/// Result 0 gets the type of input \p input.
InferenceFn inferSameAs(unsigned input);

/// All present inputs must share a dtype; result 0 is their broadcast, with
/// dtype \p resultType (or the inputs' dtype when nullopt).
InferenceFn inferBroadcast(std::optional<DType> resultType = std::nullopt);

/// The dtypes of an operand that must be int64 (shapes, pads, repeats).
inline constexpr DType kInt64Only[] = {DType::I64};

/// A ranked type of \p rank unknown dims.
inline TensorType unknownDims(DType dtype, unsigned rank) {
  return TensorType(dtype, DimVector(rank, Dim::unknown()));
}

/// Sets result \p output (if the node has it) to \p type.
inline void setOutput(InferenceContext &ctx, unsigned output, TensorType type) {
  if (output < ctx.getNumOutputs())
    ctx.setOutputType(output, std::move(type));
}

/// Dtype of input \p index, or Undefined when absent.
DType inputDType(const InferenceContext &ctx, unsigned index);

/// Tracked elements of input \p index (see getShapeValue), or nullopt.
std::optional<SymIntVector> shapeValueInput(const InferenceContext &ctx,
                                            unsigned index);

/// Known integer contents of input \p index, or nullopt.
std::optional<std::vector<int64_t>> intValuesInput(const InferenceContext &ctx,
                                                   unsigned index);

/// A reduction (ReduceSum & co.) whose axes come from the `axes` attribute
/// or, when \p axesFromInput, from optional input 1; honours keepdims and
/// noop_with_empty_axes.
InferenceFn inferReduce(bool axesFromInput);

/// Concat along the `axis` attribute of every input into result 0 (ranks and
/// the other dimensions must agree).
llvm::Error inferConcatResult(InferenceContext &ctx);

/// The classification losses' result 0: scores/input [N, C, d...] against
/// labels/target [N, d...] (input 1) and optional class weights [C]
/// (input 2); labels' shape for reduction "none", a scalar otherwise.
llvm::Error inferClassificationLoss(InferenceContext &ctx, DType dtype);

/// Element count of a 1-D input whose length is static (and small enough
/// to be a rank), or nullopt.
std::optional<int64_t> staticLength(const InferenceContext &ctx,
                                    unsigned index);

//===----------------------------------------------------------------------===//
// Common cost models
//===----------------------------------------------------------------------===//

/// Bytes read (present operands) and written (present results) of a node
/// with static types; non-static tensors count 0.
OpCost memoryTraffic(const Node &node);

/// \p flopsPerElement flops per element of result 0, plus memoryTraffic.
CostFn costPerOutputElement(uint64_t flopsPerElement);

/// \p flopsPerElement flops per element of operand 0, plus memoryTraffic.
CostFn costPerInputElement(uint64_t flopsPerElement);

/// Flops of a convolution producing \p y with weights \p w:
/// 2 * |Y| * (C/group) * prod(kernel); 0 unless both are static.
uint64_t convFlops(const TensorType &y, const TensorType &w);

/// No work and no traffic: views and ops that only describe shapes.
CostFn zeroCost();

//===----------------------------------------------------------------------===//
// Registration hooks of the op families (one per file in ir/ops/)
//===----------------------------------------------------------------------===//

void registerElementwiseOps(OpRegistry &registry);
void registerTensorOps(OpRegistry &registry);
void registerIndexingOps(OpRegistry &registry);
void registerConstantOps(OpRegistry &registry);
void registerReductionOps(OpRegistry &registry);
void registerLinalgOps(OpRegistry &registry);
void registerNnOps(OpRegistry &registry);
/// Resize and ONNX Runtime's ResizeGrad (ir/ops/ResizeOps.cpp).
void registerResizeOps(OpRegistry &registry);
void registerMicrosoftLinalgOps(OpRegistry &registry);
void registerMicrosoftTrainingOps(OpRegistry &registry);
/// gmopt's own collectives (ir/ops/CollectiveOps.cpp).
void registerCollectiveOps(OpRegistry &registry);
/// gmopt.FusedAttention and its gradient (ir/ops/AttentionOps.cpp).
void registerAttentionOps(OpRegistry &registry);
/// gmopt.FusedLinearCrossEntropy and its gradient
/// (ir/ops/CrossEntropyOps.cpp).
void registerCrossEntropyOps(OpRegistry &registry);
/// gmopt's host<->device copies (ir/ops/CopyOps.cpp).
void registerCopyOps(OpRegistry &registry);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_OPDEFS_H
