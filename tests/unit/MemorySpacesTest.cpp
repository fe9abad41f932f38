//===- MemorySpacesTest.cpp - Device and host arenas, copy ops end to end -===//
//
// Memory spaces (ir/MemorySpaces.h) through every layer that reads them: a
// three-layer training graph moves one saved activation to host memory
// after its last forward reader and back before its first backward reader
// (gmopt.CopyToHostStart / CopyWait / CopyToDeviceStart / CopyWait, written
// by hand: no pass offloads yet). The planner puts the host value in a host
// arena of its own, the validator checks each space apart and refuses plans
// that put a value in the wrong space, the .gm file keeps the spaces (and
// a file edited to break them is refused on load), and the CPU backend runs
// the copies through the Device's asynchronous copy interface: gradients
// bit-identical to the graph without the copies, a lower device peak, and
// planned equal to measured in both spaces, planned and eager.
//
//===----------------------------------------------------------------------===//

#include "ir/MemorySpaces.h"
#include "backend/Device.h"
#include "backend/Executor.h"
#include "backend/PlanInterpreter.h"
#include "backend/cpu/CpuKernel.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"
#include "ir/gm.pb.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/TextIR.h"
#include "passes/planning/PlanBuffers.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/Runtime.h"

#include "gtest/gtest.h"

#include <functional>
#include <map>
#include <string>

using namespace gmopt;

namespace {

/// A three-layer classifier in ONNX Runtime's training-graph shape. %r, the
/// first layer's activation (f32[256,64], 64 KiB), is saved for the
/// backward pass, which peaks in the top layer's gradients while %r waits.
/// @OUT@ and @IN@ mark where the copies go, @R@ the backward readers of %r.
constexpr const char *kTemplate = R"(
module attributes {ir_version = 8, opsets = {"" = 17, "com.microsoft" = 1, "gmopt" = 1}} {
  graph @three_layer(%input: f32[256,16], %labels: i64[256], %w1: f32[64,16], %b1: f32[64], %w2: f32[128,64], %b2: f32[128], %w3: f32[4,128], %b3: f32[4], %w1_grad.accumulation.buffer: f32[64,16], %b1_grad.accumulation.buffer: f32[64], %w2_grad.accumulation.buffer: f32[128,64], %b2_grad.accumulation.buffer: f32[128], %w3_grad.accumulation.buffer: f32[4,128], %b3_grad.accumulation.buffer: f32[4], %lazy_reset_grad: bool[1]) {
    %loss_grad = constant f32[] dense<1.0>
    %axes = constant i64[1] dense<[0]>
    %h = Gemm(%input, %w1, %b1) {transB = 1} : f32[256,64]
    %r = Relu(%h) : f32[256,64]
    %z = Gemm(%r, %w2, %b2) {transB = 1} : f32[256,128]
@OUT@
    %s = Relu(%z) : f32[256,128]
    %logits = Gemm(%s, %w3, %b3) {transB = 1} : f32[256,4]
    %loss, %log_prob = com.microsoft.SoftmaxCrossEntropyLossInternal(%logits, %labels, _, _) {reduction = "mean"} : (f32[], f32[256,4])
    %logits_grad = com.microsoft.SoftmaxCrossEntropyLossInternalGrad(%loss_grad, %log_prob, %labels, _, _) {reduction = "mean"} : f32[256,4] phase backward
    %w3_grad = Gemm(%logits_grad, %s) {transA = 1} : f32[4,128] phase backward
    %b3_grad = ReduceSum(%logits_grad, %axes) {keepdims = 0} : f32[4] phase backward
    %s_grad = Gemm(%logits_grad, %w3) : f32[256,128] phase backward
    %z_grad = com.microsoft.ReluGrad(%s_grad, %s) : f32[256,128] phase backward
@IN@
    %w2_grad = Gemm(%z_grad, @R@) {transA = 1} : f32[128,64] phase backward
    %b2_grad = ReduceSum(%z_grad, %axes) {keepdims = 0} : f32[128] phase backward
    %r_grad = Gemm(%z_grad, %w2) : f32[256,64] phase backward
    %h_grad = com.microsoft.ReluGrad(%r_grad, @R@) : f32[256,64] phase backward
    %w1_grad = Gemm(%h_grad, %input) {transA = 1} : f32[64,16] phase backward
    %b1_grad = ReduceSum(%h_grad, %axes) {keepdims = 0} : f32[64] phase backward
    %w1_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%w1_grad.accumulation.buffer, %w1_grad, %lazy_reset_grad) : bool[1] phase backward
    %b1_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%b1_grad.accumulation.buffer, %b1_grad, %lazy_reset_grad) : bool[1] phase backward
    %w2_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%w2_grad.accumulation.buffer, %w2_grad, %lazy_reset_grad) : bool[1] phase backward
    %b2_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%b2_grad.accumulation.buffer, %b2_grad, %lazy_reset_grad) : bool[1] phase backward
    %w3_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%w3_grad.accumulation.buffer, %w3_grad, %lazy_reset_grad) : bool[1] phase backward
    %b3_grad.accumulation.out, _ = com.microsoft.InPlaceAccumulatorV2(%b3_grad.accumulation.buffer, %b3_grad, %lazy_reset_grad) : bool[1] phase backward
    return %loss, %w1_grad.accumulation.out, %b1_grad.accumulation.out, %w2_grad.accumulation.out, %b2_grad.accumulation.out, %w3_grad.accumulation.out, %b3_grad.accumulation.out
  }
}
)";

