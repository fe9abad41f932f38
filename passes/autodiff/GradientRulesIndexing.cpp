//===- GradientRulesIndexing.cpp - Gradients of scatter, einsum, NLL ------===//
//
// Gradient rules of the ops that address elements by index or by an
// equation: ScatterElements and ScatterND (the overwritten positions of
// the data get no gradient, the updates read dY there), Einsum of two
// operands (each operand's gradient is an Einsum of dY and the other
// operand), NegativeLogLikelihoodLoss (the gradient is -dY at each target
// class, a OneHot), ONNX Runtime's FusedMatMul and Scale, and Mod.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

#include "ir/ops/EinsumSpec.h"
#include "ir/ops/LossReduction.h"
#include "ir/ops/ScatterReduction.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace gmopt;

namespace {

DType dtypeOf(const Value *value) { return value->getType().getDType(); }

/// ScatterElements / ScatterND (reduction none): dData is dY with the
/// scattered positions zeroed, dUpdates is dY gathered at them.
GradientRule scatterRule(bool elements) {
  GradientRule rule;
  rule.differentiableOperands = {0, 2};
  rule.emit = [elements](GradientBuilder &b, const GradientRequest &request,
                         Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    auto reduction = ops::getScatterReduction(node);
    if (!reduction || *reduction != ops::ScatterReduction::None) {
      llvm::consumeError(reduction.takeError());
      return gradientError(node, "only reduction=none scatters have a "
                                 "gradient rule");
    }
    Value *indices = node.getOperand(1), *updates = node.getOperand(2);
    llvm::SmallVector<NamedAttribute, 1> attrs;
    if (elements)
      attrs.push_back({"axis", Attribute::getInt(node.getIntAttr("axis", 0))});
    if (request.wanted[0]) {
      GMOPT_TRY(zeros, b.zerosLike(updates));
      GMOPT_TRY(cleared, b.onnx(elements ? "ScatterElements" : "ScatterND",
                                {dY, indices, zeros}, attrs));
      grads[0] = cleared;
    }
    if (request.wanted[2]) {
      GMOPT_TRY(gathered, b.onnx(elements ? "GatherElements" : "GatherND",
                                 {dY, indices}, attrs));
      grads[2] = gathered;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Einsum of two operands without ellipses, repeated letters within an
/// operand, or letters only one operand has and the result drops (their
/// gradient would need a broadcast an Einsum cannot write):
/// dA = einsum("out,b->a", dY, B), dB = einsum("a,out->b", A, dY).
GradientRule einsumRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    auto spec = ops::EinsumSpec::parse(node.getStringAttr("equation", ""));
    if (!spec)
      return gradientError(node, llvm::toString(spec.takeError()));
    if (node.getNumOperands() != 2 || spec->getNumInputs() != 2 ||
        !spec->hasExplicitOutput() || spec->hasEllipsis() ||
        spec->getOutput().hasEllipsis())
      return gradientError(node, "Einsum gradients need two operands and an "
                                 "explicit output without ellipses");
    for (const ops::EinsumTerm &term : spec->getInputs()) {
      if (term.hasRepeatedLetter())
        return gradientError(node, "Einsum with a repeated letter in an "
                                   "operand has no gradient rule");
      for (int label : term.letters)
        if (spec->getLetterRole(label) == ops::EinsumRole::Contracted &&
            spec->getNumOperandsWith(label) == 1)
          return gradientError(node, "Einsum summing a letter of one operand "
                                     "alone has no gradient rule");
    }
    std::string terms[2] = {spec->getInput(0).str(), spec->getInput(1).str()};
    std::string output = spec->getOutput().str();
    for (unsigned i : {0u, 1u}) {
      if (!request.wanted[i])
        continue;
      Value *other = node.getOperand(1 - i);
      std::string gradEquation =
          (i == 0 ? output + "," + terms[1] : terms[0] + "," + output) + "->" +
          terms[i];
      llvm::SmallVector<Value *, 2> operands =
          i == 0 ? llvm::SmallVector<Value *, 2>{dY, other}
                 : llvm::SmallVector<Value *, 2>{other, dY};
      GMOPT_TRY(grad,
                b.onnx("Einsum", operands,
                       {{"equation", Attribute::getString(gradEquation)}}));
      grads[i] = grad;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// NegativeLogLikelihoodLoss(input [N, C], target [N]) without weights or
/// ignore_index: dInput = -OneHot(target) * dY (/ N for mean).
GradientRule nllLossRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    const TensorType &type = node.getOperand(0)->getType();
    if (node.getNumOperands() > 2 || node.getAttr("ignore_index") ||
        !type.hasStaticShape() || type.getRank() != 2)
      return gradientError(node, "NegativeLogLikelihoodLoss gradients need a "
                                 "static [N, C] input, no weights and no "
                                 "ignore_index");
    int64_t rows = type.getDim(0).getExtent(),
            classes = type.getDim(1).getExtent();
    auto reduction = ops::getLossReduction(node);
    if (!reduction)
      return gradientError(node, llvm::toString(reduction.takeError()));
    DType dtype = dtypeOf(dY);
    Value *offOn = b.getGraph().addInitializer(
        dtype == DType::F64
            ? TensorData::fromValues<double>(dtype, {2}, {0.0, -1.0})
            : TensorData::fromValues<float>(DType::F32, {2}, {0.0f, -1.0f}),
        "autodiff/nll_off_on_" + std::to_string(b.getGraph().getNumNodes()));
    Value *depth = b.getGraph().addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, {}, {classes}),
        "autodiff/nll_depth_" + std::to_string(b.getGraph().getNumNodes()));
    GMOPT_TRY(picked, b.onnx("OneHot", {node.getOperand(1), depth, offOn},
                             {{"axis", Attribute::getInt(-1)}}));
    Value *scale = dY;
    if (*reduction == ops::LossReduction::None) {
      GMOPT_TRY(column, b.onnx("Unsqueeze", {dY, b.int64s({1})}));
      scale = column;
    } else if (*reduction == ops::LossReduction::Mean) {
      GMOPT_TRY(mean, b.mul(dY, b.scalar(dtype, 1.0 / double(rows))));
      scale = mean;
    }
    GMOPT_TRY(grad, b.mul(picked, scale));
    grads[0] = grad;
    return llvm::Error::success();
  };
  return rule;
}

/// FusedMatMul: alpha * op(A) op(B) over the last two axes.
GradientRule fusedMatMulRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (node.getIntAttr("transBatchA", 0) || node.getIntAttr("transBatchB", 0))
      return gradientError(node, "FusedMatMul with batch transposes has no "
                                 "gradient rule");
    Value *a = node.getOperand(0), *bm = node.getOperand(1);
    bool transA = node.getIntAttr("transA", 0),
         transB = node.getIntAttr("transB", 0);
    float alpha = node.getFloatAttr("alpha", 1.0f);
    auto fused = [&](Value *lhs, Value *rhs, bool tl,
                     bool tr) -> llvm::Expected<Value *> {
      return b.microsoft("FusedMatMul", {lhs, rhs},
                         {{"alpha", Attribute::getFloat(alpha)},
                          {"transA", Attribute::getInt(tl)},
                          {"transB", Attribute::getInt(tr)}});
    };
    if (request.wanted[0]) {
      auto dA =
          transA ? fused(bm, dY, transB, true) : fused(dY, bm, false, !transB);
      if (!dA)
        return dA.takeError();
      GMOPT_TRY(reduced, b.reduceToShapeOf(*dA, a));
      grads[0] = reduced;
    }
    if (request.wanted[1]) {
      auto dB =
          transB ? fused(dY, a, true, transA) : fused(a, dY, !transA, false);
      if (!dB)
        return dB.takeError();
      GMOPT_TRY(reduced, b.reduceToShapeOf(*dB, bm));
      grads[1] = reduced;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Scale(X, s): X * s (or X / s with scale_down); s carries no gradient.
GradientRule scaleRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    GMOPT_TRY(grad,
              b.microsoft("Scale", {dY, node.getOperand(1)},
                          {{"scale_down", Attribute::getInt(node.getIntAttr(
                                              "scale_down", 0))}}));
    grads[0] = grad;
    return llvm::Error::success();
  };
  return rule;
}

