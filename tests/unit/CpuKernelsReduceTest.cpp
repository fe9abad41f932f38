//===- CpuKernelsReduceTest.cpp - Reductions and arg-reductions -----------===//
//
// Every reduction over every subset of axes of a rank-4 tensor (covering the
// row, column, [K,R,K] and transposing paths), with and without keepdims,
// axes as attribute or as input, noop_with_empty_axes, integer inputs,
// ReduceSumTraining, and ArgMax/ArgMin with keepdims and select_last_index,
// all against naive loops.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <functional>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

struct ReduceOp {
  const char *name;
  double init;
  std::function<double(double, double)> combine;
  std::function<double(double, int64_t)> finalize;
};

const ReduceOp kReduceOps[] = {
    {"ReduceSum", 0, [](double a, double x) { return a + x; },
     [](double a, int64_t) { return a; }},
    {"ReduceMean", 0, [](double a, double x) { return a + x; },
     [](double a, int64_t n) { return a / n; }},
    {"ReduceMax", -INFINITY, [](double a, double x) { return std::max(a, x); },
     [](double a, int64_t) { return a; }},
    {"ReduceMin", INFINITY, [](double a, double x) { return std::min(a, x); },
     [](double a, int64_t) { return a; }},
    {"ReduceProd", 1, [](double a, double x) { return a * x; },
     [](double a, int64_t) { return a; }},
    {"ReduceSumSquare", 0, [](double a, double x) { return a + x * x; },
     [](double a, int64_t) { return a; }},
    {"ReduceL1", 0, [](double a, double x) { return a + std::fabs(x); },
     [](double a, int64_t) { return a; }},
    {"ReduceL2", 0, [](double a, double x) { return a + x * x; },
     [](double a, int64_t) { return std::sqrt(a); }},
    {"ReduceLogSum", 0, [](double a, double x) { return a + x; },
     [](double a, int64_t) { return std::log(a); }},
    {"ReduceLogSumExp", 0, [](double a, double x) { return a + std::exp(x); },
     [](double a, int64_t) { return std::log(a); }}};

/// Naive reduction of x (shape) over the axes in mask.
std::vector<double> naiveReduce(const ReduceOp &op, const std::vector<float> &x,
                                const std::vector<int64_t> &shape,
                                unsigned mask) {
  unsigned rank = shape.size();
  std::vector<int64_t> outShape;
  for (unsigned d = 0; d < rank; ++d)
    outShape.push_back(mask & (1u << d) ? 1 : shape[d]);
  int64_t outCount = 1, reduced = 1;
  for (unsigned d = 0; d < rank; ++d) {
    outCount *= outShape[d];
    if (mask & (1u << d))
      reduced *= shape[d];
  }
  std::vector<double> acc(outCount, op.init);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t rest = i, out = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t coord = rest % shape[d];
      rest /= shape[d];
      out += (mask & (1u << d) ? 0 : coord) * stride;
      stride *= outShape[d];
    }
    acc[out] = op.combine(acc[out], x[i]);
  }
  for (double &a : acc)
    a = op.finalize(a, reduced);
  return acc;
}

TEST(CpuReduceTest, EveryOpOverEveryAxisSubset) {
  std::vector<int64_t> shape = {3, 4, 5, 6};
  std::vector<float> x =
      randomFloats(360, 1, 0.5f, 1.5f); // Positive: ReduceProd stays tame.
  HostTensor hx = HostTensor::f32(shape, x);
  KernelRunner runner;
  for (const ReduceOp &op : kReduceOps)
    for (unsigned mask = 1; mask < 16; ++mask)
      for (bool keepDims : {true, false})
        for (bool axesAsInput : {false, true}) {
          std::vector<int64_t> axes, outShape;
          for (unsigned d = 0; d < 4; ++d) {
            if (mask & (1u << d)) {
              axes.push_back(
                  d == 1 ? -3 : static_cast<int64_t>(d)); // A negative axis.
              if (keepDims)
                outShape.push_back(1);
            } else {
              outShape.push_back(shape[d]);
            }
          }
          HostTensor axesTensor =
              HostTensor::i64({static_cast<int64_t>(axes.size())}, axes);
          std::vector<NamedAttribute> attrs = {intAttr("keepdims", keepDims)};
          if (!axesAsInput)
            attrs.push_back(intsAttr("axes", axes));
          auto result = runner.run("", op.name,
                                   {&hx, axesAsInput ? &axesTensor : nullptr},
                                   {f32Type(outShape)}, attrs);
          ASSERT_TRUE(static_cast<bool>(result))
              << op.name << ": " << llvm::toString(result.takeError());
          std::vector<double> want = naiveReduce(op, x, shape, mask);
          std::vector<float> got = (*result)[0].floats();
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
                << op.name << " mask " << mask << " element " << i;
        }
}

