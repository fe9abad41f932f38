//===- InPlace.h - Which results may overwrite an operand -------*- C++ -*-===//
//
// In-place reuse lets a result take over the buffer of an operand that dies
// at the node computing it, so the two never need memory at the same time.
// Whether that is *allowed* is a property of the op: the result must be
// computable element by element into the operand's own bytes, which holds
// when the op is elementwise (output element i depends only on input
// elements at index i) or row-wise (softmax, a loss's log-probabilities:
// each row is read before it is overwritten) and the registry marks which
// result may write into which operand, and when the operand has exactly the
// result's type. For commutative ops the
// operand order is arbitrary, so the permission extends to the other leading
// operand. Whether it is *profitable and safe* depends on the schedule: the
// operand's whole storage group must die at this node, must be transient
// (never a graph input, parameter, initializer or output), must not be read
// through another operand of the same node, and neither side may be the
// result of a side-effecting op. applyInPlaceReuse makes those decisions
// greedily in schedule order and records them in the Liveness.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_INPLACE_H
#define GMOPT_PASSES_PLANNING_INPLACE_H

#include "passes/planning/Liveness.h"

#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace gmopt {

class Node;
class OpSchema;
class Value;

/// Operand indices whose buffer the in-place result of \p node (see
/// getInPlaceResult) may take over, by the op's semantics and the operand
/// and result types alone, best first (the registry's in-place operand,
/// then the other leading operand of a commutative op). Empty for ops that
/// are neither elementwise nor row-wise, have side effects, draw random
/// numbers or are views.
llvm::SmallVector<unsigned, 2> getInPlaceOperandCandidates(const Node &node);
/// The same, with \p node's schema already looked up (null if unknown).
llvm::SmallVector<unsigned, 2>
getInPlaceOperandCandidates(const Node &node, const OpSchema *schema);

/// The result of \p node the registry lets write in place (the schema's
/// inPlaceResult), or null when there is none or it is absent.
const Value *getInPlaceResult(const Node &node, const OpSchema *schema);

/// One in-place decision: result \p resultIndex of \p node overwrites
/// operand \p operandIndex.
struct InPlaceReuse {
  /// The node whose result reuses an operand's buffer.
  const Node *node = nullptr;
  /// The result that reuses the buffer.
  unsigned resultIndex = 0;
  /// The operand it overwrites.
  unsigned operandIndex = 0;
  /// Aligned bytes the result did not need to allocate.
  uint64_t savedBytes = 0;
};

/// Decides in-place reuse over \p liveness's schedule, greedily in step
/// order, and joins each chosen result to its operand's storage group (so
/// later decisions see the extended live range). Returns the decisions in
/// schedule order.
std::vector<InPlaceReuse> applyInPlaceReuse(Liveness &liveness);

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_INPLACE_H
