//===- CpuKernel.h - Running one IR node on the CPU -------------*- C++ -*-===//
//
// The CPU backend's kernel library entry point. runCpuKernel executes one
// Node on tensors the caller has placed: inputs as views (null for absent
// optional operands) and outputs preallocated from the node's static result
// types (null for absent optional results). The table is filled once from
// the per-family kernel files; prepareCpuKernel finds a node's entry by its
// schema and checks its arity once, and the prepared entry then runs each
// launch with no lookup.
//
// Element types: kernels compute float math in fp32 (and f64 where the op is
// used on doubles); tensors stored as f16 or bf16 are widened to fp32 staging
// copies on entry and rounded back (to nearest even) on exit, generically,
// for every float kernel. Integer and bool tensors are used as they are
// (shape arithmetic, indices, masks). Data-movement kernels move bytes of
// any element type.
//
// Random numbers (Dropout): a counter-based Philox4x32-10 stream keyed by
// the context's seed, the context's step and the node's stream id (see
// getRandomStreamId and the exact specification in backend/Philox.h), indexed
// by element: a run is reproducible and does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_CPUKERNEL_H
#define GMOPT_BACKEND_CPU_CPUKERNEL_H

#include "backend/Memory.h"
#include "backend/cpu/Tensor.h"
#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gmopt {
class Device;
class OpSchema;

/// The CPU backend's Device for the plan interpreter (backend/Device.h).
std::unique_ptr<Device> createCpuDevice();

namespace cpu {

/// A kernel-table entry, and a node's kernel prepared from one
/// (KernelSupport.h).
struct KernelInfo;
struct PreparedCpuKernel;

/// Per-run state kernels need: where scratch memory comes from, the random
/// seed and step, and how many threads to use.
class CpuKernelContext {
public:
  /// A context whose scratch memory is counted by \p allocator; the thread
  /// count defaults to the hardware concurrency.
  explicit CpuKernelContext(CountingAllocator &allocator);

  /// The allocator scratch memory is counted by.
  CountingAllocator &getAllocator() const { return allocator; }

  /// Allocates an uninitialized scratch tensor under \p category (library
  /// scratch is Workspace; fp32 staging copies are Temporaries). It is freed
  /// when the returned buffer is destroyed. While a workspace slice is set,
  /// scratch is carved from it (at aligned sizes, in request order) and
  /// only what does not fit comes from the allocator, counted as unplanned.
  /// Call it from the kernel's calling thread, not from parallel workers.
  llvm::Expected<TensorBuffer>
  allocateScratch(DType dtype, llvm::ArrayRef<int64_t> shape,
                  MemoryCategory category = MemoryCategory::Workspace);

  /// Planned execution: scratch for the next kernel comes from [\p base,
  /// base + \p bytes), the node's planned workspace (\p bytes may be 0).
  void setWorkspaceSlice(void *base, uint64_t bytes);
  /// Back to allocating all scratch (eager execution).
  void clearWorkspaceSlice();
  /// Scratch bytes (aligned) allocated outside a set workspace slice, since
  /// construction: nonzero means the plan under-reserved a kernel's scratch
  /// (getCpuKernelWorkspaceBytes disagrees with the kernel).
  uint64_t getUnplannedScratchBytes() const { return unplannedScratchBytes; }

  /// Threads kernels may use (>= 1). Results never depend on it.
  unsigned getNumThreads() const { return numThreads; }
  /// Sets the thread count (0 means the hardware concurrency).
  void setNumThreads(unsigned threads);

  /// The random seed of the run.
  uint64_t getSeed() const { return seed; }
  void setSeed(uint64_t newSeed) { seed = newSeed; }
  /// The training step (or any counter the caller advances between runs so
  /// that random ops draw fresh numbers).
  uint64_t getStep() const { return step; }
  void setStep(uint64_t newStep) { step = newStep; }

private:
  CountingAllocator &allocator;
  unsigned numThreads;
  /// The planned workspace slice, when one is set.
  bool sliceActive = false;
  uint8_t *sliceBase = nullptr;
  uint64_t sliceBytes = 0;
  uint64_t sliceUsed = 0;
  uint64_t unplannedScratchBytes = 0;
  uint64_t seed = 0;
  uint64_t step = 0;
};

/// Runs \p node. \p inputs has one entry per operand (null for an absent
/// optional operand) and \p outputs one per result (null for an absent
/// optional result); outputs are preallocated with the node's result types.
/// Returns an error naming the node for an op with no CPU kernel, unsupported
/// element types, attributes or shapes, and bad data (out-of-range indices,
/// integer division by zero...).
llvm::Error runCpuKernel(const Node &node,
                         llvm::ArrayRef<const TensorView *> inputs,
                         llvm::ArrayRef<TensorView *> outputs,
                         CpuKernelContext &ctx);

/// \p node's kernel, prepared once: its kernel-table entry found by its
/// schema, and the node's attributes decoded into the entry's state. An
/// error names the node for an op without a CPU kernel, an operand or
/// result count its schema does not allow, an operand or result absent that
/// the kernel needs, or attributes and types the kernel does not support.
llvm::Expected<PreparedCpuKernel> prepareCpuKernel(const Node &node);

/// Runs \p kernel, which prepareCpuKernel returned for \p node, as
/// runCpuKernel does but with no lookup, no arity check and no attribute
/// decode.
llvm::Error runPreparedCpuKernel(const PreparedCpuKernel &kernel,
                                 const Node &node,
                                 llvm::ArrayRef<const TensorView *> inputs,
                                 llvm::ArrayRef<TensorView *> outputs,
                                 CpuKernelContext &ctx);

/// The scratch bytes runCpuKernel may request for \p node (each request
/// rounded up to kBufferAlignment): the kernel's own scratch plus fp32
/// staging copies of f16/bf16 tensors. 0 for ops without a kernel or with
/// non-static shapes. This is the CPU backend's WorkspaceModel: the planner
/// reserves it as an arena slice and planned execution hands it to the
/// kernel.
uint64_t getCpuKernelWorkspaceBytes(const Node &node);

/// The name of the CPU backend's workspace model (getCpuKernelWorkspaceBytes)
/// as plans record it.
constexpr llvm::StringLiteral kCpuWorkspaceModelName = "cpu";

/// True if a CPU kernel is registered for (\p domain, \p opType).
bool hasCpuKernel(llvm::StringRef domain, llvm::StringRef opType);

/// Every (domain, op type) with a CPU kernel, as OpName::str() spells them,
/// sorted.
std::vector<std::string> listCpuKernels();

/// The id that separates the random streams of different random nodes:
/// Node::getStreamId(), set once at import (from ONNX Runtime's `seed`
/// attribute, else computeStreamId) and carried by clones, so a clone
/// draws its original's numbers whatever the names. Fails for a node
/// without one.
llvm::Expected<uint64_t> getRandomStreamId(const Node &node);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_CPUKERNEL_H
