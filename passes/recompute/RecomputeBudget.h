//===- RecomputeBudget.h - Budget mode's search for a plan ------*- C++ -*-===//
//
// `recompute{mode=budget,memory-limit=L}` wants the least recompute cost
// whose planned peak fits L. The cost is in FLOP-equivalents
// (passes/planning/StepCost.h, recomputeCostFlops): FLOPs for compute-bound
// nodes, bytes moved times the backend's balance for memory-bound ones;
// "FLOP" below means that unit. The peak is what schedule and plan-buffers
// make of the rewritten step, so every candidate is judged by planning it
// (an evaluator the pass supplies); this file decides which candidates to
// plan.
//
// First the strategy family, as before the search existed: part of
// selective (its groups freeing the most bytes per FLOP), all of it, whole
// segments over a growing prefix of the forward pass with the rest
// selective, and full and sqrt (binary searches over the part and the
// prefix). Their candidate sets are nested, so they miss mixed plans: the
// early blocks' cheap values of one graph with one product of another.
// Then a local search over single saved activations, in the space explicit
// mode spans (a strategy's kept set with values kept or dropped beyond it):
//   * descent: from a plan that does not fit (no recompute, the family's
//     plans that missed the limit, and last everything dropped), drop the
//     kept value that lowers the planned peak most per added recompute
//     FLOP (where none lowers it, the live bytes above the limit), until
//     the plan fits (Chen et al.'s and Checkmate's greedy baselines, judged
//     by the real plan rather than a model). On small graphs, and where no
//     single value helps, pairs of the first few values too; on large
//     graphs far from the limit, a batch: the ranked prefix expected to
//     close the gap, or half of it;
//   * improvement: from each plan that fits (the cheapest first, then the
//     family's best and the descents' ends), keep one dropped value again
//     if the plan still fits and the FLOPs fall (the first such, most FLOPs
//     saved first); failing that, keep one and descend again from there
//     under the current FLOPs (a swap of one dear value for cheaper ones).
// Each step plans only the `width` moves an estimate ranks first: the
// bytes of a value whose backward gap (after its last forward read, before
// its first later read or its clone) spans the live-byte peak step of the
// current plan, per recompute FLOP of its region. On small graphs that is
// every move. The number of planned candidates is bounded
// (RecomputePass::Options::searchWork), and the cheapest plan that
// fits among all planned ones wins, so the search never returns more FLOPs
// than the family. The search plans without plan-buffers' order search (a
// peak at or above the exact one, so what fits that way fits), and on
// small graphs exactly where that misses and LOAD fits.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_RECOMPUTE_RECOMPUTEBUDGET_H
#define GMOPT_PASSES_RECOMPUTE_RECOMPUTEBUDGET_H

#include "passes/recompute/Recompute.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace gmopt {

class SavedActivations;

/// What planning one candidate's rewritten step told the search.
struct BudgetEvaluation {
  /// The planned peak: arena plus persistent bytes.
  uint64_t peak = 0;
  /// Whether plan-buffers ran in full; if not, peak may exceed what the
  /// pipeline plans for the same step (never the other way).
  bool exact = true;
  /// LOAD plus persistent bytes: no layout of this schedule plans less.
  uint64_t lowerBound = 0;
  /// Live bytes above the limit summed over the schedule's steps (the
  /// liveness profile plus persistent bytes): how far from fitting a plan
  /// is, also where its peak does not move (two equal peaks).
  uint64_t excess = 0;
  /// Per saved activation (an index into SavedActivations::getSaved()):
  /// whether the live-byte peak step lies in its backward gap, after its
  /// last forward read and before its first later-phase read (kept) or its
  /// clone (dropped): keeping it there holds its bytes at the peak.
  std::vector<bool> spansPeak;
};

/// Plans the step rewritten by \p plan and reports what it reached,
/// excess measured against \p limit. Without \p exact the buffer plan may
/// skip work (see BudgetEvaluation::exact).
using BudgetEvaluator = llvm::function_ref<llvm::Expected<BudgetEvaluation>(
    const RecomputePlan &plan, uint64_t limit, bool exact)>;

/// How hard budget searches.
struct BudgetSearchOptions {
  /// The planned-peak limit (bytes).
  uint64_t limit = 0;
  /// The most candidates the local search plans after the family (0: the
  /// family only).
  uint32_t maxEvaluations = 64;
  /// Moves planned per descent step or improvement round, best estimate
  /// first.
  uint32_t width = 12;
  /// Plan a local-search candidate again in full where the quick plan
  /// misses the limit and LOAD fits (the pass does so on small graphs,
  /// where an exact plan costs little; elsewhere plan-buffers' order
  /// search costs up to its work floor per candidate).
  bool exactWhereLoadFits = true;
  /// How selective weighs its choices, for the family's plans.
  RecomputeTuning tuning;
};

/// What the search found.
struct BudgetSearchResult {
  /// The cheapest plan that fits, if any did.
  std::optional<RecomputePlan> best;
  /// The smallest planned peak any candidate reached.
  uint64_t smallestPeak = UINT64_MAX;
  /// Candidates planned by the family and by the local search.
  uint32_t familyEvaluations = 0;
  uint32_t searchEvaluations = 0;
};

/// Searches plans for the module \p analysis describes, judging each with
/// \p evaluate (which must leave the module as it found it).
llvm::Expected<BudgetSearchResult>
searchBudget(const SavedActivations &analysis,
             const BudgetSearchOptions &options, BudgetEvaluator evaluate);

} // namespace gmopt

#endif // GMOPT_PASSES_RECOMPUTE_RECOMPUTEBUDGET_H
