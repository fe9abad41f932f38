//===- ResizeParams.cpp - What an ONNX Resize node means ------------------===//
//
// Attribute reading per opset, the operand layout of Resize-10, Resize-11+
// and ResizeGrad, and the scale/size geometry of the reference
// implementation (see ResizeParams.h).
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ResizeParams.h"

#include "ir/IR.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

using namespace gmopt;
using namespace gmopt::resize;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The opset whose Resize semantics \p node follows (ResizeGrad: the latest).
int64_t semanticOpset(const Node &node) {
  if (isResizeGrad(node))
    return 19;
  return node.getOpsetVersion();
}

/// "'a', 'b', 'c'" for messages.
std::string choiceList(llvm::ArrayRef<llvm::StringRef> choices) {
  std::string list;
  for (llvm::StringRef choice : choices)
    list += (list.empty() ? "'" : ", '") + choice.str() + "'";
  return list;
}

std::optional<std::vector<double>> traceFloatsFrom(const Value &value,
                                                   unsigned depth) {
  if (std::optional<TensorData> data = ops::getConstantData(value)) {
    if (!data->hasFoldableBytes())
      return std::nullopt;
    std::vector<double> values;
    for (uint64_t i = 0, e = data->getNumElements(); i != e; ++i)
      values.push_back(data->getFloatElement(i));
    return values;
  }
  const Node *producer = value.getDefiningNode();
  constexpr unsigned kMaxDepth = 16;
  if (!producer || depth > kMaxDepth || producer->getOp().domain != "")
    return std::nullopt;
  llvm::StringRef op = producer->getOp().type;
  if ((op == "Identity" || op == "Cast") && producer->getNumOperands() == 1 &&
      producer->getOperand(0)) {
    if (op == "Cast")
      if (std::optional<std::vector<int64_t>> ints =
              ops::getIntValues(*producer->getOperand(0)))
        return std::vector<double>(ints->begin(), ints->end());
    return traceFloatsFrom(*producer->getOperand(0), depth + 1);
  }
  if (op == "Concat" && value.getType().hasRank() &&
      value.getType().getRank() == 1) {
    std::vector<double> values;
    for (const Value *operand : producer->getOperands()) {
      if (!operand)
        return std::nullopt;
      std::optional<std::vector<double>> part =
          traceFloatsFrom(*operand, depth + 1);
      if (!part)
        return std::nullopt;
      values.insert(values.end(), part->begin(), part->end());
    }
    return values;
  }
  return std::nullopt;
}

} // namespace

std::optional<std::vector<double>>
resize::traceFloatValues(const Value &value) {
  return traceFloatsFrom(value, 0);
}

bool resize::isResizeGrad(const Node &node) {
  return node.getOp().is(kMsDomain, "ResizeGrad");
}

ResizeOperands resize::getResizeOperands(const Node &node) {
  ResizeOperands operands;
  if (isResizeGrad(node)) {
    operands.dY = 0;
    operands.x = 1;
    operands.roi = 2;
    operands.scales = 3;
    return operands;
  }
  if (node.getOpsetVersion() < 11) {
    operands.scales = 1;
    return operands;
  }
  operands.roi = 1;
  operands.scales = 2;
  operands.sizes = 3;
  return operands;
}

