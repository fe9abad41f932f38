//===- RecomputeBudget.cpp - Budget mode's search for a plan --------------===//
//
// The strategy family and the local search of budget mode (see
// RecomputeBudget.h): which candidates to plan, in what order, and which
// of the planned ones to return. Planning itself is the evaluator's.
//
//===----------------------------------------------------------------------===//

#include "passes/RecomputeBudget.h"
#include "passes/SavedActivations.h"

#include "ir/Module.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <deque>
#include <map>

#define DEBUG_TYPE "gmopt-recompute"

using namespace gmopt;

namespace {

/// A point of the search: a strategy (mode and full prefix) with values
/// kept or dropped beyond what it decides. Adjustments are sorted by
/// valueKey and disjoint.
struct Candidate {
  RecomputeMode mode = RecomputeMode::Explicit;
  uint32_t fullPrefix = 0;
  RecomputeAdjustment adjust;
};

/// A planned candidate.
struct Point {
  /// What to move from; a family part of selective has the closest
  /// candidate (all of selective keeping the values of the other groups).
  Candidate candidate;
  RecomputePlan plan;
  BudgetEvaluation evaluation;
  bool fits = false;
  uint64_t flops() const { return plan.recomputeFlops; }
  uint64_t peak() const { return evaluation.peak; }
};

/// One move from a point, with what the estimate expects of it.
struct Move {
  const Value *value = nullptr;
  /// Bytes the move is expected to take off (descent) or add to (keep) the
  /// peak.
  uint64_t peakBytes = 0;
  /// Recompute FLOPs of the value's region from what the point keeps: what
  /// dropping it adds, or keeping it saves.
  uint64_t flops = 0;
  uint64_t bytes = 0;
  uint64_t key = 0;
};

class BudgetSearch {
public:
  BudgetSearch(const SavedActivations &analysis,
               const BudgetSearchOptions &options, BudgetEvaluator evaluate)
      : analysis(analysis), options(options), evaluate(evaluate) {}

  llvm::Error runFamily();
  llvm::Error runLocalSearch();

  BudgetSearchResult takeResult() {
    BudgetSearchResult result;
    if (best)
      result.best = best->plan;
    result.smallestPeak = smallest;
    result.familyEvaluations = familyEvaluations;
    result.searchEvaluations = searchEvaluations;
    return result;
  }

private:
  /// A stable order of forward values (not their addresses).
  uint64_t valueKey(const Value *value) const {
    return uint64_t(*analysis.getForwardPosition(value->getDefiningNode()))
               << 16 |
           value->getResultIndex();
  }
  bool searchBudgetLeft() const {
    return searchEvaluations < options.maxEvaluations;
  }

  /// Plans \p candidate (memoised); null once the local search has spent
  /// its evaluations.
  llvm::Expected<const Point *> visit(const Candidate &candidate);
  /// Plans \p plan, recorded with \p candidate as where moves start.
  llvm::Expected<const Point *> visitPlan(RecomputePlan plan,
                                          const Candidate &candidate);

  Candidate withDrop(const Candidate &from, const Value *value) const;
  Candidate withKeep(const Candidate &from, const Value *value) const;
  std::vector<Move> dropMoves(const Point &point) const;
  std::vector<Move> keepMoves(const Point &point) const;

  /// Drops values from \p start until a plan fits, stopping when the FLOPs
  /// reach \p flopsBound or nothing lowers the peak. The last point.
  llvm::Expected<const Point *> descend(const Point *start,
                                        uint64_t flopsBound);
  /// Keeps values again (or swaps) while the plan fits and FLOPs fall.
  llvm::Error improve(const Point *start);

  const SavedActivations &analysis;
  const BudgetSearchOptions &options;
  BudgetEvaluator evaluate;

