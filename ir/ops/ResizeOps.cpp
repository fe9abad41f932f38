//===- ResizeOps.cpp - Resize and ResizeGrad schemas ----------------------===//
//
// ai.onnx Resize at opsets 10 (X, scales), 11 and 13 (X, roi, scales,
// sizes), 18 (antialias, axes, keep_aspect_ratio_policy) and 19
// (half_pixel_symmetric), and ONNX Runtime's com.microsoft ResizeGrad(dY, X,
// roi?, scales?) -> dX, the adjoint gmopt's gradient rule emits (ONNX Runtime
// has a CUDA kernel for it, for 4-D linear resizes). The output shape comes
// from constant scales (initializers or Constant nodes) or from sizes traced
// through shape computations; a Resize whose output shape cannot be known at
// compile time is an error, since every buffer is planned ahead.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"
#include "ir/ops/ResizeParams.h"

#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

const DType kFloat32Only[] = {DType::F32};

/// The known elements of float operand \p index (see resize::traceFloatValues),
/// or nullopt when it is absent or not known.
std::optional<std::vector<double>> constantFloats(const InferenceContext &ctx,
                                                  int index) {
  if (index < 0 || unsigned(index) >= ctx.getNumInputs() ||
      !ctx.hasInput(unsigned(index)))
    return std::nullopt;
  if (const TensorData *data = ctx.getConstantInput(unsigned(index))) {
    if (!data->hasFoldableBytes())
      return std::nullopt;
    std::vector<double> values;
    for (uint64_t i = 0, e = data->getNumElements(); i != e; ++i)
      values.push_back(data->getFloatElement(i));
    return values;
  }
  return resize::traceFloatValues(*ctx.getNode().getOperand(unsigned(index)));
}

/// True when operand \p index is present and not a provably empty tensor.
bool presentNonEmpty(const InferenceContext &ctx, int index) {
  if (index < 0 || unsigned(index) >= ctx.getNumInputs() ||
      !ctx.hasInput(unsigned(index)))
    return false;
  const TensorType &type = ctx.getInputType(unsigned(index));
  return !(type.hasStaticShape() && type.getNumElements() == 0);
}

