//===- RunReport.cpp - What gmopt-run prints and writes as JSON -----------===//
//
// Formatting only: tables for the terminal and the JSON document whose keys
// RunReport.h lists. Numbers that may be infinite or NaN (relative errors)
// are written to JSON as null, which every JSON reader accepts.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/RunReport.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "ir/Module.h"
#include "passes/planning/PlanReport.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace gmopt;

namespace {

llvm::json::Value finiteOrNull(double value) {
  if (std::isfinite(value))
    return value;
  return nullptr;
}

std::string mebibytes(uint64_t bytes) {
  return llvm::formatv("{0:f2} MiB", static_cast<double>(bytes) / (1 << 20));
}

double firstStepMilliseconds(const TrainingResult &result) {
  return result.microStepMilliseconds.empty()
             ? 0
             : result.microStepMilliseconds.front();
}

llvm::json::Object runJson(const TrainingResult &result) {
  llvm::json::Object object = result.memory.toJSON();
  object["step_ms"] = result.medianStepMilliseconds();
  object["warmup_micro_steps"] =
      static_cast<int64_t>(result.getWarmupMicroSteps());
  object["first_step_ms"] = firstStepMilliseconds(result);
  if (result.cudaMemory)
    object["device_memory"] = cudaMemoryJson(*result.cudaMemory);
  object["arena_bytes"] = static_cast<int64_t>(result.arenaBytes);
  object["host_arena_bytes"] = static_cast<int64_t>(result.hostArenaBytes);
  object["unplanned_scratch_bytes"] =
      static_cast<int64_t>(result.unplannedScratchBytes);
  llvm::json::Array microSteps;
  for (double ms : result.microStepMilliseconds)
    microSteps.push_back(ms);
  object["micro_step_ms"] = std::move(microSteps);
  llvm::json::Array cpuMicroSteps;
  for (double ms : result.microStepCpuMilliseconds)
    cpuMicroSteps.push_back(ms);
  object["micro_step_cpu_ms"] = std::move(cpuMicroSteps);
  return object;
}

llvm::json::Value comparisonsJson(llvm::ArrayRef<TensorComparison> comparisons,
                                  const Tolerance &tolerance) {
  llvm::json::Array tensors;
  for (const TensorComparison &comparison : comparisons) {
    llvm::json::Object entry;
    entry["name"] = comparison.name;
    entry["max_abs_error"] = finiteOrNull(comparison.maxAbsError);
    entry["max_rel_error"] = finiteOrNull(comparison.maxRelError);
    entry["ok"] = comparison.ok;
    if (!comparison.problem.empty())
      entry["problem"] = comparison.problem;
    tensors.push_back(std::move(entry));
  }
  llvm::json::Object object;
  object["passed"] = allWithinTolerance(comparisons);
  object["rtol"] = tolerance.rtol;
  object["atol"] = tolerance.atol;
  object["tensors"] = std::move(tensors);
  return object;
}

} // namespace

llvm::Expected<std::string> gmopt::ensurePlan(Module &module) {
  if (!module.plan.empty())
    return std::string("module");
  // The CPU backend runs it: reserve its kernels' scratch too.
  auto plan = makeTrivialPlan(module, getWorkspaceModel(WorkspaceTarget::Cpu));
  if (!plan)
    return plan.takeError();
  module.plan = std::move(*plan);
  return std::string("trivial");
}

PlanSummary gmopt::summarizePlan(const Module &module, llvm::StringRef source,
                                 std::optional<uint64_t> eagerBaselineBytes) {
  PlanSummary summary;
  summary.source = source.str();
  summary.json = planReportJson(module, eagerBaselineBytes);
  summary.json["source"] = summary.source;
  return summary;
}

bool gmopt::allWithinTolerance(llvm::ArrayRef<TensorComparison> comparisons) {
  return llvm::all_of(comparisons,
                      [](const TensorComparison &c) { return c.ok; });
}

void gmopt::printComparisons(llvm::raw_ostream &os, llvm::StringRef title,
                             llvm::ArrayRef<TensorComparison> comparisons,
                             const Tolerance &tolerance) {
  os << title
     << llvm::formatv(" (ok when max|got-ref| <= max({0:e1} * max|ref|, "
                      "{1:e1})):\n",
                      tolerance.rtol, tolerance.atol);
  size_t width = 6;
  for (const TensorComparison &comparison : comparisons)
    width = std::max(width, comparison.name.size());
  os << "  " << llvm::left_justify("tensor", width)
     << llvm::right_justify("max_abs_err", 14)
     << llvm::right_justify("max_rel_err", 14) << "  status\n";
  unsigned failures = 0;
  for (const TensorComparison &comparison : comparisons) {
    os << "  " << llvm::left_justify(comparison.name, width)
       << llvm::format("%14.3e%14.3e", comparison.maxAbsError,
                       comparison.maxRelError)
       << "  " << (comparison.ok ? "ok" : "FAIL");
    if (!comparison.problem.empty())
      os << " (" << comparison.problem << ")";
    os << "\n";
    failures += !comparison.ok;
  }
  if (failures)
    os << llvm::formatv("  {0} of {1} beyond tolerance\n", failures,
                        comparisons.size());
  else
    os << llvm::formatv("  all {0} within tolerance\n", comparisons.size());
}

