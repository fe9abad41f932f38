//===- GradientRulesActivations.cpp - Gradients of activation functions ---===//
//
// Gradient rules of the piecewise and smooth activations beyond Relu,
// Sigmoid, Tanh and GELU (GradientRulesMath.cpp): LeakyRelu, PRelu, Elu,
// Celu, Selu, ThresholdedRelu, HardSigmoid, HardSwish, Softplus, Softsign,
// Mish, Clip and ONNX Runtime's QuickGelu and BiasGelu. ONNX Runtime has
// gradient ops only for the last two (QuickGeluGrad, BiasGeluGrad_dX); the
// others are written in standard ops: a Where on the piece the input lies
// in, the derivative read from X or Y.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

using namespace gmopt;

namespace {

DType dtypeOf(const Value *value) { return value->getType().getDType(); }

/// The context of one elementwise activation's rule.
struct Activation {
  GradientBuilder &b;
  const Node &node;
  Value *dY, *x, *y;
  float attr(llvm::StringRef name, float fallback) const {
    return node.getFloatAttr(name, fallback);
  }
  Value *scalar(double value) const { return b.scalar(dtypeOf(x), value); }
};

/// A rule over operand 0 whose dX \p derivative computes.
GradientRule activationRule(
    std::function<llvm::Expected<Value *>(const Activation &)> derivative,
    std::vector<unsigned> differentiable = {0}) {
  GradientRule rule;
  rule.differentiableOperands = std::move(differentiable);
  rule.emit = [derivative](GradientBuilder &b, const GradientRequest &request,
                           Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY || !request.wanted[0])
      return llvm::Error::success();
    Activation act{b, request.node, dY, request.node.getOperand(0),
                   request.node.getResult(0)};
    auto grad = derivative(act);
    if (!grad)
      return grad.takeError();
    grads[0] = *grad;
    return llvm::Error::success();
  };
  return rule;
}

/// Where(x > threshold, onPositive, otherwise).
llvm::Expected<Value *> wherePositive(const Activation &a, double threshold,
                                      Value *onPositive, Value *otherwise) {
  GMOPT_TRY(positive, a.b.onnx("Greater", {a.x, a.scalar(threshold)}));
  return a.b.onnx("Where", {positive, onPositive, otherwise});
}

llvm::Expected<Value *> leakyRelu(const Activation &a) {
  GMOPT_TRY(scaled, a.b.mul(a.dY, a.scalar(a.attr("alpha", 0.01f))));
  return wherePositive(a, 0.0, a.dY, scaled);
}

llvm::Expected<Value *> elu(const Activation &a) {
  // x <= 0: y = alpha (e^x - 1), so dy/dx = y + alpha.
  GMOPT_TRY(shifted, a.b.add(a.y, a.scalar(a.attr("alpha", 1.0f))));
  GMOPT_TRY(negative, a.b.mul(a.dY, shifted));
  return wherePositive(a, 0.0, a.dY, negative);
}

llvm::Expected<Value *> celu(const Activation &a) {
  // x <= 0: y = alpha (e^(x/alpha) - 1), so dy/dx = y/alpha + 1.
  float alpha = a.attr("alpha", 1.0f);
  GMOPT_TRY(ratio, a.b.mul(a.y, a.scalar(1.0 / alpha)));
  GMOPT_TRY(shifted, a.b.add(ratio, a.scalar(1.0)));
  GMOPT_TRY(negative, a.b.mul(a.dY, shifted));
  return wherePositive(a, 0.0, a.dY, negative);
}

llvm::Expected<Value *> selu(const Activation &a) {
  // x > 0: gamma; x <= 0: y = gamma alpha (e^x - 1), dy/dx = y + gamma alpha.
  float alpha = a.attr("alpha", 1.67326319217681884765625f);
  float gamma = a.attr("gamma", 1.05070102214813232421875f);
  GMOPT_TRY(positive, a.b.mul(a.dY, a.scalar(gamma)));
  GMOPT_TRY(shifted, a.b.add(a.y, a.scalar(double(gamma) * alpha)));
  GMOPT_TRY(negative, a.b.mul(a.dY, shifted));
  return wherePositive(a, 0.0, positive, negative);
}

