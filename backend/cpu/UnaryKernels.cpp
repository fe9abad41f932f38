//===- UnaryKernels.cpp - Element-wise unary math, activations, casts -----===//
//
// One-input element-wise kernels: the math functions (Sqrt, Exp, Log, Erf,
// Reciprocal, Floor, Ceil, Round, the trigonometric and hyperbolic
// functions), sign-type ops that also run on integers (Neg, Abs, Sign, Relu,
// Clip), the activations (LeakyRelu, Sigmoid, Tanh, Elu, Celu, Selu,
// HardSigmoid, HardSwish, Softplus, Softsign, Mish, ThresholdedRelu, Gelu
// with and without the tanh approximation, com.microsoft Gelu, FastGelu,
// BiasGelu and QuickGelu), the predicates (IsNaN, IsInf, Not), and
// Cast/CastLike between every supported element type.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

/// Exact GELU: x * Phi(x).
template <typename T> T geluExact(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(kSqrtHalf)));
}

/// GELU with the tanh approximation.
template <typename T> T geluTanh(T x) {
  T inner = T(kSqrtTwoOverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}

/// Numerically stable logistic function.
template <typename T> T sigmoid(T x) {
  if (x >= 0)
    return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

/// out[i] = fn(in[i]) over same-shape tensors, in parallel.
template <typename TIn, typename TOut, typename Fn>
void mapElements(const TensorView &in, const TensorView &out, unsigned threads,
                 int64_t costPerElement, const Fn &fn) {
  const TIn *x = in.getDataAs<TIn>();
  TOut *y = out.getDataAs<TOut>();
  parallelFor(threads, out.getNumElements(), grainFor(costPerElement),
              [&](int64_t lo, int64_t hi) {
                for (int64_t i = lo; i < hi; ++i)
                  y[i] = fn(x[i]);
              });
}

/// Checks a unary op's output matches its input's shape (and type unless
/// \p outType is given).
llvm::Error checkUnary(const KernelCall &call,
                       std::optional<DType> outType = std::nullopt) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  return checkDType(call, out, outType ? *outType : in.getDType(), "output");
}

/// A float-only unary op; \p Fn is a functor template instantiated per type.
template <template <typename> class Fn, int Cost = 4>
llvm::Error floatUnaryKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  return dispatchFloat(call, call.in(0)->getDType(),
                       [&](auto tag) -> llvm::Error {
                         using T = typename decltype(tag)::type;
                         mapElements<T, T>(*call.in(0), *call.out(0),
                                           call.getNumThreads(), Cost, Fn<T>());
                         return llvm::Error::success();
                       });
}

template <typename T> struct SqrtFn {
  T operator()(T x) const { return std::sqrt(x); }
};
template <typename T> struct ExpFn {
  T operator()(T x) const { return std::exp(x); }
};
template <typename T> struct LogFn {
  T operator()(T x) const { return std::log(x); }
};
template <typename T> struct ErfFn {
  T operator()(T x) const { return std::erf(x); }
};
template <typename T> struct TanhFn {
  T operator()(T x) const { return std::tanh(x); }
};
template <typename T> struct SigmoidFn {
  T operator()(T x) const { return sigmoid(x); }
};
template <typename T> struct ReciprocalFn {
  T operator()(T x) const { return T(1) / x; }
};
template <typename T> struct FloorFn {
  T operator()(T x) const { return std::floor(x); }
};
template <typename T> struct CeilFn {
  T operator()(T x) const { return std::ceil(x); }
};
template <typename T> struct GeluExactFn {
  T operator()(T x) const { return geluExact(x); }
};
template <typename T> struct GeluTanhFn {
  T operator()(T x) const { return geluTanh(x); }
};

