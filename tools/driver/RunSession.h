//===- RunSession.h - One gmopt-run invocation as a call --------*- C++ -*-===//
//
// What gmopt-run does once its command line is parsed: read the inputs,
// weights and references, load the model, bind every graph input, train,
// compare with the references, run the --baseline, and write the report.
// RunMain.cpp only maps llvm::cl options onto a RunConfig and prints the
// returned error; tests and other front ends call runSession directly.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_RUNSESSION_H
#define GMOPT_TOOLS_DRIVER_RUNSESSION_H

#include "tools/driver/OptimizerCLOptions.h"
#include "tools/runtime/Runtime.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// Everything one gmopt-run invocation asks for. Empty paths mean "not
/// given".
struct RunConfig {
  /// The `.gm` file or ONNX training graph.
  std::string modelPath;
  /// --external-data-dir: where the model's external-data files are (empty:
  /// where the .gm file recorded them, or next to the ONNX model).
  std::string externalDataDir;
  /// --backend.
  BackendKind backend = BackendKind::Auto;
  /// --mode, --seed (random ops), --threads, --profile.
  ExecutorOptions executor;
  /// --steps, and whether it was given (an SGD reference sets the count
  /// otherwise).
  unsigned steps = 1;
  bool stepsGiven = false;
  /// --accumulate, and whether it was given (a .gm's recorded
  /// accumulation is the default).
  unsigned accumulate = 1;
  bool accumulateGiven = false;
  /// --optimizer, and whether it was given.
  OptimizerChoice optimizer = OptimizerChoice::SGD;
  bool optimizerGiven = false;
  /// The optimizer the command line describes (--optimizer-model, or
  /// --optimizer with its hyper-parameter flags); nullopt for none. It is
  /// built into a module that has no optimizer; a loss reference's
  /// optimizer takes its place.
  std::optional<OptimizerSpec> optimizerSpec;
  /// True if --optimizer-model or a hyper-parameter flag was given (the
  /// spec was asked for, not a default).
  bool optimizerSpecExplicit = false;
  /// --lr, and whether it was given.
  float learningRate = 0.01f;
  bool learningRateGiven = false;
  /// --dim bindings.
  std::map<std::string, int64_t> dims;
  /// --passes (ONNX input only; empty = kOnnxRunPipeline).
  std::string passes;
  /// --inputs directory.
  std::string inputsDir;
  /// --weights file, and --allow-missing-weights (which also starts the
  /// moments of a parameter an ONNX Runtime checkpoint's optimizer group
  /// holds none for at zero).
  std::string weightsPath;
  bool allowMissingWeights = false;
  /// --ignore-optimizer-state: an ONNX Runtime --weights checkpoint gives
  /// the parameters only.
  bool ignoreOptimizerState = false;
  /// --seed of synthetic inputs and initial weights.
  uint64_t seed = 0;
  /// --check directory.
  std::string checkDir;
  /// --loss-reference (or its alias --sgd-reference) file.
  std::string lossReferencePath;
  /// --save-weights file: parameters, optimizer state and step count after
  /// the run, which --weights reads back: a `*.pbseq` path gets a
  /// TensorProto sequence, any other an ONNX Runtime checkpoint.
  std::string saveWeightsPath;
  /// --dump-gradients directory: every trainable parameter's gradient
  /// after the run's one step, as NumPy files (GradientDump.h).
  std::string dumpGradientsDir;
  /// --rtol / --atol.
  Tolerance tolerance;
  /// --baseline.
  bool baseline = false;
  /// --allow-tf32 (CUDA: fp32 GEMMs on TF32 tensor cores).
  bool allowTf32 = false;
  /// --report-json file.
  std::string reportJsonPath;
  /// --timeline file: the memory timeline page of the baseline and the
  /// optimized plan (PlanTimeline.h).
  std::string timelinePath;
  /// --trace file: every node of every micro-step as Chrome trace events
  /// (TraceWriter.h); turns on kernel timing.
  std::string tracePath;
  /// Show the progress line on \p notices (RunMain: stderr is a terminal
  /// and no --quiet).
  bool progress = false;
  /// --verbose: in a data-parallel run every rank prints its log, not only
  /// rank 0.
  bool verbose = false;
};

/// Runs \p config: results (steps, memory, tables) go to \p out; the
/// backend fallback notice (`gmopt-run: NOTICE`) and, without --inputs, the
/// note naming the data inputs that get synthetic values go to \p notices,
/// once the inputs are bound (a run that fails earlier prints only its
/// error). --rtol and --atol must be finite and non-negative. Returns the
/// first error as one message (starting with the file it is about); a
/// NumericalError for a non-finite loss or a comparison beyond tolerance,
/// in which case everything (tables, the JSON report) was still written.
/// In a data-parallel run (DataParallelRun.h) the launch is checked before
/// any step, the step losses are the mean over the ranks, and ranks other
/// than 0 print nothing to \p out and \p notices unless config.verbose.
llvm::Error runSession(const RunConfig &config, llvm::raw_ostream &out,
                       llvm::raw_ostream &notices);

/// For `--backend=auto` on a CUDA device, before preparing: empty when
/// every node of \p model's module (and of its original, kept for
/// --baseline) has a CUDA kernel; else the notice that the run uses the CPU
/// backend instead, naming the first node without one and its op. An error
/// when the CPU cannot run \p model either: a `.gm` file whose plan was
/// made for the CUDA kernels' workspace model.
llvm::Expected<std::string> cudaFallbackNotice(const RunnableModel &model);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_RUNSESSION_H
