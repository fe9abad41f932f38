//===- ResizePlan.cpp - The CUDA kernel parameters of a Resize ------------===//
//
// Reads a Resize or ResizeGrad node as the CPU kernel's makePlan does
// (backend/cpu/ResizeKernels.cpp) - attributes, roi (tf_crop_and_resize
// only), the scales or sizes geometry, ResizeGrad's scales or the shape
// ratio - from constant operands, and packs the result for the device.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/ResizePlan.h"

#include "ir/IR.h"
#include "ir/ops/ResizeParams.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::resize;

namespace {

llvm::Error planError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "CUDA kernel for '" + node.getOp().str() +
                                     "': " + message + " (node " +
                                     node.describe() + ")");
}

/// Operand \p index of \p node, or null when the opset has no such operand
/// or the node leaves it out.
const Value *operandAt(const Node &node, int index) {
  if (index < 0 || unsigned(index) >= node.getNumOperands())
    return nullptr;
  return node.getOperand(unsigned(index));
}

/// The static shape of \p value, or an error naming \p what.
llvm::Expected<std::vector<int64_t>>
staticShape(const Node &node, const Value *value, llvm::StringRef what) {
  if (!value)
    return planError(node, what + " is missing");
  if (!value->getType().hasStaticShape())
    return planError(node, "the shape of " + what + " must be static");
  llvm::SmallVector<int64_t, 4> shape = value->getType().getStaticShape();
  return std::vector<int64_t>(shape.begin(), shape.end());
}

/// True when \p value is absent or empty (the CPU kernel reads an empty
/// tensor as absent).
bool isAbsent(const Value *value) {
  return !value || (value->getType().hasStaticShape() &&
                    value->getType().getNumElements() == 0);
}

llvm::Error notConstant(const Node &node, llvm::StringRef what) {
  return planError(node, "'" + what +
                             "' must be a constant (an initializer, or what "
                             "shape inference can trace to constants: a "
                             "Concat, Cast or Identity of them) for the CUDA "
                             "kernels");
}

/// The values of float operand \p value (f32 or f64, as the CPU kernel
/// reads them), traced to constants as shape inference traces scales;
/// empty when absent.
llvm::Expected<std::vector<double>>
constantFloats(const Node &node, const Value *value, llvm::StringRef what) {
  if (isAbsent(value))
    return std::vector<double>();
  DType dtype = value->getType().getDType();
  if (dtype != DType::F32 && dtype != DType::F64)
    return planError(node, "'" + what + "' has element type " +
                               dtypeName(dtype) + " (f32 or f64)");
  if (value->isInitializer())
    if (llvm::Error err = value->getData().load())
      return err;
  std::optional<std::vector<double>> values = traceFloatValues(*value);
  if (!values)
    return notConstant(node, what);
  return *values;
}

/// The values of integer operand \p value, traced to constants and static
/// shapes as shape inference traces sizes; empty when absent.
llvm::Expected<std::vector<int64_t>>
constantInts(const Node &node, const Value *value, llvm::StringRef what) {
  if (isAbsent(value))
    return std::vector<int64_t>();
  DType dtype = value->getType().getDType();
  if (!isInteger(dtype))
    return planError(node, "'" + what + "' has element type " +
                               dtypeName(dtype) + " (an integer type)");
  if (value->isInitializer())
    if (llvm::Error err = value->getData().load())
      return err;
  std::optional<std::vector<int64_t>> values = ops::getIntValues(*value);
  if (!values)
    return notConstant(node, what);
  return *values;
}

} // namespace

