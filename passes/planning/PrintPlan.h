//===- PrintPlan.h - Printing module.plan for golden tests ------*- C++ -*-===//
//
// A diagnostic pass that changes nothing: it prints the module's execution
// plan (ExecutionPlan::print: one line per value in schedule order, then the
// figures) to stdout, and optionally the human report (PlanReport.h), so lit
// tests can FileCheck a plan with
// `gmopt-opt %s --passes=plan-buffers,print-plan`.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_PRINTPLAN_H
#define GMOPT_PASSES_PLANNING_PRINTPLAN_H

#include "passes/Pass.h"

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// The `print-plan` pass.
class PrintPlanPass : public Pass {
public:
  /// Tunables; each is a pipeline option (`print-plan{report=true}`).
  struct Options {
    /// Also print the figures as the human report table.
    bool report = false;
  };

  /// A pass with the default options, printing to llvm::outs().
  PrintPlanPass();
  /// A pass with \p options printing to \p os.
  PrintPlanPass(Options options, llvm::raw_ostream &os);

  llvm::StringRef getName() const override { return "print-plan"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
  llvm::raw_ostream &os;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_PRINTPLAN_H
