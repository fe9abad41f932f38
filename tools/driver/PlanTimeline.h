//===- PlanTimeline.h - Timeline data from a module's plan ------*- C++ -*-===//
//
// What gmopt-run --timeline and gmopt-compile --timeline draw: the
// original graph's eager schedule (its trivial plan: every tensor from its
// definition to its last use, views sharing their source) beside the
// optimized module's plan, each tensor a band of its allocation bytes,
// persistent values over the whole step, kernel workspace at its node's
// step. Timeline.h renders it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_PLANTIMELINE_H
#define GMOPT_TOOLS_DRIVER_PLANTIMELINE_H

#include "tools/driver/Timeline.h"

#include "ir/Plan.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace gmopt {

class Module;

/// The bands of \p plan over \p module's schedule (its node order): one per
/// value with storage of its own (arena slices over their live steps;
/// persistent values and constants over every step) and one per workspace
/// slice; recompute clones (Phase::Recompute) marked. With \p showReserved
/// the plan's reserved bytes (arena + persistent) are drawn too.
TimelinePanel timelinePanelFromPlan(const Module &module,
                                    const ExecutionPlan &plan,
                                    llvm::StringRef title, bool showReserved);

/// The timeline page of \p optimized (with its plan) against \p original
/// run eagerly (its trivial plan with \p workspace, as the eager baseline
/// is estimated), titled with \p name. Fails if the original's trivial plan
/// cannot be made.
llvm::Expected<std::string> renderPlanTimeline(const Module &optimized,
                                               const Module &original,
                                               const WorkspaceModel &workspace,
                                               llvm::StringRef name);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_PLANTIMELINE_H
