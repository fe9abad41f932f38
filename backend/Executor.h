//===- Executor.h - The backend interface: prepare, step, report -*- C++ -*-===//
//
// What every backend offers the runtime: prepare a compiled Module into an
// Executable (allocating persistent storage and, in planned mode, the one
// arena the plan lays out), then run training steps on it and report the
// memory it measured. Values cross the interface as host TensorData; a
// backend keeps its own storage. The optimizer is part of the module (graph
// ops whose state is persistent graph inputs), so an Executable only runs
// steps. Every backend's Executable is the plan interpreter
// (backend/PlanInterpreter.h) over the backend's Device.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_EXECUTOR_H
#define GMOPT_BACKEND_EXECUTOR_H

#include "backend/Memory.h"
#include "ir/Attribute.h"
#include "ir/Module.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {

/// How a backend places the values of a step.
enum class AllocationMode {
  /// Each tensor allocated at its definition and freed after its last use
  /// (views share storage): what a PyTorch-eager user gets.
  Eager,
  /// One arena laid out by module.plan (a trivial plan when none exists).
  Planned,
};
llvm::StringRef allocationModeName(AllocationMode mode);

/// Options for preparing an Executable.
struct ExecutorOptions {
  /// Allocation strategy.
  AllocationMode mode = AllocationMode::Planned;
  /// Seed of random ops (Dropout).
  uint64_t seed = 0;
  /// Worker threads (0 = all cores).
  unsigned threads = 0;
  /// Time every kernel and keep per-op totals (getProfile) and the last
  /// step's per-node timings (getLastStepNodeTimings).
  bool profile = false;
  /// CUDA backend, planned mode: run the first step as usual (warm-up),
  /// capture the second into a CUDA graph and replay it for every later
  /// step (`gmopt-run --cuda-graph`). A module or option that cannot be
  /// captured is refused when the executable is prepared, naming why
  /// (checkCudaGraphCapturable, backend/cuda/CudaGraphCapture.h).
  bool cudaGraph = false;
};

/// One node of the last step, as ExecutorOptions::profile records it.
struct NodeTiming {
  /// The node (every node of the schedule, views included, in order).
  const Node *node = nullptr;
  /// When its kernel started, in milliseconds since the step started.
  double startMilliseconds = 0;
  /// How long it ran (after a device synchronization; 0 for a view).
  double durationMilliseconds = 0;
  /// Bytes counted per category while it ran (its operands, results and
  /// workspace live).
  CategoryBytes liveBytes{};
};

/// Time spent in one op type over the steps run so far.
struct OpProfile {
  /// The op, as OpName::str() spells it.
  std::string op;
  /// Kernel invocations.
  uint64_t calls = 0;
  /// Total wall time in milliseconds.
  double milliseconds = 0;
};

/// A prepared module that runs training steps.
class Executable {
public:
  virtual ~Executable();

  /// The module this executes.
  virtual const Module &getModule() const = 0;
  /// Copies \p data into the storage of graph input \p input. The type must
  /// match the input's type exactly.
  virtual llvm::Error setInput(const Value *input, const TensorData &data) = 0;
  /// Overwrites persistent value \p value (a graph input or an
  /// initializer, e.g. the loss-gradient seed) with \p data of exactly its
  /// type.
  virtual llvm::Error writeValue(const Value *value,
                                 const TensorData &data) = 0;
  /// Reads the current contents of a persistent value (graph inputs, graph
  /// outputs, initializers).
  virtual llvm::Expected<TensorData> readValue(const Value *value) const = 0;
  /// Runs one forward+backward step. \p step numbers random streams.
  virtual llvm::Error runStep(uint64_t step) = 0;
  /// The gradient of trainable parameter \p param after the last step(s):
  /// the result of its InPlaceAccumulator (V1) node, else its accumulation
  /// buffer, else its gradient graph output.
  virtual llvm::Expected<TensorData> readGradient(const ParamInfo &param) const;
  /// Memory measured since prepare (or the last resetPeak).
  virtual MemoryReport getMemoryReport() const = 0;
  /// Restarts the peak measurement from the current live bytes.
  virtual void resetPeak() = 0;
  /// Wall time of the last runStep in milliseconds.
  virtual double getLastStepMilliseconds() const = 0;
  /// Bytes of the planned arena (0 in eager mode).
  virtual uint64_t getArenaBytes() const = 0;
  /// Bytes of the planned host arena (offloaded tensors, apart from the
  /// device memory getArenaBytes and the peak count; 0: none).
  virtual uint64_t getHostArenaBytes() const { return 0; }
  /// Planned mode: kernel scratch bytes (aligned, summed over all steps
  /// run) that did not fit the plan's workspace slices and were allocated
  /// on top of it. Nonzero means the measured peak can exceed the plan.
  virtual uint64_t getUnplannedScratchBytes() const { return 0; }
  /// Per-op kernel times, most expensive first; empty unless prepared with
  /// ExecutorOptions::profile.
  virtual std::vector<OpProfile> getProfile() const { return {}; }
  /// Every node of the last runStep in schedule order; empty unless
  /// prepared with ExecutorOptions::profile.
  virtual std::vector<NodeTiming> getLastStepNodeTimings() const { return {}; }
};

/// Prepares \p module for the CPU backend. The module must outlive the
/// Executable, have static shapes, and pass the verifier.
llvm::Expected<std::unique_ptr<Executable>>
prepareCpuExecutable(const Module &module, const ExecutorOptions &options);

} // namespace gmopt

#endif // GMOPT_BACKEND_EXECUTOR_H