template <typename T> struct SinFn {
  T operator()(T x) const { return std::sin(x); }
};
template <typename T> struct CosFn {
  T operator()(T x) const { return std::cos(x); }
};
template <typename T> struct TanFn {
  T operator()(T x) const { return std::tan(x); }
};
template <typename T> struct AsinFn {
  T operator()(T x) const { return std::asin(x); }
};
template <typename T> struct AcosFn {
  T operator()(T x) const { return std::acos(x); }
};
template <typename T> struct AtanFn {
  T operator()(T x) const { return std::atan(x); }
};
template <typename T> struct SinhFn {
  T operator()(T x) const { return std::sinh(x); }
};
template <typename T> struct CoshFn {
  T operator()(T x) const { return std::cosh(x); }
};
template <typename T> struct AsinhFn {
  T operator()(T x) const { return std::asinh(x); }
};
template <typename T> struct AcoshFn {
  T operator()(T x) const { return std::acosh(x); }
};
template <typename T> struct AtanhFn {
  T operator()(T x) const { return std::atanh(x); }
};
/// Round half to even (the default floating-point rounding mode).
template <typename T> struct RoundFn {
  T operator()(T x) const { return std::nearbyint(x); }
};
template <typename T> struct SoftsignFn {
  T operator()(T x) const { return x / (T(1) + std::fabs(x)); }
};
/// log(1 + exp(x)) without overflow for large x.
template <typename T> T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T> struct SoftplusFn {
  T operator()(T x) const { return softplus(x); }
};
template <typename T> struct MishFn {
  T operator()(T x) const { return x * std::tanh(softplus(x)); }
};
template <typename T> struct HardSwishFn {
  T operator()(T x) const {
    T gate = x / T(6) + T(0.5);
    return x * (gate < T(0) ? T(0) : (gate > T(1) ? T(1) : gate));
  }
};

/// A float unary op whose function depends on attributes: \p makeFn maps a
/// TypeTag<T> to the element function for T.
template <typename MakeFn>
llvm::Error floatUnaryWith(KernelCall &call, int64_t cost,
                           const MakeFn &makeFn) {
  if (llvm::Error err = checkUnary(call))
    return err;
  return dispatchFloat(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        mapElements<T, T>(*call.in(0), *call.out(0), call.getNumThreads(), cost,
                          makeFn(tag));
        return llvm::Error::success();
      });
}

/// The attributes of an activation with parameters, decoded at prepare:
/// alpha, and Selu's gamma or HardSigmoid's beta.
struct ActivationParams {
  double alpha = 0;
  double beta = 0;
};

/// An activation's `alpha` (default \p alpha) and, when \p betaName is
/// given, its second parameter (default \p beta).
ActivationParams readActivation(const Node &node, float alpha,
                                llvm::StringRef betaName = {}, float beta = 0) {
  ActivationParams params;
  params.alpha = node.getFloatAttr("alpha", alpha);
  if (!betaName.empty())
    params.beta = node.getFloatAttr(betaName, beta);
  return params;
}

llvm::Expected<std::unique_ptr<KernelState>> prepareElu(const Node &node) {
  return makeKernelState(readActivation(node, 1.0f));
}

llvm::Expected<std::unique_ptr<KernelState>> prepareCelu(const Node &node) {
  ActivationParams params = readActivation(node, 1.0f);
  if (params.alpha == 0)
    return prepareError(node, "alpha must not be 0");
  return makeKernelState(params);
}

llvm::Expected<std::unique_ptr<KernelState>> prepareSelu(const Node &node) {
  return makeKernelState(readActivation(node, 1.67326319217681884765625f,
                                        "gamma", 1.05070102214813232421875f));
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareHardSigmoid(const Node &node) {
  return makeKernelState(readActivation(node, 0.2f, "beta", 0.5f));
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareThresholdedRelu(const Node &node) {
  return makeKernelState(readActivation(node, 1.0f));
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareQuickGelu(const Node &node) {
  return makeKernelState(readActivation(node, 1.702f));
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareLeakyRelu(const Node &node) {
  return makeKernelState(readActivation(node, 0.01f));
}

llvm::Error eluKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha;
  return floatUnaryWith(call, 8, [alpha](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha);
    return [a](T x) { return x >= T(0) ? x : a * std::expm1(x); };
  });
}

llvm::Error celuKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha;
  return floatUnaryWith(call, 8, [alpha](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha);
    return [a](T x) { return x >= T(0) ? x : a * std::expm1(x / a); };
  });
}

