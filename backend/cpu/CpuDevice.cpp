//===- CpuDevice.cpp - The CPU backend's device ---------------------------===//
//
// The CPU backend as a Device of the plan interpreter: device memory is host
// memory (aligned_alloc), copies are memcpy, a node's kernel is prepared
// once (prepareCpuKernel: the table entry found by schema, arity checked,
// attributes decoded into the entry's state) and each launch runs that entry
// (runPreparedCpuKernel) on tensor views built from the addresses the
// interpreter placed. Under a plan, a kernel's scratch comes from the node's
// workspace slice and only what does not fit is allocated (and counted as
// unplanned) from host memory counted in the interpreter's MemoryCounter. The
// workspace model is getCpuKernelWorkspaceBytes, named `cpu`. The host arena of
// offloaded tensors is Device's default: blocks of their own (never this
// device's allocations), counted by the interpreter apart from device memory,
// and copied synchronously (each copy's event is complete when it returns); so
// the peak the CPU backend measures is the device peak a GPU would see.
//
//===----------------------------------------------------------------------===//

#include "backend/Device.h"
#include "backend/Executor.h"
#include "backend/PlanInterpreter.h"
#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Mpi.h"

#include "llvm/ADT/SmallVector.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A node's CPU kernel, prepared once: its table entry and decoded state.
class CpuPreparedKernel final : public PreparedKernel {
public:
  CpuPreparedKernel(const Node &node, PreparedCpuKernel kernel)
      : PreparedKernel(node), kernel(std::move(kernel)) {}

  /// What every launch of the node runs.
  const PreparedCpuKernel &getKernel() const { return kernel; }

private:
  PreparedCpuKernel kernel;
};

class CpuDevice final : public Device {
public:
  llvm::StringRef getName() const override { return "cpu"; }
  bool canReadHostMemory() const override { return true; }
  llvm::StringRef getWorkspaceModelName() const override {
    return kCpuWorkspaceModelName;
  }

  llvm::Error initialize(MemoryCounter &counter,
                         const ExecutorOptions &options) override {
    scratchAllocator = std::make_unique<CountingAllocator>(counter);
    context.emplace(*scratchAllocator);
    context->setSeed(options.seed);
    context->setNumThreads(options.threads);
    return llvm::Error::success();
  }

  llvm::Expected<std::unique_ptr<PreparedKernel>>
  prepare(const Node &node, const KernelPreparation &) override {
    auto kernel = prepareCpuKernel(node);
    if (!kernel)
      return kernel.takeError();
    return std::make_unique<CpuPreparedKernel>(node, std::move(*kernel));
  }

  llvm::Expected<void *> allocate(uint64_t bytes) override {
    uint64_t rounded = alignBuffer(bytes);
    if (rounded < bytes)
      return fail("cannot allocate " + llvm::Twine(bytes) +
                  " bytes: the size overflows");
    void *address = std::aligned_alloc(kBufferAlignment,
                                       rounded ? rounded : kBufferAlignment);
    if (!address)
      return llvm::createStringError(std::errc::not_enough_memory,
                                     "out of memory allocating %llu bytes",
                                     static_cast<unsigned long long>(bytes));
    return address;
  }
  void deallocate(void *address) override { std::free(address); }

  llvm::Error copyToDevice(void *target, const void *source,
                           uint64_t bytes) override {
    if (bytes)
      std::memcpy(target, source, bytes);
    return llvm::Error::success();
  }
  llvm::Error copyToHost(void *target, const void *source,
                         uint64_t bytes) const override {
    if (bytes)
      std::memcpy(target, source, bytes);
    return llvm::Error::success();
  }
  llvm::Error fillZero(void *target, uint64_t bytes) override {
    if (bytes)
      std::memset(target, 0, bytes);
    return llvm::Error::success();
  }

  llvm::Error runNode(const PreparedKernel &kernel,
                      const NodeLaunch &launch) override;

  uint64_t getUnplannedScratchBytes() const override {
    return context ? context->getUnplannedScratchBytes() : 0;
  }

private:
  std::unique_ptr<CountingAllocator> scratchAllocator;
  std::optional<CpuKernelContext> context;
};

llvm::Error CpuDevice::runNode(const PreparedKernel &kernel,
                               const NodeLaunch &launch) {
  const Node &node = *launch.node;
  assert(&kernel.getNode() == &node && "the kernel prepared for the node");
  // Open MPI progresses a non-blocking collective only inside MPI calls:
  // one MPI_Test per started all-reduce between nodes lets it advance
  // while the backward pass computes (issue 19's overlap).
  if (getPendingCollectiveCount() != 0)
    progressCollectives();
  auto makeViews = [](llvm::ArrayRef<Value *> values,
                      llvm::ArrayRef<void *> addresses,
                      llvm::SmallVectorImpl<TensorView> &views) -> llvm::Error {
    views.resize(values.size());
    for (size_t i = 0; i != values.size(); ++i) {
      if (!values[i])
        continue;
      auto view = TensorView::get(addresses[i], values[i]->getType());
      if (!view)
        return view.takeError();
      views[i] = std::move(*view);
    }
    return llvm::Error::success();
  };
  llvm::SmallVector<Value *, 4> operandValues = node.getOperands();
  llvm::SmallVector<Value *, 2> resultValues = node.getResults();
  assert(operandValues.size() == launch.operands.size() &&
         resultValues.size() == launch.results.size() &&
         "a launch has one address per operand and result");
  llvm::SmallVector<TensorView, 4> inputViews;
  llvm::SmallVector<TensorView, 2> outputViews;
  if (auto err = makeViews(operandValues, launch.operands, inputViews))
    return err;
  if (auto err = makeViews(resultValues, launch.results, outputViews))
    return err;
  llvm::SmallVector<const TensorView *, 4> inputs;
  for (size_t i = 0; i != operandValues.size(); ++i)
    inputs.push_back(operandValues[i] ? &inputViews[i] : nullptr);
  llvm::SmallVector<TensorView *, 2> outputs;
  for (size_t i = 0; i != resultValues.size(); ++i)
    outputs.push_back(resultValues[i] ? &outputViews[i] : nullptr);

  context->setStep(launch.step);
  // Planned: scratch comes from the node's slice (none: every request is
  // unplanned). Eager: kernels allocate their scratch.
  if (launch.planned)
    context->setWorkspaceSlice(launch.workspace, launch.workspaceBytes);
  llvm::Error err = runPreparedCpuKernel(
      static_cast<const CpuPreparedKernel &>(kernel).getKernel(), node, inputs,
      outputs, *context);
  if (launch.planned)
    context->clearWorkspaceSlice();
  return err;
}

} // namespace

std::unique_ptr<Device> gmopt::createCpuDevice() {
  return std::make_unique<CpuDevice>();
}

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareCpuExecutable(const Module &module,
                            const ExecutorOptions &options) {
  return createPlanInterpreter(module, options, createCpuDevice(),
                               getCpuKernelWorkspaceBytes);
}
