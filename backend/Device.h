//===- Device.h - What a backend provides the plan interpreter --*- C++ -*-===//
//
// The small interface between gmopt's one plan interpreter
// (backend/PlanInterpreter.cpp) and a backend. A Device owns no policy: it
// allocates and frees raw device memory, copies bytes between host and
// device, prepares each node's kernel once (prepare: the kernel table is
// searched, the node's arity checked against its schema, attributes decoded
// and algorithms chosen, so a node the device cannot run fails before the
// first step), and runs a prepared kernel on operands and results the
// interpreter has placed, with the workspace slice the plan reserved for the
// node. A launch does no lookup and decodes nothing. Everything else -
// placement of arena offsets, aliases and in-place groups, accounting by
// category, eager mode, the step loop, profiling - is the interpreter's, so
// every backend measures and executes a plan the same way. A Device also names
// the workspace model its kernels follow, so a plan made for other kernels is
// refused instead of silently overrunning its slices.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_DEVICE_H
#define GMOPT_BACKEND_DEVICE_H

#include "backend/Memory.h"
#include "ir/IR.h"
#include "ir/MemorySpaces.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>

namespace gmopt {

struct ExecutorOptions;
class OpSchema;

/// One kernel invocation, with every address already placed by the
/// interpreter. Addresses are device addresses.
struct NodeLaunch {
  /// The node to run.
  const Node *node = nullptr;
  /// One address per operand (null for an absent optional operand).
  llvm::ArrayRef<void *> operands;
  /// One address per result (null for an absent optional result).
  llvm::ArrayRef<void *> results;
  /// The node's planned workspace slice; null in eager mode, or when the
  /// plan reserved none. Scratch beyond it is the device's to allocate and
  /// report as unplanned.
  void *workspace = nullptr;
  /// Bytes of the workspace slice.
  uint64_t workspaceBytes = 0;
  /// True when the node runs under a plan (workspace is authoritative, even
  /// when empty); false in eager mode, where kernels allocate scratch.
  bool planned = false;
  /// The training step, for random streams.
  uint64_t step = 0;
};

/// What the interpreter knows, when it prepares a node's kernel, of every
/// launch of that node.
struct KernelPreparation {
  /// True when the node runs under a plan: each launch gets the same
  /// workspace slice of workspaceBytes (see NodeLaunch::planned).
  bool planned = false;
  /// Bytes of the node's planned workspace slice (0: none, or eager).
  uint64_t workspaceBytes = 0;
};

/// A node's kernel as a device prepared it, once: whatever the device
/// decoded from the node (its kernel-table entry, decoded attributes and
/// shapes, a chosen algorithm, scratch sizes). Only the device that made it
/// reads it, in runNode; the interpreter keeps it in the node's
/// instruction.
class PreparedKernel {
public:
  virtual ~PreparedKernel();

  /// The node the kernel was prepared for.
  const Node &getNode() const { return node; }

protected:
  explicit PreparedKernel(const Node &node) : node(node) {}

private:
  const Node &node;
};

// MemorySpace (device, host) is the plan's (ir/MemorySpaces.h): passes plan
// each buffer in a space and the interpreter places it there.

/// Work a device launched that later work can wait for: recorded after an
/// asynchronous copy (or, on CUDA, any stream's work) and waited on by the
/// instruction that needs its bytes. Only the device that made it reads it.
class DeviceEvent {
public:
  virtual ~DeviceEvent();
};

/// An event complete when it is made: the synchronous defaults' copies, and a
/// copy of no bytes.
class CompletedEvent final : public DeviceEvent {};

/// The schema of \p node, which \p node's operand and result counts and
/// present required operands must match: the start of every device's
/// prepare. An op the registry does not know is "no DEVICE kernel for
/// 'OP'" (\p deviceName: `CPU`, `CUDA`); an arity mismatch names the node
/// and what the schema expects.
llvm::Expected<const OpSchema *> getKernelSchema(const Node &node,
                                                 llvm::StringRef deviceName);

/// A backend's memory and kernels.
class Device {
public:
  virtual ~Device();

