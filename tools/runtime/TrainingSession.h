//===- TrainingSession.h - Training with gmopt from code --------*- C++ -*-===//
//
// The public API of gmopt_runtime: train a model from a program, the way
// ONNX Runtime's on-device training API does (onnxruntime_training_cxx_api.h:
// Ort::CheckpointState, Ort::TrainingSession with its optimizer and learning
// rate scheduler), in gmopt's style (llvm::Expected, typed options, no
// exceptions) and over gmopt's compiler and plan interpreter, so that every
// step runs the memory-rewritten, planned training graph.
//
// A session opens from ONNX Runtime's training artifacts (training_model.onnx,
// optionally eval_model.onnx and optimizer_model.onnx, and a checkpoint
// directory, as onnxruntime.training.artifacts.generate_artifacts writes
// them) or from a `.gm` file that gmopt-compile wrote. At open the training
// graph is compiled with gmopt's default pipeline (or the pipeline or memory
// limit the options name); ONNX Runtime's optimizer model is merged into the
// training step as an in-graph optimizer. Symbolic dimensions (a `batch`) are
// bound from TrainingSessionOptions::dims or, when left open, from the shapes
// of the first step's inputs.
//
// The semantics follow ONNX Runtime's:
//  - trainStep runs forward and backward and adds the gradients to the
//    accumulation buffers; lazyResetGrad makes the next trainStep overwrite
//    them instead (the first trainStep of a session overwrites them too);
//  - optimizerStep applies the optimizer to the accumulated gradients with
//    the current learning rate and step count (updates done + 1) and, when
//    the update was applied, counts it;
//  - the linear scheduler sets learning rate = initial * factor(step), the
//    factor rising from 0 to 1 over the warm-up steps and then falling to 0
//    at the total step count, step being the optimizer's update count;
//  - parameters in contiguous buffers are in the training graph's input order;
//  - checkpoints are ONNX Runtime's FlatBuffers format (a directory holding
//    `checkpoint`, or the file): parameters, optionally the optimizer state
//    (AdamW's moments and the step count) and the properties, so a checkpoint
//    written by either runtime resumes in the other.
//
// Errors are llvm::Errors whose messages name files, parameters and inputs,
// never a command-line flag: the tools built on this library add those.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_TRAININGSESSION_H
#define GMOPT_TOOLS_RUNTIME_TRAININGSESSION_H

#include "backend/Memory.h"
#include "ir/Plan.h"
#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace gmopt {

class TrainingSession;

//===----------------------------------------------------------------------===//
// Host tensors
//===----------------------------------------------------------------------===//

/// A dense, row-major tensor in host memory: an element type, a static shape
/// and its bytes. The bytes are either owned (allocate, copyOf, fromValues)
/// or borrowed from memory the caller keeps alive (borrow: a NumPy array's
/// buffer, say), which is how inputs reach a step without a copy. Tensors a
/// session returns own their bytes through a shared owner (getOwner), so a
/// binding can hand them out as arrays without copying by keeping the owner
/// alive. Copying a HostTensor shares the bytes; clone() copies them.
class HostTensor {
public:
  /// The null tensor (DType::Undefined, no bytes).
  HostTensor() = default;

  /// A zero-filled tensor of \p dtype and \p shape that owns its bytes.
  /// Fails for a negative dimension, a dtype without a fixed element size
  /// (strings) or a size that cannot be allocated.
  static llvm::Expected<HostTensor> allocate(DType dtype,
                                             llvm::ArrayRef<int64_t> shape);
  /// A tensor that owns a copy of \p bytes, which must be exactly the size
  /// of \p shape's elements of \p dtype.
  static llvm::Expected<HostTensor> copyOf(DType dtype,
                                           llvm::ArrayRef<int64_t> shape,
                                           llvm::ArrayRef<uint8_t> bytes);
  /// A tensor over \p size bytes at \p data, which are not copied: they must
  /// stay valid (and unchanged while a step reads them) as long as the
  /// tensor or a copy of it lives; \p keepAlive (may be null) is held for
  /// that long. \p size must be exactly the size of the elements.
  static llvm::Expected<HostTensor> borrow(DType dtype,
                                           llvm::ArrayRef<int64_t> shape,
                                           void *data, size_t size,
                                           std::shared_ptr<void> keepAlive);
  /// A tensor of \p shape owning a copy of \p values; sizeof(T) must be
  /// \p dtype's element size and \p values must hold every element.
  template <typename T>
  static HostTensor fromValues(DType dtype, llvm::ArrayRef<int64_t> shape,
                               llvm::ArrayRef<T> values) {
    assert(sizeof(T) == dtypeSize(dtype) && "element size is not the dtype's");
    HostTensor tensor = makeOwned(dtype, shape);
    assert(tensor.size == values.size() * sizeof(T) &&
           "values do not fill the shape");
    if (tensor.size)
      std::memcpy(tensor.bytes, values.data(), tensor.size);
    return tensor;
  }

