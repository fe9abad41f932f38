//===- CpuExecutorTest.cpp - Unit tests of the CPU Executable -------------===//
//
// The CPU executor's contract: eager and planned placement compute the same
// bits (also under a plan that reuses arena slices, which a test-local
// first-fit planner makes), planned mode with a reusing plan peaks no higher
// than eager mode, the arena is exactly the plan's, and gradient
// accumulation over two
// micro-steps of one batch gives twice the one-step gradient. Runs on a
// small text-IR training graph (two Gemm layers, a Reshape view pair and
// ONNX Runtime's accumulation pattern) and on testdata/mlp.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/CpuKernel.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <map>

using namespace gmopt;

namespace {

/// A two-layer classifier in ONNX Runtime's training-graph shape, with a
/// Reshape pair (views) between the layers.
constexpr const char *kSmallGraph = R"(
module attributes {ir_version = 8, opsets = {"" = 17, "com.microsoft" = 1}} {
  graph @two_layer(%input: f32[4,6], %labels: i64[4], %w1: f32[5,6], %b1: f32[5], %w2: f32[3,5], %b2: f32[3], %w1_grad.accumulation.buffer: f32[5,6], %b1_grad.accumulation.buffer: f32[5], %w2_grad.accumulation.buffer: f32[3,5], %b2_grad.accumulation.buffer: f32[3], %lazy_reset_grad: bool[1]) {
    %loss_grad = constant f32[] dense<1.0>
    %axes = constant i64[1] dense<[0]>
    %flat_shape = constant i64[1] dense<[20]>
    %back_shape = constant i64[2] dense<[4, 5]>
    %h = Gemm(%input, %w1, %b1) {transB = 1} : f32[4,5]
    %flat = Reshape(%h, %flat_shape) : f32[20]
    %h2 = Reshape(%flat, %back_shape) : f32[4,5]
    %r = Relu(%h2) : f32[4,5]
    %logits = Gemm(%r, %w2, %b2) {transB = 1} : f32[4,3]
    %loss, %log_prob = com.microsoft.SoftmaxCrossEntropyLossInternal(%logits, %labels, _, _) {reduction = "mean"} : (f32[], f32[4,3])
    %logits_grad = com.microsoft.SoftmaxCrossEntropyLossInternalGrad(%loss_grad, %log_prob, %labels, _, _) {reduction = "mean"} : f32[4,3]
    %w2_grad = Gemm(%logits_grad, %r) {transA = 1} : f32[3,5]
    %b2_grad = ReduceSum(%logits_grad, %axes) {keepdims = 0} : f32[3]
    %r_grad = Gemm(%logits_grad, %w2) : f32[4,5]
    %h_grad = com.microsoft.ReluGrad(%r_grad, %r) : f32[4,5]
    %w1_grad = Gemm(%h_grad, %input) {transA = 1} : f32[5,6]
    %b1_grad = ReduceSum(%h_grad, %axes) {keepdims = 0} : f32[5]
    %w1_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%w1_grad.accumulation.buffer, %w1_grad, %lazy_reset_grad) : bool[1]
    %b1_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%b1_grad.accumulation.buffer, %b1_grad, %lazy_reset_grad) : bool[1]
    %w2_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%w2_grad.accumulation.buffer, %w2_grad, %lazy_reset_grad) : bool[1]
    %b2_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%b2_grad.accumulation.buffer, %b2_grad, %lazy_reset_grad) : bool[1]
    return %loss, %w1_grad.accumulation.out, %b1_grad.accumulation.out, %w2_grad.accumulation.out, %b2_grad.accumulation.out
  }
}
)";

std::unique_ptr<Module> parseSmallGraph() {
  auto parsed = parseModule(kSmallGraph, "two_layer.gmir");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (!parsed)
    return nullptr;
  inferTrainingSignature(**parsed);
  return std::move(*parsed);
}

/// testdata/mlp imported with batch=8 and canonicalized, plus its test data.
struct MlpFixture {
  std::unique_ptr<Module> module;
  TestDataSet data;
};

