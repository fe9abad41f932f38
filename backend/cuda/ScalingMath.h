//===- ScalingMath.h - Finiteness tests and loss-scale arithmetic -*- C++
//-*-===//
//
// The per-element arithmetic of the mixed-precision ops on CUDA (IsFinite,
// IsAllFinite, MixedPrecisionScale; ScalingKernels.cu), written once as
// `__host__ __device__` functions so host tests run it against the CPU
// kernels (tests/unit/CudaScalingTest.cpp). The tests read the fp32 bits,
// so they agree with std::isinf / std::isnan on every input, 16-bit values
// included (widened exactly).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_SCALINGMATH_H
#define GMOPT_BACKEND_CUDA_SCALINGMATH_H

#include "backend/cuda/ElementwiseMath.h"

namespace gmopt {
namespace cuda {

/// Which non-finite values a test rejects: inf and NaN (IsFinite and
/// IsAllFinite's default), only inf (isinf_only) or only NaN (isnan_only).
enum class FiniteTest : int32_t { Finite, NotInf, NotNaN };

/// Whether \p v passes \p test.
GMOPT_HD bool passesFiniteTest(float v, FiniteTest test) {
  uint32_t magnitude = bitsOfFloat(v) & 0x7fffffffu;
  bool inf = magnitude == 0x7f800000u, nan = magnitude > 0x7f800000u;
  switch (test) {
  case FiniteTest::NotInf:
    return !inf;
  case FiniteTest::NotNaN:
    return !nan;
  case FiniteTest::Finite:
    break;
  }
  return !inf && !nan;
}

/// MixedPrecisionScale's element: x * scale in fp32 (the product of two
/// floats, rounded once; the store then rounds a 16-bit output).
GMOPT_HD float scaledElement(float x, float scale) { return x * scale; }

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_SCALINGMATH_H
