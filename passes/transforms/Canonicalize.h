//===- Canonicalize.h - DCE, Identity removal, shape folding ----*- C++ -*-===//
//
// The cleanup pass every pipeline starts with. Exporters leave training
// graphs full of Identity nodes, Constant nodes and run-time shape
// arithmetic over dimensions that are static once --dim binds them; later
// passes (recompute, schedule, plan-buffers) reason better about a graph
// without them. Canonicalization turns Constant nodes into initializers,
// removes Identities and redundant Casts, folds integer shape computations into
// constants (re-inferring types so e.g. a Reshape gets a static result), then
// erases dead nodes and unused initializers. It never folds floating-point math
// and never deletes side effects (InPlaceAccumulatorV2) or what the
// training signature names.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_CANONICALIZE_H
#define GMOPT_PASSES_TRANSFORMS_CANONICALIZE_H

#include "passes/Pass.h"

namespace gmopt {

/// The `canonicalize` pass.
class CanonicalizePass : public Pass {
public:
  /// Tunables; each is a pipeline option (`canonicalize{dce=false}`).
  struct Options {
    /// Erase nodes whose results are unused and that have no side effects,
    /// then initializers nothing uses (graph inputs are always kept).
    bool dce = true;
    /// Replace each Identity's result with its input. An Identity whose
    /// result is a graph output is removed only when its input can take
    /// over the output's name (a node result that is neither an output nor
    /// named by the training signature); otherwise it stays so the model's
    /// interface is unchanged.
    bool removeIdentity = true;
    /// Turn Constant nodes into initializers and evaluate integer shape
    /// arithmetic (Shape, Gather, Concat, Reshape...) on constants.
    bool foldConstants = true;
    /// Fold Cast pairs whose inner cast is exact and remove Casts to the
    /// operand's own type (CastFolding.h).
    bool foldCasts = true;
    /// Largest integer tensor, in elements, that folding reads or creates.
    uint64_t maxFoldElements = 1024;
  };

  /// A pass with the default options.
  CanonicalizePass();
  /// A pass with \p options.
  explicit CanonicalizePass(Options options);

  llvm::StringRef getName() const override { return "canonicalize"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_CANONICALIZE_H
