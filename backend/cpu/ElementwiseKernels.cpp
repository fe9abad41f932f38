//===- ElementwiseKernels.cpp - Broadcasting binary and n-ary ops ---------===//
//
// Add, Sub, Mul, Div, Pow, Mod, PRelu, Min, Max, Sum, Mean, the
// comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), the
// logical ops (And, Or, Xor) and Where, with numpy broadcasting. Same-shape and
// scalar operands take contiguous fast paths; other shapes are collapsed by a
// BroadcastPlan so the inner loop always runs over a contiguous or a repeated
// operand. Integer arithmetic wraps (two's complement) instead of overflowing,
// and integer division by zero is an error.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Simd.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

//===----------------------------------------------------------------------===//
// Element operations
//===----------------------------------------------------------------------===//

template <typename T> using Unsigned = std::make_unsigned_t<T>;

struct AddOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) +
                            static_cast<Unsigned<T>>(b));
    else
      return a + b;
  }
};
struct SubOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) -
                            static_cast<Unsigned<T>>(b));
    else
      return a - b;
  }
};
struct MulOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) *
                            static_cast<Unsigned<T>>(b));
    else
      return a * b;
  }
};
/// Division; for integers the divisor was checked to be nonzero.
struct DivOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (b == T(-1)) // MIN / -1 overflows: wrap like negation.
        return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(a));
      return a / b;
    } else {
      return a / b;
    }
  }
};
struct PowOp {
  template <typename T> T operator()(T base, T exponent) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(base, exponent);
    } else {
      if (exponent < 0) {
        // Integer reciprocal powers truncate to 0 except for |base| == 1.
        if (base == 1)
          return 1;
        if constexpr (std::is_signed_v<T>)
          if (base == T(-1))
            return (exponent % 2) ? T(-1) : T(1);
        return 0;
      }
      MulOp mul;
      T result = 1;
      while (exponent > 0) {
        if (exponent & 1)
          result = mul(result, base);
        base = mul(base, base);
        exponent = static_cast<T>(exponent >> 1);
      }
      return result;
    }
  }
};
/// Max and Min propagate NaN.
struct MaxOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<T>::quiet_NaN();
    return a < b ? b : a;
  }
};
struct MinOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<T>::quiet_NaN();
    return b < a ? b : a;
  }
};
/// PRelu: the slope applies to negative inputs.
struct PReluOp {
  template <typename T> T operator()(T x, T slope) const {
    return x < T(0) ? static_cast<T>(x * slope) : x;
  }
};
/// Mod with fmod = 1: the result has the dividend's sign (C fmod / %).
struct FmodOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmod(a, b);
    else if constexpr (std::is_signed_v<T>)
      return b == T(-1) ? T(0) : static_cast<T>(a % b);
    else
      return static_cast<T>(a % b);
  }
};
/// Mod with fmod = 0 (integers): the result has the divisor's sign.
struct FloorModOp {
  template <typename T> T operator()(T a, T b) const {
    T r = FmodOp()(a, b);
    if constexpr (std::is_signed_v<T>)
      if (r != T(0) && ((r < T(0)) != (b < T(0))))
        r = static_cast<T>(r + b);
    return r;
  }
};
struct EqualOp {
  template <typename T> uint8_t operator()(T a, T b) const { return a == b; }
};
struct LessOp {
  template <typename T> uint8_t operator()(T a, T b) const { return a < b; }
};
struct GreaterOp {
  template <typename T> uint8_t operator()(T a, T b) const { return a > b; }
};
struct LessOrEqualOp {
  template <typename T> uint8_t operator()(T a, T b) const { return a <= b; }
};
struct GreaterOrEqualOp {
  template <typename T> uint8_t operator()(T a, T b) const { return a >= b; }
};
struct AndOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) & (b != 0); }
};
struct OrOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) | (b != 0); }
};
struct XorOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) ^ (b != 0); }
};

//===----------------------------------------------------------------------===//
// Broadcast loops
//===----------------------------------------------------------------------===//

