//===- RecomputeBudget.cpp - Budget mode's search for a plan --------------===//
//
// The strategy family and the local search of budget mode (see
// RecomputeBudget.h): which candidates to plan, in what order, and which
// of the planned ones to return. Planning itself is the evaluator's.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/RecomputeBudget.h"
#include "passes/DebugOutput.h"
#include "passes/recompute/SavedActivations.h"

#include "ir/Module.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
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
  /// The recompute cost the search minimises (FLOP-equivalents).
  uint64_t flops() const { return plan.recomputeCost; }
  uint64_t peak() const { return evaluation.peak; }
};

/// One move from a point, with what the estimate expects of it.
struct Move {
  const Value *value = nullptr;
  /// Bytes the move is expected to take off (descent) or add to (keep) the
  /// peak.
  uint64_t peakBytes = 0;
  /// Recompute cost (FLOP-equivalents) of the value's region from what the
  /// point keeps: what dropping it adds, or keeping it saves.
  uint64_t flops = 0;
  uint64_t bytes = 0;
  uint64_t key = 0;
};

/// Moves whose pairs a stuck descent step tries.
constexpr size_t kPairMoves = 6;

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

  /// \p from with \p value dropped (\p drop) or kept beyond the strategy.
  Candidate moved(const Candidate &from, const Value *value, bool drop) const;
  Candidate withDrop(const Candidate &from, const Value *value) const {
    return moved(from, value, /*drop=*/true);
  }
  Candidate withKeep(const Candidate &from, const Value *value) const {
    return moved(from, value, /*drop=*/false);
  }
  std::vector<Move> dropMoves(const Point &point) const;
  std::vector<Move> keepMoves(const Point &point) const;
  /// The move that drops or keeps \p value from \p point (whose kept set
  /// is \p kept), or nothing when its region cannot be computed.
  std::optional<Move> makeMove(const Point &point, const Value *value,
                               const llvm::DenseSet<const Value *> &kept) const;

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
  /// What is being planned, for the debug trace.
  const char *stage = "family";
  uint32_t familyEvaluations = 0, searchEvaluations = 0;
};

llvm::Expected<const Point *> BudgetSearch::visit(const Candidate &candidate) {
  std::vector<uint64_t> key = {uint64_t(candidate.mode), candidate.fullPrefix,
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
  // The family plans exactly, as the pipeline will. The local search
  // plans quickly (an upper bound, so a plan that fits does), and on small
  // graphs again exactly where the quick peak misses but the schedule's
  // LOAD fits.
  llvm::Expected<BudgetEvaluation> evaluation =
      evaluate(plan, options.limit, !inSearch);
  if (evaluation && options.exactWhereLoadFits && !evaluation->exact &&
      evaluation->peak > options.limit &&
      evaluation->lowerBound <= options.limit)
    evaluation = evaluate(plan, options.limit, /*exact=*/true);
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
  GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] budget " << stage << ": "
                     << point.plan.dropped << " dropped, flops "
                     << point.flops() << ", peak " << point.peak()
                     << (point.fits ? " (fits)" : "") << "\n");
  byPlan[key] = &point;
  return &point;
}

Candidate BudgetSearch::moved(const Candidate &from, const Value *value,
                              bool drop) const {
  Candidate to = from;
  std::vector<const Value *> &into = drop ? to.adjust.drop : to.adjust.keep;
  llvm::erase(drop ? to.adjust.keep : to.adjust.drop, value);
  auto less = [&](const Value *a, const Value *b) {
    return valueKey(a) < valueKey(b);
  };
  auto it = std::lower_bound(into.begin(), into.end(), value, less);
  if (it == into.end() || *it != value)
    into.insert(it, value);
  return to;
}

std::optional<Move>
BudgetSearch::makeMove(const Point &point, const Value *value,
                       const llvm::DenseSet<const Value *> &kept) const {
  llvm::Expected<RecomputeRegion> region = analysis.computeRegion(value, kept);
  if (!region) {
    llvm::consumeError(region.takeError());
    return std::nullopt;
  }
  Move move;
  move.value = value;
  move.bytes = analysis.getBytes(value);
  move.flops = region->cost;
  move.key = valueKey(value);
  const SavedActivation *saved = analysis.lookupSaved(value);
  if (saved &&
      point.evaluation.spansPeak.size() == analysis.getSaved().size() &&
      point.evaluation.spansPeak[saved - analysis.getSaved().data()])
    move.peakBytes = move.bytes;
  return move;
}

