//===- RowKernels.cpp - Hot fp32 rows at the widest vector width ----------===//
//
// Each row is written once as a template over the lane count (SimdWide.h)
// and instantiated three times: at four lanes for the x86-64 baseline, and
// inside functions compiled for AVX2 (eight lanes) and AVX-512F (sixteen).
// The processor's support is read once (with GMOPT_CPU_SIMD to narrow it).
// This file is compiled with -ffp-contract=off: AVX2 and AVX-512 offer
// fused multiply-adds, which would round differently from the baseline.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"
#include "backend/cpu/SimdWide.h"

#include "llvm/ADT/SmallVector.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define GMOPT_HAVE_WIDE_SIMD 1
#define GMOPT_TARGET_AVX2 __attribute__((target("avx2")))
#define GMOPT_TARGET_AVX512 __attribute__((target("avx512f")))
#endif

/// e^(x[i] - shift) over [0, n) into \p y (may be \p x, or null for the sum
/// only) and their sum, in expShiftedF32's four-lane order.
template <int L>
GMOPT_SIMD_INLINE float expShiftedSum(const float *x, float *y, int64_t n,
                                      float shift) {
  using namespace wide;
  const F32v<L> s = splat<L>(shift);
  F32v<4> acc = splat<4>(0.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    F32v<L> e = wide::exp<L>(load<L>(x + i) - s);
    acc = foldInto4<L>(acc, e);
    if (y)
      store<L>(y + i, e);
  }
  const F32v<4> s4 = splat<4>(shift);
  for (; i + 4 <= n; i += 4) {
    F32v<4> e = wide::exp<4>(load<4>(x + i) - s4);
    acc += e;
    if (y)
      store<4>(y + i, e);
  }
  if (i < n) {
    // Missing lanes are -inf: e^-inf = 0 adds nothing.
    F32v<4> e = wide::exp<4>(static_cast<F32v<4>>(loadPartialF32x4(
                                 x + i, n - i, -__builtin_inff())) -
                             s4);
    acc += e;
    if (y)
      for (int64_t j = 0; j < n - i; ++j)
        y[i + j] = e[j];
  }
  return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

/// y[i] = x[i] * scale + shift over [0, n) (element-wise, so any width
/// gives scaleShiftF32's bits).
template <int L>
GMOPT_SIMD_INLINE void scaleShiftRow(const float *x, float *y, int64_t n,
                                     float scale, float shift) {
  using namespace wide;
  const F32v<L> vs = splat<L>(scale), vt = splat<L>(shift);
  int64_t i = 0;
  for (; i + L <= n; i += L)
    store<L>(y + i, load<L>(x + i) * vs + vt);
  scaleShiftF32(x + i, y + i, n - i, scale, shift);
}

/// The largest of x[0, n), n >= 1, when no element is NaN (maxF32's result
/// then; with a NaN in the row softmax's sum, and so every output, is NaN
/// whatever the shift). Rows shorter than L take maxF32 itself.
template <int L> GMOPT_SIMD_INLINE float maxRow(const float *x, int64_t n) {
  using namespace wide;
  if (n < L)
    return maxF32(x, n);
  F32v<L> acc = load<L>(x);
  int64_t i = L;
  for (; i + L <= n; i += L) {
    F32v<L> v = load<L>(x + i);
    acc = select<L>(v > acc, v, acc);
  }
  float best = acc[0];
  for (int j = 1; j < L; ++j)
    best = acc[j] > best ? acc[j] : best;
  for (; i < n; ++i)
    best = x[i] > best ? x[i] : best;
  return best;
}

template <int L>
GMOPT_SIMD_INLINE void softmaxRowT(const float *x, float *y, int64_t n,
                                   bool log) {
  float maxValue = maxRow<L>(x, n);
  if (log) {
    float shift =
        maxValue + std::log(expShiftedSum<L>(x, nullptr, n, maxValue));
    scaleShiftRow<L>(x, y, n, 1.0f, -shift);
  } else {
    float sum = expShiftedSum<L>(x, y, n, maxValue);
    scaleShiftRow<L>(y, y, n, 1.0f / sum, 0.0f);
  }
}

template <int L>
GMOPT_SIMD_INLINE int64_t biasGeluRowT(const float *x, const float *b, float *y,
                                       int64_t width) {
  using namespace wide;
  const float sqrtHalf = 0.70710678118654752440f;
  int64_t j = 0;
  {
    const F32v<L> half = splat<L>(0.5f), one = splat<L>(1.0f),
                  sh = splat<L>(sqrtHalf);
    for (; j + L <= width; j += L) {
      F32v<L> v = load<L>(x + j) + load<L>(b + j);
      store<L>(y + j, half * v * (one + wide::erf<L>(v * sh)));
    }
  }
  const F32v<4> half = splat<4>(0.5f), one = splat<4>(1.0f),
                sh = splat<4>(sqrtHalf);
  for (; j + 4 <= width; j += 4) {
    F32v<4> v = load<4>(x + j) + load<4>(b + j);
    store<4>(y + j, half * v * (one + wide::erf<4>(v * sh)));
  }
  return j;
}

/// dx over groups of W lanes from column \p j while they fit; returns
/// where it stopped.
template <int W>
GMOPT_SIMD_INLINE int64_t biasGeluGradGroups(const float *dy, const float *x,
                                             const float *b, float *dx,
                                             int64_t j, int64_t width) {
  using namespace wide;
  const F32v<W> half = splat<W>(0.5f), one = splat<W>(1.0f),
                sqrtHalf = splat<W>(0.70710678118654752440f),
                invSqrtTwoPi = splat<W>(0.39894228040143267794f);
  for (; j + W <= width; j += W) {
    F32v<W> v = load<W>(x + j) + load<W>(b + j);
    // exp(-v^2 / 2) serves both erf(v / sqrt 2) and the density.
    F32v<W> u = v * sqrtHalf;
    F32v<W> gauss = wide::exp<W>(-(u * u));
    F32v<W> cdf = half * (one + wide::erf<W>(u, gauss));
    F32v<W> pdf = invSqrtTwoPi * gauss;
    store<W>(dx + j, load<W>(dy + j) * (cdf + v * pdf));
  }
  return j;
}

template <int L>
GMOPT_SIMD_INLINE int64_t biasGeluGradRowT(const float *dy, const float *x,
                                           const float *b, float *dx,
                                           int64_t width) {
  int64_t j = biasGeluGradGroups<L>(dy, x, b, dx, 0, width);
  return biasGeluGradGroups<4>(dy, x, b, dx, j, width);
}

/// sum(x[i] - center)^Power over [0, n) in double (Power 1 with center 0:
/// the plain sum), in Simd.h's order: eight fixed lanes (element i in lane
/// i % 8), combined as ((l0 + l2) + (l4 + l6)) + ((l1 + l3) + (l5 + l7)),
/// then the tail in order. L/2 doubles per vector, 16 / L accumulators.
template <int L, int Power>
GMOPT_SIMD_INLINE double laneSum(const float *x, int64_t n, double center) {
  using namespace wide;
  constexpr int kDoubles = L / 2, kAccumulators = 8 / kDoubles;
  F64v<L> acc[kAccumulators];
  const F64v<L> c = F64v<L>{} + center;
  for (F64v<L> &a : acc)
    a = F64v<L>{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int a = 0; a < kAccumulators; ++a) {
      F64v<L> d = loadAsF64<L>(x + i + a * kDoubles) - c;
      acc[a] += Power == 2 ? d * d : d;
    }
  double lane[8];
  std::memcpy(lane, acc, sizeof(lane));
  double sum = ((lane[0] + lane[2]) + (lane[4] + lane[6])) +
               ((lane[1] + lane[3]) + (lane[5] + lane[7]));
  for (; i < n; ++i) {
    double d = x[i] - center;
    sum += Power == 2 ? d * d : d;
  }
  return sum;
}

template <int L>
GMOPT_SIMD_INLINE void layerNormRowT(const float *x, const float *scale,
                                     const float *bias, float *y, int64_t cols,
                                     double epsilon, bool rms, float &meanOut,
                                     float &invOut) {
  using namespace wide;
  double mean = 0;
  if (!rms)
    mean = cols ? laneSum<L, 1>(x, cols, 0.0) / cols : 0;
  double squares = laneSum<L, 2>(x, cols, mean);
  double inv = 1.0 / std::sqrt((cols ? squares / cols : 0) + epsilon);
  float m = static_cast<float>(mean), s = static_cast<float>(inv);
  int64_t j = 0;
  {
    const F32v<L> mV = splat<L>(m), sV = splat<L>(s);
    for (; j + L <= cols; j += L) {
      F32v<L> v = (load<L>(x + j) - mV) * sV * load<L>(scale + j);
      store<L>(y + j, bias ? v + load<L>(bias + j) : v);
    }
  }
  const F32v<4> mV = splat<4>(m), sV = splat<4>(s);
  for (; j + 4 <= cols; j += 4) {
    F32v<4> v = (load<4>(x + j) - mV) * sV * load<4>(scale + j);
    store<4>(y + j, bias ? v + load<4>(bias + j) : v);
  }
  for (; j < cols; ++j) {
    float v = (x[j] - m) * s * scale[j];
    y[j] = bias ? v + bias[j] : v;
  }
  meanOut = m;
  invOut = s;
}

/// The rows of one level.
struct RowTable {
  void (*softmax)(const float *, float *, int64_t, bool);
  int64_t (*biasGelu)(const float *, const float *, float *, int64_t);
  int64_t (*biasGeluGrad)(const float *, const float *, const float *, float *,
                          int64_t);
  void (*layerNorm)(const float *, const float *, const float *, float *,
                    int64_t, double, bool, float &, float &);
};

#define GMOPT_DEFINE_ROWS(SUFFIX, LANES, TARGET)                               \
  TARGET void softmax##SUFFIX(const float *x, float *y, int64_t n, bool log) { \
    softmaxRowT<LANES>(x, y, n, log);                                          \
  }                                                                            \
  TARGET int64_t biasGelu##SUFFIX(const float *x, const float *b, float *y,    \
                                  int64_t width) {                             \
    return biasGeluRowT<LANES>(x, b, y, width);                                \
  }                                                                            \
  TARGET int64_t biasGeluGrad##SUFFIX(const float *dy, const float *x,         \
                                      const float *b, float *dx,               \
                                      int64_t width) {                         \
    return biasGeluGradRowT<LANES>(dy, x, b, dx, width);                       \
  }                                                                            \
  TARGET void layerNorm##SUFFIX(                                               \
      const float *x, const float *scale, const float *bias, float *y,         \
      int64_t cols, double epsilon, bool rms, float &mean, float &inv) {       \
    layerNormRowT<LANES>(x, scale, bias, y, cols, epsilon, rms, mean, inv);    \
  }                                                                            \
  constexpr RowTable kRows##SUFFIX = {softmax##SUFFIX, biasGelu##SUFFIX,       \
                                      biasGeluGrad##SUFFIX,                    \
                                      layerNorm##SUFFIX};

