//===- GradientRulesShape.cpp - Gradients of data movement ----------------===//
//
// Gradient rules of the ops that move data without arithmetic: reshapes
// (Reshape, Flatten, Squeeze, Unsqueeze: dY reshaped back to the input's
// shape), Transpose (the inverse permutation), Expand (summed back), Slice
// and Gather (ONNX Runtime's SliceGrad and GatherGrad scatter dY into
// zeros of the input's shape), Concat (dY split at the inputs' extents) and
// Split (the output gradients concatenated, zeros where an output has
// none). Their shape, index and axis operands carry no gradient; the ops
// that only compute shapes or constants (Shape, Size, ConstantOfShape,
// Range, Constant, NonZero, OneHot) carry none at all.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/Axes.h"
#include "ir/ops/ShapeEval.h"
#include "passes/autodiff/GradientRules.h"

#include "llvm/ADT/STLExtras.h"

#include <numeric>

using namespace gmopt;

namespace {

/// Reshape-like ops: dX = Reshape(dY, Shape(X)).
GradientRule reshapeRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    auto shape = b.shapeOf(request.node.getOperand(0));
    if (!shape)
      return shape.takeError();
    return assign(grads[0], b.onnx("Reshape", {dY, *shape}));
  };
  return rule;
}

GradientRule transposeRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    const TensorType &type = node.getOperand(0)->getType();
    std::vector<int64_t> perm = node.getIntsAttr("perm", {});
    if (perm.empty()) {
      if (!type.hasRank())
        return gradientError(node, "Transpose without perm needs a ranked "
                                   "input");
      unsigned rank = type.getRank();
      perm.resize(rank);
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i != perm.size(); ++i)
      inverse[perm[i]] = static_cast<int64_t>(i);
    return assign(grads[0],
                  b.onnx("Transpose", {dY},
                         {{"perm", Attribute::getInts(std::move(inverse))}}));
  };
  return rule;
}

/// Expand: the broadcast dY summed back to the input's shape.
GradientRule expandRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    return assign(grads[0], b.reduceToShapeOf(dY, request.node.getOperand(0)));
  };
  return rule;
}

/// Slice(data, starts, ends, axes, steps) -> SliceGrad(dY, Shape(data),
/// starts, ends, axes, steps).
GradientRule sliceRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (node.getOpsetVersion() < 10)
      return gradientError(node, "Slice before opset 10 has no gradient rule");
    auto shape = b.shapeOf(node.getOperand(0));
    if (!shape)
      return shape.takeError();
    llvm::SmallVector<Value *, 6> operands = {dY, *shape};
    for (unsigned i = 1; i != node.getNumOperands(); ++i)
      operands.push_back(node.getOperand(i));
    return assign(grads[0], b.microsoft("SliceGrad", operands));
  };
  return rule;
}

/// Gather(data, indices) -> GatherGrad(Shape(data), indices, dY).
GradientRule gatherRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    auto shape = b.shapeOf(node.getOperand(0));
    if (!shape)
      return shape.takeError();
    return assign(
        grads[0],
        b.microsoft("GatherGrad", {*shape, node.getOperand(1), dY},
                    {{"axis", Attribute::getInt(node.getIntAttr("axis", 0))}}));
  };
  return rule;
}