TEST(CpuReduceTest, EmptyAxesAndIntegers) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor noAxes = HostTensor::i64({0}, {});
  auto all = runner.run("", "ReduceSum", {&x, &noAxes}, {f32Type({1, 1})});
  ASSERT_TRUE(static_cast<bool>(all));
  EXPECT_EQ((*all)[0].floats(), (std::vector<float>{21}));
  auto noop = runner.run("", "ReduceSum", {&x, &noAxes}, {f32Type({2, 3})},
                         {intAttr("noop_with_empty_axes", 1)});
  ASSERT_TRUE(static_cast<bool>(noop));
  EXPECT_EQ((*noop)[0].floats(), x.floats());
  auto noopSquare = runner.run("", "ReduceSumSquare", {&x}, {f32Type({2, 3})},
                               {intAttr("noop_with_empty_axes", 1)});
  ASSERT_TRUE(static_cast<bool>(noopSquare));
  EXPECT_EQ((*noopSquare)[0].floats(),
            (std::vector<float>{1, 4, 9, 16, 25, 36}));
  auto scalar = runner.run("", "ReduceMean", {&x}, {f32Type({})},
                           {intAttr("keepdims", 0)});
  ASSERT_TRUE(static_cast<bool>(scalar));
  EXPECT_EQ((*scalar)[0].floats(), (std::vector<float>{3.5f}));
  HostTensor ints = HostTensor::i64({2, 2}, {5, -7, 3, 9});
  HostTensor axis1 = HostTensor::i64({1}, {1});
  auto intSum =
      runner.run("", "ReduceSum", {&ints, &axis1},
                 {TensorType::get(DType::I64, {2})}, {intAttr("keepdims", 0)});
  auto intMax = runner.run("", "ReduceMax", {&ints},
                           {TensorType::get(DType::I64, {1, 1})});
  ASSERT_TRUE(intSum && intMax);
  EXPECT_EQ((*intSum)[0].values<int64_t>(), (std::vector<int64_t>{-2, 12}));
  EXPECT_EQ((*intMax)[0].values<int64_t>(), (std::vector<int64_t>{9}));
  auto training =
      runner.run(kMsDomain, "ReduceSumTraining", {&x, &noAxes},
                 {f32Type({2, 3})}, {intAttr("noop_with_empty_axes", 1)});
  auto trainingRows = runner.run(kMsDomain, "ReduceSumTraining", {&x, &axis1},
                                 {f32Type({2, 1})});
  ASSERT_TRUE(training && trainingRows);
  EXPECT_EQ((*training)[0].floats(), x.floats());
  EXPECT_EQ((*trainingRows)[0].floats(), (std::vector<float>{6, 15}));
  auto wrong = runner.run("", "ReduceSum", {&x, &axis1}, {f32Type({3})});
  EXPECT_FALSE(static_cast<bool>(wrong));
  llvm::consumeError(wrong.takeError());
  HostTensor badAxis = HostTensor::i64({1}, {2});
  auto outOfRange =
      runner.run("", "ReduceSum", {&x, &badAxis}, {f32Type({2, 3})});
  ASSERT_FALSE(static_cast<bool>(outOfRange));
  EXPECT_NE(llvm::toString(outOfRange.takeError()).find("out of range"),
            std::string::npos);
}

TEST(CpuReduceTest, LogSumExpDoesNotOverflow) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2, 3}, {1000, 1000, 1000, -1000, 0, -1000});
  auto result = runner.run("", "ReduceLogSumExp", {&x}, {f32Type({2, 1})},
                           {intsAttr("axes", {1})});
  ASSERT_TRUE(static_cast<bool>(result));
  EXPECT_NEAR((*result)[0].floats()[0], 1000 + std::log(3.0), 1e-3);
  EXPECT_NEAR((*result)[0].floats()[1], 0, 1e-6);
}

TEST(CpuReduceTest, ArgMaxArgMin) {
  KernelRunner runner;
  HostTensor x =
      HostTensor::f32({2, 3, 2}, {1, 9, 5, 9, 5, 0, 2, 2, 7, 1, 7, 3});
  auto i64 = [](std::vector<int64_t> s) {
    return TensorType::get(DType::I64, s);
  };
  auto argMax1 =
      runner.run("", "ArgMax", {&x}, {i64({2, 1, 2})}, {intAttr("axis", 1)});
  auto argMaxLast = runner.run("", "ArgMax", {&x}, {i64({2, 2})},
                               {intAttr("axis", 1), intAttr("keepdims", 0),
                                intAttr("select_last_index", 1)});
  auto argMin2 = runner.run("", "ArgMin", {&x}, {i64({2, 3})},
                            {intAttr("axis", -1), intAttr("keepdims", 0)});
  ASSERT_TRUE(argMax1 && argMaxLast && argMin2);
  EXPECT_EQ((*argMax1)[0].values<int64_t>(),
            (std::vector<int64_t>{1, 0, 1, 2}));
  EXPECT_EQ((*argMaxLast)[0].values<int64_t>(),
            (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_EQ((*argMin2)[0].values<int64_t>(),
            (std::vector<int64_t>{0, 0, 1, 0, 1, 1}));
}

} // namespace
