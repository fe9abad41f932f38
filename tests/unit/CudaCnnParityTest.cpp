//===- CudaCnnParityTest.cpp - CNN ops on CUDA against the CPU backend ----===//
//
// Per-op parity of the CUDA backend's CNN entries (CudnnDispatch.cpp):
// Conv (pads, strides, dilations, groups, bias, 1-D), ConvGrad (dX, dW,
// dB), MaxPool with Indices, MaxPoolGrad, AveragePool (ceil_mode,
// count_include_pad, asymmetric pads), AveragePoolGrad, GlobalAveragePool,
// GlobalMaxPool, BatchNormalization (inference), BatchNormInternal
// (training) and BatchNormalizationGrad. Each case is a one-node module on
// fresh random inputs, run eagerly on the CPU backend and on the CUDA
// backend; outputs must agree within fp32 tolerances (exactly for
// Indices). Without a GPU the CUDA half skips with the probe's reason;
// the CPU half runs everywhere, so the cases and the harness are checked
// in every build.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"

#include "tests/unit/OpParityHarness.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

using test::OpCase;

TensorType f32(std::vector<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}
TensorType i64(std::vector<int64_t> shape) {
  return TensorType::get(DType::I64, shape);
}
NamedAttribute ints(const char *name, std::vector<int64_t> values) {
  return {name, Attribute::getInts(std::move(values))};
}
NamedAttribute integer(const char *name, int64_t value) {
  return {name, Attribute::getInt(value)};
}

/// The CPU backend's MaxPool Indices of \p x under \p attrs (MaxPoolGrad's
/// input).
TensorData maxPoolIndices(const TensorData &x, std::vector<int64_t> out,
                          std::vector<NamedAttribute> attrs) {
  OpCase c{"indices", "", "MaxPool", {x}, {f32(out), i64(out)}, attrs};
  auto results = test::runOpCase(c, /*onCuda=*/false);
  EXPECT_TRUE(bool(results)) << llvm::toString(results.takeError());
  return results ? (*results)[1] : TensorData();
}

std::vector<OpCase> cnnCases() {
  unsigned seed = 1;
  auto rnd = [&](std::vector<int64_t> shape, float low = -1, float high = 1) {
    return test::randomTensor(DType::F32, shape, seed++, low, high);
  };
  std::vector<OpCase> cases;
  auto pads1 = ints("pads", {1, 1, 1, 1});
  cases.push_back({"Conv 3x3 pads 1 bias",
                   "",
                   "Conv",
                   {rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3}), rnd({5})},
                   {f32({2, 5, 8, 8})},
                   {pads1}});
  cases.push_back({"Conv stride 2 dilation 2 groups 2",
                   "",
                   "Conv",
                   {rnd({2, 4, 9, 9}), rnd({6, 2, 3, 3})},
                   {f32({2, 6, 4, 4})},
                   {ints("strides", {2, 2}), ints("dilations", {2, 2}), pads1,
                    integer("group", 2)}});
  cases.push_back({"Conv 1-D",
                   "",
                   "Conv",
                   {rnd({2, 3, 12}), rnd({4, 3, 3}), rnd({4})},
                   {f32({2, 4, 6})},
                   {ints("strides", {2}), ints("pads", {1, 1})}});
  cases.push_back({"ConvGrad dX dW dB",
                   kMsDomain.str(),
                   "ConvGrad",
                   {rnd({2, 5, 8, 8}), rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3})},
                   {f32({2, 3, 8, 8}), f32({5, 3, 3, 3}), f32({5})},
                   {pads1}});
  cases.push_back({"ConvGrad groups stride",
                   kMsDomain.str(),
                   "ConvGrad",
                   {rnd({2, 6, 4, 4}), rnd({2, 4, 8, 8}), rnd({6, 2, 3, 3})},
                   {f32({2, 4, 8, 8}), f32({6, 2, 3, 3}), f32({6})},
                   {ints("strides", {2, 2}), pads1, integer("group", 2)}});
  std::vector<NamedAttribute> pool = {ints("kernel_shape", {3, 3}),
                                      ints("strides", {2, 2}), pads1};
  TensorData poolX = rnd({2, 3, 9, 9});
  cases.push_back({"MaxPool 3x3 stride 2",
                   "",
                   "MaxPool",
                   {poolX},
                   {f32({2, 3, 5, 5}), i64({2, 3, 5, 5})},
                   pool});
  cases.push_back(
      {"MaxPoolGrad",
       "",
       "MaxPoolGrad",
       {rnd({2, 3, 5, 5}), maxPoolIndices(poolX, {2, 3, 5, 5}, pool)},
       {f32({2, 3, 9, 9})},
       pool});
  std::vector<NamedAttribute> average = {
      ints("kernel_shape", {3, 2}), ints("strides", {2, 2}),
      ints("pads", {1, 0, 0, 1}), integer("ceil_mode", 1),
      integer("count_include_pad", 1)};
  cases.push_back({"AveragePool ceil_mode count_include_pad",
                   "",
                   "AveragePool",
                   {rnd({2, 3, 8, 7})},
                   {f32({2, 3, 4, 4})},
                   average});
  cases.push_back({"AveragePoolGrad",
                   "",
                   "AveragePoolGrad",
                   {rnd({2, 3, 4, 4})},
                   {f32({2, 3, 8, 7})},
                   average});
  cases.push_back({"GlobalAveragePool",
                   "",
                   "GlobalAveragePool",
                   {rnd({2, 5, 6, 7})},
                   {f32({2, 5, 1, 1})},
                   {}});
  cases.push_back({"GlobalMaxPool",
                   "",
                   "GlobalMaxPool",
                   {rnd({2, 5, 6, 7})},
                   {f32({2, 5, 1, 1})},
                   {}});
  cases.push_back(
      {"BatchNormalization inference",
       "",
       "BatchNormalization",
       {rnd({4, 6, 5, 5}), rnd({6}), rnd({6}), rnd({6}), rnd({6}, 0.5f, 2)},
       {f32({4, 6, 5, 5})},
       {}});
  cases.push_back({"BatchNormInternal training",
                   kMsDomain.str(),
                   "BatchNormInternal",
                   {rnd({4, 6, 5, 5}, -2, 3), rnd({6}), rnd({6}), rnd({6}),
                    rnd({6}, 0.5f, 2)},
                   {f32({4, 6, 5, 5}), f32({6}), f32({6}), f32({6}), f32({6})},
                   {}});
  cases.push_back({"BatchNormalizationGrad",
                   kMsDomain.str(),
                   "BatchNormalizationGrad",
                   {rnd({4, 6, 5, 5}), rnd({4, 6, 5, 5}), rnd({6}), rnd({6}),
                    rnd({6}, 0.5f, 2)},
                   {f32({4, 6, 5, 5}), f32({6}), f32({6})},
                   {{"epsilon", Attribute::getFloat(1e-5f)}}});
  return cases;
}

} // namespace

TEST(CudaCnnParityTest, CasesRunOnTheCpuBackend) {
  // The harness and the cases, in every build.
  for (const OpCase &c : cnnCases()) {
    SCOPED_TRACE(c.what);
    test::checkCpuHalf(c);
  }
}

TEST(CudaCnnParityTest, CnnOpsMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  if (!isCudnnBuilt())
    GTEST_SKIP() << "this machine has no cuDNN (no cudnn.h when configured)";
  test::expectCudaParity(cnnCases(), {AllocationMode::Eager});
}
