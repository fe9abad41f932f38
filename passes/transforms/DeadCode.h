//===- DeadCode.h - Side effects and dead-node elimination ------*- C++ -*-===//
//
// What may be deleted when nobody reads its results. A node is kept if the
// op registry says it has side effects (InPlaceAccumulatorV2 writes its
// accumulation buffer) or draws random numbers (removing a Dropout would
// shift the random stream of every later one, as XLA also treats RNG as
// side-effecting), if its op is unknown to the registry, or if the training
// signature names it or one of its results (a gradient nobody consumes
// inside the graph is still the point of the graph).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_DEADCODE_H
#define GMOPT_PASSES_TRANSFORMS_DEADCODE_H

#include "ir/Module.h"

#include <cstdint>

namespace gmopt {

class Module;
class Node;

/// True if \p node can be erased: no present result is used, it has no side
/// effects, and \p module's training signature does not refer to it.
bool isTriviallyDead(const Node &node, const Module &module);

/// Erases every dead node of \p module (one reverse walk finds whole dead
/// chains: erasing a user can only make earlier producers dead). Returns
/// the number of nodes erased.
uint64_t eraseDeadNodes(Module &module);

/// Removes initializers nothing uses and the signature does not name
/// (graph inputs are the model's interface and are never removed). Returns
/// how many were removed.
uint64_t eraseDeadInitializers(Module &module);

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_DEADCODE_H
