//===- CudaReduceTest.cpp - Reductions and reducing ops on CUDA -----------===//
//
// The Reduce* family, ArgMax / ArgMin, InstanceNormalization,
// InvertibleLayerNormalizationGrad and DivGrad on CUDA
// (backend/cuda/CudaReduceDispatch.cpp, ReduceKernels.cu). Without a GPU:
// ReduceMath.h's arithmetic, combined in the order a thread group of 1, 32
// or 256 threads of ReduceKernels.cu combines it (modelled here), gives the
// CPU kernels' results: maxima, minima and arg-reductions bit for bit (NaN,
// infinities and ties included), the layer-norm parameter gradients bit for
// bit (the same fp32 row blocks), sums within the rounding of a different
// summation order; planReduction collapses any set of axes. The
// prepare-time checks and the device parity test are in
// CudaReduceDispatchTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/ReduceMath.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "tests/unit/CudaReduceCases.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::ArgBest;
using cuda::ReduceIndexing;
using cuda::ReduceKind;

namespace {

using namespace gmopt::testing::cudareduce;

using Shape = std::vector<int64_t>;

constexpr int kGroups[] = {1, 32, 256};

/// Combines \p count terms as a group of \p group threads of
/// ReduceKernels.cu does: lane l takes terms l, l + group, ...; each warp
/// combines its lanes with xor shuffles; a block then combines its warps in
/// order.
template <typename V, typename Term, typename Combine>
V groupModel(int group, int64_t count, V init, Term term, Combine combine) {
  std::vector<V> lanes(group, init);
  for (int64_t r = 0; r < count; ++r)
    lanes[r % group] = combine(lanes[r % group], term(r));
  if (group == 1)
    return lanes[0];
  for (int warp = 0; warp < group / 32; ++warp) {
    V *w = lanes.data() + warp * 32;
    for (int offset = 16; offset > 0; offset /= 2) {
      std::vector<V> next(w, w + 32);
      for (int l = 0; l < 32; ++l)
        next[l] = combine(w[l], w[l ^ offset]);
      std::copy(next.begin(), next.end(), w);
    }
  }
  V total = lanes[0];
  for (int warp = 1; warp < group / 32; ++warp)
    total = combine(total, lanes[warp * 32]);
  return total;
}

/// The slot-0 plan of a contiguous \p shape reducing \p reduced.
ReduceIndexing planOf(const Shape &shape, const std::vector<bool> &reduced) {
  std::vector<cuda::ReduceDim> dims(shape.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    dims[d].extent = shape[d];
    dims[d].reduced = reduced[d];
    dims[d].stride[0] = stride;
    stride *= shape[d];
  }
  ReduceIndexing ix;
  EXPECT_TRUE(cuda::planReduction(dims, ix));
  return ix;
}

/// What ReduceKernels.cu's reduceKernel writes (before the store rounds).
std::vector<float> modelReduce(ReduceKind kind, const std::vector<float> &x,
                               const ReduceIndexing &ix, int group) {
  std::vector<float> out(ix.outputs);
  auto combineMax = [](double a, double b) {
    return cuda::reduceCombine(ReduceKind::Max, a, b);
  };
  auto combineKind = [kind](double a, double b) {
    return cuda::reduceCombine(kind, a, b);
  };
  for (int64_t o = 0; o < ix.outputs; ++o) {
    int64_t base = cuda::keptOffset(ix, 0, o);
    auto element = [&](int64_t r) {
      return x[base + cuda::reducedOffset(ix, 0, r)];
    };
    double shift = 0;
    if (kind == ReduceKind::LogSumExp)
      shift = groupModel<double>(
          group, ix.count, cuda::reduceInit(ReduceKind::Max),
          [&](int64_t r) { return double(element(r)); }, combineMax);
    double acc = groupModel<double>(
        group, ix.count, cuda::reduceInit(kind),
        [&](int64_t r) { return cuda::reducePre(kind, element(r), shift); },
        combineKind);
    out[o] = cuda::reduceFinalize(kind, acc, ix.count, shift);
  }
  return out;
}

/// Runs Reduce op \p op on the CPU kernels.
llvm::Expected<std::vector<HostTensor>>
runCpuReduce(const char *op, HostTensor &x, const ReduceShape &s) {
  KernelRunner runner;
  runner.setOpset("", 18);
  // Planned workspace: the declared scratch must hold the fp32 staging's
  // transposed copy of a 16-bit input.
  HostTensor axes = HostTensor::i64({int64_t(s.axes.size())}, s.axes);
  std::vector<NamedAttribute> attrs = {intAttr("keepdims", s.keepDims),
                                       intAttr("noop_with_empty_axes", s.noop)};
  return runner.run("", op, {&x, &axes},
                    {TensorType::get(x.dtype, reducedShape(s))}, attrs);
}

TEST(CudaReduceTest, ReduceMathIsTheCpuReductions) {
  unsigned seed = 1;
  for (const ReduceOp &op : kReduceOps)
    for (const ReduceShape &s : reduceShapes())
      for (DType dtype : kFloatTypes) {
        SCOPED_TRACE(std::string(op.name) + " " + describe(s) + " " +
                     dtypeName(dtype).str());
        int64_t n = 1;
        for (int64_t d : s.shape)
          n *= d;
        HostTensor x =
            ofStorage(dtype, s.shape, uniform(n, ++seed, op.low, op.high));
        auto cpu = runCpuReduce(op.name, x, s);
        ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
        std::vector<float> expected = (*cpu)[0].floats();
        ReduceIndexing ix = planOf(s.shape, reducedFlags(s));
        ASSERT_EQ(int64_t(expected.size()), ix.outputs);
        for (int group : kGroups) {
          std::vector<float> model =
              modelReduce(op.kind, x.floats(), ix, group);
          for (int64_t o = 0; o < ix.outputs; ++o) {
            float e = expected[o], a = stored(dtype, model[o]);
            // The CPU sums in fp32, the model in double: both within a few
            // fp32 steps per term; 16-bit stores may then round apart.
            double tolerance = isExactKind(op.kind)
                                   ? 0.0
                                   : storageEpsilon(dtype) * std::fabs(e) +
                                         2e-6 * double(ix.count + 1) * 4.0;
            expectClose(e, a, tolerance,
                        "output " + std::to_string(o) + ", group " +
                            std::to_string(group));
          }
        }
      }
}

TEST(CudaReduceTest, NonFiniteInputsReduceAsOnTheCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows of 40: a NaN, one +inf, one -inf, all -inf, finite. Two +inf in
  // one row are left out: the CPU's running log-sum-exp gives NaN for
  // them (inf - inf), CUDA the limit, +inf.
  std::vector<float> values = uniform(5 * 40, 77, -2, 2);
  values[0 * 40 + 17] = nan;
  values[1 * 40 + 33] = inf;
  values[2 * 40 + 5] = -inf;
  for (int i = 0; i < 40; ++i)
    values[3 * 40 + i] = -inf;
  ReduceShape s{{5, 40}, {1}, false};
  for (const ReduceOp &op : kReduceOps) {
    if (op.kind == ReduceKind::LogSum || op.kind == ReduceKind::Prod)
      continue; // logarithms of negative sums, products of infinities
    SCOPED_TRACE(op.name);
    HostTensor x = HostTensor::f32(s.shape, values);
    auto cpu = runCpuReduce(op.name, x, s);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    std::vector<float> expected = (*cpu)[0].floats();
    ReduceIndexing ix = planOf(s.shape, reducedFlags(s));
    for (int group : kGroups) {
      std::vector<float> model = modelReduce(op.kind, values, ix, group);
      for (int64_t o = 0; o < ix.outputs; ++o)
        expectClose(
            expected[o], model[o],
            isExactKind(op.kind) ? 0.0 : 1e-4 * (1 + std::fabs(expected[o])),
            "row " + std::to_string(o) + ", group " + std::to_string(group));
    }
  }
}

//===----------------------------------------------------------------------===//
// ArgMax / ArgMin
//===----------------------------------------------------------------------===//

/// What ReduceKernels.cu's argReduceKernel writes.
std::vector<int64_t> modelArgReduce(const std::vector<float> &x,
                                    const ReduceIndexing &ix, bool isMax,
                                    bool selectLast, int group) {
  std::vector<int64_t> out(ix.outputs);
  for (int64_t o = 0; o < ix.outputs; ++o) {
    int64_t base = cuda::keptOffset(ix, 0, o);
    ArgBest best = groupModel<ArgBest>(
        group, ix.count, cuda::argNone(),
        [&](int64_t r) {
          return cuda::argConsider(cuda::argNone(),
                                   x[base + cuda::reducedOffset(ix, 0, r)], r,
                                   isMax, selectLast);
        },
        [&](ArgBest a, ArgBest b) {
          return cuda::argCombine(a, b, isMax, selectLast);
        });
    out[o] = cuda::argResult(best, ix.count ? x[base] : 0.0f);
  }
  return out;
}

TEST(CudaReduceTest, ArgReductionsAreTheCpuKernels) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Line {
    Shape shape;
    int64_t axis;
    std::vector<float> values;
  };
  std::vector<Line> lines = {
      {{1, 4}, 1, {3, 1, 3, 2}}, // a tie
      {{1, 3}, 1, {nan, 5, 1}},  // NaN first: index 0
      {{1, 3}, 1, {1, nan, 5}},  // NaN later: skipped
      {{1, 2}, 1, {-inf, -inf}}, // equal infinities
      {{1, 3}, 1, {inf, 1, inf}},
      {{1, 3}, 1, {-0.0f, 0.0f, -1.0f}}, // signed zeros tie
      {{1, 2}, 1, {nan, nan}},
      {{2, 40}, 1, std::vector<float>(80, 2.0f)}, // ties across lanes
  };
  // Small integers: many ties between lanes of a warp and warps of a block.
  std::vector<float> ties = uniform(3 * 300, 5, -4, 4);
  for (float &v : ties)
    v = std::round(v);
  ties[300 + 7] = nan;
  lines.push_back({{3, 300}, 1, ties});
  lines.push_back({{3, 300}, 0, ties});
  std::vector<float> noise = uniform(4 * 37 * 3, 6, -2, 2);
  for (int64_t axis : {0, 1, -1})
    lines.push_back({{4, 37, 3}, axis, noise});
  lines.push_back({{5000}, 0, uniform(5000, 8, -2, 2)});
  for (const Line &line : lines)
    for (const char *op : {"ArgMax", "ArgMin"})
      for (int selectLast = 0; selectLast < 2; ++selectLast)
        for (int keepDims = 0; keepDims < 2; ++keepDims)
          for (DType dtype : kFloatTypes) {
            int64_t rank = line.shape.size();
            int64_t axis = line.axis < 0 ? line.axis + rank : line.axis;
            SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis) +
                         " of " + std::to_string(line.values.size()) +
                         " select_last " + std::to_string(selectLast) + " " +
                         dtypeName(dtype).str());
            HostTensor x = ofStorage(dtype, line.shape, line.values);
            Shape outShape = line.shape;
            if (keepDims)
              outShape[axis] = 1;
            else
              outShape.erase(outShape.begin() + axis);
            KernelRunner runner;
            auto cpu = runner.run(
                "", op, {&x}, {TensorType::get(DType::I64, outShape)},
                {intAttr("axis", line.axis), intAttr("keepdims", keepDims),
                 intAttr("select_last_index", selectLast)});
            ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
            std::vector<int64_t> expected = (*cpu)[0].values<int64_t>();
            std::vector<bool> reduced(rank, false);
            reduced[axis] = true;
            ReduceIndexing ix = planOf(line.shape, reduced);
            for (int group : kGroups)
              EXPECT_EQ(modelArgReduce(x.floats(), ix,
                                       std::string(op) == "ArgMax",
                                       selectLast != 0, group),
                        expected)
                  << "group " << group;
          }
}