std::vector<Move> BudgetSearch::dropMoves(const Point &point) const {
  llvm::DenseSet<const Value *> kept(point.plan.kept.begin(),
                                     point.plan.kept.end());
  std::vector<Move> moves;
  for (const Value *value : point.plan.kept) {
    uint32_t producer = *analysis.getForwardPosition(value->getDefiningNode());
    if (!analysis.isRecomputable(producer))
      continue;
    if (std::optional<Move> move = makeMove(point, value, kept))
      moves.push_back(*move);
  }
  // Values held at the peak first, most bytes per FLOP; then the others by
  // bytes per FLOP (the peak may sit elsewhere once they are gone).
  llvm::sort(moves, [](const Move &a, const Move &b) {
    if ((a.peakBytes > 0) != (b.peakBytes > 0))
      return a.peakBytes > 0;
    long double ra =
        (long double)std::max(a.peakBytes, a.bytes) / (a.flops + 1);
    long double rb =
        (long double)std::max(b.peakBytes, b.bytes) / (b.flops + 1);
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
    for (const Value *value : group.provides)
      if (std::optional<Move> move = makeMove(point, value, kept))
        moves.push_back(*move);
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

/// Progress of \p to over \p from towards the limit: the planned peak's
/// fall; where the peak does not move (two equal peaks), the fall of the
/// live bytes above the limit, ranked below any fall of the peak.
struct Progress {
  bool lowersPeak = false;
  uint64_t amount = 0;
  long double ratio = 0;

  Progress(const Point &from, const Point &to) {
    uint64_t added = to.flops() > from.flops() ? to.flops() - from.flops() : 0;
    lowersPeak = to.peak() < from.peak();
    amount = lowersPeak ? from.peak() - to.peak()
             : to.evaluation.excess < from.evaluation.excess
                 ? from.evaluation.excess - to.evaluation.excess
                 : 0;
    ratio = (long double)amount / (added + 1);
  }
  bool operator>(const Progress &other) const {
    if (lowersPeak != other.lowersPeak)
      return lowersPeak;
    return ratio > other.ratio;
  }
};

llvm::Expected<const Point *> BudgetSearch::descend(const Point *start,
                                                    uint64_t flopsBound) {
  const Point *current = start;
  while (!current->fits && current->flops() < flopsBound) {
    std::vector<Move> moves = dropMoves(*current);
    if (moves.empty())
      break;
    // How many of the ranked moves the estimate needs to close the gap.
    // On a large graph far from the limit (many values per gap) the step
    // drops a batch - the prefix expected to close the gap, or half of
    // it - so that the evaluations grow with the gaps halved, not with
    // the values dropped; near it, and on small graphs, single values.
    const uint64_t gap = current->peak() - options.limit;
    size_t need = 0;
    uint64_t expected = 0;
    while (need != moves.size() && expected < gap)
      expected += moves[need++].peakBytes;
    std::vector<Candidate> tries;
    auto batch = [&](size_t count) {
      Candidate candidate = current->candidate;
      for (size_t i = 0; i != count; ++i)
        candidate = withDrop(candidate, moves[i].value);
      return candidate;
    };
    const bool batches = moves.size() > 2 * size_t(options.width) &&
                         need >= 4 && expected >= gap;
    if (batches) {
      stage = "descent batch";
      tries.push_back(batch(need));
      tries.push_back(batch((need + 1) / 2));
    } else {
      stage = "descent";
      for (size_t i = 0; i != std::min<size_t>(moves.size(), options.width);
           ++i)
        tries.push_back(withDrop(current->candidate, moves[i].value));
      // On small graphs (every move planned) also pairs of the first few:
      // two values may free what neither frees alone.
      if (moves.size() <= options.width)
        for (size_t i = 0; i != std::min(moves.size(), kPairMoves); ++i)
          for (size_t j = i + 1; j != std::min(moves.size(), kPairMoves); ++j)
            tries.push_back(withDrop(
                withDrop(current->candidate, moves[i].value), moves[j].value));
    }
    const Point *chosen = nullptr, *fitting = nullptr;
    std::optional<Progress> chosenProgress;
    // Takes \p point when it makes more progress than the chosen one.
    auto consider = [&](const Point &point) {
      Progress progress(*current, point);
      if (progress.amount && (!chosen || progress > *chosenProgress)) {
        chosen = &point;
        chosenProgress = progress;
      }
    };
    for (const Candidate &candidate : tries) {
      llvm::Expected<const Point *> next = visit(candidate);
      if (!next)
        return next.takeError();
      if (!*next)
        break;
      const Point &point = **next;
      // In batches, the cheapest plan that fits ends the descent.
      if (batches && point.fits &&
          (!fitting || point.flops() < fitting->flops()))
        fitting = &point;
      consider(point);
    }
    if (fitting)
      chosen = fitting;
    if (!chosen && batches) {
      // The batch went astray (the peak moved): single values this step.
      stage = "descent";
      for (size_t i = 0; i != std::min<size_t>(moves.size(), options.width);
           ++i) {
        llvm::Expected<const Point *> next =
            visit(withDrop(current->candidate, moves[i].value));
        if (!next)
          return next.takeError();
        if (!*next)
          break;
        consider(**next);
      }
    }
    if (!chosen) {
      // Stuck: no single value lowers the peak or the bytes above the
      // limit (each one's clone or its sources' longer lives take back
      // what it frees). Pairs of the first few moves, once per step.
      stage = "descent pair";
      const size_t few = std::min<size_t>(moves.size(), kPairMoves);
      for (size_t i = 0; i != few && searchBudgetLeft(); ++i)
        for (size_t j = i + 1; j != few; ++j) {
          llvm::Expected<const Point *> next = visit(withDrop(
              withDrop(current->candidate, moves[i].value), moves[j].value));
          if (!next)
            return next.takeError();
          if (!*next)
            break;
          consider(**next);
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
    if (moves.empty())
      break;
    // The moves the estimate expects to fit, together (a plan that
    // overshot the limit keeps several values again at once), then the
    // single moves.
    std::vector<Candidate> tries;
    size_t firstSingle = 0;
    {
      const uint64_t room = options.limit - current->peak();
      Candidate together = current->candidate;
      size_t count = 0;
      uint64_t rise = 0;
      for (const Move &move : moves)
        if (rise + move.peakBytes <= room) {
          rise += move.peakBytes;
          together = withKeep(together, move.value);
          ++count;
        }
      if (count >= 2)
        tries.push_back(std::move(together));
      firstSingle = tries.size();
    }
    for (size_t i = 0; i != std::min<size_t>(moves.size(), options.width); ++i)
      tries.push_back(withKeep(current->candidate, moves[i].value));
    stage = "keep";
    const Point *better = nullptr;
    std::vector<const Point *> misses;
    for (size_t i = 0; i != tries.size(); ++i) {
      llvm::Expected<const Point *> next = visit(tries[i]);
      if (!next)
        return next.takeError();
      if (!*next)
        break;
      const Point *point = *next;
      if (point->flops() >= current->flops())
        continue;
      // The first move that fits and saves FLOPs is taken (the moves come
      // most FLOPs saved first), and the moves are ranked again from it.
      if (point->fits) {
        better = point;
        break;
      }
      if (i >= firstSingle) {
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
      llvm::Expected<const Point *> point = visitPlan(std::move(part), closest);
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
  // Descents first (batches make them cheap on large graphs): from no
  // recompute, then from the family's misses nearest the limit, each
  // bounded by the cheapest plan that fits so far.
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
  std::vector<const Point *> ends;
  for (const Point *start : starts) {
    if (!searchBudgetLeft())
      break;
    llvm::Expected<const Point *> end =
        descend(start, best ? best->flops() : UINT64_MAX);
    if (!end)
      return end.takeError();
    if ((*end)->fits)
      ends.push_back(*end);
  }
  // Then improvement: of the cheapest plan that fits, then of the other
  // plans that fit while evaluations remain.
  std::vector<const Point *> fitting;
  if (best)
    fitting.push_back(best);
  if (familyBest && !llvm::is_contained(fitting, familyBest))
    fitting.push_back(familyBest);
  for (const Point *end : ends)
    if (!llvm::is_contained(fitting, end))
      fitting.push_back(end);
  for (const Point *point : fitting) {
    if (!searchBudgetLeft())
      break;
    if (llvm::Error err = improve(point))
      return err;
  }
  // Last, from below: every saved activation dropped that can be (the
  // lowest peaks keep few values), improved by keeping values again or,
  // if even that misses, descending from it.
  if (searchBudgetLeft()) {
    Candidate all;
    for (const SavedActivation &activation : analysis.getSaved())
      if (analysis.isRecomputable(activation.producer))
        all = withDrop(all, activation.value);
    stage = "all dropped";
    llvm::Expected<const Point *> point = visit(all);
    if (!point)
      return point.takeError();
    if (*point && (*point)->fits) {
      if (llvm::Error err = improve(*point))
        return err;
    } else if (*point) {
      llvm::Expected<const Point *> end =
          descend(*point, best ? best->flops() : UINT64_MAX);
      if (!end)
        return end.takeError();
      if ((*end)->fits)
        if (llvm::Error err = improve(*end))
          return err;
    }
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
