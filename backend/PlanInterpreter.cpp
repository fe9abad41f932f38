//===- PlanInterpreter.cpp - Running a planned training step ---------------===//
//
// The Executable every backend shares. Preparation turns the module into a
// flat instruction list (node, operand values, result values, whether the
// node is a pure view that needs no kernel) and places every value:
//  - persistent values (graph inputs, outputs, initializers) get device
//    blocks of their own for the Executable's lifetime - except an
//    initializer mapped from an external-data file on a device that reads
//    host memory (the CPU), which is used where it lies (counted, not
//    copied) until something writes it (then copied first);
//  - planned mode: transient values are slices of one arena at the plan's
//    offsets; aliases (views, in-place results) share their owner's bytes;
//    a node's workspace slice is handed to its kernel;
//  - eager mode: transient values are allocated right before their producer
//    runs and freed right after their last reader, views sharing storage -
//    the baseline a PyTorch-eager user gets.
// Once every value is placed, the device prepares each instruction's kernel
// (Device::prepare, with the node's workspace slice size) and the
// instruction keeps the handle, so the step loop only launches: a node no
// kernel can run is an error of preparation, never of a step.
// Memory spaces (ir/MemorySpaces.h): values the plan puts in host memory
// (offloaded tensors) are slices of a host arena of their own, allocated
// with Device::allocateHost and counted in a second MemoryCounter, so the
// measured peak is the device's alone and the host arena is reported beside
// it. The copy ops are the interpreter's own instructions, run through the
// Device's asynchronous copies on every backend: a copy start calls
// startCopyToHost / startCopyToDevice and keeps the event in its
// instruction's slot, and its CopyWait waits for that event.
// The Device only allocates; the interpreter counts every block in one
// MemoryCounter per space. In planned mode the arena is counted as Temporaries
// while unoccupied and each slice is moved to its value's category while that
// value is live, so the per-category split at the peak says what the arena
// held at that moment; a workspace slice counts as Workspace while its
// kernel runs. With ExecutorOptions::profile every kernel is timed (after a
// device synchronization) and the totals are kept per op type, and every
// node's start, duration and the bytes live while it ran are kept for the
// last step (getLastStepNodeTimings: gmopt-run --trace).
//
//===----------------------------------------------------------------------===//

#include "backend/PlanInterpreter.h"

#include "ir/OpRegistry.h"
#include "ir/Plan.h"
#include "ir/SizeLimits.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The alignment a mapped external tensor needs to be used in place
/// (kernels load any element type and vectors from it).
constexpr uintptr_t kMappedAlignment = 64;

std::string valueLabel(const Value *value) {
  if (!value->getName().empty())
    return "'" + value->getName().str() + "'";
  return "<unnamed value>";
}

/// A counted block of device memory, freed on destruction.
class DeviceBlock {
public:
  DeviceBlock() = default;
  DeviceBlock(Device &device, MemoryCounter &counter, void *address,
              uint64_t countedBytes, MemoryCategory category,
              MemorySpace space = MemorySpace::Device)
      : device(&device), counter(&counter), address(address),
        countedBytes(countedBytes), category(category), space(space) {}
  DeviceBlock(DeviceBlock &&other) noexcept { *this = std::move(other); }
  DeviceBlock &operator=(DeviceBlock &&other) noexcept {
    if (this != &other) {
      reset();
      device = other.device;
      counter = other.counter;
      address = other.address;
      countedBytes = other.countedBytes;
      category = other.category;
      space = other.space;
      borrowed = other.borrowed;
      other.device = nullptr;
      other.address = nullptr;
    }
    return *this;
  }
  DeviceBlock(const DeviceBlock &) = delete;
  DeviceBlock &operator=(const DeviceBlock &) = delete;
  ~DeviceBlock() { reset(); }