constexpr const char *kCopyOut =
    "    %r_host = gmopt.CopyToHostStart(%r) : f32[256,64]\n"
    "    %r_saved = gmopt.CopyWait(%r_host, %r) : f32[256,64]";
constexpr const char *kCopyIn =
    "    %r_back = gmopt.CopyToDeviceStart(%r_saved) : f32[256,64] phase "
    "backward\n"
    "    %r_again = gmopt.CopyWait(%r_back, %r_saved) : f32[256,64] phase "
    "backward";

/// Bytes of %r.
constexpr uint64_t kActivationBytes = 256 * 64 * 4;

std::string replaceAll(std::string text, llvm::StringRef from,
                       llvm::StringRef to) {
  for (size_t at = text.find(from.str()); at != std::string::npos;
       at = text.find(from.str(), at + to.size()))
    text.replace(at, from.size(), to.str());
  return text;
}

/// The graph without copies, or with %r's round trip through host memory.
std::string graphText(bool offload) {
  std::string text = kTemplate;
  text = replaceAll(text, "@OUT@", offload ? kCopyOut : "");
  text = replaceAll(text, "@IN@", offload ? kCopyIn : "");
  return replaceAll(text, "@R@", offload ? "%r_again" : "%r");
}

std::unique_ptr<Module> parseGraph(bool offload) {
  auto parsed = parseModule(graphText(offload), "three_layer.gmir");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (!parsed)
    return nullptr;
  inferTrainingSignature(**parsed);
  return std::move(*parsed);
}

/// plan-buffers' plan for the CPU backend's kernels.
void planForCpu(Module &module) {
  auto plan = computeBufferPlan(module, PlanBuffersPass::Options(), nullptr,
                                getWorkspaceModel(WorkspaceTarget::Cpu));
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  plan->workspaceModel = workspaceModelName(WorkspaceTarget::Cpu).str();
  module.plan = std::move(*plan);
  llvm::Error err = module.plan.validate(module);
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
}

const Value *valueNamed(const Module &module, llvm::StringRef name) {
  const Value *value = module.getGraph().lookupValue(name);
  EXPECT_TRUE(value) << name.str();
  return value;
}

struct StepOutcome {
  TensorData loss;
  std::map<std::string, TensorData> gradients;
  MemoryReport memory;
  uint64_t hostArenaBytes = 0;
};

