//===- PlanBuffers.cpp - Liveness, in-place reuse, one-arena offsets ------===//
//
// Analysis → plan → rewrite, as in TVM's storage_rewrite.cc: Liveness and
// applyInPlaceReuse analyse the schedule and decide which values share
// storage; ArenaAllocator turns the remaining storage groups (one request
// per group owner: its aligned size and the group's live range) into
// offsets, once per memory space (the device arena, and the host arena of
// offloaded tensors, ir/MemorySpaces.h); the assignments and figures then
// replace module.plan. The graph itself is never modified.
//
// The eager estimate is read off the liveness before in-place reuse is
// applied: at that point the live-byte profile is exactly what an eager
// executor holds (transients from definition to last use, views sharing).
//
//===----------------------------------------------------------------------===//

#include "passes/planning/PlanBuffers.h"
#include "passes/DebugOutput.h"
#include "passes/planning/InPlace.h"
#include "passes/planning/Liveness.h"

#include "ir/Module.h"
#include "ir/SizeLimits.h"

#include "llvm/Support/raw_ostream.h"

#define DEBUG_TYPE "gmopt-plan-buffers"

using namespace gmopt;

namespace {

/// Aligned bytes of the values that are not transient (the persistent and
/// constant storage every schedule holds for the whole step).
uint64_t nonTransientBytes(const Liveness &liveness) {
  uint64_t bytes = 0;
  for (Liveness::ValueId id = 0, e = liveness.getNumValues(); id != e; ++id)
    if (liveness.getStorageClass(id) != StorageClass::Transient)
      bytes += alignBuffer(liveness.getBytes(id));
  return bytes;
}

} // namespace

llvm::Expected<uint64_t>
gmopt::estimateEagerPeakBytes(const Module &module,
                              const WorkspaceModel &workspace) {
  auto liveness = Liveness::compute(module);
  if (!liveness)
    return liveness.takeError();
  // Bounded workspaces keep the live-byte sums from overflowing.
  if (llvm::Error err = checkWorkspaceSizes(module, workspace))
    return err;
  liveness->setWorkspace(workspace);
  return liveness->computePeak().bytes + nonTransientBytes(*liveness);
}

