//===- ConstantOps.cpp - ai.onnx shape and constant operator schemas ------===//
//
// The ops that compute shapes or constants rather than move data: Shape
// (with its start/end slice from opset 15), Size, Constant (every value
// attribute), ConstantOfShape, Range, OneHot and NonZero. Their results feed
// the shape-value analysis, so a result that depends only on static
// operands gets a static shape.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

//===----------------------------------------------------------------------===//
// Shapes and constants
//===----------------------------------------------------------------------===//

/// Shape: one i64 per dimension of ops::getShapeSlice (Shape-1 has no
/// start/end, so its slice is every dimension).
llvm::Error inferShape(InferenceContext &ctx) {
  const TensorType &data = ctx.getInputType(0);
  if (!data.hasRank()) {
    setOutput(ctx, 0, TensorType(DType::I64, {Dim::unknown()}));
    return llvm::Error::success();
  }
  ShapeSlice slice = getShapeSlice(ctx.getNode(), data.getRank());
  setOutput(ctx, 0, TensorType::get(DType::I64, {slice.size()}));
  return llvm::Error::success();
}

llvm::Error inferConstant(InferenceContext &ctx) {
  const Node &node = ctx.getNode();
  std::optional<TensorType> type;
  unsigned numValues = 0;
  for (const NamedAttribute &attr : node.getAttrs()) {
    const Attribute &a = attr.value;
    std::optional<TensorType> candidate;
    if (attr.name == "value")
      candidate = a.getTensor().getType();
    else if (attr.name == "value_float")
      candidate = TensorType::get(DType::F32, {});
    else if (attr.name == "value_floats")
      candidate = TensorType::get(DType::F32, {(int64_t)a.getFloats().size()});
    else if (attr.name == "value_int")
      candidate = TensorType::get(DType::I64, {});
    else if (attr.name == "value_ints")
      candidate = TensorType::get(DType::I64, {(int64_t)a.getInts().size()});
    else if (attr.name == "value_string")
      candidate = TensorType::get(DType::String, {});
    else if (attr.name == "value_strings")
      candidate =
          TensorType::get(DType::String, {(int64_t)a.getStrings().size()});
    if (!candidate)
      continue;
    ++numValues;
    type = candidate;
  }
  if (numValues != 1)
    return ctx.error(llvm::formatv("exactly one value attribute must be set, "
                                   "found {0}",
                                   numValues));
  setOutput(ctx, 0, *type);
  return llvm::Error::success();
}

llvm::Error inferConstantOfShape(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 0, kInt64Only, "shape"))
    return err;
  DType dtype = DType::F32;
  if (const Attribute *value = ctx.getAttr("value")) {
    const TensorData &data = value->getTensor();
    if (data.getType().hasStaticShape() && data.getNumElements() != 1)
      return ctx.error("value must hold exactly one element");
    dtype = data.getType().getDType();
  }
  std::optional<SymIntVector> shape = shapeValueInput(ctx, 0);
  if (!shape) {
    if (std::optional<int64_t> length = staticLength(ctx, 0))
      setOutput(ctx, 0, unknownDims(dtype, *length));
    else
      setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  DimVector dims;
  for (const SymInt &element : *shape) {
    if (element.isConstant() && element.getValue() < 0)
      return ctx.error(
          llvm::formatv("invalid shape element {0}", element.getValue()));
    dims.push_back(element.toDim());
  }
  setOutput(ctx, 0, TensorType(dtype, dims));
  return llvm::Error::success();
}

/// Reads element 0 of a constant numeric scalar as double.
std::optional<double> scalarConstant(const InferenceContext &ctx,
                                     unsigned index) {
  const TensorData *data = ctx.getConstantInput(index);
  if (!data || !data->getType().hasStaticShape() || data->getNumElements() != 1)
    return std::nullopt;
  DType dtype = data->getType().getDType();
  if (data->getBytes().size() < dtypeStorageBytes(dtype, 1))
    return std::nullopt;
  if (isInteger(dtype))
    return static_cast<double>(data->getIntElement(0));
  if (isFloatingPoint(dtype))
    return data->getFloatElement(0);
  return std::nullopt;
}