  /// True for the null tensor.
  bool isNull() const { return dtype == DType::Undefined; }
  /// The element type.
  DType getDType() const { return dtype; }
  /// The dimensions, outermost first (empty for a scalar).
  llvm::ArrayRef<int64_t> getShape() const { return shape; }
  /// The number of elements (1 for a scalar).
  int64_t getNumElements() const;
  /// The number of bytes.
  size_t getSizeInBytes() const { return size; }
  /// The bytes, row-major.
  llvm::ArrayRef<uint8_t> getBytes() const { return {bytes, size}; }
  /// The bytes for writing (a borrowed tensor writes the caller's memory).
  llvm::MutableArrayRef<uint8_t> getMutableBytes() { return {bytes, size}; }
  /// The first byte (null for an empty tensor).
  const void *data() const { return bytes; }
  void *data() { return bytes; }
  /// What keeps the bytes alive: the owned storage, or the keepAlive given
  /// to borrow (null when the caller promised to keep them alive).
  const std::shared_ptr<void> &getOwner() const { return owner; }
  /// The elements as \p T, whose size must be the dtype's element size.
  template <typename T> llvm::ArrayRef<T> getValues() const {
    assert(sizeof(T) == dtypeSize(dtype) && "element size is not the dtype's");
    return {reinterpret_cast<const T *>(bytes), size / sizeof(T)};
  }
  /// Element \p index converted to double (numeric dtypes: floats of every
  /// width, integers, bool).
  double getElementAsDouble(int64_t index) const;
  /// A tensor owning a copy of these bytes.
  HostTensor clone() const;
  /// `f32[4, 64]`.
  std::string describe() const;

private:
  /// An owned, zero-filled tensor; asserts on a bad shape (for fromValues).
  static HostTensor makeOwned(DType dtype, llvm::ArrayRef<int64_t> shape);

  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;
  uint8_t *bytes = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;
};

//===----------------------------------------------------------------------===//
// Checkpoint state
//===----------------------------------------------------------------------===//

/// A checkpoint property: ONNX Runtime's CheckpointState properties hold
/// 64-bit integers, 32-bit floats and strings.
using PropertyValue = std::variant<int64_t, float, std::string>;

/// The state of a training run: parameters (trainable and frozen), the
/// optimizer state, and user properties; ONNX Runtime's CheckpointState.
///
/// A CheckpointState is a handle: copies share one state. A TrainingSession
/// opened from a state attaches to it, as ONNX Runtime's Module does: from
/// then on the state's parameters are the session's live parameters (reads
/// see the latest update, updateParameter writes the session's), and save
/// writes the session's current values.
class CheckpointState {
public:
  /// An empty state (no parameters, no properties).
  CheckpointState();
  ~CheckpointState();
  CheckpointState(const CheckpointState &);
  CheckpointState &operator=(const CheckpointState &);

  /// Reads an ONNX Runtime checkpoint: \p path is the FlatBuffers file or a
  /// directory holding it as `checkpoint`. Also reads gmopt's TensorProto
  /// sequences (`*.pbseq`) and the initializers of an ONNX model, which hold
  /// parameters only.
  static llvm::Expected<CheckpointState> load(llvm::StringRef path);