llvm::Error seluKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha;
  double gamma = call.getState<ActivationParams>().beta;
  return floatUnaryWith(call, 8, [alpha, gamma](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha), g = static_cast<T>(gamma);
    return [a, g](T x) { return g * (x > T(0) ? x : a * std::expm1(x)); };
  });
}

llvm::Error hardSigmoidKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha,
         beta = call.getState<ActivationParams>().beta;
  return floatUnaryWith(call, 2, [alpha, beta](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha), b = static_cast<T>(beta);
    return [a, b](T x) {
      T v = a * x + b;
      return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
    };
  });
}

llvm::Error thresholdedReluKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha;
  return floatUnaryWith(call, 1, [alpha](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha);
    return [a](T x) { return x > a ? x : T(0); };
  });
}

/// com.microsoft QuickGelu: x * sigmoid(alpha * x).
llvm::Error quickGeluKernel(KernelCall &call) {
  double alpha = call.getState<ActivationParams>().alpha;
  return floatUnaryWith(call, 8, [alpha](auto tag) {
    using T = typename decltype(tag)::type;
    T a = static_cast<T>(alpha);
    return [a](T x) { return x * sigmoid(a * x); };
  });
}

/// A unary op that also runs on integers (wrapping where it could overflow).
template <typename T> T wrapNegate(T x) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(std::make_unsigned_t<T>(0) -
                          static_cast<std::make_unsigned_t<T>>(x));
  else
    return -x;
}
template <typename T> struct NegFn {
  T operator()(T x) const { return wrapNegate(x); }
};
template <typename T> struct AbsFn {
  T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? wrapNegate(x) : x;
  }
};
template <typename T> struct SignFn {
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(x))
        return x;
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
};
template <typename T> struct ReluFn {
  T operator()(T x) const { return x < T(0) ? T(0) : x; }
};

template <template <typename> class Fn>
llvm::Error numericUnaryKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  return dispatchArithmetic(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        mapElements<T, T>(*call.in(0), *call.out(0), call.getNumThreads(), 1,
                          Fn<T>());
        return llvm::Error::success();
      });
}

/// Relu: fp32 takes the branch-free vector loop (a mix of signs would
/// mispredict a branch on every other element); other types the functor.
llvm::Error reluKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (in.getDType() != DType::F32)
    return numericUnaryKernel<ReluFn>(call);
  if (llvm::Error err = checkUnary(call))
    return err;
  const float *x = in.getDataAs<float>();
  float *y = out.getDataAs<float>();
  parallelFor(
      call.getNumThreads(), out.getNumElements(), grainFor(1),
      [&](int64_t lo, int64_t hi) { reluF32(x + lo, y + lo, hi - lo); });
  return llvm::Error::success();
}

llvm::Error leakyReluKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  double alpha = call.getState<ActivationParams>().alpha;
  return dispatchFloat(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        T a = static_cast<T>(alpha);
        mapElements<T, T>(*call.in(0), *call.out(0), call.getNumThreads(), 1,
                          [a](T x) { return x < T(0) ? a * x : x; });
        return llvm::Error::success();
      });
}

