//===- CpuKernelsShapeTest.cpp - Shape, movement and gather kernels -------===//
//
// Shape, Size, Constant, ConstantOfShape, Range, BroadcastGradientArgs, the
// view ops (Reshape checks its shape operand), Transpose (general, 2-D and
// batched 2-D paths), Concat/ConcatTraining, Split/SplitTraining, Slice
// (negative steps, clamping, attribute form), Expand, Tile, Trilu, OneHot,
// Gather/GatherElements (negative and out-of-range indices) and
// GatherGrad/GatherElementsGrad against finite differences.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <numeric>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

TensorType i64Type(std::vector<int64_t> shape) {
  return TensorType::get(DType::I64, shape);
}

std::vector<float> iota(size_t n) {
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 0.0f);
  return values;
}

/// Runs an op that must succeed and returns its outputs.
std::vector<HostTensor> mustRun(KernelRunner &runner, llvm::StringRef domain,
                                const char *op,
                                std::vector<HostTensor *> inputs,
                                std::vector<TensorType> types,
                                std::vector<NamedAttribute> attrs = {}) {
  auto result = runner.run(domain, op, inputs, types, attrs);
  EXPECT_TRUE(static_cast<bool>(result))
      << op << ": " << llvm::toString(result.takeError());
  return result ? std::move(*result) : std::vector<HostTensor>(types.size());
}