//===----------------------------------------------------------------------===//
// InstanceNormalization
//===----------------------------------------------------------------------===//

/// What ReduceKernels.cu's instanceNormKernel writes (before the store).
std::vector<float> modelInstanceNorm(const std::vector<float> &x,
                                     const std::vector<float> &scale,
                                     const std::vector<float> &bias,
                                     int64_t planes, int64_t channels,
                                     int64_t size, double epsilon, int group) {
  std::vector<float> y(x.size());
  auto add = [](double a, double b) { return a + b; };
  for (int64_t p = 0; p < planes; ++p) {
    const float *plane = x.data() + p * size;
    double sum = groupModel<double>(
        group, size, 0.0, [&](int64_t i) { return double(plane[i]); }, add);
    double mean = size ? sum / double(size) : 0.0;
    double squares = groupModel<double>(
        group, size, 0.0,
        [&](int64_t i) {
          double d = plane[i] - mean;
          return gmopt::mulUnfused(d, d);
        },
        add);
    cuda::NormAffine affine = cuda::instanceNormAffine(
        scale[p % channels], bias[p % channels], mean,
        cuda::instanceNormInvStd(squares, size, epsilon));
    for (int64_t i = 0; i < size; ++i)
      y[p * size + i] = cuda::instanceNormElement(plane[i], affine);
  }
  return y;
}