  /// Allocates \p bytes of \p category in \p space (device memory, or
  /// the device's host memory for offloaded tensors), counted in
  /// \p counter.
  static llvm::Expected<DeviceBlock>
  create(Device &device, MemoryCounter &counter, uint64_t bytes,
         MemoryCategory category, MemorySpace space = MemorySpace::Device) {
    uint64_t counted = alignBuffer(bytes);
    if (counted < bytes)
      return fail("cannot allocate " + llvm::Twine(bytes) + " bytes of " +
                  memoryCategoryName(category) + ": the size overflows");
    auto address = space == MemorySpace::Host ? device.allocateHost(bytes)
                                              : device.allocate(bytes);
    if (!address)
      return address.takeError();
    counter.add(counted, category);
    return DeviceBlock(device, counter, *address, counted, category, space);
  }

  /// Counts \p bytes of host memory at \p address that the block does not
  /// own (a mapped external-data file): never freed, counted like an
  /// allocation so planned and measured bytes agree.
  static DeviceBlock borrow(Device &device, MemoryCounter &counter,
                            const void *address, uint64_t bytes,
                            MemoryCategory category) {
    uint64_t counted = alignBuffer(bytes);
    counter.add(counted, category);
    DeviceBlock block(device, counter, const_cast<void *>(address), counted,
                      category);
    block.borrowed = true;
    return block;
  }

  void *get() const { return address; }
  /// Whether the memory is borrowed (read-only: replace before writing).
  bool isBorrowed() const { return borrowed; }
  MemoryCategory getCategory() const { return category; }
  void reset() {
    if (device && address) {
      if (!borrowed && space == MemorySpace::Host)
        device->deallocateHost(address);
      else if (!borrowed)
        device->deallocate(address);
      counter->remove(countedBytes, category);
    }
    device = nullptr;
    address = nullptr;
    borrowed = false;
  }

private:
  bool borrowed = false;
  Device *device = nullptr;
  MemoryCounter *counter = nullptr;
  void *address = nullptr;
  uint64_t countedBytes = 0;
  MemoryCategory category = MemoryCategory::Temporaries;
  MemorySpace space = MemorySpace::Device;
};

/// What an instruction of a copy op does (ir/MemorySpaces.h).
enum class CopyKind : uint8_t {
  /// Not a copy: a kernel (or a view) runs the node.
  None,
  /// CopyToHostStart: Device::startCopyToHost.
  ToHost,
  /// CopyToDeviceStart: Device::startCopyToDevice.
  ToDevice,
  /// CopyWait: Device::waitEvent on its start's event.
  Wait,
};

/// An arena slice whose value becomes live or dead at an instruction, with
/// the counter of its memory space.
struct SliceEvent {
  /// The value that owns the slice.
  const Value *value;
  /// The device counter, or the host arena's.
  MemoryCounter *counter;
};

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
  llvm::SmallVector<SliceEvent, 2> slicesBorn;
  llvm::SmallVector<SliceEvent, 4> slicesDead;
  /// A copy op, run by the interpreter through the Device's asynchronous
  /// copies instead of a kernel.
  CopyKind copy = CopyKind::None;
  /// A CopyWait: the index of the copy start it waits for.
  size_t copyStart = 0;
  /// A copy start: the bytes it copies.
  uint64_t copyBytes = 0;
  /// Planned mode: the node's kernel workspace slice (null: none).
  uint8_t *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  /// Planned mode: operand and result addresses, fixed by the plan.
  llvm::SmallVector<void *, 4> operandAddresses;
  llvm::SmallVector<void *, 2> resultAddresses;
  /// The device's kernel for the node, prepared once (null when
  /// skipKernel).
  std::unique_ptr<PreparedKernel> kernel;
};

class PlanInterpreter final : public Executable {
public:
  PlanInterpreter(const Module &module, const ExecutorOptions &options,
                  std::unique_ptr<Device> device)
      : module(module), options(options), device(std::move(device)) {}

  llvm::Error prepare(const WorkspaceModel &trivialWorkspace);