/// Concat: dY split at each input's extent along the axis.
GradientRule concatRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    const TensorType &type = dY->getType();
    if (!type.hasRank())
      return gradientError(node, "Concat's gradient needs a ranked result");
    int64_t axisAttr = node.getIntAttr("axis", 0);
    auto normalized = ops::checkAxis(axisAttr, type.getRank());
    if (!normalized)
      return gradientError(node, llvm::toString(normalized.takeError()));
    int64_t axis = *normalized;
    std::vector<int64_t> sizes;
    bool staticSizes = true;
    for (Value *operand : node.getOperands()) {
      const TensorType &operandType = operand->getType();
      if (!operandType.hasRank() || !operandType.getDim(axis).isStatic()) {
        staticSizes = false;
        break;
      }
      sizes.push_back(operandType.getDim(axis).getExtent());
    }
    Value *splitSizes = nullptr;
    if (staticSizes) {
      splitSizes = b.int64s(sizes);
    } else {
      // Each input's extent read from its shape at run time.
      llvm::SmallVector<Value *, 4> extents;
      for (Value *operand : node.getOperands()) {
        auto shape = b.shapeOf(operand);
        if (!shape)
          return shape.takeError();
        auto extent =
            b.onnx("Slice", {*shape, b.int64s({axis}), b.int64s({axis + 1})});
        if (!extent)
          return extent.takeError();
        extents.push_back(*extent);
      }
      auto joined = b.onnx("Concat", extents, {{"axis", Attribute::getInt(0)}});
      if (!joined)
        return joined.takeError();
      splitSizes = *joined;
    }
    auto split =
        b.create(kOnnxDomain, "Split", {dY, splitSizes}, node.getNumOperands(),
                 {{"axis", Attribute::getInt(axis)}});
    if (!split)
      return split.takeError();
    for (unsigned i = 0; i != node.getNumOperands(); ++i) {
      Value *piece = (*split)->getResult(i);
      // The run-time sizes are the inputs' extents.
      piece->setType(node.getOperand(i)->getType());
      if (request.wanted[i])
        grads[i] = piece;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Split: the results' gradients concatenated (zeros for those without).
GradientRule splitRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    const Node &node = request.node;
    llvm::SmallVector<Value *, 4> pieces;
    for (unsigned i = 0; i != node.getNumResults(); ++i) {
      Value *piece = request.resultGrads[i];
      if (!piece) {
        if (!node.getResult(i))
          return gradientError(node, "Split with an absent result has no "
                                     "gradient rule");
        auto zeros = b.zerosLike(node.getResult(i));
        if (!zeros)
          return zeros.takeError();
        piece = *zeros;
      }
      pieces.push_back(piece);
    }
    return assign(
        grads[0],
        b.onnx("Concat", pieces,
               {{"axis", Attribute::getInt(node.getIntAttr("axis", 0))}}));
  };
  return rule;
}

/// The constant int64 values of \p node's operand \p index, or an error.
llvm::Expected<std::vector<int64_t>>
constantInts(const Node &node, unsigned index, llvm::StringRef what) {
  Value *value =
      node.getNumOperands() > index ? node.getOperand(index) : nullptr;
  if (!value || !value->hasData())
    return gradientError(node, "the gradient needs constant " + what);
  return value->getData().getIntValues();
}

/// Trilu: the same triangle of dY.
GradientRule triluRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    llvm::SmallVector<Value *, 2> operands = {dY};
    if (node.getNumOperands() > 1 && node.getOperand(1))
      operands.push_back(node.getOperand(1));
    llvm::SmallVector<NamedAttribute, 1> attrs(node.getAttrs().begin(),
                                               node.getAttrs().end());
    return assign(grads[0], b.onnx("Trilu", operands, attrs));
  };
  return rule;
}

/// Tile: dY viewed as [r0, d0, r1, d1, ...] summed over the repeats.
GradientRule tileRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0);
    const TensorType &type = x->getType();
    if (!type.hasStaticShape())
      return gradientError(node, "Tile's gradient needs a static input shape");
    auto repeats = constantInts(node, 1, "repeats");
    if (!repeats)
      return repeats.takeError();
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    // The evaluator checks the repeats against the input (one per
    // dimension, none negative).
    if (auto tiled = ops::tileShape(shape, *repeats); !tiled)
      return gradientError(node, llvm::toString(tiled.takeError()));
    std::vector<int64_t> split, axes;
    for (size_t i = 0; i != shape.size(); ++i) {
      split.push_back((*repeats)[i]);
      split.push_back(shape[i]);
      axes.push_back(2 * i);
    }
    auto viewed = b.onnx("Reshape", {dY, b.int64s(split)});
    if (!viewed)
      return viewed.takeError();
    auto summed = b.onnx("ReduceSum", {*viewed, b.int64s(axes)},
                         {{"keepdims", Attribute::getInt(0)}});
    if (!summed)
      return summed.takeError();
    return assign(grads[0], b.onnx("Reshape", {*summed, b.int64s(shape)}));
  };
  return rule;
}

