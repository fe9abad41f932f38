//===- CudaCnnAmpParityTest.cpp - 16-bit CNN ops on CUDA vs the CPU -------===//
//
// Per-op parity of the CUDA backend's CNN entries in f16 and bf16 storage
// (Conv with bias and groups, ConvGrad, MaxPool with Indices, MaxPoolGrad,
// AveragePool, AveragePoolGrad, the global pools, batch norm with a 16-bit
// X and fp32 statistics, and GatherGrad, the other scatter-add the AMP
// graphs need) and of convolutions with asymmetric pads (SAME_UPPER /
// SAME_LOWER, explicit begin != end pads; fp32 and f16), which pad
// explicitly into the node's planned workspace. Each case is a one-node
// module on fresh random inputs, run on the CPU backend (which stages
// 16-bit tensors as fp32) and on the CUDA backend, eagerly and under a plan
// with the CUDA workspace model (the asymmetric-pad convolutions, which
// need their slice, planned only); outputs must agree within a stated
// tolerance: the pools exactly (bit for bit, and Indices), a 16-bit
// result within two units in its last place plus two units at 1.0 (the
// fp32 sums of cuDNN and the CPU differ in order, then round), fp32 within
// 1e-5 + 1e-4 |x|; an eager 16-bit scatter-add, which rounds each add,
// within a few units at its sums' scale more.
// Without a GPU the CUDA half skips with the probe's reason; the CPU half
// and the planning run everywhere.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "ir/Plan.h"

#include "tests/unit/OpParityHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace gmopt;

