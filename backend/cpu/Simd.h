//===- Simd.h - Four-lane fp32 vectors for hot element-wise loops -*- C++ -*-===//
//
// Internal to the CPU backend. GCC at -O2 vectorizes a loop only when no
// scalar remainder and no aliasing check are needed, which rules out almost
// every kernel loop; the hottest ones (Relu and its gradient, col2im's
// accumulation, batch-norm's per-channel passes) are written here with the
// compiler's vector extension instead, for GCC and Clang alike. Vectors are
// 16 bytes (SSE width, the x86-64 baseline), so no function takes a wider
// vector by value and no ABI warning applies. Element-wise helpers compute
// each element exactly as the scalar expression they replace. The sums
// accumulate in double over eight fixed lanes (the lane of an element
// depends only on its index), so they are reproducible, but round
// differently from one running sum.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_SIMD_H
#define GMOPT_BACKEND_CPU_SIMD_H

#include <climits>
#include <cstdint>
#include <cstring>

namespace gmopt {
namespace cpu {

/// Four fp32 lanes.
typedef float F32x4 __attribute__((vector_size(16)));
/// Four int32 lanes (comparison masks: all ones or all zeros).
typedef int32_t I32x4 __attribute__((vector_size(16)));

/// Two fp64 lanes.
typedef double F64x2 __attribute__((vector_size(16)));
/// Two fp32 lanes (only as a load to widen).
typedef float F32x2 __attribute__((vector_size(8)));

/// Lanes per F32x4.
constexpr int64_t kF32Lanes = 4;

/// Unaligned load of four floats.
inline F32x4 loadF32x4(const float *p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// Unaligned store of four floats.
inline void storeF32x4(float *p, F32x4 v) { std::memcpy(p, &v, sizeof(v)); }

/// Two floats from \p p, widened to double.
inline F64x2 loadF32x2AsF64(const float *p) {
  F32x2 v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_convertvector(v, F64x2);
}

/// Stores \p v rounded to two floats at \p p.
inline void storeF64x2AsF32(float *p, F64x2 v) {
  F32x2 narrow = __builtin_convertvector(v, F32x2);
  std::memcpy(p, &narrow, sizeof(narrow));
}

/// All lanes \p value.
inline F32x4 splatF32x4(float value) {
  return F32x4{value, value, value, value};
}

/// Lane-wise \p mask ? \p v : +0.0 (mask lanes are all ones or zeros).
inline F32x4 keepWhere(I32x4 mask, F32x4 v) {
  return reinterpret_cast<F32x4>(reinterpret_cast<I32x4>(v) & mask);
}

/// y[i] = x[i] < 0 ? 0 : x[i] for i in [0, n); NaN and -0 pass through.
/// \p y may equal \p x.
inline void reluF32(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  const F32x4 zero = splatF32x4(0.0f);
  for (; i + 2 * kF32Lanes <= n; i += 2 * kF32Lanes) {
    F32x4 a = loadF32x4(x + i), b = loadF32x4(x + i + kF32Lanes);
    storeF32x4(y + i, keepWhere(~(a < zero), a));
    storeF32x4(y + i + kF32Lanes, keepWhere(~(b < zero), b));
  }
  for (; i < n; ++i)
    y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/// dx[i] = x[i] > 0 ? dy[i] : 0 for i in [0, n). \p dx may equal \p dy or
/// \p x.
inline void reluGradF32(const float *dy, const float *x, float *dx, int64_t n) {
  int64_t i = 0;
  const F32x4 zero = splatF32x4(0.0f);
  for (; i + 2 * kF32Lanes <= n; i += 2 * kF32Lanes) {
    F32x4 xa = loadF32x4(x + i), xb = loadF32x4(x + i + kF32Lanes);
    F32x4 ga = loadF32x4(dy + i), gb = loadF32x4(dy + i + kF32Lanes);
    storeF32x4(dx + i, keepWhere(xa > zero, ga));
    storeF32x4(dx + i + kF32Lanes, keepWhere(xb > zero, gb));
  }
  for (; i < n; ++i)
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/// dst[i] += src[i] for i in [0, n); the ranges are the same or disjoint.
inline void addToF32(const float *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 2 * kF32Lanes <= n; i += 2 * kF32Lanes) {
    storeF32x4(dst + i, loadF32x4(dst + i) + loadF32x4(src + i));
    storeF32x4(dst + i + kF32Lanes,
               loadF32x4(dst + i + kF32Lanes) + loadF32x4(src + i + kF32Lanes));
  }
  for (; i < n; ++i)
    dst[i] += src[i];
}

/// y[i] = x[i] * scale + shift for i in [0, n).
inline void scaleShiftF32(const float *x, float *y, int64_t n, float scale,
                          float shift) {
  int64_t i = 0;
  const F32x4 vs = splatF32x4(scale), vt = splatF32x4(shift);
  for (; i + kF32Lanes <= n; i += kF32Lanes)
    storeF32x4(y + i, loadF32x4(x + i) * vs + vt);
  for (; i < n; ++i)
    y[i] = x[i] * scale + shift;
}

/// Lane-wise \p mask ? \p a : \p b.
inline F32x4 selectF32x4(I32x4 mask, F32x4 a, F32x4 b) {
  return reinterpret_cast<F32x4>((reinterpret_cast<I32x4>(a) & mask) |
                                 (reinterpret_cast<I32x4>(b) & ~mask));
}

/// e^x over four lanes: Cephes' expf (range reduction by ln 2 in two parts,
/// a degree-5 polynomial; about 1 ulp). 0 below -87, +inf above 88, NaN
/// stays NaN.
inline F32x4 expF32x4(F32x4 x) {
  const F32x4 high = splatF32x4(88.0f), low = splatF32x4(-87.0f);
  I32x4 overflow = x > high, underflow = x < low;
  // NaN lanes compute with 0 and get their NaN back at the end: converting a
  // NaN n to an integer below is undefined behaviour, which clang exploits
  // (at -O1 it returned a number for exp(NaN)).
  I32x4 nan = x != x;
  F32x4 clamped = selectF32x4(
      overflow, high,
      selectF32x4(underflow, low, selectF32x4(nan, splatF32x4(0.0f), x)));
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even).
  const F32x4 roundMagic = splatF32x4(12582912.0f);
  F32x4 n =
      (clamped * splatF32x4(1.44269504088896341f) + roundMagic) - roundMagic;
  F32x4 r = clamped - n * splatF32x4(0.693359375f);
  r = r - n * splatF32x4(-2.12194440e-4f);
  F32x4 p = splatF32x4(1.9875691500e-4f);
  p = p * r + splatF32x4(1.3981999507e-3f);
  p = p * r + splatF32x4(8.3334519073e-3f);
  p = p * r + splatF32x4(4.1665795894e-2f);
  p = p * r + splatF32x4(1.6666665459e-1f);
  p = p * r + splatF32x4(5.0000001201e-1f);
  F32x4 y = p * (r * r) + r + splatF32x4(1.0f);
  I32x4 exponent = (__builtin_convertvector(n, I32x4) + 127) << 23;
  F32x4 result = y * reinterpret_cast<F32x4>(exponent);
  result = selectF32x4(underflow, splatF32x4(0.0f), result);
  result = selectF32x4(nan, x, result);
  return selectF32x4(overflow, splatF32x4(__builtin_inff()), result);
}

/// erf(x) over four lanes given \p expMinusSquare = expF32x4(-(x * x))
/// (callers that need that exponential anyway compute it once): below
/// |x| = 0.5 its Taylor series to x^11 (relative error about 1e-7), above
/// Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7 plus float
/// rounding); odd, +-1 at +-inf, NaN stays NaN.
inline F32x4 erfF32x4(F32x4 x, F32x4 expMinusSquare) {
  const I32x4 signBit = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  I32x4 bits = reinterpret_cast<I32x4>(x);
  F32x4 ax = reinterpret_cast<F32x4>(bits & ~signBit);
  const F32x4 one = splatF32x4(1.0f);
  F32x4 t = one / (one + splatF32x4(0.3275911f) * ax);
  F32x4 p = splatF32x4(1.061405429f);
  p = p * t + splatF32x4(-1.453152027f);
  p = p * t + splatF32x4(1.421413741f);
  p = p * t + splatF32x4(-0.284496736f);
  p = p * t + splatF32x4(0.254829592f);
  F32x4 y = one - p * t * expMinusSquare;
  F32x4 large =
      reinterpret_cast<F32x4>(reinterpret_cast<I32x4>(y) | (bits & signBit));
  // 2/sqrt(pi) * (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320).
  F32x4 x2 = x * x;
  F32x4 q = splatF32x4(-1.0f / 1320.0f);
  q = q * x2 + splatF32x4(1.0f / 216.0f);
  q = q * x2 + splatF32x4(-1.0f / 42.0f);
  q = q * x2 + splatF32x4(1.0f / 10.0f);
  q = q * x2 + splatF32x4(-1.0f / 3.0f);
  q = q * x2 + one;
  F32x4 small = splatF32x4(1.12837916709551257f) * x * q;
  return selectF32x4(ax < splatF32x4(0.5f), small, large);
}

/// erf(x) over four lanes (see the two-argument form).
inline F32x4 erfF32x4(F32x4 x) { return erfF32x4(x, expF32x4(-(x * x))); }

/// The two sums of sumWithCenteredProductF32.
struct SumAndDot {
  /// sum(g[i]).
  double sum = 0;
  /// sum(g[i] * (x[i] - center)).
  double dot = 0;
};

/// sum(x[i]) over [0, n) in double.
inline double sumF32(const float *x, int64_t n) {
  F64x2 acc0 = {0, 0}, acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 += loadF32x2AsF64(x + i);
    acc1 += loadF32x2AsF64(x + i + 2);
    acc2 += loadF32x2AsF64(x + i + 4);
    acc3 += loadF32x2AsF64(x + i + 6);
  }
  F64x2 acc = (acc0 + acc1) + (acc2 + acc3);
  double sum = acc[0] + acc[1];
  for (; i < n; ++i)
    sum += x[i];
  return sum;
}

/// sum((x[i] - center)^2) over [0, n) in double.
inline double sumSquaredDeviationF32(const float *x, int64_t n, double center) {
  const F64x2 c = {center, center};
  F64x2 acc0 = {0, 0}, acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F64x2 d0 = loadF32x2AsF64(x + i) - c, d1 = loadF32x2AsF64(x + i + 2) - c;
    F64x2 d2 = loadF32x2AsF64(x + i + 4) - c,
          d3 = loadF32x2AsF64(x + i + 6) - c;
    acc0 += d0 * d0;
    acc1 += d1 * d1;
    acc2 += d2 * d2;
    acc3 += d3 * d3;
  }
  F64x2 acc = (acc0 + acc1) + (acc2 + acc3);
  double sum = acc[0] + acc[1];
  for (; i < n; ++i) {
    double d = x[i] - center;
    sum += d * d;
  }
  return sum;
}

/// sum(g[i]) and sum(g[i] * (x[i] - center)) over [0, n) in double.
inline SumAndDot sumWithCenteredProductF32(const float *g, const float *x,
                                           int64_t n, double center) {
  const F64x2 c = {center, center};
  F64x2 sum0 = {0, 0}, sum1 = sum0, dot0 = sum0, dot1 = sum0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F64x2 g0 = loadF32x2AsF64(g + i), g1 = loadF32x2AsF64(g + i + 2);
    sum0 += g0;
    sum1 += g1;
    dot0 += g0 * (loadF32x2AsF64(x + i) - c);
    dot1 += g1 * (loadF32x2AsF64(x + i + 2) - c);
  }
  F64x2 sum = sum0 + sum1, dot = dot0 + dot1;
  SumAndDot result{sum[0] + sum[1], dot[0] + dot[1]};
  for (; i < n; ++i) {
    result.sum += g[i];
    result.dot += g[i] * (x[i] - center);
  }
  return result;
}

