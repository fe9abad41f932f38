//===- CudaReduceCases.h - Shared cases of the CUDA reduction tests -*- C++
//-*-===//
//
// What CudaReduceTest.cpp (the host arithmetic against the CPU kernels) and
// CudaReduceDispatchTest.cpp (the prepare-time checks and the device
// parity test) share: the reduce ops and the shapes they run on, DivGrad's
// broadcast shapes, random inputs, 16-bit storage and the closeness check.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_CUDAREDUCECASES_H
#define GMOPT_TESTS_UNIT_CUDAREDUCECASES_H

#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/ReduceMath.h"
#include "ir/Half.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace gmopt {
namespace testing {
namespace cudareduce {

using Shape = std::vector<int64_t>;
using cpu::testing::HostTensor;
using cuda::ReduceKind;

inline const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

inline HostTensor ofStorage(DType dtype, Shape shape,
                            const std::vector<float> &values) {
  if (dtype == DType::F16)
    return HostTensor::f16(std::move(shape), values);
  if (dtype == DType::BF16)
    return HostTensor::bf16(std::move(shape), values);
  return HostTensor::f32(std::move(shape), values);
}

/// \p v rounded to \p dtype's storage and widened back, as a kernel's store
/// and a test's read do.
inline float stored(DType dtype, float v) {
  if (dtype == DType::F16)
    return halfToFloat(floatToHalf(v));
  if (dtype == DType::BF16)
    return bfloat16ToFloat(floatToBFloat16(v));
  return v;
}

/// One rounding step of \p dtype, relative.
inline double storageEpsilon(DType dtype) {
  return dtype == DType::F16    ? 1.0 / 1024
         : dtype == DType::BF16 ? 1.0 / 128
                                : 1.0 / (1 << 23);
}

inline std::vector<float> uniform(size_t n, unsigned seed, float low,
                                  float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// Expects \p actual to be \p expected within \p tolerance (NaN and
/// infinities exactly).
inline void expectClose(float expected, float actual, double tolerance,
                        const std::string &where) {
  if (std::isnan(expected))
    EXPECT_TRUE(std::isnan(actual)) << where << ": " << actual;
  else if (std::isinf(expected) || tolerance == 0)
    EXPECT_EQ(expected, actual) << where;
  else
    EXPECT_NEAR(actual, expected, tolerance) << where;
}

struct ReduceOp {
  const char *name;
  ReduceKind kind;
  /// Input range that keeps the result meaningful (LogSum: positive sums;
  /// Prod: products near 1).
  float low, high;
};

inline const ReduceOp kReduceOps[] = {
    {"ReduceSum", ReduceKind::Sum, -2, 2},
    {"ReduceMean", ReduceKind::Mean, -2, 2},
    {"ReduceMax", ReduceKind::Max, -2, 2},
    {"ReduceMin", ReduceKind::Min, -2, 2},
    {"ReduceSumSquare", ReduceKind::SumSquare, -2, 2},
    {"ReduceProd", ReduceKind::Prod, 0.9f, 1.1f},
    {"ReduceL1", ReduceKind::L1, -2, 2},
    {"ReduceL2", ReduceKind::L2, -2, 2},
    {"ReduceLogSum", ReduceKind::LogSum, 0.1f, 2},
    {"ReduceLogSumExp", ReduceKind::LogSumExp, -3, 3},
};

inline bool isExactKind(ReduceKind kind) {
  return kind == ReduceKind::Max || kind == ReduceKind::Min;
}

/// A reduction's input shape and axes (empty: all, unless noop).
struct ReduceShape {
  Shape shape;
  std::vector<int64_t> axes;
  bool keepDims = true;
  bool noop = false;
};

inline const std::vector<ReduceShape> &reduceShapes() {
  static const std::vector<ReduceShape> shapes = {
      {{4, 5, 6}, {1}},
      {{4, 5, 6}, {0, 2}, false}, // non-adjacent axes
      {{4, 5, 6}, {-1}, false},
      {{4, 5, 6}, {}},             // every axis
      {{4, 5, 6}, {}, true, true}, // noop_with_empty_axes: maps
      {{3, 70, 2}, {1}},           // one warp per output
      {{2, 4100}, {1}, false},     // one block per output
      {{6, 1, 40, 3}, {0, 2}},
      {{3, 0}, {1}}, // empty reductions
  };
  return shapes;
}

inline std::vector<bool> reducedFlags(const ReduceShape &s) {
  int64_t rank = s.shape.size();
  std::vector<bool> reduced(rank, s.axes.empty() && !s.noop);
  for (int64_t axis : s.axes)
    reduced[axis < 0 ? axis + rank : axis] = true;
  return reduced;
}

inline Shape reducedShape(const ReduceShape &s) {
  std::vector<bool> reduced = reducedFlags(s);
  Shape out;
  for (size_t d = 0; d < s.shape.size(); ++d)
    if (!reduced[d])
      out.push_back(s.shape[d]);
    else if (s.keepDims)
      out.push_back(1);
  return out;
}

inline std::string describe(const ReduceShape &s) {
  std::string text = "shape [";
  for (int64_t d : s.shape)
    text += std::to_string(d) + " ";
  text += "] axes [";
  for (int64_t a : s.axes)
    text += std::to_string(a) + " ";
  return text + "]" + (s.keepDims ? "" : " keepdims=0") +
         (s.noop ? " noop" : "");
}

struct DivGradShapes {
  Shape a, b, dy;
};

inline const std::vector<DivGradShapes> &divGradShapes() {
  static const std::vector<DivGradShapes> shapes = {
      {{2, 3, 4}, {3, 1}, {2, 3, 4}},    {{4}, {2, 3, 4}, {2, 3, 4}},
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},
      {{1, 1}, {64, 80}, {64, 80}},      {{5, 1, 70}, {5, 40, 70}, {5, 40, 70}},
  };
  return shapes;
}

} // namespace cudareduce
} // namespace testing
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_CUDAREDUCECASES_H
