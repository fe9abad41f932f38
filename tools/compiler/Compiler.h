//===- Compiler.h - Compiling a training graph as a library -----*- C++ -*-===//
//
// The public API of gmopt_compiler: what gmopt-compile does between reading
// its input and writing its outputs, as one call. compile() imports an ONNX
// model, builds the training step when asked (autodiff over a forward
// model, then tie-weights), merges the optimizer in, prepends the
// data-parallel or ZeRO collectives, searches the configurations that fit a
// memory limit (FitMemory.h) when one is given, runs the pass pipeline and
// plans the step. The result holds the compiled module, the imported one
// (for the `.gm` container's baseline) and what the report needs. Errors
// name files, values and passes, never a command-line flag.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_COMPILER_COMPILER_H
#define GMOPT_TOOLS_COMPILER_COMPILER_H

#include "tools/compiler/FitMemory.h"

#include "ir/Attribute.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "passes/PassManager.h"
#include "passes/autodiff/Autodiff.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class PhaseTimer;

/// What to compile and how.
struct CompileOptions {
  /// The ONNX model's path (messages; external data is found next to it).
  std::string inputPath;
  /// The model's bytes, which the caller keeps alive; none (a null
  /// StringRef): compile reads inputPath.
  llvm::StringRef inputBytes;
  /// Values of symbolic dimensions.
  std::map<std::string, int64_t> dims;
  /// The pipeline text (empty: no pass); none: passes/DefaultPipeline.h's.
  std::optional<std::string> pipeline;
  /// The optimizer merged into the step (none: the model's own, if any).
  std::optional<OptimizerSpec> optimizer;
  /// Build the training step from a forward model (autodiff).
  bool train = false;
  /// The autodiff pass's options (loss, frozen, trainable, data, mode).
  AutodiffPass::Options autodiff;
  /// Parameter values the passes that compare values read (tie-weights);
  /// may be empty.
  std::function<const TensorData *(llvm::StringRef)> parameterValue;
  /// Data-parallel ranks (1: none), the ZeRO stage (0, 1, 2), the bucket
  /// size of the collectives and whether they overlap the backward pass.
  unsigned ranks = 1;
  unsigned zeroStage = 0;
  std::string bucketBytes = "25MiB";
  bool overlap = false;
  /// A memory-limit search instead of the fixed pipeline.
  std::optional<FitRequest> fit;
  /// With fit: the largest value of the batch dimension that fits, searched
  /// up to this (a decimal number, or empty for no batch search).
  std::string maxBatch;
  /// Keep the imported module (for a `.gm` container, a report, a timeline).
  bool keepOriginal = true;
  /// Configures each pass manager before its pipeline is added (the
  /// instrumentation and workspace model a tool chose); may be empty.
  std::function<llvm::Error(PassManager &)> configurePasses;
  /// Times the phases, when given.
  PhaseTimer *timer = nullptr;
  /// Receives the memory-limit search's table, when given.
  llvm::raw_ostream *log = nullptr;
};

/// What compile() produced.
struct CompileResult {
  /// The compiled training step (rewritten, scheduled, planned).
  std::unique_ptr<Module> module;
  /// The module as imported (with the training step and optimizer built),
  /// when CompileOptions::keepOriginal.
  std::unique_ptr<Module> original;
  /// The pipeline that ran, as the pass manager prints it.
  std::string pipeline;
  /// Micro-steps per optimizer step the memory-limit search chose (1
  /// without a search).
  unsigned accumulate = 1;
  /// The memory-limit search's result (or the batch search's), as JSON.
  std::optional<llvm::json::Object> fitJson;
  /// The pass manager that ran the pipeline (its statistics and timings).
  std::unique_ptr<PassManager> passManager;
};

/// Checks that \p options' pipeline (the default when empty) parses and
/// configures, before any work.
llvm::Error checkPipeline(const CompileOptions &options);

/// Compiles \p options' model (see the file comment).
llvm::Expected<CompileResult> compile(const CompileOptions &options);

} // namespace gmopt

#endif // GMOPT_TOOLS_COMPILER_COMPILER_H
