//===- PlanInterpreterTest.cpp - Unit tests of the shared plan interpreter ===//
//
// The plan interpreter's contract with a Device: every byte of a step comes
// from the device's allocate (the interpreter counts it, the device only
// allocates), values cross only through the device's copies, every node
// runs through runNode with the plan's addresses and workspace slices and
// the kernel the device prepared for it, once per instruction, before the
// first step (a node without a kernel, or whose arity its schema refuses,
// fails preparation), and a plan made for another kernel workspace model is
// refused with a clear error. A recording device that forwards to the CPU
// device checks this on testdata/mlp compiled with the default pipeline, and on
// a hand-made plan.
//
//===----------------------------------------------------------------------===//

#include "backend/PlanInterpreter.h"
#include "backend/Device.h"
#include "backend/Executor.h"
#include "backend/cpu/CpuKernel.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/serialization/TextIR.h"
#include "passes/DefaultPipeline.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace gmopt;

namespace {

/// Forwards to the CPU device and records what the interpreter asks for.
class RecordingDevice final : public Device {
public:
  struct Log {
    uint64_t allocations = 0;
    uint64_t liveBlocks = 0;
    uint64_t allocatedBytes = 0;
    uint64_t copiesToDevice = 0;
    uint64_t copiesToHost = 0;
    uint64_t launches = 0;
    uint64_t plannedLaunches = 0;
    uint64_t launchesWithWorkspace = 0;
    /// Every launch address lies inside a block the device allocated.
    bool addressesInsideBlocks = true;
    /// Kernels prepared, and the nodes they were prepared for.
    uint64_t prepares = 0;
    llvm::DenseSet<const Node *> preparedNodes;
    /// Every launch ran a kernel prepared for its node.
    bool launchesRunPreparedKernels = true;
  };

  explicit RecordingDevice(Log &log, std::string workspaceModel = "cpu")
      : log(log), workspaceModel(std::move(workspaceModel)),
        inner(createCpuDevice()) {}

  llvm::StringRef getName() const override { return "recording"; }
  llvm::StringRef getWorkspaceModelName() const override {
    return workspaceModel;
  }
  llvm::Error initialize(MemoryCounter &counter,
                         const ExecutorOptions &options) override {
    return inner->initialize(counter, options);
  }
  llvm::Expected<std::unique_ptr<PreparedKernel>>
  prepare(const Node &node, const KernelPreparation &preparation) override {
    ++log.prepares;
    log.preparedNodes.insert(&node);
    auto kernel = inner->prepare(node, preparation);
    if (kernel)
      prepared.insert(kernel->get());
    return kernel;
  }
  llvm::Expected<void *> allocate(uint64_t bytes) override {
    auto address = inner->allocate(bytes);
    if (address) {
      ++log.allocations;
      ++log.liveBlocks;
      log.allocatedBytes += bytes;
      blocks[*address] = bytes;
    }
    return address;
  }
  void deallocate(void *address) override {
    if (address) {
      --log.liveBlocks;
      blocks.erase(address);
    }
    inner->deallocate(address);
  }
  llvm::Error copyToDevice(void *target, const void *source,
                           uint64_t bytes) override {
    ++log.copiesToDevice;
    checkInside(target, bytes);
    return inner->copyToDevice(target, source, bytes);
  }
  llvm::Error copyToHost(void *target, const void *source,
                         uint64_t bytes) const override {
    ++log.copiesToHost;
    return inner->copyToHost(target, source, bytes);
  }
  llvm::Error fillZero(void *target, uint64_t bytes) override {
    checkInside(target, bytes);
    return inner->fillZero(target, bytes);
  }
  llvm::Error runNode(const PreparedKernel &kernel,
                      const NodeLaunch &launch) override {
    ++log.launches;
    if (!prepared.count(&kernel) || &kernel.getNode() != launch.node)
      log.launchesRunPreparedKernels = false;
    log.plannedLaunches += launch.planned;
    log.launchesWithWorkspace += launch.workspaceBytes != 0;
    for (size_t i = 0; i != launch.operands.size(); ++i)
      if (const Value *operand = launch.node->getOperand(i))
        checkInside(launch.operands[i], operand->getType().getSizeInBytes());
    for (size_t i = 0; i != launch.results.size(); ++i)
      if (const Value *result = launch.node->getResult(i))
        checkInside(launch.results[i], result->getType().getSizeInBytes());
    if (launch.workspace)
      checkInside(launch.workspace, launch.workspaceBytes);
    return inner->runNode(kernel, launch);
  }
  uint64_t getUnplannedScratchBytes() const override {
    return inner->getUnplannedScratchBytes();
  }

private:
  void checkInside(const void *address, uint64_t bytes) const {
    const auto *begin = static_cast<const uint8_t *>(address);
    for (const auto &[base, size] : blocks) {
      const auto *blockBegin = static_cast<const uint8_t *>(base);
      if (begin >= blockBegin && begin + bytes <= blockBegin + size)
        return;
    }
    if (bytes)
      log.addressesInsideBlocks = false;
  }