llvm::Error inferResize(InferenceContext &ctx) {
  const Node &node = ctx.getNode();
  resize::ResizeOperands operands = resize::getResizeOperands(node);
  auto attrs = resize::readResizeAttrs(node);
  if (!attrs)
    return ctx.error(llvm::toString(attrs.takeError()));
  if (operands.scales >= 0)
    if (auto err = checkDTypeIn(ctx, operands.scales, kFloat32Only, "scales"))
      return err;
  if (operands.sizes >= 0)
    if (auto err = checkDTypeIn(ctx, operands.sizes, kInt64Only, "sizes"))
      return err;
  if (operands.roi >= 0)
    if (auto err = checkDTypeIn(ctx, operands.roi, floatDTypes(), "roi"))
      return err;

  const TensorType &x = ctx.getInputType(operands.x);
  DType dtype = x.getDType();
  if (!x.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(dtype));
    return llvm::Error::success();
  }
  int64_t rank = x.getRank();
  auto axes = resize::resizedAxes(*attrs, rank);
  if (!axes)
    return ctx.error(llvm::toString(axes.takeError()));

  bool hasScales = presentNonEmpty(ctx, operands.scales);
  bool hasSizes = presentNonEmpty(ctx, operands.sizes);
  if (hasScales && hasSizes)
    return ctx.error("only one of 'scales' and 'sizes' may be given");
  if (!hasScales && !hasSizes)
    return ctx.error("one of 'scales' and 'sizes' must be given");

  DimVector out(x.getDims().begin(), x.getDims().end());
  if (hasScales) {
    std::optional<std::vector<double>> scales =
        constantFloats(ctx, operands.scales);
    if (!scales)
      return ctx.error("the output shape cannot be known at compile time: "
                       "'scales' is not a constant (an initializer, a "
                       "Constant node or a Concat of them)");
    if (scales->size() != axes->size())
      return ctx.error(llvm::formatv("'scales' has {0} values for {1} "
                                     "resized axes",
                                     scales->size(), axes->size()));
    for (size_t i = 0; i != axes->size(); ++i) {
      double scale = (*scales)[i];
      if (!(scale > 0) || !std::isfinite(scale))
        return ctx.error(llvm::formatv("scale {0} is not positive", scale));
      const Dim &dim = x.getDim((*axes)[i]);
      if (dim.isStatic()) {
        double extent = std::floor(scale * double(dim.getExtent()));
        if (extent > double(int64_t(1) << 52))
          return ctx.error("scales give an output extent beyond int64");
        out[(*axes)[i]] = Dim::fixed(static_cast<int64_t>(extent));
      } else if (scale != 1.0) {
        out[(*axes)[i]] = Dim::unknown();
      }
    }
    setOutput(ctx, 0, TensorType(dtype, out));
    return llvm::Error::success();
  }

  std::optional<SymIntVector> sizes = shapeValueInput(ctx, operands.sizes);
  if (!sizes)
    return ctx.error("the output shape cannot be known at compile time: "
                     "'sizes' is neither a constant nor a shape computation "
                     "gmopt can follow");
  if (sizes->size() != axes->size())
    return ctx.error(llvm::formatv("'sizes' has {0} values for {1} resized "
                                   "axes",
                                   sizes->size(), axes->size()));
  for (const SymInt &size : *sizes)
    if (size.isConstant() && size.getValue() < 0)
      return ctx.error(llvm::formatv("size {0} is negative", size.getValue()));
  if (attrs->aspectPolicy == resize::AspectPolicy::Stretch) {
    for (size_t i = 0; i != axes->size(); ++i)
      out[(*axes)[i]] = (*sizes)[i].toDim();
    setOutput(ctx, 0, TensorType(dtype, out));
    return llvm::Error::success();
  }
  // keep_aspect_ratio_policy rounds a common ratio: only known when the
  // sizes and the resized input extents are.
  std::vector<int64_t> inShape, sizeValues;
  bool known = true;
  for (size_t i = 0; i != axes->size(); ++i)
    if (!(*sizes)[i].isConstant())
      known = false;
    else
      sizeValues.push_back((*sizes)[i].getValue());
  for (int64_t i = 0; i < rank; ++i) {
    const Dim &dim = x.getDim(i);
    bool resized = llvm::is_contained(*axes, unsigned(i));
    if (resized && !dim.isStatic())
      known = false;
    inShape.push_back(dim.isStatic() ? dim.getExtent() : 1);
  }
  if (!known) {
    for (unsigned axis : *axes)
      out[axis] = Dim::unknown();
    setOutput(ctx, 0, TensorType(dtype, out));
    return llvm::Error::success();
  }
  auto geometry =
      resize::resolveResizeGeometry(*attrs, inShape, {}, sizeValues);
  if (!geometry)
    return ctx.error(llvm::toString(geometry.takeError()));
  for (unsigned axis : *axes)
    out[axis] = Dim::fixed(geometry->outShape[axis]);
  setOutput(ctx, 0, TensorType(dtype, out));
  return llvm::Error::success();
}

/// ResizeGrad(dY, X, roi?, scales?) -> dX of X's type.
llvm::Error inferResizeGrad(InferenceContext &ctx) {
  auto attrs = resize::readResizeAttrs(ctx.getNode());
  if (!attrs)
    return ctx.error(llvm::toString(attrs.takeError()));
  auto dtype = checkSameDType(ctx, {0, 1});
  if (!dtype)
    return dtype.takeError();
  if (auto err = checkDTypeIn(ctx, 3, kFloat32Only, "scales"))
    return err;
  const TensorType &dY = ctx.getInputType(0), &x = ctx.getInputType(1);
  if (dY.hasRank() && x.hasRank() && dY.getRank() != x.getRank())
    return ctx.error(llvm::formatv("dY has rank {0} but X has rank {1}",
                                   dY.getRank(), x.getRank()));
  setOutput(ctx, 0, x);
  return llvm::Error::success();
}