  /// Writes this state as an ONNX Runtime checkpoint at \p path (a file; an
  /// existing directory gets its `checkpoint` file). With
  /// \p includeOptimizerState the optimizer's moments and step count are
  /// written too (those of the attached session, else those loaded).
  llvm::Error save(llvm::StringRef path,
                   bool includeOptimizerState = false) const;

  /// Sets property \p name (ONNX Runtime: AddProperty), replacing any of
  /// that name whatever its type.
  void addProperty(llvm::StringRef name, PropertyValue value);
  /// The property named \p name; an error naming it when there is none.
  llvm::Expected<PropertyValue> getProperty(llvm::StringRef name) const;
  /// Whether property \p name exists.
  bool hasProperty(llvm::StringRef name) const;
  /// Every property name, in insertion (file) order.
  std::vector<std::string> getPropertyNames() const;

  /// Every parameter, trainable and frozen, in the checkpoint's order (the
  /// attached session's training-graph input order once attached).
  std::vector<std::string> getParameterNames() const;
  /// Whether parameter \p name is trained (ONNX Runtime: requires_grad); an
  /// error for an unknown name.
  llvm::Expected<bool> isTrainable(llvm::StringRef name) const;
  /// A copy of parameter \p name's current value (GetParameter).
  llvm::Expected<HostTensor> getParameter(llvm::StringRef name) const;
  /// Overwrites parameter \p name (UpdateParameter); the dtype and shape
  /// must be the parameter's.
  llvm::Error updateParameter(llvm::StringRef name, const HostTensor &value);
  /// Whether the state holds optimizer state (moments or a step count).
  bool hasOptimizerState() const;

  /// The session attached to this state, or null.
  TrainingSession *getSession() const;

  /// The shared state (for the runtime's implementation).
  struct Impl;
  Impl &getImpl() const { return *impl; }

private:
  std::shared_ptr<Impl> impl;
};

//===----------------------------------------------------------------------===//
// Sessions
//===----------------------------------------------------------------------===//

/// Where a session runs.
enum class SessionBackend {
  /// CUDA where a device works, else the CPU.
  Auto,
  /// The CPU backend.
  Cpu,
  /// The CUDA backend (an error without a working device).
  Cuda,
};

/// How a session compiles and runs its model.
struct TrainingSessionOptions {
  /// The backend.
  SessionBackend backend = SessionBackend::Auto;
  /// CPU worker threads (0: every core).
  unsigned threads = 0;
  /// Seed of random ops (dropout) and of parameters a model gives no value.
  uint64_t seed = 0;
  /// One arena laid out by the plan (true), or allocation at definition and
  /// release after the last use (false; the plan is still made).
  bool planned = true;
  /// CUDA: fp32 matrix products may use TF32 tensor cores.
  bool allowTf32 = false;
  /// Values of symbolic dimensions (`batch` -> 8). Those left open are bound
  /// from the first step's input shapes.
  std::map<std::string, int64_t> dims;
  /// The pass pipeline run on an ONNX training graph, in gmopt-opt's text
  /// form; empty: gmopt's default pipeline. A `.gm` file is already compiled
  /// and takes none.
  std::string pipeline;
  /// A memory budget in bytes: instead of `pipeline`, the compiler searches
  /// for the fastest configuration whose planned peak fits (gmopt-compile
  /// --memory-limit's search, without mixed precision and without gradient
  /// accumulation, since the caller feeds the batches); an error naming the
  /// smallest reachable peak when none fits. Not with a `.gm` file.
  std::optional<uint64_t> memoryLimitBytes;
  /// Directory holding external-data weight files (empty: next to the
  /// model, or where the `.gm` file recorded them).
  std::string externalDataDir;
};

/// The models a session is made of: ONNX Runtime's training artifacts.
struct TrainingArtifacts {
  /// training_model.onnx (forward, backward and gradient accumulation), or
  /// a `.gm` file compiled by gmopt-compile.
  std::string trainingModel;
  /// eval_model.onnx (forward and loss); empty: evalStep is unavailable.
  std::string evalModel;
  /// optimizer_model.onnx (its optimizer and hyper-parameters are merged
  /// into the training step); empty: optimizerStep is unavailable unless
  /// the `.gm` file has an optimizer.
  std::string optimizerModel;
  /// The artifacts generate_artifacts writes in \p directory: its
  /// training_model.onnx and, where present, eval_model.onnx and
  /// optimizer_model.onnx.
  static TrainingArtifacts fromDirectory(llvm::StringRef directory);
};

