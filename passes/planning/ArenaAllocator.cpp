//===- ArenaAllocator.cpp - Offsets for buffers in one arena --------------===//
//
// Best-fit placement keeps the placed buffers in two indexes so that finding
// the buffers a request conflicts with costs O(log n + conflicts): a segment
// tree over (compressed) steps answers "who is live at the request's first
// step" and an ordered map of first steps answers "who starts inside the
// request's range"; the two sets are disjoint and together are exactly the
// conflicts. Its total work is therefore the number of conflicting pairs
// (plus the requests); every placement counts that work, and the allocator
// runs placements only while they fit in its n log n work budget. The lifetime
// sweep keeps free blocks in two ordered sets (by offset, to coalesce; by size,
// for best fit) and the live buffers by offset (to find the neighbours of a
// free block), so each step is O(log n).
//
//===----------------------------------------------------------------------===//

#include "passes/planning/ArenaAllocator.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <random>
#include <set>

using namespace gmopt;

namespace {

constexpr uint32_t kNeverDies = std::numeric_limits<uint32_t>::max();

uint64_t roundUp(uint64_t bytes, uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "invalid arena layout: " + message);
}

/// Intervals of placed requests over compressed steps, answering stabbing
/// queries: every interval that contains a point.
class StabbingTree {
public:
  explicit StabbingTree(size_t numPoints)
      : numPoints(numPoints), lists(4 * std::max<size_t>(numPoints, 1)) {}

  /// Records \p id over the inclusive point range [lo, hi].
  void insert(uint32_t lo, uint32_t hi, uint32_t id) {
    insert(1, 0, numPoints - 1, lo, hi, id);
  }