TEST(CudaReduceTest, InstanceNormIsTheCpuKernel) {
  std::vector<Shape> shapes = {
      {2, 3, 5, 7}, {1, 2, 45, 50}, {1, 1, 70, 70}, {2, 2, 3}};
  unsigned seed = 20;
  for (const Shape &shape : shapes)
    for (float epsilon : {1e-5f, 0.01f})
      for (DType dtype : kFloatTypes) {
        SCOPED_TRACE("size " + std::to_string(shape.back()) + " eps " +
                     std::to_string(epsilon) + " " + dtypeName(dtype).str());
        int64_t channels = shape[1], planes = shape[0] * shape[1];
        int64_t size = 1;
        for (size_t d = 2; d < shape.size(); ++d)
          size *= shape[d];
        HostTensor x =
            ofStorage(dtype, shape, uniform(planes * size, ++seed, -3, 5));
        HostTensor scale =
            ofStorage(dtype, {channels}, uniform(channels, ++seed, -2, 2));
        HostTensor bias =
            ofStorage(dtype, {channels}, uniform(channels, ++seed, -1, 1));
        KernelRunner runner;
        auto cpu = runner.run("", "InstanceNormalization", {&x, &scale, &bias},
                              {TensorType::get(dtype, shape)},
                              {floatAttr("epsilon", epsilon)});
        ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
        std::vector<float> expected = (*cpu)[0].floats();
        for (int group : kGroups) {
          std::vector<float> model =
              modelInstanceNorm(x.floats(), scale.floats(), bias.floats(),
                                planes, channels, size, epsilon, group);
          // Only the double sums' order differs: at most a step of fp32 in
          // the affine, or of the storage.
          for (size_t i = 0; i < model.size(); ++i)
            expectClose(expected[i], stored(dtype, model[i]),
                        (storageEpsilon(dtype) + 4e-6) *
                            (1 + std::fabs(expected[i])),
                        "element " + std::to_string(i) + ", group " +
                            std::to_string(group));
        }
      }
}