/// Mod (floats, fmod=1; or integers, which carry no gradient):
/// a - b trunc(a/b) (fmod=1) or a - b floor(a/b) (fmod=0), so dA = dY and
/// dB = -dY * trunc(a/b) (or floor).
GradientRule modRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *a = node.getOperand(0), *d = node.getOperand(1);
    if (request.wanted[0]) {
      GMOPT_TRY(reduced, b.reduceToShapeOf(dY, a));
      grads[0] = reduced;
    }
    if (request.wanted[1]) {
      GMOPT_TRY(quotient, b.div(a, d));
      Value *whole = nullptr;
      if (node.getIntAttr("fmod", 0)) {
        GMOPT_TRY(sign, b.onnx("Sign", {quotient}));
        GMOPT_TRY(magnitude, b.onnx("Abs", {quotient}));
        GMOPT_TRY(floor, b.onnx("Floor", {magnitude}));
        GMOPT_TRY(trunc, b.mul(sign, floor));
        whole = trunc;
      } else {
        GMOPT_TRY(floor, b.onnx("Floor", {quotient}));
        whole = floor;
      }
      GMOPT_TRY(product, b.mul(dY, whole));
      GMOPT_TRY(negated, b.neg(product));
      GMOPT_TRY(reduced, b.reduceToShapeOf(negated, d));
      grads[1] = reduced;
    }
    return llvm::Error::success();
  };
  return rule;
}

} // namespace

void gmopt::registerIndexingGradients(GradientRuleTable &table) {
  table.add(kOnnxDomain, "ScatterElements", scatterRule(true));
  table.add(kOnnxDomain, "ScatterND", scatterRule(false));
  table.add(kOnnxDomain, "Einsum", einsumRule());
  table.add(kOnnxDomain, "NegativeLogLikelihoodLoss", nllLossRule());
  // ONNX Runtime's internal forms take the same operands first.
  table.add(kMsDomain, "NegativeLogLikelihoodLossInternal", nllLossRule());
  table.add(kMsDomain, "NegativeLogLikelihoodLossInternal2", nllLossRule());
  table.add(kMsDomain, "FusedMatMul", fusedMatMulRule());
  table.add(kMsDomain, "Scale", scaleRule());
  table.add(kOnnxDomain, "Mod", modRule());
}
