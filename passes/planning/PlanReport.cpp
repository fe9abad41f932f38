//===- PlanReport.cpp - Reporting a module's memory plan ------------------===//
//
// Reads only module.plan.figures (and the graph, to name the node at the
// lower bound's step), so a plan loaded from a `.gm` file reports exactly
// like a freshly made one.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/PlanReport.h"
#include "passes/Pass.h"

#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/ZeroSharding.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

namespace {

/// `1.23 MiB (1,290,240 B)`-style rendering of a byte count.
void printBytes(llvm::raw_ostream &os, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double scaled = static_cast<double>(bytes);
  unsigned unit = 0;
  while (scaled >= 1024.0 && unit + 1 < std::size(units)) {
    scaled /= 1024.0;
    ++unit;
  }
  if (unit == 0)
    os << llvm::format("%10llu B  ", static_cast<unsigned long long>(bytes));
  else
    os << llvm::format("%10.2f %s", scaled, units[unit]);
  os << "  (" << bytes << " B)";
}

/// The node at schedule position \p step, or null.
const Node *nodeAtStep(const Module &module, uint32_t step) {
  uint32_t position = 0;
  for (const Node &node : module.getGraph().getNodes())
    if (position++ == step)
      return &node;
  return nullptr;
}

} // namespace

void gmopt::printPlanReport(const Module &module, llvm::raw_ostream &os,
                            std::optional<uint64_t> eagerBaselineBytes) {
  const ExecutionPlan &plan = module.plan;
  if (plan.empty()) {
    os << "memory plan: none (run the plan-buffers pass)\n";
    return;
  }
  const MemoryFigures &figures = plan.figures;
  auto row = [&](llvm::StringRef name, uint64_t bytes) -> llvm::raw_ostream & {
    os << "  " << llvm::left_justify(name, 34);
    printBytes(os, bytes);
    return os;
  };
  os << "memory plan: " << module.getGraph().getNumNodes() << " steps, "
     << plan.buffers.size() << " values\n";
  DataParallelLayout layout = getDataParallelLayout(module);
  if (layout.ranks > 1)
    os << "  one rank of " << layout.ranks << " (data parallel, ZeRO stage "
       << layout.stage << "); every figure below is per rank\n";
  row("naive (no reuse)", figures.naiveBytes) << "\n";
  if (eagerBaselineBytes)
    row("eager baseline (original graph)", *eagerBaselineBytes) << "\n";
  row("eager estimate (this schedule)", figures.eagerEstimateBytes) << "\n";
  row("lower bound (LOAD)", figures.lowerBoundBytes)
      << "  at step " << figures.lowerBoundStep;
  if (const Node *node = nodeAtStep(module, figures.lowerBoundStep))
    os << " (" << node->describe() << ")";
  os << "\n";
  row("arena", plan.arenaBytes)
      << llvm::format("  fragmentation %.2f%%", 100.0 * figures.fragmentation())
      << "\n";
  // Offloaded tensors live in host memory, apart from the device peak.
  if (plan.hostArenaBytes)
    row("host arena (not in the peak)", plan.hostArenaBytes) << "\n";
  row("in-place saved", figures.inPlaceSavedBytes) << "\n";
  row("kernel workspace (largest step)", figures.workspaceBytes)
      << "  in the arena, " << module.plan.workspaces.size() << " nodes\n";
  row("persistent", figures.totalPersistentBytes()) << "\n";
  for (unsigned i = 0; i != kNumMemoryCategories; ++i)
    row(("  " + memoryCategoryName(static_cast<MemoryCategory>(i))).str(),
        figures.persistentBytes[i])
        << "\n";
  row("planned peak (arena + persistent)", figures.plannedBytes());
  uint64_t baseline = eagerBaselineBytes.value_or(figures.eagerEstimateBytes);
  if (baseline)
    os << llvm::format("  %.1f%% of the eager ",
                       100.0 * figures.plannedBytes() / baseline)
       << (eagerBaselineBytes ? "baseline" : "estimate");
  os << "\n";
}

llvm::json::Object
gmopt::planReportJson(const Module &module,
                      std::optional<uint64_t> eagerBaselineBytes) {
  const ExecutionPlan &plan = module.plan;
  if (plan.empty())
    return {};
  const MemoryFigures &figures = plan.figures;
  auto bytes = [](uint64_t value) { return static_cast<int64_t>(value); };
  llvm::json::Object byCategory;
  for (unsigned i = 0; i != kNumMemoryCategories; ++i)
    byCategory[memoryCategoryName(static_cast<MemoryCategory>(i))] =
        bytes(figures.persistentBytes[i]);
  llvm::json::Object report{
      {"naive_bytes", bytes(figures.naiveBytes)},
      {"eager_estimate_bytes", bytes(figures.eagerEstimateBytes)},
      {"lower_bound_bytes", bytes(figures.lowerBoundBytes)},
      {"lower_bound_step", static_cast<int64_t>(figures.lowerBoundStep)},
      {"arena_bytes", bytes(plan.arenaBytes)},
      {"host_arena_bytes", bytes(plan.hostArenaBytes)},
      {"persistent_bytes", bytes(figures.totalPersistentBytes())},
      {"persistent_by_category", std::move(byCategory)},
      {"planned_bytes", bytes(figures.plannedBytes())},
      {"fragmentation", figures.fragmentation()},
      {"in_place_saved_bytes", bytes(figures.inPlaceSavedBytes)},
      {"workspace_bytes", bytes(figures.workspaceBytes)},
  };
  if (eagerBaselineBytes)
    report["eager_baseline_bytes"] = bytes(*eagerBaselineBytes);
  DataParallelLayout layout = getDataParallelLayout(module);
  report["ranks"] = layout.ranks;
  report["zero_stage"] = layout.stage;
  if (std::optional<ZeroShardingRecord> zero = readZeroSharding(module)) {
    llvm::json::Array buckets;
    for (const ZeroBucketRecord &bucket : zero->buckets) {
      llvm::json::Array params, states;
      for (const std::string &name : bucket.params)
        params.push_back(name);
      for (const std::string &name : bucket.stateShards)
        states.push_back(name);
      buckets.push_back(
          llvm::json::Object{{"params", std::move(params)},
                             {"elements", bucket.elements},
                             {"shard_elements", bucket.shardElements},
                             {"gradient_shard", bucket.gradientShard},
                             {"state_shards", std::move(states)}});
    }
    report["zero_buckets"] = std::move(buckets);
  }
  return report;
}

llvm::json::Object gmopt::passStatisticsJson(const PassContext &context) {
  llvm::json::Object result;
  for (const PassStatistic &statistic : context.getStatistics()) {
    llvm::json::Value &entry = result[statistic.pass];
    if (!entry.getAsObject())
      entry = llvm::json::Object();
    (*entry.getAsObject())[statistic.name] =
        static_cast<int64_t>(statistic.value);
  }
  return result;
}
