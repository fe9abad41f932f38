//===- SavedActivations.h - What the backward pass keeps alive --*- C++ -*-===//
//
// The analysis recompute stands on (and the memory reports and the
// --memory-limit search can reuse). In a training step, a forward value that
// a later phase reads (a backward node, a recompute clone, the optimizer) is
// a *saved activation*: it stays live from its definition in the forward
// pass to its last use in the backward pass, and at real batch sizes these
// values dominate the peak. For one module the analysis lists them with
// their bytes, numbers the forward nodes in schedule order, says which
// forward nodes may be recomputed and why the others may not, and, for any
// set of values kept for the backward pass, gives the region of forward
// nodes that recomputes a dropped value from the kept ones and its FLOPs.
//
// Never recomputable: graph inputs, parameters and initializers (they are
// not computed at all: always available), graph outputs (persistent), nodes
// with side effects, nodes of an op the registry does not know, and nodes
// reading a value a non-forward node produces. A random op (Dropout) is
// recomputable because its clone keeps its random stream id and so draws
// the very same numbers (backend/Philox.h keys them by seed, stream
// and step); a random op without a stream id is not.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_RECOMPUTE_SAVEDACTIVATIONS_H
#define GMOPT_PASSES_RECOMPUTE_SAVEDACTIVATIONS_H

#include "passes/planning/StepCost.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;
class Node;
class Value;

/// Why a forward node may not be recomputed (Recomputable if it may).
enum class RecomputeBlocker : uint8_t {
  Recomputable,
  /// The op writes state or has effects beyond its results.
  SideEffect,
  /// The registry does not know the op (its effects are unknown).
  UnknownOp,
  /// A random op without a stream id: a clone would draw other numbers.
  RandomWithoutStream,
  /// A result is a graph output (persistent storage, computed once).
  GraphOutput,
  /// An operand comes from a node of a later phase.
  NonForwardOperand,
};

/// Lower-case description of \p blocker (`side effects`, ...).
llvm::StringRef recomputeBlockerName(RecomputeBlocker blocker);

/// One saved activation.
struct SavedActivation {
  const Value *value = nullptr;
  /// Bytes of the value (unaligned).
  uint64_t bytes = 0;
  /// Position of its producer among the forward nodes.
  uint32_t producer = 0;
  /// Position of its first non-forward user in the graph's node order.
  uint32_t firstLaterUse = 0;
};

/// The forward nodes that recompute one value from kept ones.
struct RecomputeRegion {
  /// Forward positions of the nodes to clone, ascending (forward order).
  std::vector<uint32_t> nodes;
  /// FLOPs of those nodes (the registry's cost model).
  uint64_t flops = 0;
  /// What recomputing them costs in FLOP-equivalents (recomputeCostFlops:
  /// memory-bound nodes priced by the bytes they move).
  uint64_t cost = 0;
  /// Values the region reads that it does not compute: kept values and
  /// values that are always available (inputs, parameters, constants).
  std::vector<const Value *> sources;
  /// Values the region reached whose producers cannot be recomputed: the
  /// caller must keep them (they are among the sources too).
  std::vector<const Value *> mustKeep;
};

/// Saved activations and recomputability of one module's forward pass.
class SavedActivations {
public:
  /// Analyses \p module in its current node order. Fails if a forward
  /// value's shape is not static (bind symbolic dims first). The module
  /// must not change while the result is in use.
  /// Recompute is priced on \p throughput (recomputeCostFlops).
  static llvm::Expected<SavedActivations>
  compute(const Module &module,
          const StepThroughput &throughput = StepThroughput::cpu());

