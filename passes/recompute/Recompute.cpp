//===- Recompute.cpp - Trade compute for activation memory ----------------===//
//
// The pass: analysis (SavedActivations), plan (RecomputeStrategies.cpp),
// rewrite (applyRecomputePlan), statistics. Budget mode evaluates each
// candidate plan the way the pipeline will: it applies it, runs schedule
// and plan-buffers, reads the planned peak, and undoes all of it (clones
// erased, readers rewired back, the node order and plan restored) before
// the next candidate. Which candidates to plan is RecomputeBudget.cpp's.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/Recompute.h"
#include "passes/planning/Liveness.h"
#include "passes/planning/MemoryLimit.h"
#include "passes/planning/PlanBuffers.h"
#include "passes/planning/Schedule.h"
#include "passes/recompute/RecomputeBudget.h"
#include "passes/recompute/SavedActivations.h"

#include "ir/Module.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <cmath>

using namespace gmopt;

RecomputePass::RecomputePass() : RecomputePass(Options()) {}

RecomputePass::RecomputePass(Options opts) : options(std::move(opts)) {
  declareEnumOption<RecomputeMode>(
      "mode", options.mode,
      {{"selective", RecomputeMode::Selective},
       {"sqrt", RecomputeMode::Sqrt},
       {"full", RecomputeMode::Full},
       {"budget", RecomputeMode::Budget},
       {"explicit", RecomputeMode::Explicit}},
      "selective: recompute cheap ops, keep matmul/conv outputs; sqrt: "
      "sqrt(N) segments; full: keep only segment boundaries; budget: least "
      "recompute whose planned peak fits memory-limit; explicit: drop the "
      "values named in drop");
  declareOption("memory-limit", options.memoryLimit,
                "budget mode: planned-peak limit, bytes (`512MiB`, `2GB`, "
                "`1073741824`) or a percentage of the unrewritten planned "
                "peak (`60%`)");
  declareOption("attention-core", options.attentionCore,
                "selective: also recompute products of two activations "
                "(attention scores and context); products with a weight are "
                "kept");
  declareOption("cost-model", options.costModel,
                "backend whose throughputs price recompute (cpu, cuda): "
                "compute-bound nodes by FLOPs, memory-bound ones by bytes "
                "moved times the backend's FLOPs per byte of bandwidth");
  declareOption("flops-per-byte", options.flopsPerByte,
                "selective: recompute prices a node's FLOPs at one kept byte "
                "per this many (0: FLOPs are free)");
  declareOption("written-bytes-per-byte", options.writtenBytesPerByte,
                "selective: recompute prices the bytes a node writes at one "
                "kept byte per this many (0: writes are free)");
  declareOption("drop", options.drop,
                "explicit mode: the saved activations to drop, space-separated "
                "value names");
  declareOption("search-work", options.searchWork,
                "budget mode: work of the local search after the strategy "
                "family, in nodes planned (each candidate counts the step's "
                "nodes; 0: the family only)");
  declareOption("print-plan", options.printPlan,
                "print the recompute plan to stderr before rewriting");
  declareStatistic("planned-peak-before",
                   "planned peak of the unrewritten step (bytes)");
  declareStatistic("memory-limit", "budget: the planned-peak limit (bytes)");
  declareStatistic("budget-family-plans",
                   "budget: strategy-family plans evaluated");
  declareStatistic("budget-search-plans",
                   "budget: local-search plans evaluated");
  declareStatistic("budget-smallest-peak",
                   "budget: the smallest planned peak reached when the limit "
                   "cannot be met (bytes)");
  declareStatistic("already-recomputed",
                   "runs skipped: the module has recompute clones");
  declareStatistic("saved-bytes-before",
                   "bytes of forward values later phases read, before");
  declareStatistic("saved-bytes-after",
                   "bytes of forward values later phases read, after");
  declareStatistic("activations-dropped",
                   "saved activations recomputed instead of kept");
  declareStatistic("groups", "places clones were inserted");
  declareStatistic("cloned-nodes", "forward nodes cloned");
  declareStatistic("recompute-flops", "FLOPs recomputed per step");
  declareStatistic("step-flops", "FLOPs of the unrewritten step");
  declareStatistic(
      "recompute-flops-bp",
      "recomputed FLOPs in basis points (0.01%) of the step's FLOPs");
  declareStatistic("recompute-cost",
                   "recompute priced in FLOP-equivalents (memory-bound nodes "
                   "by bytes moved, cost-model)");
  declareStatistic("step-cost",
                   "FLOP-equivalents of the unrewritten step (cost-model)");
  declareStatistic("recompute-cost-bp",
                   "recompute cost in basis points of the step's cost");
  declareStatistic("load-before", "LOAD (live-byte peak) before, this order");
  declareStatistic("load-after", "LOAD (live-byte peak) after, this order");
}