namespace {

NamedAttribute ints(const char *name, std::vector<int64_t> values) {
  return {name, Attribute::getInts(std::move(values))};
}
NamedAttribute integer(const char *name, int64_t value) {
  return {name, Attribute::getInt(value)};
}
NamedAttribute text(const char *name, const char *value) {
  return {name, Attribute::getString(value)};
}

using test::Agreement;
using test::OpCase;
using test::randomTensor;
using test::ulpNear;

/// The CPU backend's MaxPool Indices of \p x (MaxPoolGrad's input).
TensorData maxPoolIndices(const TensorData &x, std::vector<int64_t> out,
                          std::vector<NamedAttribute> attrs) {
  OpCase c{"indices",
           "",
           "MaxPool",
           {x},
           {TensorType::get(x.getType().getDType(), out),
            TensorType::get(DType::I64, out)},
           attrs};
  auto results = test::runOpCase(c, /*onCuda=*/false);
  EXPECT_TRUE(bool(results)) << llvm::toString(results.takeError());
  return results ? (*results)[1] : TensorData();
}

/// The cases in storage \p dtype (f16 or bf16), plus the asymmetric-pad
/// convolutions in \p dtype and fp32.
std::vector<OpCase> ampCases(DType dtype) {
  unsigned seed = dtype == DType::F16 ? 1 : 1000;
  auto rnd = [&](std::vector<int64_t> shape, float low = -1, float high = 1) {
    return randomTensor(dtype, shape, seed++, low, high);
  };
  auto f32Rnd = [&](std::vector<int64_t> shape, float low = -1,
                    float high = 1) {
    return randomTensor(DType::F32, shape, seed++, low, high);
  };
  auto t = [&](std::vector<int64_t> shape) {
    return TensorType::get(dtype, shape);
  };
  auto f32 = [](std::vector<int64_t> shape) {
    return TensorType::get(DType::F32, shape);
  };
  auto i64 = [](std::vector<int64_t> shape) {
    return TensorType::get(DType::I64, shape);
  };
  std::vector<OpCase> cases;
  auto pads1 = ints("pads", {1, 1, 1, 1});
  cases.push_back({"Conv 3x3 pads 1 bias",
                   "",
                   "Conv",
                   {rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3}), rnd({5})},
                   {t({2, 5, 8, 8})},
                   {pads1}});
  cases.push_back({"Conv stride 2 dilation 2 groups 2",
                   "",
                   "Conv",
                   {rnd({2, 4, 9, 9}), rnd({6, 2, 3, 3})},
                   {t({2, 6, 4, 4})},
                   {ints("strides", {2, 2}), ints("dilations", {2, 2}), pads1,
                    integer("group", 2)}});
  cases.push_back({"ConvGrad dX dW dB",
                   kMsDomain.str(),
                   "ConvGrad",
                   {rnd({2, 5, 8, 8}), rnd({2, 3, 8, 8}), rnd({5, 3, 3, 3})},
                   {t({2, 3, 8, 8}), t({5, 3, 3, 3}), t({5})},
                   {pads1}});
  std::vector<NamedAttribute> pool = {ints("kernel_shape", {3, 3}),
                                      ints("strides", {2, 2}), pads1};
  TensorData poolX = rnd({2, 3, 9, 9});
  cases.push_back({"MaxPool 3x3 stride 2",
                   "",
                   "MaxPool",
                   {poolX},
                   {t({2, 3, 5, 5}), i64({2, 3, 5, 5})},
                   pool,
                   Agreement::Exact});
  cases.push_back(
      {"MaxPoolGrad",
       "",
       "MaxPoolGrad",
       {rnd({2, 3, 5, 5}), maxPoolIndices(poolX, {2, 3, 5, 5}, pool)},
       {t({2, 3, 9, 9})},
       pool,
       Agreement::Rounded,
       false,
       /*eagerSlack=*/4 * ulpNear(dtype, 4.0)});
  std::vector<NamedAttribute> average = {
      ints("kernel_shape", {3, 2}), ints("strides", {2, 2}),
      ints("pads", {1, 0, 0, 1}), integer("ceil_mode", 1),
      integer("count_include_pad", 1)};
  cases.push_back({"AveragePool ceil_mode count_include_pad",
                   "",
                   "AveragePool",
                   {rnd({2, 3, 8, 7})},
                   {t({2, 3, 4, 4})},
                   average,
                   Agreement::Exact});
  cases.push_back({"AveragePoolGrad",
                   "",
                   "AveragePoolGrad",
                   {rnd({2, 3, 4, 4})},
                   {t({2, 3, 8, 7})},
                   average,
                   Agreement::Exact});
  cases.push_back({"GlobalAveragePool",
                   "",
                   "GlobalAveragePool",
                   {rnd({2, 5, 6, 7})},
                   {t({2, 5, 1, 1})},
                   {}});
  cases.push_back({"GlobalMaxPool",
                   "",
                   "GlobalMaxPool",
                   {rnd({2, 5, 6, 7})},
                   {t({2, 5, 1, 1})},
                   {},
                   Agreement::Exact});
  cases.push_back({"BatchNormalization inference, fp32 statistics",
                   "",
                   "BatchNormalization",
                   {rnd({4, 6, 5, 5}), f32Rnd({6}), f32Rnd({6}), f32Rnd({6}),
                    f32Rnd({6}, 0.5f, 2)},
                   {t({4, 6, 5, 5})},
                   {}});
  cases.push_back({"BatchNormInternal training, fp32 statistics",
                   kMsDomain.str(),
                   "BatchNormInternal",
                   {rnd({4, 6, 5, 5}, -2, 3), f32Rnd({6}), f32Rnd({6}),
                    f32Rnd({6}), f32Rnd({6}, 0.5f, 2)},
                   {t({4, 6, 5, 5}), f32({6}), f32({6}), f32({6}), f32({6})},
                   {}});
  cases.push_back({"BatchNormalizationGrad, fp32 statistics",
                   kMsDomain.str(),
                   "BatchNormalizationGrad",
                   {rnd({4, 6, 5, 5}), rnd({4, 6, 5, 5}), f32Rnd({6}),
                    f32Rnd({6}), f32Rnd({6}, 0.5f, 2)},
                   {t({4, 6, 5, 5}), f32({6}), f32({6})},
                   {{"epsilon", Attribute::getFloat(1e-5f)}}});
  std::vector<int64_t> tokens = {3, 0, 7, 3, -1, 5};
  cases.push_back(
      {"GatherGrad repeated and negative indices",
       kMsDomain.str(),
       "GatherGrad",
       {TensorData::fromValues<int64_t>(DType::I64, {2},
                                        std::vector<int64_t>{10, 4}),
        TensorData::fromValues<int64_t>(DType::I64, {6}, tokens), rnd({6, 4})},
       {t({10, 4})},
       {},
       Agreement::Rounded,
       false,
       /*eagerSlack=*/2 * ulpNear(dtype, 2.0)});
  // Asymmetric pads, planned only: in this storage and in fp32.
  for (DType padType : {dtype, DType::F32}) {
    auto padRnd = [&](std::vector<int64_t> shape) {
      return randomTensor(padType, shape, seed++, -1, 1);
    };
    auto p = [&](std::vector<int64_t> shape) {
      return TensorType::get(padType, shape);
    };
    std::string suffix = padType == DType::F32 ? " (f32)" : "";
    cases.push_back({"Conv SAME_UPPER even kernel bias" + suffix,
                     "",
                     "Conv",
                     {padRnd({2, 3, 7, 6}), padRnd({4, 3, 2, 2}), padRnd({4})},
                     {p({2, 4, 7, 6})},
                     {text("auto_pad", "SAME_UPPER")},
                     Agreement::Rounded,
                     true});
    cases.push_back({"Conv pads {2, 0, 0, 1} groups 2" + suffix,
                     "",
                     "Conv",
                     {padRnd({2, 4, 5, 6}), padRnd({4, 2, 3, 2})},
                     {p({2, 4, 5, 6})},
                     {ints("pads", {2, 0, 0, 1}), integer("group", 2)},
                     Agreement::Rounded,
                     true});
    cases.push_back(
        {"ConvGrad SAME_LOWER stride 2" + suffix,
         kMsDomain.str(),
         "ConvGrad",
         {padRnd({1, 3, 4, 4}), padRnd({1, 2, 8, 8}), padRnd({3, 2, 3, 3})},
         {p({1, 2, 8, 8}), p({3, 2, 3, 3}), p({3})},
         {text("auto_pad", "SAME_LOWER"), ints("strides", {2, 2})},
         Agreement::Rounded,
         true});
    cases.push_back({"ConvGrad 1-D pads {2, 1}, dX only" + suffix,
                     kMsDomain.str(),
                     "ConvGrad",
                     {padRnd({2, 2, 9}), padRnd({2, 3, 9}), padRnd({2, 3, 4})},
                     {p({2, 3, 9}), TensorType(), TensorType()},
                     {ints("pads", {2, 1})},
                     Agreement::Rounded,
                     true});
  }
  return cases;
}

} // namespace