llvm::Expected<Value *> thresholdedRelu(const Activation &a) {
  return wherePositive(a, a.attr("alpha", 1.0f), a.dY, a.scalar(0.0));
}

llvm::Expected<Value *> hardSigmoid(const Activation &a) {
  // alpha where 0 < alpha x + beta < 1, i.e. 0 < y < 1.
  GMOPT_TRY(above, a.b.onnx("Greater", {a.y, a.scalar(0.0)}));
  GMOPT_TRY(below, a.b.onnx("Less", {a.y, a.scalar(1.0)}));
  GMOPT_TRY(inside, a.b.onnx("And", {above, below}));
  GMOPT_TRY(scaled, a.b.mul(a.dY, a.scalar(a.attr("alpha", 0.2f))));
  return a.b.onnx("Where", {inside, scaled, a.scalar(0.0)});
}

llvm::Expected<Value *> hardSwish(const Activation &a) {
  // y = x max(0, min(1, x/6 + 1/2)): 0 below -3, 1 above 3, x/3 + 1/2 between.
  GMOPT_TRY(slope, a.b.mul(a.x, a.scalar(1.0 / 3.0)));
  GMOPT_TRY(middle, a.b.add(slope, a.scalar(0.5)));
  GMOPT_TRY(middleGrad, a.b.mul(a.dY, middle));
  GMOPT_TRY(upper, wherePositive(a, 3.0, a.dY, middleGrad));
  GMOPT_TRY(low, a.b.onnx("Less", {a.x, a.scalar(-3.0)}));
  return a.b.onnx("Where", {low, a.scalar(0.0), upper});
}

llvm::Expected<Value *> softplus(const Activation &a) {
  GMOPT_TRY(sigmoid, a.b.onnx("Sigmoid", {a.x}));
  return a.b.mul(a.dY, sigmoid);
}

llvm::Expected<Value *> softsign(const Activation &a) {
  // 1 / (1 + |x|)^2.
  GMOPT_TRY(magnitude, a.b.onnx("Abs", {a.x}));
  GMOPT_TRY(denominator, a.b.add(magnitude, a.scalar(1.0)));
  GMOPT_TRY(square, a.b.mul(denominator, denominator));
  return a.b.div(a.dY, square);
}

llvm::Expected<Value *> mish(const Activation &a) {
  // y = x tanh(softplus(x)); y' = t + x sigmoid(x) (1 - t^2).
  GMOPT_TRY(soft, a.b.onnx("Softplus", {a.x}));
  GMOPT_TRY(t, a.b.onnx("Tanh", {soft}));
  GMOPT_TRY(square, a.b.mul(t, t));
  GMOPT_TRY(complement, a.b.sub(a.scalar(1.0), square));
  GMOPT_TRY(sigmoid, a.b.onnx("Sigmoid", {a.x}));
  GMOPT_TRY(product, a.b.mul(a.x, sigmoid));
  GMOPT_TRY(second, a.b.mul(product, complement));
  GMOPT_TRY(derivative, a.b.add(t, second));
  return a.b.mul(a.dY, derivative);
}

llvm::Expected<Value *> clip(const Activation &a) {
  // dY where min <= x <= max (the bounds carry no gradient).
  Value *inside = nullptr;
  const Node &node = a.node;
  for (unsigned i : {1u, 2u}) {
    Value *bound = node.getNumOperands() > i ? node.getOperand(i) : nullptr;
    // Clip-6 has its bounds as attributes.
    if (const Attribute *attr = node.getAttr(i == 1 ? "min" : "max"))
      bound = a.scalar(attr->getFloat());
    if (!bound)
      continue;
    GMOPT_TRY(test, a.b.onnx(i == 1 ? "GreaterOrEqual" : "LessOrEqual",
                             {a.x, bound}));
    if (inside) {
      GMOPT_TRY(both, a.b.onnx("And", {inside, test}));
      inside = both;
    } else {
      inside = test;
    }
  }
  if (!inside)
    return a.dY;
  return a.b.onnx("Where", {inside, a.dY, a.scalar(0.0)});
}

