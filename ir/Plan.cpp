//===- Plan.cpp - The execution plan: buffers, arena, memory figures ------===//
//
// Live intervals, value categories, the trivial (no-reuse) plan, and the
// plan validator. The validator proves that no two arena slices overlap in
// both address and time with an O(n log n) sweep over definition steps that
// keeps the live slices ordered by offset, so it can run after every plan of
// a 100,000-node graph.
//
//===----------------------------------------------------------------------===//

#include "ir/Plan.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/SizeLimits.h"
#include "ir/ZeroSharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>

using namespace gmopt;

namespace {
constexpr llvm::StringLiteral kCategoryNames[kNumMemoryCategories] = {
    "parameters",  "gradients",   "optimizer_state",
    "activations", "temporaries", "workspace"};

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "invalid plan: " + message);
}

std::string label(const Value *value) {
  if (!value->getName().empty())
    return "%" + value->getName().str();
  if (Node *def = value->getDefiningNode())
    return llvm::formatv("%<result {0} of {1}>", value->getResultIndex(),
                         def->describe())
        .str();
  return "%<unnamed>";
}

/// True if a node outside the forward phase reads \p value, or the result
/// of a CopyWait that shares its bytes (a tensor moved to host memory is
/// an activation when the copy back is the backward pass's).
bool isReadOutsideForward(const Value &value) {
  for (OpOperand &use : value.getUses()) {
    Node *user = use.getOwner();
    if (!user)
      continue;
    if (user->getPhase() != Phase::Forward)
      return true;
    if (isCopyWait(*user) && use.getIndex() == 0 && user->getResult(0) &&
        isReadOutsideForward(*user->getResult(0)))
      return true;
  }
  return false;
}

/// Calls \p fn on every present value in schedule order: graph inputs,
/// initializers, then node results.
template <typename Fn> void forEachValue(const Graph &graph, Fn fn) {
  for (const auto &input : graph.getInputs())
    fn(input.get());
  for (const auto &init : graph.getInitializers())
    fn(init.get());
  for (const Node &node : graph.getNodes())
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (const Value *result = node.getResult(i))
        fn(result);
}

} // namespace

const Value *gmopt::getViewSource(const Node &node) {
  if (node.getNumOperands() == 0 || node.getNumResults() == 0)
    return nullptr;
  const Value *source = node.getOperand(0);
  const Value *result = node.getResult(0);
  if (!source || !result || result->isGraphOutput())
    return nullptr;
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  if (!schema || !schema->hasTrait(TraitView))
    return nullptr;
  const TensorType &sourceType = source->getType();
  const TensorType &resultType = result->getType();
  if (sourceType.hasStaticShape() && resultType.hasStaticShape() &&
      sourceType.getSizeInBytes() != resultType.getSizeInBytes())
    return nullptr;
  return source;
}

llvm::StringRef gmopt::memoryCategoryName(MemoryCategory category) {
  return kCategoryNames[static_cast<unsigned>(category)];
}

std::optional<MemoryCategory> gmopt::parseMemoryCategory(llvm::StringRef name) {
  for (unsigned i = 0; i != kNumMemoryCategories; ++i)
    if (kCategoryNames[i] == name)
      return static_cast<MemoryCategory>(i);
  return std::nullopt;
}

llvm::StringRef gmopt::storageKindName(StorageKind kind) {
  switch (kind) {
  case StorageKind::Arena:
    return "arena";
  case StorageKind::Persistent:
    return "persistent";
  case StorageKind::Alias:
    return "alias";
  case StorageKind::Constant:
    return "constant";
  }
  llvm_unreachable("unknown storage kind");
}

uint64_t MemoryFigures::totalPersistentBytes() const {
  uint64_t total = 0;
  for (uint64_t bytes : persistentBytes)
    total += bytes;
  return total;
}

double MemoryFigures::fragmentation() const {
  if (lowerBoundBytes == 0)
    return 0.0;
  return static_cast<double>(arenaBytes) / lowerBoundBytes - 1.0;
}

void ExecutionPlan::clear() {
  buffers.clear();
  workspaces.clear();
  arenaBytes = 0;
  hostArenaBytes = 0;
  workspaceModel.clear();
  figures = MemoryFigures();
}

