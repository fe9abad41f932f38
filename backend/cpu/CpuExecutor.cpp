//===- CpuExecutor.cpp - Running a training step on the CPU ---------------===//
//
// The CPU Executable. Preparation turns the module into a flat instruction
// list (node, operand values, result values, whether the node is a pure view
// that needs no kernel) and places every value:
//  - persistent values (graph inputs, outputs, initializers) get blocks of
//    their own for the Executable's lifetime;
//  - planned mode: transient values are slices of one arena at the plan's
//    offsets; aliases (views, in-place results) share their owner's bytes;
//  - eager mode: transient values are allocated right before their producer
//    runs and freed right after their last reader, views sharing storage -
//    the baseline a PyTorch-eager user gets.
// All memory goes through one CountingAllocator. In planned mode the arena
// is counted as Temporaries while unoccupied and each slice is moved to its
// value's category while that value is live, so the per-category split at the
// peak says what the arena held at that moment; a node's planned kernel
// workspace slice is handed to its kernel and counts as Workspace while it
// runs. With ExecutorOptions::profile
// every kernel is timed and the totals are kept per op type.
//
//===----------------------------------------------------------------------===//

#include "backend/Executor.h"
#include "backend/cpu/CpuKernel.h"
#include "ir/OpRegistry.h"
#include "ir/SizeLimits.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string valueLabel(const Value *value) {
  if (!value->getName().empty())
    return "'" + value->getName().str() + "'";
  return "<unnamed value>";
}

/// One node, decoded once at prepare time.
struct Instruction {
  const Node *node;
  llvm::SmallVector<const Value *, 4> operands;
  llvm::SmallVector<const Value *, 2> results;
  /// A view whose result shares operand 0's bytes: nothing to compute.
  bool skipKernel = false;
  /// Eager mode: storage owners to free after this instruction.
  llvm::SmallVector<const Value *, 4> freeAfter;
  /// Planned mode: arena slices that become live / dead here.
  llvm::SmallVector<const Value *, 2> slicesBorn;
  llvm::SmallVector<const Value *, 4> slicesDead;
  /// Planned mode: the node's kernel workspace slice (null: none).
  uint8_t *workspace = nullptr;
  uint64_t workspaceBytes = 0;
};

class CpuExecutable final : public Executable {
public:
  CpuExecutable(const Module &module, const ExecutorOptions &options)
      : module(module), options(options), kernelContext(allocator) {
    kernelContext.setSeed(options.seed);
    kernelContext.setNumThreads(options.threads);
  }

  llvm::Error prepare();

  const Module &getModule() const override { return module; }
  llvm::Error setInput(const Value *input, const TensorData &data) override;
  llvm::Expected<TensorData> readValue(const Value *value) const override;
  llvm::Error runStep(uint64_t step) override;
  MemoryReport getMemoryReport() const override { return allocator.getReport(); }
  void resetPeak() override { allocator.resetPeak(); }
  double getLastStepMilliseconds() const override { return lastStepMs; }
  uint64_t getArenaBytes() const override { return arenaBytes; }
  uint64_t getUnplannedScratchBytes() const override {
    return kernelContext.getUnplannedScratchBytes();
  }
  std::vector<OpProfile> getProfile() const override;

private:
  llvm::Error allocatePersistent(const Value *value);
  llvm::Error placePlanned();
  llvm::Error placeEager();
  void *addressOf(const Value *value) const { return addresses.lookup(value); }
  llvm::Expected<TensorView> viewOf(const Value *value) const;
  llvm::Error runInstruction(const Instruction &inst);
  bool isViewInstruction(const Node &node) const;

  const Module &module;
  ExecutorOptions options;
  CountingAllocator allocator;
  CpuKernelContext kernelContext;
  std::vector<Instruction> instructions;
  llvm::DenseMap<const Value *, MemoryCategory> categories;
  /// Storage of persistent values.
  llvm::DenseMap<const Value *, ScopedAllocation> persistentBlocks;
  /// Eager mode: blocks of live transient values.
  llvm::DenseMap<const Value *, ScopedAllocation> eagerBlocks;
  /// Current address of every placed value (aliases included).
  llvm::DenseMap<const Value *, void *> addresses;
  /// Eager mode: the storage owner of each alias.
  llvm::DenseMap<const Value *, const Value *> eagerOwner;
  /// Planned mode: the plan in use, the arena, and plan-made aliases.
  ExecutionPlan trivialPlan;
  const ExecutionPlan *plan = nullptr;
  ScopedAllocation arena;
  uint64_t arenaBytes = 0;
  double lastStepMs = 0;
  /// Profiling: per-op totals, indexed like `profileIndex`.
  std::vector<OpProfile> profile;
  llvm::StringMap<size_t> profileIndex;
};