GMOPT_DEFINE_ROWS(Sse, 4, )
#ifdef GMOPT_HAVE_WIDE_SIMD
GMOPT_DEFINE_ROWS(Avx2, 8, GMOPT_TARGET_AVX2)
GMOPT_DEFINE_ROWS(Avx512, 16, GMOPT_TARGET_AVX512)
#endif

const RowTable &rowsFor(SimdLevel level) {
  switch (level) {
  case SimdLevel::Sse:
    return kRowsSse;
#ifdef GMOPT_HAVE_WIDE_SIMD
  case SimdLevel::Avx2:
    return kRowsAvx2;
  case SimdLevel::Avx512:
    return kRowsAvx512;
#else
  default:
    return kRowsSse;
#endif
  }
  return kRowsSse;
}

/// The supported levels, read from the processor once.
const llvm::SmallVector<SimdLevel, 3> &supportedLevels() {
  static const llvm::SmallVector<SimdLevel, 3> levels = [] {
    llvm::SmallVector<SimdLevel, 3> result = {SimdLevel::Sse};
#ifdef GMOPT_HAVE_WIDE_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
      result.push_back(SimdLevel::Avx2);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f"))
      result.push_back(SimdLevel::Avx512);
#endif
    return result;
  }();
  return levels;
}

const RowTable &activeRows() {
  static const RowTable &rows = rowsFor(getSimdLevel());
  return rows;
}

} // namespace