/// The memory of a session's training step.
struct SessionMemory {
  /// The plan's static figures (arena, persistent bytes per category, lower
  /// bound); plannedBytes() is the planned peak.
  MemoryFigures planned;
  /// What the backend measured since the session was compiled: the peak and
  /// the bytes per category at the peak.
  MemoryReport measured;
  /// The pipeline that compiled the training step.
  std::string pipeline;
};

/// A model being trained: ONNX Runtime's TrainingSession (with its Optimizer
/// and LinearLRScheduler) over a compiled, planned training step.
class TrainingSession {
public:
  /// Opens \p artifacts with the parameters (and optimizer state and
  /// properties) of \p state and attaches to it. A parameter the training
  /// graph reads but \p state lacks is an error naming it. A state with
  /// optimizer state resumes it (moments and step count).
  static llvm::Expected<std::unique_ptr<TrainingSession>>
  open(const TrainingArtifacts &artifacts, const CheckpointState &state,
       const TrainingSessionOptions &options = {});
  /// Opens \p model (a `.gm` file or a training_model.onnx) with the
  /// parameter values it holds (seeded initial values for those it gives
  /// none), attached to a fresh state.
  static llvm::Expected<std::unique_ptr<TrainingSession>>
  open(llvm::StringRef model, const TrainingSessionOptions &options = {});
  ~TrainingSession();

  /// Merges \p optimizerModel (ONNX Runtime's optimizer_model.onnx) into a
  /// session opened without one, recompiling the training step and keeping
  /// every parameter and accumulated gradient (ONNX Runtime's Optimizer
  /// constructor, which comes after the Module's).
  llvm::Error addOptimizer(llvm::StringRef optimizerModel);

  //===--------------------------------------------------------------------===//
  // Steps
  //===--------------------------------------------------------------------===//

  /// Runs forward and backward on \p inputs (one per trainingInputNames(),
  /// in that order) and returns the training graph's outputs (those of
  /// trainingOutputNames(): the loss first). Gradients add to those
  /// accumulated since the last lazyResetGrad.
  llvm::Expected<std::vector<HostTensor>>
  trainStep(llvm::ArrayRef<HostTensor> inputs);
  /// trainStep followed by optimizerStep in one run of the training step
  /// (the optimizer at the end of its backward pass): the same result, with
  /// one forward and backward instead of two.
  llvm::Expected<std::vector<HostTensor>>
  trainStepAndUpdate(llvm::ArrayRef<HostTensor> inputs);
  /// Runs the eval model on \p inputs (one per evalInputNames()) with the
  /// current parameters; no gradient changes. An error when the session has
  /// no eval model.
  llvm::Expected<std::vector<HostTensor>>
  evalStep(llvm::ArrayRef<HostTensor> inputs);
  /// Makes the next trainStep overwrite the accumulated gradients.
  void lazyResetGrad();
  /// Updates the parameters from the accumulated gradients with the current
  /// learning rate and counts the update (when mixed precision's overflow
  /// check did not skip it). An error without an optimizer or before any
  /// trainStep.
  llvm::Error optimizerStep();

  //===--------------------------------------------------------------------===//
  // Learning rate
  //===--------------------------------------------------------------------===//