bool CpuExecutable::isViewInstruction(const Node &node) const {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  return schema && schema->hasTrait(TraitView) && node.getNumOperands() &&
         node.getOperand(0) && node.getResult(0);
}

llvm::Error CpuExecutable::allocatePersistent(const Value *value) {
  if (persistentBlocks.count(value))
    return llvm::Error::success();
  uint64_t bytes = value->getType().getSizeInBytes();
  auto block = ScopedAllocation::create(allocator, bytes, categories.lookup(value));
  if (!block)
    return block.takeError();
  if (value->hasData()) {
    llvm::ArrayRef<uint8_t> data = value->getData().getBytes();
    if (data.size() != bytes)
      return fail("initializer " + valueLabel(value) + " holds " +
                  llvm::Twine(data.size()) + " bytes but its type needs " +
                  llvm::Twine(bytes));
    if (bytes)
      std::memcpy(block->get(), data.data(), bytes);
  } else if (bytes) {
    std::memset(block->get(), 0, bytes);
  }
  addresses[value] = block->get();
  persistentBlocks[value] = std::move(*block);
  return llvm::Error::success();
}

llvm::Error CpuExecutable::prepare() {
  const Graph &graph = module.getGraph();
  categories = categorizeValues(module);

  auto checkStatic = [](const Value *value) -> llvm::Error {
    if (!value->getType().hasStaticShape())
      return fail("value " + valueLabel(value) + " has type " +
                  value->getType().str() +
                  ", which is not static; bind symbolic dimensions with --dim");
    return llvm::Error::success();
  };
  for (const auto &input : graph.getInputs()) {
    if (auto err = checkStatic(input.get()))
      return err;
    if (auto err = allocatePersistent(input.get()))
      return err;
  }
  for (const auto &init : graph.getInitializers())
    if (auto err = allocatePersistent(init.get()))
      return err;

  for (const Node &node : graph.getNodes()) {
    if (!hasCpuKernel(node.getDomain(), node.getOpType()) &&
        !isViewInstruction(node))
      return fail("no CPU kernel for '" + node.getOp().str() + "' (node " +
                  node.describe() + ")");
    Instruction inst;
    inst.node = &node;
    for (Value *operand : node.getOperands())
      inst.operands.push_back(operand);
    for (Value *result : node.getResults()) {
      inst.results.push_back(result);
      if (!result)
        continue;
      if (auto err = checkStatic(result))
        return err;
      if (result->isGraphOutput())
        if (auto err = allocatePersistent(result))
          return err;
    }
    instructions.push_back(std::move(inst));
  }
  return options.mode == AllocationMode::Planned ? placePlanned() : placeEager();
}