/// ONNX Gelu's `approximate` (opset 20): "none" | "tanh", decoded at
/// prepare as whether it is "tanh".
llvm::Expected<std::unique_ptr<KernelState>> prepareOnnxGelu(const Node &node) {
  llvm::StringRef approximate = node.getStringAttr("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return prepareError(node, "unknown approximate mode '" + approximate + "'");
  return makeKernelState(approximate == "tanh");
}

llvm::Error onnxGeluKernel(KernelCall &call) {
  if (call.getState<bool>())
    return floatUnaryKernel<GeluTanhFn, 16>(call);
  return floatUnaryKernel<GeluExactFn, 16>(call);
}

/// com.microsoft FastGelu(X, bias?) and BiasGelu(X, bias): the bias is
/// broadcast along the last dimension and added before the activation
/// (fp32 rows of exact GELU: RowKernels.h).
template <bool TanhApproximation> llvm::Error biasGeluKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  const TensorView &in = *call.in(0), &out = *call.out(0);
  const TensorView *bias = call.in(1);
  if (!bias)
    return TanhApproximation ? floatUnaryKernel<GeluTanhFn, 16>(call)
                             : floatUnaryKernel<GeluExactFn, 16>(call);
  int64_t width = in.getRank() ? in.getShape().back() : 1;
  if (bias->getNumElements() != width || bias->getDType() != in.getDType())
    return call.error("bias must have one element per last-dimension entry");
  return dispatchFloat(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *x = in.getDataAs<T>(), *b = bias->getDataAs<T>();
    T *y = out.getDataAs<T>();
    int64_t rows = width ? in.getNumElements() / width : 0;
    parallelFor(
        call.getNumThreads(), rows, grainFor(16 * width),
        [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) {
            int64_t j = 0;
            if constexpr (std::is_same_v<T, float> && !TanhApproximation)
              j = biasGeluRowF32(x + r * width, b, y + r * width, width);
            for (; j < width; ++j) {
              T v = x[r * width + j] + b[j];
              y[r * width + j] = TanhApproximation ? geluTanh(v) : geluExact(v);
            }
          }
        });
    return llvm::Error::success();
  });
}

/// Clip's bounds: the `min` and `max` attributes (before opset 11), or
/// operands that replace them.
struct ClipBounds {
  std::optional<double> low, high;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareClip(const Node &node) {
  ClipBounds bounds;
  if (node.hasAttr("min"))
    bounds.low = node.getFloatAttr("min", 0);
  if (node.hasAttr("max"))
    bounds.high = node.getFloatAttr("max", 0);
  return makeKernelState(bounds);
}

/// Clip(X, min?, max?) (opset 11+) or Clip(X) with min/max attributes.
llvm::Error clipKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  std::optional<double> low = call.getState<ClipBounds>().low,
                        high = call.getState<ClipBounds>().high;
  if (const TensorView *minInput = call.in(1)) {
    auto value = readScalar(call, *minInput, "min");
    if (!value)
      return value.takeError();
    low = *value;
  }
  if (const TensorView *maxInput = call.in(2)) {
    auto value = readScalar(call, *maxInput, "max");
    if (!value)
      return value.takeError();
    high = *value;
  }
  return dispatchArithmetic(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        T lo = low ? convertElement<T>(*low) : std::numeric_limits<T>::lowest();
        T hi = high ? convertElement<T>(*high) : std::numeric_limits<T>::max();
        mapElements<T, T>(*call.in(0), *call.out(0), call.getNumThreads(), 1,
                          [lo, hi](T x) {
                            if constexpr (std::is_floating_point_v<T>)
                              if (std::isnan(x))
                                return x;
                            return x < lo ? lo : (hi < x ? hi : x);
                          });
        return llvm::Error::success();
      });
}

llvm::Error isNaNKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call, DType::Bool))
    return err;
  return dispatchFloat(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        mapElements<T, uint8_t>(*call.in(0), *call.out(0), call.getNumThreads(),
                                1,
                                [](T x) -> uint8_t { return std::isnan(x); });
        return llvm::Error::success();
      });
}

