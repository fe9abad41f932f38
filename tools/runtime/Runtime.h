//===- Runtime.h - Training a compiled module (gmopt-run) -------*- C++ -*-===//
//
// Everything gmopt-run does, as a library a test can call without a
// process: load a `.gm` file or an ONNX training graph (binding symbolic
// dimensions from --dim or from the shapes of the given inputs, then
// canonicalizing), give every graph input a value (test data, weights,
// graph defaults, zeros, or seeded synthetic data and initial weights, with
// integer labels and indices checked against the range the graph implies),
// run training steps with gradient accumulation, driving the in-graph optimizer
// on a backend, and compare the loss, the gradients and a loss curve with
// references under one documented tolerance. Errors on bad input are
// llvm::Errors; a numerical failure (a non-finite loss, a mismatch with a
// reference) is a NumericalError so a tool can give it its own exit status.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_RUNTIME_H
#define GMOPT_TOOLS_RUNTIME_RUNTIME_H

#include "backend/Executor.h"
#include "backend/cuda/CudaMeasurement.h"
#include "backend/cuda/NcclCollectives.h"
#include "tools/runtime/Checkpoint.h"
#include "tools/runtime/TestDataSet.h"

#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "passes/DefaultPipeline.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// Exit status for usage and input errors.
constexpr int kInputErrorExitCode = 1;
/// Exit status for numerical failures: a NaN/inf loss, or results outside
/// the tolerance of a reference (--check, --sgd-reference).
constexpr int kNumericalFailureExitCode = 2;

/// A numerical failure: the run was well-formed but its numbers are wrong.
class NumericalError : public llvm::ErrorInfo<NumericalError> {
public:
  /// LLVM-style RTTI anchor.
  static char ID;
  /// An error that reads \p message.
  explicit NumericalError(std::string message) : message(std::move(message)) {}
  /// Prints the message.
  void log(llvm::raw_ostream &os) const override;
  /// Numerical errors have no std::error_code.
  std::error_code convertToErrorCode() const override;

private:
  std::string message;
};

/// The exit status \p err deserves: kNumericalFailureExitCode for a
/// NumericalError, kInputErrorExitCode otherwise. Does not consume \p err.
int exitCodeFor(const llvm::Error &err);

//===----------------------------------------------------------------------===//
// Backends
//===----------------------------------------------------------------------===//

/// The --backend choices.
enum class BackendKind { Auto, Cpu, Cuda };

/// Resolves \p requested to the backend that will run: Auto becomes Cuda
/// where a CUDA device works, else Cpu with \p notice set to "no CUDA
/// device (reason); using the CPU backend"; Cuda without a device is an
/// error giving the reason.
llvm::Expected<BackendKind> selectBackend(BackendKind requested,
                                          std::string &notice);

/// `cpu` or `cuda` (`auto` for Auto).
llvm::StringRef backendName(BackendKind kind);

/// The data-parallel ranks of this process for the CUDA backend's NCCL
/// collectives: the CPU world's (MPI under mpirun, or the TCP world of
/// torchrun-style variables; rank 0's unique id goes to the others over
/// it, the GPU is picked by the launcher's local rank), else a single
/// process.
CollectiveBootstrap mpiCollectiveBootstrap();

/// Prepares \p module on \p backend (which selectBackend returned);
/// \p allowTf32 lets the CUDA backend's fp32 GEMMs use TF32 tensor cores.
/// On CUDA the collectives use mpiCollectiveBootstrap's ranks.
llvm::Expected<std::unique_ptr<Executable>>
prepareExecutable(const Module &module, BackendKind backend,
                  const ExecutorOptions &options, bool allowTf32 = false);

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// A model ready to run.
struct RunnableModel {
  /// The module the run trains (the rewritten one of a `.gm`; the
  /// canonicalized import of an ONNX graph).
  std::unique_ptr<Module> module;
  /// The un-rewritten module for --baseline, if requested.
  std::unique_ptr<Module> original;
  /// The pipeline that made `module` from `original`.
  std::string pipeline;
  /// True when the model came from a `.gm` file.
  bool fromGmFile = false;
  /// The dimension bindings in effect.
  std::map<std::string, int64_t> dims;
};