void gmopt::printProfile(llvm::raw_ostream &os, const TrainingResult &result) {
  double total = 0;
  for (const OpProfile &entry : result.profile)
    total += entry.milliseconds;
  size_t steps = std::max<size_t>(1, result.microStepMilliseconds.size());
  size_t width = 2;
  for (const OpProfile &entry : result.profile)
    width = std::max(width, entry.op.size());
  os << llvm::formatv("kernel time by op over {0} micro-step{1} ({2:f3} ms "
                      "per micro-step in kernels):\n",
                      steps, steps == 1 ? "" : "s", total / steps);
  os << "  " << llvm::left_justify("op", width)
     << llvm::right_justify("calls", 9) << llvm::right_justify("total ms", 12)
     << llvm::right_justify("ms/step", 11) << llvm::right_justify("share", 8)
     << "\n";
  for (const OpProfile &entry : result.profile)
    os << "  " << llvm::left_justify(entry.op, width)
       << llvm::format("%9llu%12.3f%11.4f%7.1f%%\n",
                       static_cast<unsigned long long>(entry.calls),
                       entry.milliseconds, entry.milliseconds / steps,
                       total > 0 ? 100 * entry.milliseconds / total : 0.0);
}

double gmopt::peakReduction(const TrainingResult &optimized,
                            const TrainingResult &baseline) {
  if (!baseline.memory.peakBytes)
    return 0;
  return 1.0 - static_cast<double>(optimized.memory.peakBytes) /
                   static_cast<double>(baseline.memory.peakBytes);
}

void gmopt::printBaselineTable(llvm::raw_ostream &os,
                               const TrainingResult &optimized,
                               const TrainingResult &baseline) {
  os << llvm::left_justify("peak by category", 20)
     << llvm::right_justify("optimized", 16)
     << llvm::right_justify("baseline", 16) << "\n";
  for (MemoryCategory category : kAllMemoryCategories)
    os << llvm::left_justify(memoryCategoryName(category), 20)
       << llvm::right_justify(mebibytes(optimized.memory.atPeak(category)), 16)
       << llvm::right_justify(mebibytes(baseline.memory.atPeak(category)), 16)
       << "\n";
  os << llvm::left_justify("peak", 20)
     << llvm::right_justify(mebibytes(optimized.memory.peakBytes), 16)
     << llvm::right_justify(mebibytes(baseline.memory.peakBytes), 16) << "\n";
  os << llvm::left_justify("step time (median)", 20)
     << llvm::right_justify(
            llvm::formatv("{0:f3} ms", optimized.medianStepMilliseconds())
                .str(),
            16)
     << llvm::right_justify(
            llvm::formatv("{0:f3} ms", baseline.medianStepMilliseconds()).str(),
            16)
     << "\n";
  if (optimized.cudaMemory && baseline.cudaMemory) {
    // The device's own figures: what each run took from the device.
    auto row = [&](llvm::StringRef label, uint64_t a, uint64_t b) {
      os << llvm::left_justify(label, 20)
         << llvm::right_justify(mebibytes(a), 16)
         << llvm::right_justify(mebibytes(b), 16) << "\n";
    };
    row("device accounted", optimized.cudaMemory->getAccountedBytes(),
        baseline.cudaMemory->getAccountedBytes());
    row("device delta", optimized.cudaMemory->getDeviceDeltaBytes(),
        baseline.cudaMemory->getDeviceDeltaBytes());
  }
  os << llvm::formatv("peak reduction: {0:f1}%\n",
                      100 * peakReduction(optimized, baseline));
  os << llvm::formatv("max gradient relative difference: {0:e2}\n",
                      maxGradientRelativeDifference(optimized, baseline));
  os << llvm::formatv("step times: the median micro-step after {0} warm-up "
                      "micro-step{1} (optimized), {2} (baseline)\n",
                      optimized.getWarmupMicroSteps(),
                      optimized.getWarmupMicroSteps() == 1 ? "" : "s",
                      baseline.getWarmupMicroSteps());
}

llvm::json::Object gmopt::runReportJson(const RunSummary &summary) {
  llvm::json::Object object;
  object["backend"] = summary.backend;
  if (!summary.device.empty())
    object["device"] = summary.device;
  object["mode"] = summary.mode;
  object["steps"] = static_cast<int64_t>(summary.steps);
  object["accumulate"] = static_cast<int64_t>(summary.accumulate);
  object["optimizer"] = summary.optimizer;
  object["pipeline"] = summary.pipeline;
  llvm::json::Array losses;
  for (double loss : summary.optimized.losses)
    losses.push_back(finiteOrNull(loss));
  object["losses"] = std::move(losses);
  object["skipped_updates"] =
      static_cast<int64_t>(summary.optimized.skippedUpdates);
  object["optimized"] = runJson(summary.optimized);
  if (summary.baseline) {
    object["baseline"] = runJson(*summary.baseline);
    object["peak_reduction"] =
        peakReduction(summary.optimized, *summary.baseline);
    object["max_grad_rel_diff"] = finiteOrNull(
        maxGradientRelativeDifference(summary.optimized, *summary.baseline));
  } else {
    object["baseline"] = nullptr;
    object["peak_reduction"] = nullptr;
    object["max_grad_rel_diff"] = nullptr;
  }
  if (!summary.optimized.profile.empty()) {
    llvm::json::Array profile;
    for (const OpProfile &entry : summary.optimized.profile)
      profile.push_back(
          llvm::json::Object{{"op", entry.op},
                             {"calls", static_cast<int64_t>(entry.calls)},
                             {"ms", entry.milliseconds}});
    object["profile"] = std::move(profile);
  }
  object["plan"] = llvm::json::Object(summary.plan.json);
  object["check"] = summary.check
                        ? comparisonsJson(*summary.check, summary.tolerance)
                        : llvm::json::Value(nullptr);
  object["sgd_reference"] =
      summary.sgdReference
          ? comparisonsJson(*summary.sgdReference, summary.tolerance)
          : llvm::json::Value(nullptr);
  return object;
}
