//===- TrainingKernels.cpp - Element-wise gradient and training ops -------===//
//
// com.microsoft ops that ONNX Runtime's gradient builder and training
// artifacts emit and that work element by element: the activation
// gradients (ReluGrad, GeluGrad, FastGeluGrad, QuickGeluGrad, SigmoidGrad,
// TanhGrad, BiasGeluGrad_dX, BiasFastGeluGrad_dX), DivGrad with broadcast
// reduction, Scale, MixedPrecisionScale, IsFinite, IsAllFinite,
// ZeroGradient, PassThrough, and the gradient accumulators
// InPlaceAccumulator(V2), which write their buffer input in place.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"
#include "ir/ops/MixedPrecisionScaleSpec.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrtTwoPi = 0.39894228040143267794;
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

/// dX = fn(dY, V) for same-shape dY, V (V is X or Y depending on the op).
template <typename Fn>
llvm::Error binaryGradKernel(KernelCall &call, int64_t cost, const Fn &fn) {
  const TensorView &dY = *call.in(0), &v = *call.in(1), &dX = *call.out(0);
  if (llvm::Error err = checkSameShape(call, dY, v, "dY and the saved tensor"))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, dX, "dY and dX"))
    return err;
  if (v.getDType() != dY.getDType() || dX.getDType() != dY.getDType())
    return call.error("dY, the saved tensor and dX must have one element type");
  return dispatchFloat(call, dY.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *g = dY.getDataAs<T>(), *x = v.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    parallelFor(call.getNumThreads(), dX.getNumElements(), grainFor(cost),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t i = lo; i < hi; ++i)
                    out[i] = fn(g[i], x[i]);
                });
    return llvm::Error::success();
  });
}

llvm::Error reluGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &x = *call.in(1), &dX = *call.out(0);
  if (dY.getDType() == DType::F32 && x.getDType() == DType::F32 &&
      dX.getDType() == DType::F32 && dY.getShape() == x.getShape() &&
      dX.getShape() == x.getShape()) {
    // Branch-free: the sign of x is data-dependent, a branch mispredicts.
    const float *g = dY.getDataAs<float>(), *px = x.getDataAs<float>();
    float *out = dX.getDataAs<float>();
    parallelFor(call.getNumThreads(), dX.getNumElements(), grainFor(1),
                [&](int64_t lo, int64_t hi) {
                  reluGradF32(g + lo, px + lo, out + lo, hi - lo);
                });
    return llvm::Error::success();
  }
  return binaryGradKernel(call, 1, [](auto g, auto x) {
    return x > decltype(x)(0) ? g : decltype(g)(0);
  });
}

llvm::Error geluGradKernel(KernelCall &call);
llvm::Error fastGeluGradKernel(KernelCall &call);

/// QuickGeluGrad's `alpha`, decoded at prepare.
llvm::Expected<std::unique_ptr<KernelState>>
prepareQuickGeluGrad(const Node &node) {
  return makeKernelState(
      static_cast<double>(node.getFloatAttr("alpha", 1.702f)));
}

llvm::Error quickGeluGradKernel(KernelCall &call) {
  double alpha = call.getState<double>();
  return binaryGradKernel(call, 8, [alpha](auto g, auto x) {
    using T = decltype(x);
    T a = static_cast<T>(alpha);
    T s = T(1) / (T(1) + std::exp(-a * x));
    return g * (s + a * x * s * (T(1) - s));
  });
}

llvm::Error sigmoidGradKernel(KernelCall &call) {
  return binaryGradKernel(
      call, 2, [](auto g, auto y) { return g * y * (decltype(y)(1) - y); });
}

llvm::Error tanhGradKernel(KernelCall &call) {
  return binaryGradKernel(
      call, 2, [](auto g, auto y) { return g * (decltype(y)(1) - y * y); });
}

/// d/dx of exact GELU.
template <typename T> T geluDerivative(T x) {
  T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrtHalf)));
  T pdf = T(kInvSqrtTwoPi) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