llvm::Expected<ResizeParams> cuda::planResize(const Node &node) {
  auto attrs = readResizeAttrs(node);
  if (!attrs)
    return planError(node, llvm::toString(attrs.takeError()));
  bool grad = isResizeGrad(node);
  ResizeOperands operands = getResizeOperands(node);
  auto inShape = staticShape(node, operandAt(node, operands.x), "X");
  if (!inShape)
    return inShape.takeError();
  int64_t rank = static_cast<int64_t>(inShape->size());
  if (rank > kResizeMaxRank)
    return planError(node, llvm::formatv("X has rank {0}; the CUDA kernels "
                                         "take at most {1} axes",
                                         rank, kResizeMaxRank));

  auto scales =
      constantFloats(node, operandAt(node, operands.scales), "scales");
  if (!scales)
    return scales.takeError();
  // roi matters to tf_crop_and_resize only; elsewhere it is ignored.
  std::vector<double> roi;
  if (attrs->coordinateMode == CoordinateMode::TfCropAndResize) {
    auto values = constantFloats(node, operandAt(node, operands.roi), "roi");
    if (!values)
      return values.takeError();
    roi = std::move(*values);
  }
  auto regions = expandRoi(*attrs, rank, roi);
  if (!regions)
    return planError(node, llvm::toString(regions.takeError()));

  std::vector<int64_t> outShape;
  std::vector<double> axisScales;
  if (!grad) {
    auto sizes = constantInts(node, operandAt(node, operands.sizes), "sizes");
    if (!sizes)
      return sizes.takeError();
    auto geometry = resolveResizeGeometry(*attrs, *inShape, *scales, *sizes);
    if (!geometry)
      return planError(node, llvm::toString(geometry.takeError()));
    auto yShape = staticShape(node, node.getResult(0), "Y");
    if (!yShape)
      return yShape.takeError();
    if (*yShape != geometry->outShape)
      return planError(node, "the output's shape is not the one the scales "
                             "or sizes give");
    outShape = geometry->outShape;
    axisScales = geometry->scales;
  } else {
    auto dYShape = staticShape(node, operandAt(node, operands.dY), "dY");
    if (!dYShape)
      return dYShape.takeError();
    if (int64_t(dYShape->size()) != rank)
      return planError(node, llvm::formatv("dY has rank {0} but X has rank "
                                           "{1}",
                                           dYShape->size(), rank));
    auto dXShape = staticShape(node, node.getResult(0), "dX");
    if (!dXShape)
      return dXShape.takeError();
    if (*dXShape != *inShape)
      return planError(node, "dX must have the shape of X");
    outShape = *dYShape;
    axisScales.assign(rank, 1.0);
    auto axes = resizedAxes(*attrs, rank);
    if (!axes)
      return planError(node, llvm::toString(axes.takeError()));
    if (!scales->empty()) {
      if (scales->size() != axes->size())
        return planError(node, llvm::formatv("'scales' has {0} values for {1} "
                                             "resized axes",
                                             scales->size(), axes->size()));
      for (size_t i = 0; i != axes->size(); ++i)
        axisScales[(*axes)[i]] = (*scales)[i];
    } else {
      for (int64_t i = 0; i < rank; ++i)
        if ((*inShape)[i] > 0)
          axisScales[i] = double(outShape[i]) / double((*inShape)[i]);
    }
    for (double scale : axisScales)
      if (!(scale > 0) || !std::isfinite(scale))
        return planError(node,
                         llvm::formatv("scale {0} is not positive", scale));
  }

  ResizeParams params;
  params.rank = static_cast<int32_t>(rank);
  params.mode = attrs->mode;
  params.coordinates = attrs->coordinateMode;
  params.nearest = attrs->nearestMode;
  params.excludeOutside = attrs->excludeOutside ? 1 : 0;
  params.cubicCoeffA = attrs->cubicCoeffA;
  params.extrapolationValue = attrs->extrapolationValue;
  for (int64_t i = 0; i < rank; ++i) {
    if ((*inShape)[i] == 0 && outShape[i] != 0)
      return planError(node, llvm::formatv("axis {0} of X is empty", i));
    ResizeAxis &axis = params.axes[i];
    axis.inLen = (*inShape)[i];
    axis.outLen = outShape[i];
    axis.scale = axisScales[i];
    axis.roiStart = (*regions)[i].first;
    axis.roiEnd = (*regions)[i].second;
  }
  int64_t inStride = 1, outStride = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    params.inStrides[i] = inStride;
    params.outStrides[i] = outStride;
    inStride *= (*inShape)[i];
    outStride *= outShape[i];
  }
  while (params.planeRank < rank &&
         resizeAxisIsIdentity(params, params.planeRank))
    ++params.planeRank;
  return params;
}
