//===- Cse.h - Common subexpression elimination ------------------*- C++ -*-===//
//
// `cse` merges what a graph computes twice:
//  - constants: initializers with the same type and contents become one.
//    A frozen parameter (an initializer the training signature lists as
//    not trainable: a causal mask, a position table) merges with its
//    identical twins too, and the copies leave the signature. Trainable
//    parameters never merge (they are the same only until the first
//    update: tying them is tie-weights' job, which sums their gradients).
//  - nodes: a pure node (no side effects, no random draw, an op the
//    registry knows) with the same op, attributes, operands, phase and
//    result types as an earlier node is erased and its uses read the
//    earlier node's results. Phases must match so that a recompute clone
//    never folds back into the forward value it exists to replace.
// Nodes the signature names (or whose results it names) and nodes whose
// results are graph outputs are kept. One walk in schedule order merges
// whole chains: once two producers are one, their identical consumers
// share operands and merge when the walk reaches them.
//
// Exporters write such duplicates routinely: PyTorch registers one
// `attn.mask` buffer per layer of a GPT-2, so the training graph holds
// twelve identical 1024x1024 masks and computes twelve identical Equal
// masks from them that the backward pass keeps alive.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_CSE_H
#define GMOPT_PASSES_TRANSFORMS_CSE_H

#include "passes/Pass.h"

#include <cstdint>

namespace gmopt {

class Module;

/// What eliminateCommonSubexpressions merged.
struct CseResult {
  /// Initializers (frozen parameters included) replaced by an identical one.
  uint64_t constantsMerged = 0;
  /// Of which frozen parameters, removed from the training signature.
  uint64_t frozenParamsMerged = 0;
  /// Bytes of the initializers removed.
  uint64_t constantBytesMerged = 0;
  /// Nodes erased because an earlier identical node computes their results.
  uint64_t nodesMerged = 0;
};

/// Merges identical constants and nodes of \p module (see the file
/// comment). Fails only if a signature edit fails.
llvm::Expected<CseResult> eliminateCommonSubexpressions(Module &module);

/// The `cse` pass.
class CsePass : public Pass {
public:
  /// Declares the statistics the pass reports.
  CsePass();
  llvm::StringRef getName() const override { return "cse"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_CSE_H