std::optional<MlpFixture> loadMlp() {
  std::string dir = gmopt::testdataDir() + "/mlp";
  auto data = readTestDataSet(dir + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(dir + "/training_model.onnx", {{"batch", 8}},
                                 &*data, /*wantOriginal=*/false);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return MlpFixture{std::move(model->module), std::move(*data)};
}

/// testdata/mlp and cnn compiled with the default pipeline (plan-buffers'
/// plan, in-place aliases included).
std::optional<MlpFixture> loadCompiled(llvm::StringRef name) {
  std::string dir = (llvm::Twine(gmopt::testdataDir()) + "/" + name).str();
  auto data = readTestDataSet(dir + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(dir + "/training_model.onnx", {}, &*data,
                                 /*wantOriginal=*/false, kDefaultPipeline);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return MlpFixture{std::move(model->module), std::move(*data)};
}

/// Every graph input of \p module bound from \p data (or seeded values).
std::vector<BoundInput> inputsFor(const Module &module,
                                  const TestDataSet *data) {
  InputSources sources;
  sources.testData = data;
  sources.seed = 7;
  auto bound = bindInputs(module, sources);
  EXPECT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  return bound ? std::move(*bound) : std::vector<BoundInput>();
}

/// A plan that reuses arena bytes: the trivial plan's assignments, with
/// arena slices re-placed largest first at the lowest offset free over
/// their live interval (a test-local stand-in for the plan-buffers pass).
ExecutionPlan makeReusingPlan(const Module &module) {
  auto trivial = makeTrivialPlan(module);
  EXPECT_TRUE(bool(trivial)) << llvm::toString(trivial.takeError());
  ExecutionPlan plan = std::move(*trivial);
  std::vector<std::pair<const Value *, BufferAssignment *>> slices;
  for (auto &[value, assignment] : plan.buffers)
    if (assignment.kind == StorageKind::Arena)
      slices.push_back({value, &assignment});
  llvm::sort(slices, [](const auto &a, const auto &b) {
    uint64_t sizeA = alignBuffer(a.second->size),
             sizeB = alignBuffer(b.second->size);
    if (sizeA != sizeB)
      return sizeA > sizeB;
    return a.second->firstStep < b.second->firstStep;
  });
  std::vector<const BufferAssignment *> placed;
  uint64_t arena = 0;
  for (auto &[value, assignment] : slices) {
    uint64_t size = alignBuffer(assignment->size);
    uint64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const BufferAssignment *other : placed) {
        bool overlapInTime = other->firstStep <= assignment->lastStep &&
                             assignment->firstStep <= other->lastStep;
        bool overlapInSpace = other->offset < offset + size &&
                              offset < other->offset + alignBuffer(other->size);
        if (overlapInTime && overlapInSpace) {
          offset = other->offset + alignBuffer(other->size);
          moved = true;
        }
      }
    }
    assignment->offset = offset;
    arena = std::max(arena, offset + size);
    placed.push_back(assignment);
  }
  plan.arenaBytes = arena;
  plan.figures.arenaBytes = arena;
  EXPECT_FALSE(bool(plan.validate(module)));
  return plan;
}

struct StepOutcome {
  TensorData loss;
  std::map<std::string, TensorData> gradients;
  MemoryReport memory;
  uint64_t arenaBytes = 0;
};

/// Prepares \p module in \p mode, runs one step on \p inputs and reads the
/// loss and every gradient.
StepOutcome runOneStep(const Module &module, llvm::ArrayRef<BoundInput> inputs,
                       AllocationMode mode, unsigned threads = 1) {
  ExecutorOptions options;
  options.mode = mode;
  options.threads = threads;
  StepOutcome outcome;
  auto exe = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  if (!exe)
    return outcome;
  for (const BoundInput &binding : inputs)
    EXPECT_FALSE(bool((*exe)->setInput(binding.input, binding.data)));
  llvm::Error err = (*exe)->runStep(0);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  auto loss = (*exe)->readValue(module.getSignature().getLoss());
  EXPECT_TRUE(bool(loss));
  if (loss)
    outcome.loss = *loss;
  for (const ParamInfo &param : module.getSignature().getParams()) {
    if (!param.trainable)
      continue;
    auto gradient = (*exe)->readGradient(param);
    EXPECT_TRUE(bool(gradient)) << llvm::toString(gradient.takeError());
    if (gradient)
      outcome.gradients[param.param->getName().str()] = *gradient;
  }
  outcome.memory = (*exe)->getMemoryReport();
  outcome.arenaBytes = (*exe)->getArenaBytes();
  return outcome;
}