/// Pad (constant mode): the window of dY that holds the input.
GradientRule padRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (node.getStringAttr("mode", "constant") != "constant")
      return gradientError(node, "only constant-mode Pad has a gradient rule");
    if (node.getNumOperands() > 3 && node.getOperand(3))
      return gradientError(node, "Pad with axes has no gradient rule");
    auto pads = constantInts(node, 1, "pads");
    if (!pads)
      return pads.takeError();
    const TensorType &type = node.getOperand(0)->getType();
    if (!type.hasStaticShape() || pads->size() != 2 * type.getRank())
      return gradientError(node, "Pad's gradient needs a static input shape");
    // The window of dY the input was copied to.
    std::vector<int64_t> starts, ends, axes;
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    for (size_t i = 0; i != shape.size(); ++i) {
      int64_t begin = (*pads)[i];
      if (begin < 0 || (*pads)[i + shape.size()] < 0)
        return gradientError(node, "Pad with negative pads has no gradient "
                                   "rule");
      starts.push_back(begin);
      ends.push_back(begin + shape[i]);
      axes.push_back(static_cast<int64_t>(i));
    }
    return assign(grads[0], b.onnx("Slice", {dY, b.int64s(starts),
                                             b.int64s(ends), b.int64s(axes)}));
  };
  return rule;
}

/// GatherElements -> GatherElementsGrad(dY, Shape(data), indices).
GradientRule gatherElementsRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    auto shape = b.shapeOf(node.getOperand(0));
    if (!shape)
      return shape.takeError();
    return assign(
        grads[0],
        b.microsoft("GatherElementsGrad", {dY, *shape, node.getOperand(1)},
                    {{"axis", Attribute::getInt(node.getIntAttr("axis", 0))}}));
  };
  return rule;
}

/// GatherND -> GatherNDGrad(Shape(data), indices, dY).
GradientRule gatherNDRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    auto shape = b.shapeOf(node.getOperand(0));
    if (!shape)
      return shape.takeError();
    return assign(grads[0],
                  b.microsoft("GatherNDGrad", {*shape, node.getOperand(1), dY},
                              {{"batch_dims", Attribute::getInt(node.getIntAttr(
                                                  "batch_dims", 0))}}));
  };
  return rule;
}

} // namespace

void gmopt::registerShapeGradients(GradientRuleTable &table) {
  table.add(kOnnxDomain, "Trilu", triluRule());
  table.add(kOnnxDomain, "Tile", tileRule());
  table.add(kOnnxDomain, "Pad", padRule());
  table.add(kOnnxDomain, "GatherElements", gatherElementsRule());
  table.add(kOnnxDomain, "GatherND", gatherNDRule());
  // ONNX Runtime's training variants (an extra lengths output).
  table.add(kMsDomain, "ConcatTraining", concatRule());
  table.add(kMsDomain, "SplitTraining", splitRule());
  for (llvm::StringRef op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    table.add(kOnnxDomain, op, reshapeRule());
  table.add(kOnnxDomain, "Transpose", transposeRule());
  table.add(kOnnxDomain, "Expand", expandRule());
  table.add(kOnnxDomain, "Slice", sliceRule());
  table.add(kOnnxDomain, "Gather", gatherRule());
  table.add(kOnnxDomain, "Concat", concatRule());
  table.add(kOnnxDomain, "Split", splitRule());
  for (llvm::StringRef op : {"Shape", "Size", "ConstantOfShape", "Range",
                             "Constant", "NonZero", "OneHot"})
    table.addNonDifferentiable(kOnnxDomain, op);
}