/// Which infinities IsInf detects.
struct InfSigns {
  bool negative = true, positive = true;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareIsInf(const Node &node) {
  InfSigns signs;
  signs.negative = node.getIntAttr("detect_negative", 1) != 0;
  signs.positive = node.getIntAttr("detect_positive", 1) != 0;
  return makeKernelState(signs);
}

llvm::Error isInfKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call, DType::Bool))
    return err;
  bool negative = call.getState<InfSigns>().negative;
  bool positive = call.getState<InfSigns>().positive;
  return dispatchFloat(
      call, call.in(0)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        mapElements<T, uint8_t>(*call.in(0), *call.out(0), call.getNumThreads(),
                                1, [=](T x) -> uint8_t {
                                  return std::isinf(x) &&
                                         ((x > 0 && positive) ||
                                          (x < 0 && negative));
                                });
        return llvm::Error::success();
      });
}

llvm::Error notKernel(KernelCall &call) {
  if (llvm::Error err = checkUnary(call))
    return err;
  if (llvm::Error err = checkDType(call, *call.in(0), DType::Bool, "input"))
    return err;
  mapElements<uint8_t, uint8_t>(*call.in(0), *call.out(0), call.getNumThreads(),
                                1, [](uint8_t x) -> uint8_t { return x == 0; });
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

/// Calls fn(TypeTag<T>{}) for every element type Cast supports.
template <typename Fn>
llvm::Error dispatchCastType(const KernelCall &call, DType type, Fn &&fn,
                             llvm::StringRef what) {
  return dispatchTypes<float, double, Float16, BFloat16, int64_t, int32_t,
                       int16_t, int8_t, uint8_t, uint16_t, uint32_t, uint64_t,
                       Bool8>(call, type, std::forward<Fn>(fn), what);
}

/// The message of a Cast whose `to` is not its output's type.
std::string castToDisagrees(DType output) {
  return ("attribute 'to' disagrees with the output type " + dtypeName(output))
      .str();
}

/// Cast's `to`, when the node names one: an error unless it is the static
/// type of the output.
llvm::Expected<std::unique_ptr<KernelState>> prepareCast(const Node &node) {
  std::optional<DType> to;
  if (node.hasAttr("to")) {
    to = dtypeFromOnnx(node.getIntAttr("to", 0));
    DType output = node.getResult(0)->getType().getDType();
    if (!to || *to != output)
      return prepareError(node, castToDisagrees(output));
  }
  return makeKernelState(to);
}

llvm::Error castKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  const std::optional<DType> &to = call.getState<std::optional<DType>>();
  if (to && *to != out.getDType())
    return call.error(castToDisagrees(out.getDType()));
  return castElements(call, in, out);
}

/// CastLike(X, like): the output has like's element type.
llvm::Error castLikeKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  if (llvm::Error err = checkDType(call, out, call.in(1)->getDType(), "output"))
    return err;
  return castElements(call, in, out);
}

} // namespace

llvm::Error cpu::castElements(const KernelCall &call, const TensorView &src,
                              const TensorView &dst) {
  if (src.getNumElements() != dst.getNumElements())
    return call.error("cast between tensors of different sizes");
  if (src.getDType() == dst.getDType()) {
    copyElements(src, dst);
    return llvm::Error::success();
  }
  return dispatchCastType(
      call, src.getDType(),
      [&](auto srcTag) -> llvm::Error {
        using Src = typename decltype(srcTag)::type;
        return dispatchCastType(
            call, dst.getDType(),
            [&](auto dstTag) -> llvm::Error {
              using Dst = typename decltype(dstTag)::type;
              mapElements<Src, Dst>(
                  src, dst, call.getNumThreads(), 2,
                  [](Src x) { return convertElement<Dst>(x); });
              return llvm::Error::success();
            },
            "output");
      },
      "input");
}