  /// `cpu`, `cuda`: the backend's name, for messages.
  virtual llvm::StringRef getName() const = 0;
  /// The workspace model the device's kernels follow (the name planning
  /// records in ExecutionPlan::workspaceModel).
  virtual llvm::StringRef getWorkspaceModelName() const = 0;

  /// Called once before anything else: kernel scratch the device allocates
  /// itself is reported to \p counter (Workspace/Temporaries), and the
  /// device adopts the options it honours (threads, seed).
  virtual llvm::Error initialize(MemoryCounter &counter,
                                 const ExecutorOptions &options) = 0;
  /// Prepares \p node's kernel for every later launch (called once per
  /// instruction, after initialize): an error naming \p node when the
  /// device has no kernel for it, its arity does not match its schema, or
  /// its types or attributes are unsupported.
  virtual llvm::Expected<std::unique_ptr<PreparedKernel>>
  prepare(const Node &node, const KernelPreparation &preparation) = 0;

  /// Allocates \p bytes of device memory aligned to kBufferAlignment; a
  /// zero-size request gives a distinct valid address. The caller counts
  /// the bytes. Out of memory is an error.
  virtual llvm::Expected<void *> allocate(uint64_t bytes) = 0;
  /// Frees a block returned by allocate; null is ignored.
  virtual void deallocate(void *address) = 0;
  /// Copies \p bytes from host \p source to device \p target.
  virtual llvm::Error copyToDevice(void *target, const void *source,
                                   uint64_t bytes) = 0;
  /// Copies \p bytes from device \p source to host \p target.
  virtual llvm::Error copyToHost(void *target, const void *source,
                                 uint64_t bytes) const = 0;
  /// Allocates \p bytes of host memory for the host arena (page-locked on
  /// CUDA, so asynchronous copies overlap compute), aligned to
  /// kBufferAlignment. The caller counts the bytes apart from device memory.
  /// The default allocates ordinary host memory.
  virtual llvm::Expected<void *> allocateHost(uint64_t bytes);
  /// Frees a block returned by allocateHost; null is ignored.
  virtual void deallocateHost(void *address);
  /// Starts copying \p bytes from device \p source to host \p target after
  /// the work launched so far, on the device's copy stream where it has one,
  /// and returns the event that completes with the copy. The default copies
  /// synchronously (after synchronize) and returns a completed event.
  virtual llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToHost(void *target, const void *source, uint64_t bytes);
  /// Starts copying \p bytes from host \p source to device \p target, as
  /// startCopyToHost.
  virtual llvm::Expected<std::unique_ptr<DeviceEvent>>
  startCopyToDevice(void *target, const void *source, uint64_t bytes);
  /// Makes the work launched after this call wait until \p event, made by
  /// this device, completes (the host does not block where the device can
  /// order the wait on its streams).
  virtual llvm::Error waitEvent(const DeviceEvent &event);
  /// Sets \p bytes of device memory at \p target to zero.
  virtual llvm::Error fillZero(void *target, uint64_t bytes) = 0;
  /// Whether kernels can read host memory in place (the CPU device): then a
  /// read-only initializer mapped from an external-data file is used where
  /// it lies instead of being copied into an allocation.
  virtual bool canReadHostMemory() const { return false; }

  /// Runs \p kernel, which this device prepared for launch.node.
  virtual llvm::Error runNode(const PreparedKernel &kernel,
                              const NodeLaunch &launch) = 0;
  /// Waits until every launched kernel has finished (a no-op on devices
  /// that run synchronously). Timing and reads happen after it.
  virtual llvm::Error synchronize() { return llvm::Error::success(); }

  /// Scratch bytes (aligned, summed over every launch) that planned
  /// launches needed beyond their workspace slices. Nonzero means the plan
  /// under-reserved some kernel's scratch.
  virtual uint64_t getUnplannedScratchBytes() const { return 0; }
};

} // namespace gmopt

#endif // GMOPT_BACKEND_DEVICE_H
