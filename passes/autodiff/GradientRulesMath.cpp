//===- GradientRulesMath.cpp - Gradients of arithmetic and products -------===//
//
// Gradient rules of elementwise arithmetic (with ONNX broadcasting: a
// broadcast operand's gradient is summed back to its shape), unary math
// functions, Where, Gemm, MatMul and the reductions. Where ONNX Runtime's
// gradient builder uses a com.microsoft op (ReluGrad, SigmoidGrad, TanhGrad,
// FusedMatMul) the rule emits the same op; Atan, Asin, Acos, Sin, Cos, Tan
// and the other functions ONNX Runtime cannot differentiate are expressed in
// standard ops.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/Axes.h"
#include "ir/ops/ReduceAxes.h"
#include "passes/autodiff/GradientRules.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <numeric>

using namespace gmopt;

namespace {

DType dtypeOf(const Value *value) { return value->getType().getDType(); }

//===----------------------------------------------------------------------===//
// Unary functions: dX = dY * f'(X)
//===----------------------------------------------------------------------===//

/// A rule computing dX from dY, X and Y with \p derivative.
GradientRule
unaryRule(std::function<llvm::Expected<Value *>(GradientBuilder &, Value *dY,
                                                Value *x, Value *y)>
              derivative) {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [derivative](GradientBuilder &b, const GradientRequest &request,
                           Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    return assign(grads[0], derivative(b, dY, request.node.getOperand(0),
                                       request.node.getResult(0)));
  };
  return rule;
}

/// dY * factor(X, Y).
GradientRule
productRule(std::function<llvm::Expected<Value *>(GradientBuilder &, Value *x,
                                                  Value *y)>
                factor) {
  return unaryRule([factor](GradientBuilder &b, Value *dY, Value *x,
                            Value *y) -> llvm::Expected<Value *> {
    GMOPT_TRY(f, factor(b, x, y));
    return b.mul(dY, f);
  });
}

void registerUnary(GradientRuleTable &table) {
  table.add(kOnnxDomain, "Identity",
            unaryRule([](GradientBuilder &, Value *dY, Value *,
                         Value *) -> llvm::Expected<Value *> { return dY; }));
  table.add(kOnnxDomain, "Neg",
            unaryRule([](GradientBuilder &b, Value *dY, Value *, Value *) {
              return b.neg(dY);
            }));
  // ONNX Runtime's gradient ops of activations.
  table.add(kOnnxDomain, "Relu",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.microsoft("ReluGrad", {dY, x});
            }));
  table.add(kOnnxDomain, "Sigmoid",
            unaryRule([](GradientBuilder &b, Value *dY, Value *, Value *y) {
              return b.microsoft("SigmoidGrad", {dY, y});
            }));
  table.add(kOnnxDomain, "Tanh",
            unaryRule([](GradientBuilder &b, Value *dY, Value *, Value *y) {
              return b.microsoft("TanhGrad", {dY, y});
            }));
  table.add(kMsDomain, "Gelu",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.microsoft("GeluGrad", {dY, x});
            }));
  table.add(kMsDomain, "FastGelu",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.microsoft("FastGeluGrad", {dY, x});
            }));
  // Standard-op derivatives.
  table.add(kOnnxDomain, "Exp",
            productRule([](GradientBuilder &, Value *,
                           Value *y) -> llvm::Expected<Value *> { return y; }));
  table.add(kOnnxDomain, "Log",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.div(dY, x);
            }));
  table.add(kOnnxDomain, "Sqrt",
            unaryRule([](GradientBuilder &b, Value *dY, Value *,
                         Value *y) -> llvm::Expected<Value *> {
              // d sqrt(x) = 1 / (2 sqrt(x)).
              GMOPT_TRY(half, b.mul(dY, b.scalar(dtypeOf(dY), 0.5)));
              return b.div(half, y);
            }));
  table.add(kOnnxDomain, "Reciprocal",
            unaryRule([](GradientBuilder &b, Value *dY, Value *,
                         Value *y) -> llvm::Expected<Value *> {
              GMOPT_TRY(square, b.mul(y, y));
              GMOPT_TRY(product, b.mul(dY, square));
              return b.neg(product);
            }));
  table.add(kOnnxDomain, "Abs",
            productRule([](GradientBuilder &b, Value *x, Value *) {
              return b.onnx("Sign", {x});
            }));
  table.add(kOnnxDomain, "Erf",
            productRule([](GradientBuilder &b, Value *x,
                           Value *) -> llvm::Expected<Value *> {
              // d erf(x) = 2/sqrt(pi) * exp(-x^2).
              GMOPT_TRY(square, b.mul(x, x));
              GMOPT_TRY(negated, b.neg(square));
              GMOPT_TRY(exp, b.onnx("Exp", {negated}));
              return b.mul(exp, b.scalar(dtypeOf(x), 2.0 / std::sqrt(M_PI)));
            }));
  table.add(kOnnxDomain, "Sin",
            productRule([](GradientBuilder &b, Value *x, Value *) {
              return b.onnx("Cos", {x});
            }));
  table.add(kOnnxDomain, "Cos",
            productRule([](GradientBuilder &b, Value *x,
                           Value *) -> llvm::Expected<Value *> {
              GMOPT_TRY(sin, b.onnx("Sin", {x}));
              return b.neg(sin);
            }));
  table.add(kOnnxDomain, "Tan",
            productRule([](GradientBuilder &b, Value *,
                           Value *y) -> llvm::Expected<Value *> {
              // 1 + tan^2.
              GMOPT_TRY(square, b.mul(y, y));
              return b.add(square, b.scalar(dtypeOf(y), 1.0));
            }));
  table.add(kOnnxDomain, "Atan",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x,
                         Value *) -> llvm::Expected<Value *> {
              // 1 / (1 + x^2).
              GMOPT_TRY(square, b.mul(x, x));
              GMOPT_TRY(denominator, b.add(square, b.scalar(dtypeOf(x), 1.0)));
              return b.div(dY, denominator);
            }));
  auto inverseSqrtOf = [](bool minusSquare, bool negate) {
    // asin: 1/sqrt(1-x^2), acos: -1/sqrt(1-x^2), asinh: 1/sqrt(x^2+1),
    // acosh: 1/sqrt(x^2-1).
    return [minusSquare, negate](GradientBuilder &b, Value *dY, Value *x,
                                 Value *) -> llvm::Expected<Value *> {
      GMOPT_TRY(square, b.mul(x, x));
      Value *one = b.scalar(dtypeOf(x), 1.0);
      GMOPT_TRY(inner, minusSquare ? b.sub(one, square) : b.add(square, one));
      GMOPT_TRY(root, b.onnx("Sqrt", {inner}));
      GMOPT_TRY(quotient, b.div(dY, root));
      return negate ? b.neg(quotient) : llvm::Expected<Value *>(quotient);
    };
  };
  table.add(kOnnxDomain, "Asin", unaryRule(inverseSqrtOf(true, false)));
  table.add(kOnnxDomain, "Acos", unaryRule(inverseSqrtOf(true, true)));
  table.add(kOnnxDomain, "Asinh", unaryRule(inverseSqrtOf(false, false)));
  table.add(kOnnxDomain, "Acosh",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x,
                         Value *) -> llvm::Expected<Value *> {
              GMOPT_TRY(square, b.mul(x, x));
              GMOPT_TRY(inner, b.sub(square, b.scalar(dtypeOf(x), 1.0)));
              GMOPT_TRY(root, b.onnx("Sqrt", {inner}));
              return b.div(dY, root);
            }));
  table.add(kOnnxDomain, "Atanh",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x,
                         Value *) -> llvm::Expected<Value *> {
              GMOPT_TRY(square, b.mul(x, x));
              GMOPT_TRY(inner, b.sub(b.scalar(dtypeOf(x), 1.0), square));
              return b.div(dY, inner);
            }));
  table.add(kOnnxDomain, "Sinh",
            productRule([](GradientBuilder &b, Value *x, Value *) {
              return b.onnx("Cosh", {x});
            }));
  table.add(kOnnxDomain, "Cosh",
            productRule([](GradientBuilder &b, Value *x, Value *) {
              return b.onnx("Sinh", {x});
            }));
  table.add(kOnnxDomain, "CastLike",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.onnx("CastLike", {dY, x});
            }));
  // A float-to-float Cast: its gradient is cast back.
  table.add(kOnnxDomain, "Cast",
            unaryRule([](GradientBuilder &b, Value *dY, Value *x, Value *) {
              return b.onnx("Cast", {dY},
                            {{"to", Attribute::getInt(
                                        static_cast<int64_t>(dtypeOf(x)))}});
            }));
}