/// The pipeline gmopt-run runs on an ONNX training graph: gmopt-compile's
/// default, so running an ONNX file trains what compiling it would give.
constexpr llvm::StringLiteral kOnnxRunPipeline = kDefaultPipeline;

/// Loads \p path: a `.gm` file (recognised by its magic bytes or its
/// extension) or an ONNX training graph. \p dims binds symbolic dimensions;
/// for ONNX input every symbolic dimension of a graph input that \p inputs
/// supplies a tensor for is bound from that tensor's shape (a contradiction
/// is an error). The ONNX import is rewritten by \p onnxPipeline
/// (kOnnxRunPipeline when empty; a `.gm` file is used as compiled, and a
/// pipeline for one is an error); with \p wantOriginal the
/// un-rewritten import (or the `.gm` file's original) is kept as well.
/// Fails if the model has no gradients or a dimension stays unbound.
///
/// With \p optimizer, a module without an optimizer node gets the one it
/// describes (buildOptimizer): an ONNX import before its pipeline runs, a
/// `.gm` module (and its original) after loading, re-planned with
/// plan-buffers. A module that has an optimizer keeps it.
///
/// External-data initializers are left unread (mapped when the run first
/// needs them); their files are looked for in \p externalDataDir when
/// given, else where the `.gm` file recorded them, else next to the ONNX
/// model.
///
/// Plans made here (an ONNX model's pipeline, a `.gm` re-planned for an
/// added optimizer) reserve the kernel workspace of \p backend's kernels.
llvm::Expected<RunnableModel> loadRunnableModel(
    llvm::StringRef path, const std::map<std::string, int64_t> &dims,
    const TestDataSet *inputs, bool wantOriginal,
    llvm::StringRef onnxPipeline = "", const OptimizerSpec *optimizer = nullptr,
    llvm::StringRef externalDataDir = "",
    BackendKind backend = BackendKind::Cpu);

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// The range an integer input must lie in, derived from how the graph uses
/// it.
struct IndexRange {
  /// Smallest valid value.
  int64_t lowest = 0;
  /// One past the largest valid value.
  int64_t end = 0;
  /// Smallest value synthetic data draws (0 also for Gather indices, whose
  /// valid range includes negative ones).
  int64_t syntheticLowest = 0;
  /// A value allowed outside the range (a loss's ignore_index).
  std::optional<int64_t> ignoreIndex;
  /// `labels` or `index`: how the value is used, for messages.
  std::string role;
};

/// Derives the valid range of integer graph input \p input from its uses
/// (through view ops): class labels of SoftmaxCrossEntropyLoss and
/// NegativeLogLikelihoodLoss (and their ONNX Runtime internal/gradient
/// forms) lie in [0, C) with C the scores' dimension 1; Gather and
/// GatherElements indices lie in [-n, n) with n the data's extent on the
/// gather axis. Several uses intersect. nullopt when no use constrains it.
std::optional<IndexRange> deriveIndexRange(const Value *input);

/// Where a graph input's value came from.
enum class InputOrigin {
  /// A tensor of the --inputs directory.
  TestData,
  /// The --weights file.
  Weights,
  /// The graph's own default (an ONNX initializer with the input's name).
  GraphDefault,
  /// Zeros (accumulation buffers).
  Zeros,
  /// lazy_reset_grad's default, true.
  DefaultTrue,
  /// Seeded synthetic data or initial weights.
  Synthetic,
  /// The optimizer's learning rate and update signal, which trainModule
  /// sets before every step (bound to zeros until then).
  FedEachStep,
};
/// `test data`, `weights`, `graph default`, `zeros`, `true`, `synthetic`,
/// `fed each step`.
llvm::StringRef inputOriginName(InputOrigin origin);

