//===- OptimizerStateMap.h - Checkpoint state onto module slots -*- C++ -*-===//
//
// A checkpoint names its tensors its own way; the module keeps them in the
// training signature (ir/Module.h): each parameter's optimizer state in
// ParamInfo::optimizerState, in the optimizer's order, and the step count
// in StepSlot::StepCount (a ZeRO-sharded module keeps the moments as flat
// shards, whose whole tensors ir/ZeroSharding.h names). This file maps
// between the two for ONNX Runtime's checkpoints:
//  - loading: the optimizer group's per-parameter state `momentumK` becomes
//    the value of the parameter's K-th state slot (AdamW: momentum0 the
//    first moment, momentum1 the second, as ONNX Runtime's
//    AdamWOptimizerAlgorithm orders them), and the group's step (the
//    updates done) the step count, which gmopt-run, like ONNX Runtime,
//    feeds as step + 1 to the next update, so the bias correction goes on
//    where it stopped. The learning rate is not in the file (the group's
//    initial_learning_rate is a scheduler's base; ONNX Runtime resumes at
//    its default 0.001 unless told): --lr sets it. State the module has no
//    place for is a note, or an error where dropping it would silently
//    train differently (moments, but an optimizer that keeps none);
//  - saving: a run's final state as an ONNX Runtime checkpoint (parameters
//    trainable and frozen as the signature says, one group `group0` with
//    the moments and step), which ONNX Runtime resumes.
// gmopt's own mixed-precision loss scale, which ONNX Runtime's training API
// does not have, travels in the property bag as floats named
// `gmopt.loss_scale` and `gmopt.loss_scale_good_steps`.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_OPTIMIZERSTATEMAP_H
#define GMOPT_TOOLS_RUNTIME_OPTIMIZERSTATEMAP_H

#include "tools/runtime/Checkpoint.h"

#include "ir/Module.h"
#include "ir/OptimizerOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace gmopt {

/// What a checkpoint of \p module holds, by the names --weights binds and a
/// run's final state (TrainingResult::finalState) uses.
struct CheckpointLayout {
  /// One parameter of the training signature.
  struct Parameter {
    /// The parameter's name.
    std::string name;
    /// Trainable (ONNX Runtime: requires_grad) or frozen.
    bool trainable = true;
    /// Its optimizer state, in the optimizer's order (AdamW: first, then
    /// second moment); the whole tensors for a ZeRO-sharded module; empty
    /// when it has none.
    std::vector<std::string> state;
  };
  /// Every parameter, in signature order.
  std::vector<Parameter> params;
  /// The in-graph optimizer, if any.
  std::optional<OptimizerKind> optimizer;
  /// The step count input, or null.
  const Value *step = nullptr;
  /// The loss-scale inputs (mixed precision) and the slot each fills.
  std::vector<std::pair<StepSlot, const Value *>> lossScale;

  /// True when some parameter has optimizer state.
  bool hasState() const;
};

/// The layout of \p module. Fails for a ZeRO record that does not parse.
llvm::Expected<CheckpointLayout> getCheckpointLayout(const Module &module);

/// ONNX Runtime's name of state tensor \p index of a parameter:
/// `momentum<index>`.
std::string ortStateName(size_t index);

/// The property-bag name of loss-scale slot \p slot: `gmopt.loss_scale`,
/// `gmopt.loss_scale_good_steps`.
std::string lossScalePropertyName(StepSlot slot);

/// How adoptOrtOptimizerState treats a checkpoint's optimizer state.
struct OptimizerStateOptions {
  /// The run updates parameters (false: --optimizer=none, or no optimizer).
  bool updates = true;
  /// --ignore-optimizer-state: load the parameters only.
  bool ignore = false;
  /// --allow-missing-weights: a trainable parameter the group holds no
  /// state for starts with zero moments.
  bool allowMissing = false;
  /// The run's learning rate (named in the note).
  float learningRate = 0.01f;
};

/// What adoptOrtOptimizerState did.
struct OptimizerStateAdoption {
  /// One line each, for the user (no tool prefix, no newline).
  std::vector<std::string> notes;
  /// The group whose state the module took, or null.
  const OptimizerGroup *group = nullptr;
};

/// Binds the optimizer state of ONNX Runtime checkpoint \p weights (its one
/// optimizer group and its loss-scale properties) to \p module: appends to
/// weights.tensors each state tensor under the module's name for it and the
/// step count (bindInputs then binds them as it binds a .pbseq's). Nothing
/// for other kinds of file. Errors name the file: more than one group, a
/// trainable parameter without state (unless options.allowMissing), state
/// tensors other than the optimizer's, moments where the module's optimizer
/// keeps none (unless options.ignore), a name the file already uses.
llvm::Expected<OptimizerStateAdoption>
adoptOrtOptimizerState(WeightSet &weights, const Module &module,
                       const OptimizerStateOptions &options);

/// The ONNX Runtime checkpoint of a run of \p module ending in
/// \p finalState: the signature's parameters, and, when the module has
/// optimizer state, one optimizer group named as \p resumed's (else
/// `group0`) with each trainable parameter's state as `momentumK`, the step
/// count and \p resumed's initial learning rate (else \p learningRate).
/// \p properties (the loaded checkpoint's, or null) are kept; the loss
/// scale is written over them.
llvm::Expected<OrtCheckpoint>
makeOrtCheckpoint(const Module &module, llvm::ArrayRef<NamedTensor> finalState,
                  const OptimizerGroup *resumed, const PropertyBag *properties,
                  float learningRate);

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_OPTIMIZERSTATEMAP_H
