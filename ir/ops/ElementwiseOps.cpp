//===- ElementwiseOps.cpp - ai.onnx elementwise operator schemas ----------===//
//
// Unary math and activations, binary arithmetic with numpy broadcasting,
// comparisons and logic (bool results), variadic Sum/Mean/Min/Max, Where,
// Clip and the casts. Every op here is TraitElementwise; arithmetic and
// activations may write their result into operand 0 when it dies there.
// Since-versions are the ones in force at opset 13 (or the op's
// introduction when later); later versions that only widened type lists
// share the schema.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"

#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

SchemaBuilder unaryOp(llvm::StringRef name, int64_t since, AmpClass amp) {
  SchemaBuilder builder(kOnnxDomain, name, since);
  builder.inputs(1)
      .outputs(1)
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(amp)
      .infer(inferSameAs(0));
  return builder;
}

SchemaBuilder binaryOp(llvm::StringRef name, int64_t since, AmpClass amp,
                       uint32_t extraTraits = TraitNone) {
  SchemaBuilder builder(kOnnxDomain, name, since);
  builder.inputs(2)
      .outputs(1)
      .traits(TraitElementwise | extraTraits)
      .inPlace(0)
      .amp(amp)
      .infer(inferBroadcast());
  return builder;
}

/// Inputs with bool elements only (logical ops).
InferenceFn inferLogical(unsigned numInputs) {
  InferenceFn broadcast = inferBroadcast(DType::Bool);
  return [numInputs, broadcast](InferenceContext &ctx) -> llvm::Error {
    static const DType boolOnly[] = {DType::Bool};
    for (unsigned i = 0; i != numInputs; ++i)
      if (auto err = checkDTypeIn(ctx, i, boolOnly, "logical operand"))
        return err;
    return broadcast(ctx);
  };
}

llvm::Error inferWhere(InferenceContext &ctx) {
  static const DType boolOnly[] = {DType::Bool};
  if (auto err = checkDTypeIn(ctx, 0, boolOnly, "condition"))
    return err;
  auto dtype = checkSameDType(ctx, {1, 2});
  if (!dtype)
    return dtype.takeError();
  auto shape = broadcastInputs(ctx, {0, 1, 2});
  if (!shape)
    return shape.takeError();
  setOutput(ctx, 0, makeType(*dtype, *shape));
  return llvm::Error::success();
}

llvm::Error inferPow(InferenceContext &ctx) {
  // The exponent may have another numeric type than the base.
  auto shape = broadcastInputs(ctx, {0, 1});
  if (!shape)
    return shape.takeError();
  setOutput(ctx, 0, makeType(inputDType(ctx, 0), *shape));
  return llvm::Error::success();
}

llvm::Error inferPRelu(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1});
  if (!dtype)
    return dtype.takeError();
  // The slope broadcasts unidirectionally to X.
  auto shape = broadcastInputs(ctx, {0, 1});
  if (!shape)
    return shape.takeError();
  const TensorType &x = ctx.getInputType(0);
  if (*shape && x.hasRank() && (*shape)->size() != x.getRank())
    return ctx.error("slope " + ctx.getInputType(1).str() +
                     " does not broadcast to X " + x.str());
  setOutput(ctx, 0, makeType(*dtype, *shape));
  return llvm::Error::success();
}

llvm::Error inferClip(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  for (unsigned i : {1u, 2u}) {
    if (!ctx.hasInput(i))
      continue;
    const TensorType &bound = ctx.getInputType(i);
    if (bound.hasStaticShape() && bound.getNumElements() != 1)
      return ctx.error(llvm::formatv("input {0} ({1}) must be a scalar, got "
                                     "{2}",
                                     i, i == 1 ? "min" : "max", bound.str()));
  }
  setOutput(ctx, 0, ctx.getInputType(0));
  return llvm::Error::success();
}