  std::deque<Point> points;
  std::map<std::vector<uint64_t>, const Point *> byCandidate, byPlan;
  std::vector<const Point *> familyMisses;
  const Point *familyBest = nullptr;
  const Point *best = nullptr;
  uint64_t smallest = UINT64_MAX;
  bool inSearch = false;
  uint32_t familyEvaluations = 0, searchEvaluations = 0;
};

llvm::Expected<const Point *> BudgetSearch::visit(const Candidate &candidate) {
  std::vector<uint64_t> key = {uint64_t(candidate.mode),
                               candidate.fullPrefix,
                               candidate.adjust.keep.size()};
  for (const Value *value : candidate.adjust.keep)
    key.push_back(valueKey(value));
  for (const Value *value : candidate.adjust.drop)
    key.push_back(valueKey(value));
  if (auto it = byCandidate.find(key); it != byCandidate.end())
    return it->second;
  llvm::Expected<RecomputePlan> plan =
      planRecompute(analysis, candidate.mode, candidate.fullPrefix,
                    options.tuning, candidate.adjust);
  if (!plan)
    return plan.takeError();
  llvm::Expected<const Point *> point = visitPlan(std::move(*plan), candidate);
  if (point && *point)
    byCandidate[key] = *point;
  return point;
}

llvm::Expected<const Point *>
BudgetSearch::visitPlan(RecomputePlan plan, const Candidate &candidate) {
  // Candidates that differ only in values the plan keeps anyway (made by
  // nodes that cannot be recomputed) plan alike: one evaluation each.
  std::vector<uint64_t> key;
  for (const RecomputePlan::Group &group : plan.groups) {
    key.push_back(group.placeBefore);
    key.push_back(group.nodes.size());
    llvm::append_range(key, group.nodes);
    key.push_back(group.provides.size());
    for (const Value *value : group.provides)
      key.push_back(valueKey(value));
  }
  if (auto it = byPlan.find(key); it != byPlan.end())
    return it->second;
  if (inSearch && !searchBudgetLeft())
    return nullptr;
  llvm::Expected<BudgetEvaluation> evaluation =
      evaluate(plan, options.limit);
  if (!evaluation)
    return evaluation.takeError();
  ++(inSearch ? searchEvaluations : familyEvaluations);
  Point &point = points.emplace_back();
  point.candidate = candidate;
  point.plan = std::move(plan);
  point.evaluation = std::move(*evaluation);
  point.fits = point.peak() <= options.limit;
  smallest = std::min(smallest, point.peak());
  if (point.fits && (!best || point.flops() < best->flops()))
    best = &point;
  LLVM_DEBUG(llvm::dbgs() << "budget: " << (inSearch ? "search" : "family")
                          << " plan, " << point.plan.dropped
                          << " dropped, flops " << point.flops() << ", peak "
                          << point.peak() << (point.fits ? " (fits)" : "")
                          << "\n");
  byPlan[key] = &point;
  return &point;
}

Candidate BudgetSearch::withDrop(const Candidate &from,
                                 const Value *value) const {
  Candidate to = from;
  llvm::erase(to.adjust.keep, value);
  auto less = [&](const Value *a, const Value *b) {
    return valueKey(a) < valueKey(b);
  };
  auto it = std::lower_bound(to.adjust.drop.begin(), to.adjust.drop.end(),
                             value, less);
  if (it == to.adjust.drop.end() || *it != value)
    to.adjust.drop.insert(it, value);
  return to;
}

Candidate BudgetSearch::withKeep(const Candidate &from,
                                 const Value *value) const {
  Candidate to = from;
  llvm::erase(to.adjust.drop, value);
  auto less = [&](const Value *a, const Value *b) {
    return valueKey(a) < valueKey(b);
  };
  auto it = std::lower_bound(to.adjust.keep.begin(), to.adjust.keep.end(),
                             value, less);
  if (it == to.adjust.keep.end() || *it != value)
    to.adjust.keep.insert(it, value);
  return to;
}

std::vector<Move> BudgetSearch::dropMoves(const Point &point) const {
  llvm::DenseSet<const Value *> kept(point.plan.kept.begin(),
                                     point.plan.kept.end());
  std::vector<Move> moves;
  for (const Value *value : point.plan.kept) {
    uint32_t producer = *analysis.getForwardPosition(value->getDefiningNode());
    if (!analysis.isRecomputable(producer))
      continue;
    llvm::Expected<RecomputeRegion> region =
        analysis.computeRegion(value, kept);
    if (!region) {
      llvm::consumeError(region.takeError());
      continue;
    }
    Move move;
    move.value = value;
    move.bytes = analysis.getBytes(value);
    move.flops = region->flops;
    move.key = valueKey(value);
    const SavedActivation *saved = analysis.lookupSaved(value);
    if (saved && point.evaluation.spansPeak.size() == analysis.getSaved().size() &&
        point.evaluation.spansPeak[saved - analysis.getSaved().data()])
      move.peakBytes = move.bytes;
    moves.push_back(move);
  }
  // Values held at the peak first, most bytes per FLOP; then the others by
  // bytes per FLOP (the peak may sit elsewhere once they are gone).
  llvm::sort(moves, [](const Move &a, const Move &b) {
    if ((a.peakBytes > 0) != (b.peakBytes > 0))
      return a.peakBytes > 0;
    long double ra = (long double)std::max(a.peakBytes, a.bytes) / (a.flops + 1);
    long double rb = (long double)std::max(b.peakBytes, b.bytes) / (b.flops + 1);
    if (ra != rb)
      return ra > rb;
    return a.key < b.key;
  });
  return moves;
}

std::vector<Move> BudgetSearch::keepMoves(const Point &point) const {
  llvm::DenseSet<const Value *> kept(point.plan.kept.begin(),
                                     point.plan.kept.end());
  std::vector<Move> moves;
  for (const RecomputePlan::Group &group : point.plan.groups)
    for (const Value *value : group.provides) {
      llvm::Expected<RecomputeRegion> region =
          analysis.computeRegion(value, kept);
      if (!region) {
        llvm::consumeError(region.takeError());
        continue;
      }
      Move move;
      move.value = value;
      move.bytes = analysis.getBytes(value);
      move.flops = region->flops;
      move.key = valueKey(value);
      const SavedActivation *saved = analysis.lookupSaved(value);
      if (saved &&
          point.evaluation.spansPeak.size() == analysis.getSaved().size() &&
          point.evaluation.spansPeak[saved - analysis.getSaved().data()])
        move.peakBytes = move.bytes;
      moves.push_back(move);
    }
  // Those expected to keep the plan under the limit first, the most FLOPs
  // saved first.
  const uint64_t room = options.limit - std::min(options.limit, point.peak());
  llvm::sort(moves, [&](const Move &a, const Move &b) {
    bool aFits = a.peakBytes <= room, bFits = b.peakBytes <= room;
    if (aFits != bFits)
      return aFits;
    if (a.flops != b.flops)
      return a.flops > b.flops;
    return a.key < b.key;
  });
  return moves;
}

llvm::Expected<const Point *> BudgetSearch::descend(const Point *start,
                                                    uint64_t flopsBound) {
  const Point *current = start;
  while (!current->fits && current->flops() < flopsBound) {
    std::vector<Move> moves = dropMoves(*current);
    if (moves.size() > options.width)
      moves.resize(options.width);
    const Point *chosen = nullptr;
    long double chosenRatio = -1;
    bool chosenLowersPeak = false;
    for (const Move &move : moves) {
      llvm::Expected<const Point *> next =
          visit(withDrop(current->candidate, move.value));
      if (!next)
        return next.takeError();
      if (!*next)
        break;
      const Point &point = **next;
      uint64_t added = point.flops() > current->flops()
                           ? point.flops() - current->flops()
                           : 0;
      // Progress is the planned peak's fall; where no move lowers it (two
      // equal peaks), the fall of the live bytes above the limit.
      bool lowersPeak = point.peak() < current->peak();
      uint64_t progress =
          lowersPeak ? current->peak() - point.peak()
          : point.evaluation.excess < current->evaluation.excess
              ? current->evaluation.excess - point.evaluation.excess
              : 0;
      if (!progress || (chosenLowersPeak && !lowersPeak))
        continue;
      long double ratio = (long double)progress / (added + 1);
      if (!chosen || (lowersPeak && !chosenLowersPeak) || ratio > chosenRatio) {
        chosen = &point;
        chosenRatio = ratio;
        chosenLowersPeak = lowersPeak;
      }
    }
    if (!chosen)
      break;
    current = chosen;
  }
  return current;
}

llvm::Error BudgetSearch::improve(const Point *start) {
  const Point *current = start;
  // Kept values whose keep alone missed the limit, tried as swaps once.
  llvm::DenseSet<const Point *> swapped;
  while (searchBudgetLeft()) {
    std::vector<Move> moves = keepMoves(*current);
    if (moves.size() > options.width)
      moves.resize(options.width);
    const Point *better = nullptr;
    std::vector<const Point *> misses;
    for (const Move &move : moves) {
      llvm::Expected<const Point *> next =
          visit(withKeep(current->candidate, move.value));
      if (!next)
        return next.takeError();
      if (!*next)
        break;
      const Point *point = *next;
      if (point->flops() >= current->flops())
        continue;
      if (point->fits) {
        if (!better || point->flops() < better->flops())
          better = point;
      } else {
        misses.push_back(point);
      }
    }
    if (!better) {
      // A swap: keep a dear value, then drop cheaper ones until the plan
      // fits again under the current FLOPs. The dearest first.
      llvm::stable_sort(misses, [](const Point *a, const Point *b) {
        return a->flops() < b->flops();
      });
      unsigned tried = 0;
      for (const Point *miss : misses) {
        if (tried == 3 || !searchBudgetLeft())
          break;
        if (!swapped.insert(miss).second)
          continue;
        ++tried;
        llvm::Expected<const Point *> end = descend(miss, current->flops());
        if (!end)
          return end.takeError();
        if ((*end)->fits && (*end)->flops() < current->flops()) {
          better = *end;
          break;
        }
      }
    }
    if (!better)
      break;
    current = better;
  }
  return llvm::Error::success();
}

llvm::Error BudgetSearch::runFamily() {
  auto tryCandidate = [&](RecomputeMode mode,
                          uint32_t prefix) -> llvm::Expected<const Point *> {
    Candidate candidate;
    candidate.mode = mode;
    candidate.fullPrefix = prefix;
    llvm::Expected<const Point *> point = visit(candidate);
    if (point && !(*point)->fits)
      familyMisses.push_back(*point);
    return point;
  };
  // The largest useful prefix: every segment but the last. Peaks fall as
  // the prefix grows and FLOPs rise: binary search for the smallest prefix
  // that fits.
  const uint32_t maxPrefix = countRecomputeSegments(analysis);
  llvm::Expected<const Point *> all =
      tryCandidate(RecomputeMode::Budget, maxPrefix);
  if (!all)
    return all.takeError();
  if (!(*all)->fits) {
    for (RecomputeMode mode : {RecomputeMode::Full, RecomputeMode::Sqrt})
      if (llvm::Expected<const Point *> point = tryCandidate(mode, 0); !point)
        return point.takeError();
    familyBest = best;
    return llvm::Error::success();
  }
  uint32_t lo = 0, hi = maxPrefix; // hi fits
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    llvm::Expected<const Point *> point =
        tryCandidate(RecomputeMode::Budget, mid);
    if (!point)
      return point.takeError();
    if ((*point)->fits)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (hi == 0) {
    // Selective fits: perhaps a part of it does. Its groups, most bytes
    // freed per FLOP first; the fewest that fit.
    llvm::Expected<const Point *> selective =
        tryCandidate(RecomputeMode::Budget, 0);
    if (!selective)
      return selective.takeError();
    const RecomputePlan &whole = (*selective)->plan;
    size_t groupsLo = 1, groupsHi = whole.groups.size();
    while (groupsLo < groupsHi) {
      size_t mid = groupsLo + (groupsHi - groupsLo) / 2;
      RecomputePlan part = takeMostEfficientGroups(whole, analysis, mid);
      // Moves from a part start at all of selective keeping what the part
      // does not drop.
      Candidate closest = (*selective)->candidate;
      llvm::DenseSet<const Value *> dropped;
      for (const RecomputePlan::Group &group : part.groups)
        dropped.insert(group.provides.begin(), group.provides.end());
      for (const RecomputePlan::Group &group : whole.groups)
        for (const Value *value : group.provides)
          if (!dropped.contains(value))
            closest = withKeep(closest, value);
      llvm::Expected<const Point *> point =
          visitPlan(std::move(part), closest);
      if (!point)
        return point.takeError();
      if ((*point)->fits) {
        groupsHi = mid;
      } else {
        groupsLo = mid + 1;
        familyMisses.push_back(*point);
      }
    }
  }
  familyBest = best;
  return llvm::Error::success();
}

llvm::Error BudgetSearch::runLocalSearch() {
  if (!options.maxEvaluations)
    return llvm::Error::success();
  inSearch = true;
  // Improve the family's answer first: its neighbours are the likeliest
  // cheap plans on large graphs, where the budget runs out.
  if (familyBest)
    if (llvm::Error err = improve(familyBest))
      return err;
  // Descents: from no recompute, then from the family's misses nearest the
  // limit.
  std::vector<const Point *> starts;
  {
    llvm::Expected<const Point *> none = visit(Candidate());
    if (!none)
      return none.takeError();
    if (*none)
      starts.push_back(*none);
  }
  std::vector<const Point *> misses = familyMisses;
  llvm::stable_sort(misses, [](const Point *a, const Point *b) {
    return a->peak() < b->peak();
  });
  for (const Point *miss : misses) {
    if (starts.size() == 3)
      break;
    if (!llvm::is_contained(starts, miss))
      starts.push_back(miss);
  }
  for (const Point *start : starts) {
    if (!searchBudgetLeft())
      break;
    llvm::Expected<const Point *> end =
        descend(start, best ? best->flops() : UINT64_MAX);
    if (!end)
      return end.takeError();
    if ((*end)->fits)
      if (llvm::Error err = improve(*end))
        return err;
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<BudgetSearchResult>
gmopt::searchBudget(const SavedActivations &analysis,
                    const BudgetSearchOptions &options,
                    BudgetEvaluator evaluate) {
  BudgetSearch search(analysis, options, evaluate);
  if (llvm::Error err = search.runFamily())
    return err;
  if (llvm::Error err = search.runLocalSearch())
    return err;
  return search.takeResult();
}