llvm::Expected<ExecutionPlan> gmopt::computeBufferPlan(
    const Module &module, const PlanBuffersPass::Options &options,
    BufferPlanSummary *summary, const WorkspaceModel &workspace) {
  using ValueId = Liveness::ValueId;
  auto analysed = Liveness::compute(module);
  if (!analysed)
    return analysed.takeError();
  Liveness &liveness = *analysed;
  // Bounded workspaces keep the live-byte sums from overflowing.
  if (llvm::Error err = checkWorkspaceSizes(module, workspace))
    return err;
  liveness.setWorkspace(workspace);
  llvm::DenseMap<const Value *, MemoryCategory> categories =
      categorizeValues(module);

  ExecutionPlan plan;
  MemoryFigures &figures = plan.figures;
  LivePeak eagerPeak = liveness.computePeak();
  std::vector<InPlaceReuse> reuses;
  if (options.inPlace)
    reuses = applyInPlaceReuse(liveness);
  for (const InPlaceReuse &reuse : reuses)
    figures.inPlaceSavedBytes += reuse.savedBytes;
  LivePeak load = liveness.computePeak();

  // One arena request per transient storage group, in its space's arena.
  std::vector<ArenaRequest> requests, hostRequests;
  std::vector<ValueId> owners, hostOwners;
  for (ValueId id = 0, e = liveness.getNumValues(); id != e; ++id) {
    if (!liveness.isArenaOwner(id))
      continue;
    LiveInterval interval = liveness.getStorageInterval(id);
    bool host = liveness.getSpace(id) == MemorySpace::Host;
    (host ? hostRequests : requests)
        .push_back(
            {liveness.getBytes(id), interval.firstStep, interval.lastStep});
    (host ? hostOwners : owners).push_back(id);
  }
  // One request per node with kernel workspace, live at its step only.
  std::vector<uint32_t> workspaceSteps;
  for (uint32_t step = 0, e = liveness.getNumSteps(); step != e; ++step) {
    uint64_t bytes = liveness.getWorkspaceBytes(step);
    if (!bytes)
      continue;
    requests.push_back({bytes, step, step});
    workspaceSteps.push_back(step);
    figures.workspaceBytes = std::max(figures.workspaceBytes, bytes);
  }
  ArenaAllocator::Options arenaOptions;
  arenaOptions.greedyBySize = options.greedyBySize;
  arenaOptions.greedyByLifetime = options.greedyByLifetime;
  arenaOptions.bestFitWork = options.bestFitWork;
  arenaOptions.bestFitWorkFloor = options.bestFitWorkFloor;
  arenaOptions.searchRounds = options.searchRounds;
  ArenaLayout layout = ArenaAllocator(arenaOptions).allocate(requests);
  llvm::DenseMap<ValueId, uint64_t> offsetOf;
  offsetOf.reserve(owners.size() + hostOwners.size());
  for (size_t i = 0; i != owners.size(); ++i)
    offsetOf[owners[i]] = layout.offsets[i];
  plan.arenaBytes = layout.arenaBytes;
  // The host arena is packed the same way, apart: a host slice and a device
  // slice never share bytes, whatever their live ranges.
  if (!hostRequests.empty()) {
    ArenaLayout hostLayout =
        ArenaAllocator(arenaOptions).allocate(hostRequests);
    for (size_t i = 0; i != hostOwners.size(); ++i)
      offsetOf[hostOwners[i]] = hostLayout.offsets[i];
    plan.hostArenaBytes = hostLayout.arenaBytes;
  }
  for (size_t i = 0; i != workspaceSteps.size(); ++i) {
    uint32_t step = workspaceSteps[i];
    WorkspaceAssignment &slot = plan.workspaces[liveness.getNode(step)];
    slot.offset = layout.offsets[owners.size() + i];
    slot.size = liveness.getWorkspaceBytes(step);
    slot.step = step;
  }

  uint64_t viewsAliased = 0;
  plan.buffers.reserve(liveness.getNumValues());
  for (ValueId id = 0, e = liveness.getNumValues(); id != e; ++id) {
    const Value *value = liveness.getValue(id);
    BufferAssignment assignment;
    assignment.category = categories.lookup(value);
    assignment.size = liveness.getBytes(id);
    assignment.firstStep = liveness.getDefStep(id);
    assignment.lastStep = liveness.getLastUseStep(id);
    assignment.space = liveness.getSpace(id);
    switch (liveness.getStorageClass(id)) {
    case StorageClass::Constant:
      assignment.kind = StorageKind::Constant;
      break;
    case StorageClass::Persistent:
      assignment.kind = StorageKind::Persistent;
      break;
    case StorageClass::Transient:
      if (liveness.getOwner(id) == id) {
        assignment.kind = StorageKind::Arena;
        assignment.offset = offsetOf.lookup(id);
        LiveInterval interval = liveness.getStorageInterval(id);
        assignment.firstStep = interval.firstStep;
        assignment.lastStep = interval.lastStep;
      } else {
        assignment.kind = StorageKind::Alias;
        assignment.aliasOf = liveness.getValue(liveness.getAliasSource(id));
        viewsAliased += liveness.isView(id);
      }
      break;
    }
    if (!liveness.isView(id))
      figures.naiveBytes += alignBuffer(assignment.size);
    if (assignment.kind == StorageKind::Persistent ||
        assignment.kind == StorageKind::Constant)
      figures.persistentBytes[static_cast<unsigned>(assignment.category)] +=
          alignBuffer(assignment.size);
    plan.buffers[value] = assignment;
  }
  figures.lowerBoundBytes = load.bytes;
  figures.lowerBoundStep = load.step;
  figures.arenaBytes = plan.arenaBytes;
  figures.hostArenaBytes = plan.hostArenaBytes;
  figures.eagerEstimateBytes = eagerPeak.bytes + nonTransientBytes(liveness);
  assert(nonTransientBytes(liveness) == figures.totalPersistentBytes() &&
         "persistent figures and storage classes disagree");

  GMOPT_DEBUG({
    dbgs() << "[" DEBUG_TYPE "] " << requests.size() << " arena buffers, "
           << reuses.size() << " in place, " << viewsAliased << " views; LOAD "
           << load.bytes << " at step " << load.step << ", arena "
           << plan.arenaBytes << " (" << arenaStrategyName(layout.strategy)
           << ")\n";
    for (const ArenaAttempt &attempt : layout.attempts) {
      dbgs() << "[" DEBUG_TYPE "]   " << arenaStrategyName(attempt.strategy)
             << ": ";
      if (attempt.arenaBytes)
        dbgs() << *attempt.arenaBytes << "\n";
      else
        dbgs() << "skipped\n";
    }
  });

  if (summary) {
    summary->inPlaceReuses = reuses.size();
    summary->viewsAliased = viewsAliased;
    summary->arenaBuffers = requests.size();
    summary->layout = std::move(layout);
  }
  return plan;
}