  /// Forward nodes in schedule order.
  llvm::ArrayRef<const Node *> getForwardNodes() const { return forward; }
  /// Position of \p node among the forward nodes, if it is one.
  std::optional<uint32_t> getForwardPosition(const Node *node) const;
  /// Why forward node \p position may not be recomputed.
  RecomputeBlocker getBlocker(uint32_t position) const {
    return blockers[position];
  }
  bool isRecomputable(uint32_t position) const {
    return blockers[position] == RecomputeBlocker::Recomputable;
  }
  /// Position of forward node \p position in the graph's node order.
  uint32_t getNodeIndex(uint32_t position) const { return nodeIndex[position]; }
  /// FLOPs of forward node \p position.
  uint64_t getFlops(uint32_t position) const { return flops[position]; }
  /// What recomputing forward node \p position costs, in FLOP-equivalents.
  uint64_t getCost(uint32_t position) const { return costs[position]; }
  /// Bytes forward node \p position writes (the registry's cost model).
  uint64_t getBytesWritten(uint32_t position) const {
    return bytesWritten[position];
  }
  /// FLOPs of every node of the step (forward, backward, optimizer).
  uint64_t getStepFlops() const { return stepFlops; }
  /// recomputeCostFlops summed over every node of the step.
  uint64_t getStepCost() const { return stepCost; }

  /// The saved activations in the order of their producers.
  llvm::ArrayRef<SavedActivation> getSaved() const { return saved; }
  /// Bytes of all saved activations.
  uint64_t getSavedBytes() const { return savedBytes; }
  /// The saved-activation record of \p value, or null.
  const SavedActivation *lookupSaved(const Value *value) const;

  /// True if \p value is computed by a forward node (not an input, a
  /// parameter, a constant or a later phase's value).
  bool isForwardValue(const Value *value) const;
  /// True if the backward pass can read \p value without keeping anything:
  /// graph inputs, initializers and graph outputs.
  bool isAlwaysAvailable(const Value *value) const;
  /// True if forward value \p value is computed from parameters (the
  /// training signature's) and constants only, through recomputable nodes
  /// (a transposed or cast weight): not an activation of the batch, and
  /// cheap to make again wherever it is read.
  bool isParameterDerived(const Value *value) const {
    return parameterDerived.contains(value);
  }
  /// Forward position of the last forward node reading forward value
  /// \p value (its producer's position when no forward node reads it).
  uint32_t getLastForwardUse(const Value *value) const;
  /// Bytes of a forward value (0 for other values).
  uint64_t getBytes(const Value *value) const;

  /// The region that recomputes \p value from \p kept: the forward nodes
  /// reached backwards from \p value's producer, stopping at kept values
  /// and always-available ones, and at values of nodes that cannot be
  /// recomputed (RecomputeRegion::mustKeep). Fails if \p value is not a
  /// forward value.
  llvm::Expected<RecomputeRegion>
  computeRegion(const Value *value,
                const llvm::DenseSet<const Value *> &kept) const;

  /// Prints the saved activations, their bytes and producers, and the
  /// non-recomputable forward nodes.
  void print(llvm::raw_ostream &os) const;

private:
  SavedActivations() = default;

  std::vector<const Node *> forward;
  llvm::DenseMap<const Node *, uint32_t> positionOf;
  std::vector<RecomputeBlocker> blockers;
  std::vector<uint64_t> flops;
  std::vector<uint64_t> bytesWritten;
  std::vector<uint64_t> costs;
  std::vector<uint32_t> nodeIndex;
  uint64_t stepFlops = 0;
  uint64_t stepCost = 0;
  std::vector<SavedActivation> saved;
  llvm::DenseMap<const Value *, uint32_t> savedIndex;
  llvm::DenseMap<const Value *, uint64_t> forwardBytes;
  llvm::DenseSet<const Value *> graphOutputs;
  llvm::DenseSet<const Value *> parameterDerived;
  llvm::DenseMap<const Value *, uint32_t> lastForwardUse;
  uint64_t savedBytes = 0;
};

/// The bytes of \p module's saved activations (SavedActivations::
/// getSavedBytes), or nothing when the analysis fails (a shape that is not
/// static): the before/after figure rewriting passes report.
std::optional<uint64_t> savedActivationBytes(const Module &module);

} // namespace gmopt

#endif // GMOPT_PASSES_RECOMPUTE_SAVEDACTIVATIONS_H