void expectBitwiseEqual(const StepOutcome &a, const StepOutcome &b) {
  EXPECT_TRUE(a.loss == b.loss);
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (const auto &[name, gradient] : a.gradients) {
    auto it = b.gradients.find(name);
    ASSERT_NE(it, b.gradients.end()) << name;
    EXPECT_TRUE(gradient == it->second) << "gradient of " << name << " differs";
  }
}

std::vector<float> floats(const TensorData &data) {
  std::vector<float> values(data.getNumElements());
  std::memcpy(values.data(), data.getBytes().data(),
              values.size() * sizeof(float));
  return values;
}

uint64_t persistentBytes(const Module &module) {
  uint64_t total = 0;
  const Graph &graph = module.getGraph();
  for (const auto &input : graph.getInputs())
    total += alignBuffer(input->getType().getSizeInBytes());
  for (const auto &init : graph.getInitializers())
    total += alignBuffer(init->getType().getSizeInBytes());
  for (Value *output : graph.getOutputs())
    if (output->isNodeResult())
      total += alignBuffer(output->getType().getSizeInBytes());
  return total;
}

//===----------------------------------------------------------------------===//
// Eager vs planned
//===----------------------------------------------------------------------===//

TEST(CpuExecutorTest, EagerAndPlannedAgreeBitwiseOnSmallGraph) {
  std::unique_ptr<Module> module = parseSmallGraph();
  ASSERT_TRUE(module);
  ASSERT_EQ(module->getSignature().numTrainable(), 4u);
  std::vector<BoundInput> inputs = inputsFor(*module, nullptr);
  StepOutcome eager = runOneStep(*module, inputs, AllocationMode::Eager);
  StepOutcome planned = runOneStep(*module, inputs, AllocationMode::Planned);
  EXPECT_GT(floats(eager.loss)[0], 0.0f);
  expectBitwiseEqual(eager, planned);

  module->plan = makeReusingPlan(*module);
  StepOutcome reused = runOneStep(*module, inputs, AllocationMode::Planned);
  expectBitwiseEqual(eager, reused);
}

TEST(CpuExecutorTest, EagerAndPlannedAgreeBitwiseOnMlp) {
  std::optional<MlpFixture> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  std::vector<BoundInput> inputs = inputsFor(*mlp->module, &mlp->data);
  StepOutcome eager = runOneStep(*mlp->module, inputs, AllocationMode::Eager);
  StepOutcome planned =
      runOneStep(*mlp->module, inputs, AllocationMode::Planned);
  expectBitwiseEqual(eager, planned);
  mlp->module->plan = makeReusingPlan(*mlp->module);
  StepOutcome reused =
      runOneStep(*mlp->module, inputs, AllocationMode::Planned);
  expectBitwiseEqual(eager, reused);
}

TEST(CpuExecutorTest, DefaultPipelinePlansRunExactly) {
  for (const char *name : {"mlp", "cnn"}) {
    std::optional<MlpFixture> compiled = loadCompiled(name);
    ASSERT_TRUE(compiled);
    const Module &module = *compiled->module;
    ASSERT_FALSE(module.plan.empty()) << name << ": plan-buffers made no plan";
    std::vector<BoundInput> inputs = inputsFor(module, &compiled->data);
    StepOutcome eager = runOneStep(module, inputs, AllocationMode::Eager);
    StepOutcome planned = runOneStep(module, inputs, AllocationMode::Planned);
    expectBitwiseEqual(eager, planned);
    EXPECT_EQ(planned.arenaBytes, module.plan.arenaBytes) << name;
    // Planned and measured agree: the plan reserves every kernel's scratch
    // (gmopt-run plans with the CPU workspace model).
    EXPECT_FALSE(module.plan.workspaces.empty()) << name;
    EXPECT_EQ(planned.memory.peakBytes, module.plan.figures.plannedBytes())
        << name;
  }
}