/// The value given to one graph input.
struct BoundInput {
  /// The graph input.
  const Value *input = nullptr;
  /// Its value, of exactly the input's type.
  TensorData data;
  /// Where it came from.
  InputOrigin origin = InputOrigin::Synthetic;
};

/// Where graph-input values come from.
struct InputSources {
  /// The --inputs directory, or null.
  const TestDataSet *testData = nullptr;
  /// The --weights file, or null.
  const WeightSet *weights = nullptr;
  /// With --weights, a parameter the file does not hold takes its value from
  /// the next source (test data, graph default, seeded init) instead of
  /// being an error.
  bool allowMissingWeights = false;
  /// What a missing parameter's error tells the user to do (a tool names
  /// its flag; a library caller leaves it empty for no hint).
  std::string missingWeightsHint =
      "pass --allow-missing-weights to initialize it";
  /// Seed of synthetic data and initial weights.
  uint64_t seed = 0;
  /// This process's data-parallel rank: a ZeRO shard input is bound as
  /// this rank's slice of the whole tensors a checkpoint holds.
  int64_t rank = 0;
};

/// Gives every graph input of \p module a value, in this order of
/// preference: for parameters the weights file (with a weights file, a
/// parameter it does not hold is an error unless allowMissingWeights), then
/// the test data, then the graph default, then seeded initialization
/// (Xavier-uniform for
/// tensors of rank >= 2; ones for rank-1 tensors named like a
/// normalization gain (`weight`, `gamma`, `scale`); zeros otherwise); for
/// accumulation buffers the test data, else zeros; for optimizer state
/// (AdamW's moments, the step count) the weights file, the test data, else
/// zeros; the learning rate and the update signal are FedEachStep; for
/// lazy_reset_grad the
/// test data, else true; for data inputs the test data, the graph default,
/// or, only when there is no test data at all, seeded synthetic data
/// (floats N(0,1), integers uniform in the range deriveIndexRange gives or,
/// for an integer input the graph only compares for equality with
/// constants (every use an Equal against a constant scalar, as a padding
/// mask's `mask == 0`), uniform in [smallest constant, largest + 2), so each
/// comparison sees both outcomes; booleans uniform; any other integer input
/// is an error). With test data, a data input it does not hold (and that has no
/// graph default) is an error. Tensors are matched by name (an unnamed
/// input_K.pb by its number K). Every supplied tensor's type must equal
/// the input's, and integer inputs must lie in their derived range.
/// Synthetic values depend only on the seed and the input's name and type,
/// so two modules with the same inputs get the same values. Made values
/// are allocated without throwing: a size the system cannot provide is an
/// error naming the input.
llvm::Expected<std::vector<BoundInput>> bindInputs(const Module &module,
                                                   const InputSources &sources);

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

/// One finished optimizer step, as TrainingOptions::onStep hears of it.
struct StepProgress {
  /// The step (from 1) and the number of steps.
  unsigned step = 0;
  unsigned steps = 0;
  /// Its loss (the mean over its micro-steps).
  double loss = 0;
  /// Wall time of its micro-steps, in milliseconds.
  double milliseconds = 0;
};

