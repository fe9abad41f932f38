//===- ElementwiseMath.h - Per-element math of CUDA kernels -----*- C++ -*-===//
//
// The arithmetic the CUDA kernels apply to one element, written once as
// `__host__ __device__` inline functions so that the same code runs in the
// kernels (backend/cuda/*.cu) and in host unit tests that compare it with
// the CPU kernels on random inputs (tests/unit/CudaElementwiseMathTest.cpp,
// which runs without a GPU). Compiled by a host compiler the annotations
// vanish. Everything computes in fp32, as the CPU backend does: 16-bit
// tensors are widened on load and rounded to nearest even on store by
// ir/Half.h's conversions, which are host and device code.
//
// The op codes are runtime values, not template parameters: one kernel per
// storage type serves every op (a switch that is uniform across a warp), so
// the CUDA objects stay small and quick to compile.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_ELEMENTWISEMATH_H
#define GMOPT_BACKEND_CUDA_ELEMENTWISEMATH_H

#include "ir/Half.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GMOPT_HD __host__ __device__ __forceinline__
#else
#define GMOPT_HD inline
#endif

namespace gmopt {
namespace cuda {

//===----------------------------------------------------------------------===//
// 16-bit floats (ir/Half.h's conversions)
//===----------------------------------------------------------------------===//

// One implementation, ir/Half.h's (host and device); the names the kernels
// use forward to it.

/// The bits of \p value.
GMOPT_HD uint32_t bitsOfFloat(float value) { return floatBits(value); }

/// The float whose bits are \p bits.
GMOPT_HD float floatOfBits(uint32_t bits) { return floatFromBits(bits); }

/// Widens IEEE binary16 bits to fp32 (exact).
GMOPT_HD float widenHalf(uint16_t half) { return halfToFloat(half); }

/// Narrows fp32 to IEEE binary16 bits, rounding to nearest even.
GMOPT_HD uint16_t narrowToHalf(float value) { return floatToHalf(value); }

/// Widens bfloat16 bits to fp32 (exact).
GMOPT_HD float widenBFloat16(uint16_t value) { return bfloat16ToFloat(value); }

/// Narrows fp32 to bfloat16 bits, rounding to nearest even.
GMOPT_HD uint16_t narrowToBFloat16(float value) {
  return floatToBFloat16(value);
}

/// Storage of an f16 element in a kernel.
struct HalfBits {
  uint16_t bits;
};
/// Storage of a bf16 element in a kernel.
struct BFloat16Bits {
  uint16_t bits;
};

/// Loads a stored element as fp32.
GMOPT_HD float loadAsFloat(const float *p, int64_t i) { return p[i]; }
GMOPT_HD float loadAsFloat(const HalfBits *p, int64_t i) {
  return widenHalf(p[i].bits);
}
GMOPT_HD float loadAsFloat(const BFloat16Bits *p, int64_t i) {
  return widenBFloat16(p[i].bits);
}
/// Stores fp32 \p v, rounding a 16-bit element to nearest even.
GMOPT_HD void storeFromFloat(float *p, int64_t i, float v) { p[i] = v; }
GMOPT_HD void storeFromFloat(HalfBits *p, int64_t i, float v) {
  p[i].bits = narrowToHalf(v);
}
GMOPT_HD void storeFromFloat(BFloat16Bits *p, int64_t i, float v) {
  p[i].bits = narrowToBFloat16(v);
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

/// sqrt(1/2), 1/sqrt(2 pi), sqrt(2/pi) and GELU's cubic coefficient, as
/// the CPU kernels round them to fp32.
constexpr float kSqrtHalfF = 0.70710678118654752440f;
constexpr float kInvSqrtTwoPiF = 0.39894228040143267794f;
constexpr float kSqrtTwoOverPiF = 0.79788456080286535588f;
constexpr float kGeluCubicF = 0.044715f;

/// The ops of the n-ary elementwise kernel. The operand count is fixed by
/// the op (operandCount).
enum class ElementwiseOp : int32_t {
  // One operand.
  Identity,
  Relu,
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Tanh,
  Sigmoid,
  Erf,
  GeluExact,
  GeluTanh,
  /// x * sigmoid(alpha * x), alpha the op parameter (QuickGelu).
  QuickGelu,
  // ONNX's rounding, trigonometric and hyperbolic functions and
  // activations; param / param2 carry their attributes as named.
  Floor,
  Ceil,
  /// Half to even.
  Round,
  /// NaN stays NaN.
  Sign,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Asinh,
  Acosh,
  Atanh,
  Softsign,
  Softplus,
  Mish,
  HardSwish,
  /// x < 0 ? alpha * x : x (param = alpha).
  LeakyRelu,
  /// x >= 0 ? x : alpha * expm1(x) (param = alpha).
  Elu,
  /// x >= 0 ? x : alpha * expm1(x / alpha) (param = alpha, never 0).
  Celu,
  /// gamma * (x > 0 ? x : alpha * expm1(x)) (param = alpha, param2 = gamma).
  Selu,
  /// clamp(alpha * x + beta, 0, 1) (param = alpha, param2 = beta).
  HardSigmoid,
  /// x > alpha ? x : 0 (param = alpha).
  ThresholdedRelu,
  /// Clip: x < lo ? lo : (hi < x ? hi : x), NaN stays NaN (param = lo,
  /// param2 = hi).
  Clip,
  /// x / param (Mean's division by the input count).
  DivParam,
  /// x * param (Scale by a constant factor).
  MulParam,
  // Two operands.
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  /// a < 0 ? a * b : a (PRelu, b the broadcast slope).
  PRelu,
  /// C's fmod: the remainder with the dividend's sign (Mod, fmod = 1).
  Fmod,
  /// gelu(a + b), exact (BiasGelu).
  BiasGeluExact,
  /// gelu(a + b), tanh approximation (FastGelu with a bias).
  BiasGeluTanh,
  /// Gradients (dy, saved): ReluGrad (saved x), GeluGrad, FastGeluGrad
  /// (saved x), SigmoidGrad and TanhGrad (saved y).
  ReluGrad,
  GeluGrad,
  FastGeluGrad,
  SigmoidGrad,
  TanhGrad,
  /// dy * d/dx(x * sigmoid(alpha * x)) (QuickGeluGrad), alpha the parameter.
  QuickGeluGrad,
  /// a * b where b is a scalar (Scale).
  ScaleUp,
  /// a * float(1 / double(b)) (Scale with scale_down, as the CPU rounds it).
  ScaleDown,
  // Three operands.
  /// dy * gelu'(x + b) (BiasGeluGrad_dX), exact.
  BiasGeluGradExact,
  /// dy * gelu_tanh'(x + b) (BiasFastGeluGrad_dX).
  BiasGeluGradTanh,
};

/// How many operands \p op reads.
GMOPT_HD int operandCount(ElementwiseOp op) {
  if (op <= ElementwiseOp::MulParam)
    return 1;
  if (op <= ElementwiseOp::ScaleDown)
    return 2;
  return 3;
}

/// Exact GELU: x * Phi(x).
GMOPT_HD float geluExactOf(float x) {
  return 0.5f * x * (1.0f + ::erff(x * kSqrtHalfF));
}
/// GELU's tanh approximation.
GMOPT_HD float geluTanhOf(float x) {
  return 0.5f * x *
         (1.0f + ::tanhf(kSqrtTwoOverPiF * (x + kGeluCubicF * x * x * x)));
}
/// d/dx of exact GELU.
GMOPT_HD float geluExactDerivative(float x) {
  float cdf = 0.5f * (1.0f + ::erff(x * kSqrtHalfF));
  float pdf = kInvSqrtTwoPiF * ::expf(-0.5f * x * x);
  return cdf + x * pdf;
}
/// d/dx of GELU's tanh approximation.
GMOPT_HD float geluTanhDerivative(float x) {
  float x2 = x * x;
  float t = ::tanhf(kSqrtTwoOverPiF * x * (1.0f + kGeluCubicF * x2));
  float dInner = kSqrtTwoOverPiF * (1.0f + 3.0f * kGeluCubicF * x2);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dInner;
}
/// The logistic function.
GMOPT_HD float sigmoidOf(float x) {
  // Split by sign so exp never overflows.
  if (x >= 0)
    return 1.0f / (1.0f + ::expf(-x));
  float e = ::expf(x);
  return e / (1.0f + e);
}

/// log(1 + exp(x)) without overflow for large x (as the CPU computes it).
GMOPT_HD float softplusOf(float x) {
  return x > 0.0f ? x + ::log1pf(::expf(-x)) : ::log1pf(::expf(x));
}

/// Applies \p op to the operands (b and c are ignored where the op reads
/// fewer); \p param and \p param2 are the op's scalar attributes
/// (QuickGelu's alpha, Selu's alpha and gamma, ...). Max and Min propagate
/// NaN like the CPU kernels.
GMOPT_HD float applyElementwise(ElementwiseOp op, float a, float b, float c,
                                float param = 0.0f, float param2 = 0.0f) {
  switch (op) {
  case ElementwiseOp::Floor:
    return ::floorf(a);
  case ElementwiseOp::Ceil:
    return ::ceilf(a);
  case ElementwiseOp::Round:
    return ::nearbyintf(a);
  case ElementwiseOp::Sign:
    if (a != a)
      return a;
    return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f);
  case ElementwiseOp::Sin:
    return ::sinf(a);
  case ElementwiseOp::Cos:
    return ::cosf(a);
  case ElementwiseOp::Tan:
    return ::tanf(a);
  case ElementwiseOp::Asin:
    return ::asinf(a);
  case ElementwiseOp::Acos:
    return ::acosf(a);
  case ElementwiseOp::Atan:
    return ::atanf(a);
  case ElementwiseOp::Sinh:
    return ::sinhf(a);
  case ElementwiseOp::Cosh:
    return ::coshf(a);
  case ElementwiseOp::Asinh:
    return ::asinhf(a);
  case ElementwiseOp::Acosh:
    return ::acoshf(a);
  case ElementwiseOp::Atanh:
    return ::atanhf(a);
  case ElementwiseOp::Softsign:
    return a / (1.0f + ::fabsf(a));
  case ElementwiseOp::Softplus:
    return softplusOf(a);
  case ElementwiseOp::Mish:
    return a * ::tanhf(softplusOf(a));
  case ElementwiseOp::HardSwish: {
    float gate = a / 6.0f + 0.5f;
    return a * (gate < 0.0f ? 0.0f : (gate > 1.0f ? 1.0f : gate));
  }
  case ElementwiseOp::LeakyRelu:
    return a < 0.0f ? param * a : a;
  case ElementwiseOp::Elu:
    return a >= 0.0f ? a : param * ::expm1f(a);
  case ElementwiseOp::Celu:
    return a >= 0.0f ? a : param * ::expm1f(a / param);
  case ElementwiseOp::Selu:
    return param2 * (a > 0.0f ? a : param * ::expm1f(a));
  case ElementwiseOp::HardSigmoid: {
    float v = param * a + param2;
    return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
  }
  case ElementwiseOp::ThresholdedRelu:
    return a > param ? a : 0.0f;
  case ElementwiseOp::Clip:
    if (a != a)
      return a;
    return a < param ? param : (param2 < a ? param2 : a);
  case ElementwiseOp::DivParam:
    return a / param;
  case ElementwiseOp::PRelu:
    return a < 0.0f ? a * b : a;
  case ElementwiseOp::Fmod:
    return ::fmodf(a, b);
  case ElementwiseOp::Identity:
    return a;
  case ElementwiseOp::Relu:
    return a < 0.0f ? 0.0f : a;
  case ElementwiseOp::Neg:
    return -a;
  case ElementwiseOp::Abs:
    return ::fabsf(a);
  case ElementwiseOp::Exp:
    return ::expf(a);
  case ElementwiseOp::Log:
    return ::logf(a);
  case ElementwiseOp::Sqrt:
    return ::sqrtf(a);
  case ElementwiseOp::Reciprocal:
    return 1.0f / a;
  case ElementwiseOp::Tanh:
    return ::tanhf(a);
  case ElementwiseOp::Sigmoid:
    return sigmoidOf(a);
  case ElementwiseOp::Erf:
    return ::erff(a);
  case ElementwiseOp::GeluExact:
    return geluExactOf(a);
  case ElementwiseOp::GeluTanh:
    return geluTanhOf(a);
  case ElementwiseOp::QuickGelu:
    return a * sigmoidOf(param * a);
  case ElementwiseOp::MulParam:
    return a * param;
  case ElementwiseOp::Add:
    return a + b;
  case ElementwiseOp::Sub:
    return a - b;
  case ElementwiseOp::Mul:
    return a * b;
  case ElementwiseOp::Div:
    return a / b;
  case ElementwiseOp::Pow:
    // The CPU kernel's fast paths for common constant exponents.
    if (b == 2.0f)
      return a * a;
    if (b == 3.0f)
      return a * a * a;
    if (b == 0.5f)
      return ::sqrtf(a);
    if (b == 1.0f)
      return a;
    return ::powf(a, b);
  case ElementwiseOp::Max:
    if (a != a || b != b)
      return a + b; // NaN.
    return a < b ? b : a;
  case ElementwiseOp::Min:
    if (a != a || b != b)
      return a + b;
    return b < a ? b : a;
  case ElementwiseOp::BiasGeluExact:
    return geluExactOf(a + b);
  case ElementwiseOp::BiasGeluTanh:
    return geluTanhOf(a + b);
  case ElementwiseOp::ReluGrad:
    return b > 0.0f ? a : 0.0f;
  case ElementwiseOp::GeluGrad:
    return a * geluExactDerivative(b);
  case ElementwiseOp::FastGeluGrad:
    return a * geluTanhDerivative(b);
  case ElementwiseOp::SigmoidGrad:
    return a * b * (1.0f - b);
  case ElementwiseOp::TanhGrad:
    return a * (1.0f - b * b);
  case ElementwiseOp::QuickGeluGrad: {
    float s = 1.0f / (1.0f + ::expf(-param * b));
    return a * (s + param * b * s * (1.0f - s));
  }
  case ElementwiseOp::ScaleUp:
    return a * b;
  case ElementwiseOp::ScaleDown:
    return a * static_cast<float>(1.0 / static_cast<double>(b));
  case ElementwiseOp::BiasGeluGradExact:
    return a * geluExactDerivative(b + c);
  case ElementwiseOp::BiasGeluGradTanh:
    return a * geluTanhDerivative(b + c);
  }
  return a;
}

/// One element of the elementwise kernels: out[iOut] = op(a[ia], b[ib],
/// c[ic]) in fp32, reading only the \p operands (operandCount(op)) the op
/// has. The scalar and the vector paths of the kernel both run it.
template <typename T>
GMOPT_HD void applyElementwiseAt(ElementwiseOp op, int operands, const T *a,
                                 int64_t ia, const T *b, int64_t ib, const T *c,
                                 int64_t ic, T *out, int64_t iOut, float param,
                                 float param2) {
  float va = loadAsFloat(a, ia);
  float vb = operands > 1 ? loadAsFloat(b, ib) : 0.0f;
  float vc = operands > 2 ? loadAsFloat(c, ic) : 0.0f;
  storeFromFloat(out, iOut, applyElementwise(op, va, vb, vc, param, param2));
}

//===----------------------------------------------------------------------===//
// Normalization and softmax element steps
//===----------------------------------------------------------------------===//

/// LayerNormalization's output element: (x - mean) * invStd * scale + bias.
GMOPT_HD float layerNormElement(float x, float mean, float invStd, float scale,
                                float bias) {
  return (x - mean) * invStd * scale + bias;
}

/// LayerNormalizationGrad's dX element, from the row sums
/// sumDyScale = sum(dy * scale) and sumDyScaleXhat = sum(dy * scale * xhat)
/// over the \p width normalized elements:
///   dx = invStd * (dy * scale - (sumDyScale + xhat * sumDyScaleXhat) / N).
GMOPT_HD float layerNormGradElement(float dy, float x, float mean, float invStd,
                                    float scale, float sumDyScale,
                                    float sumDyScaleXhat, float width) {
  float xhat = (x - mean) * invStd;
  return invStd * (dy * scale - (sumDyScale + xhat * sumDyScaleXhat) / width);
}

/// Softmax's output element from the row max and the row sum of
/// exp(x - max).
GMOPT_HD float softmaxElement(float x, float rowMax, float rowSum) {
  return ::expf(x - rowMax) / rowSum;
}
/// LogSoftmax's output element.
GMOPT_HD float logSoftmaxElement(float x, float rowMax, float rowSum) {
  return x - rowMax - ::logf(rowSum);
}
/// SoftmaxGrad's dX element from y, dy and the row sum of dy * y.
GMOPT_HD float softmaxGradElement(float dy, float y, float rowDot) {
  return y * (dy - rowDot);
}
/// LogSoftmaxGrad's dX element from the log-softmax y, dy and the row sum
/// of dy.
GMOPT_HD float logSoftmaxGradElement(float dy, float y, float rowSumDy) {
  return dy - ::expf(y) * rowSumDy;
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// AdamW's per-step constants, from the hyper-parameters and the 1-based
/// step, exactly as the CPU kernel derives them (powers in double, then
/// fp32).
struct AdamWConstants {
  float alpha, beta, epsilon, weightDecay;
  float lr, lrCorrected, alphaCorrection, betaCorrection;
  int32_t mode;
};

/// Fills the step-dependent fields of \p s from \p lr and \p step.
GMOPT_HD void setAdamWStep(AdamWConstants &s, float lr, int64_t step,
                           bool correctBias) {
  s.lr = lr;
  s.lrCorrected = lr;
  s.alphaCorrection = s.betaCorrection = 1.0f;
  if (correctBias) {
    double t = static_cast<double>(step);
    s.alphaCorrection =
        1.0f - static_cast<float>(::pow(static_cast<double>(s.alpha), t));
    s.betaCorrection =
        1.0f - static_cast<float>(::pow(static_cast<double>(s.beta), t));
    s.lrCorrected *= ::sqrtf(s.betaCorrection) / s.alphaCorrection;
  }
}

/// One AdamW element update in place (CPU kernel order of operations).
GMOPT_HD void adamWElement(const AdamWConstants &s, float &weight, float grad,
                           float &m1, float &m2) {
  float first = s.alpha * m1 + (1.0f - s.alpha) * grad;
  float second = s.beta * m2 + (1.0f - s.beta) * grad * grad;
  m1 = first;
  m2 = second;
  if (s.mode == 0) {
    float w = weight;
    w = w - w * s.lr * s.weightDecay;
    float denom = ::sqrtf(second / s.betaCorrection) + s.epsilon;
    weight = w - (s.lr * first) / (s.alphaCorrection * denom);
    return;
  }
  float denom = ::sqrtf(second) + s.epsilon;
  float w = weight - s.lrCorrected * first / denom;
  weight = w - s.lr * s.weightDecay * w;
}

/// One SGD element update: w += -lr * g.
GMOPT_HD float sgdElement(float weight, float grad, float negativeLr) {
  return weight + negativeLr * grad;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_ELEMENTWISEMATH_H