llvm::Expected<ResizeAttrs> resize::readResizeAttrs(const Node &node) {
  ResizeAttrs attrs;
  int64_t opset = semanticOpset(node);

  std::string mode = node.getStringAttr("mode", "nearest").str();
  std::vector<llvm::StringRef> modes = {"nearest", "linear"};
  if (opset >= 11)
    modes.push_back("cubic");
  if (!llvm::is_contained(modes, mode))
    return fail(llvm::formatv("mode '{0}' is not defined at opset {1} (it "
                              "defines {2})",
                              mode, opset, choiceList(modes)));
  attrs.mode = llvm::StringSwitch<Mode>(mode)
                   .Case("linear", Mode::Linear)
                   .Case("cubic", Mode::Cubic)
                   .Default(Mode::Nearest);

  if (opset < 11) {
    // Resize-10 is Upsample with a scales input: asymmetric coordinates.
    attrs.coordinateMode = CoordinateMode::Asymmetric;
    attrs.nearestMode = NearestMode::Simple;
    return attrs;
  }

  std::string coordinate =
      node.getStringAttr("coordinate_transformation_mode", "half_pixel").str();
  std::vector<llvm::StringRef> coordinates = {
      "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
      "tf_crop_and_resize"};
  if (opset == 11)
    coordinates.push_back("tf_half_pixel_for_nn");
  if (opset >= 19)
    coordinates.push_back("half_pixel_symmetric");
  if (!llvm::is_contained(coordinates, coordinate))
    return fail(llvm::formatv("coordinate_transformation_mode '{0}' is not "
                              "defined at opset {1} (it defines {2})",
                              coordinate, opset, choiceList(coordinates)));
  attrs.coordinateMode =
      llvm::StringSwitch<CoordinateMode>(coordinate)
          .Case("half_pixel_symmetric", CoordinateMode::HalfPixelSymmetric)
          .Case("pytorch_half_pixel", CoordinateMode::PytorchHalfPixel)
          .Case("align_corners", CoordinateMode::AlignCorners)
          .Case("asymmetric", CoordinateMode::Asymmetric)
          .Case("tf_half_pixel_for_nn", CoordinateMode::TfHalfPixelForNn)
          .Case("tf_crop_and_resize", CoordinateMode::TfCropAndResize)
          .Default(CoordinateMode::HalfPixel);

  std::string nearest =
      node.getStringAttr("nearest_mode", "round_prefer_floor").str();
  std::vector<llvm::StringRef> nearestModes = {
      "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (!llvm::is_contained(nearestModes, nearest))
    return fail(llvm::formatv("nearest_mode '{0}' is not defined (it defines "
                              "{1})",
                              nearest, choiceList(nearestModes)));
  attrs.nearestMode =
      llvm::StringSwitch<NearestMode>(nearest)
          .Case("round_prefer_ceil", NearestMode::RoundPreferCeil)
          .Case("floor", NearestMode::Floor)
          .Case("ceil", NearestMode::Ceil)
          .Default(NearestMode::RoundPreferFloor);

  attrs.cubicCoeffA = node.getFloatAttr("cubic_coeff_a", -0.75f);
  attrs.excludeOutside = node.getIntAttr("exclude_outside", 0) != 0;
  attrs.extrapolationValue = node.getFloatAttr("extrapolation_value", 0.0f);

  if (opset >= 18) {
    if (node.getIntAttr("antialias", 0) != 0)
      return fail("antialias=1 is not supported (gmopt implements Resize "
                  "without antialiasing)");
    attrs.axes = node.getIntsAttr("axes", {});
    std::string policy =
        node.getStringAttr("keep_aspect_ratio_policy", "stretch").str();
    std::vector<llvm::StringRef> policies = {"stretch", "not_larger",
                                             "not_smaller"};
    if (!llvm::is_contained(policies, policy))
      return fail(llvm::formatv("keep_aspect_ratio_policy '{0}' is not "
                                "defined (it defines {1})",
                                policy, choiceList(policies)));
    attrs.aspectPolicy = llvm::StringSwitch<AspectPolicy>(policy)
                             .Case("not_larger", AspectPolicy::NotLarger)
                             .Case("not_smaller", AspectPolicy::NotSmaller)
                             .Default(AspectPolicy::Stretch);
  }
  return attrs;
}

llvm::Expected<llvm::SmallVector<unsigned, 4>>
resize::resizedAxes(const ResizeAttrs &attrs, int64_t rank) {
  llvm::SmallVector<unsigned, 4> axes;
  if (attrs.axes.empty()) {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(static_cast<unsigned>(i));
    return axes;
  }
  for (int64_t axis : attrs.axes) {
    std::optional<unsigned> maybe = ops::normalizeAxis(axis, rank);
    if (!maybe)
      return fail(ops::axisOutOfRange("axes value", axis, rank));
    unsigned normalized = *maybe;
    if (llvm::is_contained(axes, normalized))
      return fail(llvm::formatv("axes repeats axis {0}", normalized));
    axes.push_back(normalized);
  }
  return axes;
}

llvm::Expected<ResizeGeometry> resize::resolveResizeGeometry(
    const ResizeAttrs &attrs, llvm::ArrayRef<int64_t> inShape,
    llvm::ArrayRef<double> scales, llvm::ArrayRef<int64_t> sizes) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  auto axes = resizedAxes(attrs, rank);
  if (!axes)
    return axes.takeError();
  if (scales.empty() == sizes.empty())
    return fail("exactly one of 'scales' and 'sizes' must be given");
  ResizeGeometry geometry;
  geometry.scales.assign(rank, 1.0);
  geometry.outShape.assign(inShape.begin(), inShape.end());
  // Extents stay well inside int64 and exact in a double.
  constexpr double kMaxExtent = double(int64_t(1) << 52);

  if (!scales.empty()) {
    if (scales.size() != axes->size())
      return fail(llvm::formatv("'scales' has {0} values for {1} resized "
                                "axes",
                                scales.size(), axes->size()));
    for (size_t i = 0; i != axes->size(); ++i) {
      double scale = scales[i];
      if (!(scale > 0) || !std::isfinite(scale))
        return fail(llvm::formatv("scale {0} is not positive", scale));
      unsigned axis = (*axes)[i];
      double extent = std::floor(scale * double(inShape[axis]));
      if (extent > kMaxExtent)
        return fail("scales give an output extent beyond int64");
      geometry.scales[axis] = scale;
      geometry.outShape[axis] = static_cast<int64_t>(extent);
    }
    return geometry;
  }

  if (sizes.size() != axes->size())
    return fail(llvm::formatv("'sizes' has {0} values for {1} resized axes",
                              sizes.size(), axes->size()));
  for (size_t i = 0; i != axes->size(); ++i) {
    unsigned axis = (*axes)[i];
    if (sizes[i] < 0)
      return fail(llvm::formatv("size {0} is negative", sizes[i]));
    if (inShape[axis] <= 0)
      return fail(llvm::formatv("axis {0} of the input is empty; 'sizes' "
                                "gives no scale for it",
                                axis));
    geometry.scales[axis] = double(sizes[i]) / double(inShape[axis]);
    geometry.outShape[axis] = sizes[i];
  }
  if (attrs.aspectPolicy == AspectPolicy::Stretch)
    return geometry;
  double common = attrs.aspectPolicy == AspectPolicy::NotLarger
                      ? std::numeric_limits<double>::infinity()
                      : 0.0;
  for (unsigned axis : *axes)
    common = attrs.aspectPolicy == AspectPolicy::NotLarger
                 ? std::min(common, geometry.scales[axis])
                 : std::max(common, geometry.scales[axis]);
  for (unsigned axis : *axes) {
    double extent = std::floor(common * double(inShape[axis]) + 0.5);
    if (extent > kMaxExtent)
      return fail("sizes give an output extent beyond int64");
    geometry.scales[axis] = common;
    geometry.outShape[axis] = static_cast<int64_t>(extent);
  }
  return geometry;
}

llvm::Expected<std::vector<std::pair<double, double>>>
resize::expandRoi(const ResizeAttrs &attrs, int64_t rank,
                  llvm::ArrayRef<double> roi) {
  std::vector<std::pair<double, double>> regions(rank, {0.0, 1.0});
  if (roi.empty())
    return regions;
  auto axes = resizedAxes(attrs, rank);
  if (!axes)
    return axes.takeError();
  if (roi.size() != 2 * axes->size())
    return fail(llvm::formatv("'roi' has {0} values; {1} resized axes need "
                              "{2}",
                              roi.size(), axes->size(), 2 * axes->size()));
  for (size_t i = 0; i != axes->size(); ++i)
    regions[(*axes)[i]] = {roi[i], roi[axes->size() + i]};
  return regions;
}