  /// Calls \p fn on every id whose range contains \p point.
  template <typename Fn> void stab(uint32_t point, Fn fn) const {
    size_t node = 1, lo = 0, hi = numPoints - 1;
    while (true) {
      for (uint32_t id : lists[node])
        fn(id);
      if (lo == hi)
        return;
      size_t mid = (lo + hi) / 2;
      if (point <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
  }

private:
  void insert(size_t node, size_t lo, size_t hi, uint32_t from, uint32_t to,
              uint32_t id) {
    if (to < lo || hi < from)
      return;
    if (from <= lo && hi <= to) {
      lists[node].push_back(id);
      return;
    }
    size_t mid = (lo + hi) / 2;
    insert(2 * node, lo, mid, from, to, id);
    insert(2 * node + 1, mid + 1, hi, from, to, id);
  }

  size_t numPoints;
  std::vector<std::vector<uint32_t>> lists;
};

/// The heap simulation behind greedy by lifetime.
class LifetimeSweep {
public:
  LifetimeSweep(llvm::ArrayRef<ArenaRequest> requests, uint64_t alignment,
                bool reversed)
      : requests(requests), alignment(alignment), reversed(reversed) {
    for (const ArenaRequest &request : requests)
      maxLast = std::max(maxLast, request.last);
  }

  ArenaLayout run(uint64_t capacityHint) {
    ArenaLayout layout;
    layout.offsets.assign(requests.size(), 0);
    std::vector<uint32_t> allocations, releases;
    for (uint32_t id = 0, e = requests.size(); id != e; ++id)
      if (requests[id].size) {
        allocations.push_back(id);
        releases.push_back(id);
      }
    // Within a step, larger and longer-lived buffers choose first.
    llvm::sort(allocations, [&](uint32_t a, uint32_t b) {
      if (first(a) != first(b))
        return first(a) < first(b);
      if (requests[a].size != requests[b].size)
        return requests[a].size > requests[b].size;
      if (last(a) != last(b))
        return last(a) > last(b);
      return a < b;
    });
    llvm::sort(releases, [&](uint32_t a, uint32_t b) {
      return last(a) != last(b) ? last(a) < last(b) : a < b;
    });

    arenaEnd = roundUp(capacityHint, alignment);
    if (arenaEnd)
      addFreeBlock(0, arenaEnd);
    size_t nextRelease = 0;
    for (uint32_t id : allocations) {
      uint32_t now = first(id);
      while (nextRelease != releases.size() &&
             last(releases[nextRelease]) < now)
        release(releases[nextRelease++], layout.offsets);
      layout.offsets[id] = place(id);
    }
    layout.arenaBytes = arenaEnd;
    layout.strategy = reversed ? ArenaStrategy::GreedyByLifetimeReversed
                               : ArenaStrategy::GreedyByLifetime;
    return layout;
  }

private:
  uint32_t first(uint32_t id) const {
    return reversed ? maxLast - requests[id].last : requests[id].first;
  }
  uint32_t last(uint32_t id) const {
    return reversed ? maxLast - requests[id].first : requests[id].last;
  }
  uint64_t sizeOf(uint32_t id) const {
    return roundUp(requests[id].size, alignment);
  }

  void addFreeBlock(uint64_t offset, uint64_t size) {
    freeByOffset[offset] = size;
    freeBySize.insert({size, offset});
  }
  void removeFreeBlock(std::map<uint64_t, uint64_t>::iterator it) {
    freeBySize.erase({it->second, it->first});
    freeByOffset.erase(it);
  }

  /// Returns the storage of \p id to the free list, coalescing.
  void release(uint32_t id, const std::vector<uint64_t> &offsets) {
    uint64_t begin = offsets[id], end = begin + sizeOf(id);
    live.erase(begin);
    auto next = freeByOffset.find(end);
    if (next != freeByOffset.end()) {
      end += next->second;
      removeFreeBlock(next);
    }
    auto after = freeByOffset.lower_bound(begin);
    if (after != freeByOffset.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second == begin) {
        begin = prev->first;
        removeFreeBlock(prev);
      }
    }
    addFreeBlock(begin, end - begin);
  }

  /// The last step of the live buffer that ends at \p offset (the free
  /// block above it starts there); the arena's bottom never dies.
  uint32_t deathBelow(uint64_t offset) const {
    if (offset == 0)
      return kNeverDies;
    auto it = live.lower_bound(offset);
    if (it == live.begin())
      return kNeverDies;
    return last(std::prev(it)->second);
  }
  /// The last step of the live buffer that starts at \p offset; the
  /// arena's top never dies.
  uint32_t deathAbove(uint64_t offset) const {
    if (offset >= arenaEnd)
      return kNeverDies;
    auto it = live.find(offset);
    return it == live.end() ? kNeverDies : last(it->second);
  }

  uint64_t place(uint32_t id) {
    uint64_t size = sizeOf(id);
    uint64_t offset;
    auto fit = freeBySize.lower_bound({size, 0});
    if (fit != freeBySize.end()) {
      auto [blockSize, blockOffset] = *fit;
      removeFreeBlock(freeByOffset.find(blockOffset));
      uint64_t blockEnd = blockOffset + blockSize;
      // Sit next to the neighbour that dies later, so the remaining hole
      // touches the one that dies sooner and grows when it does.
      if (deathAbove(blockEnd) > deathBelow(blockOffset)) {
        offset = blockEnd - size;
        if (offset > blockOffset)
          addFreeBlock(blockOffset, offset - blockOffset);
      } else {
        offset = blockOffset;
        if (blockEnd > offset + size)
          addFreeBlock(offset + size, blockEnd - offset - size);
      }
    } else if (!freeByOffset.empty() &&
               freeByOffset.rbegin()->first + freeByOffset.rbegin()->second ==
                   arenaEnd) {
      // Nothing fits: grow the arena from the free block at its top.
      offset = freeByOffset.rbegin()->first;
      removeFreeBlock(std::prev(freeByOffset.end()));
      arenaEnd = offset + size;
    } else {
      offset = arenaEnd;
      arenaEnd += size;
    }
    live[offset] = id;
    return offset;
  }

  llvm::ArrayRef<ArenaRequest> requests;
  uint64_t alignment;
  bool reversed;
  uint32_t maxLast = 0;
  uint64_t arenaEnd = 0;
  std::map<uint64_t, uint64_t> freeByOffset;
  std::set<std::pair<uint64_t, uint64_t>> freeBySize;
  std::map<uint64_t, uint32_t> live;
};

/// For each non-empty request, the most live (aligned) bytes at any step
/// of its range and the first step (as an index into \p points, the sorted
/// distinct first and last steps) where that maximum occurs. Breadth only
/// changes at those points, so a sparse table over them answers each range
/// maximum in O(1).
std::vector<std::pair<uint64_t, uint32_t>>
widestStepOf(llvm::ArrayRef<ArenaRequest> requests,
             llvm::ArrayRef<uint32_t> points, uint64_t alignment) {
  auto compress = [&](uint32_t step) -> uint32_t {
    return std::lower_bound(points.begin(), points.end(), step) -
           points.begin();
  };
  const size_t numPoints = points.size();
  std::vector<int64_t> delta(numPoints + 1, 0);
  for (const ArenaRequest &r : requests) {
    if (!r.size)
      continue;
    int64_t bytes = roundUp(r.size, alignment);
    delta[compress(r.first)] += bytes;
    delta[compress(r.last) + 1] -= bytes;
  }
  // level 0: (breadth at point, point); higher levels: max over 2^k points.
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> table(1);
  table[0].resize(numPoints);
  int64_t live = 0;
  for (uint32_t p = 0; p != numPoints; ++p) {
    live += delta[p];
    table[0][p] = {uint64_t(live), p};
  }
  auto better = [](const std::pair<uint64_t, uint32_t> &a,
                   const std::pair<uint64_t, uint32_t> &b) {
    if (a.first != b.first)
      return a.first > b.first ? a : b;
    return a.second < b.second ? a : b;
  };
  for (size_t width = 2; width <= numPoints; width *= 2) {
    const auto &prev = table.back();
    std::vector<std::pair<uint64_t, uint32_t>> level(numPoints - width + 1);
    for (size_t p = 0; p + width <= numPoints; ++p)
      level[p] = better(prev[p], prev[p + width / 2]);
    table.push_back(std::move(level));
  }
  std::vector<std::pair<uint64_t, uint32_t>> widest(requests.size(), {0, 0});
  for (size_t id = 0; id != requests.size(); ++id) {
    if (!requests[id].size)
      continue;
    uint32_t lo = compress(requests[id].first);
    uint32_t hi = compress(requests[id].last);
    unsigned level = 0;
    while ((size_t(2) << level) <= size_t(hi - lo + 1))
      ++level;
    widest[id] = better(table[level][lo], table[level][hi + 1 - (1u << level)]);
  }
  return widest;
}

/// Best-fit placement of requests in a given order: each request goes to
/// the smallest gap, among the placed requests it conflicts with, that
/// holds it, else above the highest of them. The conflicts of a request
/// are found in O(log n + conflicts) from a StabbingTree (placed requests
/// live at its first step) and an ordered map of first steps (placed
/// requests starting inside its range); the two sets are disjoint.
class BestFitPlacer {
public:
  BestFitPlacer(llvm::ArrayRef<ArenaRequest> requests, uint64_t alignment)
      : requests(requests), alignment(alignment) {
    for (uint32_t id = 0, e = requests.size(); id != e; ++id) {
      if (!requests[id].size)
        continue;
      nonEmpty.push_back(id);
      points.push_back(requests[id].first);
      points.push_back(requests[id].last);
    }
    llvm::sort(points);
    points.erase(std::unique(points.begin(), points.end()), points.end());
  }

