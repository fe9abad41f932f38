//===- PlanReport.h - Reporting a module's memory plan ----------*- C++ -*-===//
//
// The figures plan-buffers records in module.plan, rendered for people (a
// table: naive bytes, eager estimate, lower bound with its step, arena,
// fragmentation, in-place savings, persistent bytes by category, planned
// peak) and for machines (an llvm::json::Object with stable snake_case
// keys). Tools print these for `--report` / `--report-json`; the printed
// plan itself is ExecutionPlan::print (the `print-plan` pass).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_PLANREPORT_H
#define GMOPT_PASSES_PLANNING_PLANREPORT_H

#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;
class PassContext;

/// Prints a table of \p module's plan figures to \p os, or one line saying
/// there is no plan. \p eagerBaselineBytes, when given, is the eager
/// baseline of the graph the user started from (estimateEagerPeakBytes of
/// the original module, or a measured figure); the planned peak is then
/// also shown against it.
void printPlanReport(const Module &module, llvm::raw_ostream &os,
                     std::optional<uint64_t> eagerBaselineBytes = std::nullopt);

/// \p module's plan figures as JSON: naive_bytes, eager_estimate_bytes,
/// lower_bound_bytes, lower_bound_step, arena_bytes, persistent_bytes,
/// persistent_by_category (parameters, gradients, optimizer_state,
/// activations, temporaries, workspace), planned_bytes (arena +
/// persistent), fragmentation (arena / lower bound - 1) and
/// in_place_saved_bytes; with \p eagerBaselineBytes also
/// eager_baseline_bytes. Byte counts are integers. An empty object when the
/// module has no plan.
llvm::json::Object
planReportJson(const Module &module,
               std::optional<uint64_t> eagerBaselineBytes = std::nullopt);

/// The statistics every pass of a pipeline reported, as JSON: one object
/// per pass (in the order they first reported), keyed by statistic name,
/// integer values - e.g. {"recompute": {"saved-bytes-before": ..., ...}}.
llvm::json::Object passStatisticsJson(const PassContext &context);

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_PLANREPORT_H