void cpu::registerUnaryKernels(KernelTable &table) {
  table.add("", "Sqrt", floatUnaryKernel<SqrtFn>);
  table.add("", "Exp", floatUnaryKernel<ExpFn, 8>);
  table.add("", "Log", floatUnaryKernel<LogFn, 8>);
  table.add("", "Erf", floatUnaryKernel<ErfFn, 8>);
  table.add("", "Tanh", floatUnaryKernel<TanhFn, 8>);
  table.add("", "Sigmoid", floatUnaryKernel<SigmoidFn, 8>);
  table.add("", "Reciprocal", floatUnaryKernel<ReciprocalFn, 1>);
  table.add("", "Floor", floatUnaryKernel<FloorFn, 1>);
  table.add("", "Ceil", floatUnaryKernel<CeilFn, 1>);
  table.add("", "Neg", numericUnaryKernel<NegFn>);
  table.add("", "Abs", numericUnaryKernel<AbsFn>);
  table.add("", "Sign", numericUnaryKernel<SignFn>);
  table.add("", "Relu", reluKernel);
  table.add("", "LeakyRelu", leakyReluKernel);
  table.setPrepare("", "LeakyRelu", prepareLeakyRelu);
  table.add("", "Gelu", onnxGeluKernel);
  table.setPrepare("", "Gelu", prepareOnnxGelu);
  table.add(kMsDomain, "Gelu", floatUnaryKernel<GeluExactFn, 16>);
  table.add(kMsDomain, "FastGelu", biasGeluKernel<true>);
  table.add(kMsDomain, "BiasGelu", biasGeluKernel<false>);
  table.add("", "Sin", floatUnaryKernel<SinFn, 8>);
  table.add("", "Cos", floatUnaryKernel<CosFn, 8>);
  table.add("", "Tan", floatUnaryKernel<TanFn, 8>);
  table.add("", "Asin", floatUnaryKernel<AsinFn, 8>);
  table.add("", "Acos", floatUnaryKernel<AcosFn, 8>);
  table.add("", "Atan", floatUnaryKernel<AtanFn, 8>);
  table.add("", "Sinh", floatUnaryKernel<SinhFn, 8>);
  table.add("", "Cosh", floatUnaryKernel<CoshFn, 8>);
  table.add("", "Asinh", floatUnaryKernel<AsinhFn, 8>);
  table.add("", "Acosh", floatUnaryKernel<AcoshFn, 8>);
  table.add("", "Atanh", floatUnaryKernel<AtanhFn, 8>);
  table.add("", "Round", floatUnaryKernel<RoundFn, 1>);
  table.add("", "Softsign", floatUnaryKernel<SoftsignFn, 2>);
  table.add("", "Softplus", floatUnaryKernel<SoftplusFn, 8>);
  table.add("", "Mish", floatUnaryKernel<MishFn, 16>);
  table.add("", "HardSwish", floatUnaryKernel<HardSwishFn, 2>);
  table.add("", "Elu", eluKernel);
  table.setPrepare("", "Elu", prepareElu);
  table.add("", "Celu", celuKernel);
  table.setPrepare("", "Celu", prepareCelu);
  table.add("", "Selu", seluKernel);
  table.setPrepare("", "Selu", prepareSelu);
  table.add("", "HardSigmoid", hardSigmoidKernel);
  table.setPrepare("", "HardSigmoid", prepareHardSigmoid);
  table.add("", "ThresholdedRelu", thresholdedReluKernel);
  table.setPrepare("", "ThresholdedRelu", prepareThresholdedRelu);
  table.add(kMsDomain, "QuickGelu", quickGeluKernel);
  table.setPrepare(kMsDomain, "QuickGelu", prepareQuickGelu);
  table.add("", "Clip", clipKernel);
  table.setPrepare("", "Clip", prepareClip);
  table.add("", "IsNaN", isNaNKernel);
  table.add("", "IsInf", isInfKernel);
  table.setPrepare("", "IsInf", prepareIsInf);
  table.add("", "Not", notKernel, KernelMode::Native);
  table.add("", "Cast", castKernel, KernelMode::Native);
  table.setPrepare("", "Cast", prepareCast);
  table.add("", "CastLike", castLikeKernel, KernelMode::Native);
}