llvm::Error inferRange(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  for (unsigned i = 0; i != 3; ++i) {
    const TensorType &type = ctx.getInputType(i);
    if (type.hasStaticShape() && type.getNumElements() != 1)
      return ctx.error(
          llvm::formatv("input {0} must be a scalar, got {1}", i, type.str()));
  }
  std::optional<double> start = scalarConstant(ctx, 0);
  std::optional<double> limit = scalarConstant(ctx, 1);
  std::optional<double> delta = scalarConstant(ctx, 2);
  if (!start || !limit || !delta) {
    setOutput(ctx, 0, TensorType(*dtype, {Dim::unknown()}));
    return llvm::Error::success();
  }
  if (*delta == 0)
    return ctx.error("delta must not be 0");
  double count = std::ceil((*limit - *start) / *delta);
  // NaN or absurd counts are not a shape we can state.
  if (!(count < 9.0e18)) {
    setOutput(ctx, 0, TensorType(*dtype, {Dim::unknown()}));
    return llvm::Error::success();
  }
  setOutput(ctx, 0,
            TensorType::get(*dtype, {std::max<int64_t>(0, (int64_t)count)}));
  return llvm::Error::success();
}

llvm::Error inferOneHot(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1,
                              {DType::I32, DType::I64, DType::F32, DType::F64,
                               DType::F16, DType::I8, DType::U8, DType::U32,
                               DType::U64, DType::I16, DType::U16},
                              "depth"))
    return err;
  const TensorType &indices = ctx.getInputType(0);
  DType dtype = inputDType(ctx, 2);
  const TensorType &values = ctx.getInputType(2);
  if (values.hasStaticShape() && values.getNumElements() != 2)
    return ctx.error("values must hold exactly two elements, got " +
                     values.str());
  if (!indices.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  int64_t outRank = indices.getRank() + 1;
  auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", -1), outRank);
  if (!axis)
    return axis.takeError();
  Dim depthDim = Dim::unknown();
  if (std::optional<double> depth = scalarConstant(ctx, 1)) {
    if (!(*depth >= 1 && *depth < 9.0e18))
      return ctx.error("depth must be a positive count");
    depthDim = Dim::fixed(static_cast<int64_t>(*depth));
  }
  DimVector out(indices.getDims().begin(), indices.getDims().end());
  out.insert(out.begin() + *axis, depthDim);
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

void registerShapeAndConstants(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Shape", 1)
      .inputs(1)
      .outputs(1)
      .traits(TraitShapeOnly)
      .amp(AmpClass::None)
      .infer(inferShape)
      .cost(zeroCost())
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Shape", 15)
      .inputs(1)
      .outputs(1)
      .attrInt("start", 0)
      .optionalAttr("end", Attribute::Kind::Int)
      .traits(TraitShapeOnly)
      .amp(AmpClass::None)
      .infer(inferShape)
      .cost(zeroCost())
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Size", 1)
      .inputs(1)
      .outputs(1)
      .traits(TraitShapeOnly)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        setOutput(ctx, 0, TensorType::get(DType::I64, {}));
        return llvm::Error::success();
      })
      .cost(zeroCost())
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Constant", 1)
      .inputs(0)
      .outputs(1)
      .optionalAttr("value", Attribute::Kind::Tensor)
      .optionalAttr("value_float", Attribute::Kind::Float)
      .optionalAttr("value_floats", Attribute::Kind::Floats)
      .optionalAttr("value_int", Attribute::Kind::Int)
      .optionalAttr("value_ints", Attribute::Kind::Ints)
      .optionalAttr("value_string", Attribute::Kind::String)
      .optionalAttr("value_strings", Attribute::Kind::Strings)
      .amp(AmpClass::None)
      .infer(inferConstant)
      .cost(zeroCost())
      .add(registry);

  SchemaBuilder(kOnnxDomain, "ConstantOfShape", 9)
      .inputs(1)
      .outputs(1)
      .optionalAttr("value", Attribute::Kind::Tensor)
      .amp(AmpClass::None)
      .infer(inferConstantOfShape)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "Range", 11)
      .inputs(3)
      .outputs(1)
      .amp(AmpClass::None)
      .infer(inferRange)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "OneHot", 11)
      .inputs(3)
      .outputs(1)
      .attrInt("axis", -1)
      .amp(AmpClass::None)
      .infer(inferOneHot)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "NonZero", 9)
      .inputs(1)
      .outputs(1)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        const TensorType &data = ctx.getInputType(0);
        Dim rank = data.hasRank() ? Dim::fixed(data.getRank()) : Dim::unknown();
        setOutput(ctx, 0, TensorType(DType::I64, {rank, Dim::unknown()}));
        return llvm::Error::success();
      })
      .add(registry);
}

} // namespace

void ops::registerConstantOps(OpRegistry &registry) {
  registerShapeAndConstants(registry);
}
