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

#include "tests/unit/BackendStep.h"

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

/// Random values in [low, high) stored as \p dtype (f32, f16 or bf16).
TensorData randomTensor(DType dtype, std::vector<int64_t> shape, unsigned seed,
                        float low, float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  if (dtype == DType::F32)
    return TensorData::fromValues<float>(dtype, shape, values);
  std::vector<uint16_t> bits;
  for (float v : values)
    bits.push_back(dtype == DType::F16 ? floatToHalf(v) : floatToBFloat16(v));
  return TensorData::fromValues<uint16_t>(dtype, shape, bits);
}

/// How closely a case's float results must agree.
enum class Agreement { Exact, Rounded };

/// One op on given inputs.
struct OpCase {
  std::string what;
  std::string domain, op;
  std::vector<TensorData> inputs;
  std::vector<TensorType> results;
  std::vector<NamedAttribute> attrs;
  Agreement agreement = Agreement::Rounded;
  /// Needs the planned workspace (asymmetric pads): not run eagerly.
  bool plannedOnly = false;
  /// Added to the tolerance of an eager run: a 16-bit scatter-add without
  /// its planned fp32 accumulator rounds every add.
  double eagerSlack = 0;
};

std::unique_ptr<Module> buildModule(const OpCase &c) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 17;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    operands.push_back(
        graph.addInput(c.inputs[i].getType(), "in" + std::to_string(i)));
  Builder builder(graph);
  Node *node = builder.create(OpName{c.domain, c.op}, operands, c.results,
                              c.attrs, c.op);
  for (unsigned i = 0; i < c.results.size(); ++i)
    if (c.results[i].getDType() == DType::Undefined)
      graph.dropResult(node, i);
  for (Value *result : node->getResults())
    if (result)
      graph.addOutput(result);
  return module;
}

/// Gives \p module the plan a CUDA run gets: every value its own slice and
/// each node the CUDA workspace model's scratch.
llvm::Error planForCuda(Module &module) {
  auto plan = makeTrivialPlan(module, getCudaKernelWorkspaceBytes,
                              kCudaWorkspaceModelName);
  if (!plan)
    return plan.takeError();
  module.plan = std::move(*plan);
  return llvm::Error::success();
}

/// \p c's results on the CUDA backend (\p onCuda; planned or eager per
/// \p mode) or eagerly on the CPU backend.
llvm::Expected<std::vector<TensorData>> runCase(const OpCase &c, bool onCuda,
                                                AllocationMode mode) {
  std::unique_ptr<Module> module = buildModule(c);
  ExecutorOptions options;
  options.mode = onCuda ? mode : AllocationMode::Eager;
  options.threads = 1;
  if (options.mode == AllocationMode::Planned)
    if (llvm::Error err = planForCuda(*module))
      return err;
  return test::runBackendStep(*module, c.inputs, onCuda, options);
}

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
  auto results = runCase(c, /*onCuda=*/false, AllocationMode::Eager);
  EXPECT_TRUE(bool(results)) << llvm::toString(results.takeError());
  return results ? (*results)[1] : TensorData();
}

/// The unit in the last place of \p dtype's numbers near \p magnitude.
double ulpNear(DType dtype, double magnitude) {
  int mantissaBits = dtype == DType::F16 ? 10 : dtype == DType::BF16 ? 7 : 23;
  int exponent = 0;
  std::frexp(magnitude, &exponent);
  return std::ldexp(1.0, exponent - 1 - mantissaBits);
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
                   {}});
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

/// Expects \p actual (CUDA) to agree with \p expected (CPU) as \p c says.
void expectAgreement(const OpCase &c, const std::vector<TensorData> &expected,
                     const std::vector<TensorData> &actual, bool eager) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    const TensorData &e = expected[r], &a = actual[r];
    ASSERT_EQ(e.getNumElements(), a.getNumElements()) << "result " << r;
    DType dtype = e.getType().getDType();
    ASSERT_EQ(dtype, a.getType().getDType()) << "result " << r;
    if (dtype == DType::I64) {
      EXPECT_EQ(a.getIntValues(), e.getIntValues())
          << "result " << r << " (Indices)";
      continue;
    }
    for (uint64_t k = 0; k < e.getNumElements(); ++k) {
      double want = e.getFloatElement(k), got = a.getFloatElement(k);
      if (c.agreement == Agreement::Exact) {
        ASSERT_EQ(got, want) << "result " << r << " element " << k;
        continue;
      }
      // 16-bit: two units in the result's last place (fp32 sums in another
      // order, then rounded) plus two at 1.0, the inputs' scale (cuDNN's
      // transform algorithms, e.g. Winograd, round intermediates).
      double tolerance =
          dtype == DType::F32
              ? 1e-5 + 1e-4 * std::fabs(want)
              : 2 * ulpNear(dtype, std::max(std::fabs(want), std::fabs(got))) +
                    2 * ulpNear(dtype, 1.0);
      if (eager)
        tolerance += c.eagerSlack;
      ASSERT_NEAR(got, want, tolerance) << "result " << r << " element " << k;
    }
  }
}

} // namespace

TEST(CudaCnnAmpParityTest, CasesRunOnTheCpuBackendAndPlanForCuda) {
  // The harness, the cases and their CUDA plans, in every build.
  for (DType dtype : {DType::F16, DType::BF16})
    for (const OpCase &c : ampCases(dtype)) {
      SCOPED_TRACE(c.what + (dtype == DType::F16 ? " f16" : " bf16"));
      auto results = runCase(c, /*onCuda=*/false, AllocationMode::Eager);
      ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
      ASSERT_EQ(results->size(),
                static_cast<size_t>(
                    llvm::count_if(c.results, [](const TensorType &type) {
                      return type.getDType() != DType::Undefined;
                    })));
      std::unique_ptr<Module> module = buildModule(c);
      ASSERT_FALSE(bool(planForCuda(*module)));
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
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device: "
                 << llvm::toString(device.takeError());
  if (!isCudnnBuilt())
    GTEST_SKIP() << "the CUDA backend is built without cuDNN";
  for (DType dtype : {DType::F16, DType::BF16})
    for (const OpCase &c : ampCases(dtype)) {
      auto cpu = runCase(c, /*onCuda=*/false, AllocationMode::Eager);
      ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
      for (AllocationMode mode :
           {AllocationMode::Planned, AllocationMode::Eager}) {
        if (c.plannedOnly && mode == AllocationMode::Eager)
          continue;
        SCOPED_TRACE(c.what + (dtype == DType::F16 ? " f16" : " bf16") +
                     (mode == AllocationMode::Planned ? " planned" : " eager"));
        auto cuda = runCase(c, /*onCuda=*/true, mode);
        ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
        expectAgreement(c, *cpu, *cuda, mode == AllocationMode::Eager);
      }
    }
}

TEST(CudaCnnAmpParityTest, AsymmetricPadsNeedThePlannedWorkspace) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device: "
                 << llvm::toString(device.takeError());
  if (!isCudnnBuilt())
    GTEST_SKIP() << "the CUDA backend is built without cuDNN";
  // An eager run has no slice to pad into: a clear error naming the node.
  for (const OpCase &c : ampCases(DType::F16)) {
    if (!c.plannedOnly)
      continue;
    SCOPED_TRACE(c.what);
    auto cuda = runCase(c, /*onCuda=*/true, AllocationMode::Eager);
    ASSERT_FALSE(bool(cuda));
    std::string message = llvm::toString(cuda.takeError());
    EXPECT_NE(message.find("planned workspace"), std::string::npos) << message;
    EXPECT_NE(message.find(c.op), std::string::npos) << message;
  }
}