/// Four floats from [p, p + count) (count < 4), the other lanes \p fill.
inline F32x4 loadPartialF32x4(const float *p, int64_t count, float fill) {
  F32x4 v = splatF32x4(fill);
  for (int64_t j = 0; j < count; ++j)
    v[j] = p[j];
  return v;
}

/// The largest of x[0, n), n >= 1 (NaNs are skipped unless all are NaN, as
/// the scalar `x > max ? x : max` loop does from a NaN-free start).
inline float maxF32(const float *x, int64_t n) {
  float best = x[0];
  int64_t i = 0;
  if (n >= kF32Lanes) {
    F32x4 acc = loadF32x4(x);
    for (i = kF32Lanes; i + kF32Lanes <= n; i += kF32Lanes) {
      F32x4 v = loadF32x4(x + i);
      acc = selectF32x4(v > acc, v, acc);
    }
    for (int j = 0; j < kF32Lanes; ++j)
      best = acc[j] > best ? acc[j] : best;
  }
  for (; i < n; ++i)
    best = x[i] > best ? x[i] : best;
  return best;
}

/// y[i] = e^(x[i] - shift) over [0, n) with expF32x4 (the tail too, so
/// every element takes the same path), and returns their sum: four fp32
/// lanes, then lanes 0..3 in order. \p y may be \p x (each group is read
/// before it is written) or null (only the sum).
inline float expShiftedF32(const float *x, float *y, int64_t n, float shift) {
  const F32x4 s = splatF32x4(shift);
  F32x4 acc = splatF32x4(0.0f);
  int64_t i = 0;
  for (; i + kF32Lanes <= n; i += kF32Lanes) {
    F32x4 e = expF32x4(loadF32x4(x + i) - s);
    acc += e;
    if (y)
      storeF32x4(y + i, e);
  }
  if (i < n) {
    // Missing lanes are -inf: e^-inf = 0 adds nothing.
    F32x4 e = expF32x4(loadPartialF32x4(x + i, n - i, -__builtin_inff()) - s);
    acc += e;
    if (y)
      for (int64_t j = 0; j < n - i; ++j)
        y[i + j] = e[j];
  }
  return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_SIMD_H
