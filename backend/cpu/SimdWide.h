//===- SimdWide.h - Simd.h's hot fp32 rows at 8 and 16 lanes ----*- C++ -*-===//
//
// Internal to the CPU backend. Simd.h's vectors are SSE-wide, the x86-64
// baseline every build targets; on a processor with AVX2 or AVX-512 the
// transcendental rows (softmax's exp, GELU's erf) and layer norm run two to
// four times as many lanes per instruction. Here Simd.h's arithmetic is
// written once over a lane count L (4, 8 or 16): RowKernels.cpp
// instantiates it inside functions compiled for each instruction set and
// picks one at run time (SimdLevel.h).
//
// Results are bit for bit those of the four-lane code at every width: the
// per-element expressions are the same operations in the same order
// (RowKernels.cpp is compiled with -ffp-contract=off, so no multiply-add is
// fused where the baseline has none), and every sum keeps its four-lane
// (fp32) or eight-lane (fp64) accumulation order: a wide vector is folded
// into the narrow accumulators in index order. Helpers are always inlined,
// so no function takes a vector wider than the baseline's by value and no
// ABI warning applies.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_SIMDWIDE_H
#define GMOPT_BACKEND_CPU_SIMDWIDE_H

#include <climits>
#include <cstdint>
#include <cstring>

#define GMOPT_SIMD_INLINE inline __attribute__((always_inline))

// GCC and Clang warn that a wide vector passed by value changes the ABI
// when the caller's baseline lacks AVX; every function here is always
// inlined into a function compiled for the width it uses, so no call with
// such an argument is ever made.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace gmopt {
namespace cpu {
namespace wide {

/// L fp32 lanes, L int32 lanes (comparison masks) and L/2 fp64 lanes.
template <int L> struct Lanes {
  typedef float F32 __attribute__((vector_size(4 * L)));
  typedef int32_t I32 __attribute__((vector_size(4 * L)));
  typedef double F64 __attribute__((vector_size(4 * L)));
  typedef float F32Half __attribute__((vector_size(2 * L)));
};

template <int L> using F32v = typename Lanes<L>::F32;
template <int L> using I32v = typename Lanes<L>::I32;
/// L/2 doubles: the width of an L-lane fp32 vector.
template <int L> using F64v = typename Lanes<L>::F64;

template <int L> GMOPT_SIMD_INLINE F32v<L> load(const float *p) {
  F32v<L> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int L> GMOPT_SIMD_INLINE void store(float *p, F32v<L> v) {
  std::memcpy(p, &v, sizeof(v));
}

template <int L> GMOPT_SIMD_INLINE F32v<L> splat(float value) {
  return F32v<L>{} + value;
}

/// L/2 floats from \p p widened to double.
template <int L> GMOPT_SIMD_INLINE F64v<L> loadAsF64(const float *p) {
  typename Lanes<L>::F32Half v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_convertvector(v, F64v<L>);
}

template <int L>
GMOPT_SIMD_INLINE F32v<L> select(I32v<L> mask, F32v<L> a, F32v<L> b) {
  return reinterpret_cast<F32v<L>>((reinterpret_cast<I32v<L>>(a) & mask) |
                                   (reinterpret_cast<I32v<L>>(b) & ~mask));
}

/// Simd.h's expF32x4 over L lanes (same operations, same order).
template <int L> GMOPT_SIMD_INLINE F32v<L> exp(F32v<L> x) {
  const F32v<L> high = splat<L>(88.0f), low = splat<L>(-87.0f);
  I32v<L> overflow = x > high, underflow = x < low;
  I32v<L> nan = x != x;
  F32v<L> clamped =
      select<L>(overflow, high,
                select<L>(underflow, low, select<L>(nan, splat<L>(0.0f), x)));
  const F32v<L> roundMagic = splat<L>(12582912.0f);
  F32v<L> n =
      (clamped * splat<L>(1.44269504088896341f) + roundMagic) - roundMagic;
  F32v<L> r = clamped - n * splat<L>(0.693359375f);
  r = r - n * splat<L>(-2.12194440e-4f);
  F32v<L> p = splat<L>(1.9875691500e-4f);
  p = p * r + splat<L>(1.3981999507e-3f);
  p = p * r + splat<L>(8.3334519073e-3f);
  p = p * r + splat<L>(4.1665795894e-2f);
  p = p * r + splat<L>(1.6666665459e-1f);
  p = p * r + splat<L>(5.0000001201e-1f);
  F32v<L> y = p * (r * r) + r + splat<L>(1.0f);
  I32v<L> exponent = (__builtin_convertvector(n, I32v<L>) + 127) << 23;
  F32v<L> result = y * reinterpret_cast<F32v<L>>(exponent);
  result = select<L>(underflow, splat<L>(0.0f), result);
  result = select<L>(nan, x, result);
  return select<L>(overflow, splat<L>(__builtin_inff()), result);
}

/// Simd.h's two-argument erfF32x4 over L lanes (same operations, same
/// order): \p expMinusSquare is exp<L>(-(x * x)).
template <int L>
GMOPT_SIMD_INLINE F32v<L> erf(F32v<L> x, F32v<L> expMinusSquare) {
  const I32v<L> signBit = I32v<L>{} + INT32_MIN;
  I32v<L> bits = reinterpret_cast<I32v<L>>(x);
  F32v<L> ax = reinterpret_cast<F32v<L>>(bits & ~signBit);
  const F32v<L> one = splat<L>(1.0f);
  F32v<L> t = one / (one + splat<L>(0.3275911f) * ax);
  F32v<L> p = splat<L>(1.061405429f);
  p = p * t + splat<L>(-1.453152027f);
  p = p * t + splat<L>(1.421413741f);
  p = p * t + splat<L>(-0.284496736f);
  p = p * t + splat<L>(0.254829592f);
  F32v<L> y = one - p * t * expMinusSquare;
  F32v<L> large = reinterpret_cast<F32v<L>>(reinterpret_cast<I32v<L>>(y) |
                                            (bits & signBit));
  F32v<L> x2 = x * x;
  F32v<L> q = splat<L>(-1.0f / 1320.0f);
  q = q * x2 + splat<L>(1.0f / 216.0f);
  q = q * x2 + splat<L>(-1.0f / 42.0f);
  q = q * x2 + splat<L>(1.0f / 10.0f);
  q = q * x2 + splat<L>(-1.0f / 3.0f);
  q = q * x2 + one;
  F32v<L> small = splat<L>(1.12837916709551257f) * x * q;
  return select<L>(ax < splat<L>(0.5f), small, large);
}

/// Simd.h's erfF32x4 over L lanes.
template <int L> GMOPT_SIMD_INLINE F32v<L> erf(F32v<L> x) {
  return erf<L>(x, exp<L>(-(x * x)));
}

/// Adds the L lanes of \p v to the four-lane accumulator \p acc four at a
/// time in index order: what L/4 successive four-lane additions give.
template <int L> GMOPT_SIMD_INLINE F32v<4> foldInto4(F32v<4> acc, F32v<L> v) {
  for (int k = 0; k < L; k += 4) {
    F32v<4> part;
    std::memcpy(&part, reinterpret_cast<const char *>(&v) + 4 * k,
                sizeof(part));
    acc += part;
  }
  return acc;
}

} // namespace wide
} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_SIMDWIDE_H
