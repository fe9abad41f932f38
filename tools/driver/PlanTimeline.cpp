//===- PlanTimeline.cpp - Timeline data from a module's plan --------------===//

#include "tools/driver/PlanTimeline.h"

#include "ir/Module.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;

namespace {

/// `Op 'name'` (`Op` alone for an unnamed node).
std::string nodeLabel(const Node &node) {
  std::string op = node.getOp().str();
  if (node.getName().empty())
    return op;
  return op + " '" + node.getName().str() + "'";
}

std::string tensorName(const Value &value) {
  if (!value.getName().empty())
    return value.getName().str();
  if (const Node *def = value.getDefiningNode())
    return llvm::formatv("result {0} of {1}", value.getResultIndex(),
                         nodeLabel(*def))
        .str();
  return "<unnamed>";
}

std::string producerOf(const Value &value) {
  if (const Node *def = value.getDefiningNode())
    return nodeLabel(*def);
  return value.isInitializer() ? "initializer" : "graph input";
}

} // namespace

TimelinePanel gmopt::timelinePanelFromPlan(const Module &module,
                                           const ExecutionPlan &plan,
                                           llvm::StringRef title,
                                           bool showReserved) {
  const Graph &graph = module.getGraph();
  TimelinePanel panel;
  panel.title = title.str();
  for (const Node &node : graph.getNodes()) {
    panel.steps.push_back(nodeLabel(node));
    panel.recompute.push_back(node.getPhase() == Phase::Recompute);
  }
  if (!llvm::is_contained(panel.recompute, true))
    panel.recompute.clear();
  uint32_t lastStep = panel.steps.empty() ? 0 : panel.steps.size() - 1;
  // In schedule order (the plan's map has none): inputs, initializers,
  // then each node's results.
  auto add = [&](const Value *value) {
    const BufferAssignment *assignment = plan.lookup(value);
    // The timeline is the device's memory: offloaded tensors in the host
    // arena are not part of it (nor of the reserved device bytes).
    if (!assignment || assignment->kind == StorageKind::Alias ||
        assignment->space == MemorySpace::Host)
      return;
    TimelineBand band;
    band.tensor = tensorName(*value);
    band.producer = producerOf(*value);
    band.category = assignment->category;
    band.bytes = alignBuffer(assignment->size);
    if (assignment->kind == StorageKind::Arena) {
      band.firstStep = assignment->firstStep;
      band.lastStep = assignment->lastStep;
    } else {
      band.firstStep = 0;
      band.lastStep = lastStep;
    }
    panel.bands.push_back(std::move(band));
  };
  for (const auto &input : graph.getInputs())
    add(input.get());
  for (const auto &init : graph.getInitializers())
    add(init.get());
  uint32_t step = 0;
  for (const Node &node : graph.getNodes()) {
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (const Value *result = node.getResult(i))
        add(result);
    if (const WorkspaceAssignment *workspace = plan.lookupWorkspace(&node)) {
      TimelineBand band;
      band.tensor = "workspace of " + nodeLabel(node);
      band.producer = "the kernel of " + nodeLabel(node);
      band.category = MemoryCategory::Workspace;
      band.bytes = workspace->size;
      band.firstStep = band.lastStep = step;
      panel.bands.push_back(std::move(band));
    }
    ++step;
  }
  if (showReserved)
    panel.reservedBytes = plan.figures.plannedBytes();
  return panel;
}

llvm::Expected<std::string>
gmopt::renderPlanTimeline(const Module &optimized, const Module &original,
                          const WorkspaceModel &workspace,
                          llvm::StringRef name) {
  auto eager = makeTrivialPlan(original, workspace);
  if (!eager)
    return eager.takeError();
  TimelinePanel panels[2] = {
      timelinePanelFromPlan(original, *eager,
                            "baseline: the original graph, eager", false),
      timelinePanelFromPlan(optimized, optimized.plan,
                            "optimized: the compiled plan", true)};
  return renderTimelineHtml(("gmopt memory timeline: " + name).str(), panels);
}