/// Prepares \p module in \p mode, runs one step on seeded inputs and reads
/// the loss and every gradient.
StepOutcome runOneStep(const Module &module, AllocationMode mode) {
  StepOutcome outcome;
  InputSources sources;
  sources.seed = 11;
  auto inputs = bindInputs(module, sources);
  EXPECT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  if (!inputs)
    return outcome;
  ExecutorOptions options;
  options.mode = mode;
  options.threads = 1;
  auto exe = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  if (!exe)
    return outcome;
  for (const BoundInput &binding : *inputs)
    EXPECT_FALSE(bool((*exe)->setInput(binding.input, binding.data)));
  llvm::Error err = (*exe)->runStep(0);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  auto loss = (*exe)->readValue(module.getSignature().getLoss());
  EXPECT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  if (loss)
    outcome.loss = *loss;
  for (const ParamInfo &param : module.getSignature().getParams()) {
    auto gradient = (*exe)->readGradient(param);
    EXPECT_TRUE(bool(gradient)) << llvm::toString(gradient.takeError());
    if (gradient)
      outcome.gradients[param.param->getName().str()] = *gradient;
  }
  outcome.memory = (*exe)->getMemoryReport();
  outcome.hostArenaBytes = (*exe)->getHostArenaBytes();
  return outcome;
}

void expectBitwiseEqual(const StepOutcome &a, const StepOutcome &b) {
  EXPECT_TRUE(a.loss == b.loss);
  ASSERT_EQ(a.gradients.size(), 6u);
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (const auto &[name, gradient] : a.gradients) {
    auto it = b.gradients.find(name);
    ASSERT_NE(it, b.gradients.end()) << name;
    EXPECT_TRUE(gradient == it->second) << "gradient of " << name << " differs";
  }
}

TEST(MemorySpacesTest, SpacesAreDerivedFromTheCopies) {
  std::unique_ptr<Module> module = parseGraph(/*offload=*/true);
  ASSERT_TRUE(module);
  EXPECT_EQ(getMemorySpace(*valueNamed(*module, "r")), MemorySpace::Device);
  EXPECT_EQ(getMemorySpace(*valueNamed(*module, "r_host")), MemorySpace::Host);
  EXPECT_EQ(getMemorySpace(*valueNamed(*module, "r_saved")), MemorySpace::Host);
  EXPECT_EQ(getMemorySpace(*valueNamed(*module, "r_back")),
            MemorySpace::Device);
  EXPECT_EQ(getMemorySpace(*valueNamed(*module, "r_again")),
            MemorySpace::Device);
  EXPECT_EQ(memorySpaceName(MemorySpace::Host), "host");
  EXPECT_EQ(parseMemorySpace("device"), MemorySpace::Device);
  EXPECT_FALSE(parseMemorySpace("pinned").has_value());
}

TEST(MemorySpacesTest, PlanPutsTheHostValueInAHostArenaOfItsOwn) {
  std::unique_ptr<Module> base = parseGraph(/*offload=*/false);
  std::unique_ptr<Module> offload = parseGraph(/*offload=*/true);
  ASSERT_TRUE(base && offload);
  planForCpu(*base);
  planForCpu(*offload);
  const ExecutionPlan &plan = offload->plan;

  const BufferAssignment *host = plan.lookup(valueNamed(*offload, "r_host"));
  ASSERT_TRUE(host);
  EXPECT_EQ(host->kind, StorageKind::Arena);
  EXPECT_EQ(host->space, MemorySpace::Host);
  EXPECT_EQ(host->size, kActivationBytes);
  const BufferAssignment *saved = plan.lookup(valueNamed(*offload, "r_saved"));
  ASSERT_TRUE(saved);
  EXPECT_EQ(saved->kind, StorageKind::Alias);
  EXPECT_EQ(saved->space, MemorySpace::Host);
  EXPECT_EQ(plan.storageOwner(valueNamed(*offload, "r_saved")),
            valueNamed(*offload, "r_host"));
  // The device copy back is device storage; its wait shares it.
  const BufferAssignment *back = plan.lookup(valueNamed(*offload, "r_back"));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->space, MemorySpace::Device);
  EXPECT_EQ(plan.storageOwner(valueNamed(*offload, "r_again")),
            valueNamed(*offload, "r_back"));

  EXPECT_EQ(plan.hostArenaBytes, alignBuffer(kActivationBytes));
  EXPECT_EQ(plan.figures.hostArenaBytes, plan.hostArenaBytes);
  EXPECT_EQ(base->plan.hostArenaBytes, 0u);
  // The device peak excludes the host arena, and is lower than without the
  // round trip: %r is away while the top layer's gradients peak.
  EXPECT_LT(plan.figures.plannedBytes(), base->plan.figures.plannedBytes());
  EXPECT_LT(plan.figures.lowerBoundBytes, base->plan.figures.lowerBoundBytes);

  // The trivial plan (no reuse) keeps the spaces apart too.
  auto trivial = makeTrivialPlan(*offload);
  ASSERT_TRUE(bool(trivial)) << llvm::toString(trivial.takeError());
  EXPECT_EQ(trivial->hostArenaBytes, alignBuffer(kActivationBytes));
  EXPECT_EQ(trivial->lookup(valueNamed(*offload, "r_host"))->space,
            MemorySpace::Host);
  llvm::Error err = trivial->validate(*offload);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
}