//===----------------------------------------------------------------------===//
// Binary arithmetic with broadcasting
//===----------------------------------------------------------------------===//

GradientRule addRule(bool subtract) {
  GradientRule rule;
  rule.emit = [subtract](GradientBuilder &b, const GradientRequest &request,
                         Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (request.wanted[0])
      if (auto err =
              assign(grads[0], b.reduceToShapeOf(dY, node.getOperand(0))))
        return err;
    if (request.wanted[1]) {
      Value *contribution = dY;
      if (subtract) {
        GMOPT_TRY(negated, b.neg(dY));
        contribution = negated;
      }
      if (auto err = assign(
              grads[1], b.reduceToShapeOf(contribution, node.getOperand(1))))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

GradientRule mulRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Value *lhs = request.node.getOperand(0), *rhs = request.node.getOperand(1);
    for (unsigned i : {0u, 1u}) {
      if (!request.wanted[i])
        continue;
      GMOPT_TRY(product, b.mul(dY, i == 0 ? rhs : lhs));
      if (auto err = assign(
              grads[i], b.reduceToShapeOf(product, request.node.getOperand(i))))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

GradientRule divRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *lhs = node.getOperand(0), *rhs = node.getOperand(1);
    if (request.wanted[0]) {
      GMOPT_TRY(quotient, b.div(dY, rhs));
      if (auto err = assign(grads[0], b.reduceToShapeOf(quotient, lhs)))
        return err;
    }
    if (request.wanted[1]) {
      // d(a/b)/db = -a/b^2 = -y/b.
      GMOPT_TRY(product, b.mul(dY, node.getResult(0)));
      GMOPT_TRY(quotient, b.div(product, rhs));
      GMOPT_TRY(negated, b.neg(quotient));
      if (auto err = assign(grads[1], b.reduceToShapeOf(negated, rhs)))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

GradientRule powRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *base = node.getOperand(0), *exponent = node.getOperand(1);
    if (request.wanted[0]) {
      // d x^e / dx = e * x^(e-1); the exponent may be an integer tensor.
      Value *floatExponent = exponent;
      if (dtypeOf(exponent) != dtypeOf(base)) {
        GMOPT_TRY(cast, b.onnx("Cast", {exponent},
                               {{"to", Attribute::getInt(static_cast<int64_t>(
                                           dtypeOf(base)))}}));
        floatExponent = cast;
      }
      GMOPT_TRY(lowered, b.sub(floatExponent, b.scalar(dtypeOf(base), 1.0)));
      GMOPT_TRY(power, b.onnx("Pow", {base, lowered}));
      GMOPT_TRY(scaled, b.mul(power, floatExponent));
      GMOPT_TRY(product, b.mul(dY, scaled));
      if (auto err = assign(grads[0], b.reduceToShapeOf(product, base)))
        return err;
    }
    if (request.wanted[1]) {
      // d x^e / de = x^e * ln(x).
      GMOPT_TRY(log, b.onnx("Log", {base}));
      GMOPT_TRY(factor, b.mul(node.getResult(0), log));
      GMOPT_TRY(product, b.mul(dY, factor));
      if (auto err = assign(grads[1], b.reduceToShapeOf(product, exponent)))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Sum and Mean: every operand gets dY (scaled by 1/n for Mean).
GradientRule variadicSumRule(bool mean) {
  GradientRule rule;
  rule.emit = [mean](GradientBuilder &b, const GradientRequest &request,
                     Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *contribution = dY;
    if (mean) {
      GMOPT_TRY(scaled,
                b.mul(dY, b.scalar(dtypeOf(dY), 1.0 / node.getNumOperands())));
      contribution = scaled;
    }
    for (unsigned i = 0; i != node.getNumOperands(); ++i)
      if (request.wanted[i])
        if (auto err = assign(
                grads[i], b.reduceToShapeOf(contribution, node.getOperand(i))))
          return err;
    return llvm::Error::success();
  };
  return rule;
}

/// Where(cond, X, Y): X gets dY where cond holds, Y elsewhere.
GradientRule whereRule() {
  GradientRule rule;
  rule.differentiableOperands = {1, 2};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *zero = b.scalar(dtypeOf(dY), 0.0);
    for (unsigned i : {1u, 2u}) {
      if (!request.wanted[i])
        continue;
      GMOPT_TRY(selected,
                b.onnx("Where", {node.getOperand(0), i == 1 ? dY : zero,
                                 i == 1 ? zero : dY}));
      if (auto err =
              assign(grads[i], b.reduceToShapeOf(selected, node.getOperand(i))))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Max/Min of two operands: the gradient goes to the one selected.
GradientRule minMaxRule(bool isMax) {
  GradientRule rule;
  rule.emit = [isMax](GradientBuilder &b, const GradientRequest &request,
                      Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (node.getNumOperands() != 2)
      return gradientError(node, "Max/Min gradients need two operands");
    Value *lhs = node.getOperand(0), *rhs = node.getOperand(1);
    // Ties go to the first operand, as in torch.maximum's subgradient.
    GMOPT_TRY(firstWins,
              b.onnx(isMax ? "GreaterOrEqual" : "LessOrEqual", {lhs, rhs}));
    Value *zero = b.scalar(dtypeOf(dY), 0.0);
    for (unsigned i : {0u, 1u}) {
      if (!request.wanted[i])
        continue;
      GMOPT_TRY(selected, b.onnx("Where", {firstWins, i == 0 ? dY : zero,
                                           i == 0 ? zero : dY}));
      if (auto err =
              assign(grads[i], b.reduceToShapeOf(selected, node.getOperand(i))))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

//===----------------------------------------------------------------------===//
// Products
//===----------------------------------------------------------------------===//

/// Y = alpha * op(A) op(B) + beta * C.
GradientRule gemmRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *a = node.getOperand(0), *bMatrix = node.getOperand(1);
    bool transA = node.getIntAttr("transA", 0) != 0;
    bool transB = node.getIntAttr("transB", 0) != 0;
    float alpha = node.getFloatAttr("alpha", 1.0f);
    float beta = node.getFloatAttr("beta", 1.0f);
    auto gemm = [&](Value *lhs, Value *rhs, bool tl,
                    bool tr) -> llvm::Expected<Value *> {
      return b.onnx("Gemm", {lhs, rhs},
                    {{"alpha", Attribute::getFloat(alpha)},
                     {"transA", Attribute::getInt(tl)},
                     {"transB", Attribute::getInt(tr)}});
    };
    if (request.wanted[0]) {
      // dA' = dY B'^T; dA = dA' or dA'^T.
      auto dA = transA ? (transB ? gemm(bMatrix, dY, true, true)
                                 : gemm(bMatrix, dY, false, true))
                       : (transB ? gemm(dY, bMatrix, false, false)
                                 : gemm(dY, bMatrix, false, true));
      if (auto err = assign(grads[0], std::move(dA)))
        return err;
    }
    if (request.wanted[1]) {
      // dB' = A'^T dY; dB = dB' or dB'^T.
      auto dB =
          transB
              ? (transA ? gemm(dY, a, true, true) : gemm(dY, a, true, false))
              : (transA ? gemm(a, dY, false, false) : gemm(a, dY, true, false));
      if (auto err = assign(grads[1], std::move(dB)))
        return err;
    }
    if (node.getNumOperands() > 2 && request.wanted[2]) {
      Value *contribution = dY;
      if (beta != 1.0f) {
        GMOPT_TRY(scaled, b.mul(dY, b.scalar(dtypeOf(dY), beta)));
        contribution = scaled;
      }
      if (auto err = assign(
              grads[2], b.reduceToShapeOf(contribution, node.getOperand(2))))
        return err;
    }
    return llvm::Error::success();
  };
  return rule;
}

/// Y = A B with numpy broadcasting of the batch dimensions (ONNX Runtime
/// emits FusedMatMul with transposed operands).
GradientRule matMulRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *a = node.getOperand(0), *bMatrix = node.getOperand(1);
    const TensorType &aType = a->getType(), &bType = bMatrix->getType();
    if (!aType.hasRank() || !bType.hasRank() || aType.getRank() < 2 ||
        bType.getRank() < 2)
      return gradientError(node, "MatMul gradients need operands of rank 2 "
                                 "or more");
    auto fused = [&](Value *lhs, Value *rhs, bool tl,
                     bool tr) -> llvm::Expected<Value *> {
      return b.microsoft("FusedMatMul", {lhs, rhs},
                         {{"transA", Attribute::getInt(tl)},
                          {"transB", Attribute::getInt(tr)}});
    };
    if (request.wanted[0]) {
      GMOPT_TRY(dA, fused(dY, bMatrix, false, true));
      if (auto err = assign(grads[0], b.reduceToShapeOf(dA, a)))
        return err;
    }
    if (request.wanted[1]) {
      unsigned aRank = aType.getRank();
      const Dim &k = aType.getDim(aRank - 1);
      const Dim &n = bType.getDim(1);
      if (bType.getRank() == 2 && aRank > 2 && k.isStatic() && n.isStatic()) {
        // A weight shared by every batch row: one [rows, K]^T [rows, N]
        // product instead of a batched one summed afterwards.
        GMOPT_TRY(rowsA, b.onnx("Reshape", {a, b.int64s({-1, k.getExtent()})}));
        GMOPT_TRY(rowsY,
                  b.onnx("Reshape", {dY, b.int64s({-1, n.getExtent()})}));
        if (auto err = assign(grads[1], fused(rowsA, rowsY, true, false)))
          return err;
      } else {
        GMOPT_TRY(dB, fused(a, dY, true, false));
        if (auto err = assign(grads[1], b.reduceToShapeOf(dB, bMatrix)))
          return err;
      }
    }
    return llvm::Error::success();
  };
  return rule;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// The reduced axes of \p node (ops::ReduceAxes: normalized, sorted), from
/// the `axes` attribute or the constant second operand.
llvm::Expected<ops::ReduceAxes>
reducedAxes(const Node &node, const ops::ReduceSpec &spec, unsigned rank) {
  std::optional<std::vector<int64_t>> values =
      ops::getStaticReduceAxes(node, spec);
  if (!values)
    return gradientError(node, "the reduced axes must be a constant");
  auto axes = spec.resolve(rank, *values);
  if (!axes)
    return gradientError(node, llvm::toString(axes.takeError()));
  return std::move(*axes);
}

/// The reductions: dY (in keepdims form) times the derivative of the
/// reduced function with respect to each element.
enum class Reduction {
  Sum,
  Mean,
  SumSquare,
  L1,
  L2,
  LogSum,
  LogSumExp,
  Max,
  Min,
  Prod
};

GradientRule reduceRule(Reduction kind) {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [kind](GradientBuilder &b, const GradientRequest &request,
                     Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0), *y = node.getResult(0);
    const TensorType &xType = x->getType();
    if (!xType.hasRank())
      return gradientError(node, "reduction gradients need a ranked input");
    ops::ReduceSpec spec = ops::getReduceSpec(node);
    auto reduced = reducedAxes(node, spec, xType.getRank());
    if (!reduced)
      return reduced.takeError();
    std::vector<int64_t> axes(reduced->axes.begin(), reduced->axes.end());
    // dY and Y with the reduced axes kept (as ones), to broadcast against X.
    Value *grad = dY, *kept = y;
    if (!reduced->keepDims && !axes.empty()) {
      GMOPT_TRY(unsqueezed, b.onnx("Unsqueeze", {dY, b.int64s(axes)}));
      grad = unsqueezed;
      if (kind != Reduction::Sum && kind != Reduction::Mean) {
        GMOPT_TRY(keptY, b.onnx("Unsqueeze", {y, b.int64s(axes)}));
        kept = keptY;
      }
    }
    DType dtype = dtypeOf(dY);
    llvm::Expected<Value *> result = nullptr;
    switch (kind) {
    case Reduction::Sum:
    case Reduction::LogSum:
    case Reduction::Mean: {
      if (kind == Reduction::Mean) {
        uint64_t count = 1;
        for (int64_t axis : axes) {
          const Dim &dim = xType.getDim(axis);
          if (!dim.isStatic())
            return gradientError(node, "ReduceMean's gradient needs static "
                                       "reduced dimensions");
          count *= dim.getExtent();
        }
        GMOPT_TRY(scaled, b.mul(grad, b.scalar(dtype, 1.0 / double(count))));
        grad = scaled;
      } else if (kind == Reduction::LogSum) {
        // d log(sum x) / dx = 1 / sum x = e^-y.
        GMOPT_TRY(sum, b.onnx("Exp", {kept}));
        GMOPT_TRY(scaled, b.div(grad, sum));
        grad = scaled;
      }
      GMOPT_TRY(shape, b.shapeOf(x));
      result = b.onnx("Expand", {grad, shape});
      break;
    }
    case Reduction::SumSquare: {
      GMOPT_TRY(twice, b.mul(x, b.scalar(dtype, 2.0)));
      result = b.mul(grad, twice);
      break;
    }
    case Reduction::L1: {
      GMOPT_TRY(sign, b.onnx("Sign", {x}));
      result = b.mul(grad, sign);
      break;
    }
    case Reduction::L2: {
      GMOPT_TRY(ratio, b.div(x, kept));
      result = b.mul(grad, ratio);
      break;
    }
    case Reduction::LogSumExp: {
      GMOPT_TRY(shifted, b.sub(x, kept));
      GMOPT_TRY(softmax, b.onnx("Exp", {shifted}));
      result = b.mul(grad, softmax);
      break;
    }
    case Reduction::Max:
    case Reduction::Min: {
      // Every element equal to the extreme gets the gradient (as ONNX
      // Runtime's ReduceMax gradient does).
      GMOPT_TRY(equal, b.onnx("Equal", {x, kept}));
      GMOPT_TRY(selected, b.onnx("Where", {equal, grad, b.scalar(dtype, 0.0)}));
      GMOPT_TRY(shape, b.shapeOf(x));
      result = b.onnx("Expand", {selected, shape});
      break;
    }
    case Reduction::Prod: {
      GMOPT_TRY(ratio, b.div(kept, x));
      result = b.mul(grad, ratio);
      break;
    }
    }
    return assign(grads[0], std::move(result));
  };
  return rule;
}

} // namespace

void gmopt::registerMathGradients(GradientRuleTable &table) {
  registerUnary(table);
  table.add(kOnnxDomain, "Add", addRule(false));
  table.add(kOnnxDomain, "Sub", addRule(true));
  table.add(kOnnxDomain, "Mul", mulRule());
  table.add(kOnnxDomain, "Div", divRule());
  table.add(kOnnxDomain, "Pow", powRule());
  table.add(kOnnxDomain, "Sum", variadicSumRule(false));
  table.add(kOnnxDomain, "Mean", variadicSumRule(true));
  table.add(kOnnxDomain, "Max", minMaxRule(true));
  table.add(kOnnxDomain, "Min", minMaxRule(false));
  table.add(kOnnxDomain, "Where", whereRule());
  table.add(kOnnxDomain, "Gemm", gemmRule());
  table.add(kOnnxDomain, "MatMul", matMulRule());
  table.add(kOnnxDomain, "ReduceSum", reduceRule(Reduction::Sum));
  table.add(kOnnxDomain, "ReduceMean", reduceRule(Reduction::Mean));
  table.add(kOnnxDomain, "ReduceSumSquare", reduceRule(Reduction::SumSquare));
  table.add(kOnnxDomain, "ReduceL1", reduceRule(Reduction::L1));
  table.add(kOnnxDomain, "ReduceL2", reduceRule(Reduction::L2));
  table.add(kOnnxDomain, "ReduceLogSum", reduceRule(Reduction::LogSum));
  table.add(kOnnxDomain, "ReduceLogSumExp", reduceRule(Reduction::LogSumExp));
  table.add(kOnnxDomain, "ReduceMax", reduceRule(Reduction::Max));
  table.add(kOnnxDomain, "ReduceMin", reduceRule(Reduction::Min));
  table.add(kOnnxDomain, "ReduceProd", reduceRule(Reduction::Prod));
  // Piecewise-constant functions and predicates: no gradient flows.
  for (llvm::StringRef op :
       {"Sign", "Floor", "Ceil", "Round", "Equal", "Less", "Greater",
        "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN",
        "IsInf", "ArgMax", "ArgMin"})
    table.addNonDifferentiable(kOnnxDomain, op);
}
