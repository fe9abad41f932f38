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

#include "tools/driver/Runtime.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// The --optimizer choices.
enum class OptimizerChoice { SGD, AdamW, None };

/// `sgd`, `adamw` or `none`.
llvm::StringRef optimizerChoiceName(OptimizerChoice choice);

/// Everything one gmopt-run invocation asks for. Empty paths mean "not
/// given".
struct RunConfig {
  /// The `.gm` file or ONNX training graph.
  std::string modelPath;
  /// --backend.
  BackendKind backend = BackendKind::Auto;
  /// --mode, --seed (random ops), --threads, --profile.
  ExecutorOptions executor;
  /// --steps, and whether it was given (an SGD reference sets the count
  /// otherwise).
  unsigned steps = 1;
  bool stepsGiven = false;
  /// --accumulate.
  unsigned accumulate = 1;
  /// --optimizer, and whether it was given.
  OptimizerChoice optimizer = OptimizerChoice::SGD;
  bool optimizerGiven = false;
  /// --lr.
  float learningRate = 0.01f;
  /// --dim bindings.
  std::map<std::string, int64_t> dims;
  /// --passes (ONNX input only; empty = kOnnxRunPipeline).
  std::string passes;
  /// --inputs directory.
  std::string inputsDir;
  /// --weights file, and --allow-missing-weights.
  std::string weightsPath;
  bool allowMissingWeights = false;
  /// --seed of synthetic inputs and initial weights.
  uint64_t seed = 0;
  /// --check directory.
  std::string checkDir;
  /// --sgd-reference file.
  std::string sgdReferencePath;
  /// --rtol / --atol.
  Tolerance tolerance;
  /// --baseline.
  bool baseline = false;
  /// --report-json file.
  std::string reportJsonPath;
};

/// Runs \p config: results (steps, memory, tables) go to \p out, the
/// backend notice to \p notices as `gmopt-run: NOTICE`. Returns the first
/// error as one message (starting with the file it is about); a
/// NumericalError for a non-finite loss or a comparison beyond tolerance,
/// in which case everything (tables, the JSON report) was still written.
llvm::Error runSession(const RunConfig &config, llvm::raw_ostream &out,
                       llvm::raw_ostream &notices);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_RUNSESSION_H
