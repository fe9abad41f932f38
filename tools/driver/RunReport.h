//===- RunReport.h - What gmopt-run prints and writes as JSON ---*- C++ -*-===//
//
// gmopt-run's outputs, kept apart from its logic: the comparison tables of
// --check and --sgd-reference, the optimized-vs-baseline table of
// --baseline, and the --report-json document. The JSON keys are a stable
// interface (bench/ort_compare.py and the lit tests read them):
//
//   backend, device (the CUDA device's name; absent on the CPU), mode,
//   steps, accumulate, optimizer, pipeline, losses,
//   optimized  {peak_bytes, by_category{parameters, gradients,
//               optimizer_state, activations, temporaries, workspace},
//               step_ms (median micro-step after warmup_micro_steps
//               warm-up micro-steps: the first when there are two or
//               more), warmup_micro_steps, first_step_ms, micro_step_ms
//               [every micro-step], micro_step_cpu_ms [the process's
//               processor time in each], arena_bytes, unplanned_scratch_bytes
//               (kernel scratch outside the plan's workspace slices), the
//               host arena of offloaded tensors apart from peak_bytes
//               (host_arena_bytes, host_peak_bytes, host_by_category,
//               host_current_bytes), and on
//               CUDA device_memory (backend/cuda/CudaMeasurement.h's
//               cudaMemoryJson: pool_used_high_bytes,
//               pool_reserved_high_bytes, free_before_bytes,
//               lowest_free_bytes, device_delta_bytes, device_used_bytes,
//               accounted_bytes, counted_peak_bytes, device_allocations,
//               tolerance_bytes, agrees)},
//   baseline   (same keys, or null without --baseline),
//   peak_reduction (1 - optimized/baseline peak, or null),
//   max_grad_rel_diff (or null),
//   plan       {source, and passes/planning/PlanReport.h's keys: naive_bytes,
//               eager_estimate_bytes, lower_bound_bytes, lower_bound_step,
//               arena_bytes, host_arena_bytes, persistent_bytes,
//               persistent_by_category,
//               planned_bytes, fragmentation, in_place_saved_bytes,
//               eager_baseline_bytes (the measured baseline peak)},
//   profile    (with --profile) [{op, calls, ms}],
//   check, sgd_reference (null unless requested):
//               {passed, rtol, atol, tensors: [{name, max_abs_error,
//               max_rel_error, ok}]}
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_RUNREPORT_H
#define GMOPT_TOOLS_DRIVER_RUNREPORT_H

#include "tools/runtime/Runtime.h"

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// The plan a module runs with, for the report.
struct PlanSummary {
  /// `module` (the plan the module came with, e.g. plan-buffers') or
  /// `trivial` (it had none; the no-reuse plan the executor falls back to).
  std::string source;
  /// passes/planning/PlanReport.h's planReportJson of the module, plus
  /// `source`.
  llvm::json::Object json;
};

/// Ensures \p module has a plan (the trivial one if it had none) and says
/// which. Fails if the trivial plan cannot be made (dynamic shapes).
llvm::Expected<std::string> ensurePlan(Module &module);

/// The plan report of \p module (which ensurePlan has given a plan), with
/// \p eagerBaselineBytes (the measured --baseline peak) when known.
PlanSummary summarizePlan(const Module &module, llvm::StringRef source,
                          std::optional<uint64_t> eagerBaselineBytes);

/// Everything one gmopt-run invocation measured.
struct RunSummary {
  /// The backend that ran (`cpu`, `cuda`).
  std::string backend;
  /// The CUDA device's name when the backend is `cuda`; empty otherwise.
  std::string device;
  /// `planned` or `eager`.
  std::string mode;
  /// Optimizer steps and micro-steps per step.
  unsigned steps = 0;
  unsigned accumulate = 1;
  /// `sgd`, `adamw` or `none`.
  std::string optimizer;
  /// The pipeline the module was compiled with.
  std::string pipeline;
  /// The run of the (rewritten) module.
  TrainingResult optimized;
  /// The --baseline run of the original module.
  std::optional<TrainingResult> baseline;
  /// The plan of the rewritten module.
  PlanSummary plan;
  /// --check results (absent if not requested).
  std::optional<std::vector<TensorComparison>> check;
  /// --sgd-reference results (absent if not requested).
  std::optional<std::vector<TensorComparison>> sgdReference;
  /// The tolerance of both comparisons.
  Tolerance tolerance;
};

/// True if every comparison is within tolerance.
bool allWithinTolerance(llvm::ArrayRef<TensorComparison> comparisons);

/// Prints a comparison table headed by \p title, one row per tensor (max
/// abs/rel error, ok/FAIL), then a verdict line.
void printComparisons(llvm::raw_ostream &os, llvm::StringRef title,
                      llvm::ArrayRef<TensorComparison> comparisons,
                      const Tolerance &tolerance);

/// Prints the optimized-vs-baseline table: peak per category and total,
/// step time, peak reduction, max gradient difference.
void printBaselineTable(llvm::raw_ostream &os, const TrainingResult &optimized,
                        const TrainingResult &baseline);

/// Prints the per-op kernel times of \p result (--profile): op, calls,
/// total and per-step milliseconds, share of the kernel time.
void printProfile(llvm::raw_ostream &os, const TrainingResult &result);

/// 1 - optimized/baseline peak bytes (0 when the baseline peak is 0).
double peakReduction(const TrainingResult &optimized,
                     const TrainingResult &baseline);

/// The --report-json document.
llvm::json::Object runReportJson(const RunSummary &summary);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_RUNREPORT_H