  /// The non-empty requests in the placement order of \p strategy (a
  /// best-fit strategy); ties go to the earlier first step, then index.
  std::vector<uint32_t> orderFor(ArenaStrategy strategy) const {
    assert(strategy != ArenaStrategy::GreedyByLifetime &&
           strategy != ArenaStrategy::GreedyByLifetimeReversed &&
           "not a best-fit placement order");
    std::vector<std::pair<uint64_t, uint32_t>> widest;
    if (strategy == ArenaStrategy::GreedyByBreadth)
      widest = widestStepOf(requests, points, alignment);
    auto key = [&](uint32_t id) -> std::array<uint64_t, 3> {
      const ArenaRequest &r = requests[id];
      uint64_t size = roundUp(r.size, alignment);
      uint64_t duration = uint64_t(r.last) - r.first + 1;
      switch (strategy) {
      case ArenaStrategy::GreedyByArea:
        return {size * duration, size, 0};
      case ArenaStrategy::GreedyByDuration:
        return {duration, size, 0};
      case ArenaStrategy::GreedyByBreadth:
        // Steps by decreasing breadth (earliest first on ties), each
        // step's requests largest first.
        return {widest[id].first, ~uint64_t(widest[id].second), size};
      default:
        return {size, duration, 0};
      }
    };
    std::vector<std::array<uint64_t, 3>> keys(requests.size());
    for (uint32_t id : nonEmpty)
      keys[id] = key(id);
    std::vector<uint32_t> order = nonEmpty;
    llvm::sort(order, [&](uint32_t a, uint32_t b) {
      if (keys[a] != keys[b])
        return keys[a] > keys[b];
      if (requests[a].first != requests[b].first)
        return requests[a].first < requests[b].first;
      return a < b;
    });
    return order;
  }