llvm::StringRef cpu::getSimdLevelName(SimdLevel level) {
  switch (level) {
  case SimdLevel::Sse:
    return "sse";
  case SimdLevel::Avx2:
    return "avx2";
  case SimdLevel::Avx512:
    return "avx512";
  }
  return "sse";
}

llvm::ArrayRef<SimdLevel> cpu::getSupportedSimdLevels() {
  return supportedLevels();
}

SimdLevel cpu::getSimdLevel() {
  static const SimdLevel level = [] {
    llvm::ArrayRef<SimdLevel> supported = supportedLevels();
    SimdLevel widest = supported.back();
    const char *requested = std::getenv("GMOPT_CPU_SIMD");
    if (!requested)
      return widest;
    for (SimdLevel candidate : supported)
      if (getSimdLevelName(candidate) == requested)
        return candidate;
    // An unknown or unsupported name narrows nothing: the results are the
    // same bits at every level, only the speed differs.
    return widest;
  }();
  return level;
}

void cpu::softmaxRowF32(const float *x, float *y, int64_t n, bool log) {
  activeRows().softmax(x, y, n, log);
}

int64_t cpu::biasGeluRowF32(const float *x, const float *b, float *y,
                            int64_t width) {
  return activeRows().biasGelu(x, b, y, width);
}

int64_t cpu::biasGeluGradRowF32(const float *dy, const float *x, const float *b,
                                float *dx, int64_t width) {
  return activeRows().biasGeluGrad(dy, x, b, dx, width);
}

int64_t cpu::biasGeluGradRowF32(SimdLevel level, const float *dy,
                                const float *x, const float *b, float *dx,
                                int64_t width) {
  return rowsFor(level).biasGeluGrad(dy, x, b, dx, width);
}

void cpu::layerNormRowF32(const float *x, const float *scale, const float *bias,
                          float *y, int64_t cols, double epsilon, bool rms,
                          float &mean, float &inv) {
  activeRows().layerNorm(x, scale, bias, y, cols, epsilon, rms, mean, inv);
}

void cpu::softmaxRowF32(SimdLevel level, const float *x, float *y, int64_t n,
                        bool log) {
  rowsFor(level).softmax(x, y, n, log);
}

int64_t cpu::biasGeluRowF32(SimdLevel level, const float *x, const float *b,
                            float *y, int64_t width) {
  return rowsFor(level).biasGelu(x, b, y, width);
}

void cpu::layerNormRowF32(SimdLevel level, const float *x, const float *scale,
                          const float *bias, float *y, int64_t cols,
                          double epsilon, bool rms, float &mean, float &inv) {
  rowsFor(level).layerNorm(x, scale, bias, y, cols, epsilon, rms, mean, inv);
}
