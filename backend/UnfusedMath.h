//===- UnfusedMath.h - Arithmetic nvcc may not contract ---------*- C++ -*-===//
//
// nvcc contracts a * b + c into one fused multiply-add by default, which
// rounds once where the CPU backend (built without FMA instructions) rounds
// twice. Kernels whose results must equal the CPU kernels' bit for bit
// (BiasDropout, the loss gradients, Range, ReduceProd, Resize's float64
// coordinates and weights) spell their products and sums with
// these `__host__ __device__` helpers: the `_rn` intrinsics on the device,
// which nvcc never fuses, and the plain operators on the host (where the
// CPU kernels that share such formulas, e.g. backend/ResizeAxisMath.h's,
// call them too).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_UNFUSEDMATH_H
#define GMOPT_BACKEND_UNFUSEDMATH_H

#include "backend/HostDevice.h"

namespace gmopt {

/// a * b in fp32, rounded on its own.
GMOPT_HD float mulUnfused(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b in fp32, rounded on its own.
GMOPT_HD float addUnfused(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a - b in fp32, rounded on its own.
GMOPT_HD float subUnfused(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/// a * b in fp64, rounded on its own.
GMOPT_HD double mulUnfused(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b in fp64, rounded on its own.
GMOPT_HD double addUnfused(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a - b in fp64, rounded on its own.
GMOPT_HD double subUnfused(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

/// a / b in fp64, correctly rounded (the device's default division is too;
/// spelled out so every step of a formula reads the same way).
GMOPT_HD double divUnfused(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

namespace cuda {
// The CUDA kernels, which open only gmopt::cuda, spell them unqualified.
using gmopt::addUnfused;
using gmopt::divUnfused;
using gmopt::mulUnfused;
using gmopt::subUnfused;
} // namespace cuda

} // namespace gmopt

#endif // GMOPT_BACKEND_UNFUSEDMATH_H
