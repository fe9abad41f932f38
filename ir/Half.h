//===- Half.h - IEEE binary16 and bfloat16 conversions ----------*- C++ -*-===//
//
// Conversions between fp32 and the two 16-bit float storage formats gmopt
// keeps tensors in (the CPU backend's storage, the amp pass's narrowed
// constants): IEEE 754 binary16 ("f16") and bfloat16 ("bf16").
// Narrowing rounds to nearest, ties to even, including into the f16
// subnormal range; infinities stay infinite, NaNs stay (quiet) NaNs with
// their sign. Kernels compute in fp32 and use these only on load and store.
// The functions are `__host__ __device__` under nvcc, so the CUDA kernels
// (backend/cuda/ElementwiseMath.h) convert with this very code.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_HALF_H
#define GMOPT_IR_HALF_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GMOPT_HALF_HD __host__ __device__ __forceinline__
#else
#define GMOPT_HALF_HD inline
#endif

namespace gmopt {

/// The bits of \p value.
GMOPT_HALF_HD uint32_t floatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

/// The float whose bits are \p bits.
GMOPT_HALF_HD float floatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

/// Widens an IEEE binary16 value to fp32 (exact).
GMOPT_HALF_HD float halfToFloat(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return floatFromBits(sign | floatBits(magnitude));
  }
  if (exponent == 0x1f) // Infinity or NaN; the payload is kept.
    return floatFromBits(sign | 0x7f800000u | (mantissa << 13));
  return floatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// Narrows fp32 to IEEE binary16, rounding to nearest even.
GMOPT_HALF_HD uint16_t floatToHalf(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) // NaN: quiet, keep the top payload bits.
    return sign | 0x7e00u | static_cast<uint16_t>((bits >> 13) & 0x1ffu);
  if (bits >= 0x47800000u) // >= 65536 (incl. infinity): overflows to inf.
    return sign | 0x7c00u;
  if (bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is subnormal or
    // zero. Adding 0.5f aligns the value so that the fp32 adder performs the
    // round-to-nearest-even at the half subnormal's last place.
    const uint32_t magicBits = 0x3f000000u; // 0.5f
    float aligned = floatFromBits(bits) + floatFromBits(magicBits);
    return sign | static_cast<uint16_t>(floatBits(aligned) - magicBits);
  }
  // Normal range: rebias the exponent and round the 13 dropped bits.
  uint32_t mantissaOdd = (bits >> 13) & 1u;
  bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mantissaOdd;
  // Values in [65520, 65536) carry into the infinity encoding, as RNE wants.
  return sign | static_cast<uint16_t>(bits >> 13);
}

/// Widens a bfloat16 value to fp32 (exact).
GMOPT_HALF_HD float bfloat16ToFloat(uint16_t value) {
  return floatFromBits(static_cast<uint32_t>(value) << 16);
}

/// Narrows fp32 to bfloat16, rounding to nearest even.
GMOPT_HALF_HD uint16_t floatToBFloat16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a quiet NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

/// Storage type of an f16 element; converts to and from float explicitly.
struct Float16 {
  uint16_t bits;
  Float16() = default;
  explicit Float16(float value) : bits(floatToHalf(value)) {}
  explicit operator float() const { return halfToFloat(bits); }
};

/// Storage type of a bf16 element; converts to and from float explicitly.
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  explicit BFloat16(float value) : bits(floatToBFloat16(value)) {}
  explicit operator float() const { return bfloat16ToFloat(bits); }
};

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2,
              "16-bit float storage types must be two bytes");

} // namespace gmopt

#endif // GMOPT_IR_HALF_H