  const Module &getModule() const override { return module; }
  llvm::Error setInput(const Value *input, const TensorData &data) override;
  llvm::Error writeValue(const Value *value, const TensorData &data) override;
  llvm::Expected<TensorData> readValue(const Value *value) const override;
  llvm::Error runStep(uint64_t step) override;
  MemoryReport getMemoryReport() const override {
    return counter.getReport(hostCounter);
  }
  void resetPeak() override {
    counter.resetPeak();
    hostCounter.resetPeak();
  }
  double getLastStepMilliseconds() const override { return lastStepMs; }
  uint64_t getArenaBytes() const override { return arenaBytes; }
  uint64_t getHostArenaBytes() const override { return hostArenaBytes; }
  uint64_t getUnplannedScratchBytes() const override {
    return device->getUnplannedScratchBytes();
  }
  std::vector<OpProfile> getProfile() const override;
  std::vector<NodeTiming> getLastStepNodeTimings() const override {
    return nodeTimings;
  }

private:
  llvm::Error allocatePersistent(const Value *value);
  llvm::Error placePlanned(const WorkspaceModel &trivialWorkspace);
  llvm::Error placeEager();
  /// Prepares the kernel of every instruction that runs one.
  llvm::Error prepareKernels();
  llvm::Error addressesOf(llvm::ArrayRef<const Value *> values,
                          llvm::SmallVectorImpl<void *> &out) const;
  llvm::Error runInstruction(const Instruction &inst, uint64_t step);
  /// Runs the copy op \p inst (instruction \p index) on \p operands and
  /// \p results.
  llvm::Error runCopy(const Instruction &inst, size_t index,
                      llvm::ArrayRef<void *> operands,
                      llvm::ArrayRef<void *> results);
  /// Planned mode, when instruction \p failed failed: gives the slices live
  /// at that point (and its workspace slice) back to temporaries, so the
  /// counter describes the arena again (the arena block is released as
  /// temporaries).
  void abandonPlannedStep(size_t failed);
  bool isViewInstruction(const Node &node) const;
  /// Whether some kernel writes \p value in its operand storage (the
  /// optimizer updating a parameter): then it cannot stay in a read-only
  /// mapping.
  bool isWrittenInPlace(const Value *value) const;

  const Module &module;
  ExecutorOptions options;
  /// Declared before the device and the blocks: they outlive both. Device
  /// memory is counted in `counter`, the host arena in `hostCounter`.
  MemoryCounter counter;
  MemoryCounter hostCounter;
  std::unique_ptr<Device> device;
  std::vector<Instruction> instructions;
  llvm::DenseMap<const Value *, MemoryCategory> categories;
  /// Storage of persistent values.
  llvm::DenseMap<const Value *, DeviceBlock> persistentBlocks;
  /// Eager mode: blocks of live transient values.
  llvm::DenseMap<const Value *, DeviceBlock> eagerBlocks;
  /// Current address of every placed value (aliases included).
  llvm::DenseMap<const Value *, void *> addresses;
  /// Eager mode: the storage owner of each alias.
  llvm::DenseMap<const Value *, const Value *> eagerOwner;
  /// Planned mode: the plan in use, the arena.
  ExecutionPlan trivialPlan;
  const ExecutionPlan *plan = nullptr;
  DeviceBlock arena;
  uint64_t arenaBytes = 0;
  /// Planned mode: the host arena (offloaded tensors).
  DeviceBlock hostArena;
  uint64_t hostArenaBytes = 0;
  /// The event of each copy start in flight, by instruction index; its
  /// CopyWait waits for it and releases it.
  std::vector<std::unique_ptr<DeviceEvent>> copyEvents;
  double lastStepMs = 0;
  /// Profiling: per-op totals, indexed like `profileIndex`.
  std::vector<OpProfile> profile;
  llvm::StringMap<size_t> profileIndex;
  /// Profiling: the nodes of the last step.
  std::vector<NodeTiming> nodeTimings;
};

