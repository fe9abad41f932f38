//===- Plan.h - The execution plan: buffers, arena, memory figures -*- C++ -*-===//
//
// The plan is the contract between memory passes and backends. Passes write
// it (plan-buffers), `.gm` stores it, backends execute from it; a backend
// never plans and a pass never allocates. The schedule is the graph's node
// order. Every value gets a BufferAssignment: a slice of one arena (with the
// live interval that justifies sharing the slice), a persistent allocation,
// an alias of another value's storage (views, in-place results) or constant
// initializer bytes. Arena slices are in one of two memory spaces
// (ir/MemorySpaces.h), each with an arena of its own: the device arena and
// the host arena that holds offloaded tensors; the planned device peak
// excludes the host arena. One memory vocabulary is used everywhere:
// MemoryCategory, with names the JSON reports use.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_PLAN_H
#define GMOPT_IR_PLAN_H

#include "ir/MemorySpaces.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;
class Node;
class Value;

/// What a byte of training memory is for.
enum class MemoryCategory : uint8_t {
  /// Trainable and frozen parameters (and other model constants).
  Parameters,
  /// Gradients, including gradient accumulation buffers.
  Gradients,
  /// Optimizer state (momenta, step counters...).
  OptimizerState,
  /// Forward values kept alive for the backward pass (and data inputs).
  Activations,
  /// Everything else that is short-lived.
  Temporaries,
  /// Library scratch (im2col buffers, cuDNN workspace...).
  Workspace,
};

/// Number of MemoryCategory enumerators.
constexpr unsigned kNumMemoryCategories = 6;
/// Alignment of every planned buffer and of every backend allocation.
constexpr uint64_t kBufferAlignment = 256;