llvm::Error CpuExecutable::placePlanned() {
  if (module.plan.empty()) {
    auto made = makeTrivialPlan(module, getCpuKernelWorkspaceBytes);
    if (!made)
      return made.takeError();
    trivialPlan = std::move(*made);
    plan = &trivialPlan;
  } else {
    plan = &module.plan;
  }
  if (auto err = plan->validate(module))
    return err;
  arenaBytes = plan->arenaBytes;
  auto block =
      ScopedAllocation::create(allocator, arenaBytes, MemoryCategory::Temporaries);
  if (!block)
    return block.takeError();
  arena = std::move(*block);
  auto *base = static_cast<uint8_t *>(arena.get());

  for (Instruction &inst : instructions) {
    for (const Value *result : inst.results) {
      if (!result || persistentBlocks.count(result))
        continue;
      const BufferAssignment *assignment = plan->lookup(result);
      if (!assignment)
        return fail("the plan has no buffer for " + valueLabel(result));
      switch (assignment->kind) {
      case StorageKind::Arena:
        addresses[result] = base + assignment->offset;
        break;
      case StorageKind::Alias: {
        const Value *owner = plan->storageOwner(result);
        if (!owner || !addresses.count(owner))
          return fail("the plan aliases " + valueLabel(result) +
                      " to storage that is not placed before it");
        addresses[result] = addresses[owner];
        inst.skipKernel = isViewInstruction(*inst.node) &&
                          result == inst.node->getResult(0) &&
                          addresses[result] == addresses[inst.operands[0]];
        break;
      }
      case StorageKind::Persistent:
      case StorageKind::Constant:
        return fail("the plan makes " + valueLabel(result) +
                    " persistent, but it is not a graph input or output");
      }
    }
  }
  for (Instruction &inst : instructions)
    if (const WorkspaceAssignment *workspace =
            plan->lookupWorkspace(inst.node)) {
      inst.workspace = base + workspace->offset;
      inst.workspaceBytes = workspace->size;
    }
  // Occupancy events, for per-category accounting of the arena.
  llvm::DenseMap<uint32_t, Instruction *> byStep;
  for (size_t i = 0; i != instructions.size(); ++i)
    byStep[i] = &instructions[i];
  for (const auto &[value, assignment] : plan->buffers) {
    if (assignment.kind != StorageKind::Arena || !assignment.size)
      continue;
    if (Instruction *born = byStep.lookup(assignment.firstStep))
      born->slicesBorn.push_back(value);
    if (Instruction *dead = byStep.lookup(assignment.lastStep))
      dead->slicesDead.push_back(value);
  }
  return llvm::Error::success();
}

llvm::Error CpuExecutable::placeEager() {
  llvm::DenseMap<const Value *, LiveInterval> intervals =
      computeLiveIntervals(module);
  for (size_t step = 0; step != instructions.size(); ++step) {
    Instruction &inst = instructions[step];
    if (isViewInstruction(*inst.node) && !inst.node->getResult(0)->isGraphOutput()) {
      const Value *source = inst.operands[0];
      auto it = eagerOwner.find(source);
      eagerOwner[inst.results[0]] = it == eagerOwner.end() ? source : it->second;
      inst.skipKernel = true;
    }
  }
  // Free each storage owner after its (view-extended) last use.
  for (size_t step = 0; step != instructions.size(); ++step) {
    for (const Value *result : instructions[step].results) {
      if (!result || persistentBlocks.count(result) || eagerOwner.count(result))
        continue;
      uint32_t last = intervals.lookup(result).lastStep;
      instructions[std::max<size_t>(last, step)].freeAfter.push_back(result);
    }
  }
  return llvm::Error::success();
}

llvm::Expected<TensorView> CpuExecutable::viewOf(const Value *value) const {
  void *address = addressOf(value);
  if (!address && value->getType().getSizeInBytes())
    return fail("value " + valueLabel(value) + " has no storage when read");
  return TensorView::get(address, value->getType());
}

llvm::Error CpuExecutable::setInput(const Value *input, const TensorData &data) {
  if (!input->isGraphInput())
    return fail(valueLabel(input) + " is not a graph input");
  if (data.getType() != input->getType())
    return fail("input " + valueLabel(input) + " expects " +
                input->getType().str() + " but was given " +
                data.getType().str());
  void *address = addressOf(input);
  if (!data.getBytes().empty())
    std::memcpy(address, data.getBytes().data(), data.getBytes().size());
  return llvm::Error::success();
}

llvm::Expected<TensorData> CpuExecutable::readValue(const Value *value) const {
  auto it = persistentBlocks.find(value);
  if (it == persistentBlocks.end())
    return fail("value " + valueLabel(value) +
                " is transient: only graph inputs, outputs and initializers "
                "can be read after a step");
  const auto *begin = static_cast<const uint8_t *>(it->second.get());
  // A copy as large as the value: allocated without throwing, so running out
  // of memory here is an error like a failed arena allocation.
  auto copy = allocateTensorData(
      value->getType(), [&](llvm::MutableArrayRef<uint8_t> bytes) {
        if (!bytes.empty())
          std::memcpy(bytes.data(), begin, bytes.size());
      });
  if (!copy)
    return fail("reading " + valueLabel(value) + ": " +
                llvm::toString(copy.takeError()));
  return copy;
}