/// Interpolation taps per output element: 1 (nearest), 2 (linear) or 4
/// (cubic) along every axis whose extent changes.
uint64_t tapsPerElement(const Node &node, const TensorType &small,
                        const TensorType &large) {
  auto attrs = resize::readResizeAttrs(node);
  if (!attrs) {
    llvm::consumeError(attrs.takeError());
    return 1;
  }
  uint64_t perAxis = attrs->mode == resize::Mode::Nearest  ? 1
                     : attrs->mode == resize::Mode::Linear ? 2
                                                           : 4;
  uint64_t taps = 1;
  if (!small.hasStaticShape() || !large.hasStaticShape() ||
      small.getRank() != large.getRank())
    return taps;
  for (unsigned i = 0, e = small.getRank(); i != e; ++i)
    if (small.getDim(i).getExtent() != large.getDim(i).getExtent())
      taps *= perAxis;
  return taps;
}

/// One multiply-add per tap per element of the resized tensor (Y for
/// Resize, dY for ResizeGrad), plus the traffic.
OpCost resizeCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  resize::ResizeOperands operands = resize::getResizeOperands(node);
  const Value *x = node.getOperand(operands.x);
  const Value *y =
      operands.dY >= 0 ? node.getOperand(operands.dY) : node.getResult(0);
  if (!x || !y)
    return cost;
  cost.flops = 2 * tapsPerElement(node, x->getType(), y->getType()) *
               staticElements(y->getType());
  return cost;
}

/// The attributes of Resize at \p opset with their defaults.
SchemaBuilder resizeSchema(int64_t opset) {
  SchemaBuilder schema(kOnnxDomain, "Resize", opset);
  schema.outputs(1)
      .attrString("mode", "nearest")
      .amp(AmpClass::Follow)
      .ampOperands({0})
      .infer(inferResize)
      .cost(resizeCost);
  if (opset < 11) {
    schema.inputs(2);
    return schema;
  }
  schema.inputs(1, 4)
      .attrString("coordinate_transformation_mode", "half_pixel")
      .attrFloat("cubic_coeff_a", -0.75f)
      .attrInt("exclude_outside", 0)
      .attrFloat("extrapolation_value", 0.0f)
      .attrString("nearest_mode", "round_prefer_floor");
  if (opset >= 18)
    schema.attrInt("antialias", 0)
        .optionalAttr("axes", Attribute::Kind::Ints)
        .attrString("keep_aspect_ratio_policy", "stretch");
  return schema;
}

} // namespace

void ops::registerResizeOps(OpRegistry &registry) {
  for (int64_t opset : {10, 11, 13, 18, 19})
    resizeSchema(opset).add(registry);
  // ONNX Runtime's schema allows unchecked attributes: its gradient builder
  // copies the forward node's.
  SchemaBuilder(kMsDomain, "ResizeGrad", 1)
      .inputs(2, 4)
      .outputs(1)
      .attrString("mode", "nearest")
      .attrString("coordinate_transformation_mode", "half_pixel")
      .attrFloat("cubic_coeff_a", -0.75f)
      .attrInt("exclude_outside", 0)
      .attrFloat("extrapolation_value", 0.0f)
      .attrString("nearest_mode", "round_prefer_floor")
      .attrInt("antialias", 0)
      .optionalAttr("axes", Attribute::Kind::Ints)
      .attrString("keep_aspect_ratio_policy", "stretch")
      .allowUnknownAttributes()
      .amp(AmpClass::Follow)
      .ampOperands({0, 1})
      .infer(inferResizeGrad)
      .cost(resizeCost)
      .add(registry);
}