namespace {

/// What applying a plan changed, so that it can be undone.
struct AppliedPlan {
  std::vector<Node *> clones;
  /// Each dropped value and the clone that replaces it for later phases.
  std::vector<std::pair<const Value *, const Value *>> replacements;
  std::vector<std::pair<OpOperand *, Value *>> rewired;
  uint64_t clonedNodes = 0;
};

llvm::Error apply(Module &module, const SavedActivations &analysis,
                  const RecomputePlan &plan, AppliedPlan *applied) {
  Graph &graph = module.getGraph();
  std::vector<Node *> order;
  order.reserve(graph.getNumNodes());
  for (Node &node : graph.getNodes())
    order.push_back(&node);
  llvm::ArrayRef<const Node *> forward = analysis.getForwardNodes();
  for (const RecomputePlan::Group &group : plan.groups) {
    if (group.placeBefore >= order.size())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "recompute: plan places a group after "
                                     "the last node");
    Node *before = order[group.placeBefore];
    std::vector<Node *> originals;
    for (uint32_t position : group.nodes)
      originals.push_back(const_cast<Node *>(forward[position]));
    ValueMapping mapping;
    std::vector<Node *> clones =
        graph.cloneNodes(originals, before->getIterator(), mapping);
    llvm::DenseSet<const Node *> cloneSet(clones.begin(), clones.end());
    for (Node *clone : clones) {
      clone->setPhase(Phase::Recompute);
      for (Value *result : clone->getResults())
        if (result && !result->getName().empty())
          result->setName(result->getName().str() + "_recompute");
    }
    for (const Value *provided : group.provides) {
      Value *replacement = mapping.lookup(provided);
      if (!replacement)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "recompute: group does not compute '%s'",
                                       provided->getName().str().c_str());
      if (applied)
        applied->replacements.push_back({provided, replacement});
      std::vector<OpOperand *> uses;
      for (OpOperand &use : provided->getUses())
        if (Node *owner = use.getOwner(); owner &&
                                          owner->getPhase() != Phase::Forward &&
                                          !cloneSet.contains(owner))
          uses.push_back(&use);
      for (OpOperand *use : uses) {
        if (applied)
          applied->rewired.push_back({use, use->get()});
        use->set(replacement);
      }
    }
    if (applied) {
      applied->clonedNodes += clones.size();
      llvm::append_range(applied->clones, clones);
    }
  }
  return llvm::Error::success();
}

void undo(Module &module, AppliedPlan &applied, llvm::ArrayRef<Node *> order) {
  Graph &graph = module.getGraph();
  for (auto it = applied.rewired.rbegin(); it != applied.rewired.rend(); ++it)
    it->first->set(it->second);
  for (auto it = applied.clones.rbegin(); it != applied.clones.rend(); ++it)
    graph.eraseNode(*it);
  for (Node *node : order)
    graph.moveNode(node, graph.end());
  module.plan.clear();
}

/// The planned peak of \p module as the pipeline would plan it (schedule,
/// then plan-buffers), leaving the module's order and plan changed.
/// Without \p exact, plan-buffers skips its local search over best-fit
/// orders: the peak is then at or above the exact one (the best of the same
/// greedy layouts, the search's among them when exact), for a fraction of
/// the time on large graphs.
llvm::Expected<uint64_t> planPeak(Module &module, const PassContext &context,
                                  bool exact = true) {
  PassContext local;
  local.setWorkspaceModel(context.getWorkspaceModel(),
                          context.getWorkspaceModelName().str());
  SchedulePass schedule;
  if (llvm::Expected<bool> changed = schedule.run(module, local); !changed)
    return changed.takeError();
  PlanBuffersPass::Options plannerOptions;
  if (!exact)
    plannerOptions.searchRounds = 0;
  PlanBuffersPass planner(plannerOptions);
  if (llvm::Expected<bool> changed = planner.run(module, local); !changed)
    return changed.takeError();
  return module.plan.figures.plannedBytes();
}

/// LOAD of the module in its current order.
llvm::Expected<uint64_t> currentLoad(const Module &module,
                                     const PassContext &context) {
  llvm::Expected<Liveness> liveness = Liveness::compute(module);
  if (!liveness)
    return liveness.takeError();
  if (context.getWorkspaceModel())
    liveness->setWorkspace(context.getWorkspaceModel());
  return liveness->computePeak().bytes;
}

