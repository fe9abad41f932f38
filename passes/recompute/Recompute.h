//===- Recompute.h - Trade compute for activation memory --------*- C++ -*-===//
//
// Gradient checkpointing as a graph rewrite. The `recompute` pass picks saved
// activations (passes/recompute/SavedActivations.h) to drop, clones the forward
// nodes that compute them from the values it keeps into the backward region,
// just before the first backward node that reads them (phase `recompute`), and
// rewires every later-phase reader to the clones, so the original's live
// range ends in the forward pass. The schedule pass never hoists a clone
// back (passes/planning/Schedule.h). Clones of random ops keep the original's
// stream id and draw the same numbers; the rewritten step computes the same
// losses and gradients.
//
// Strategies (`recompute{mode=...}`):
//   * selective - recompute the cheap ops (elementwise, activations,
//     normalisations, casts, views, softmax, dropout) and keep the outputs
//     of matrix products and convolutions (Megatron-LM's selective
//     recompute). Which values to keep is a minimum cut of the forward graph
//     between what the forward pass must compute and what the backward pass
//     reads, at the least kept bytes (PyTorch's min-cut partitioner).
//   * full - keep only segment boundaries: the forward pass is cut where the
//     values live across a point are fewest in bytes (between blocks), and
//     each segment is recomputed whole when the backward pass reaches it.
//   * sqrt - Chen et al.'s sqrt(N) segments: every ceil(sqrt(n))-th of the
//     n boundaries full would keep.
//   * explicit - drop exactly the saved activations named in `drop`
//     (space-separated value names) and recompute them from the other
//     saved activations and the inputs; for experiments and for comparing
//     the strategies with an exhaustive search (bench/).
//   * budget - with memory-limit: the least recompute cost whose planned
//     peak (schedule and plan-buffers run on each candidate) fits. First a
//     family of strategies: none, part of selective (its groups that free
//     the most bytes per FLOP), all of it, and full segment recompute of a
//     growing prefix of the forward pass, the rest selective (binary
//     searches). Then a local search over single saved activations
//     (passes/recompute/RecomputeBudget.h): from no recompute and from the
//     family's plans, a greedy that drops the activation lowering the planned
//     peak most per recompute FLOP until the plan fits, then moves that keep an
//     activation again (or keep one and drop cheaper ones) while the plan
//     fits and the FLOPs fall. The pass takes the cheapest plan it planned
//     that fits, or fails stating the smallest peak it reached. The number
//     of plans the search evaluates is bounded (search-work).
//
// Recompute is priced by the cost model of passes/planning/StepCost.h
// (option cost-model, the CPU preset by default): compute-bound nodes by
// their FLOPs, memory-bound ones (pointwise, normalisations, softmax,
// dropout) by the bytes they read and write times the backend's balance.
// Budget mode minimises that cost ("FLOPs" in its description means these
// FLOP-equivalents) and the statistics report it (recompute-cost,
// recompute-cost-bp) beside the plain FLOPs. Selective's cut keeps its own
// price (FLOPs plus written bytes, Options::flopsPerByte) for now: see
// recomputePrice in RecomputeStrategies.cpp.
//
// The pass plans first (a printable RecomputePlan) and rewrites after. A
// module that already has recompute clones is left alone, so a second run
// changes nothing.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_RECOMPUTE_RECOMPUTE_H
#define GMOPT_PASSES_RECOMPUTE_RECOMPUTE_H

#include "passes/Pass.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gmopt {

class SavedActivations;
class Value;

/// A recompute strategy.
enum class RecomputeMode { Selective, Sqrt, Full, Budget, Explicit };

/// Which saved activations to drop and how to recompute them.
struct RecomputePlan {
  /// One set of clones placed together.
  struct Group {
    /// Forward positions of the nodes to clone, ascending.
    std::vector<uint32_t> nodes;
    /// The dropped saved activations this group provides to later phases.
    std::vector<const Value *> provides;
    /// Position in the graph's node order the clones go before.
    uint32_t placeBefore = 0;
    uint64_t flops = 0;
    /// FLOP-equivalents (recomputeCostFlops) of the nodes.
    uint64_t cost = 0;
  };
  std::vector<Group> groups;
  /// Segment modes: the forward positions the forward pass is cut after,
  /// with the bytes live across each cut.
  std::vector<std::pair<uint32_t, uint64_t>> boundaries;
  /// The forward values kept for later phases, by producer order.
  std::vector<const Value *> kept;
  /// Saved-activation bytes before and after (what later phases read from
  /// the forward pass).
  uint64_t savedBytesBefore = 0;
  uint64_t savedBytesAfter = 0;
  /// Recompute FLOPs, and the FLOPs of the unrewritten step.
  uint64_t recomputeFlops = 0;
  uint64_t stepFlops = 0;
  /// The same in FLOP-equivalents (recomputeCostFlops): what budget mode
  /// minimises and the report states beside the FLOPs.
  uint64_t recomputeCost = 0;
  uint64_t stepCost = 0;
  /// Number of dropped saved activations.
  uint64_t dropped = 0;