/// Ops whose fp32 form is one vector instruction rounding like the scalar
/// one (the functors are generic, so they apply to F32x4 as they are).
template <typename Op>
constexpr bool kHasF32Vector =
    std::is_same_v<Op, AddOp> || std::is_same_v<Op, SubOp> ||
    std::is_same_v<Op, MulOp> || std::is_same_v<Op, DivOp>;

/// o[i] = op(a[i * strideA], b[i * strideB]) for i in [0, n), strides 0
/// (a repeated scalar) or 1, four lanes at a time.
template <typename Op>
void vectorRowF32(const float *a, int64_t strideA, const float *b,
                  int64_t strideB, float *o, int64_t n, Op op) {
  const F32x4 scalarA = splatF32x4(a[0]), scalarB = splatF32x4(b[0]);
  int64_t i = 0;
  for (; i + kF32Lanes <= n; i += kF32Lanes) {
    F32x4 va = strideA ? loadF32x4(a + i) : scalarA;
    F32x4 vb = strideB ? loadF32x4(b + i) : scalarB;
    storeF32x4(o + i, op(va, vb));
  }
  for (; i < n; ++i)
    o[i] = op(a[i * strideA], b[i * strideB]);
}

/// out = op(a, b) with numpy broadcasting of a and b to out's shape.
template <typename TIn, typename TOut, typename Op>
void binaryLoop(const TensorView &a, const TensorView &b, const TensorView &out,
                Op op, unsigned threads) {
  const TIn *pa = a.getDataAs<TIn>();
  const TIn *pb = b.getDataAs<TIn>();
  TOut *po = out.getDataAs<TOut>();
  int64_t n = out.getNumElements();
  if (n == 0)
    return;
  int64_t grain = grainFor(1);
  llvm::ArrayRef<int64_t> shape = out.getShape();
  if constexpr (std::is_same_v<TIn, float> && std::is_same_v<TOut, float> &&
                kHasF32Vector<Op>) {
    int64_t strideA = a.getShape() == shape ? 1 : 0;
    int64_t strideB = b.getShape() == shape ? 1 : 0;
    bool flat = (strideA || a.getNumElements() == 1) &&
                (strideB || b.getNumElements() == 1);
    if (flat) {
      parallelFor(threads, n, grain, [&](int64_t lo, int64_t hi) {
        vectorRowF32(pa + lo * strideA, strideA, pb + lo * strideB, strideB,
                     po + lo, hi - lo, op);
      });
      return;
    }
    auto plan = makeBroadcastPlan<2>(shape, {a.getShape(), b.getShape()});
    int64_t inner = plan.innerSize;
    int64_t sa = plan.innerStride[0], sb = plan.innerStride[1];
    forEachBroadcastRow(
        plan, threads,
        [&](int64_t outOffset, const std::array<int64_t, 2> &offsets) {
          vectorRowF32(pa + offsets[0], sa, pb + offsets[1], sb, po + outOffset,
                       inner, op);
        });
    return;
  }
  if (a.getShape() == shape && b.getShape() == shape) {
    parallelFor(threads, n, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        po[i] = op(pa[i], pb[i]);
    });
    return;
  }
  if (b.getNumElements() == 1 && a.getShape() == shape) {
    TIn scalar = pb[0];
    parallelFor(threads, n, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        po[i] = op(pa[i], scalar);
    });
    return;
  }
  if (a.getNumElements() == 1 && b.getShape() == shape) {
    TIn scalar = pa[0];
    parallelFor(threads, n, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        po[i] = op(scalar, pb[i]);
    });
    return;
  }
  auto plan = makeBroadcastPlan<2>(shape, {a.getShape(), b.getShape()});
  int64_t inner = plan.innerSize;
  int64_t sa = plan.innerStride[0], sb = plan.innerStride[1];
  forEachBroadcastRow(
      plan, threads,
      [&](int64_t outOffset, const std::array<int64_t, 2> &offsets) {
        const TIn *ra = pa + offsets[0];
        const TIn *rb = pb + offsets[1];
        TOut *ro = po + outOffset;
        if (sa == 1 && sb == 1) {
          for (int64_t i = 0; i < inner; ++i)
            ro[i] = op(ra[i], rb[i]);
        } else if (sa == 1) {
          TIn scalar = rb[0];
          for (int64_t i = 0; i < inner; ++i)
            ro[i] = op(ra[i], scalar);
        } else if (sb == 1) {
          TIn scalar = ra[0];
          for (int64_t i = 0; i < inner; ++i)
            ro[i] = op(scalar, rb[i]);
        } else {
          TOut value = op(ra[0], rb[0]);
          for (int64_t i = 0; i < inner; ++i)
            ro[i] = value;
        }
      });
}

