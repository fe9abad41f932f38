//===- ResizeKernels.cpp - Resize and its adjoint, ResizeGrad -------------===//
//
// ONNX Resize (nearest with every nearest_mode, N-D multilinear, cubic with
// cubic_coeff_a and exclude_outside, every coordinate_transformation_mode,
// tf_crop_and_resize's extrapolation, axes and keep_aspect_ratio_policy) and
// ONNX Runtime's com.microsoft ResizeGrad. Both build, for each axis and
// output coordinate, the taps (input index, weight) that ONNX's reference
// implementation (onnx/reference/ops/op_resize.py) interpolates with; the
// N-D interpolation is their tensor product. Resize gathers through the
// taps, ResizeGrad scatters dY back through the same taps (the adjoint of
// the linear map X -> Y), so the two agree by construction. Work is split
// over the leading axes that are not resized. The taps are
// backend/ResizeAxisMath.h's, which the CUDA kernels read too. Coordinates
// and weights are in float64; f32 and f64 tensors are computed in their own
// type, f16/bf16 through fp32 staging.
//
//===----------------------------------------------------------------------===//

#include "backend/ResizeAxisMath.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/ResizeParams.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::resize;

namespace {

/// The taps of one axis: for output coordinate o, taps
/// [begin[o], begin[o + 1]) of index/weight; outside[o] marks coordinates
/// tf_crop_and_resize maps outside the input (they take
/// extrapolation_value).
struct AxisTaps {
  std::vector<int32_t> begin;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<uint8_t> outside;

  /// True when output coordinate o reads exactly input o with weight 1.
  bool isIdentity() const {
    int64_t outLen = static_cast<int64_t>(outside.size());
    for (int64_t o = 0; o < outLen; ++o)
      if (outside[o] || begin[o + 1] - begin[o] != 1 || index[begin[o]] != o ||
          weight[begin[o]] != 1.0)
        return false;
    return true;
  }
};

/// The taps of one axis of extent \p inLen resized to \p outLen
/// (backend/ResizeAxisMath.h's resizeTapsOf for each output coordinate).
AxisTaps buildAxisTaps(const ResizeAttrs &attrs, int64_t inLen, int64_t outLen,
                       double scale, double roiStart, double roiEnd) {
  ResizeAxisRule rule;
  rule.mode = attrs.mode;
  rule.coordinates = attrs.coordinateMode;
  rule.nearest = attrs.nearestMode;
  rule.excludeOutside = attrs.excludeOutside;
  rule.cubicCoeffA = attrs.cubicCoeffA;
  ResizeAxis axis;
  axis.inLen = inLen;
  axis.outLen = outLen;
  axis.scale = scale;
  axis.roiStart = roiStart;
  axis.roiEnd = roiEnd;
  AxisTaps taps;
  taps.begin.reserve(outLen + 1);
  taps.outside.assign(outLen, 0);
  taps.begin.push_back(0);
  for (int64_t o = 0; o < outLen; ++o) {
    ResizeTaps at;
    resizeTapsOf(rule, axis, o, at);
    taps.outside[o] = at.outside;
    for (int32_t k = 0; k < at.count; ++k) {
      taps.index.push_back(at.index[k]);
      taps.weight.push_back(at.weight[k]);
    }
    taps.begin.push_back(static_cast<int32_t>(taps.index.size()));
  }
  return taps;
}

/// Everything a Resize or ResizeGrad needs to run: the taps of every axis,
/// the shapes, and how many leading axes are left as they are.
struct ResizePlan {
  ResizeAttrs attrs;
  std::vector<AxisTaps> axes;
  std::vector<int64_t> inShape, outShape;
  /// Leading axes every output coordinate of which reads the same input
  /// coordinate: the work is split over them.
  unsigned planeRank = 0;

