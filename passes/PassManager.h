//===- PassManager.h - Running a pipeline of passes -------------*- C++ -*-===//
//
// The PassManager runs passes in order over one Module and owns everything
// around them (mlir/lib/Pass/PassManagerOptions.cpp): verification after
// each pass, IR dumps before/after chosen passes, wall-clock timing, and the
// statistics passes report. It can render the pipeline it holds as text
// that createPipeline reads back into identical passes, which is how a tool
// makes every run replayable.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PASSMANAGER_H
#define GMOPT_PASSES_PASSMANAGER_H

#include "passes/Pass.h"

#include "ir/serialization/TextIR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;

/// Instrumentation switches of a PassManager.
struct PassManagerOptions {
  /// Run the verifier after every pass but a planner (Pass::writesPlan,
  /// which leaves the graph and signature as they were); a failure stops
  /// the pipeline.
  bool verifyEach = true;
  /// Dump the IR before every pass.
  bool printBeforeAll = false;
  /// Dump the IR after every pass.
  bool printAfterAll = false;
  /// Dump the IR before each pass with one of these names.
  std::vector<std::string> printBefore;
  /// Dump the IR after each pass with one of these names.
  std::vector<std::string> printAfter;
  /// Print a wall-clock table of every pass (and the verifier) after a
  /// successful run.
  bool timePasses = false;
  /// Print the statistics table after a successful run.
  bool passStatistics = false;
  /// How IR dumps print the module.
  PrintOptions dumpOptions;
  /// Check every pass that reports "unchanged" against a structural
  /// fingerprint of the module taken before it ran (computeFingerprint),
  /// and abort with report_fatal_error if it lied: the plan would be kept
  /// for a module it no longer describes. On by default in builds with
  /// assertions, off in NDEBUG builds (it costs a walk of the module per
  /// pass).
#ifndef NDEBUG
  bool checkUnchangedPasses = true;
#else
  bool checkUnchangedPasses = false;
#endif
};

/// A 64-bit fingerprint of everything a pass may change in \p module
/// except the plan: per node (in schedule order) its op, name, operands
/// (by value position), attributes, result names and types, phase and
/// random stream id; graph inputs, initializers (types, names and bytes),
/// outputs, the training signature and the module facts. Equal modules
/// give equal fingerprints; any edit changes it (up to hash collisions).
uint64_t computeFingerprint(const Module &module);

/// Wall and CPU time of one pass execution.
struct PassTiming {
  /// Pass name, or `(verifier)` for the verification after passes.
  std::string name;
  /// Wall-clock seconds.
  double seconds = 0;
  /// CPU seconds of the whole process (all threads; std::clock), which a
  /// machine busy with other work inflates less than the wall time.
  double cpuSeconds = 0;
};

/// Runs a pipeline of passes with instrumentation.
class PassManager {
public:
  explicit PassManager(PassManagerOptions options = {});
  ~PassManager();

  /// Appends \p pass to the pipeline.
  void addPass(std::unique_ptr<Pass> pass);
  /// Parses \p pipelineText (see PipelineParser.h) and appends its passes.
  /// On error nothing is appended.
  llvm::Error addPipeline(llvm::StringRef pipelineText);
  /// The passes in pipeline order.
  llvm::ArrayRef<std::unique_ptr<Pass>> getPasses() const { return passes; }
  size_t size() const { return passes.size(); }

  /// Runs every pass on \p module. Stops at the first pass error or failed
  /// verification; the error names the pass. Reports (timing, statistics)
  /// are printed to the report stream after a successful run.
  llvm::Error run(Module &module);
  /// Whether the last run changed the module.
  bool getLastRunChanged() const { return lastRunChanged; }

  /// The pipeline as text with every option explicit; createPipeline on it
  /// yields identical passes.
  std::string getPipelineString() const;

  /// Where IR dumps, the timing table and statistics go (stderr by default).
  void setReportStream(llvm::raw_ostream &os) { reportStream = &os; }
  /// The instrumentation switches.
  PassManagerOptions &getOptions() { return options; }
  const PassManagerOptions &getOptions() const { return options; }

  /// Statistics reported by the passes during the last run (each run
  /// starts from zero; several instances of one pass add up).
  PassContext &getContext() { return context; }
  const PassContext &getContext() const { return context; }
  /// Timings of the last run, in execution order.
  llvm::ArrayRef<PassTiming> getTimings() const { return timings; }
  /// Prints the timing table of the last run.
  void printTimings(llvm::raw_ostream &os) const;

private:
  bool shouldPrintBefore(const Pass &pass) const;
  bool shouldPrintAfter(const Pass &pass) const;
  void dumpIR(const Module &module, llvm::StringRef when,
              const Pass &pass) const;

  PassManagerOptions options;
  std::vector<std::unique_ptr<Pass>> passes;
  PassContext context;
  std::vector<PassTiming> timings;
  llvm::raw_ostream *reportStream;
  bool lastRunChanged = false;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PASSMANAGER_H