/// Checks that a and b broadcast to out's shape.
llvm::Error checkBroadcast(const KernelCall &call, const TensorView &a,
                           const TensorView &b, const TensorView &out) {
  llvm::SmallVector<int64_t, 6> shape;
  if (!broadcastShapes(a.getShape(), b.getShape(), shape))
    return call.error("shapes " + shapeString(a.getShape()) + " and " +
                      shapeString(b.getShape()) + " do not broadcast");
  if (out.getShape() != llvm::ArrayRef<int64_t>(shape))
    return call.error("output has shape " + shapeString(out.getShape()) +
                      " but the operands broadcast to " + shapeString(shape));
  return llvm::Error::success();
}

/// Integer division: refuse a zero divisor anywhere in b.
template <typename T>
llvm::Error checkNonzeroDivisor(const KernelCall &call, const TensorView &b) {
  if constexpr (std::is_integral_v<T>) {
    const T *data = b.getDataAs<T>();
    for (int64_t i = 0, e = b.getNumElements(); i < e; ++i)
      if (data[i] == 0)
        return call.error("integer division by zero");
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// Arithmetic binary op with the same element type in and out.
template <typename Op> llvm::Error arithmeticKernel(KernelCall &call) {
  const TensorView &a = *call.in(0), &b = *call.in(1);
  const TensorView &out = *call.out(0);
  if (a.getDType() != b.getDType() || out.getDType() != a.getDType())
    return call.error(
        "operand element types differ: " + dtypeName(a.getDType()) + ", " +
        dtypeName(b.getDType()) + " -> " + dtypeName(out.getDType()));
  if (llvm::Error err = checkBroadcast(call, a, b, out))
    return err;
  return dispatchArithmetic(call, a.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Op, DivOp>)
      if (llvm::Error err = checkNonzeroDivisor<T>(call, b))
        return err;
    binaryLoop<T, T>(a, b, out, Op(), call.getNumThreads());
    return llvm::Error::success();
  });
}

/// Mod's `fmod`, decoded at prepare as whether it follows C: a float Mod
/// without it is an error.
llvm::Expected<std::unique_ptr<KernelState>> prepareMod(const Node &node) {
  bool cStyle = node.getIntAttr("fmod", 0) != 0;
  if (!cStyle && isFloatingPoint(node.getOperand(0)->getType().getDType()))
    return prepareError(node, "floating-point Mod requires fmod = 1");
  return makeKernelState(cStyle);
}

/// Mod(A, B): fmod = 1 follows C, fmod = 0 (integers only) takes the
/// divisor's sign.
llvm::Error modKernel(KernelCall &call) {
  const TensorView &a = *call.in(0), &b = *call.in(1);
  const TensorView &out = *call.out(0);
  if (a.getDType() != b.getDType() || out.getDType() != a.getDType())
    return call.error("operand element types differ");
  if (llvm::Error err = checkBroadcast(call, a, b, out))
    return err;
  bool cStyle = call.getState<bool>();
  return dispatchArithmetic(call, a.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (llvm::Error err = checkNonzeroDivisor<T>(call, b))
      return err;
    if constexpr (std::is_floating_point_v<T>) {
      if (!cStyle)
        return call.error("floating-point Mod requires fmod = 1");
      binaryLoop<T, T>(a, b, out, FmodOp(), call.getNumThreads());
    } else if (cStyle) {
      binaryLoop<T, T>(a, b, out, FmodOp(), call.getNumThreads());
    } else {
      binaryLoop<T, T>(a, b, out, FloorModOp(), call.getNumThreads());
    }
    return llvm::Error::success();
  });
}