  /// Places the requests in \p order (every non-empty request once).
  /// Gives up, returning nullopt, as soon as the arena would exceed
  /// \p limit. Adds the work done (one unit per request placed and per
  /// conflict visited) to \p work when given. The first \p prefixLength
  /// requests of \p order keep their offsets in \p prefix (a placement of
  /// an order with the same prefix, which best-fit placement would
  /// reproduce); they are only recorded, at one unit each.
  std::optional<ArenaLayout>
  place(llvm::ArrayRef<uint32_t> order, ArenaStrategy strategy,
        uint64_t limit = std::numeric_limits<uint64_t>::max(),
        uint64_t *work = nullptr, const ArenaLayout *prefix = nullptr,
        size_t prefixLength = 0) const {
    uint64_t units = 0;
    auto account = llvm::make_scope_exit([&] {
      if (work)
        *work += units;
    });
    ArenaLayout layout;
    layout.strategy = strategy;
    layout.offsets.assign(requests.size(), 0);
    if (order.empty())
      return layout;
    StabbingTree liveAt(points.size());
    std::multimap<uint32_t, uint32_t> byFirst;
    std::vector<std::pair<uint64_t, uint64_t>> conflicts;
    assert((prefix || !prefixLength) && prefixLength <= order.size() &&
           "a prefix needs its layout");
    for (size_t position = 0; position != order.size(); ++position) {
      uint32_t id = order[position];
      const ArenaRequest &request = requests[id];
      uint64_t size = roundUp(request.size, alignment);
      uint32_t lo = compress(request.first), hi = compress(request.last);
      if (position < prefixLength) {
        ++units;
        layout.offsets[id] = prefix->offsets[id];
        layout.arenaBytes =
            std::max(layout.arenaBytes, layout.offsets[id] + size);
        liveAt.insert(lo, hi, id);
        byFirst.insert({request.first, id});
        continue;
      }

      conflicts.clear();
      auto addConflict = [&](uint32_t other) {
        conflicts.push_back(
            {layout.offsets[other],
             layout.offsets[other] + roundUp(requests[other].size, alignment)});
      };
      liveAt.stab(lo, addConflict);
      for (auto it = byFirst.upper_bound(request.first),
                end = byFirst.upper_bound(request.last);
           it != end; ++it)
        addConflict(it->second);
      units += 1 + conflicts.size();
      llvm::sort(conflicts);

      uint64_t bestOffset = 0, bestGap = std::numeric_limits<uint64_t>::max();
      bool found = false;
      uint64_t prevEnd = 0;
      for (const auto &[begin, end] : conflicts) {
        if (begin >= prevEnd) {
          uint64_t gap = begin - prevEnd;
          if (gap >= size && gap < bestGap) {
            bestGap = gap;
            bestOffset = prevEnd;
            found = true;
          }
        }
        prevEnd = std::max(prevEnd, end);
      }
      if (!found)
        bestOffset = prevEnd;
      if (bestOffset + size > limit)
        return std::nullopt;
      layout.offsets[id] = bestOffset;
      layout.arenaBytes = std::max(layout.arenaBytes, bestOffset + size);
      liveAt.insert(lo, hi, id);
      byFirst.insert({request.first, id});
    }
    return layout;
  }