  Log &log;
  std::string workspaceModel;
  /// The kernels the inner device prepared.
  llvm::DenseSet<const PreparedKernel *> prepared;
  std::unique_ptr<Device> inner;
  llvm::DenseMap<const void *, uint64_t> blocks;
};

struct Compiled {
  RunnableModel model;
  TestDataSet data;
};

std::optional<Compiled> compileMlp() {
  std::string dir = gmopt::testdataDir() + "/mlp";
  auto data = readTestDataSet(dir + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  auto model = loadRunnableModel(dir + "/training_model.onnx", {}, &*data,
                                 /*wantOriginal=*/false, kDefaultPipeline);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return Compiled{std::move(*model), std::move(*data)};
}

void bindAll(Executable &exe, const Module &module, const TestDataSet &data) {
  InputSources sources;
  sources.testData = &data;
  auto bound = bindInputs(module, sources);
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  for (const BoundInput &binding : *bound)
    ASSERT_FALSE(bool(exe.setInput(binding.input, binding.data)));
}

TEST(PlanInterpreterTest, EveryByteComesFromTheDeviceAndIsCounted) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  ASSERT_FALSE(module.plan.empty());
  EXPECT_EQ(module.plan.workspaceModel, cpu::kCpuWorkspaceModelName);

  RecordingDevice::Log log;
  ExecutorOptions options;
  options.threads = 1;
  {
    auto exe = createPlanInterpreter(
        module, options, std::make_unique<RecordingDevice>(log), nullptr);
    ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
    bindAll(**exe, module, mlp->data);
    ASSERT_FALSE(bool((*exe)->runStep(0)));

    // One block per persistent value plus the arena; nothing in the step.
    size_t persistent = 0;
    for (const auto &[value, assignment] : module.plan.buffers)
      persistent += assignment.kind == StorageKind::Persistent ||
                    assignment.kind == StorageKind::Constant;
    EXPECT_EQ(log.allocations, persistent + 1);
    EXPECT_TRUE(log.addressesInsideBlocks);
    EXPECT_EQ(log.launches, log.plannedLaunches);
    EXPECT_GT(log.launchesWithWorkspace, 0u);
    EXPECT_GT(log.copiesToDevice, 0u);

    // Counted = planned, byte for byte, and no scratch outside the plan.
    MemoryReport memory = (*exe)->getMemoryReport();
    EXPECT_EQ(memory.peakBytes, module.plan.figures.plannedBytes());
    EXPECT_EQ((*exe)->getUnplannedScratchBytes(), 0u);

    auto loss = (*exe)->readValue(module.getSignature().getLoss());
    ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
    EXPECT_GT(log.copiesToHost, 0u);
    EXPECT_TRUE(std::isfinite(loss->getFloatElement(0)));
  }
  EXPECT_EQ(log.liveBlocks, 0u) << "the interpreter frees every block";
}

TEST(PlanInterpreterTest, EagerModeAllocatesPerTensorThroughTheDevice) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  RecordingDevice::Log log;
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto exe = createPlanInterpreter(
      module, options, std::make_unique<RecordingDevice>(log), nullptr);
  ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  bindAll(**exe, module, mlp->data);
  uint64_t afterPrepare = log.allocations;
  uint64_t liveAfterPrepare = log.liveBlocks;
  ASSERT_FALSE(bool((*exe)->runStep(0)));
  EXPECT_GT(log.allocations, afterPrepare) << "transients come per step";
  EXPECT_EQ(log.liveBlocks, liveAfterPrepare) << "and are all freed";
  EXPECT_EQ(log.plannedLaunches, 0u);
  EXPECT_EQ((*exe)->getArenaBytes(), 0u);
}