/// Pow(X, Y): Y may have another numeric type; it is converted to X's.
llvm::Error powKernel(KernelCall &call) {
  const TensorView &base = *call.in(0);
  const TensorView *exponent = call.in(1);
  const TensorView &out = *call.out(0);
  if (out.getDType() != base.getDType())
    return call.error("output element type differs from the base's");
  if (llvm::Error err = checkBroadcast(call, base, *exponent, out))
    return err;
  std::optional<TensorBuffer> converted;
  if (exponent->getDType() != base.getDType()) {
    auto buffer = call.getContext().allocateScratch(
        base.getDType(), exponent->getShape(), MemoryCategory::Temporaries);
    if (!buffer)
      return buffer.takeError();
    if (llvm::Error err = castElements(call, *exponent, buffer->getView()))
      return err;
    converted.emplace(std::move(*buffer));
    exponent = &converted->getView();
  }
  return dispatchArithmetic(
      call, base.getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        const TensorView &e = *exponent;
        // Common constant exponents avoid the cost of pow.
        if constexpr (std::is_floating_point_v<T>) {
          if (e.getNumElements() == 1 && base.getShape() == out.getShape()) {
            T p = e.getDataAs<T>()[0];
            const T *x = base.getDataAs<T>();
            T *y = out.getDataAs<T>();
            auto apply = [&](auto fn) {
              parallelFor(call.getNumThreads(), out.getNumElements(),
                          grainFor(1), [&](int64_t lo, int64_t hi) {
                            for (int64_t i = lo; i < hi; ++i)
                              y[i] = fn(x[i]);
                          });
            };
            if (p == T(2)) {
              apply([](T v) { return v * v; });
              return llvm::Error::success();
            }
            if (p == T(3)) {
              apply([](T v) { return v * v * v; });
              return llvm::Error::success();
            }
            if (p == T(0.5)) {
              apply([](T v) { return std::sqrt(v); });
              return llvm::Error::success();
            }
            if (p == T(1)) {
              apply([](T v) { return v; });
              return llvm::Error::success();
            }
          }
        }
        binaryLoop<T, T>(base, e, out, PowOp(), call.getNumThreads());
        return llvm::Error::success();
      });
}

/// Comparison producing bool.
template <typename Op> llvm::Error compareKernel(KernelCall &call) {
  const TensorView &a = *call.in(0), &b = *call.in(1);
  const TensorView &out = *call.out(0);
  if (a.getDType() != b.getDType())
    return call.error("operand element types differ");
  if (llvm::Error err = checkDType(call, out, DType::Bool, "output"))
    return err;
  if (llvm::Error err = checkBroadcast(call, a, b, out))
    return err;
  if (a.getDType() == DType::Bool) {
    if constexpr (std::is_same_v<Op, EqualOp>) {
      // Bools compare by truth, not by byte value.
      binaryLoop<uint8_t, uint8_t>(a, b, out, XorOp(), call.getNumThreads());
      uint8_t *data = out.getDataAs<uint8_t>();
      for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
        data[i] = !data[i];
      return llvm::Error::success();
    }
  }
  return dispatchArithmetic(call, a.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    binaryLoop<T, uint8_t>(a, b, out, Op(), call.getNumThreads());
    return llvm::Error::success();
  });
}

/// And, Or, Xor on bools.
template <typename Op> llvm::Error logicalKernel(KernelCall &call) {
  const TensorView &a = *call.in(0), &b = *call.in(1);
  const TensorView &out = *call.out(0);
  for (const TensorView *t : {&a, &b, static_cast<const TensorView *>(&out)})
    if (llvm::Error err = checkDType(call, *t, DType::Bool, "operand"))
      return err;
  if (llvm::Error err = checkBroadcast(call, a, b, out))
    return err;
  binaryLoop<uint8_t, uint8_t>(a, b, out, Op(), call.getNumThreads());
  return llvm::Error::success();
}