/// d/dx of GELU's tanh approximation.
template <typename T> T fastGeluDerivative(T x) {
  T x2 = x * x;
  T t = std::tanh(T(kSqrtTwoOverPi) * x * (T(1) + T(kGeluCubic) * x2));
  T dInner = T(kSqrtTwoOverPi) * (T(1) + T(3 * kGeluCubic) * x2);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dInner;
}

llvm::Error geluGradKernel(KernelCall &call) {
  return binaryGradKernel(call, 16,
                          [](auto g, auto x) { return g * geluDerivative(x); });
}

llvm::Error fastGeluGradKernel(KernelCall &call) {
  return binaryGradKernel(
      call, 16, [](auto g, auto x) { return g * fastGeluDerivative(x); });
}

/// BiasGeluGrad_dX(dY, X, B) and BiasFastGeluGrad_dX: dX = dY * gelu'(X + B)
/// with B broadcast along the last dimension (fp32 rows of the exact form:
/// RowKernels.h).
template <bool Fast> llvm::Error biasGeluGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &x = *call.in(1), &bias = *call.in(2);
  const TensorView &dX = *call.out(0);
  if (llvm::Error err = checkSameShape(call, dY, x, "dY and X"))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, dX, "dY and dX"))
    return err;
  int64_t width = x.getRank() ? x.getShape().back() : 1;
  if (bias.getNumElements() != width)
    return call.error("B must have one element per last-dimension entry");
  if (x.getDType() != dY.getDType() || bias.getDType() != dY.getDType() ||
      dX.getDType() != dY.getDType())
    return call.error("dY, X, B and dX must have one element type");
  return dispatchFloat(call, dY.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *g = dY.getDataAs<T>(), *px = x.getDataAs<T>(),
            *pb = bias.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    int64_t rows = width ? x.getNumElements() / width : 0;
    parallelFor(call.getNumThreads(), rows, grainFor(16 * width),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t r = lo; r < hi; ++r) {
                    int64_t j = 0;
                    if constexpr (std::is_same_v<T, float> && !Fast)
                      j = biasGeluGradRowF32(g + r * width, px + r * width, pb,
                                             out + r * width, width);
                    for (; j < width; ++j) {
                      int64_t i = r * width + j;
                      T v = px[i] + pb[j];
                      out[i] = g[i] * (Fast ? fastGeluDerivative(v)
                                            : geluDerivative(v));
                    }
                  }
                });
    return llvm::Error::success();
  });
}

/// Adds \p full (of shape \p fullShape) into \p dst, summing over the
/// dimensions along which dst's shape broadcasts. Sequential, so the sum
/// order is fixed.
template <typename T>
void sumIntoBroadcastShape(const T *full, llvm::ArrayRef<int64_t> fullShape,
                           T *dst, llvm::ArrayRef<int64_t> dstShape) {
  auto plan = makeBroadcastPlan<1>(fullShape, {dstShape});
  int64_t inner = plan.innerSize;
  BroadcastCursor<1> cursor(plan, 0);
  for (int64_t row = 0; row < plan.numRows; ++row) {
    const T *src = full + row * inner;
    T *to = dst + cursor.getOffsets()[0];
    if (plan.innerStride[0] == 1) {
      for (int64_t i = 0; i < inner; ++i)
        to[i] += src[i];
    } else {
      T sum = 0;
      for (int64_t i = 0; i < inner; ++i)
        sum += src[i];
      to[0] += sum;
    }
    cursor.next();
  }
}