TEST(CpuExecutorTest, ResultsDoNotDependOnTheThreadCount) {
  // CpuKernel.h promises it; OpenBLAS's GEMM must keep it too.
  std::optional<MlpFixture> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  std::vector<BoundInput> inputs = inputsFor(*mlp->module, &mlp->data);
  StepOutcome one =
      runOneStep(*mlp->module, inputs, AllocationMode::Planned, 1);
  StepOutcome two =
      runOneStep(*mlp->module, inputs, AllocationMode::Planned, 2);
  expectBitwiseEqual(one, two);
}

TEST(CpuExecutorTest, PlannedPeakWithReuseIsNotAboveEager) {
  std::unique_ptr<Module> small = parseSmallGraph();
  ASSERT_TRUE(small);
  std::optional<MlpFixture> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  for (Module *module : {small.get(), mlp->module.get()}) {
    std::vector<BoundInput> inputs =
        inputsFor(*module, module == small.get() ? nullptr : &mlp->data);
    StepOutcome eager = runOneStep(*module, inputs, AllocationMode::Eager);
    module->plan = makeReusingPlan(*module);
    StepOutcome planned = runOneStep(*module, inputs, AllocationMode::Planned);
    // Kernel scratch (Workspace) is not part of the plan: it comes on top of
    // the whole arena in planned mode but only of the values live at that
    // moment in eager mode. Everything the plan places peaks no higher.
    EXPECT_LE(planned.memory.peakBytes -
                  planned.memory.atPeak(MemoryCategory::Workspace),
              eager.memory.peakBytes)
        << module->getGraph().getName().str();
    // The reusing plan reaches the live-byte bound on these graphs.
    EXPECT_EQ(module->plan.arenaBytes,
              makeTrivialPlan(*module)->figures.lowerBoundBytes);
    // The trivial plan (no reuse) holds every transient value at once.
    module->plan.clear();
    StepOutcome trivial = runOneStep(*module, inputs, AllocationMode::Planned);
    EXPECT_GE(trivial.memory.peakBytes, planned.memory.peakBytes);
  }
}

TEST(CpuExecutorTest, ArenaIsExactlyThePlans) {
  std::optional<MlpFixture> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  Module &module = *mlp->module;
  std::vector<BoundInput> inputs = inputsFor(module, &mlp->data);
  for (bool reuse : {false, true}) {
    module.plan.clear();
    if (reuse)
      module.plan = makeReusingPlan(module);
    // The executor's own trivial plan reserves the kernels' scratch.
    auto trivial = makeTrivialPlan(module, cpu::getCpuKernelWorkspaceBytes);
    ASSERT_TRUE(bool(trivial));
    uint64_t planArena = reuse ? module.plan.arenaBytes : trivial->arenaBytes;
    StepOutcome planned = runOneStep(module, inputs, AllocationMode::Planned);
    EXPECT_EQ(planned.arenaBytes, planArena);
    uint64_t planned_total = persistentBytes(module) + planArena;
    if (reuse) {
      // That plan has no workspace slices: kernel scratch comes on top.
      EXPECT_GE(planned.memory.peakBytes, planned_total);
      EXPECT_LE(planned.memory.peakBytes,
                planned_total +
                    planned.memory.atPeak(MemoryCategory::Workspace) +
                    planned.memory.atPeak(MemoryCategory::Temporaries));
    } else {
      EXPECT_FALSE(trivial->workspaces.empty());
      EXPECT_EQ(planned.memory.peakBytes, planned_total);
    }
    // After the step only the arena and persistent blocks remain.
    EXPECT_EQ(planned.memory.currentBytes, planned_total);
  }
}

TEST(CpuExecutorTest, EagerModeFreesEveryTransientValue) {
  std::unique_ptr<Module> module = parseSmallGraph();
  ASSERT_TRUE(module);
  StepOutcome eager =
      runOneStep(*module, inputsFor(*module, nullptr), AllocationMode::Eager);
  EXPECT_EQ(eager.arenaBytes, 0u);
  EXPECT_EQ(eager.memory.currentBytes, persistentBytes(*module));
  EXPECT_GT(eager.memory.peakBytes, eager.memory.currentBytes);
}