TEST(CudaCnnAmpParityTest, CasesRunOnTheCpuBackendAndPlanForCuda) {
  // The harness, the cases and their CUDA plans, in every build.
  for (DType dtype : {DType::F16, DType::BF16})
    for (const OpCase &c : ampCases(dtype)) {
      SCOPED_TRACE(c.what + (dtype == DType::F16 ? " f16" : " bf16"));
      auto results = test::runOpCase(c, /*onCuda=*/false);
      ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
      ASSERT_EQ(results->size(),
                static_cast<size_t>(
                    llvm::count_if(c.results, [](const TensorType &type) {
                      return type.getDType() != DType::Undefined;
                    })));
      std::unique_ptr<Module> module = test::buildOpModule(c);
      ASSERT_FALSE(bool(test::planForCuda(*module)));
      const Node &node = *module->getGraph().getNodes().begin();
      uint64_t reserved = 0;
      auto it = module->plan.workspaces.find(&node);
      if (it != module->plan.workspaces.end())
        reserved = it->second.size;
      EXPECT_EQ(reserved, getCudaKernelWorkspaceBytes(node));
      if (c.plannedOnly) {
        EXPECT_GT(reserved, 0u);
      }
    }
}

TEST(CudaCnnAmpParityTest, CnnOpsMatchTheCpuBackendIn16BitStorage) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  if (!isCudnnBuilt())
    GTEST_SKIP() << "this machine has no cuDNN (no cudnn.h when configured)";
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype == DType::F16 ? "f16" : "bf16");
    test::expectCudaParity(ampCases(dtype),
                           {AllocationMode::Planned, AllocationMode::Eager});
  }
}

TEST(CudaCnnAmpParityTest, AsymmetricPadsNeedThePlannedWorkspace) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  if (!isCudnnBuilt())
    GTEST_SKIP() << "this machine has no cuDNN (no cudnn.h when configured)";
  // An eager run has no slice to pad into: a clear error naming the node.
  for (const OpCase &c : ampCases(DType::F16)) {
    if (!c.plannedOnly)
      continue;
    SCOPED_TRACE(c.what);
    auto cuda = test::runOpCase(c, /*onCuda=*/true, AllocationMode::Eager);
    ASSERT_FALSE(bool(cuda));
    std::string message = llvm::toString(cuda.takeError());
    EXPECT_NE(message.find("planned workspace"), std::string::npos) << message;
    EXPECT_NE(message.find(c.op), std::string::npos) << message;
  }
}