/// DivGrad(dY, A, B) -> dA = dY / B, dB = -dY * A / B^2, each summed down to
/// its operand's shape.
llvm::Error divGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &a = *call.in(1), &b = *call.in(2);
  TensorView *dA = call.out(0), *dB = call.out(1);
  llvm::SmallVector<int64_t, 6> shape;
  if (!broadcastShapes(a.getShape(), b.getShape(), shape) ||
      llvm::ArrayRef<int64_t>(shape) != dY.getShape())
    return call.error("dY's shape is not the broadcast of A's and B's");
  if (dA)
    if (llvm::Error err = checkOutputShape(call, 0, a.getShape()))
      return err;
  if (dB)
    if (llvm::Error err = checkOutputShape(call, 1, b.getShape()))
      return err;
  return dispatchFloat(call, dY.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    int64_t n = dY.getNumElements();
    auto full = call.getContext().allocateScratch(dY.getDType(), dY.getShape());
    if (!full)
      return full.takeError();
    T *tmp = full->getView().template getDataAs<T>();
    const T *g = dY.getDataAs<T>();
    unsigned threads = call.getNumThreads();
    // Materialize A and B at the full shape once, then combine.
    auto fullA =
        call.getContext().allocateScratch(dY.getDType(), dY.getShape());
    if (!fullA)
      return fullA.takeError();
    auto fullB =
        call.getContext().allocateScratch(dY.getDType(), dY.getShape());
    if (!fullB)
      return fullB.takeError();
    broadcastCopy(a, fullA->getView(), threads);
    broadcastCopy(b, fullB->getView(), threads);
    const T *pa = fullA->getView().template getDataAs<T>();
    const T *pb = fullB->getView().template getDataAs<T>();
    if (dA) {
      for (int64_t i = 0; i < n; ++i)
        tmp[i] = g[i] / pb[i];
      T *out = dA->getDataAs<T>();
      if (dA->getShape() == dY.getShape()) {
        std::memcpy(out, tmp, n * sizeof(T));
      } else {
        std::fill(out, out + dA->getNumElements(), T(0));
        sumIntoBroadcastShape(tmp, dY.getShape(), out, dA->getShape());
      }
    }
    if (dB) {
      for (int64_t i = 0; i < n; ++i)
        tmp[i] = -g[i] * pa[i] / (pb[i] * pb[i]);
      T *out = dB->getDataAs<T>();
      if (dB->getShape() == dY.getShape()) {
        std::memcpy(out, tmp, n * sizeof(T));
      } else {
        std::fill(out, out + dB->getNumElements(), T(0));
        sumIntoBroadcastShape(tmp, dY.getShape(), out, dB->getShape());
      }
    }
    return llvm::Error::success();
  });
}

/// Scale's `scale_down`, decoded at prepare.
llvm::Expected<std::unique_ptr<KernelState>> prepareScale(const Node &node) {
  return makeKernelState(node.getIntAttr("scale_down", 0) != 0);
}

/// Scale(input, scale): input * scale, or input / scale with scale_down.
llvm::Error scaleKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  auto scale = readScalar(call, *call.in(1), "scale");
  if (!scale)
    return scale.takeError();
  bool scaleDown = call.getState<bool>();
  if (scaleDown && *scale == 0)
    return call.error("scale must not be 0 when scaling down");
  return dispatchFloat(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    T factor = static_cast<T>(scaleDown ? 1.0 / *scale : *scale);
    const T *x = in.getDataAs<T>();
    T *y = out.getDataAs<T>();
    parallelFor(call.getNumThreads(), out.getNumElements(), grainFor(1),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t i = lo; i < hi; ++i)
                    y[i] = x[i] * factor;
                });
    return llvm::Error::success();
  });
}

/// Element type of a float tensor these native kernels read and write.
bool isFloatStorage(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16 ||
         type == DType::F64;
}

/// Stores \p value as element \p i of a float tensor, rounding as needed.
inline void storeFloat(const TensorView &view, int64_t i, double value) {
  switch (view.getDType()) {
  case DType::F16:
    view.getDataAs<uint16_t>()[i] = floatToHalf(static_cast<float>(value));
    return;
  case DType::BF16:
    view.getDataAs<uint16_t>()[i] = floatToBFloat16(static_cast<float>(value));
    return;
  case DType::F64:
    view.getDataAs<double>()[i] = value;
    return;
  default:
    view.getDataAs<float>()[i] = static_cast<float>(value);
  }
}

/// Loads element \p i of a float tensor (f64 keeps its precision).
inline double loadDouble(const TensorView &view, int64_t i) {
  if (view.getDType() == DType::F64)
    return view.getDataAs<double>()[i];
  return loadFloat(view, i);
}