  /// The learning rate of the next optimizer step.
  float getLearningRate() const;
  /// Sets the learning rate of the next optimizer steps.
  void setLearningRate(float learningRate);
  /// ONNX Runtime's LinearLRScheduler (its C++ RegisterLinearLRScheduler):
  /// the learning rate becomes initial * factor(step), step being the
  /// optimizer's update count, now and at every schedulerStep:
  /// factor = step / max(1, warmup) while step < warmup, else
  /// max(0, (total - step) / max(1, total - warmup)). Fails for negative
  /// counts. (onnxruntime-training 1.19.2's Python LinearLRScheduler passes
  /// its two counts to this in the other order: its
  /// `LinearLRScheduler(opt, w, t, lr)` is registerLinearLRScheduler(t, w,
  /// lr).)
  llvm::Error registerLinearLRScheduler(int64_t warmupStepCount,
                                        int64_t totalStepCount,
                                        float initialLearningRate);
  /// Moves the registered scheduler on (call after optimizerStep); an error
  /// when none is registered.
  llvm::Error schedulerStep();
  /// Optimizer updates done (the checkpoint's step count).
  int64_t getStepCount() const;

  //===--------------------------------------------------------------------===//
  // Inputs, outputs and parameters
  //===--------------------------------------------------------------------===//

  /// The inputs trainStep takes (the training graph's user inputs, without
  /// parameters, gradient buffers and step state), or evalStep's when
  /// \p training is false (ONNX Runtime: InputNames(training)).
  std::vector<std::string> inputNames(bool training = true) const;
  /// The outputs trainStep (or, with \p training false, evalStep) returns.
  std::vector<std::string> outputNames(bool training = true) const;
  /// Every parameter (or the trainable ones), in training-graph input order.
  std::vector<std::string> parameterNames(bool trainableOnly = false) const;
  /// A copy of parameter \p name's current value.
  llvm::Expected<HostTensor> getParameter(llvm::StringRef name) const;
  /// Overwrites parameter \p name; dtype and shape must be the parameter's.
  llvm::Error setParameter(llvm::StringRef name, const HostTensor &value);
  /// The gradient accumulated for trainable parameter \p name.
  llvm::Expected<HostTensor> getGradient(llvm::StringRef name) const;
  /// Elements of the parameters getContiguousParameters(\p trainableOnly)
  /// holds (ONNX Runtime: GetParametersSize).
  int64_t getParametersSize(bool trainableOnly = true) const;
  /// Every parameter (or the trainable ones), flattened and concatenated in
  /// parameterNames order into one f32 vector (ONNX Runtime: ToBuffer);
  /// an error when one is not f32.
  llvm::Expected<HostTensor>
  getContiguousParameters(bool trainableOnly = false) const;
  /// The inverse: \p buffer (f32, getParametersSize(\p trainableOnly)
  /// elements) is split over the parameters in the same order (FromBuffer).
  llvm::Error copyBufferToParameters(const HostTensor &buffer,
                                     bool trainableOnly = true);

  //===--------------------------------------------------------------------===//
  // Checkpoints and export
  //===--------------------------------------------------------------------===//

  /// The state this session is attached to (its properties, and its
  /// parameters, which read this session's).
  CheckpointState &getCheckpointState();
  /// Writes the current parameters (and, with \p includeOptimizerState,
  /// moments and step count) and the properties as an ONNX Runtime
  /// checkpoint at \p path (as CheckpointState::save).
  llvm::Error saveCheckpoint(llvm::StringRef path,
                             bool includeOptimizerState = false) const;
  /// Takes the parameters, the optimizer state (when the checkpoint has
  /// some) and the properties of the checkpoint at \p path.
  llvm::Error loadCheckpoint(llvm::StringRef path);
  /// Writes an inference model to \p path: the eval model with the current
  /// parameters as initializers and \p graphOutputNames (ONNX output names
  /// of the eval model, e.g. the logits) as its outputs; every node they do
  /// not need (the loss) is dropped. An error without an eval model.
  llvm::Error
  exportModelForInferencing(llvm::StringRef path,
                            llvm::ArrayRef<std::string> graphOutputNames) const;

  //===--------------------------------------------------------------------===//
  // Memory
  //===--------------------------------------------------------------------===//

  /// The training step's planned and measured memory; an error before the
  /// step is compiled (symbolic dimensions still open until the first step).
  llvm::Expected<SessionMemory> getMemory() const;
  /// Whether the training step is compiled.
  bool isCompiled() const;

  /// The implementation (tools/runtime/SessionImpl.h).
  struct Impl;

private:
  friend class CheckpointState;
  explicit TrainingSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_TRAININGSESSION_H