  /// Number of non-empty requests.
  size_t getNumNonEmpty() const { return nonEmpty.size(); }

private:
  uint32_t compress(uint32_t step) const {
    return std::lower_bound(points.begin(), points.end(), step) -
           points.begin();
  }

  llvm::ArrayRef<ArenaRequest> requests;
  uint64_t alignment;
  /// Non-empty request ids, in index order.
  std::vector<uint32_t> nonEmpty;
  /// Sorted distinct first and last steps.
  std::vector<uint32_t> points;
};

} // namespace

llvm::StringRef gmopt::arenaStrategyName(ArenaStrategy strategy) {
  switch (strategy) {
  case ArenaStrategy::GreedyBySize:
    return "greedy-by-size";
  case ArenaStrategy::GreedyByArea:
    return "greedy-by-area";
  case ArenaStrategy::GreedyByDuration:
    return "greedy-by-duration";
  case ArenaStrategy::GreedyByBreadth:
    return "greedy-by-breadth";
  case ArenaStrategy::GreedyByLifetime:
    return "greedy-by-lifetime";
  case ArenaStrategy::GreedyByLifetimeReversed:
    return "greedy-by-lifetime-reversed";
  case ArenaStrategy::BestFitSearch:
    return "best-fit-search";
  }
  llvm_unreachable("unknown arena strategy");
}

ArenaLoad gmopt::computeArenaLoad(llvm::ArrayRef<ArenaRequest> requests,
                                  uint64_t alignment) {
  // (step, delta); at equal steps the frees (negative) come first, which is
  // right because a buffer freed "at" step t died after step t - 1.
  std::vector<std::pair<uint64_t, int64_t>> events;
  events.reserve(2 * requests.size());
  for (const ArenaRequest &request : requests) {
    if (!request.size)
      continue;
    int64_t bytes = roundUp(request.size, alignment);
    events.push_back({request.first, bytes});
    events.push_back({uint64_t(request.last) + 1, -bytes});
  }
  llvm::sort(events);
  ArenaLoad load;
  int64_t live = 0;
  for (size_t i = 0; i != events.size();) {
    uint64_t step = events[i].first;
    for (; i != events.size() && events[i].first == step; ++i)
      live += events[i].second;
    if (live > int64_t(load.bytes)) {
      load.bytes = live;
      load.step = step;
    }
  }
  return load;
}

uint64_t gmopt::countConflictingPairs(llvm::ArrayRef<ArenaRequest> requests) {
  std::vector<std::pair<uint32_t, uint32_t>> intervals;
  for (const ArenaRequest &request : requests)
    if (request.size)
      intervals.push_back({request.first, request.last});
  llvm::sort(intervals);
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>>
      liveEnds;
  uint64_t pairs = 0;
  for (const auto &[first, last] : intervals) {
    while (!liveEnds.empty() && liveEnds.top() < first)
      liveEnds.pop();
    pairs += liveEnds.size();
    liveEnds.push(last);
  }
  return pairs;
}

uint64_t gmopt::bestFitWorkBudget(uint64_t numRequests, uint64_t floor,
                                  uint64_t perNLogN) {
  uint64_t log2n = numRequests > 1 ? llvm::Log2_64_Ceil(numRequests) : 1;
  uint64_t scaled = llvm::SaturatingMultiply(
      llvm::SaturatingMultiply(perNLogN, log2n), numRequests);
  return llvm::SaturatingAdd(scaled, floor);
}

std::optional<ArenaLayout>
gmopt::layoutGreedyBySize(llvm::ArrayRef<ArenaRequest> requests,
                          uint64_t alignment, uint64_t maxOverlapPairs,
                          ArenaStrategy order) {
  if (maxOverlapPairs && countConflictingPairs(requests) > maxOverlapPairs)
    return std::nullopt;
  BestFitPlacer placer(requests, alignment);
  return placer.place(placer.orderFor(order), order);
}