bool PlanInterpreter::isWrittenInPlace(const Value *value) const {
  // The optimizer kernels update trainable parameters (and their state)
  // in their operands' storage, as InPlaceAccumulator does its buffer.
  for (const ParamInfo &param : module.getSignature().getParams())
    if (param.param == value && param.trainable)
      return true;
  for (const Node *user : value->getUsers())
    if (user->getPhase() == Phase::Optimizer ||
        user->getOpType().starts_with("InPlaceAccumulator"))
      return true;
  return false;
}

bool PlanInterpreter::isViewInstruction(const Node &node) const {
  return getViewSource(node) != nullptr;
}

llvm::Error PlanInterpreter::allocatePersistent(const Value *value) {
  if (persistentBlocks.count(value))
    return llvm::Error::success();
  uint64_t bytes = value->getType().getSizeInBytes();
  if (value->hasData())
    if (llvm::Error err = value->getData().load())
      return fail("initializer " + valueLabel(value) + ": " +
                  llvm::toString(std::move(err)));
  // A read-only initializer mapped from its external-data file is used in
  // place where kernels can read host memory: no copy, and its pages are
  // read from the file as kernels touch them. (Planned buffers never write
  // into constants; writeValue copies the tensor first.)
  if (value->isInitializer() && value->hasData() &&
      value->getData().isExternal() && device->canReadHostMemory() &&
      !isWrittenInPlace(value)) {
    llvm::ArrayRef<uint8_t> data = value->getData().getBytes();
    if (data.size() == bytes && bytes &&
        reinterpret_cast<uintptr_t>(data.data()) % kMappedAlignment == 0) {
      addresses[value] = const_cast<uint8_t *>(data.data());
      persistentBlocks[value] = DeviceBlock::borrow(
          *device, counter, data.data(), bytes, categories.lookup(value));
      return llvm::Error::success();
    }
  }
  auto block =
      DeviceBlock::create(*device, counter, bytes, categories.lookup(value));
  if (!block)
    return block.takeError();
  if (value->hasData()) {
    llvm::ArrayRef<uint8_t> data = value->getData().getBytes();
    if (data.size() != bytes)
      return fail("initializer " + valueLabel(value) + " holds " +
                  llvm::Twine(data.size()) + " bytes but its type needs " +
                  llvm::Twine(bytes));
    if (bytes)
      if (auto err = device->copyToDevice(block->get(), data.data(), bytes))
        return err;
  } else if (bytes) {
    if (auto err = device->fillZero(block->get(), bytes))
      return err;
  }
  addresses[value] = block->get();
  persistentBlocks[value] = std::move(*block);
  return llvm::Error::success();
}