  int64_t planes() const {
    int64_t n = 1;
    for (unsigned i = 0; i != planeRank; ++i)
      n *= inShape[i];
    return n;
  }
  int64_t innerIn() const {
    return product(inShape) / std::max<int64_t>(planes(), 1);
  }
  int64_t innerOut() const {
    return product(outShape) / std::max<int64_t>(planes(), 1);
  }
};

/// The elements of a float input (f32, f64; f16/bf16 arrive as fp32).
llvm::Expected<std::vector<double>> readFloats(const KernelCall &call,
                                               const TensorView *view,
                                               llvm::StringRef what) {
  std::vector<double> values;
  if (!view)
    return values;
  for (int64_t i = 0, e = view->getNumElements(); i != e; ++i) {
    switch (view->getDType()) {
    case DType::F32:
      values.push_back(view->getDataAs<float>()[i]);
      break;
    case DType::F64:
      values.push_back(view->getDataAs<double>()[i]);
      break;
    default:
      return unsupportedType(call, view->getDType(), what);
    }
  }
  return values;
}

/// A Resize or ResizeGrad node decoded once: its attributes and where its
/// operands are.
struct ResizeState {
  ResizeAttrs attrs;
  ResizeOperands operands;
};

/// Decodes a Resize or ResizeGrad node: attributes its opset does not
/// define (or antialias) and, with X's rank known, axes out of range fail
/// here.
llvm::Expected<std::unique_ptr<KernelState>> prepareResize(const Node &node) {
  auto attrs = readResizeAttrs(node);
  if (!attrs)
    return prepareError(node, llvm::toString(attrs.takeError()));
  ResizeState state{std::move(*attrs), getResizeOperands(node)};
  if (std::optional<unsigned> rank = operandRank(node, state.operands.x))
    if (llvm::Error err = resizedAxes(state.attrs, *rank).takeError())
      return prepareError(node, llvm::toString(std::move(err)));
  return makeKernelState(std::move(state));
}

/// Builds the plan of \p call: Resize when \p grad is false (shapes X ->
/// Y, checked against the scales or sizes), ResizeGrad otherwise (dY's
/// shape is the output's; scales, when given, are the forward's).
llvm::Expected<ResizePlan> makePlan(const KernelCall &call, bool grad) {
  const auto &state = call.getState<ResizeState>();
  ResizePlan plan;
  plan.attrs = state.attrs;
  const ResizeOperands &operands = state.operands;
  const TensorView &x = *call.in(operands.x);
  plan.inShape.assign(x.getShape().begin(), x.getShape().end());
  int64_t rank = x.getRank();

  auto scales = readFloats(
      call, operands.scales >= 0 ? call.in(operands.scales) : nullptr,
      "scales");
  if (!scales)
    return scales.takeError();
  auto roi = readFloats(
      call, operands.roi >= 0 ? call.in(operands.roi) : nullptr, "roi");
  if (!roi)
    return roi.takeError();
  // roi matters to tf_crop_and_resize only; elsewhere it is ignored.
  if (plan.attrs.coordinateMode != CoordinateMode::TfCropAndResize)
    roi->clear();
  auto regions = expandRoi(plan.attrs, rank, *roi);
  if (!regions)
    return call.error(llvm::toString(regions.takeError()));

  std::vector<double> axisScales;
  if (!grad) {
    llvm::SmallVector<int64_t, 8> sizes;
    if (operands.sizes >= 0 && call.in(operands.sizes)) {
      auto read = readInts(call, *call.in(operands.sizes), "sizes");
      if (!read)
        return read.takeError();
      sizes = *read;
    }
    auto geometry =
        resolveResizeGeometry(plan.attrs, plan.inShape, *scales, sizes);
    if (!geometry)
      return call.error(llvm::toString(geometry.takeError()));
    if (llvm::Error err = checkOutputShape(call, 0, geometry->outShape))
      return err;
    plan.outShape = geometry->outShape;
    axisScales = geometry->scales;
  } else {
    const TensorView &dY = *call.in(operands.dY);
    if (dY.getRank() != x.getRank())
      return call.error(llvm::formatv("dY has rank {0} but X has rank {1}",
                                      dY.getRank(), x.getRank()));
    plan.outShape.assign(dY.getShape().begin(), dY.getShape().end());
    axisScales.assign(rank, 1.0);
    auto axes = resizedAxes(plan.attrs, rank);
    if (!axes)
      return call.error(llvm::toString(axes.takeError()));
    if (!scales->empty()) {
      if (scales->size() != axes->size())
        return call.error(
            llvm::formatv("'scales' has {0} values for {1} resized axes",
                          scales->size(), axes->size()));
      for (size_t i = 0; i != axes->size(); ++i)
        axisScales[(*axes)[i]] = (*scales)[i];
    } else {
      for (int64_t i = 0; i < rank; ++i)
        if (plan.inShape[i] > 0)
          axisScales[i] = double(plan.outShape[i]) / double(plan.inShape[i]);
    }
    for (double scale : axisScales)
      if (!(scale > 0) || !std::isfinite(scale))
        return call.error(llvm::formatv("scale {0} is not positive", scale));
  }

  for (int64_t i = 0; i < rank; ++i) {
    if (plan.inShape[i] == 0 && plan.outShape[i] != 0)
      return call.error(llvm::formatv("axis {0} of X is empty", i));
    plan.axes.push_back(buildAxisTaps(
        plan.attrs, plan.inShape[i], plan.outShape[i], axisScales[i],
        (*regions)[i].first, (*regions)[i].second));
  }
  while (plan.planeRank < rank &&
         plan.inShape[plan.planeRank] == plan.outShape[plan.planeRank] &&
         plan.axes[plan.planeRank].isIdentity())
    ++plan.planeRank;
  return plan;
}

/// Row-major strides of \p shape from axis \p first on.
std::vector<int64_t> innerStrides(llvm::ArrayRef<int64_t> shape,
                                  unsigned first) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= int64_t(first); --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Walks the output coordinates of one plane in row-major order: \p coord
/// holds the coordinate of every axis from plan.planeRank on.
bool nextCoordinate(const ResizePlan &plan, std::vector<int64_t> &coord) {
  for (int64_t i = int64_t(plan.outShape.size()) - 1;
       i >= int64_t(plan.planeRank); --i) {
    if (++coord[i] < plan.outShape[i])
      return true;
    coord[i] = 0;
  }
  return false;
}

/// True when some axis maps coordinate \p coord outside the input.
bool isOutside(const ResizePlan &plan, const std::vector<int64_t> &coord) {
  for (size_t i = plan.planeRank; i != plan.axes.size(); ++i)
    if (plan.axes[i].outside[coord[i]])
      return true;
  return false;
}

/// The interpolated value at \p coord: the sum over the taps of axes
/// \p axis.. of their weights times X.
template <typename T>
double gatherTaps(const ResizePlan &plan, const T *x,
                  const std::vector<int64_t> &strides,
                  const std::vector<int64_t> &coord, size_t axis,
                  int64_t offset) {
  if (axis == plan.axes.size())
    return double(x[offset]);
  const AxisTaps &taps = plan.axes[axis];
  double sum = 0;
  for (int32_t t = taps.begin[coord[axis]], e = taps.begin[coord[axis] + 1];
       t != e; ++t)
    sum += taps.weight[t] * gatherTaps(plan, x, strides, coord, axis + 1,
                                       offset + taps.index[t] * strides[axis]);
  return sum;
}

/// Adds \p value times the taps' weights into dX (the adjoint of
/// gatherTaps).
template <typename T>
void scatterTaps(const ResizePlan &plan, T *dx,
                 const std::vector<int64_t> &strides,
                 const std::vector<int64_t> &coord, size_t axis, int64_t offset,
                 double value) {
  if (axis == plan.axes.size()) {
    dx[offset] += T(value);
    return;
  }
  const AxisTaps &taps = plan.axes[axis];
  for (int32_t t = taps.begin[coord[axis]], e = taps.begin[coord[axis] + 1];
       t != e; ++t)
    scatterTaps(plan, dx, strides, coord, axis + 1,
                offset + taps.index[t] * strides[axis], value * taps.weight[t]);
}

template <typename T> llvm::Error resizeTyped(KernelCall &call) {
  auto plan = makePlan(call, /*grad=*/false);
  if (!plan)
    return plan.takeError();
  const T *x = call.in(0)->getDataAs<T>();
  T *y = call.out(0)->getDataAs<T>();
  int64_t innerIn = plan->innerIn(), innerOut = plan->innerOut();
  if (innerOut == 0)
    return llvm::Error::success();
  std::vector<int64_t> strides = innerStrides(plan->inShape, plan->planeRank);
  T extrapolation = T(plan->attrs.extrapolationValue);
  parallelFor(call.getNumThreads(), plan->planes(), grainFor(innerOut * 4),
              [&](int64_t lo, int64_t hi) {
                std::vector<int64_t> coord(plan->outShape.size(), 0);
                for (int64_t p = lo; p < hi; ++p) {
                  const T *plane = x + p * innerIn;
                  T *out = y + p * innerOut;
                  std::fill(coord.begin(), coord.end(), 0);
                  int64_t o = 0;
                  do {
                    out[o++] = isOutside(*plan, coord)
                                   ? extrapolation
                                   : T(gatherTaps(*plan, plane, strides, coord,
                                                  plan->planeRank, 0));
                  } while (nextCoordinate(*plan, coord));
                }
              });
  return llvm::Error::success();
}

/// Resize(X, roi?, scales?, sizes?) (opset 10: Resize(X, scales)).
llvm::Error resizeKernel(KernelCall &call) {
  return dispatchFloat(call, call.in(0)->getDType(), [&](auto tag) {
    return resizeTyped<typename decltype(tag)::type>(call);
  });
}

template <typename T> llvm::Error resizeGradTyped(KernelCall &call) {
  const TensorView &dYView = *call.in(0);
  if (llvm::Error err = checkDType(call, dYView, dtypeOf<T>(), "dY"))
    return err;
  auto plan = makePlan(call, /*grad=*/true);
  if (!plan)
    return plan.takeError();
  if (llvm::Error err = checkOutputShape(call, 0, plan->inShape))
    return err;
  const T *dY = dYView.getDataAs<T>();
  T *dX = call.out(0)->getDataAs<T>();
  std::fill(dX, dX + product(plan->inShape), T(0));
  int64_t innerIn = plan->innerIn(), innerOut = plan->innerOut();
  if (innerOut == 0)
    return llvm::Error::success();
  std::vector<int64_t> strides = innerStrides(plan->inShape, plan->planeRank);
  // Planes are disjoint in dX: no two workers add into the same element.
  parallelFor(call.getNumThreads(), plan->planes(), grainFor(innerOut * 4),
              [&](int64_t lo, int64_t hi) {
                std::vector<int64_t> coord(plan->outShape.size(), 0);
                for (int64_t p = lo; p < hi; ++p) {
                  T *plane = dX + p * innerIn;
                  const T *grad = dY + p * innerOut;
                  std::fill(coord.begin(), coord.end(), 0);
                  int64_t o = 0;
                  do {
                    double g = double(grad[o++]);
                    if (!isOutside(*plan, coord))
                      scatterTaps(*plan, plane, strides, coord, plan->planeRank,
                                  0, g);
                  } while (nextCoordinate(*plan, coord));
                }
              });
  return llvm::Error::success();
}

/// com.microsoft ResizeGrad(dY, X, roi?, scales?) -> dX.
llvm::Error resizeGradKernel(KernelCall &call) {
  return dispatchFloat(call, call.in(1)->getDType(), [&](auto tag) {
    return resizeGradTyped<typename decltype(tag)::type>(call);
  });
}

} // namespace

void cpu::registerResizeKernels(KernelTable &table) {
  table.add(kOnnxDomain, "Resize", resizeKernel);
  table.add(kMsDomain, "ResizeGrad", resizeGradKernel);
  table.setPrepare(kOnnxDomain, "Resize", prepareResize);
  table.setPrepare(kMsDomain, "ResizeGrad", prepareResize);
}