/// What planning the step \p applied rewrote tells budget's search: the
/// module is in its planned order with its plan.
BudgetEvaluation measure(const Module &module, const SavedActivations &analysis,
                         const AppliedPlan &applied, uint64_t limit) {
  BudgetEvaluation evaluation;
  evaluation.peak = module.plan.figures.plannedBytes();
  evaluation.lowerBound = module.plan.figures.lowerBoundBytes +
                          module.plan.figures.totalPersistentBytes();
  llvm::Expected<Liveness> liveness = Liveness::compute(module);
  if (!liveness) {
    // The plan exists, so liveness cannot fail; without it the search
    // only loses its estimates.
    llvm::consumeError(liveness.takeError());
    return evaluation;
  }
  const uint64_t persistent = module.plan.figures.totalPersistentBytes();
  std::vector<uint64_t> live = liveness->computeLiveBytes();
  uint32_t peakStep = 0;
  for (uint32_t step = 0; step != live.size(); ++step) {
    if (live[step] > live[peakStep])
      peakStep = step;
    if (live[step] + persistent > limit)
      evaluation.excess += live[step] + persistent - limit;
  }
  llvm::DenseMap<const Value *, const Value *> replacementOf(
      applied.replacements.begin(), applied.replacements.end());
  evaluation.spansPeak.reserve(analysis.getSaved().size());
  for (const SavedActivation &activation : analysis.getSaved()) {
    const Value *value = activation.value;
    uint32_t lastForward = liveness->getStep(value->getDefiningNode());
    uint32_t firstLater = UINT32_MAX;
    for (const OpOperand &use : value->getUses()) {
      const Node *owner = use.getOwner();
      if (!owner)
        continue;
      uint32_t step = liveness->getStep(owner);
      if (owner->getPhase() == Phase::Forward)
        lastForward = std::max(lastForward, step);
      else
        firstLater = std::min(firstLater, step);
    }
    if (const Value *clone = replacementOf.lookup(value))
      firstLater =
          std::min(firstLater, liveness->getStep(clone->getDefiningNode()));
    evaluation.spansPeak.push_back(lastForward < peakStep &&
                                   peakStep < firstLater);
  }
  return evaluation;
}

/// Graphs up to this many nodes have budget's search candidates planned
/// exactly where the quick plan misses the limit and LOAD fits.
constexpr uint64_t kExactSearchNodes = 256;
/// The least work (in nodes) one search candidate counts against
/// search-work.
constexpr uint64_t kMinPlanCost = 512;

/// Budget mode: the cheapest plan found whose planned peak fits.
llvm::Expected<RecomputePlan>
planBudget(Module &module, const SavedActivations &analysis,
           const PassContext &context, const MemoryLimit &limitSpec,
           const RecomputeTuning &tuning, uint64_t searchWork, const Pass &pass,
           PassContext &statsContext) {
  std::vector<Node *> order;
  for (Node &node : module.getGraph().getNodes())
    order.push_back(&node);
  ExecutionPlan savedPlan = module.plan;

  auto evaluate = [&](const RecomputePlan &plan, uint64_t limit,
                      bool exact) -> llvm::Expected<BudgetEvaluation> {
    AppliedPlan applied;
    if (llvm::Error err = apply(module, analysis, plan, &applied))
      return err;
    llvm::Expected<uint64_t> peak = planPeak(module, context, exact);
    if (!peak) {
      undo(module, applied, order);
      return peak.takeError();
    }
    BudgetEvaluation evaluation = measure(module, analysis, applied, limit);
    evaluation.exact = exact;
    undo(module, applied, order);
    return evaluation;
  };

  RecomputePlan none;
  none.savedBytesBefore = none.savedBytesAfter = analysis.getSavedBytes();
  none.stepFlops = analysis.getStepFlops();
  none.stepCost = analysis.getStepCost();
  llvm::Expected<BudgetEvaluation> base =
      evaluate(none, UINT64_MAX, /*exact=*/true);
  if (!base)
    return base.takeError();
  const uint64_t basePeak = base->peak;
  const uint64_t limit = limitSpec.resolve(basePeak);
  pass.addStatistic(statsContext, "planned-peak-before", basePeak);
  pass.addStatistic(statsContext, "memory-limit", limit);
  module.plan = savedPlan;
  if (basePeak <= limit)
    return none;

  BudgetSearchOptions options;
  options.limit = limit;
  // Each candidate costs its nodes, and at least kMinPlanCost: below that
  // size planning a step costs about the same whatever its size.
  const uint64_t numNodes = order.size();
  const uint64_t planCost = std::max(numNodes, kMinPlanCost);
  options.maxEvaluations = uint32_t(std::min<uint64_t>(
      searchWork ? std::max<uint64_t>(1, searchWork / planCost) : 0,
      UINT32_MAX));
  options.tuning = tuning;
  options.exactWhereLoadFits = numNodes <= kExactSearchNodes;
  llvm::Expected<BudgetSearchResult> result =
      searchBudget(analysis, options, evaluate);
  module.plan = savedPlan;
  if (!result)
    return result.takeError();
  pass.addStatistic(statsContext, "budget-family-plans",
                    result->familyEvaluations);
  pass.addStatistic(statsContext, "budget-search-plans",
                    result->searchEvaluations);
  if (!result->best) {
    // Kept in the pipeline's statistics, so that a caller weighing levers
    // (gmopt-compile --memory-limit) learns how close recompute came.
    pass.addStatistic(statsContext, "budget-smallest-peak",
                      std::min(result->smallestPeak, basePeak));
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "recompute: memory-limit %s cannot be met: the smallest planned "
        "peak recompute reaches is %s (unrewritten: %s)",
        formatBytes(limit).c_str(),
        formatBytes(std::min(result->smallestPeak, basePeak)).c_str(),
        formatBytes(basePeak).c_str());
  }
  return std::move(*result->best);
}

} // namespace