TEST(PlanInterpreterTest, ProfilingKeepsEveryNodeOfTheLastStep) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  for (AllocationMode mode : {AllocationMode::Planned, AllocationMode::Eager}) {
    ExecutorOptions options;
    options.threads = 1;
    options.mode = mode;
    options.profile = true;
    auto exe = prepareCpuExecutable(module, options);
    ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
    bindAll(**exe, module, mlp->data);
    EXPECT_TRUE((*exe)->getLastStepNodeTimings().empty());
    for (uint64_t step : {0, 1})
      ASSERT_FALSE(bool((*exe)->runStep(step)));
    std::vector<NodeTiming> timings = (*exe)->getLastStepNodeTimings();
    ASSERT_EQ(timings.size(), module.getGraph().getNumNodes());
    uint64_t peak = (*exe)->getMemoryReport().peakBytes, highest = 0;
    double previousEnd = 0;
    size_t index = 0;
    for (const Node &node : module.getGraph().getNodes()) {
      const NodeTiming &timing = timings[index++];
      EXPECT_EQ(timing.node, &node);
      EXPECT_GE(timing.startMilliseconds, previousEnd);
      EXPECT_GE(timing.durationMilliseconds, 0);
      previousEnd = timing.startMilliseconds + timing.durationMilliseconds;
      uint64_t live = 0;
      for (uint64_t bytes : timing.liveBytes)
        live += bytes;
      highest = std::max(highest, live);
      // Planned: the arena and the persistent blocks, always.
      if (mode == AllocationMode::Planned) {
        EXPECT_EQ(live, module.plan.figures.plannedBytes());
      }
    }
    EXPECT_LE(previousEnd, (*exe)->getLastStepMilliseconds());
    EXPECT_LE(highest, peak);
    EXPECT_GT(highest, 0u);
  }
  // Without profiling nothing is kept.
  ExecutorOptions plain;
  plain.threads = 1;
  auto exe = prepareCpuExecutable(module, plain);
  ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  bindAll(**exe, module, mlp->data);
  ASSERT_FALSE(bool((*exe)->runStep(0)));
  EXPECT_TRUE((*exe)->getLastStepNodeTimings().empty());
}

TEST(PlanInterpreterTest, RefusesAPlanMadeForOtherKernels) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  RecordingDevice::Log log;
  auto exe = createPlanInterpreter(
      module, ExecutorOptions(),
      std::make_unique<RecordingDevice>(log, "other-kernels"), nullptr);
  ASSERT_FALSE(bool(exe));
  std::string message = llvm::toString(exe.takeError());
  EXPECT_NE(message.find("'cpu' kernel workspace model"), std::string::npos)
      << message;
  EXPECT_NE(message.find("'other-kernels'"), std::string::npos) << message;
  EXPECT_EQ(log.liveBlocks, 0u);
}

TEST(PlanInterpreterTest, APlanWithoutWorkspaceRunsWithUnplannedScratch) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  Module &module = *mlp->model.module;
  auto trivial = makeTrivialPlan(module);
  ASSERT_TRUE(bool(trivial)) << llvm::toString(trivial.takeError());
  EXPECT_EQ(trivial->workspaceModel, kNoWorkspaceModelName);
  module.plan = std::move(*trivial);
  ExecutorOptions options;
  options.threads = 1;
  auto exe = prepareCpuExecutable(module, options);
  ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  bindAll(**exe, module, mlp->data);
  ASSERT_FALSE(bool((*exe)->runStep(0)));
  // mlp's Gemms need no scratch, but its loss kernel does.
  EXPECT_GT((*exe)->getUnplannedScratchBytes(), 0u);
}