//===----------------------------------------------------------------------===//
// Accumulation
//===----------------------------------------------------------------------===//

class AccumulatorTest : public ::testing::TestWithParam<AllocationMode> {
protected:
  void SetUp() override {
    module = parseSmallGraph();
    ASSERT_TRUE(module);
    ExecutorOptions options;
    options.mode = GetParam();
    options.threads = 1;
    auto prepared = prepareCpuExecutable(*module, options);
    ASSERT_TRUE(bool(prepared)) << llvm::toString(prepared.takeError());
    exe = std::move(*prepared);
    for (const BoundInput &binding : inputsFor(*module, nullptr))
      ASSERT_FALSE(bool(exe->setInput(binding.input, binding.data)));
  }

  std::vector<float> read(const Value *value) {
    auto data = exe->readValue(value);
    EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
    return data ? floats(*data) : std::vector<float>();
  }
  std::vector<float> gradient(const ParamInfo &param) {
    auto data = exe->readGradient(param);
    EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
    return data ? floats(*data) : std::vector<float>();
  }
  void setLazyReset(bool reset) {
    const Value *lazy = module->getSignature().getLazyResetGrad();
    ASSERT_TRUE(lazy);
    std::vector<uint8_t> bytes(lazy->getType().getSizeInBytes(), reset ? 1 : 0);
    ASSERT_FALSE(bool(exe->setInput(lazy, TensorData(lazy->getType(), bytes))));
  }
  void step(uint64_t index) {
    llvm::Error err = exe->runStep(index);
    ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }

  std::unique_ptr<Module> module;
  std::unique_ptr<Executable> exe;
};

TEST_P(AccumulatorTest, AccumulatingTwoMicroStepsDoublesTheGradient) {
  setLazyReset(true);
  step(0);
  std::vector<std::vector<float>> once;
  for (const ParamInfo &param : module->getSignature().getParams())
    once.push_back(gradient(param));
  setLazyReset(false);
  step(1);
  for (size_t p = 0; p != once.size(); ++p) {
    std::vector<float> twice = gradient(module->getSignature().getParams()[p]);
    ASSERT_EQ(twice.size(), once[p].size());
    for (size_t i = 0; i != twice.size(); ++i)
      EXPECT_EQ(twice[i], 2 * once[p][i]);
  }
  // A new reset overwrites the sum with one step's gradient again.
  setLazyReset(true);
  step(2);
  for (size_t p = 0; p != once.size(); ++p)
    EXPECT_EQ(gradient(module->getSignature().getParams()[p]), once[p]);
}

INSTANTIATE_TEST_SUITE_P(Modes, AccumulatorTest,
                         ::testing::Values(AllocationMode::Eager,
                                           AllocationMode::Planned),
                         [](const auto &info) {
                           return allocationModeName(info.param).str();
                         });

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(CpuExecutorTest, SetInputRejectsWrongTypes) {
  std::unique_ptr<Module> module = parseSmallGraph();
  ASSERT_TRUE(module);
  auto exe = prepareCpuExecutable(*module, ExecutorOptions());
  ASSERT_TRUE(bool(exe));
  const Value *input = module->getGraph().getInputs()[0].get();
  TensorData wrong =
      TensorData::fromValues<float>(DType::F32, {2}, {1.0f, 2.0f});
  llvm::Error err = (*exe)->setInput(input, wrong);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("expects f32[4,6]"),
            std::string::npos);
}

TEST(CpuExecutorTest, UnboundDimensionsAreAnError) {
  auto parsed = parseModule(R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[batch,4]) {
    %y = Relu(%x) : f32[batch,4]
    return %y
  }
}
)",
                            "g.gmir");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  auto exe = prepareCpuExecutable(**parsed, ExecutorOptions());
  ASSERT_FALSE(bool(exe));
  EXPECT_NE(llvm::toString(exe.takeError()).find("--dim"), std::string::npos);
}

} // namespace
