//===- GradientRulesResize.cpp - The gradient of Resize -------------------===//
//
// Resize is linear in X for every mode (nearest picks, linear and cubic
// weigh fixed taps), so its gradient is the adjoint of the interpolation:
// dY scattered back into X's shape through the same taps. The rule emits
// ONNX Runtime's com.microsoft ResizeGrad(dY, X, roi, scales) with the
// forward node's attributes, as ONNX Runtime's gradient builder does (ONNX
// Runtime runs it on CUDA for 4-D linear resizes; gmopt's CPU kernel covers
// every mode). Only X carries a gradient: roi, scales and sizes do not.
// ResizeGrad has no sizes input, so sizes with keep_aspect_ratio_policy
// (whose output extents are rounded from one common scale) get that scale
// as a constant scales input. (Resize-10 needs nothing here: the autodiff
// pass takes opset 13 and newer.)
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

#include "ir/ops/ResizeParams.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/ADT/STLExtras.h"

using namespace gmopt;
using namespace gmopt::resize;

namespace {

/// The operand \p index of \p node, or null when absent or out of range.
Value *operandOrNull(const Node &node, int index) {
  if (index < 0 || unsigned(index) >= node.getNumOperands())
    return nullptr;
  return node.getOperand(unsigned(index));
}

/// True when \p value is a provably empty tensor (Resize-11's empty
/// scales when sizes are given).
bool isEmptyTensor(const Value *value) {
  const TensorType &type = value->getType();
  return type.hasStaticShape() && type.getNumElements() == 0;
}

/// Resize -> com.microsoft ResizeGrad(dY, X, roi, scales).
GradientRule resizeRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    auto attrs = readResizeAttrs(node);
    if (!attrs)
      return gradientError(node, llvm::toString(attrs.takeError()));
    ResizeOperands operands = getResizeOperands(node);
    Value *x = node.getOperand(0);
    Value *roi = operandOrNull(node, operands.roi);
    Value *scales = operandOrNull(node, operands.scales);
    Value *sizes = operandOrNull(node, operands.sizes);
    llvm::SmallVector<NamedAttribute, 8> gradAttrs(node.getAttrs().begin(),
                                                   node.getAttrs().end());

    bool byScales = scales && !isEmptyTensor(scales);
    if (!byScales && sizes && attrs->aspectPolicy != AspectPolicy::Stretch) {
      // dY's extents are rounded from the common scale: pass that scale.
      std::optional<std::vector<int64_t>> sizeValues =
          ops::getIntValues(*sizes);
      const TensorType &type = x->getType();
      if (!sizeValues || !type.hasStaticShape())
        return gradientError(node, "the gradient of a Resize with "
                                   "keep_aspect_ratio_policy needs constant "
                                   "sizes and a static input shape");
      auto geometry =
          resolveResizeGeometry(*attrs, type.getStaticShape(), {}, *sizeValues);
      if (!geometry)
        return gradientError(node, llvm::toString(geometry.takeError()));
      auto axes = resizedAxes(*attrs, type.getRank());
      if (!axes)
        return gradientError(node, llvm::toString(axes.takeError()));
      std::vector<float> values;
      for (unsigned axis : *axes)
        values.push_back(static_cast<float>(geometry->scales[axis]));
      TensorData data = TensorData::fromValues<float>(
          DType::F32, {static_cast<int64_t>(values.size())}, values);
      auto constant = b.onnx(
          "Constant", {},
          {NamedAttribute{"value", Attribute::getTensor(std::move(data))}});
      if (!constant)
        return constant.takeError();
      scales = *constant;
      byScales = true;
    }

    llvm::SmallVector<Value *, 4> gradOperands = {dY, x, roi};
    if (byScales)
      gradOperands.push_back(scales);
    else if (!roi)
      gradOperands.pop_back();
    return assign(grads[0], b.microsoft("ResizeGrad", gradOperands, gradAttrs));
  };
  return rule;
}

} // namespace

void gmopt::registerResizeGradients(GradientRuleTable &table) {
  table.add(kOnnxDomain, "Resize", resizeRule());
}