TEST(MemorySpacesTest, RoundTripIsBitIdenticalAndLowersTheMeasuredPeak) {
  std::unique_ptr<Module> base = parseGraph(/*offload=*/false);
  std::unique_ptr<Module> offload = parseGraph(/*offload=*/true);
  ASSERT_TRUE(base && offload);
  planForCpu(*base);
  planForCpu(*offload);

  StepOutcome without = runOneStep(*base, AllocationMode::Planned);
  StepOutcome with = runOneStep(*offload, AllocationMode::Planned);
  expectBitwiseEqual(without, with);
  // Planned equals measured, byte for byte, in each space.
  EXPECT_EQ(without.memory.peakBytes, base->plan.figures.plannedBytes());
  EXPECT_EQ(with.memory.peakBytes, offload->plan.figures.plannedBytes());
  EXPECT_EQ(with.memory.hostPeakBytes, offload->plan.hostArenaBytes);
  EXPECT_EQ(with.hostArenaBytes, alignBuffer(kActivationBytes));
  EXPECT_EQ(without.memory.hostPeakBytes, 0u);
  EXPECT_LT(with.memory.peakBytes, without.memory.peakBytes);
  // While the step ran, the host slice held an activation.
  EXPECT_EQ(with.memory.hostPeakByCategory[static_cast<unsigned>(
                MemoryCategory::Activations)],
            alignBuffer(kActivationBytes));

  // Eager mode allocates the host tensor in host memory as well, and frees
  // it after its last reader, the copy back.
  StepOutcome eager = runOneStep(*offload, AllocationMode::Eager);
  expectBitwiseEqual(without, eager);
  EXPECT_EQ(eager.memory.hostPeakBytes, alignBuffer(kActivationBytes));
  EXPECT_EQ(eager.memory.hostCurrentBytes, 0u);
  StepOutcome eagerBase = runOneStep(*base, AllocationMode::Eager);
  EXPECT_LT(eager.memory.peakBytes, eagerBase.memory.peakBytes);

  // The trivial plan runs the same bits, with the host arena it plans.
  offload->plan.clear();
  StepOutcome trivial = runOneStep(*offload, AllocationMode::Planned);
  expectBitwiseEqual(without, trivial);
  EXPECT_EQ(trivial.memory.hostPeakBytes, alignBuffer(kActivationBytes));
}

TEST(MemorySpacesTest, ValidationChecksEachSpaceApart) {
  std::unique_ptr<Module> module = parseGraph(/*offload=*/true);
  ASSERT_TRUE(module);
  planForCpu(*module);
  const Value *host = valueNamed(*module, "r_host");
  const Value *device = valueNamed(*module, "r");
  auto validationError = [&](const ExecutionPlan &plan) {
    llvm::Error err = plan.validate(*module);
    return err ? llvm::toString(std::move(err)) : std::string("<valid>");
  };

  ExecutionPlan wrongSpace = module->plan;
  wrongSpace.buffers[host].space = MemorySpace::Device;
  EXPECT_NE(validationError(wrongSpace)
                .find("%r_host is in host memory but the plan puts it in the "
                      "device space"),
            std::string::npos)
      << validationError(wrongSpace);

  ExecutionPlan deviceOnHost = module->plan;
  deviceOnHost.buffers[device].space = MemorySpace::Host;
  EXPECT_NE(validationError(deviceOnHost).find("%r is in device memory"),
            std::string::npos)
      << validationError(deviceOnHost);

  // A host slice is bounded by the host arena, whatever the device arena.
  ExecutionPlan pastHostArena = module->plan;
  pastHostArena.buffers[host].offset = pastHostArena.hostArenaBytes;
  ASSERT_LT(pastHostArena.hostArenaBytes, pastHostArena.arenaBytes);
  EXPECT_NE(validationError(pastHostArena).find("ends past the host arena"),
            std::string::npos)
      << validationError(pastHostArena);

  // A host slice may sit at the offset of a live device slice: the arenas
  // are apart.
  ExecutionPlan shared = module->plan;
  shared.buffers[host].offset = 0;
  EXPECT_EQ(validationError(shared), "<valid>");
}

