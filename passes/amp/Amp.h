//===- Amp.h - Mixed precision as a graph rewrite ----------------*- C++ -*-===//
//
// `amp{dtype=fp16|bf16, loss-scale=dynamic|static:V|none}` rewrites a
// training step to compute in fp16 or bf16 where that is safe (AmpPolicy.h
// says which nodes) while parameters, gradients, accumulators and the
// optimizer stay fp32 (master weights):
//
//   * Casts are explicit nodes. A low node reads each fp32 AMP operand cast
//     down: a parameter once per step (one Cast whose result the forward
//     and backward products share, a planned transient), an activation
//     once however many low nodes read it, a small constant narrowed at
//     compile time (saturating to the largest finite value, so a mask's
//     -3.4e38 becomes -65504 rather than -inf). A low node's results are
//     low; a node that is not low reads them cast back to fp32. Each low
//     gradient is therefore cast to fp32 before it is accumulated or
//     applied. Redundant Cast pairs fold (CastFolding.h) and unused casts
//     go.
//   * Loss scaling (LossScaling.h; fp16's default is dynamic, bf16's none)
//     multiplies the loss-gradient seed by the step state `loss_scale`,
//     unscales every gradient, checks them all finite (`amp.found_inf`)
//     and makes the in-graph optimizer skip its update on overflow; the
//     dynamic scale then grows or backs off inside the graph.
//
// The pass runs once: a module whose signature already has a loss scale,
// or that holds no fp32 computation to lower, is left alone (and says so
// in its statistics).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AMP_AMP_H
#define GMOPT_PASSES_AMP_AMP_H

#include "passes/Pass.h"

#include "ir/Types.h"

#include <string>

namespace gmopt {

/// How the loss is scaled.
enum class LossScaleMode : uint8_t {
  /// No scaling and no overflow check (bf16's default).
  None,
  /// A fixed scale; overflowing steps are still skipped.
  Static,
  /// torch.cuda.amp.GradScaler's schedule: grow after a run of finite
  /// steps, back off and skip on overflow.
  Dynamic,
};

/// The `amp` pass.
class AmpPass : public Pass {
public:
  /// Tunables; each is a pipeline option (`amp{dtype=bf16}`).
  struct Options {
    /// `fp16` or `bf16`.
    std::string dtype = "fp16";
    /// `dynamic`, `static:V` (V a positive number) or `none`; empty picks
    /// the dtype's default (fp16: dynamic, bf16: none).
    std::string lossScale;
    /// Dynamic scaling: the initial scale (GradScaler's init_scale).
    double initScale = 65536.0;
    /// Dynamic scaling: finite steps before the scale grows.
    uint64_t growthInterval = 2000;
    /// Dynamic scaling: the growth factor.
    double growthFactor = 2.0;
    /// Dynamic scaling: the factor applied on overflow.
    double backoffFactor = 0.5;
    /// Dynamic scaling: the largest scale.
    double maxScale = 16777216.0;
    /// Dynamic scaling: the smallest scale (GradScaler has none; a scale
    /// below 1 means the unscaled gradients overflow).
    double minScale = 1.0;
    /// Treat the fp32-compute ops (softmax, layer/RMS norm and their
    /// gradients) as fp32 ops: fp32 tensors in and out, as
    /// torch.autocast does, instead of fp32 arithmetic on 16-bit storage.
    bool strictFp32 = false;
    /// Print each op's low and fp32 node counts to stderr.
    bool printPlan = false;
  };

  /// A pass with the default options.
  AmpPass();
  /// A pass with \p options.
  explicit AmpPass(Options options);

  llvm::StringRef getName() const override { return "amp"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_AMP_AMP_H
