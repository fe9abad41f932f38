//===- PhaseTimer.h - Wall time of a tool's phases --------------*- C++ -*-===//
//
// gmopt-compile's --time-compile: the wall time of each phase of one run
// (reading and importing the model, each pass of the pipeline and the
// verifier after them, the eager baseline, writing the outputs), each tagged
// with a kind (import / pass / plan / verify / report / write) so a bench
// script can split a compile into import, passes and planning. Rendered as
// a table for people and as JSON for scripts. Pass times come from the pass
// manager's own instrumentation (PassManager::getTimings), not a second
// clock around each pass.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_COMPILER_PHASETIMER_H
#define GMOPT_TOOLS_COMPILER_PHASETIMER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class PassManager;

/// What a timed phase does; the JSON and the table name it.
enum class PhaseKind { Import, Pass, Plan, Verify, Report, Write };

/// The lower-case name of \p kind: `import`, `pass`, `plan`, `verify`,
/// `report`, `write`.
llvm::StringRef phaseKindName(PhaseKind kind);

/// Wall and CPU time of one phase.
struct PhaseTiming {
  /// What the phase did, e.g. `import`, `schedule`, `write .gm`.
  std::string name;
  /// Its kind.
  PhaseKind kind = PhaseKind::Pass;
  /// Wall-clock seconds.
  double seconds = 0;
  /// CPU seconds of the process (std::clock): on a machine shared with
  /// other work, the measure of the compiler's own work.
  double cpuSeconds = 0;
};

/// The phases of one tool run in the order they ran.
class PhaseTimer {
public:
  /// Starts a phase named \p name; it ends at the next start(),
  /// addPassTimings() or stop().
  void start(llvm::StringRef name, PhaseKind kind);
  /// Ends the running phase, if any.
  void stop();
  /// Ends the running phase and appends the pass manager's timings of its
  /// last run: a pass that writes the plan is a Plan phase, the others
  /// Pass phases, and the accumulated verification a Verify phase.
  void addPassTimings(const PassManager &passManager);

  /// The finished phases in order.
  llvm::ArrayRef<PhaseTiming> getPhases() const { return phases; }
  /// The wall seconds of every finished phase of \p kind, summed.
  double getSeconds(PhaseKind kind) const;
  /// The CPU seconds of every finished phase of \p kind, summed.
  double getCpuSeconds(PhaseKind kind) const;
  /// The wall seconds of every finished phase, summed.
  double getTotalSeconds() const;
  /// The CPU seconds of every finished phase, summed.
  double getTotalCpuSeconds() const;

  /// Prints the table: one row per phase, then the total per kind and the
  /// total.
  void print(llvm::raw_ostream &os) const;
  /// `{"phases": [{"name", "kind", "seconds", "cpu_seconds"}...],
  /// "seconds_by_kind": {"import": s, ...}, "cpu_seconds_by_kind": {...},
  /// "total_seconds": s, "total_cpu_seconds": s}`.
  llvm::json::Object toJson() const;

private:
  std::vector<PhaseTiming> phases;
  std::string runningName;
  PhaseKind runningKind = PhaseKind::Pass;
  std::chrono::steady_clock::time_point runningStart;
  std::clock_t runningCpuStart = 0;
  bool running = false;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_COMPILER_PHASETIMER_H