TEST(MemorySpacesTest, GmFileKeepsTheSpaces) {
  std::unique_ptr<Module> module = parseGraph(/*offload=*/true);
  std::unique_ptr<Module> original = parseGraph(/*offload=*/true);
  ASSERT_TRUE(module && original);
  planForCpu(*module);
  auto bytes = writeGmBytes(*module, *original, "plan-buffers");
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "offload.gm");
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  const Module &read = *loaded->module;
  EXPECT_EQ(read.plan.hostArenaBytes, module->plan.hostArenaBytes);
  EXPECT_EQ(read.plan.figures.hostArenaBytes, module->plan.hostArenaBytes);
  const BufferAssignment *host = read.plan.lookup(valueNamed(read, "r_host"));
  ASSERT_TRUE(host);
  EXPECT_EQ(host->space, MemorySpace::Host);
  EXPECT_EQ(read.plan.lookup(valueNamed(read, "r_saved"))->space,
            MemorySpace::Host);
  EXPECT_EQ(read.plan.lookup(valueNamed(read, "r_back"))->space,
            MemorySpace::Device);
  StepOutcome fromFile = runOneStep(read, AllocationMode::Planned);
  EXPECT_EQ(fromFile.memory.peakBytes, read.plan.figures.plannedBytes());
  EXPECT_EQ(fromFile.memory.hostPeakBytes, read.plan.hostArenaBytes);
}

TEST(MemorySpacesTest, GmFileSpacesAreCheckedNotTrusted) {
  std::unique_ptr<Module> module = parseGraph(/*offload=*/true);
  std::unique_ptr<Module> original = parseGraph(/*offload=*/true);
  ASSERT_TRUE(module && original);
  planForCpu(*module);
  auto bytes = writeGmBytes(*module, *original, "plan-buffers");
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  // A CRC-valid file whose plan was edited: loading must refuse it.
  auto loadEdited = [&](const std::function<void(gm::Plan &)> &change) {
    gm::GmFile file;
    EXPECT_TRUE(file.ParseFromString(bytes->substr(kGmHeaderSize)));
    change(*file.mutable_rewritten()->mutable_plan());
    auto loaded =
        readGmBytes(wrapGmPayload(file.SerializeAsString()), "offload.gm");
    return loaded ? std::string("<loaded>")
                  : llvm::toString(loaded.takeError());
  };
  auto hostBuffer = [](gm::Plan &plan) -> gm::Buffer & {
    for (gm::Buffer &buffer : *plan.mutable_buffers())
      if (buffer.value() == "r_host")
        return buffer;
    ADD_FAILURE() << "no buffer for r_host";
    return *plan.mutable_buffers(0);
  };
  EXPECT_EQ(loadEdited([](gm::Plan &) {}), "<loaded>");
  std::string message = loadEdited([&](gm::Plan &plan) {
    hostBuffer(plan).set_space(gm::MEMORY_SPACE_DEVICE);
  });
  EXPECT_NE(message.find("%r_host is in host memory but the plan puts it in "
                         "the device space"),
            std::string::npos)
      << message;
  message = loadEdited([&](gm::Plan &plan) {
    hostBuffer(plan).set_space(static_cast<gm::MemorySpace>(7));
  });
  EXPECT_NE(message.find("has invalid memory space 7"), std::string::npos)
      << message;
  message = loadEdited([](gm::Plan &plan) { plan.set_host_arena_bytes(0); });
  EXPECT_NE(message.find("does not fit in the 0-byte host arena"),
            std::string::npos)
      << message;
}

/// A CPU device that records the copies the interpreter starts and the
/// events it waits for.
class RecordingDevice final : public Device {
public:
  /// What happened, in order: "to-host N", "to-device N", "wait K" (K: the
  /// number of the start whose event is waited for).
  std::vector<std::string> log;

