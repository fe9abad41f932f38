//===- Liveness.h - Live ranges and storage groups --------------*- C++ -*-===//
//
// The analysis buffer planning and scheduling stand on. For one schedule (the
// graph's node order, or an order given explicitly) it numbers the values,
// classifies how each gets its bytes (initializer constants; persistent graph
// inputs and outputs; transient values the arena may share), and records
// each value's definition step and last use. Values that share storage form
// groups with one owner: a view (Reshape, Squeeze, Flatten, Identity...)
// joins the group of its source when planning; an in-place result joins the
// group of the operand it overwrites (InPlace.h decides which). A group's
// storage is live from the owner's definition to the last use of any member,
// so a view keeps its source alive. The live-byte profile over the schedule
// (aligned bytes of transient group owners live at each step, plus the
// kernel workspace of the step's node when a WorkspaceModel is set) gives
// the lower bound on the arena (LOAD) and the step where it occurs.
//
// Everything that does not depend on the order (value numbering, classes,
// sizes, operand and user lists, op schemas, views) is computed once and
// shared, so reschedule() re-analyses another order of the same graph in
// time linear in its size without touching the IR again: the schedule pass
// judges several candidate orders this way.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_LIVENESS_H
#define GMOPT_PASSES_PLANNING_LIVENESS_H

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;
class Node;
class OpSchema;
class Value;

/// How a value's bytes are provided, as far as liveness is concerned.
enum class StorageClass : uint8_t {
  /// Initializer bytes, read-only.
  Constant,
  /// Storage of its own for the whole step: graph inputs and outputs.
  Persistent,
  /// Anything else: a candidate for the arena (or an alias of another
  /// value's storage).
  Transient,
};

/// `constant`, `persistent`, `transient`.
llvm::StringRef storageClassName(StorageClass storageClass);

/// The live-byte maximum of a schedule.
struct LivePeak {
  /// Aligned bytes of transient storage live at the peak (LOAD).
  uint64_t bytes = 0;
  /// The first step where it occurs.
  uint32_t step = 0;
};

/// Live ranges, storage classes and storage groups of one schedule.
class Liveness {
public:
  /// Dense number of a value within one Liveness (and its reschedules).
  using ValueId = uint32_t;
  /// The ValueId of an absent optional operand.
  static constexpr ValueId kNoValue = std::numeric_limits<ValueId>::max();
  /// The node index of a value no node defines (inputs, initializers).
  static constexpr uint32_t kNoNode = std::numeric_limits<uint32_t>::max();

  /// Analyses \p module's graph scheduled as \p order (every node exactly
  /// once, in a topological order), or in its node order when \p order is
  /// empty. Views join their source's group unless the view is persistent
  /// (a graph output gets a copy) or the source is pinned. Fails if a value
  /// has no static shape. The module must not change while the result is
  /// in use.
  static llvm::Expected<Liveness>
  compute(const Module &module, llvm::ArrayRef<const Node *> order = {});

  /// The same graph analysed under another schedule: \p order lists node
  /// indices (see getNodeIndex), each once, in a topological order. No
  /// in-place decision carries over.
  Liveness reschedule(llvm::ArrayRef<uint32_t> order) const;

  /// Number of steps (nodes) of the schedule.
  uint32_t getNumSteps() const { return indexOfStep.size(); }
  /// The node scheduled at \p step.
  const Node *getNode(uint32_t step) const {
    return graph->nodes[indexOfStep[step]];
  }
  /// The position of the node at \p step in the graph's node order when
  /// the analysis was computed: a numbering shared by every reschedule.
  uint32_t getNodeIndex(uint32_t step) const { return indexOfStep[step]; }
  /// The step of \p node (which must belong to the graph).
  uint32_t getStep(const Node *node) const;
  /// The registered schema of the node at \p step, or null.
  const OpSchema *getSchema(uint32_t step) const {
    return graph->schemas[indexOfStep[step]];
  }
  /// The operands of the node at \p step (kNoValue where absent).
  llvm::ArrayRef<ValueId> getOperands(uint32_t step) const;

  /// Number of values (inputs, initializers and present node results).
  uint32_t getNumValues() const { return graph->values.size(); }
  /// The value numbered \p id.
  const Value *getValue(ValueId id) const { return graph->values[id].value; }
  /// The number of \p value, or nullopt if it is not in the graph.
  std::optional<ValueId> lookup(const Value *value) const;