/// Expects an op to fail with a message containing \p fragment.
void mustFail(KernelRunner &runner, llvm::StringRef domain, const char *op,
              std::vector<HostTensor *> inputs, std::vector<TensorType> types,
              const std::string &fragment,
              std::vector<NamedAttribute> attrs = {}) {
  auto result = runner.run(domain, op, inputs, types, attrs);
  ASSERT_FALSE(static_cast<bool>(result)) << op;
  std::string message = llvm::toString(result.takeError());
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(CpuShapeTest, ShapeSizeConstants) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2, 3, 4}, iota(24));
  EXPECT_EQ(
      mustRun(runner, "", "Shape", {&x}, {i64Type({3})})[0].values<int64_t>(),
      (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(mustRun(runner, "", "Shape", {&x}, {i64Type({2})},
                    {intAttr("start", -2)})[0]
                .values<int64_t>(),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(
      mustRun(runner, "", "Size", {&x}, {i64Type({})})[0].values<int64_t>(),
      (std::vector<int64_t>{24}));
  TensorData data = TensorData::fromValues<float>(DType::F32, {2}, {1.5f, -2});
  EXPECT_EQ(mustRun(runner, "", "Constant", {}, {f32Type({2})},
                    {attr("value", Attribute::getTensor(data))})[0]
                .floats(),
            (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(mustRun(runner, "", "Constant", {}, {i64Type({3})},
                    {intsAttr("value_ints", {4, 5, 6})})[0]
                .values<int64_t>(),
            (std::vector<int64_t>{4, 5, 6}));
  HostTensor shape = HostTensor::i64({2}, {2, 3});
  TensorData seven = TensorData::fromValues<int32_t>(DType::I32, {1}, {7});
  EXPECT_EQ(mustRun(runner, "", "ConstantOfShape", {&shape},
                    {TensorType::get(DType::I32, {2, 3})},
                    {attr("value", Attribute::getTensor(seven))})[0]
                .values<int32_t>(),
            std::vector<int32_t>(6, 7));
  EXPECT_EQ(
      mustRun(runner, "", "ConstantOfShape", {&shape}, {f32Type({2, 3})})[0]
          .floats(),
      std::vector<float>(6, 0));
  mustFail(runner, "", "ConstantOfShape", {&shape}, {f32Type({3, 2})},
           "differs from the shape");
}

TEST(CpuShapeTest, RangeAndBroadcastGradientArgs) {
  KernelRunner runner;
  HostTensor start = HostTensor::f32({}, {1}), limit = HostTensor::f32({}, {2}),
             delta = HostTensor::f32({}, {0.3f});
  std::vector<float> got =
      mustRun(runner, "", "Range", {&start, &limit, &delta}, {f32Type({4})})[0]
          .floats();
  EXPECT_FLOAT_EQ(got[3], 1 + 3 * 0.3f);
  HostTensor s = HostTensor::i64({}, {10}), l = HostTensor::i64({}, {0}),
             d = HostTensor::i64({}, {-3});
  EXPECT_EQ(mustRun(runner, "", "Range", {&s, &l, &d}, {i64Type({4})})[0]
                .values<int64_t>(),
            (std::vector<int64_t>{10, 7, 4, 1}));
  mustFail(runner, "", "Range", {&s, &l, &d}, {i64Type({5})},
           "the range has 4");

  HostTensor a = HostTensor::i64({3}, {2, 1, 4}),
             b = HostTensor::i64({2}, {3, 1});
  auto axes = mustRun(runner, kMsDomain, "BroadcastGradientArgs", {&a, &b},
                      {i64Type({1}), i64Type({2})});
  EXPECT_EQ(axes[0].values<int64_t>(), (std::vector<int64_t>{1}));
  EXPECT_EQ(axes[1].values<int64_t>(), (std::vector<int64_t>{2, 0}));
  HostTensor same = HostTensor::i64({2}, {5, 6});
  auto none = mustRun(runner, kMsDomain, "BroadcastGradientArgs",
                      {&same, &same}, {i64Type({0}), i64Type({0})});
  EXPECT_TRUE(none[0].values<int64_t>().empty());
  HostTensor bad = HostTensor::i64({1}, {3});
  HostTensor other = HostTensor::i64({1}, {4});
  mustFail(runner, kMsDomain, "BroadcastGradientArgs", {&bad, &other},
           {i64Type({0}), i64Type({0})}, "do not broadcast");
}

TEST(CpuShapeTest, ViewOps) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2, 3, 4}, iota(24));
  HostTensor shape = HostTensor::i64({3}, {0, -1, 2});
  EXPECT_EQ(
      mustRun(runner, "", "Reshape", {&x, &shape}, {f32Type({2, 6, 2})})[0]
          .floats(),
      iota(24));
  mustFail(runner, "", "Reshape", {&x, &shape}, {f32Type({4, 3, 2})},
           "does not satisfy");
  HostTensor axes = HostTensor::i64({1}, {0});
  EXPECT_EQ(
      mustRun(runner, "", "Unsqueeze", {&x, &axes}, {f32Type({1, 2, 3, 4})})[0]
          .floats(),
      iota(24));
  EXPECT_EQ(
      mustRun(runner, "", "Flatten", {&x}, {f32Type({2, 12})})[0].floats(),
      iota(24));
  EXPECT_EQ(
      mustRun(runner, "", "Identity", {&x}, {f32Type({2, 3, 4})})[0].floats(),
      iota(24));
  mustFail(runner, "", "Squeeze", {&x}, {f32Type({2, 3})}, "differ in size");
}

TEST(CpuMovementTest, TransposePaths) {
  KernelRunner runner;
  struct Case {
    std::vector<int64_t> shape, perm;
  } cases[] = {{{3, 4}, {1, 0}},       {{2, 3, 4}, {0, 2, 1}},
               {{2, 3, 4}, {2, 0, 1}}, {{2, 3, 4, 5}, {0, 2, 1, 3}},
               {{2, 1, 3}, {1, 2, 0}}, {{4, 5}, {0, 1}},
               {{2, 3, 4}, {}}};
  for (const Case &c : cases) {
    size_t rank = c.shape.size();
    std::vector<int64_t> perm = c.perm;
    if (perm.empty())
      for (size_t d = 0; d < rank; ++d)
        perm.push_back(rank - 1 - d);
    std::vector<int64_t> outShape;
    for (int64_t p : perm)
      outShape.push_back(c.shape[p]);
    int64_t n = 1;
    for (int64_t e : c.shape)
      n *= e;
    HostTensor x = HostTensor::f32(c.shape, iota(n));
    std::vector<NamedAttribute> attrs;
    if (!c.perm.empty())
      attrs.push_back(intsAttr("perm", c.perm));
    std::vector<float> got =
        mustRun(runner, "", "Transpose", {&x}, {f32Type(outShape)}, attrs)[0]
            .floats();
    // Reference: out[o] = in[source index].
    std::vector<int64_t> inStrides(rank, 1);
    for (int d = rank - 2; d >= 0; --d)
      inStrides[d] = inStrides[d + 1] * c.shape[d + 1];
    for (int64_t o = 0; o < n; ++o) {
      int64_t rest = o, source = 0;
      for (int d = rank - 1; d >= 0; --d) {
        source += (rest % outShape[d]) * inStrides[perm[d]];
        rest /= outShape[d];
      }
      ASSERT_EQ(got[o], static_cast<float>(source)) << o;
    }
  }
  // Big enough for the blocked and parallel paths, on 2-byte elements.
  std::vector<float> big = iota(3 * 70 * 90);
  HostTensor hb =
      HostTensor::f16({3, 70, 90}, std::vector<float>(big.size(), 1.0f));
  std::vector<uint16_t> bits(big.size());
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = static_cast<uint16_t>(i);
  hb.bytes.assign(reinterpret_cast<uint8_t *>(bits.data()),
                  reinterpret_cast<uint8_t *>(bits.data()) + bits.size() * 2);
  auto t = mustRun(runner, "", "Transpose", {&hb},
                   {TensorType::get(DType::F16, {3, 90, 70})},
                   {intsAttr("perm", {0, 2, 1})})[0]
               .values<uint16_t>();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 70; ++i)
      for (int64_t j = 0; j < 90; ++j)
        ASSERT_EQ(t[(b * 90 + j) * 70 + i], bits[(b * 70 + i) * 90 + j]);
}