/// ONNX's Gelu (opset 20): the exact form is ONNX Runtime's Gelu (GeluGrad),
/// approximate="tanh" its FastGelu (FastGeluGrad).
llvm::Expected<Value *> onnxGelu(const Activation &a) {
  bool tanh = a.node.getStringAttr("approximate", "none") == "tanh";
  return a.b.microsoft(tanh ? "FastGeluGrad" : "GeluGrad", {a.dY, a.x});
}

llvm::Expected<Value *> quickGelu(const Activation &a) {
  return a.b.microsoft(
      "QuickGeluGrad", {a.dY, a.x},
      {{"alpha", Attribute::getFloat(a.attr("alpha", 1.702f))}});
}

/// PRelu(x, slope): x for x > 0, slope x otherwise (slope broadcast).
GradientRule preluRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0), *slope = node.getOperand(1);
    Value *zero = b.scalar(dtypeOf(x), 0.0);
    GMOPT_TRY(positive, b.onnx("Greater", {x, zero}));
    if (request.wanted[0]) {
      GMOPT_TRY(scaled, b.mul(dY, slope));
      GMOPT_TRY(selected, b.onnx("Where", {positive, dY, scaled}));
      GMOPT_TRY(reduced, b.reduceToShapeOf(selected, x));
      grads[0] = reduced;
    }
    if (request.wanted[1]) {
      GMOPT_TRY(product, b.mul(dY, x));
      GMOPT_TRY(selected, b.onnx("Where", {positive, zero, product}));
      GMOPT_TRY(reduced, b.reduceToShapeOf(selected, slope));
      grads[1] = reduced;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// BiasGelu(X, B) = Gelu(X + B): ONNX Runtime's BiasGeluGrad_dX(dY, X, B)
/// gives dX; dB is dX summed over the broadcast axes.
GradientRule biasGeluRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    GMOPT_TRY(dX, b.microsoft("BiasGeluGrad_dX",
                              {dY, node.getOperand(0), node.getOperand(1)}));
    if (request.wanted[0])
      grads[0] = dX;
    if (request.wanted[1]) {
      GMOPT_TRY(dB, b.reduceToShapeOf(dX, node.getOperand(1)));
      grads[1] = dB;
    }
    return llvm::Error::success();
  };
  return rule;
}

} // namespace

void gmopt::registerActivationGradients(GradientRuleTable &table) {
  table.add(kOnnxDomain, "LeakyRelu", activationRule(leakyRelu));
  table.add(kOnnxDomain, "Elu", activationRule(elu));
  table.add(kOnnxDomain, "Celu", activationRule(celu));
  table.add(kOnnxDomain, "Selu", activationRule(selu));
  table.add(kOnnxDomain, "ThresholdedRelu", activationRule(thresholdedRelu));
  table.add(kOnnxDomain, "HardSigmoid", activationRule(hardSigmoid));
  table.add(kOnnxDomain, "HardSwish", activationRule(hardSwish));
  table.add(kOnnxDomain, "Softplus", activationRule(softplus));
  table.add(kOnnxDomain, "Softsign", activationRule(softsign));
  table.add(kOnnxDomain, "Mish", activationRule(mish));
  table.add(kOnnxDomain, "Clip", activationRule(clip));
  table.add(kOnnxDomain, "PRelu", preluRule());
  table.add(kMsDomain, "QuickGelu", activationRule(quickGelu));
  table.add(kOnnxDomain, "Gelu", activationRule(onnxGelu));
  table.add(kMsDomain, "BiasGelu", biasGeluRule());
}