/// `parameters`, `gradients`, `optimizer_state`, `activations`,
/// `temporaries`, `workspace`.
llvm::StringRef memoryCategoryName(MemoryCategory category);
/// Inverse of memoryCategoryName.
std::optional<MemoryCategory> parseMemoryCategory(llvm::StringRef name);
/// Rounds \p bytes up to kBufferAlignment.
inline uint64_t alignBuffer(uint64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

/// Bytes per category.
using CategoryBytes = std::array<uint64_t, kNumMemoryCategories>;

/// How a value's storage is provided at run time.
enum class StorageKind : uint8_t {
  /// A slice [offset, offset + size) of its memory space's arena, live
  /// over [firstStep, lastStep] of the schedule.
  Arena,
  /// An allocation of its own for the whole step (parameters, gradient
  /// buffers, graph outputs).
  Persistent,
  /// The storage of another value (views, in-place results).
  Alias,
  /// Read-only initializer bytes.
  Constant,
};
llvm::StringRef storageKindName(StorageKind kind);

/// Where one value lives.
struct BufferAssignment {
  StorageKind kind = StorageKind::Arena;
  MemoryCategory category = MemoryCategory::Temporaries;
  /// The memory space of the value's storage: an Arena slice is in that
  /// space's arena; an Alias is in its owner's space. Always the space the
  /// graph gives the value (getMemorySpace); the validator checks it.
  MemorySpace space = MemorySpace::Device;
  /// Arena offset (Arena only), a multiple of kBufferAlignment.
  uint64_t offset = 0;
  /// Bytes of the value (unaligned).
  uint64_t size = 0;
  /// The value whose storage this one shares (Alias only).
  const Value *aliasOf = nullptr;
  /// Schedule positions of the definition and the last use (node indices;
  /// graph inputs and initializers are defined at step 0).
  uint32_t firstStep = 0;
  uint32_t lastStep = 0;
};

/// Kernel scratch of one node (im2col columns, staging copies...): a slice
/// of the arena live during that node's step only. Backends hand it to the
/// node's kernel instead of allocating.
struct WorkspaceAssignment {
  /// Arena offset, a multiple of kBufferAlignment.
  uint64_t offset = 0;
  /// Bytes reserved, a nonzero multiple of kBufferAlignment.
  uint64_t size = 0;
  /// Schedule position of the node.
  uint32_t step = 0;
};

/// The static memory figures of a plan (see DESIGN.md's vocabulary). Every
/// byte count is at allocation size (each tensor rounded up to
/// kBufferAlignment), as the backends' counting allocators measure it.
struct MemoryFigures {
  /// Sum of all tensor bytes, no reuse (views excluded: they never own
  /// bytes).
  uint64_t naiveBytes = 0;
  /// Estimated peak of eager execution: every transient tensor allocated at
  /// its definition and freed after its last use, views sharing their
  /// source, no in-place reuse, plus all persistent bytes. The real eager
  /// baseline is measured by a backend.
  uint64_t eagerEstimateBytes = 0;
  /// Live-byte maximum over the schedule of non-persistent values (LOAD).
  uint64_t lowerBoundBytes = 0;
  /// The schedule step where lowerBoundBytes occurs.
  uint32_t lowerBoundStep = 0;
  /// Arena size (the device arena).
  uint64_t arenaBytes = 0;
  /// Size of the host arena (offloaded tensors); not part of the device
  /// peak.
  uint64_t hostArenaBytes = 0;
  /// Persistent bytes per category.
  CategoryBytes persistentBytes{};
  /// Bytes that in-place reuse saved.
  uint64_t inPlaceSavedBytes = 0;
  /// The largest kernel workspace reserved for one step (included in the
  /// lower bound and the arena).
  uint64_t workspaceBytes = 0;

  /// Sum of persistentBytes.
  uint64_t totalPersistentBytes() const;
  /// The planned device peak: arenaBytes + totalPersistentBytes() (the
  /// host arena is apart).
  uint64_t plannedBytes() const { return arenaBytes + totalPersistentBytes(); }
  /// arena / lower bound - 1 (0 when the bound is 0).
  double fragmentation() const;
};

/// A complete buffer plan for a module's graph in its current node order.
class ExecutionPlan {
public:
  /// True when no plan has been made.
  bool empty() const { return buffers.empty(); }
  void clear();

  /// The assignment of \p value; null if unplanned.
  const BufferAssignment *lookup(const Value *value) const;
  /// Follows Alias links to the value that owns the storage.
  const Value *storageOwner(const Value *value) const;

  /// The workspace slice of \p node; null if it has none.
  const WorkspaceAssignment *lookupWorkspace(const Node *node) const;

  /// Every planned value's assignment.
  llvm::DenseMap<const Value *, BufferAssignment> buffers;
  /// Kernel workspace slices, by node (nodes that need none are absent).
  llvm::DenseMap<const Node *, WorkspaceAssignment> workspaces;
  /// Size of the device arena in bytes (a multiple of kBufferAlignment).
  uint64_t arenaBytes = 0;
  /// Size of the host arena in bytes (a multiple of kBufferAlignment): the
  /// slices of host-space values (0 when nothing is offloaded).
  uint64_t hostArenaBytes = 0;
  /// The kernel workspace model the plan reserved scratch for (`cpu`;
  /// kNoWorkspaceModelName when it reserved none). A backend runs only plans
  /// made for its own model or for none (its kernels' scratch is then
  /// allocated outside the plan and reported as unplanned).
  std::string workspaceModel;
  /// Static figures recorded by the planner.
  MemoryFigures figures;

  /// Checks the plan against \p module: every present value is planned;
  /// each value is in the memory space the graph gives it and an alias in
  /// its owner's space; arena slices (values' and workspaces') are aligned,
  /// inside their space's arena (workspaces: the device's), and no two
  /// slices of one space overlap in both address and live interval; each
  /// workspace belongs to a node of the graph at its step; aliases point at
  /// planned values of the same or larger size, and an alias of an arena
  /// slice lives within the slice's interval. Nothing recorded is trusted
  /// where the graph can tell: arena storage must be live over the interval
  /// re-derived from the graph (computeLiveIntervals) of every value read
  /// through it, and an alias must share its view source's bytes or those of
  /// an operand its node may overwrite in place. Returns the first
  /// violation.
  llvm::Error validate(const Module &module) const;
  /// True if \p value may share \p target's storage: \p target is (or owns
  /// the storage of) \p value's view source, or an operand of \p value's
  /// type in arena storage that its node's in-place result may overwrite.
  bool aliasIsRelated(const Value *value, const Value *target) const;
  /// Prints one line per value in schedule order, then the figures.
  void print(const Module &module, llvm::raw_ostream &os) const;
};

/// Scratch bytes a backend's kernel may use while it runs \p node, beyond
/// the node's operands and results (0: none). The target backend provides
/// it; the planner reserves an arena slice of that size for the node's step
/// (WorkspaceAssignment).
using WorkspaceModel = std::function<uint64_t(const Node &node)>;

/// The name a plan records when it reserved no kernel workspace.
constexpr llvm::StringLiteral kNoWorkspaceModelName = "none";

/// The operand whose bytes \p node's result 0 shares, or null when \p node
/// is not a view. This is the one view rule that liveness, every plan and
/// every executor (planned and eager) follow: a node of a TraitView op
/// (Reshape, Squeeze, Identity...) with operand 0 and result 0 present is a
/// view of operand 0 unless result 0 is a graph output (persistent: it gets
/// storage of its own and the node copies) or their byte sizes differ. A
/// view keeps its source's storage alive until the view's last use, as in an
/// eager runtime; a copy does not.
const Value *getViewSource(const Node &node);

/// Live interval of a value over the schedule (node order).
struct LiveInterval {
  /// Node index of the definition (0 for inputs and initializers).
  uint32_t firstStep = 0;
  /// Node index of the last use (firstStep if unused; the last step for
  /// graph outputs).
  uint32_t lastStep = 0;
};

/// Live intervals of every present value of \p module's graph, with views
/// (TraitView ops) extending the interval of the value they alias.
llvm::DenseMap<const Value *, LiveInterval>
computeLiveIntervals(const Module &module);

/// The category of \p value in \p module's training step, from the training
/// signature and the nodes' phases: parameters and constants → Parameters;
/// gradients and accumulation buffers → Gradients; each parameter's
/// optimizer state and the step_count slot → OptimizerState; data inputs
/// and forward values read outside the forward phase → Activations;
/// everything else → Temporaries.
llvm::DenseMap<const Value *, MemoryCategory>
categorizeValues(const Module &module);

/// True if \p value must have storage for the whole step: graph inputs,
/// graph outputs, and values the optimizer or the runtime reads after the
/// step (gradient accumulation buffers).
bool isPersistentValue(const Module &module, const Value *value);

/// The plan a module gets before any planning pass runs: each transient
/// value its own arena slice (no reuse), persistent values their own
/// allocations, views aliased; with \p workspace, each node's kernel
/// scratch in one region above them that all nodes share (a slice lives at
/// its node's step only), and the plan records \p workspaceModelName
/// (kNoWorkspaceModelName without \p workspace). Figures filled in.
/// Requires static shapes.
llvm::Expected<ExecutionPlan>
makeTrivialPlan(const Module &module, const WorkspaceModel &workspace = nullptr,
                llvm::StringRef workspaceModelName = "");

} // namespace gmopt

#endif // GMOPT_IR_PLAN_H