/// Runs three steps and checks that every kernel was prepared once, before
/// the first, and that each launch ran its node's prepared kernel.
TEST(PlanInterpreterTest, KernelsArePreparedOncePerInstruction) {
  std::optional<Compiled> mlp = compileMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  for (AllocationMode mode : {AllocationMode::Planned, AllocationMode::Eager}) {
    RecordingDevice::Log log;
    ExecutorOptions options;
    options.mode = mode;
    options.threads = 1;
    auto exe = createPlanInterpreter(
        module, options, std::make_unique<RecordingDevice>(log), nullptr);
    ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
    bindAll(**exe, module, mlp->data);
    uint64_t prepared = log.prepares;
    EXPECT_GT(prepared, 0u);
    EXPECT_EQ(log.preparedNodes.size(), prepared) << "one per instruction";
    for (uint64_t step = 0; step != 3; ++step)
      ASSERT_FALSE(bool((*exe)->runStep(step)));
    EXPECT_EQ(log.prepares, prepared) << "a step prepares nothing";
    EXPECT_EQ(log.launches, 3 * prepared) << "each prepared kernel runs once "
                                             "per step";
    EXPECT_TRUE(log.launchesRunPreparedKernels);
  }
}

constexpr const char *kTwoNodeGraph = R"(
module attributes {ir_version = 8, opsets = {"" = 17}} {
  graph @two_nodes(%x: f32[4]) {
    %y = Relu(%x) : f32[4]
    %z = Neg(%y) : f32[4]
    return %z
  }
}
)";

/// The error of preparing \p module on a recording CPU device (empty when
/// it prepares), with the launches it made.
std::string prepareError(const Module &module, RecordingDevice::Log &log) {
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto exe = createPlanInterpreter(
      module, options, std::make_unique<RecordingDevice>(log), nullptr);
  return exe ? std::string() : llvm::toString(exe.takeError());
}

TEST(PlanInterpreterTest, AnOpWithoutAKernelFailsPreparationNotAStep) {
  auto parsed = parseModule(kTwoNodeGraph, "two_nodes.gmir");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  Graph &graph = (*parsed)->getGraph();
  Node &neg = *std::prev(graph.end());
  Builder builder(graph);
  builder.setInsertionPoint(&neg);
  Value *x = graph.getInputs().front().get();
  builder.create(OpName{"com.example", "NoKernel"}, {x}, {x->getType()}, {},
                 "mystery");
  RecordingDevice::Log log;
  std::string message = prepareError(**parsed, log);
  EXPECT_NE(message.find("no CPU kernel for 'com.example.NoKernel' (node "
                         "mystery)"),
            std::string::npos)
      << message;
  EXPECT_EQ(log.launches, 0u);
  EXPECT_EQ(log.liveBlocks, 0u);
  if (isCudaBackendBuilt()) {
    Node &mystery = *std::prev(neg.getIterator());
    std::string cudaMessage = llvm::toString(checkCudaNode(mystery));
    EXPECT_EQ(cudaMessage.rfind("no CUDA kernel for 'com.example.NoKernel' "
                                "(node mystery)",
                                0),
              0u)
        << cudaMessage;
  }
}

TEST(PlanInterpreterTest, AnArityTheSchemaRefusesFailsPreparation) {
  auto parsed = parseModule(kTwoNodeGraph, "two_nodes.gmir");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  Graph &graph = (*parsed)->getGraph();
  Node &relu = *graph.begin();
  ASSERT_TRUE(relu.isa("", "Relu"));
  relu.setName("relu0");
  Value *x = relu.getOperand(0);
  relu.setOperands({x, x});
  RecordingDevice::Log log;
  std::string message = prepareError(**parsed, log);
  EXPECT_EQ(message, "Relu: its schema takes 1 input, the node has 2 (node "
                     "relu0)");
  EXPECT_EQ(log.launches, 0u);
  // The CUDA kernels read the same schema (their check needs no device).
  if (isCudaBackendBuilt()) {
    EXPECT_EQ(llvm::toString(checkCudaNode(relu)), message);
  }
  // And without the extra operand the same module prepares and runs.
  relu.setOperands({x});
  RecordingDevice::Log good;
  EXPECT_EQ(prepareError(**parsed, good), "");
  EXPECT_EQ(good.prepares, 2u);
}

} // namespace