/// MixedPrecisionScale's fuse_outputs and `to`, decoded at prepare.
llvm::Expected<std::unique_ptr<KernelState>>
prepareMixedPrecisionScale(const Node &node) {
  return makeKernelState(ops::getMixedPrecisionScaleAttrs(node));
}

/// MixedPrecisionScale(S, X...) -> Y... = X * S in the `to` type, or one
/// flat output holding them all with fuse_outputs.
llvm::Error mixedPrecisionScaleKernel(KernelCall &call) {
  auto scale = readScalar(call, *call.in(0), "scale");
  if (!scale)
    return scale.takeError();
  unsigned numInputs = call.getNumInputs() - 1;
  llvm::SmallVector<uint64_t, 8> inputElements, resultElements;
  for (unsigned i = 0; i < numInputs; ++i) {
    const TensorView *x = call.in(i + 1);
    if (!x)
      return call.error("inputs and outputs may not be absent");
    inputElements.push_back(x->getNumElements());
  }
  for (unsigned i = 0; i < call.getNumOutputs(); ++i) {
    const TensorView *y = call.out(i);
    if (!y)
      return call.error("inputs and outputs may not be absent");
    resultElements.push_back(y->getNumElements());
  }
  auto spec = ops::layoutMixedPrecisionScale(
      call.getState<ops::MixedPrecisionScaleAttrs>(), inputElements,
      resultElements);
  if (!spec)
    return call.error(llvm::toString(spec.takeError()));
  for (unsigned i = 0; i < numInputs; ++i) {
    const TensorView &x = *call.in(i + 1);
    const ops::ScaledTensor &part = spec->tensors[i];
    TensorView &y = *call.out(part.result);
    if (!isFloatStorage(x.getDType()) || !isFloatStorage(y.getDType()))
      return call.error("inputs and outputs must be float tensors");
    if (spec->to && y.getDType() != *spec->to)
      return call.error("output type disagrees with attribute 'to'");
    int64_t base = part.offset;
    double s = *scale;
    parallelFor(call.getNumThreads(), part.elements, grainFor(4),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t j = lo; j < hi; ++j)
                    storeFloat(y, base + j, loadDouble(x, j) * s);
                });
  }
  return llvm::Error::success();
}

/// Which non-finite values IsAllFinite looks for.
struct FiniteCheck {
  bool infOnly = false, nanOnly = false;
};

/// IsAllFinite's isinf_only and isnan_only, which exclude each other.
llvm::Expected<std::unique_ptr<KernelState>>
prepareIsAllFinite(const Node &node) {
  FiniteCheck check;
  check.infOnly = node.getIntAttr("isinf_only", 0) != 0;
  check.nanOnly = node.getIntAttr("isnan_only", 0) != 0;
  if (check.infOnly && check.nanOnly)
    return prepareError(node, "isinf_only and isnan_only are exclusive");
  return makeKernelState(check);
}

/// IsAllFinite(X...) -> true if no element is inf or NaN (or only checks
/// one of them with isinf_only / isnan_only).
llvm::Error isAllFiniteKernel(KernelCall &call) {
  TensorView &out = *call.out(0);
  if (llvm::Error err = checkDType(call, out, DType::Bool, "output"))
    return err;
  if (out.getNumElements() != 1)
    return call.error("output must have one element");
  bool infOnly = call.getState<FiniteCheck>().infOnly;
  bool nanOnly = call.getState<FiniteCheck>().nanOnly;
  bool finite = true;
  for (const TensorView *x : call.getInputs()) {
    if (!x)
      continue;
    if (!isFloatStorage(x->getDType()))
      return unsupportedType(call, x->getDType());
    for (int64_t i = 0, e = x->getNumElements(); i < e && finite; ++i) {
      double v = loadDouble(*x, i);
      bool bad = infOnly   ? std::isinf(v)
                 : nanOnly ? std::isnan(v)
                           : !std::isfinite(v);
      finite = !bad;
    }
  }
  out.getDataAs<uint8_t>()[0] = finite;
  return llvm::Error::success();
}