/// How to train. Without `batches` every micro-step sees the same inputs
/// (one fixed batch), as testdata's reference runs do.
///
/// The update is the module's own in-graph optimizer (an AdamWOptimizer or
/// SGDOptimizerV2 node, see ir/Optimizer.h); a module without one trains
/// without updates. Before each optimizer step trainModule feeds the
/// learning rate and the step count ((updates done so far) + 1, ONNX
/// Runtime's rule) and, in each micro-step, the update signal: true on the
/// last micro-step only, so the optimizer fires once per optimizer step,
/// after the last accumulation. After the step it reads the optimizer's
/// flag and counts the update when it is set, leaving the step-count input
/// at the number of updates done (what a checkpoint saves).
///
/// Gradient accumulation: the K = `accumulate` micro-steps of an optimizer
/// step sum their gradients into the accumulation buffers (lazy_reset_grad
/// is true on the first micro-step and false after; a graph without a
/// lazy_reset_grad input has its buffers zeroed by the runtime before the
/// first micro-step of every step, so nothing is summed across steps). With
/// K > 1 the loss-gradient seed is scaled by 1/K, so the accumulated
/// gradient of a mean-reduced loss is the gradient of one step over the K
/// micro-batches concatenated (what users of accumulation expect); the
/// reported loss is the mean over the micro-steps.
struct TrainingOptions {
  /// Backend settings (mode, seed of random ops, threads).
  ExecutorOptions executor;
  /// The backend (already resolved by selectBackend).
  BackendKind backend = BackendKind::Cpu;
  /// CUDA: fp32 GEMMs may use TF32 tensor cores (--allow-tf32).
  bool allowTf32 = false;
  /// Optimizer steps.
  unsigned steps = 1;
  /// Micro-steps per optimizer step (see above).
  unsigned accumulate = 1;
  /// The learning rate fed to the optimizer's learning_rate input.
  float learningRate = 0.01f;
  /// False keeps the update signal false: no update (--optimizer=none on a
  /// module that has an optimizer).
  bool update = true;
  /// Data inputs per micro-step, used round-robin: micro-step i (counted
  /// over the whole run) sets the bindings of batches[i % size] before it
  /// runs. Empty: the inputs given to trainModule serve every micro-step.
  std::vector<std::vector<BoundInput>> batches;
  /// Called after every optimizer step (after its \p log line), if set.
  std::function<void(const StepProgress &)> onStep;
  /// If set, maps each step's loss (this process's mean over its
  /// micro-steps) to the one logged and returned - in a data-parallel run
  /// the mean over the ranks (a collective, so it may fail).
  std::function<llvm::Expected<double>(double)> reduceLoss;
  /// If set, makes a ZeRO-sharded module's final state whole: given this
  /// rank's shard of an optimizer-state (or parameter) bucket, returns
  /// every rank's, in rank order (a collective every rank calls in the
  /// same order). The final state then names the whole tensors the way the
  /// unsharded step does, so a checkpoint restores on any world size.
  std::function<llvm::Expected<std::vector<float>>(llvm::ArrayRef<float>)>
      gatherShards;
};

/// One micro-step's nodes, as ExecutorOptions::profile times them.
struct MicroStepTrace {
  /// When the micro-step started, in milliseconds since the first one did.
  double startMilliseconds = 0;
  /// Every node of the step (Executable::getLastStepNodeTimings).
  std::vector<NodeTiming> nodes;
};

/// The micro-steps of a run of \p microSteps that a step-time median
/// leaves out as warm-up: the first one (lazy kernel loading, cuBLASLt's
/// algorithm queries, the eager pool's first reservations, cold caches)
/// when there are at least two, else none.
unsigned warmupMicroSteps(size_t microSteps);

/// The median of \p milliseconds after its first \p warmup entries (all of
/// them when \p warmup leaves none); 0 when empty.
double medianAfterWarmup(llvm::ArrayRef<double> milliseconds, unsigned warmup);

