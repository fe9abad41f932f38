//===- LossScaling.h - In-graph loss scaling for fp16 training --*- C++ -*-===//
//
// fp16 gradients underflow: small ones flush to zero. Loss scaling
// multiplies the loss by S before the backward pass and divides the
// gradients by S after it (Micikevicius et al., "Mixed Precision
// Training"). insertLossScaling builds the scaler into the training step
// itself, so no host round trip decides anything:
//
//   loss_scale            f32 scalar graph input, step-state slot
//                         LossScale (persistent, checkpointed; default
//                         initial value in the graph)
//   loss_scale_good_steps f32 scalar graph input, slot LossScaleGoodSteps
//                         (dynamic mode only): finite steps since the last
//                         change of the scale
//   seed'  = seed * loss_scale        every reader of the loss-gradient
//                                     seed reads seed'
//   g'     = g * (1 / loss_scale)     each trainable gradient, before it is
//                                     accumulated or applied; g' becomes
//                                     the signature's gradient and takes
//                                     g's name
//   amp.found_inf = IsNaN(0 * Sum(ReduceSum(g) for what the optimizer
//               applies: accumulation buffers or gradients)), read after
//               the last accumulation (a sum is inf or NaN if an element
//               is; standard ops, since ONNX Runtime's IsAllFinite has no
//               CPU kernel); a graph output
//   is_finite = Not(amp.found_inf)
//   update_signal' = And(update_signal, is_finite)
//                                     the in-graph optimizer skips its
//                                     update on overflow (its flag says so)
//
// and, in dynamic mode, at the end of the step, only when the runtime's
// update signal is set (the last micro-step of an accumulated step):
//
//   good' = is_finite ? good + 1 : 0
//   grow  = good' >= growth_interval
//   scale' = is_finite ? (grow ? min(scale * growth, max) : scale)
//                      : max(scale * backoff, min)
//   good'  = grow ? 0 : good'
//
// written back with com.microsoft InPlaceAccumulatorV2(state, new,
// overwrite=true), whose flags are graph outputs (`loss_scale.updated`,
// `loss_scale_good_steps.updated`) as ONNX Runtime keeps an accumulator's.
// Everything else is standard ONNX (Mul, Reciprocal, ReduceSum, Sum,
// IsNaN, Not, And, Cast, Add, Less, Where, Min, Max, Reshape).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AMP_LOSSSCALING_H
#define GMOPT_PASSES_AMP_LOSSSCALING_H

#include "passes/amp/Amp.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {

class Module;
class Value;

/// What the scaler does.
struct LossScalingOptions {
  /// Static or Dynamic (None inserts nothing).
  LossScaleMode mode = LossScaleMode::Dynamic;
  /// The fixed scale (static) or the initial one (dynamic).
  double scale = 65536.0;
  uint64_t growthInterval = 2000;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  double maxScale = 16777216.0;
  double minScale = 1.0;
};

/// What insertLossScaling added.
struct LossScalingResult {
  Value *lossScale = nullptr;
  /// Null in static mode.
  Value *goodSteps = nullptr;
  Value *foundInf = nullptr;
  /// Gradients unscaled.
  unsigned gradients = 0;
  /// Nodes added.
  unsigned nodes = 0;
  /// True if the optimizer now skips its update on overflow.
  bool gatesOptimizer = false;
};

/// Builds the scaler into \p module (see the file comment). Fails, with
/// the module unchanged, when the module has no loss-gradient seed or no
/// trainable gradient, when the loss-scale slots are taken, or when an
/// in-graph optimizer has no update-signal input to gate.
llvm::Expected<LossScalingResult>
insertLossScaling(Module &module, const LossScalingOptions &options);

} // namespace gmopt

#endif // GMOPT_PASSES_AMP_LOSSSCALING_H