ArenaLayout gmopt::layoutGreedyByLifetime(llvm::ArrayRef<ArenaRequest> requests,
                                          uint64_t alignment,
                                          uint64_t capacityHint,
                                          bool reversed) {
  return LifetimeSweep(requests, alignment, reversed).run(capacityHint);
}

llvm::Error gmopt::validateArenaLayout(llvm::ArrayRef<ArenaRequest> requests,
                                       const ArenaLayout &layout,
                                       uint64_t alignment) {
  if (layout.offsets.size() != requests.size())
    return fail(llvm::formatv("{0} offsets for {1} requests",
                              layout.offsets.size(), requests.size()));
  if (layout.arenaBytes % alignment)
    return fail("the arena size is not a multiple of the alignment");
  std::vector<uint32_t> order;
  for (uint32_t id = 0, e = requests.size(); id != e; ++id) {
    const ArenaRequest &request = requests[id];
    if (request.first > request.last)
      return fail(llvm::formatv("request {0} has an empty live range", id));
    if (!request.size)
      continue;
    if (layout.offsets[id] % alignment)
      return fail(llvm::formatv("request {0} is not aligned", id));
    if (layout.offsets[id] + roundUp(request.size, alignment) >
        layout.arenaBytes)
      return fail(llvm::formatv("request {0} ends past the arena", id));
    order.push_back(id);
  }
  llvm::sort(order, [&](uint32_t a, uint32_t b) {
    return requests[a].first < requests[b].first;
  });
  // Sweep in time; `active` holds the live buffers by offset, which must be
  // pairwise disjoint in address.
  std::multimap<uint32_t, uint32_t> byLast;
  std::map<uint64_t, uint32_t> active;
  for (uint32_t id : order) {
    uint32_t now = requests[id].first;
    while (!byLast.empty() && byLast.begin()->first < now) {
      active.erase(layout.offsets[byLast.begin()->second]);
      byLast.erase(byLast.begin());
    }
    uint64_t begin = layout.offsets[id];
    uint64_t end = begin + roundUp(requests[id].size, alignment);
    auto conflict = [&](uint32_t other) {
      return fail(llvm::formatv(
          "requests {0} and {1} overlap in both address and live range", id,
          other));
    };
    auto next = active.lower_bound(begin);
    if (next != active.end() && next->first < end)
      return conflict(next->second);
    if (next != active.begin()) {
      auto prev = std::prev(next);
      if (prev->first + roundUp(requests[prev->second].size, alignment) > begin)
        return conflict(prev->second);
    }
    active[begin] = id;
    byLast.insert({requests[id].last, id});
  }
  return llvm::Error::success();
}

ArenaAllocator::ArenaAllocator() : ArenaAllocator(Options()) {}

ArenaAllocator::ArenaAllocator(Options options) : options(options) {
  assert(options.alignment > 0 && "alignment must be positive");
}