/// What a training run produced.
struct TrainingResult {
  /// Loss of each optimizer step (the mean over its micro-steps).
  std::vector<double> losses;
  /// Wall time of every micro-step's forward+backward, in milliseconds.
  std::vector<double> microStepMilliseconds;
  /// Processor time of the whole process (every thread) during each
  /// micro-step's runStep, in milliseconds: on a machine whose cores are
  /// shared, the cost of the step without the time spent waiting for a core
  /// (spinning workers count as busy).
  std::vector<double> microStepCpuMilliseconds;
  /// Optimizer updates applied (the optimizer's flag was set), on top of
  /// the step count the run started from.
  uint64_t updates = 0;
  /// Optimizer steps whose update was asked for but not applied (mixed
  /// precision's overflow check stopped it).
  uint64_t skippedUpdates = 0;
  /// The persistent state after the last step: every parameter (trainable
  /// and frozen), then every optimizer state input, the step count and the
  /// loss-scale state, by graph input name (what --save-weights writes);
  /// with TrainingOptions::gatherShards a ZeRO shard is replaced by the
  /// whole tensors, in the unsharded step's order.
  std::vector<NamedTensor> finalState;
  /// The loss tensor after the first micro-step.
  TensorData firstLoss;
  /// The name of the loss value.
  std::string lossName;
  /// Every trainable parameter's gradient after the first step's
  /// micro-steps (the accumulated mean; before any update), keyed by
  /// parameter name, in signature order.
  std::vector<std::pair<std::string, TensorData>> firstGradients;
  /// The same after the last step's micro-steps (before its update).
  std::vector<std::pair<std::string, TensorData>> lastGradients;
  /// The memory measured over the whole run.
  MemoryReport memory;
  /// The planned arena (0 in eager mode).
  uint64_t arenaBytes = 0;
  /// The planned host arena of offloaded tensors (0: none, or eager mode);
  /// apart from the device peak, as memory.hostPeakBytes is.
  uint64_t hostArenaBytes = 0;
  /// Planned mode: kernel scratch (aligned bytes, summed over the run) the
  /// plan's workspace slices did not cover; 0 when the plan was made with
  /// the CPU workspace model.
  uint64_t unplannedScratchBytes = 0;
  /// Per-op kernel times (with ExecutorOptions::profile), most expensive
  /// first.
  std::vector<OpProfile> profile;
  /// Every micro-step's nodes (with ExecutorOptions::profile).
  std::vector<MicroStepTrace> trace;

  /// On the CUDA backend, the device's own memory figures (pool high-water
  /// marks, cudaMemGetInfo) to cross-check `memory` with; absent elsewhere.
  std::optional<CudaMemoryMeasurement> cudaMemory;

  /// The micro-steps the step-time median leaves out as warm-up (see
  /// warmupMicroSteps).
  unsigned getWarmupMicroSteps() const {
    return warmupMicroSteps(microStepMilliseconds.size());
  }
  /// The median micro-step time after the warm-up micro-steps (0 without
  /// steps).
  double medianStepMilliseconds() const;
};

/// What the runtime does around the steps for gradient accumulation.
struct AccumulationPlan {
  /// Buffers the runtime zeroes before each step's first micro-step (all of
  /// them when the graph has no lazy_reset_grad input).
  std::vector<const Value *> buffersToZero;
  /// (sum, buffer): an InPlaceAccumulator (V1) result copied into its
  /// buffer after every micro-step, since V1 returns the sum instead of
  /// writing the buffer.
  std::vector<std::pair<const Value *, const Value *>> feedBack;
  /// With K > 1 micro-steps: the loss-gradient seed scaled by 1/K.
  std::optional<TensorData> scaledSeed;
};

/// The accumulation plan of \p module for \p microSteps micro-steps per
/// optimizer step. Errors: a V1 accumulator whose sum is not a graph
/// output; K > 1 on a graph without a constant float seed.
llvm::Expected<AccumulationPlan> planAccumulation(const Module &module,
                                                  unsigned microSteps);

/// Prepares \p module, sets \p inputs and runs the steps of \p options.
/// \p log (if given) receives one line per step. A non-finite loss is a
/// NumericalError `loss is NaN at step S` (steps count from 1).
llvm::Expected<TrainingResult> trainModule(const Module &module,
                                           llvm::ArrayRef<BoundInput> inputs,
                                           const TrainingOptions &options,
                                           llvm::raw_ostream *log = nullptr);

//===----------------------------------------------------------------------===//
// Comparing with references
//===----------------------------------------------------------------------===//