llvm::Expected<DType> readCastTarget(const InferenceContext &ctx,
                                     llvm::StringRef attrName) {
  int64_t to = ctx.getIntAttr(attrName, 0);
  std::optional<DType> dtype = dtypeFromOnnx(to);
  if (!dtype || *dtype == DType::Undefined)
    return ctx.error(llvm::formatv("attribute '{0}' = {1} is not a valid "
                                   "element type",
                                   attrName, to));
  return *dtype;
}

llvm::Error inferCast(InferenceContext &ctx) {
  auto dtype = readCastTarget(ctx, "to");
  if (!dtype)
    return dtype.takeError();
  TensorType type = ctx.getInputType(0);
  type.setDType(*dtype);
  setOutput(ctx, 0, std::move(type));
  return llvm::Error::success();
}

llvm::Error inferCastLike(InferenceContext &ctx) {
  TensorType type = ctx.getInputType(0);
  type.setDType(ctx.getInputType(1).getDType());
  setOutput(ctx, 0, std::move(type));
  return llvm::Error::success();
}

llvm::Error inferIsNaNLike(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 0, floatDTypes(), "X"))
    return err;
  TensorType type = ctx.getInputType(0);
  type.setDType(DType::Bool);
  setOutput(ctx, 0, std::move(type));
  return llvm::Error::success();
}