  /// How \p id gets its bytes.
  StorageClass getStorageClass(ValueId id) const {
    return graph->values[id].storage;
  }
  /// True if \p id is a result of a side-effecting op: it is never shared
  /// through an alias, in either direction.
  bool isPinned(ValueId id) const { return graph->values[id].pinned; }
  /// The memory space of \p id's storage (ir/MemorySpaces.h): a host
  /// group owner is a slice of the host arena, and its bytes never count
  /// toward the device's live bytes.
  MemorySpace getSpace(ValueId id) const { return graph->values[id].space; }
  /// True if \p id is the result of a view that shares its source's bytes.
  bool isView(ValueId id) const { return graph->values[id].viewSource != id; }
  /// Unaligned bytes of \p id.
  uint64_t getBytes(ValueId id) const { return graph->values[id].bytes; }
  /// The node index of \p id's definition, or kNoNode.
  uint32_t getDefNodeIndex(ValueId id) const {
    return graph->values[id].defNode;
  }
  /// Step of the definition (0 for inputs and initializers).
  uint32_t getDefStep(ValueId id) const { return state[id].defStep; }
  /// Step of the last use of \p id itself (its definition if unused; the
  /// last step for graph outputs).
  uint32_t getLastUseStep(ValueId id) const { return state[id].lastUse; }

  /// The value whose storage \p id shares directly (view source, or the
  /// operand an in-place result overwrites), or \p id itself.
  ValueId getAliasSource(ValueId id) const { return state[id].aliasSource; }
  /// The owner of \p id's storage group (follows alias sources).
  ValueId getOwner(ValueId id) const;
  /// True if \p id owns storage the arena must provide: a transient group
  /// owner.
  bool isArenaOwner(ValueId id) const {
    return graph->values[id].storage == StorageClass::Transient &&
           getOwner(id) == id;
  }
  /// Live range of the storage owned by \p owner: from its definition to
  /// the last use of any member of its group.
  LiveInterval getStorageInterval(ValueId owner) const;
  /// Makes \p value (a group owner) and its group share the storage of
  /// \p source's group. Both groups must be transient.
  void shareStorage(ValueId value, ValueId source);

  /// Reserves kernel workspace: \p model's bytes for each node (aligned),
  /// live at the node's step only. Kept by reschedule().
  void setWorkspace(const WorkspaceModel &model);
  /// Aligned workspace bytes of the node at \p step (0 without a model).
  uint64_t getWorkspaceBytes(uint32_t step) const {
    return workspace ? (*workspace)[indexOfStep[step]] : 0;
  }

  /// Aligned bytes of device-arena storage live at each step, workspace
  /// included (host-space storage excluded). O(values + steps).
  std::vector<uint64_t> computeLiveBytes() const;
  /// The maximum of computeLiveBytes and its first step.
  LivePeak computePeak() const;

  /// Prints every value (class, bytes, range, group) and the peak.
  void print(llvm::raw_ostream &os) const;

private:
  /// What does not depend on the order.
  struct ValueInfo {
    const Value *value = nullptr;
    StorageClass storage = StorageClass::Transient;
    bool pinned = false;
    MemorySpace space = MemorySpace::Device;
    /// Used by a graph output.
    bool output = false;
    uint64_t bytes = 0;
    /// Index of the defining node, or kNoNode.
    uint32_t defNode = 0;
    /// The view's source, or the value itself.
    ValueId viewSource = 0;
    /// Range of this value's readers in GraphInfo::users.
    uint32_t usersBegin = 0, usersEnd = 0;
  };
  struct GraphInfo {
    std::vector<const Node *> nodes;
    std::vector<const OpSchema *> schemas;
    llvm::DenseMap<const Node *, uint32_t> indexOf;
    /// Node i's operands are operands[operandBegin[i], operandBegin[i+1]).
    std::vector<uint32_t> operandBegin;
    std::vector<ValueId> operands;
    /// Node indices reading each value (a node reading twice appears twice).
    std::vector<uint32_t> users;
    std::vector<ValueInfo> values;
    llvm::DenseMap<const Value *, ValueId> idOf;
  };
  /// What depends on the order (and on in-place decisions).
  struct ValueState {
    uint32_t defStep = 0;
    uint32_t lastUse = 0;
    ValueId aliasSource = 0;
    /// Union-find parent (path-compressed).
    mutable ValueId parent = 0;
    /// Last use over the group (meaningful at owners).
    uint32_t groupLastUse = 0;
  };

  Liveness() = default;
  /// Fills the per-order state for indexOfStep.
  void analyseOrder();

  std::shared_ptr<const GraphInfo> graph;
  /// Aligned workspace bytes by node index, or null.
  std::shared_ptr<const std::vector<uint64_t>> workspace;
  std::vector<uint32_t> indexOfStep;
  std::vector<uint32_t> stepOfIndex;
  std::vector<ValueState> state;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_LIVENESS_H