llvm::Error CpuExecutable::runInstruction(const Instruction &inst) {
  const Node &node = *inst.node;
  llvm::SmallVector<TensorView, 4> inputViews(inst.operands.size());
  llvm::SmallVector<const TensorView *, 4> inputs;
  for (size_t i = 0; i != inst.operands.size(); ++i) {
    if (!inst.operands[i]) {
      inputs.push_back(nullptr);
      continue;
    }
    auto view = viewOf(inst.operands[i]);
    if (!view)
      return view.takeError();
    inputViews[i] = std::move(*view);
    inputs.push_back(&inputViews[i]);
  }
  llvm::SmallVector<TensorView, 2> outputViews(inst.results.size());
  llvm::SmallVector<TensorView *, 2> outputs;
  for (size_t i = 0; i != inst.results.size(); ++i) {
    if (!inst.results[i]) {
      outputs.push_back(nullptr);
      continue;
    }
    auto view = viewOf(inst.results[i]);
    if (!view)
      return view.takeError();
    outputViews[i] = std::move(*view);
    outputs.push_back(&outputViews[i]);
  }
  return runCpuKernel(node, inputs, outputs, kernelContext);
}

llvm::Error CpuExecutable::runStep(uint64_t step) {
  kernelContext.setStep(step);
  auto start = std::chrono::steady_clock::now();
  const bool eager = options.mode == AllocationMode::Eager;
  for (const Instruction &inst : instructions) {
    if (eager) {
      for (const Value *result : inst.results) {
        if (!result || persistentBlocks.count(result))
          continue;
        auto owner = eagerOwner.find(result);
        if (owner != eagerOwner.end()) {
          addresses[result] = addresses.lookup(owner->second);
          continue;
        }
        auto block = ScopedAllocation::create(
            allocator, result->getType().getSizeInBytes(),
            categories.lookup(result));
        if (!block)
          return block.takeError();
        addresses[result] = block->get();
        eagerBlocks[result] = std::move(*block);
      }
    } else {
      for (const Value *born : inst.slicesBorn)
        allocator.transfer(MemoryCategory::Temporaries, categories.lookup(born),
                           alignBuffer(born->getType().getSizeInBytes()));
    }

    if (!eager) {
      // Kernel scratch comes from the node's slice (none: every request is
      // unplanned); the slice counts as workspace while the kernel runs.
      kernelContext.setWorkspaceSlice(inst.workspace, inst.workspaceBytes);
      if (inst.workspaceBytes)
        allocator.transfer(MemoryCategory::Temporaries,
                           MemoryCategory::Workspace, inst.workspaceBytes);
    }
    if (!inst.skipKernel) {
      auto kernelStart = options.profile ? std::chrono::steady_clock::now()
                                         : std::chrono::steady_clock::time_point();
      if (auto err = runInstruction(inst))
        return err;
      if (options.profile) {
        std::string op = inst.node->getOp().str();
        auto [it, inserted] = profileIndex.try_emplace(op, profile.size());
        if (inserted)
          profile.push_back(OpProfile{op, 0, 0});
        OpProfile &entry = profile[it->second];
        ++entry.calls;
        entry.milliseconds += std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - kernelStart)
                                  .count();
      }
    }

    if (eager) {
      for (const Value *dead : inst.freeAfter)
        eagerBlocks.erase(dead);
    } else {
      if (inst.workspaceBytes)
        allocator.transfer(MemoryCategory::Workspace,
                           MemoryCategory::Temporaries, inst.workspaceBytes);
      kernelContext.clearWorkspaceSlice();
      for (const Value *dead : inst.slicesDead)
        allocator.transfer(categories.lookup(dead), MemoryCategory::Temporaries,
                           alignBuffer(dead->getType().getSizeInBytes()));
    }
  }
  lastStepMs = std::chrono::duration<double, std::milli>(
                   std::chrono::steady_clock::now() - start)
                   .count();
  return llvm::Error::success();
}

std::vector<OpProfile> CpuExecutable::getProfile() const {
  std::vector<OpProfile> sorted = profile;
  llvm::sort(sorted, [](const OpProfile &a, const OpProfile &b) {
    return a.milliseconds > b.milliseconds;
  });
  return sorted;
}

} // namespace

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareCpuExecutable(const Module &module, const ExecutorOptions &options) {
  auto executable = std::make_unique<CpuExecutable>(module, options);
  if (auto err = executable->prepare())
    return err;
  return std::unique_ptr<Executable>(std::move(executable));
}