llvm::Error PlanInterpreter::prepare(const WorkspaceModel &trivialWorkspace) {
  if (auto err = device->initialize(counter, options))
    return err;
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

  llvm::DenseMap<const Node *, size_t> indexOf;
  for (const Node &node : graph.getNodes()) {
    Instruction inst;
    inst.node = &node;
    indexOf[&node] = instructions.size();
    // The verifier's rules (checkMemorySpaceRules) pair every wait with the
    // start that defines its operand 0.
    if (isCopyWait(node)) {
      inst.copy = CopyKind::Wait;
      inst.copyStart = indexOf.lookup(node.getOperand(0)->getDefiningNode());
    } else if (isCopyStart(node)) {
      inst.copy = getMemorySpace(*node.getResult(0)) == MemorySpace::Host
                      ? CopyKind::ToHost
                      : CopyKind::ToDevice;
      inst.copyBytes = node.getResult(0)->getType().getSizeInBytes();
    }
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
  copyEvents.resize(instructions.size());
  if (auto err = options.mode == AllocationMode::Planned
                     ? placePlanned(trivialWorkspace)
                     : placeEager())
    return err;
  return prepareKernels();
}

llvm::Error PlanInterpreter::prepareKernels() {
  const bool planned = options.mode == AllocationMode::Planned;
  for (Instruction &inst : instructions) {
    if (inst.skipKernel || inst.copy != CopyKind::None)
      continue;
    KernelPreparation preparation;
    preparation.planned = planned;
    preparation.workspaceBytes = planned ? inst.workspaceBytes : 0;
    auto kernel = device->prepare(*inst.node, preparation);
    if (!kernel)
      return kernel.takeError();
    assert(*kernel && &(*kernel)->getNode() == inst.node &&
           "a device prepares the kernel of the node it is given");
    inst.kernel = std::move(*kernel);
  }
  return llvm::Error::success();
}

llvm::Error
PlanInterpreter::placePlanned(const WorkspaceModel &trivialWorkspace) {
  if (module.plan.empty()) {
    auto made = makeTrivialPlan(module, trivialWorkspace,
                                device->getWorkspaceModelName());
    if (!made)
      return made.takeError();
    trivialPlan = std::move(*made);
    plan = &trivialPlan;
  } else {
    plan = &module.plan;
    if (plan->workspaceModel != device->getWorkspaceModelName() &&
        plan->workspaceModel != kNoWorkspaceModelName)
      return fail("the plan was made for the '" +
                  (plan->workspaceModel.empty()
                       ? llvm::StringRef("unknown")
                       : llvm::StringRef(plan->workspaceModel)) +
                  "' kernel workspace model, but the " + device->getName() +
                  " backend's kernels need '" +
                  device->getWorkspaceModelName() +
                  "': compile again for this backend (--workspace=" +
                  device->getWorkspaceModelName() + ")");
  }
  if (auto err = plan->validate(module))
    return err;
  arenaBytes = plan->arenaBytes;
  auto block = DeviceBlock::create(*device, counter, arenaBytes,
                                   MemoryCategory::Temporaries);
  if (!block)
    return block.takeError();
  arena = std::move(*block);
  auto *base = static_cast<uint8_t *>(arena.get());
  // The host arena, apart: counted in its own counter, never in the device
  // peak.
  uint8_t *hostBase = nullptr;
  hostArenaBytes = plan->hostArenaBytes;
  if (hostArenaBytes) {
    auto host =
        DeviceBlock::create(*device, hostCounter, hostArenaBytes,
                            MemoryCategory::Temporaries, MemorySpace::Host);
    if (!host)
      return host.takeError();
    hostArena = std::move(*host);
    hostBase = static_cast<uint8_t *>(hostArena.get());
  }

  for (Instruction &inst : instructions) {
    for (const Value *result : inst.results) {
      if (!result || persistentBlocks.count(result))
        continue;
      const BufferAssignment *assignment = plan->lookup(result);
      if (!assignment)
        return fail("the plan has no buffer for " + valueLabel(result));
      switch (assignment->kind) {
      case StorageKind::Arena:
        addresses[result] =
            (assignment->space == MemorySpace::Host ? hostBase : base) +
            assignment->offset;
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
  for (Instruction &inst : instructions) {
    if (inst.copy == CopyKind::Wait) {
      // A wait has no kernel but must run; its result is the copy's bytes.
      inst.skipKernel = false;
      if (addresses.lookup(inst.results[0]) !=
          addresses.lookup(inst.operands[0]))
        return fail("the plan gives " + valueLabel(inst.results[0]) +
                    " storage apart from the copy it waits for");
    }
    if (const WorkspaceAssignment *workspace =
            plan->lookupWorkspace(inst.node)) {
      inst.workspace = base + workspace->offset;
      inst.workspaceBytes = workspace->size;
    }
    if (auto err = addressesOf(inst.operands, inst.operandAddresses))
      return err;
    if (auto err = addressesOf(inst.results, inst.resultAddresses))
      return err;
  }
  // Occupancy events, for per-category accounting of the arena.
  llvm::DenseMap<uint32_t, Instruction *> byStep;
  for (size_t i = 0; i != instructions.size(); ++i)
    byStep[i] = &instructions[i];
  for (const auto &[value, assignment] : plan->buffers) {
    if (assignment.kind != StorageKind::Arena || !assignment.size)
      continue;
    MemoryCounter *spaceCounter =
        assignment.space == MemorySpace::Host ? &hostCounter : &counter;
    if (Instruction *born = byStep.lookup(assignment.firstStep))
      born->slicesBorn.push_back({value, spaceCounter});
    if (Instruction *dead = byStep.lookup(assignment.lastStep))
      dead->slicesDead.push_back({value, spaceCounter});
  }
  return llvm::Error::success();
}

llvm::Error PlanInterpreter::placeEager() {
  llvm::DenseMap<const Value *, LiveInterval> intervals =
      computeLiveIntervals(module);
  for (size_t step = 0; step != instructions.size(); ++step) {
    Instruction &inst = instructions[step];
    if (isViewInstruction(*inst.node)) {
      const Value *source = inst.operands[0];
      auto it = eagerOwner.find(source);
      eagerOwner[inst.results[0]] =
          it == eagerOwner.end() ? source : it->second;
      // A CopyWait shares the copy's bytes but still waits for it.
      inst.skipKernel = inst.copy != CopyKind::Wait;
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

llvm::Error
PlanInterpreter::addressesOf(llvm::ArrayRef<const Value *> values,
                             llvm::SmallVectorImpl<void *> &out) const {
  out.clear();
  for (const Value *value : values) {
    if (!value) {
      out.push_back(nullptr);
      continue;
    }
    void *address = addresses.lookup(value);
    if (!address && value->getType().getSizeInBytes())
      return fail("value " + valueLabel(value) + " has no storage when read");
    out.push_back(address);
  }
  return llvm::Error::success();
}

llvm::Error PlanInterpreter::setInput(const Value *input,
                                      const TensorData &data) {
  if (!input->isGraphInput())
    return fail(valueLabel(input) + " is not a graph input");
  if (data.getType() != input->getType())
    return fail("input " + valueLabel(input) + " expects " +
                input->getType().str() + " but was given " +
                data.getType().str());
  if (data.getBytes().empty())
    return llvm::Error::success();
  return device->copyToDevice(addresses.lookup(input), data.getBytes().data(),
                              data.getBytes().size());
}

llvm::Error PlanInterpreter::writeValue(const Value *value,
                                        const TensorData &data) {
  if (!value->isGraphInput() && !value->isInitializer())
    return fail(valueLabel(value) +
                " is neither a graph input nor an initializer");
  if (data.getType() != value->getType())
    return fail(valueLabel(value) + " has type " + value->getType().str() +
                " but was given " + data.getType().str());
  auto it = persistentBlocks.find(value);
  if (it == persistentBlocks.end())
    return fail(valueLabel(value) + " has no storage");
  if (data.getBytes().empty())
    return llvm::Error::success();
  if (it->second.isBorrowed()) {
    // Copy on write: a mapped initializer gets an allocation of its own,
    // and every address that pointed at the mapping now points at it.
    void *mapped = it->second.get();
    MemoryCategory category = it->second.getCategory();
    it->second.reset();
    auto block = DeviceBlock::create(
        *device, counter, value->getType().getSizeInBytes(), category);
    if (!block)
      return block.takeError();
    for (auto &entry : addresses)
      if (entry.second == mapped)
        entry.second = block->get();
    for (Instruction &inst : instructions) {
      for (void *&address : inst.operandAddresses)
        if (address == mapped)
          address = block->get();
      for (void *&address : inst.resultAddresses)
        if (address == mapped)
          address = block->get();
    }
    it->second = std::move(*block);
  }
  return device->copyToDevice(it->second.get(), data.getBytes().data(),
                              data.getBytes().size());
}

llvm::Expected<TensorData>
PlanInterpreter::readValue(const Value *value) const {
  auto it = persistentBlocks.find(value);
  if (it == persistentBlocks.end())
    return fail("value " + valueLabel(value) +
                " is transient: only graph inputs, outputs and initializers "
                "can be read after a step");
  // A host copy as large as the value: allocated without throwing, so
  // running out of memory here is an error like a failed arena allocation.
  llvm::Error copyError = llvm::Error::success();
  auto copy = allocateTensorData(
      value->getType(), [&](llvm::MutableArrayRef<uint8_t> bytes) {
        if (!bytes.empty())
          copyError =
              device->copyToHost(bytes.data(), it->second.get(), bytes.size());
      });
  if (!copy) {
    llvm::consumeError(std::move(copyError));
    return fail("reading " + valueLabel(value) + ": " +
                llvm::toString(copy.takeError()));
  }
  if (copyError)
    return copyError;
  return copy;
}

llvm::Error PlanInterpreter::runInstruction(const Instruction &inst,
                                            uint64_t step) {
  NodeLaunch launch;
  launch.node = inst.node;
  launch.step = step;
  llvm::SmallVector<void *, 4> operandAddresses;
  llvm::SmallVector<void *, 2> resultAddresses;
  if (options.mode == AllocationMode::Planned) {
    launch.operands = inst.operandAddresses;
    launch.results = inst.resultAddresses;
    launch.workspace = inst.workspace;
    launch.workspaceBytes = inst.workspaceBytes;
    launch.planned = true;
  } else {
    if (auto err = addressesOf(inst.operands, operandAddresses))
      return err;
    if (auto err = addressesOf(inst.results, resultAddresses))
      return err;
    launch.operands = operandAddresses;
    launch.results = resultAddresses;
  }
  if (inst.copy != CopyKind::None)
    return runCopy(inst, &inst - instructions.data(), launch.operands,
                   launch.results);
  return device->runNode(*inst.kernel, launch);
}

llvm::Error PlanInterpreter::runCopy(const Instruction &inst, size_t index,
                                     llvm::ArrayRef<void *> operands,
                                     llvm::ArrayRef<void *> results) {
  if (inst.copy == CopyKind::Wait) {
    std::unique_ptr<DeviceEvent> event = std::move(copyEvents[inst.copyStart]);
    if (!event)
      return fail("node " + inst.node->describe() +
                  " waits for a copy that is not in flight");
    return device->waitEvent(*event);
  }
  if (!inst.copyBytes) {
    copyEvents[index] = std::make_unique<CompletedEvent>();
    return llvm::Error::success();
  }
  auto event =
      inst.copy == CopyKind::ToHost
          ? device->startCopyToHost(results[0], operands[0], inst.copyBytes)
          : device->startCopyToDevice(results[0], operands[0], inst.copyBytes);
  if (!event)
    return event.takeError();
  copyEvents[index] = std::move(*event);
  return llvm::Error::success();
}

llvm::Error PlanInterpreter::runStep(uint64_t step) {
  auto start = std::chrono::steady_clock::now();
  const bool eager = options.mode == AllocationMode::Eager;
  if (options.profile) {
    nodeTimings.clear();
    nodeTimings.reserve(instructions.size());
  }
  auto millisecondsSince = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - from)
        .count();
  };
  // A step that failed may have left copies in flight: none carries over.
  for (std::unique_ptr<DeviceEvent> &event : copyEvents)
    event.reset();
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
        MemorySpace space = getMemorySpace(*result);
        auto block = DeviceBlock::create(
            *device, space == MemorySpace::Host ? hostCounter : counter,
            result->getType().getSizeInBytes(), categories.lookup(result),
            space);
        if (!block)
          return block.takeError();
        addresses[result] = block->get();
        eagerBlocks[result] = std::move(*block);
      }
    } else {
      for (const SliceEvent &born : inst.slicesBorn)
        born.counter->transfer(
            MemoryCategory::Temporaries, categories.lookup(born.value),
            alignBuffer(born.value->getType().getSizeInBytes()));
      // The slice counts as workspace while the kernel runs.
      if (inst.workspaceBytes)
        counter.transfer(MemoryCategory::Temporaries, MemoryCategory::Workspace,
                         inst.workspaceBytes);
    }

    if (options.profile) {
      NodeTiming timing;
      timing.node = inst.node;
      timing.startMilliseconds = millisecondsSince(start);
      nodeTimings.push_back(timing);
    }
    if (!inst.skipKernel) {
      auto kernelStart = options.profile
                             ? std::chrono::steady_clock::now()
                             : std::chrono::steady_clock::time_point();
      if (auto err = runInstruction(inst, step)) {
        if (!eager)
          abandonPlannedStep(&inst - instructions.data());
        return err;
      }
      if (options.profile) {
        if (auto err = device->synchronize()) {
          if (!eager)
            abandonPlannedStep(&inst - instructions.data());
          return err;
        }
        std::string op = inst.node->getOp().str();
        auto [it, inserted] = profileIndex.try_emplace(op, profile.size());
        if (inserted)
          profile.push_back(OpProfile{op, 0, 0});
        OpProfile &entry = profile[it->second];
        ++entry.calls;
        double milliseconds = millisecondsSince(kernelStart);
        entry.milliseconds += milliseconds;
        nodeTimings.back().durationMilliseconds = milliseconds;
      }
    }
    if (options.profile)
      for (unsigned c = 0; c != kNumMemoryCategories; ++c)
        nodeTimings.back().liveBytes[c] =
            counter.getCurrentBytes(static_cast<MemoryCategory>(c));

    if (eager) {
      for (const Value *dead : inst.freeAfter)
        eagerBlocks.erase(dead);
    } else {
      if (inst.workspaceBytes)
        counter.transfer(MemoryCategory::Workspace, MemoryCategory::Temporaries,
                         inst.workspaceBytes);
      for (const SliceEvent &dead : inst.slicesDead)
        dead.counter->transfer(
            categories.lookup(dead.value), MemoryCategory::Temporaries,
            alignBuffer(dead.value->getType().getSizeInBytes()));
    }
  }
  if (auto err = device->synchronize())
    return err;
  lastStepMs = millisecondsSince(start);
  return llvm::Error::success();
}

void PlanInterpreter::abandonPlannedStep(size_t failed) {
  llvm::DenseMap<const Value *, MemoryCounter *> live;
  for (size_t i = 0; i <= failed; ++i) {
    for (const SliceEvent &born : instructions[i].slicesBorn)
      live[born.value] = born.counter;
    // The failed instruction's dead slices were never handed back.
    if (i != failed)
      for (const SliceEvent &dead : instructions[i].slicesDead)
        live.erase(dead.value);
  }
  for (const auto &[value, spaceCounter] : live)
    spaceCounter->transfer(categories.lookup(value),
                           MemoryCategory::Temporaries,
                           alignBuffer(value->getType().getSizeInBytes()));
  if (uint64_t bytes = instructions[failed].workspaceBytes)
    counter.transfer(MemoryCategory::Workspace, MemoryCategory::Temporaries,
                     bytes);
}

std::vector<OpProfile> PlanInterpreter::getProfile() const {
  std::vector<OpProfile> sorted = profile;
  llvm::sort(sorted, [](const OpProfile &a, const OpProfile &b) {
    return a.milliseconds > b.milliseconds;
  });
  return sorted;
}

} // namespace

llvm::Expected<std::unique_ptr<Executable>> gmopt::createPlanInterpreter(
    const Module &module, const ExecutorOptions &options,
    std::unique_ptr<Device> device, const WorkspaceModel &trivialWorkspace) {
  auto executable =
      std::make_unique<PlanInterpreter>(module, options, std::move(device));
  if (auto err = executable->prepare(trivialWorkspace))
    return err;
  return std::unique_ptr<Executable>(std::move(executable));
}