PlanBuffersPass::PlanBuffersPass() : PlanBuffersPass(Options()) {}

PlanBuffersPass::PlanBuffersPass(Options initial) : options(initial) {
  declareOption("in-place", options.inPlace,
                "let elementwise results overwrite operands that die there");
  declareOption("greedy-by-size", options.greedyBySize,
                "try best-fit offset assignment (size, breadth, area, "
                "duration orders and a local search)");
  declareOption("greedy-by-lifetime", options.greedyByLifetime,
                "try greedy-by-lifetime (heap simulation) offset assignment");
  declareOption("best-fit-work", options.bestFitWork,
                "best-fit work budget per n*ceil(log2 n), n arena requests; a "
                "unit is one request placed or one pair of simultaneously "
                "live buffers visited");
  declareOption("best-fit-work-floor", options.bestFitWorkFloor,
                "constant part of the best-fit work budget (units)");
  declareOption("search-rounds", options.searchRounds,
                "most rounds of the best-fit local search, paid from the "
                "best-fit work budget (0: none)");
  declareOption("validate", options.validate,
                "validate the plan in every build type (debug builds always "
                "do)");
  declareStatistic("arena-bytes", "Bytes of the planned (device) arena");
  declareStatistic("host-arena-bytes",
                   "Bytes of the planned host arena (offloaded tensors)");
  declareStatistic("lower-bound-bytes",
                   "Live-byte maximum of the schedule (LOAD)");
  declareStatistic("persistent-bytes",
                   "Bytes of persistent and constant storage");
  declareStatistic("in-place-reuses",
                   "Results written into a dying operand's buffer");
  declareStatistic("in-place-saved-bytes",
                   "Bytes in-place results did not allocate");
  declareStatistic("views-aliased", "Views sharing their source's bytes");
  declareStatistic("arena-buffers", "Storage groups placed in the arena");
  declareStatistic("workspace-slices",
                   "Nodes given an arena slice for kernel scratch");
  declareStatistic("greedy-by-size-skipped",
                   "1 if a best-fit order was skipped (over the work budget)");
}

llvm::Expected<bool> PlanBuffersPass::run(Module &module,
                                          PassContext &context) {
  BufferPlanSummary summary;
  auto plan =
      computeBufferPlan(module, options, &summary, context.getWorkspaceModel());
  if (!plan)
    return plan.takeError();
  plan->workspaceModel = context.getWorkspaceModelName().str();
  bool validate = options.validate;
#ifndef NDEBUG
  validate = true;
#endif
  if (validate)
    if (llvm::Error err = plan->validate(module))
      return err;

  const MemoryFigures &figures = plan->figures;
  addStatistic(context, "arena-bytes", figures.arenaBytes);
  addStatistic(context, "host-arena-bytes", figures.hostArenaBytes);
  addStatistic(context, "lower-bound-bytes", figures.lowerBoundBytes);
  addStatistic(context, "persistent-bytes", figures.totalPersistentBytes());
  addStatistic(context, "in-place-reuses", summary.inPlaceReuses);
  addStatistic(context, "in-place-saved-bytes", figures.inPlaceSavedBytes);
  addStatistic(context, "views-aliased", summary.viewsAliased);
  addStatistic(context, "arena-buffers", summary.arenaBuffers);
  addStatistic(context, "workspace-slices", plan->workspaces.size());
  bool skipped = false;
  for (const ArenaAttempt &attempt : summary.layout.attempts)
    skipped |=
        attempt.strategy != ArenaStrategy::BestFitSearch && !attempt.arenaBytes;
  addStatistic(context, "greedy-by-size-skipped", skipped);
  module.plan = std::move(*plan);
  return true;
}