  bool empty() const { return groups.empty(); }
  /// Prints the groups (what they clone, where, for whom) and the totals.
  void print(llvm::raw_ostream &os, const SavedActivations &analysis) const;
};

/// The `recompute` pass.
class RecomputePass : public Pass {
public:
  /// Tunables; each is a pipeline option (`recompute{mode=full}`).
  struct Options {
    /// The strategy.
    RecomputeMode mode = RecomputeMode::Selective;
    /// budget mode: the limit on the planned peak (arena plus persistent
    /// bytes), as bytes (`1073741824`, `512MiB`, `2GB`) or as a percentage
    /// of the unrewritten graph's planned peak (`60%`).
    std::string memoryLimit;
    /// Selective (and the selective part of the other modes): also
    /// recompute products of two activations - attention scores and
    /// context, Megatron-LM's core attention - whose results grow with the
    /// square of the sequence. Products with a weight are always kept.
    bool attentionCore = true;
    /// The backend whose throughputs price recompute (StepThroughput
    /// presets: cpu, cuda).
    std::string costModel = "cpu";
    /// Selective: what recomputing costs against what keeping costs. A
    /// node's recompute is priced at its FLOPs / flopsPerByte plus the
    /// bytes it writes / writtenBytesPerByte, in kept bytes, and the cut
    /// minimises kept bytes plus that price. With 64, the attention scores
    /// (which free the sequence-squared probabilities) are recomputed and
    /// the attention context (one hidden state for a whole product) is
    /// not; the written-bytes term stops chains of memory-bound ops (the
    /// residual stream through every layer) that free little. 0 leaves a
    /// term out.
    uint64_t flopsPerByte = 64;
    uint64_t writtenBytesPerByte = 16;
    /// explicit mode: the saved activations to drop, space-separated value
    /// names.
    std::string drop;
    /// budget mode: the work of the local search after the strategy
    /// family, in nodes planned: each candidate it evaluates (a schedule
    /// and a buffer plan of the rewritten step) counts the step's nodes,
    /// at least 512, so graphs up to 512 nodes get 128 candidates and
    /// GPT-2 small (1105 nodes) 59; 0 leaves the search out.
    uint64_t searchWork = 65536;
    /// Print the plan to stderr before rewriting.
    bool printPlan = false;
  };

  RecomputePass();
  explicit RecomputePass(Options options);

  llvm::StringRef getName() const override { return "recompute"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

/// How selective recompute weighs its choices (see RecomputePass::Options).
struct RecomputeTuning {
  bool attentionCore = true;
  uint64_t flopsPerByte = 64;
  uint64_t writtenBytesPerByte = 16;
  /// Explicit mode: the saved activations to drop, by value name.
  std::vector<std::string> drop;
};

/// Forward values a plan keeps or drops beyond what its strategy decides.
struct RecomputeAdjustment {
  /// Values kept for later phases whatever the strategy would do.
  std::vector<const Value *> keep;
  /// Values not kept (recomputed where later phases read them): saved
  /// activations, or values the strategy keeps as sources of its regions.
  std::vector<const Value *> drop;

  bool empty() const { return keep.empty() && drop.empty(); }
};

/// Plans \p mode for the module \p analysis describes. For Budget,
/// \p fullPrefix is the number of leading segments recomputed whole, the
/// rest selective (the other modes ignore it). \p adjust then changes the
/// strategy's kept set; a dropped value made by a node that cannot be
/// recomputed (or whose region reaches one) stays kept.
llvm::Expected<RecomputePlan>
planRecompute(const SavedActivations &analysis, RecomputeMode mode,
              uint32_t fullPrefix = 0, const RecomputeTuning &tuning = {},
              const RecomputeAdjustment &adjust = {});

/// The \p count groups of \p plan that free the most saved bytes per
/// recompute FLOP (a valid plan: each group recomputes from what the plan
/// keeps), in placement order, with the totals recounted.
RecomputePlan takeMostEfficientGroups(const RecomputePlan &plan,
                                      const SavedActivations &analysis,
                                      size_t count);

/// The number of boundaries full mode cuts the forward pass at (one less
/// than its segments): the largest fullPrefix that changes a budget plan.
uint32_t countRecomputeSegments(const SavedActivations &analysis);

/// Applies \p plan to \p module (which \p analysis describes): clones each
/// group before its place, marks the clones Phase::Recompute and rewires the
/// later-phase readers of every value the group provides.
llvm::Error applyRecomputePlan(Module &module, const SavedActivations &analysis,
                               const RecomputePlan &plan);

} // namespace gmopt

#endif // GMOPT_PASSES_RECOMPUTE_RECOMPUTE_H
