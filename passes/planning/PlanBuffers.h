//===- PlanBuffers.h - Liveness, in-place reuse, arena offsets --*- C++ -*-===//
//
// The pass where every other pass's savings become real bytes. For the
// graph's current schedule it computes liveness (Liveness.h), lets
// elementwise results overwrite operands that die at their node
// (InPlace.h), gives every remaining transient storage group an offset in
// one arena (ArenaAllocator.h: greedy by lifetime and greedy by size with
// best fit, the smallest wins), and writes the result to module.plan:
// initializers Constant; graph inputs and outputs Persistent; views and
// in-place results Alias; everything else an Arena slice. Results of
// side-effecting ops keep slices of their own. With the PassContext's
// WorkspaceModel, each node that needs kernel scratch also gets an arena
// slice live during its step (ExecutionPlan::workspaces), so the backend's
// measured peak is the planned one. The plan carries the static
// figures (naive, eager estimate, LOAD and its step, arena, fragmentation,
// in-place savings, persistent bytes by category) and is checked by
// ExecutionPlan::validate after every planning in debug builds, and in any
// build with `validate`.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_PLANBUFFERS_H
#define GMOPT_PASSES_PLANNING_PLANBUFFERS_H

#include "passes/Pass.h"
#include "passes/planning/ArenaAllocator.h"

#include "ir/Plan.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {

class Module;

/// The `plan-buffers` pass.
class PlanBuffersPass : public Pass {
public:
  /// The plan this pass writes is kept by the pass manager.
  bool writesPlan() const override { return true; }
  /// Tunables; each is a pipeline option (`plan-buffers{in-place=false}`).
  struct Options {
    /// Let an elementwise result overwrite an operand whose storage dies at
    /// its node (see InPlace.h for the exact rules).
    bool inPlace = true;
    /// Try best-fit offset assignment (greedy by size, breadth, area and
    /// duration, then the local search).
    bool greedyBySize = true;
    /// Try greedy-by-lifetime offset assignment (four sweeps: forward and
    /// reversed, with and without the LOAD as capacity hint).
    bool greedyByLifetime = true;
    /// Work budget of best-fit assignment (its four orders and the local
    /// search together): bestFitWorkFloor + bestFitWork * n * ceil(log2 n)
    /// units for n arena requests, a unit being one request placed or one
    /// pair of buffers live at the same time visited (see
    /// ArenaAllocator::Options::bestFitWork). Small graphs search for up to
    /// searchRounds rounds within the floor; on large ones, whose pairs grow
    /// with the square of the depth, best-fit assignment is skipped once one
    /// placement no longer fits, so planning stays O(n log n). Greedy by
    /// lifetime is O(n log n) and always runs.
    uint64_t bestFitWork = 2;
    /// The constant part of the best-fit work budget.
    uint64_t bestFitWorkFloor = uint64_t(1) << 22;
    /// Most rounds of the best-fit local search when no greedy layout
    /// reaches LOAD (each paid from the work budget; 0: no search).
    uint64_t searchRounds = 2000;
    /// Validate the plan after planning in every build type (debug builds
    /// always validate).
    bool validate = false;
  };

  /// A pass with the default options.
  PlanBuffersPass();
  /// A pass with \p options.
  explicit PlanBuffersPass(Options options);

  llvm::StringRef getName() const override { return "plan-buffers"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

/// What computeBufferPlan found besides the plan itself.
struct BufferPlanSummary {
  /// Results that overwrite an operand.
  uint64_t inPlaceReuses = 0;
  /// Views that share their source's bytes.
  uint64_t viewsAliased = 0;
  /// Storage groups placed in the arena.
  uint64_t arenaBuffers = 0;
  /// The arena layout's strategy and every strategy's size.
  ArenaLayout layout;
};

/// The eager estimate of \p module in its current node order: the live-byte
/// peak when every transient tensor is allocated at its definition and
/// freed after its last use (views sharing their source, no in-place
/// reuse), plus all persistent and constant bytes, everything at aligned
/// size. plan-buffers records it for the graph it plans; tools call it on
/// the original module to get the eager baseline a user would compare
/// against. With \p workspace, each node's kernel scratch counts as live
/// at its step (an eager backend allocates it there too). Fails on values
/// without static shapes.
llvm::Expected<uint64_t>
estimateEagerPeakBytes(const Module &module,
                       const WorkspaceModel &workspace = nullptr);

/// Plans \p module's buffers for its current node order, as the pass does,
/// without touching the module; \p workspace reserves kernel scratch.
/// Fails on values without static shapes.
llvm::Expected<ExecutionPlan>
computeBufferPlan(const Module &module, const PlanBuffersPass::Options &options,
                  BufferPlanSummary *summary = nullptr,
                  const WorkspaceModel &workspace = nullptr);

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_PLANBUFFERS_H