/// Reads an optional bool scalar input (false when absent).
llvm::Expected<bool> readFlag(const KernelCall &call, unsigned index,
                              llvm::StringRef what, bool fallback) {
  const TensorView *flag = call.in(index);
  if (!flag)
    return fallback;
  auto value = readScalar(call, *flag, what);
  if (!value)
    return value.takeError();
  return *value != 0;
}

/// InPlaceAccumulatorV2(buffer, value, overwrite?) -> (updated, buffer_out?):
/// buffer = overwrite ? value : buffer + value, written into the buffer
/// input itself; buffer_out (if present and elsewhere) receives a copy.
llvm::Error inPlaceAccumulatorV2Kernel(KernelCall &call) {
  const TensorView &buffer = *call.in(0), &value = *call.in(1);
  if (llvm::Error err = checkSameShape(call, buffer, value, "buffer and value"))
    return err;
  if (!isFloatStorage(buffer.getDType()) || !isFloatStorage(value.getDType()))
    return call.error("buffer and value must be float tensors");
  auto overwrite = readFlag(call, 2, "overwrite_flag", false);
  if (!overwrite)
    return overwrite.takeError();
  TensorView &updated = *call.out(0);
  if (llvm::Error err = checkDType(call, updated, DType::Bool, "updated flag"))
    return err;
  if (updated.getNumElements() != 1)
    return call.error("the updated flag must have one element");
  int64_t n = buffer.getNumElements();
  bool sameType = buffer.getDType() == value.getDType();
  if (*overwrite && sameType) {
    copyElements(value, buffer);
  } else if (buffer.getDType() == DType::F32 && sameType) {
    float *acc = buffer.getDataAs<float>();
    const float *add = value.getDataAs<float>();
    parallelFor(
        call.getNumThreads(), n, grainFor(1),
        [&](int64_t lo, int64_t hi) { addToF32(add + lo, acc + lo, hi - lo); });
  } else {
    bool replace = *overwrite;
    parallelFor(
        call.getNumThreads(), n, grainFor(4), [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i)
            storeFloat(buffer, i,
                       replace ? loadDouble(value, i)
                               : loadDouble(buffer, i) + loadDouble(value, i));
        });
  }
  updated.getDataAs<uint8_t>()[0] = 1;
  if (TensorView *out = call.out(1)) {
    if (llvm::Error err =
            checkSameShape(call, buffer, *out, "buffer and buffer_out"))
      return err;
    if (llvm::Error err =
            checkDType(call, *out, buffer.getDType(), "buffer_out"))
      return err;
    copyElements(buffer, *out);
  }
  return llvm::Error::success();
}

/// InPlaceAccumulator(old_sum, value, update_signal?) -> new_sum: old_sum +
/// value, or old_sum unchanged when update_signal is false.
llvm::Error inPlaceAccumulatorKernel(KernelCall &call) {
  const TensorView &oldSum = *call.in(0), &value = *call.in(1);
  TensorView &newSum = *call.out(0);
  if (llvm::Error err =
          checkSameShape(call, oldSum, value, "old_sum and value"))
    return err;
  if (llvm::Error err =
          checkSameShape(call, oldSum, newSum, "old_sum and new_sum"))
    return err;
  if (!isFloatStorage(oldSum.getDType()) || !isFloatStorage(value.getDType()) ||
      newSum.getDType() != oldSum.getDType())
    return call.error("old_sum, value and new_sum must be float tensors");
  auto update = readFlag(call, 2, "update_signal", true);
  if (!update)
    return update.takeError();
  if (!*update) {
    copyElements(oldSum, newSum);
    return llvm::Error::success();
  }
  parallelFor(call.getNumThreads(), newSum.getNumElements(), grainFor(4),
              [&](int64_t lo, int64_t hi) {
                for (int64_t i = lo; i < hi; ++i)
                  storeFloat(newSum, i,
                             loadDouble(oldSum, i) + loadDouble(value, i));
              });
  return llvm::Error::success();
}