void registerUnaryMath(OpRegistry &registry) {
  // Deny: torch.autocast runs these in fp32 (range or precision loss).
  for (const char *name : {"Sqrt", "Exp", "Log", "Reciprocal"})
    unaryOp(name, 6, AmpClass::Deny).add(registry);
  for (const char *name :
       {"Neg", "Abs", "Floor", "Ceil", "Relu", "Sigmoid", "Tanh"})
    unaryOp(name, 6, AmpClass::Follow).add(registry);
  for (const char *name : {"Cos", "Sin", "Tan", "Acos", "Asin", "Atan"})
    unaryOp(name, 7, AmpClass::Follow).add(registry);
  for (const char *name :
       {"Erf", "Sign", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"})
    unaryOp(name, 9, AmpClass::Follow).add(registry);
  unaryOp("Round", 11, AmpClass::Follow).add(registry);
  unaryOp("Softplus", 1, AmpClass::Deny).add(registry);
  unaryOp("Softsign", 1, AmpClass::Follow).add(registry);

  unaryOp("LeakyRelu", 6, AmpClass::Follow)
      .attrFloat("alpha", 0.01f)
      .add(registry);
  unaryOp("Elu", 6, AmpClass::Follow).attrFloat("alpha", 1.0f).add(registry);
  unaryOp("Selu", 6, AmpClass::Follow)
      .attrFloat("alpha", 1.67326319217681884765625f)
      .attrFloat("gamma", 1.05070102214813232421875f)
      .add(registry);
  unaryOp("HardSigmoid", 6, AmpClass::Follow)
      .attrFloat("alpha", 0.2f)
      .attrFloat("beta", 0.5f)
      .add(registry);
  unaryOp("ThresholdedRelu", 10, AmpClass::Follow)
      .attrFloat("alpha", 1.0f)
      .add(registry);
  unaryOp("Celu", 12, AmpClass::Follow).attrFloat("alpha", 1.0f).add(registry);
  unaryOp("HardSwish", 14, AmpClass::Follow).add(registry);
  unaryOp("Mish", 18, AmpClass::Follow).add(registry);
  unaryOp("Gelu", 20, AmpClass::Follow)
      .attrString("approximate", "none")
      .add(registry);

  SchemaBuilder(kOnnxDomain, "IsNaN", 9)
      .inputs(1)
      .outputs(1)
      .traits(TraitElementwise)
      .amp(AmpClass::None)
      .infer(inferIsNaNLike)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "IsInf", 10)
      .inputs(1)
      .outputs(1)
      .attrInt("detect_negative", 1)
      .attrInt("detect_positive", 1)
      .traits(TraitElementwise)
      .amp(AmpClass::None)
      .infer(inferIsNaNLike)
      .add(registry);
}

void registerBinaryMath(OpRegistry &registry) {
  binaryOp("Add", 7, AmpClass::Follow, TraitCommutative).add(registry);
  binaryOp("Mul", 7, AmpClass::Follow, TraitCommutative).add(registry);
  binaryOp("Sub", 7, AmpClass::Follow).add(registry);
  binaryOp("Div", 7, AmpClass::Follow).add(registry);
  binaryOp("Mod", 10, AmpClass::Follow).attrInt("fmod", 0).add(registry);
  binaryOp("Pow", 7, AmpClass::Deny).infer(inferPow).add(registry);
  binaryOp("PRelu", 9, AmpClass::Follow).infer(inferPRelu).add(registry);

  for (const char *name : {"Less", "Greater"})
    binaryOp(name, 7, AmpClass::None)
        .inPlace(-1)
        .infer(inferBroadcast(DType::Bool))
        .add(registry);
  binaryOp("Equal", 7, AmpClass::None, TraitCommutative)
      .inPlace(-1)
      .infer(inferBroadcast(DType::Bool))
      .add(registry);
  for (const char *name : {"LessOrEqual", "GreaterOrEqual"})
    binaryOp(name, 12, AmpClass::None)
        .inPlace(-1)
        .infer(inferBroadcast(DType::Bool))
        .add(registry);

  for (const char *name : {"And", "Or", "Xor"})
    binaryOp(name, 7, AmpClass::None, TraitCommutative)
        .infer(inferLogical(2))
        .add(registry);
  unaryOp("Not", 1, AmpClass::None).infer(inferLogical(1)).add(registry);

  // Variadic broadcasting ops.
  for (const char *name : {"Sum", "Mean", "Min", "Max"})
    SchemaBuilder(kOnnxDomain, name, 8)
        .inputs(1, kVariadic)
        .outputs(1)
        .traits(TraitElementwise | TraitCommutative)
        .inPlace(0)
        .amp(AmpClass::Follow)
        .infer(inferBroadcast())
        .cost([](const Node &node) {
          // One op per output element for each input after the first.
          OpCost cost = memoryTraffic(node);
          unsigned numInputs = node.getNumOperands();
          if (node.getResult(0))
            cost.flops = staticElements(node.getResult(0)->getType()) *
                         (numInputs > 1 ? numInputs - 1 : 1);
          return cost;
        })
        .add(registry);
}

void registerSelectionAndCasts(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Where", 9)
      .inputs(3)
      .outputs(1)
      .traits(TraitElementwise)
      .amp(AmpClass::Follow)
      .infer(inferWhere)
      .add(registry);

  // Clip-6 takes its bounds as attributes, Clip-11+ as optional inputs.
  SchemaBuilder(kOnnxDomain, "Clip", 6)
      .inputs(1)
      .outputs(1)
      .attrFloat("min", -std::numeric_limits<float>::max())
      .attrFloat("max", std::numeric_limits<float>::max())
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .infer(inferSameAs(0))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Clip", 11)
      .inputs(1, 3)
      .outputs(1)
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .infer(inferClip)
      .add(registry);

  SchemaBuilder cast(kOnnxDomain, "Cast", 6);
  cast.inputs(1)
      .outputs(1)
      .requiredAttr("to", Attribute::Kind::Int)
      .traits(TraitElementwise)
      .amp(AmpClass::None)
      .infer(inferCast);
  cast.add(registry);
  cast.attrInt("saturate", 1).addAt(registry, 19);

  SchemaBuilder castLike(kOnnxDomain, "CastLike", 15);
  castLike.inputs(2)
      .outputs(1)
      .traits(TraitElementwise)
      .amp(AmpClass::None)
      .infer(inferCastLike);
  castLike.add(registry);
  castLike.attrInt("saturate", 1).addAt(registry, 19);
}

} // namespace

void ops::registerElementwiseOps(OpRegistry &registry) {
  registerUnaryMath(registry);
  registerBinaryMath(registry);
  registerSelectionAndCasts(registry);
}