  RecordingDevice() : inner(createCpuDevice()) {}
  llvm::StringRef getName() const override { return inner->getName(); }
  llvm::StringRef getWorkspaceModelName() const override {
    return inner->getWorkspaceModelName();
  }
  llvm::Error initialize(MemoryCounter &counter,
                         const ExecutorOptions &options) override {
    return inner->initialize(counter, options);
  }
  llvm::Expected<std::unique_ptr<PreparedKernel>>
  prepare(const Node &node, const KernelPreparation &preparation) override {
    if (isCopyOp(node))
      log.push_back("prepared a copy");
    return inner->prepare(node, preparation);
  }
  llvm::Expected<void *> allocate(uint64_t bytes) override {
    return inner->allocate(bytes);
  }
  void deallocate(void *address) override { inner->deallocate(address); }
  llvm::Expected<void *> allocateHost(uint64_t bytes) override {
    log.push_back("host " + std::to_string(bytes));
    return inner->allocateHost(bytes);
  }
  void deallocateHost(void *address) override {
    inner->deallocateHost(address);
  }
  llvm::Error copyToDevice(void *target, const void *source,
                           uint64_t bytes) override {
    return inner->copyToDevice(target, source, bytes);
  }
  llvm::Error copyToHost(void *target, const void *source,
                         uint64_t bytes) const override {
    return inner->copyToHost(target, source, bytes);
  }
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToHost(void *target, const void *source, uint64_t bytes) override {
    log.push_back("to-host " + std::to_string(bytes));
    return numbered(inner->startCopyToHost(target, source, bytes));
  }
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToDevice(void *target, const void *source, uint64_t bytes) override {
    log.push_back("to-device " + std::to_string(bytes));
    return numbered(inner->startCopyToDevice(target, source, bytes));
  }
  llvm::Error waitEvent(const DeviceEvent &event) override {
    const auto *ours = dynamic_cast<const NumberedEvent *>(&event);
    log.push_back("wait " + (ours ? std::to_string(ours->number)
                                  : std::string("foreign")));
    return llvm::Error::success();
  }
  llvm::Error fillZero(void *target, uint64_t bytes) override {
    return inner->fillZero(target, bytes);
  }
  bool canReadHostMemory() const override { return inner->canReadHostMemory(); }
  llvm::Error runNode(const PreparedKernel &kernel,
                      const NodeLaunch &launch) override {
    if (isCopyOp(*launch.node))
      log.push_back("launched a copy");
    return inner->runNode(kernel, launch);
  }

private:
  struct NumberedEvent final : DeviceEvent {
    explicit NumberedEvent(unsigned number) : number(number) {}
    unsigned number;
  };
  llvm::Expected<std::unique_ptr<DeviceEvent>>
  numbered(llvm::Expected<std::unique_ptr<DeviceEvent>> event) {
    if (!event)
      return event.takeError();
    return std::make_unique<NumberedEvent>(started++);
  }
  std::unique_ptr<Device> inner;
  unsigned started = 0;
};

TEST(MemorySpacesTest, InterpreterRunsCopiesThroughTheDevicesEvents) {
  std::unique_ptr<Module> module = parseGraph(/*offload=*/true);
  ASSERT_TRUE(module);
  planForCpu(*module);
  auto device = std::make_unique<RecordingDevice>();
  RecordingDevice *recording = device.get();
  ExecutorOptions options;
  options.mode = AllocationMode::Planned;
  auto exe = createPlanInterpreter(*module, options, std::move(device),
                                   getWorkspaceModel(WorkspaceTarget::Cpu));
  ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
  InputSources sources;
  sources.seed = 11;
  auto inputs = bindInputs(*module, sources);
  ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  for (const BoundInput &binding : *inputs)
    ASSERT_FALSE(bool((*exe)->setInput(binding.input, binding.data)));
  llvm::Error err = (*exe)->runStep(0);
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  // The host arena is allocated once; each copy is started through the
  // device, and each wait waits for its own start's event. No copy is a
  // kernel.
  std::string bytes = std::to_string(kActivationBytes);
  EXPECT_EQ(recording->log, (std::vector<std::string>{
                                "host " + bytes, "to-host " + bytes, "wait 0",
                                "to-device " + bytes, "wait 1"}));
}

} // namespace
