//===- Schedule.h - Memory-aware topological order --------------*- C++ -*-===//
//
// The node order is the schedule, and the schedule decides how many bytes
// are live at once: the same graph can need very different arenas in two
// valid orders. The `schedule` pass tries several topological orders - the
// input order, a depth-first order that computes each value just before it
// is needed, and list schedulers that prefer the ready node freeing the most
// bytes - judges each by the LOAD plan-buffers would see (liveness with
// in-place reuse), and keeps the lowest; the input order wins ties, so the
// pass never raises LOAD. It only reorders: data dependencies, the relative
// order of side-effecting ops, and the order between an op that writes an
// operand in place (InPlaceAccumulatorV2...) and every other access to that
// storage (through views too) are all kept as edges of a DependenceGraph,
// and so is the place of each recompute clone: never before the nearest
// node that preceded it and is not a clone (no hoisting into the forward).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_SCHEDULE_H
#define GMOPT_PASSES_PLANNING_SCHEDULE_H

#include "passes/Pass.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace gmopt {

class Liveness;
class Module;
class Node;

/// The nodes of a graph (numbered in their current order) and every
/// ordering constraint between them, in compressed adjacency arrays.
class DependenceGraph {
public:
  /// Builds the constraints of the graph \p liveness analysed in its
  /// current node order: data edges; with \p keepSideEffectOrder, a chain
  /// through all side-effecting ops in their current order; and, for every
  /// storage a side-effecting op writes in place (getWrittenOperands:
  /// InPlaceAccumulatorV2's buffer, an optimizer's parameters and moments;
  /// every operand of a side-effecting op that declares none), traced
  /// through views to the viewed value, the current order of each write
  /// against every other read and write of that storage; and for each
  /// Phase::Recompute node, an edge from the nearest earlier node that is
  /// not one (its anchor), so no order hoists a clone above it.
  static DependenceGraph build(const Liveness &liveness,
                               bool keepSideEffectOrder);

  /// Number of nodes.
  uint32_t size() const { return nodes.size(); }
  /// Node \p index (its position in the order the graph was built from).
  const Node *getNode(uint32_t index) const { return nodes[index]; }
  /// Nodes that must run before node \p index (may repeat).
  llvm::ArrayRef<uint32_t> getPredecessors(uint32_t index) const {
    return llvm::ArrayRef<uint32_t>(preds).slice(
        predBegin[index], predBegin[index + 1] - predBegin[index]);
  }
  /// Nodes that must run after node \p index (may repeat).
  llvm::ArrayRef<uint32_t> getSuccessors(uint32_t index) const {
    return llvm::ArrayRef<uint32_t>(succs).slice(
        succBegin[index], succBegin[index + 1] - succBegin[index]);
  }
  /// True if \p order lists every node once and respects every edge.
  bool isValidOrder(llvm::ArrayRef<uint32_t> order) const;

private:
  std::vector<const Node *> nodes;
  std::vector<uint32_t> predBegin, preds, succBegin, succs;
};

/// The split collectives (gmopt.AllReduceStart / AllReduceWait pairs) that
/// \p order overlaps: at least one node between a start and its wait. The
/// pass keeps no order that overlaps fewer than the input order.
unsigned countOverlappedCollectives(const DependenceGraph &graph,
                                    llvm::ArrayRef<uint32_t> order);

/// Node indices in a depth-first order: each sink (in order) pulls in its
/// predecessors, operands first, so values are computed just before use.
std::vector<uint32_t> scheduleDepthFirst(const DependenceGraph &graph);

/// How the list scheduler ranks ready nodes.
enum class ListPriority {
  /// Most bytes freed minus bytes allocated by the node.
  NetFreedBytes,
  /// Most bytes freed by the node.
  FreedBytes,
};

/// Node indices chosen by a list scheduler over \p graph that runs, among
/// the ready nodes, the one with the highest \p priority (earliest index on
/// ties). A node frees the transient storage groups it is the last
/// remaining reader of. \p liveness and \p graph must both be built from
/// the module's current node order.
std::vector<uint32_t> scheduleByFreedBytes(const Liveness &liveness,
                                           const DependenceGraph &graph,
                                           ListPriority priority);

/// The LOAD plan-buffers would compute with the nodes in \p order (node
/// indices of \p liveness), with or without in-place reuse.
uint64_t evaluateScheduleLoad(const Liveness &liveness,
                              llvm::ArrayRef<uint32_t> order, bool inPlace);

/// The `schedule` pass.
class SchedulePass : public Pass {
public:
  /// Tunables; each is a pipeline option (`schedule{dfs=false}`).
  struct Options {
    /// Try the depth-first order.
    bool dfs = true;
    /// Try the list schedulers (net freed bytes, and freed bytes).
    bool list = true;
    /// Judge orders with in-place reuse, as plan-buffers{in-place=true}
    /// will plan them; set false when plan-buffers runs without it.
    bool inPlace = true;
    /// Keep all side-effecting ops in their relative order. When false (the
    /// default), only side effects on the same storage keep their order, so
    /// accumulators into different buffers commute and each gradient can be
    /// accumulated (and freed) as soon as it exists: on the testdata MLP
    /// that lowers LOAD by 25%, with bitwise the same gradients
    /// (PlanBuffersTest runs both settings on the CPU backend).
    bool keepSideEffectOrder = false;
  };

  /// A pass with the default options.
  SchedulePass();
  /// A pass with \p options.
  explicit SchedulePass(Options options);

  llvm::StringRef getName() const override { return "schedule"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_SCHEDULE_H