ArenaLayout
ArenaAllocator::allocate(llvm::ArrayRef<ArenaRequest> requests) const {
  const uint64_t alignment = options.alignment;
  const uint64_t load = computeArenaLoad(requests, alignment).bytes;
  std::optional<ArenaLayout> best;
  llvm::SmallVector<ArenaAttempt, 4> attempts;
  auto consider = [&](ArenaLayout layout) {
    if (!best || layout.arenaBytes < best->arenaBytes)
      best = std::move(layout);
  };
  // Nothing beats LOAD: once a layout reaches it, later strategies are
  // skipped.
  auto atBound = [&] { return best && best->arenaBytes <= load; };

  if (options.greedyByLifetime) {
    for (bool reversed : {false, true}) {
      if (atBound())
        break;
      std::optional<ArenaLayout> sweepBest;
      for (uint64_t hint : {load, uint64_t(0)}) {
        ArenaLayout layout =
            layoutGreedyByLifetime(requests, alignment, hint, reversed);
        if (!sweepBest || layout.arenaBytes < sweepBest->arenaBytes)
          sweepBest = std::move(layout);
      }
      attempts.push_back({sweepBest->strategy, sweepBest->arenaBytes});
      consider(std::move(*sweepBest));
    }
  }

  if (options.greedyBySize && !atBound()) {
    BestFitPlacer placer(requests, alignment);
    const uint64_t numRequests = placer.getNumNonEmpty();
    const uint64_t budget = bestFitWorkBudget(
        numRequests, options.bestFitWorkFloor, options.bestFitWork);
    // What one placement costs at most; the pairs are counted in
    // O(n log n), before any placement is paid for.
    const uint64_t placementCost =
        numRequests + countConflictingPairs(requests);
    uint64_t spent = 0;
    auto affordable = [&] { return spent + placementCost <= budget; };
    std::vector<uint32_t> bestOrder;
    std::vector<uint64_t> bestOrderOffsets;
    uint64_t bestOrderBytes = std::numeric_limits<uint64_t>::max();
    for (ArenaStrategy strategy :
         {ArenaStrategy::GreedyBySize, ArenaStrategy::GreedyByBreadth,
          ArenaStrategy::GreedyByArea, ArenaStrategy::GreedyByDuration}) {
      if (atBound())
        break;
      if (!affordable()) {
        attempts.push_back({strategy, std::nullopt});
        continue;
      }
      std::vector<uint32_t> order = placer.orderFor(strategy);
      std::optional<ArenaLayout> bestFit = placer.place(
          order, strategy, std::numeric_limits<uint64_t>::max(), &spent);
      attempts.push_back({strategy, bestFit->arenaBytes});
      if (bestFit->arenaBytes < bestOrderBytes) {
        bestOrderBytes = bestFit->arenaBytes;
        bestOrder = std::move(order);
        bestOrderOffsets = bestFit->offsets;
      }
      consider(std::move(*bestFit));
    }

    // Local search: swap nearby requests in the best best-fit order and
    // keep every order that does no worse, until the layout reaches LOAD,
    // the rounds run out, or a whole round no longer fits in the work
    // budget. A round that exceeds the current size stops there and pays
    // only for what it placed. Deterministic (fixed seed).
    if (!atBound() && bestOrder.size() > 1 && options.searchRounds &&
        affordable()) {
      std::mt19937 random(0x9e3779b9u);
      std::optional<ArenaLayout> searched;
      std::vector<uint32_t> current = bestOrder;
      ArenaLayout currentLayout;
      currentLayout.offsets = std::move(bestOrderOffsets);
      uint64_t currentBytes = bestOrderBytes;
      const size_t span = std::min<size_t>(8, current.size() - 1);
      for (uint64_t round = 0;
           round != options.searchRounds && currentBytes > load && affordable();
           ++round) {
        std::vector<uint32_t> candidate = current;
        unsigned swaps = 1 + random() % 3;
        size_t unchanged = candidate.size();
        for (unsigned k = 0; k != swaps; ++k) {
          size_t i = random() % candidate.size();
          size_t j = (i + 1 + random() % span) % candidate.size();
          std::swap(candidate[i], candidate[j]);
          unchanged = std::min({unchanged, i, j});
        }
        // Best-fit placement of the unchanged prefix is the current one.
        auto layout =
            placer.place(candidate, ArenaStrategy::BestFitSearch, currentBytes,
                         &spent, &currentLayout, unchanged);
        if (!layout)
          continue;
        current = std::move(candidate);
        currentLayout.offsets = layout->offsets;
        if (!searched || layout->arenaBytes < currentBytes) {
          currentBytes = layout->arenaBytes;
          searched = std::move(*layout);
        }
      }
      attempts.push_back({ArenaStrategy::BestFitSearch,
                          searched
                              ? std::optional<uint64_t>(searched->arenaBytes)
                              : std::nullopt});
      if (searched)
        consider(std::move(*searched));
    }
  }

  if (!best) {
    // No strategy: every buffer its own slice.
    ArenaLayout stacked;
    stacked.offsets.assign(requests.size(), 0);
    for (size_t id = 0; id != requests.size(); ++id) {
      if (!requests[id].size)
        continue;
      stacked.offsets[id] = stacked.arenaBytes;
      stacked.arenaBytes += roundUp(requests[id].size, alignment);
    }
    best = std::move(stacked);
  }
  best->attempts = std::move(attempts);
  return std::move(*best);
}