llvm::Error gmopt::applyRecomputePlan(Module &module,
                                      const SavedActivations &analysis,
                                      const RecomputePlan &plan) {
  return apply(module, analysis, plan, nullptr);
}

llvm::Expected<bool> RecomputePass::run(Module &module, PassContext &context) {
  std::optional<MemoryLimit> limit;
  if (options.mode == RecomputeMode::Budget) {
    if (options.memoryLimit.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "recompute: mode=budget needs memory-limit=BYTES or PERCENT%%");
    llvm::Expected<MemoryLimit> parsed =
        parseMemoryLimit(options.memoryLimit, "recompute: memory-limit");
    if (!parsed)
      return parsed.takeError();
    limit = *parsed;
  } else if (!options.memoryLimit.empty()) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "recompute: memory-limit is an option of mode=budget only");
  }
  for (const Node &node : module.getGraph().getNodes())
    if (node.getPhase() == Phase::Recompute) {
      addStatistic(context, "already-recomputed", 1);
      return false;
    }

  llvm::Expected<StepThroughput> throughput =
      StepThroughput::lookup(options.costModel);
  if (!throughput)
    return throughput.takeError();
  llvm::Expected<SavedActivations> analysis =
      SavedActivations::compute(module, *throughput);
  if (!analysis)
    return analysis.takeError();
  llvm::Expected<uint64_t> loadBefore = currentLoad(module, context);
  if (!loadBefore)
    return loadBefore.takeError();

  RecomputeTuning tuning;
  tuning.attentionCore = options.attentionCore;
  tuning.flopsPerByte = options.flopsPerByte;
  tuning.writtenBytesPerByte = options.writtenBytesPerByte;
  if (!options.drop.empty() && options.mode != RecomputeMode::Explicit)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "recompute: drop is an option of mode=explicit only");
  for (llvm::StringRef rest = options.drop; !rest.trim().empty();) {
    auto [name, tail] = rest.trim().split(' ');
    tuning.drop.push_back(name.str());
    rest = tail;
  }
  llvm::Expected<RecomputePlan> plan =
      limit ? planBudget(module, *analysis, context, *limit, tuning,
                         options.searchWork, *this, context)
            : planRecompute(*analysis, options.mode, 0, tuning);
  if (!plan)
    return plan.takeError();
  if (options.printPlan)
    plan->print(llvm::errs(), *analysis);

  AppliedPlan applied;
  if (llvm::Error err = apply(module, *analysis, *plan, &applied))
    return err;
  llvm::Expected<uint64_t> loadAfter = currentLoad(module, context);
  if (!loadAfter)
    return loadAfter.takeError();

  auto stat = [&](llvm::StringRef name, uint64_t value) {
    addStatistic(context, name, value);
  };
  stat("saved-bytes-before", plan->savedBytesBefore);
  stat("saved-bytes-after", plan->savedBytesAfter);
  stat("activations-dropped", plan->dropped);
  stat("groups", plan->groups.size());
  stat("cloned-nodes", applied.clonedNodes);
  stat("recompute-flops", plan->recomputeFlops);
  stat("step-flops", plan->stepFlops);
  stat("recompute-flops-bp",
       plan->stepFlops ? uint64_t(std::llround(1e4 * plan->recomputeFlops /
                                               double(plan->stepFlops)))
                       : 0);
  stat("recompute-cost", plan->recomputeCost);
  stat("step-cost", plan->stepCost);
  stat("recompute-cost-bp",
       plan->stepCost ? uint64_t(std::llround(1e4 * plan->recomputeCost /
                                              double(plan->stepCost)))
                      : 0);
  stat("load-before", *loadBefore);
  stat("load-after", *loadAfter);
  return !plan->empty();
}