/// IsFinite(X) -> bool per element.
llvm::Error isFiniteKernel(KernelCall &call) {
  const TensorView &x = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, x, out, "input and output"))
    return err;
  if (llvm::Error err = checkDType(call, out, DType::Bool, "output"))
    return err;
  if (!isFloatStorage(x.getDType()))
    return unsupportedType(call, x.getDType());
  uint8_t *y = out.getDataAs<uint8_t>();
  parallelFor(call.getNumThreads(), x.getNumElements(), grainFor(2),
              [&](int64_t lo, int64_t hi) {
                for (int64_t i = lo; i < hi; ++i)
                  y[i] = std::isfinite(loadDouble(x, i));
              });
  return llvm::Error::success();
}

/// ZeroGradient(old_gradient, reset_signal) -> zeros of old_gradient's shape.
llvm::Error zeroGradientKernel(KernelCall &call) {
  const TensorView &old = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, old, out, "gradient and output"))
    return err;
  zeroFill(out, call.getNumThreads());
  return llvm::Error::success();
}

/// PassThrough(inputs...) -> the same tensors.
llvm::Error passThroughKernel(KernelCall &call) {
  if (call.getNumOutputs() > call.getNumInputs())
    return call.error("more outputs than inputs");
  for (unsigned i = 0; i < call.getNumOutputs(); ++i) {
    const TensorView *in = call.in(i);
    TensorView *out = call.out(i);
    if (!out)
      continue;
    if (!in || in->getDType() != out->getDType() ||
        in->getSizeInBytes() != out->getSizeInBytes())
      return call.error("output " + llvm::Twine(i) +
                        " does not match its input");
    copyElements(*in, *out);
  }
  return llvm::Error::success();
}

} // namespace

void cpu::registerTrainingKernels(KernelTable &table) {
  table.add(kMsDomain, "ReluGrad", reluGradKernel);
  table.add(kMsDomain, "GeluGrad", geluGradKernel);
  table.add(kMsDomain, "FastGeluGrad", fastGeluGradKernel);
  table.add(kMsDomain, "QuickGeluGrad", quickGeluGradKernel);
  table.setPrepare(kMsDomain, "QuickGeluGrad", prepareQuickGeluGrad);
  table.add(kMsDomain, "BiasGeluGrad_dX", biasGeluGradKernel<false>);
  table.add(kMsDomain, "BiasFastGeluGrad_dX", biasGeluGradKernel<true>);
  table.add(kMsDomain, "IsFinite", isFiniteKernel, KernelMode::Native);
  table.add(kMsDomain, "ZeroGradient", zeroGradientKernel, KernelMode::Native);
  table.add(kMsDomain, "PassThrough",
            KernelInfo{passThroughKernel, KernelMode::Native, nullptr,
                       KernelResults::MayBeAbsent});
  table.add(kMsDomain, "SigmoidGrad", sigmoidGradKernel);
  table.add(kMsDomain, "TanhGrad", tanhGradKernel);
  table.add(kMsDomain, "DivGrad",
            KernelInfo{divGradKernel, KernelMode::StageHalfAsFloat, nullptr,
                       KernelResults::MayBeAbsent});
  table.add(kMsDomain, "Scale", scaleKernel);
  table.setPrepare(kMsDomain, "Scale", prepareScale);
  table.add(kMsDomain, "MixedPrecisionScale", mixedPrecisionScaleKernel,
            KernelMode::Native);
  table.setPrepare(kMsDomain, "MixedPrecisionScale",
                   prepareMixedPrecisionScale);
  table.add(kMsDomain, "IsAllFinite", isAllFiniteKernel, KernelMode::Native);
  table.setPrepare(kMsDomain, "IsAllFinite", prepareIsAllFinite);
  table.add(kMsDomain, "InPlaceAccumulatorV2", inPlaceAccumulatorV2Kernel,
            KernelMode::Native);
  table.add(kMsDomain, "InPlaceAccumulator", inPlaceAccumulatorKernel,
            KernelMode::Native);
}