/// Where(condition, X, Y).
/// o[i] = c[i * sc] ? x[i * sx] : y[i * sy] for i in [0, n) over 4-byte
/// elements, strides 0 or 1, four lanes at a time and without a branch (a
/// causal mask would mispredict at every row's diagonal).
template <typename U>
void selectRow32(const uint8_t *c, int64_t sc, const U *x, int64_t sx,
                 const U *y, int64_t sy, U *o, int64_t n) {
  static_assert(sizeof(U) == 4, "four-byte elements only");
  typedef uint8_t U8x4 __attribute__((vector_size(4)));
  auto load = [](const U *p, int64_t stride, int64_t i) {
    I32x4 v;
    if (stride) {
      std::memcpy(&v, p + i, sizeof(v));
    } else {
      int32_t bits;
      std::memcpy(&bits, p, sizeof(bits));
      v = I32x4{bits, bits, bits, bits};
    }
    return v;
  };
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U8x4 flags;
    if (sc) {
      std::memcpy(&flags, c + i, sizeof(flags));
    } else {
      flags = U8x4{c[0], c[0], c[0], c[0]};
    }
    I32x4 mask = __builtin_convertvector(flags, I32x4) != 0;
    I32x4 picked = (load(x, sx, i) & mask) | (load(y, sy, i) & ~mask);
    std::memcpy(o + i, &picked, sizeof(picked));
  }
  for (; i < n; ++i) {
    U xv = x[i * sx], yv = y[i * sy];
    o[i] = c[i * sc] ? xv : yv;
  }
}

llvm::Error whereKernel(KernelCall &call) {
  const TensorView &cond = *call.in(0), &x = *call.in(1), &y = *call.in(2);
  const TensorView &out = *call.out(0);
  if (llvm::Error err = checkDType(call, cond, DType::Bool, "condition"))
    return err;
  if (x.getDType() != y.getDType() || out.getDType() != x.getDType())
    return call.error("X, Y and the output must have one element type");
  llvm::SmallVector<int64_t, 6> xy, shape;
  if (!broadcastShapes(x.getShape(), y.getShape(), xy) ||
      !broadcastShapes(cond.getShape(), xy, shape))
    return call.error("condition, X and Y do not broadcast");
  if (out.getShape() != llvm::ArrayRef<int64_t>(shape))
    return call.error("output has shape " + shapeString(out.getShape()) +
                      ", operands broadcast to " + shapeString(shape));
  if (out.getNumElements() == 0)
    return llvm::Error::success();
  return dispatchStorage(call, x.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    const uint8_t *pc = cond.getDataAs<uint8_t>();
    const U *px = x.getDataAs<U>();
    const U *py = y.getDataAs<U>();
    U *po = out.getDataAs<U>();
    auto plan = makeBroadcastPlan<3>(
        out.getShape(), {cond.getShape(), x.getShape(), y.getShape()});
    int64_t inner = plan.innerSize;
    // Plain variables: C++17 lambdas cannot capture structured bindings.
    const int64_t sc = plan.innerStride[0], sx = plan.innerStride[1],
                  sy = plan.innerStride[2];
    forEachBroadcastRow(plan, call.getNumThreads(),
                        [&](int64_t o, const std::array<int64_t, 3> &offsets) {
                          const uint8_t *rc = pc + offsets[0];
                          const U *rx = px + offsets[1];
                          const U *ry = py + offsets[2];
                          U *ro = po + o;
                          if constexpr (sizeof(U) == 4) {
                            selectRow32(rc, sc, rx, sx, ry, sy, ro, inner);
                            return;
                          }
                          if (sc == 1 && sx == 1 && sy == 1) {
                            for (int64_t i = 0; i < inner; ++i)
                              ro[i] = rc[i] ? rx[i] : ry[i];
                          } else {
                            for (int64_t i = 0; i < inner; ++i)
                              ro[i] = rc[i * sc] ? rx[i * sx] : ry[i * sy];
                          }
                        });
    return llvm::Error::success();
  });
}

