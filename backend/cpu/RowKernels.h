//===- RowKernels.h - Hot fp32 rows at the widest vector width --*- C++ -*-===//
//
// Internal to the CPU backend. The rows whose cost is transcendental
// arithmetic or double-precision sums - softmax and log-softmax, GELU with
// a bias and its gradient, layer norm's forward pass - at the widest vector
// width the processor offers (SSE, AVX2 or AVX-512; SimdWide.h). Every width
// gives the same bits as the SSE code (Simd.h), so results depend neither on
// the machine's instruction set nor on the level chosen here.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_ROWKERNELS_H
#define GMOPT_BACKEND_CPU_ROWKERNELS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace gmopt {
namespace cpu {

/// Vector widths the row kernels are compiled for, by fp32 lanes.
enum class SimdLevel { Sse = 4, Avx2 = 8, Avx512 = 16 };

/// "sse", "avx2" or "avx512".
llvm::StringRef getSimdLevelName(SimdLevel level);

/// The levels this processor can run, narrowest first (Sse always).
llvm::ArrayRef<SimdLevel> getSupportedSimdLevels();

/// The level the row kernels use: the widest supported one, or the one the
/// environment variable GMOPT_CPU_SIMD (sse|avx2|avx512) names when the
/// processor supports it. Chosen once per process.
SimdLevel getSimdLevel();

/// Softmax (\p Log false) or log-softmax of one contiguous row of \p n >= 1
/// floats, as Simd.h's SSE code computes it. \p y may be \p x.
void softmaxRowF32(const float *x, float *y, int64_t n, bool log);

/// y[j] = gelu(x[j] + b[j]) (exact GELU through the vector erf) over the
/// columns of whole four-lane groups of a row; returns how many columns it
/// did (the caller finishes the rest with the scalar expression).
int64_t biasGeluRowF32(const float *x, const float *b, float *y, int64_t width);

/// dx[j] = dy[j] * gelu'(x[j] + b[j]) (exact GELU, the vector erf and
/// exp) over the columns of whole four-lane groups of a row; returns how
/// many columns it did.
int64_t biasGeluGradRowF32(const float *dy, const float *x, const float *b,
                           float *dx, int64_t width);

/// Layer norm of one row: returns mean (0 when \p rms) and 1/sqrt(variance
/// + epsilon) as the SSE code computes them, and writes y = (x - mean) *
/// inv * scale (+ bias when \p bias is non-null).
void layerNormRowF32(const float *x, const float *scale, const float *bias,
                     float *y, int64_t cols, double epsilon, bool rms,
                     float &mean, float &inv);

/// The same rows at an explicit level (tests compare the levels).
void softmaxRowF32(SimdLevel level, const float *x, float *y, int64_t n,
                   bool log);
int64_t biasGeluRowF32(SimdLevel level, const float *x, const float *b,
                       float *y, int64_t width);
int64_t biasGeluGradRowF32(SimdLevel level, const float *dy, const float *x,
                           const float *b, float *dx, int64_t width);
void layerNormRowF32(SimdLevel level, const float *x, const float *scale,
                     const float *bias, float *y, int64_t cols, double epsilon,
                     bool rms, float &mean, float &inv);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_ROWKERNELS_H