const WorkspaceAssignment *
ExecutionPlan::lookupWorkspace(const Node *node) const {
  auto it = workspaces.find(node);
  return it == workspaces.end() ? nullptr : &it->second;
}

const BufferAssignment *ExecutionPlan::lookup(const Value *value) const {
  auto it = buffers.find(value);
  return it == buffers.end() ? nullptr : &it->second;
}

const Value *ExecutionPlan::storageOwner(const Value *value) const {
  // Bounded walk: a malformed plan with an alias cycle must not hang.
  for (size_t hops = 0; hops <= buffers.size(); ++hops) {
    const BufferAssignment *assignment = lookup(value);
    if (!assignment || assignment->kind != StorageKind::Alias ||
        !assignment->aliasOf)
      return value;
    value = assignment->aliasOf;
  }
  return nullptr;
}

namespace {

/// Each present value's interval from its definition to its own last use
/// (a graph output: the last step), views not yet extending their sources.
llvm::DenseMap<const Value *, LiveInterval>
computeUseIntervals(const Module &module) {
  const Graph &graph = module.getGraph();
  llvm::DenseMap<const Node *, uint32_t> position;
  uint32_t step = 0;
  for (const Node &node : graph.getNodes())
    position[&node] = step++;
  const uint32_t lastStep = step ? step - 1 : 0;

  llvm::DenseMap<const Value *, LiveInterval> intervals;
  forEachValue(graph, [&](const Value *value) {
    LiveInterval interval;
    if (const Node *def = value->getDefiningNode())
      interval.firstStep = position[def];
    interval.lastStep = interval.firstStep;
    for (OpOperand &use : value->getUses()) {
      uint32_t at = use.isGraphOutput() ? lastStep : position[use.getOwner()];
      interval.lastStep = std::max(interval.lastStep, at);
    }
    intervals[value] = interval;
  });
  return intervals;
}

} // namespace

llvm::DenseMap<const Value *, LiveInterval>
gmopt::computeLiveIntervals(const Module &module) {
  const Graph &graph = module.getGraph();
  llvm::DenseMap<const Value *, LiveInterval> intervals =
      computeUseIntervals(module);
  // A view keeps the storage it aliases alive; walking backwards lets chains
  // of views propagate to their root.
  for (const Node &node : llvm::reverse(graph.getNodes())) {
    const Value *viewSource = getViewSource(node);
    if (!viewSource)
      continue;
    uint32_t viewEnd = intervals[node.getResult(0)].lastStep;
    LiveInterval &source = intervals[viewSource];
    source.lastStep = std::max(source.lastStep, viewEnd);
  }
  return intervals;
}

bool gmopt::isPersistentValue(const Module &module, const Value *value) {
  return !value->isNodeResult() || value->isGraphOutput();
}

llvm::DenseMap<const Value *, MemoryCategory>
gmopt::categorizeValues(const Module &module) {
  const Graph &graph = module.getGraph();
  const TrainingSignature &sig = module.getSignature();
  llvm::DenseMap<const Value *, MemoryCategory> categories;

  forEachValue(graph, [&](const Value *value) {
    MemoryCategory category = MemoryCategory::Temporaries;
    if (value->isInitializer()) {
      category = MemoryCategory::Parameters;
    } else if (value->isGraphInput()) {
      category = MemoryCategory::Activations;
    } else if (value->getDefiningNode()->getPhase() == Phase::Forward &&
               isReadOutsideForward(*value)) {
      // A forward value read later (backward, recompute, optimizer) is an
      // activation the step keeps alive.
      category = MemoryCategory::Activations;
    }
    categories[value] = category;
  });
  for (const ParamInfo &param : sig.getParams()) {
    categories[param.param] = MemoryCategory::Parameters;
    if (param.grad)
      categories[param.grad] = MemoryCategory::Gradients;
    if (param.accumulator)
      categories[param.accumulator] = MemoryCategory::Gradients;
    for (const Value *state : param.optimizerState)
      categories[state] = MemoryCategory::OptimizerState;
  }
  // ZeRO stage 2's per-bucket gradient accumulation shards (no
  // parameter's slot names them; ir/ZeroSharding.h).
  if (std::optional<ZeroShardingRecord> zero = readZeroSharding(module))
    for (const ZeroBucketRecord &bucket : zero->buckets)
      if (!bucket.gradientShard.empty())
        if (const Value *shard = graph.lookupValue(bucket.gradientShard))
          categories[shard] = MemoryCategory::Gradients;
  // The step count is persistent optimizer state too; the per-step inputs
  // (learning rate, update signal) are inputs like the data.
  // So are mixed precision's loss scale and its counter.
  for (StepSlot slot :
       {StepSlot::StepCount, StepSlot::LossScale, StepSlot::LossScaleGoodSteps})
    if (const Value *state = sig.getStepSlot(slot))
      categories[state] = MemoryCategory::OptimizerState;
  return categories;
}