//===----------------------------------------------------------------------===//
// InvertibleLayerNormalizationGrad
//===----------------------------------------------------------------------===//

TEST(CudaReduceTest, InvertibleNormGradIsTheCpuKernel) {
  struct Case {
    Shape shape;
    int64_t axis;
  };
  unsigned seed = 40;
  for (const Case &c :
       {Case{{3, 50, 37}, -1}, Case{{2, 5, 40}, 1}, Case{{130, 3}, 1}})
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE("axis " + std::to_string(c.axis) + " of rank " +
                   std::to_string(c.shape.size()) + " " +
                   dtypeName(dtype).str());
      int64_t rank = c.shape.size();
      int64_t axis = c.axis < 0 ? c.axis + rank : c.axis;
      int64_t rows = 1, cols = 1;
      for (int64_t d = 0; d < rank; ++d)
        (d < axis ? rows : cols) *= c.shape[d];
      Shape statShape(c.shape.begin(), c.shape.begin() + axis);
      statShape.resize(rank, 1);
      std::vector<float> scaleValues = uniform(cols, ++seed, 0.5f, 1.5f);
      for (size_t j = 0; j < scaleValues.size(); j += 3)
        scaleValues[j] = -scaleValues[j];
      HostTensor dy =
          ofStorage(dtype, c.shape, uniform(rows * cols, ++seed, -1, 1));
      HostTensor y =
          ofStorage(dtype, c.shape, uniform(rows * cols, ++seed, -2, 2));
      HostTensor scale = ofStorage(dtype, {cols}, scaleValues);
      HostTensor bias =
          ofStorage(dtype, {cols}, uniform(cols, ++seed, -0.5f, 0.5f));
      HostTensor invStd =
          HostTensor::f32(statShape, uniform(rows, ++seed, 0.5f, 2.0f));
      KernelRunner runner;
      auto cpu = runner.run(kMsDomain, "InvertibleLayerNormalizationGrad",
                            {&dy, &y, &scale, &bias, &invStd},
                            {TensorType::get(dtype, c.shape),
                             TensorType::get(dtype, {cols}),
                             TensorType::get(dtype, {cols})},
                            {intAttr("axis", c.axis)});
      ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
      std::vector<float> g = dy.floats(), yv = y.floats(), s = scale.floats(),
                         b = bias.floats(), inv = invStd.floats();
      // dScale and dBias: one thread per column, fp32 partials of
      // kNormGradRowBlock rows summed in double, bit for bit.
      std::vector<float> dScale = (*cpu)[1].floats(),
                         dBias = (*cpu)[2].floats();
      for (int64_t j = 0; j < cols; ++j) {
        double sumScale = 0, sumBias = 0;
        for (int64_t first = 0; first < rows;
             first += cuda::kNormGradRowBlock) {
          float partialScale = 0, partialBias = 0;
          for (int64_t r = first;
               r < std::min(rows, first + cuda::kNormGradRowBlock); ++r) {
            float gv = g[r * cols + j];
            partialScale += cuda::scaleGradTerm(
                gv, cuda::invertibleXhat(yv[r * cols + j], b[j], s[j]));
            partialBias += gv;
          }
          sumScale += partialScale;
          sumBias += partialBias;
        }
        EXPECT_EQ(stored(dtype, static_cast<float>(sumScale)), dScale[j])
            << "dScale " << j;
        EXPECT_EQ(stored(dtype, static_cast<float>(sumBias)), dBias[j])
            << "dBias " << j;
      }
      std::vector<float> dx = (*cpu)[0].floats();
      auto add = [](double p, double q) { return p + q; };
      for (int group : kGroups)
        for (int64_t r = 0; r < rows; ++r) {
          auto xhat = [&](int64_t j) {
            return cuda::invertibleXhat(yv[r * cols + j], b[j], s[j]);
          };
          auto bAt = [&](int64_t j) {
            return cuda::normGradB(g[r * cols + j], s[j], inv[r]);
          };
          double meanB =
              groupModel<double>(group, cols, 0.0, bAt, add) / double(cols);
          double meanBX =
              groupModel<double>(
                  group, cols, 0.0,
                  [&](int64_t j) { return gmopt::mulUnfused(bAt(j), xhat(j)); },
                  add) /
              double(cols);
          for (int64_t j = 0; j < cols; ++j) {
            float e = dx[r * cols + j];
            float a =
                stored(dtype, cuda::normGradDx(bAt(j), xhat(j), meanB, meanBX));
            expectClose(e, a,
                        (storageEpsilon(dtype) + 1e-6) * (1 + std::fabs(e)),
                        "dX " + std::to_string(r) + "," + std::to_string(j) +
                            ", group " + std::to_string(group));
          }
        }
    }
}