/// Sum, Mean, Max, Min over any number of broadcasting inputs.
template <typename Op, bool IsMean = false>
llvm::Error variadicKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  llvm::SmallVector<const TensorView *, 4> operands;
  llvm::SmallVector<int64_t, 6> shape;
  for (const TensorView *input : call.getInputs()) {
    if (!input)
      return call.error("inputs may not be absent");
    if (input->getDType() != out.getDType())
      return call.error("inputs and output must have one element type");
    llvm::SmallVector<int64_t, 6> merged;
    if (!broadcastShapes(shape, input->getShape(), merged))
      return call.error("inputs do not broadcast");
    shape = std::move(merged);
    operands.push_back(input);
  }
  if (operands.empty())
    return call.error("needs at least one input");
  if (out.getShape() != llvm::ArrayRef<int64_t>(shape))
    return call.error("output has shape " + shapeString(out.getShape()) +
                      ", inputs broadcast to " + shapeString(shape));
  // An input after the first two that aliases the output would be clobbered
  // before it is read: read it from a copy.
  llvm::SmallVector<TensorBuffer, 2> copies;
  copies.reserve(operands.size());
  for (unsigned i = 2; i < operands.size(); ++i) {
    if (!operands[i]->aliases(out))
      continue;
    auto copy = call.getContext().allocateScratch(operands[i]->getDType(),
                                                  operands[i]->getShape(),
                                                  MemoryCategory::Temporaries);
    if (!copy)
      return copy.takeError();
    copyElements(*operands[i], copy->getView());
    copies.push_back(std::move(*copy));
    operands[i] = &copies.back().getView();
  }
  return dispatchArithmetic(call, out.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    unsigned threads = call.getNumThreads();
    if (operands.size() == 1)
      broadcastCopy(*operands[0], out, threads);
    else
      binaryLoop<T, T>(*operands[0], *operands[1], out, Op(), threads);
    for (unsigned i = 2; i < operands.size(); ++i)
      binaryLoop<T, T>(out, *operands[i], out, Op(), threads);
    if constexpr (IsMean) {
      T *data = out.getDataAs<T>();
      T count = static_cast<T>(operands.size());
      for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
        data[i] = static_cast<T>(data[i] / count);
    }
    return llvm::Error::success();
  });
}

} // namespace

void cpu::registerElementwiseKernels(KernelTable &table) {
  table.add("", "Add", arithmeticKernel<AddOp>);
  table.add("", "Sub", arithmeticKernel<SubOp>);
  table.add("", "Mul", arithmeticKernel<MulOp>);
  table.add("", "Div", arithmeticKernel<DivOp>);
  table.add("", "Pow", powKernel);
  table.add("", "PRelu", arithmeticKernel<PReluOp>);
  table.add("", "Mod", modKernel);
  table.setPrepare("", "Mod", prepareMod);
  table.add("", "Equal", compareKernel<EqualOp>);
  table.add("", "Less", compareKernel<LessOp>);
  table.add("", "Greater", compareKernel<GreaterOp>);
  table.add("", "LessOrEqual", compareKernel<LessOrEqualOp>);
  table.add("", "GreaterOrEqual", compareKernel<GreaterOrEqualOp>);
  table.add("", "And", logicalKernel<AndOp>, KernelMode::Native);
  table.add("", "Or", logicalKernel<OrOp>, KernelMode::Native);
  table.add("", "Xor", logicalKernel<XorOp>, KernelMode::Native);
  table.add("", "Where", whereKernel, KernelMode::Native);
  table.add("", "Sum", variadicKernel<AddOp>);
  table.add("", "Mean", variadicKernel<AddOp, true>);
  table.add("", "Max", variadicKernel<MaxOp>);
  table.add("", "Min", variadicKernel<MinOp>);
}