llvm::Expected<ExecutionPlan>
gmopt::makeTrivialPlan(const Module &module, const WorkspaceModel &workspace,
                       llvm::StringRef workspaceModelName) {
  const Graph &graph = module.getGraph();
  llvm::DenseMap<const Value *, LiveInterval> intervals =
      computeLiveIntervals(module);
  llvm::DenseMap<const Value *, MemoryCategory> categories =
      categorizeValues(module);
  ExecutionPlan plan;
  plan.workspaceModel =
      workspace ? workspaceModelName.str() : kNoWorkspaceModelName.str();
  llvm::Error error = llvm::Error::success();
  uint64_t totalBytes = 0;
  forEachValue(graph, [&](const Value *value) {
    if (error)
      return;
    if (!value->getType().hasStaticShape()) {
      error = fail(label(value) + " has type " + value->getType().str() +
                   ", which is not static; bind its dimensions with --dim");
      return;
    }
    // Bounded sizes keep the offsets and figures below from overflowing.
    if (!fitsSizeLimit(value->getType())) {
      error = checkTensorSize(value->getType(), label(value));
      return;
    }
    BufferAssignment assignment;
    assignment.category = categories.lookup(value);
    assignment.size = value->getType().getSizeInBytes();
    if (llvm::Error err = addToPlanTotal(totalBytes, assignment.size)) {
      error = std::move(err);
      return;
    }
    assignment.firstStep = intervals[value].firstStep;
    assignment.lastStep = intervals[value].lastStep;
    assignment.space = getMemorySpace(*value);
    const Node *def = value->getDefiningNode();
    if (value->isInitializer()) {
      assignment.kind = StorageKind::Constant;
    } else if (isPersistentValue(module, value)) {
      assignment.kind = StorageKind::Persistent;
    } else if (def && value->getResultIndex() == 0 && getViewSource(*def)) {
      assignment.kind = StorageKind::Alias;
      assignment.aliasOf = plan.storageOwner(getViewSource(*def));
    } else {
      assignment.kind = StorageKind::Arena;
      uint64_t &arena = assignment.space == MemorySpace::Host
                            ? plan.hostArenaBytes
                            : plan.arenaBytes;
      assignment.offset = arena;
      arena += alignBuffer(assignment.size);
    }
    plan.buffers[value] = assignment;
  });
  if (error)
    return llvm::Error(std::move(error));

  // Kernel workspace: one region above the values, shared by every node
  // (each slice is live at its own step only).
  std::vector<uint64_t> workspaceAt;
  if (workspace) {
    uint32_t step = 0;
    if (llvm::Error err = checkWorkspaceSizes(module, workspace))
      return err;
    for (const Node &node : graph.getNodes()) {
      uint64_t bytes = alignBuffer(workspace(node));
      workspaceAt.push_back(bytes);
      if (bytes)
        plan.workspaces[&node] = {plan.arenaBytes, bytes, step};
      plan.figures.workspaceBytes =
          std::max(plan.figures.workspaceBytes, bytes);
      ++step;
    }
    plan.arenaBytes += plan.figures.workspaceBytes;
  }

  // Figures: naive bytes, persistent split, and the live-byte bound.
  MemoryFigures &figures = plan.figures;
  std::vector<std::pair<uint32_t, int64_t>> events;
  for (const auto &[value, assignment] : plan.buffers) {
    if (assignment.kind == StorageKind::Alias)
      continue;
    figures.naiveBytes += alignBuffer(assignment.size);
    if (assignment.kind == StorageKind::Arena) {
      // The lower bound is the device's: host slices live apart.
      if (assignment.space == MemorySpace::Host)
        continue;
      events.push_back(
          {assignment.firstStep, int64_t(alignBuffer(assignment.size))});
      events.push_back(
          {assignment.lastStep + 1, -int64_t(alignBuffer(assignment.size))});
    } else {
      figures.persistentBytes[static_cast<unsigned>(assignment.category)] +=
          alignBuffer(assignment.size);
    }
  }
  for (uint32_t step = 0; step != workspaceAt.size(); ++step)
    if (workspaceAt[step]) {
      events.push_back({step, int64_t(workspaceAt[step])});
      events.push_back({step + 1, -int64_t(workspaceAt[step])});
    }
  llvm::sort(events, [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  int64_t live = 0;
  for (size_t i = 0; i != events.size();) {
    uint32_t step = events[i].first;
    for (; i != events.size() && events[i].first == step; ++i)
      live += events[i].second;
    if (live > int64_t(figures.lowerBoundBytes)) {
      figures.lowerBoundBytes = live;
      figures.lowerBoundStep = step;
    }
  }
  figures.arenaBytes = plan.arenaBytes;
  figures.hostArenaBytes = plan.hostArenaBytes;
  // With no reuse and no in-place, the live bytes are what eager mode holds.
  figures.eagerEstimateBytes =
      figures.lowerBoundBytes + figures.totalPersistentBytes();
  return plan;
}

bool ExecutionPlan::aliasIsRelated(const Value *value,
                                   const Value *target) const {
  const Node *def = value->getDefiningNode();
  if (!def || !target)
    return false;
  const Value *targetOwner = storageOwner(target);
  auto shares = [&](const Value *source) {
    return source && (source == target || storageOwner(source) == targetOwner);
  };
  if (def->getNumResults() && value == def->getResult(0) &&
      shares(getViewSource(*def)))
    return true;
  // In place: the registry's result may take an operand's bytes when the
  // two have one type (a commutative op's other leading operand included,
  // so any operand of the result's exact type qualifies here).
  const OpSchema *schema = OpRegistry::instance().lookup(*def);
  if (!schema || schema->inPlaceOperand < 0 ||
      schema->inPlaceResult >= def->getNumResults() ||
      value != def->getResult(schema->inPlaceResult))
    return false;
  // Only transient storage is ever overwritten: a graph input, parameter or
  // initializer keeps its bytes for the whole step.
  const BufferAssignment *targetStorage =
      targetOwner ? lookup(targetOwner) : nullptr;
  if (!targetStorage || targetStorage->kind != StorageKind::Arena)
    return false;
  for (const Value *operand : def->getOperands())
    if (operand && operand->getType() == value->getType() && shares(operand))
      return true;
  return false;
}

llvm::Error ExecutionPlan::validate(const Module &module) const {
  const Graph &graph = module.getGraph();
  llvm::Error error = llvm::Error::success();
  size_t present = 0;
  forEachValue(graph, [&](const Value *value) {
    ++present;
    if (!error && !lookup(value))
      error = fail(label(value) + " has no buffer");
  });
  if (error)
    return error;
  if (present != buffers.size())
    return fail(
        llvm::formatv("{0} buffers for {1} values", buffers.size(), present));
  if (arenaBytes % kBufferAlignment || hostArenaBytes % kBufferAlignment)
    return fail("arena size is not a multiple of the alignment");

  // A slice of an arena over a step range: a value's or a workspace.
  struct Slice {
    const Value *value;
    const Node *node;
    uint64_t offset, size;
    uint32_t firstStep, lastStep;
    std::string describe() const {
      return value ? label(value) : "the workspace of " + node->describe();
    }
  };
  // One list of slices per memory space: the arenas are apart.
  std::array<std::vector<Slice>, kNumMemorySpaces> slicesOf;
  std::vector<Slice> &slices = slicesOf[unsigned(MemorySpace::Device)];
  // The space is the graph's, never the plan's to choose: a host value in
  // the device arena would be read by the wrong copy (or a kernel).
  for (const auto &[value, assignment] : buffers) {
    MemorySpace space = getMemorySpace(*value);
    if (assignment.space != space)
      return fail(label(value) + " is in " + memorySpaceName(space) +
                  " memory but the plan puts it in the " +
                  memorySpaceName(assignment.space) + " space");
  }
  for (const auto &[value, assignment] : buffers) {
    MemorySpace space = assignment.space;
    if (space == MemorySpace::Host && assignment.kind != StorageKind::Arena &&
        assignment.kind != StorageKind::Alias)
      return fail(label(value) + " is in host memory but its storage is " +
                  storageKindName(assignment.kind) +
                  " (host values are slices of the host arena)");
    switch (assignment.kind) {
    case StorageKind::Arena: {
      uint64_t arena = space == MemorySpace::Host ? hostArenaBytes : arenaBytes;
      if (assignment.offset % kBufferAlignment)
        return fail(label(value) + " is not aligned");
      if (assignment.size > arena ||
          assignment.offset > arena - assignment.size)
        return fail(label(value) + " ends past the " + memorySpaceName(space) +
                    " arena");
      if (assignment.firstStep > assignment.lastStep)
        return fail(label(value) + " has an empty live interval");
      if (assignment.size)
        slicesOf[unsigned(space)].push_back(
            {value, nullptr, assignment.offset, assignment.size,
             assignment.firstStep, assignment.lastStep});
      break;
    }
    case StorageKind::Alias: {
      const Value *owner = storageOwner(value);
      if (!owner)
        return fail(label(value) + " is on an alias cycle");
      const BufferAssignment *target = lookup(owner);
      if (!target || owner == value)
        return fail(label(value) + " aliases an unplanned value");
      if (target->size < assignment.size)
        return fail(label(value) + " is larger than the storage it aliases");
      if (target->space != assignment.space)
        return fail(label(value) + " is in the " +
                    memorySpaceName(assignment.space) +
                    " space but aliases storage in the " +
                    memorySpaceName(target->space) + " space");
      // Arena storage must be live for as long as anything aliases it.
      if (target->kind == StorageKind::Arena &&
          (assignment.firstStep < target->firstStep ||
           assignment.lastStep > target->lastStep))
        return fail(label(value) + " outlives the arena slice it aliases");
      break;
    }
    case StorageKind::Constant:
      if (!value->isInitializer() && !value->hasData())
        return fail(label(value) + " is constant but has no data");
      break;
    case StorageKind::Persistent:
      break;
    }
  }

  if (!workspaces.empty()) {
    llvm::DenseMap<const Node *, uint32_t> position;
    uint32_t index = 0;
    for (const Node &node : graph.getNodes())
      position[&node] = index++;
    for (const auto &[node, workspace] : workspaces) {
      auto it = position.find(node);
      if (it == position.end())
        return fail("a workspace belongs to a node that is not in the graph");
      std::string what = "the workspace of " + node->describe();
      if (it->second != workspace.step)
        return fail(llvm::formatv("{0} is at step {1}, but the node is at "
                                  "step {2}",
                                  what, workspace.step, it->second));
      if (!workspace.size || workspace.size % kBufferAlignment ||
          workspace.offset % kBufferAlignment)
        return fail(what + " is empty or not aligned");
      if (workspace.size > arenaBytes ||
          workspace.offset > arenaBytes - workspace.size)
        return fail(what + " ends past the arena");
      slices.push_back({nullptr, node, workspace.offset, workspace.size,
                        workspace.step, workspace.step});
    }
  }

  // Sweep each space's definitions in time order; `active` holds the live
  // slices keyed by offset, which must be pairwise disjoint in address.
  for (std::vector<Slice> &spaceSlices : slicesOf) {
    llvm::sort(spaceSlices, [](const Slice &a, const Slice &b) {
      return a.firstStep < b.firstStep;
    });
    std::multimap<uint32_t, const Slice *> byEnd;
    std::map<uint64_t, const Slice *> active;
    for (const Slice &slice : spaceSlices) {
      uint32_t now = slice.firstStep;
      while (!byEnd.empty() && byEnd.begin()->first < now) {
        const Slice *dead = byEnd.begin()->second;
        active.erase(dead->offset);
        byEnd.erase(byEnd.begin());
      }
      uint64_t begin = slice.offset;
      uint64_t end = begin + slice.size;
      auto next = active.lower_bound(begin);
      auto conflict = [&](const Slice *other) {
        return fail(slice.describe() + " and " + other->describe() +
                    " overlap in both address and live range");
      };
      if (next != active.end() && next->first < end)
        return conflict(next->second);
      if (next != active.begin()) {
        const Slice *prev = std::prev(next)->second;
        if (prev->offset + prev->size > begin)
          return conflict(prev);
      }
      active[begin] = &slice;
      byEnd.insert({slice.lastStep, &slice});
    }
  }

  // The recorded live intervals and aliases are checked against the graph,
  // not trusted: a plan whose storage dies before a reader, or that shares
  // an unrelated value's bytes, passes the overlap sweep above and trains
  // wrongly. Every value read through arena storage must find that storage
  // live from its definition to its last use (liveness re-derived from the
  // graph), and an alias must share the bytes of its view source or of an
  // operand its node may overwrite in place. Each value's own uses count:
  // a view's uses are checked against the storage the plan gives the view
  // (its source's when it is an alias, its own when it is a copy, as for a
  // view of a side-effect result).
  llvm::DenseMap<const Value *, LiveInterval> uses =
      computeUseIntervals(module);
  for (const auto &[value, assignment] : buffers) {
    const Value *owner = storageOwner(value);
    const BufferAssignment *storage = owner ? lookup(owner) : nullptr;
    if (assignment.kind == StorageKind::Alias) {
      if (!aliasIsRelated(value, assignment.aliasOf))
        return fail(label(value) + " aliases " + label(assignment.aliasOf) +
                    ", which is neither its view source nor an operand its "
                    "node may overwrite in place");
    }
    if (!storage || storage->kind != StorageKind::Arena)
      continue;
    LiveInterval need = uses.lookup(value);
    if (storage->firstStep > need.firstStep ||
        storage->lastStep < need.lastStep)
      return fail(llvm::formatv("{0} is live over steps [{1}, {2}] but its "
                                "arena storage{3} only over [{4}, {5}]",
                                label(value), need.firstStep, need.lastStep,
                                owner == value ? std::string()
                                               : " (" + label(owner) + ")",
                                storage->firstStep, storage->lastStep));
  }

  return llvm::Error::success();
}

void ExecutionPlan::print(const Module &module, llvm::raw_ostream &os) const {
  os << "plan {\n";
  forEachValue(module.getGraph(), [&](const Value *value) {
    const BufferAssignment *assignment = lookup(value);
    os << "  " << label(value) << " ";
    if (!assignment) {
      os << "unplanned\n";
      return;
    }
    os << storageKindName(assignment->kind) << " ";
    if (assignment->space != MemorySpace::Device)
      os << memorySpaceName(assignment->space) << " ";
    os << memoryCategoryName(assignment->category) << " size "
       << assignment->size;
    if (assignment->kind == StorageKind::Arena)
      os << " offset " << assignment->offset;
    if (assignment->kind == StorageKind::Alias && assignment->aliasOf)
      os << " of " << label(assignment->aliasOf);
    os << " steps " << assignment->firstStep << ".." << assignment->lastStep
       << "\n";
  });
  if (!workspaces.empty()) {
    std::vector<std::pair<const Node *, const WorkspaceAssignment *>> sorted;
    for (const auto &[node, workspace] : workspaces)
      sorted.push_back({node, &workspace});
    llvm::sort(sorted, [](const auto &a, const auto &b) {
      return a.second->step < b.second->step;
    });
    for (const auto &[node, workspace] : sorted)
      os << "  workspace " << node->describe() << " size " << workspace->size
         << " offset " << workspace->offset << " step " << workspace->step
         << "\n";
  }
  os << "  naive_bytes " << figures.naiveBytes << "\n"
     << "  eager_estimate_bytes " << figures.eagerEstimateBytes << "\n"
     << "  lower_bound_bytes " << figures.lowerBoundBytes << " at step "
     << figures.lowerBoundStep << "\n"
     << "  arena_bytes " << arenaBytes << "\n"
     << "  host_arena_bytes " << hostArenaBytes << "\n"
     << "  persistent_bytes " << figures.totalPersistentBytes() << "\n"
     << "  in_place_saved_bytes " << figures.inPlaceSavedBytes << "\n"
     << "  workspace_bytes " << figures.workspaceBytes << "\n"
     << "  fragmentation " << llvm::format("%.4f", figures.fragmentation())
     << "\n"
     << "}\n";
}