TEST(CpuMovementTest, ConcatAndSplit) {
  KernelRunner runner;
  HostTensor a = HostTensor::f32({2, 1, 2}, {1, 2, 3, 4});
  HostTensor b = HostTensor::f32({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  auto concat = mustRun(runner, "", "Concat", {&a, &b}, {f32Type({2, 3, 2})},
                        {intAttr("axis", 1)});
  EXPECT_EQ(concat[0].floats(),
            (std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
  auto training =
      mustRun(runner, kMsDomain, "ConcatTraining", {&a, &b},
              {f32Type({2, 3, 2}), i64Type({2})}, {intAttr("axis", -2)});
  EXPECT_EQ(training[0].floats(), concat[0].floats());
  EXPECT_EQ(training[1].values<int64_t>(), (std::vector<int64_t>{1, 2}));
  mustFail(runner, "", "Concat", {&a, &b}, {f32Type({2, 4, 2})}, "add up to 3",
           {intAttr("axis", 1)});

  HostTensor whole = concat[0];
  HostTensor split = HostTensor::i64({2}, {1, 2});
  auto pieces =
      mustRun(runner, "", "Split", {&whole, &split},
              {f32Type({2, 1, 2}), f32Type({2, 2, 2})}, {intAttr("axis", 1)});
  EXPECT_EQ(pieces[0].floats(), a.floats());
  EXPECT_EQ(pieces[1].floats(), b.floats());
  auto trainingPieces =
      mustRun(runner, kMsDomain, "SplitTraining", {&whole, &split},
              {f32Type({2, 1, 2}), f32Type({2, 2, 2})}, {intAttr("axis", 1)});
  EXPECT_EQ(trainingPieces[1].floats(), b.floats());
  HostTensor even = HostTensor::f32({4}, {1, 2, 3, 4});
  auto halves =
      mustRun(runner, "", "Split", {&even}, {f32Type({2}), f32Type({2})});
  EXPECT_EQ(halves[1].floats(), (std::vector<float>{3, 4}));
  mustFail(runner, "", "Split", {&whole, &split},
           {f32Type({2, 2, 2}), f32Type({2, 1, 2})}, "disagrees with 'split'",
           {intAttr("axis", 1)});
}

TEST(CpuMovementTest, SliceSteps) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({3, 5}, iota(15));
  auto ints = [](std::vector<int64_t> v) {
    return HostTensor::i64({static_cast<int64_t>(v.size())}, v);
  };
  HostTensor starts = ints({1, 4}), ends = ints({100, -100}),
             axes = ints({0, 1}), steps = ints({1, -2});
  auto sliced = mustRun(runner, "", "Slice",
                        {&x, &starts, &ends, &axes, &steps}, {f32Type({2, 3})});
  EXPECT_EQ(sliced[0].floats(), (std::vector<float>{9, 7, 5, 14, 12, 10}));
  HostTensor s2 = ints({-2}), e2 = ints({5}), a2 = ints({-1});
  auto tail =
      mustRun(runner, "", "Slice", {&x, &s2, &e2, &a2}, {f32Type({3, 2})});
  EXPECT_EQ(tail[0].floats(), (std::vector<float>{3, 4, 8, 9, 13, 14}));
  // Slice-1's attribute form has no schema in the registry (a module using
  // it fails verification), so preparing it fails with the schema's arity.
  mustFail(
      runner, "", "Slice", {&x}, {f32Type({1, 5})},
      "Slice: its schema takes 3 to 5 inputs, the node has 1",
      {intsAttr("starts", {2}), intsAttr("ends", {3}), intsAttr("axes", {0})});
  HostTensor empty = ints({3}), emptyEnd = ints({1});
  auto none = mustRun(runner, "", "Slice", {&x, &empty, &emptyEnd, &a2},
                      {f32Type({3, 0})});
  EXPECT_TRUE(none[0].floats().empty());
  mustFail(runner, "", "Slice", {&x, &starts, &ends, &axes, &steps},
           {f32Type({2, 2})}, "kernel computes [2,3]");
}

TEST(CpuMovementTest, SliceGradScattersIntoZeros) {
  KernelRunner runner;
  auto ints = [](std::vector<int64_t> v) {
    return HostTensor::i64({static_cast<int64_t>(v.size())}, v);
  };
  HostTensor shape = ints({3, 5});
  HostTensor starts = ints({1, 4}), ends = ints({100, -100}),
             axes = ints({0, 1}), steps = ints({1, -2});
  HostTensor dY = HostTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto grad =
      mustRun(runner, kMsDomain, "SliceGrad",
              {&dY, &shape, &starts, &ends, &axes, &steps}, {f32Type({3, 5})});
  // The forward slice picked rows 1..2, columns 4, 2, 0.
  EXPECT_EQ(grad[0].floats(),
            (std::vector<float>{0, 0, 0, 0, 0, 3, 0, 2, 0, 1, 6, 0, 5, 0, 4}));
  // Slice is linear: <SliceGrad(dY), x> == <dY, Slice(x)>.
  HostTensor x = HostTensor::f32({3, 5}, randomFloats(15, 80));
  auto forward =
      mustRun(runner, "", "Slice", {&x, &starts, &ends, &axes, &steps},
              {f32Type({2, 3})});
  double lhs = 0, rhs = 0;
  for (int i = 0; i < 15; ++i)
    lhs += grad[0].floats()[i] * x.floats()[i];
  for (int i = 0; i < 6; ++i)
    rhs += dY.floats()[i] * forward[0].floats()[i];
  EXPECT_NEAR(lhs, rhs, 1e-5);
  mustFail(runner, kMsDomain, "SliceGrad", {&dY, &shape, &starts, &ends},
           {f32Type({3, 5})}, "but the slice has shape");
}

TEST(CpuMovementTest, ExpandTileTriluOneHot) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({3, 1}, {1, 2, 3});
  HostTensor shape = HostTensor::i64({3}, {2, 1, 2});
  auto expanded =
      mustRun(runner, "", "Expand", {&x, &shape}, {f32Type({2, 3, 2})});
  EXPECT_EQ(expanded[0].floats(),
            (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  HostTensor m = HostTensor::f32({2, 2}, {1, 2, 3, 4});
  HostTensor reps = HostTensor::i64({2}, {2, 3});
  auto tiled = mustRun(runner, "", "Tile", {&m, &reps}, {f32Type({4, 6})});
  EXPECT_EQ(tiled[0].floats(),
            (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  HostTensor square = HostTensor::f32({2, 3, 3}, iota(18));
  auto upper = mustRun(runner, "", "Trilu", {&square}, {f32Type({2, 3, 3})});
  EXPECT_EQ(upper[0].floats(),
            (std::vector<float>{0, 1, 2, 0, 4, 5, 0, 0, 8, 9, 10, 11, 0, 13, 14,
                                0, 0, 17}));
  HostTensor k = HostTensor::i64({}, {-1});
  auto lower = mustRun(runner, "", "Trilu", {&square, &k}, {f32Type({2, 3, 3})},
                       {intAttr("upper", 0)});
  std::vector<float> lowerValues = lower[0].floats();
  EXPECT_EQ(std::vector<float>(lowerValues.begin(), lowerValues.begin() + 9),
            (std::vector<float>{0, 0, 0, 3, 0, 0, 6, 7, 0}));
  HostTensor indices = HostTensor::i64({3}, {0, -1, 5});
  HostTensor depth = HostTensor::i64({}, {3});
  HostTensor values = HostTensor::f32({2}, {0.5f, 2});
  auto hot = mustRun(runner, "", "OneHot", {&indices, &depth, &values},
                     {f32Type({3, 3})});
  EXPECT_EQ(hot[0].floats(), (std::vector<float>{2, 0.5f, 0.5f, 0.5f, 0.5f, 2,
                                                 0.5f, 0.5f, 0.5f}));
  auto axis0 = mustRun(runner, "", "OneHot", {&indices, &depth, &values},
                       {f32Type({3, 3})}, {intAttr("axis", 0)});
  EXPECT_EQ(axis0[0].floats(), (std::vector<float>{2, 0.5f, 0.5f, 0.5f, 0.5f,
                                                   0.5f, 0.5f, 2, 0.5f}));
}

TEST(CpuGatherTest, GatherAndGatherElements) {
  KernelRunner runner;
  HostTensor data = HostTensor::f32({3, 4}, iota(12));
  HostTensor idx = HostTensor::i64({2, 2}, {2, 0, -1, 1});
  auto rows =
      mustRun(runner, "", "Gather", {&data, &idx}, {f32Type({2, 2, 4})});
  EXPECT_EQ(rows[0].floats(), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8,
                                                  9, 10, 11, 4, 5, 6, 7}));
  HostTensor cols = HostTensor::i32({2}, {3, 0});
  auto columns = mustRun(runner, "", "Gather", {&data, &cols},
                         {f32Type({3, 2})}, {intAttr("axis", 1)});
  EXPECT_EQ(columns[0].floats(), (std::vector<float>{3, 0, 7, 4, 11, 8}));
  HostTensor scalar = HostTensor::i64({}, {1});
  auto row = mustRun(runner, "", "Gather", {&data, &scalar}, {f32Type({4})});
  EXPECT_EQ(row[0].floats(), (std::vector<float>{4, 5, 6, 7}));
  HostTensor bad = HostTensor::i64({1}, {3});
  mustFail(runner, "", "Gather", {&data, &bad}, {f32Type({1, 4})},
           "index 3 is out of range");

  HostTensor elementIdx = HostTensor::i64({2, 4}, {0, 2, 1, -1, 2, 2, 0, 0});
  auto elements = mustRun(runner, "", "GatherElements", {&data, &elementIdx},
                          {f32Type({2, 4})});
  EXPECT_EQ(elements[0].floats(),
            (std::vector<float>{0, 9, 6, 11, 8, 9, 2, 3}));
  HostTensor alongCols = HostTensor::i64({3, 1}, {3, 0, 2});
  auto picked = mustRun(runner, "", "GatherElements", {&data, &alongCols},
                        {f32Type({3, 1})}, {intAttr("axis", 1)});
  EXPECT_EQ(picked[0].floats(), (std::vector<float>{3, 4, 10}));
}

TEST(CpuMovementTest, PadModes) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor pads = HostTensor::i64(
      {4}, {1, 2, 0, 1}); // rows +1 before, cols +2 before/+1 after
  HostTensor value = HostTensor::f32({}, {9});
  auto constant =
      mustRun(runner, "", "Pad", {&x, &pads, &value}, {f32Type({3, 6})});
  EXPECT_EQ(constant[0].floats(),
            (std::vector<float>{9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5,
                                6, 9}));
  auto reflect = mustRun(runner, "", "Pad", {&x, &pads}, {f32Type({3, 6})},
                         {stringAttr("mode", "reflect")});
  EXPECT_EQ(reflect[0].floats(),
            (std::vector<float>{6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5,
                                6, 5}));
  auto edge = mustRun(runner, "", "Pad", {&x, &pads}, {f32Type({3, 6})},
                      {stringAttr("mode", "edge")});
  EXPECT_EQ(edge[0].floats(), (std::vector<float>{1, 1, 1, 2, 3, 3, 1, 1, 1, 2,
                                                  3, 3, 4, 4, 4, 5, 6, 6}));
  HostTensor crop = HostTensor::i64({2}, {-1, 0});
  HostTensor axes = HostTensor::i64({1}, {1});
  auto cropped = mustRun(runner, "", "Pad", {&x, &crop, nullptr, &axes},
                         {f32Type({2, 2})});
  EXPECT_EQ(cropped[0].floats(), (std::vector<float>{2, 3, 5, 6}));
}

TEST(CpuGatherTest, GatherNDScatterAndNonZero) {
  KernelRunner runner;
  HostTensor data = HostTensor::f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  HostTensor idx = HostTensor::i64({2, 2}, {0, 1, 1, 0});
  auto rows = mustRun(runner, "", "GatherND", {&data, &idx}, {f32Type({2, 2})});
  EXPECT_EQ(rows[0].floats(), (std::vector<float>{2, 3, 4, 5}));
  HostTensor batched = HostTensor::i64({2, 1}, {1, 0});
  auto perBatch = mustRun(runner, "", "GatherND", {&data, &batched},
                          {f32Type({2, 2})}, {intAttr("batch_dims", 1)});
  EXPECT_EQ(perBatch[0].floats(), (std::vector<float>{2, 3, 4, 5}));
  // GatherNDGrad adds repeated tuples.
  HostTensor shape = HostTensor::i64({3}, {2, 2, 2});
  HostTensor twice = HostTensor::i64({2, 2}, {0, 1, 0, 1});
  HostTensor update = HostTensor::f32({2, 2}, {1, 2, 10, 20});
  auto grad = mustRun(runner, kMsDomain, "GatherNDGrad",
                      {&shape, &twice, &update}, {f32Type({2, 2, 2})});
  EXPECT_EQ(grad[0].floats(), (std::vector<float>{0, 0, 11, 22, 0, 0, 0, 0}));
  auto scatteredND = mustRun(runner, "", "ScatterND", {&data, &idx, &update},
                             {f32Type({2, 2, 2})});
  EXPECT_EQ(scatteredND[0].floats(),
            (std::vector<float>{0, 1, 1, 2, 10, 20, 6, 7}));
  auto addedND =
      mustRun(runner, "", "ScatterND", {&data, &twice, &update},
              {f32Type({2, 2, 2})}, {stringAttr("reduction", "add")});
  EXPECT_EQ(addedND[0].floats(),
            (std::vector<float>{0, 1, 13, 25, 4, 5, 6, 7}));
  HostTensor m = HostTensor::f32({2, 3}, std::vector<float>(6, 0));
  HostTensor elementIdx = HostTensor::i64({1, 2}, {2, -3});
  HostTensor updates = HostTensor::f32({1, 2}, {5, 6});
  auto scattered =
      mustRun(runner, "", "ScatterElements", {&m, &elementIdx, &updates},
              {f32Type({2, 3})}, {intAttr("axis", 1)});
  EXPECT_EQ(scattered[0].floats(), (std::vector<float>{6, 0, 5, 0, 0, 0}));
  HostTensor sparse = HostTensor::f32({2, 3}, {0, 1, 0, -0.0f, 0, 2});
  auto nonZero = mustRun(runner, "", "NonZero", {&sparse},
                         {TensorType::get(DType::I64, {2, 2})});
  EXPECT_EQ(nonZero[0].values<int64_t>(), (std::vector<int64_t>{0, 1, 1, 2}));
  mustFail(runner, "", "NonZero", {&sparse},
           {TensorType::get(DType::I64, {2, 3})}, "has 2 nonzero elements");
}

void expectGradient(const std::vector<float> &analytic,
                    const std::vector<double> &numeric,
                    const std::string &what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < numeric.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i], 2e-3 * (1 + std::fabs(numeric[i])))
        << what << " " << i;
}

TEST(CpuGatherTest, GradsMatchFiniteDifferences) {
  std::vector<float> data = randomFloats(4 * 3 * 2, 70), dY;
  HostTensor idx =
      HostTensor::i64({2, 3}, {1, 3, 1, 0, -1, 1}); // Repeats accumulate.
  for (int64_t axis : {0, 1}) {
    std::vector<int64_t> outShape = axis == 0
                                        ? std::vector<int64_t>{2, 3, 3, 2}
                                        : std::vector<int64_t>{4, 2, 3, 2};
    HostTensor axisIdx =
        axis == 0 ? idx : HostTensor::i64({2, 3}, {1, 2, 1, 0, -1, 1});
    dY = randomFloats(axis == 0 ? 36 : 48, 71 + axis);
    auto f = [&](const std::vector<float> &v) {
      KernelRunner runner;
      HostTensor h = HostTensor::f32({4, 3, 2}, v);
      return mustRun(runner, "", "Gather", {&h, &axisIdx}, {f32Type(outShape)},
                     {intAttr("axis", axis)})[0]
          .floats();
    };
    auto numeric = numericGradient(f, data, dY, 1e-2f);
    KernelRunner runner;
    HostTensor shape = HostTensor::i64({3}, {4, 3, 2});
    HostTensor hdY = HostTensor::f32(outShape, dY);
    auto grad =
        mustRun(runner, kMsDomain, "GatherGrad", {&shape, &axisIdx, &hdY},
                {f32Type({4, 3, 2})}, {intAttr("axis", axis)});
    expectGradient(grad[0].floats(), numeric, "GatherGrad");
  }
  HostTensor elementIdx =
      HostTensor::i64({2, 3, 2}, {0, 3, 2, 2, 1, -1, 3, 3, 0, 0, 2, 1});
  std::vector<float> dYe = randomFloats(12, 75);
  auto fe = [&](const std::vector<float> &v) {
    KernelRunner runner;
    HostTensor h = HostTensor::f32({4, 3, 2}, v);
    return mustRun(runner, "", "GatherElements", {&h, &elementIdx},
                   {f32Type({2, 3, 2})})[0]
        .floats();
  };
  auto numeric = numericGradient(fe, data, dYe, 1e-2f);
  KernelRunner runner;
  HostTensor shape = HostTensor::i64({3}, {4, 3, 2});
  HostTensor hdY = HostTensor::f32({2, 3, 2}, dYe);
  auto grad = mustRun(runner, kMsDomain, "GatherElementsGrad",
                      {&hdY, &shape, &elementIdx}, {f32Type({4, 3, 2})});
  expectGradient(grad[0].floats(), numeric, "GatherElementsGrad");
  HostTensor wrongShape = HostTensor::i64({3}, {4, 3, 3});
  mustFail(runner, kMsDomain, "GatherElementsGrad",
           {&hdY, &wrongShape, &elementIdx}, {f32Type({4, 3, 2})},
           "shape operand");
}

} // namespace