//===----------------------------------------------------------------------===//
// DivGrad
//===----------------------------------------------------------------------===//

/// Row-major strides of \p shape broadcast to \p full (0 where broadcast).
Shape broadcastStridesOf(const Shape &shape, const Shape &full) {
  Shape padded(full.size() - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  Shape strides(full.size(), 0);
  int64_t stride = 1;
  for (int d = static_cast<int>(full.size()) - 1; d >= 0; --d) {
    strides[d] = padded[d] == 1 ? 0 : stride;
    stride *= padded[d];
  }
  return strides;
}

/// ReduceKernels.cu's DivGrad plan of output \p result over \p s.
ReduceIndexing divGradPlan(const DivGradShapes &s, unsigned result) {
  Shape strideA = broadcastStridesOf(s.a, s.dy),
        strideB = broadcastStridesOf(s.b, s.dy);
  const Shape &own = result == 0 ? strideA : strideB;
  std::vector<cuda::ReduceDim> dims(s.dy.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(s.dy.size()) - 1; d >= 0; --d) {
    dims[d].extent = s.dy[d];
    dims[d].reduced = own[d] == 0;
    dims[d].stride[0] = stride;
    dims[d].stride[1] = strideA[d];
    dims[d].stride[2] = strideB[d];
    stride *= s.dy[d];
  }
  ReduceIndexing ix;
  EXPECT_TRUE(cuda::planReduction(dims, ix));
  return ix;
}

TEST(CudaReduceTest, DivGradIsTheCpuKernel) {
  unsigned seed = 60;
  for (const DivGradShapes &s : divGradShapes())
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE("A of " + std::to_string(s.a.size()) + " dims, B of " +
                   std::to_string(s.b.size()) + ", dY of " +
                   std::to_string(s.dy.back()) + " " + dtypeName(dtype).str());
      auto count = [](const Shape &shape) {
        int64_t n = 1;
        for (int64_t d : shape)
          n *= d;
        return n;
      };
      std::vector<float> bValues = uniform(count(s.b), ++seed, 0.5f, 2.0f);
      for (size_t i = 0; i < bValues.size(); i += 2)
        bValues[i] = -bValues[i];
      HostTensor dy =
          ofStorage(dtype, s.dy, uniform(count(s.dy), ++seed, -1, 1));
      HostTensor a = ofStorage(dtype, s.a, uniform(count(s.a), ++seed, -2, 2));
      HostTensor b = ofStorage(dtype, s.b, bValues);
      KernelRunner runner;
      auto cpu = runner.run(
          kMsDomain, "DivGrad", {&dy, &a, &b},
          {TensorType::get(dtype, s.a), TensorType::get(dtype, s.b)});
      ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
      std::vector<float> g = dy.floats(), av = a.floats(), bv = b.floats();
      for (unsigned result : {0u, 1u}) {
        ReduceIndexing ix = divGradPlan(s, result);
        std::vector<float> expected = (*cpu)[result].floats();
        ASSERT_EQ(int64_t(expected.size()), ix.outputs);
        for (int group : kGroups)
          for (int64_t o = 0; o < ix.outputs; ++o) {
            int64_t base[3];
            for (int slot = 0; slot < 3; ++slot)
              base[slot] = cuda::keptOffset(ix, slot, o);
            double acc = groupModel<double>(
                group, ix.count, 0.0,
                [&](int64_t r) {
                  float gr = g[base[0] + cuda::reducedOffset(ix, 0, r)];
                  float br = bv[base[2] + cuda::reducedOffset(ix, 2, r)];
                  return double(
                      result == 0
                          ? cuda::divGradA(gr, br)
                          : cuda::divGradB(
                                gr, av[base[1] + cuda::reducedOffset(ix, 1, r)],
                                br));
                },
                [](double p, double q) { return p + q; });
            // Unreduced elements are one fp32 operation: bit for bit.
            double tolerance =
                ix.count == 1 ? 0.0
                              : storageEpsilon(dtype) * std::fabs(expected[o]) +
                                    1e-6 * double(ix.count) * 16.0;
            expectClose(expected[o], stored(dtype, static_cast<float>(acc)),
                        tolerance,
                        (result ? "dB " : "dA ") + std::to_string(o) +
                            ", group " + std::to_string(group));
          }
      }
    }
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

TEST(CudaReduceTest, PlanReductionCollapsesAnyAxes) {
  // [2, 3, 4, 5] reducing 0 and 2: kept [3, 5], reduced [2, 4].
  ReduceIndexing ix = planOf({2, 3, 4, 5}, {true, false, true, false});
  EXPECT_EQ(ix.keptRank, 2);
  EXPECT_EQ(ix.reducedRank, 2);
  EXPECT_EQ(ix.outputs, 15);
  EXPECT_EQ(ix.count, 8);
  EXPECT_EQ(ix.keptStride[0][0], 20);
  EXPECT_EQ(ix.keptStride[0][1], 1);
  EXPECT_EQ(ix.reducedStride[0][0], 60);
  EXPECT_EQ(ix.reducedStride[0][1], 5);
  // Output 7 is (1, 2): offset 1 * 20 + 2; reduced element 5 is (1, 1).
  EXPECT_EQ(cuda::keptOffset(ix, 0, 7), 22);
  EXPECT_EQ(cuda::reducedOffset(ix, 0, 5), 65);
  // Adjacent reduced axes, and unit dimensions between them, merge.
  ix = planOf({2, 3, 1, 4, 5}, {false, true, true, true, false});
  EXPECT_EQ(ix.keptRank, 2);
  EXPECT_EQ(ix.reducedRank, 1);
  EXPECT_EQ(ix.reducedExtent[0], 12);
  EXPECT_EQ(ix.reducedStride[0][0], 5);
  // Every element reduced: one output, one merged dimension.
  ix = planOf({3, 4, 5}, {true, true, true});
  EXPECT_EQ(ix.keptRank, 0);
  EXPECT_EQ(ix.reducedRank, 1);
  EXPECT_EQ(ix.outputs, 1);
  EXPECT_EQ(ix.count, 60);
  // More than kMaxRank alternating groups do not fit.
  std::vector<cuda::ReduceDim> dims(2 * cuda::kMaxRank + 2);
  int64_t stride = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    dims[d].extent = 2;
    dims[d].reduced = d % 2 == 1;
    dims[d].stride[0] = stride;
    stride *= 2;
  }
  EXPECT_FALSE(cuda::planReduction(dims, ix));
}

} // namespace