/// The tolerance of every comparison: a tensor matches its reference when
/// both have the same type, every element is finite, and
///   max_i |got_i - ref_i| <= max(rtol * max_i |ref_i|, atol),
/// i.e. the error relative to the reference's largest magnitude (the
/// measure testdata/README.md states) with an absolute floor for
/// references that are (nearly) zero.
struct Tolerance {
  /// Relative tolerance.
  double rtol = 1e-4;
  /// Absolute floor.
  double atol = 1e-6;
};

/// One tensor compared with its reference.
struct TensorComparison {
  /// What was compared (`loss`, or the gradient's reference name).
  std::string name;
  /// max |got - ref|.
  double maxAbsError = 0;
  /// maxAbsError / max |ref| (0 when both are 0, inf when only the
  /// reference is 0).
  double maxRelError = 0;
  /// max |ref|.
  double referenceMagnitude = 0;
  /// Within tolerance.
  bool ok = false;
  /// Why it failed when the numbers cannot be compared (type mismatch,
  /// non-finite values); empty otherwise.
  std::string problem;
};

/// Compares \p got with \p reference (float tensors of any float type).
TensorComparison compareTensors(llvm::StringRef name, const TensorData &got,
                                const TensorData &reference,
                                const Tolerance &tolerance);

/// Compares the first-step loss and every gradient of \p result with the
/// references of \p expected: the loss with the output named like the loss
/// value (else output 0); the gradient of parameter P with the output named
/// `P_grad`. A missing reference is an input error.
llvm::Expected<std::vector<TensorComparison>>
compareWithReference(const TrainingResult &result, const TestDataSet &expected,
                     const Tolerance &tolerance);

/// A reference training run: testdata's adamw_losses.json (ONNX Runtime's
/// training API with the artifacts' AdamW) or sgd_losses.json (plain SGD).
struct LossReference {
  /// The optimizer the run used: the file's `optimizer` (`AdamW` with its
  /// `hyperparameters`, or `SGD`; a file without the key is plain SGD).
  OptimizerSpec optimizer;
  /// The learning rate the curve was made with.
  double learningRate = 0;
  /// losses[k]: the loss after k updates.
  std::vector<double> losses;
  /// One trainable parameter after the last update: flat elements 0,
  /// stride, 2*stride, ... of a tensor of `shape`.
  struct FinalParameter {
    std::string name;
    std::vector<int64_t> shape;
    int64_t stride = 1;
    TensorData values;
  };
  /// The final parameters (empty when the file lists none).
  std::vector<FinalParameter> finalParameters;
};
/// The name --sgd-reference files were read as before LossReference.
using SgdReference = LossReference;

/// Reads a loss-reference file: `learning_rate` and `losses`, optionally
/// `optimizer` (`AdamW` needs `hyperparameters` alpha, beta, epsilon,
/// weight_decay, correct_bias, adam_mode) and `final_parameters`
/// (`directory` relative to the file, `params` of name, file, shape,
/// stride).
llvm::Expected<LossReference> readLossReference(llvm::StringRef path);
/// readLossReference, for callers of the SGD-only reader.
inline llvm::Expected<LossReference> readSgdReference(llvm::StringRef path) {
  return readLossReference(path);
}

/// Compares \p losses step by step with \p reference (scalar comparisons
/// with the same criterion as compareTensors).
std::vector<TensorComparison> compareLossCurve(llvm::ArrayRef<double> losses,
                                               const LossReference &reference,
                                               const Tolerance &tolerance);

/// Compares the final parameters of \p result with those of \p reference
/// (the sampled elements, with compareTensors' criterion). A reference
/// parameter the run does not have, or of another shape, is an input
/// error.
llvm::Expected<std::vector<TensorComparison>>
compareFinalParameters(const TrainingResult &result,
                       const LossReference &reference,
                       const Tolerance &tolerance);

/// The largest relative difference (as compareTensors measures it) between
/// the gradients of two runs, over the parameters both have; 0 if none.
double maxGradientRelativeDifference(const TrainingResult &a,
                                     const TrainingResult &b);

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_RUNTIME_H
