//===- SessionImpl.h - The state behind a TrainingSession -------*- C++ -*-===//
//
// Internal to tools/runtime/: the shared checkpoint state, and the session's
// compiled training step, eval model and step state. Not installed as API.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_SESSIONIMPL_H
#define GMOPT_TOOLS_RUNTIME_SESSIONIMPL_H

#include "tools/runtime/TrainingSession.h"

#include "tools/runtime/Checkpoint.h"
#include "tools/runtime/Runtime.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gmopt {

/// The shared state of a CheckpointState handle.
struct CheckpointState::Impl {
  /// The parameters (trainable, frozen), optimizer groups and properties as
  /// loaded or last synchronised from the session.
  OrtCheckpoint checkpoint;
  /// The session attached to this state, or null.
  TrainingSession *session = nullptr;
  /// The parameter named \p name in checkpoint, or null.
  NamedTensor *lookupParameter(llvm::StringRef name, bool *trainable);
};

/// ONNX Runtime's linear learning-rate schedule.
struct LinearSchedule {
  int64_t warmupSteps = 0;
  int64_t totalSteps = 0;
  float initialLearningRate = 0;
  /// The learning rate after \p step updates.
  float at(int64_t step) const;
};

/// Names read from an ONNX model's graph.
struct GraphNames {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

/// The inputs and outputs of ONNX model \p path.
llvm::Expected<GraphNames> readGraphNames(llvm::StringRef path);

/// Writes \p evalModel's inference form to \p path: \p parameters (name ->
/// value) become initializers, \p outputNames the outputs, and nodes no
/// output needs are dropped.
llvm::Error writeInferenceModel(
    llvm::StringRef evalModel, llvm::StringRef path,
    llvm::ArrayRef<std::string> outputNames,
    const std::function<llvm::Expected<std::optional<TensorData>>(
        llvm::StringRef)> &parameterValue);

/// The parts of a session.
struct TrainingSession::Impl {
  TrainingArtifacts artifacts;
  TrainingSessionOptions options;
  CheckpointState state;
  /// The backend that runs (Auto resolved).
  BackendKind backend = BackendKind::Cpu;
  /// The optimizer of optimizer_model.onnx, if any.
  std::optional<OptimizerSpec> optimizer;
  /// The training model is a `.gm` file.
  bool fromGm = false;

  /// User inputs and outputs of the training and eval models.
  std::vector<std::string> trainInputs, trainOutputs, evalInputs, evalOutputs;
  /// Every parameter in training-graph input order, and the trainable ones.
  std::vector<std::string> parameters;
  std::set<std::string> trainable;

  /// The compiled training step and its executable (null until compiled).
  std::optional<RunnableModel> model;
  std::unique_ptr<Executable> exe;
  /// The checkpoint weights the executable was bound from (their optimizer
  /// group is the one a save resumes).
  std::optional<WeightSet> boundWeights;
  const OptimizerGroup *resumedGroup = nullptr;

  /// The eval model and its executable (null until the first evalStep).
  std::unique_ptr<Module> evalModule;
  std::unique_ptr<Executable> evalExe;

  /// ONNX Runtime's step state.
  bool accumulateGradients = false;
  bool trained = false;
  int64_t updates = 0;
  float learningRate = 0.001f;
  std::optional<LinearSchedule> schedule;
  uint64_t runs = 0;

  /// Compiles and prepares the training step, binding open dimensions and
  /// data inputs from \p inputs (none: every dimension must be bound).
  llvm::Error compile(llvm::ArrayRef<HostTensor> inputs);
  /// The training step compiled by the compiler's search for the fastest
  /// configuration within options.memoryLimitBytes.
  llvm::Expected<RunnableModel>
  compileToLimit(llvm::ArrayRef<HostTensor> inputs);
  /// Runs the training step once on \p inputs (none: the last ones) with
  /// the update signal \p update; \p zeroSeed makes its gradient zero.
  llvm::Expected<std::vector<HostTensor>> run(llvm::ArrayRef<HostTensor> inputs,
                                              bool update, bool zeroSeed);
  /// The current value of parameter \p name.
  llvm::Expected<TensorData> readParameter(llvm::StringRef name) const;
  /// Overwrites parameter \p name.
  llvm::Error writeParameter(llvm::StringRef name, const TensorData &value);
  /// The session's state as an ONNX Runtime checkpoint.
  llvm::Expected<OrtCheckpoint> snapshot(bool includeOptimizerState) const;
  /// Loads \p checkpoint's parameters and optimizer state into the session.
  llvm::Error restore(const OrtCheckpoint &checkpoint);
  /// Makes \p checkpoint (described as \p description in messages) the
  /// weights the compiled module binds (boundWeights) and adopts its
  /// optimizer state (resumedGroup).
  llvm::Error adoptCheckpoint(const OrtCheckpoint &checkpoint,
                              llvm::StringRef description);
};

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_SESSIONIMPL_H
