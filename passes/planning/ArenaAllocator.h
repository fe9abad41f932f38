//===- ArenaAllocator.h - Offsets for buffers in one arena ------*- C++ -*-===//
//
// The offset-assignment half of buffer planning, as a library over abstract
// requests {size, first step, last step} that knows nothing of graphs. Two
// families of algorithms lay the requests out and the smallest layout wins:
//  - greedy by lifetime: a heap simulation that sweeps time, allocating at
//    definition from a best-fit free list and freeing after the last use
//    (after XLA's heap simulator), run forward and backward in time, with
//    and without the live-byte bound as a capacity hint;
//  - greedy by size with best fit: requests placed one by one, each at the
//    smallest gap among the placed requests it is live with (after TFLite's
//    greedy-by-size planner), in four orders (size, breadth, area,
//    duration), then a deterministic local search over the best order.
// The live-byte maximum (LOAD) is a lower bound for every layout, so the
// allocator stops as soon as a layout reaches it. Best-fit placement costs
// one unit per request plus one per conflicting pair, and conflicting pairs
// grow quadratically with the depth of a training graph (saved activations
// live across the whole step), so the best-fit family shares one work
// budget that grows as n log n; the lifetime sweeps are O(n log n) and
// always run. A validator proves a layout has no two buffers that overlap
// in both time and address.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_ARENAALLOCATOR_H
#define GMOPT_PASSES_PLANNING_ARENAALLOCATOR_H

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// One buffer to place: \p size bytes, live over the inclusive step range
/// [first, last]. Two requests conflict when their ranges share a step.
struct ArenaRequest {
  /// Bytes (rounded up to the alignment when placed).
  uint64_t size = 0;
  /// First step the buffer is live (its definition).
  uint32_t first = 0;
  /// Last step the buffer is live (its last use); first <= last.
  uint32_t last = 0;
};

/// The offset-assignment algorithms.
enum class ArenaStrategy : uint8_t {
  /// Largest request first, each at the smallest gap that fits among the
  /// placed requests it conflicts with, else above the highest of them.
  GreedyBySize,
  /// The same best-fit placement, largest size x live range first.
  GreedyByArea,
  /// The same best-fit placement, longest live range first.
  GreedyByDuration,
  /// The same best-fit placement, serving steps by decreasing live bytes
  /// and each step's requests largest first (TFLite's greedy by breadth).
  GreedyByBreadth,
  /// A forward time sweep: at each step free what died, then allocate what
  /// is defined from a best-fit free list (or at the top of the arena).
  GreedyByLifetime,
  /// The same sweep run backward in time (last use first).
  GreedyByLifetimeReversed,
  /// Best-fit placement in orders found by a local search (swapping
  /// nearby requests) that starts from the best greedy order.
  BestFitSearch,
};

/// `greedy-by-size`, `greedy-by-area`, `greedy-by-duration`,
/// `greedy-by-breadth`, `greedy-by-lifetime`, `greedy-by-lifetime-reversed`,
/// `best-fit-search`.
llvm::StringRef arenaStrategyName(ArenaStrategy strategy);

/// The size one strategy reached (for statistics and tests).
struct ArenaAttempt {
  /// The strategy tried.
  ArenaStrategy strategy;
  /// Its arena size, or nullopt when it was skipped (its placement did not
  /// fit in what was left of the work budget, see
  /// ArenaAllocator::Options::bestFitWork) or, for the search, found
  /// nothing better.
  std::optional<uint64_t> arenaBytes;
};

/// Offsets for every request and the arena they fit in.
struct ArenaLayout {
  /// Offset of request i (a multiple of the alignment; 0 for empty ones).
  std::vector<uint64_t> offsets;
  /// Bytes of the arena (a multiple of the alignment).
  uint64_t arenaBytes = 0;
  /// The strategy that produced this layout.
  ArenaStrategy strategy = ArenaStrategy::GreedyByLifetime;
  /// Every strategy ArenaAllocator::allocate tried, in order.
  llvm::SmallVector<ArenaAttempt, 4> attempts;
};

/// The live-byte maximum of a set of requests: a lower bound on any arena.
struct ArenaLoad {
  /// Maximum over steps of the aligned bytes live at that step.
  uint64_t bytes = 0;
  /// The first step where the maximum occurs.
  uint32_t step = 0;
};

/// Computes LOAD with every size rounded up to \p alignment. O(n log n).
ArenaLoad computeArenaLoad(llvm::ArrayRef<ArenaRequest> requests,
                           uint64_t alignment = kBufferAlignment);

/// Number of unordered pairs of non-empty requests that conflict in time:
/// the work one best-fit placement does. O(n log n).
uint64_t countConflictingPairs(llvm::ArrayRef<ArenaRequest> requests);

/// The work budget of best-fit placement for \p numRequests non-empty
/// requests: \p floor + \p perNLogN * n * ceil(log2 n) units, a unit being
/// one request placed or one conflicting pair visited (saturating).
uint64_t bestFitWorkBudget(uint64_t numRequests, uint64_t floor,
                           uint64_t perNLogN);

/// Best-fit placement in the order \p order (GreedyBySize, GreedyByArea or
/// GreedyByDuration). Visits every conflicting pair once, so it costs
/// O(n log n + pairs log n); returns nullopt without doing that work when
/// countConflictingPairs exceeds \p maxOverlapPairs (0: no limit).
std::optional<ArenaLayout>
layoutGreedyBySize(llvm::ArrayRef<ArenaRequest> requests, uint64_t alignment,
                   uint64_t maxOverlapPairs,
                   ArenaStrategy order = ArenaStrategy::GreedyBySize);

/// Greedy by lifetime (a best-fit heap simulation), O(n log n). When
/// \p capacityHint is nonzero the arena starts as one free block of that
/// many bytes; a block is then filled from the end whose neighbour dies
/// later, so the hole left behind joins the neighbour that dies sooner
/// (with the LOAD as hint this lays a chain out in exactly LOAD bytes).
/// Requests that do not fit grow the arena. \p reversed sweeps from the
/// last step to the first.
ArenaLayout layoutGreedyByLifetime(llvm::ArrayRef<ArenaRequest> requests,
                                   uint64_t alignment, uint64_t capacityHint,
                                   bool reversed);

/// Checks \p layout against \p requests: one offset per request, offsets
/// aligned, every buffer inside the arena, and no two conflicting requests
/// overlapping in address. Returns the first violation. O(n log n).
llvm::Error validateArenaLayout(llvm::ArrayRef<ArenaRequest> requests,
                                const ArenaLayout &layout,
                                uint64_t alignment = kBufferAlignment);

/// Runs the enabled strategies and keeps the smallest layout.
class ArenaAllocator {
public:
  /// Which strategies run, and their limits.
  struct Options {
    /// Alignment of every offset and of the arena size.
    uint64_t alignment = kBufferAlignment;
    /// Try best-fit placement by size, by area and by duration.
    bool greedyBySize = true;
    /// Try greedy by lifetime (forward and reversed, each with and without
    /// the LOAD as capacity hint).
    bool greedyByLifetime = true;
    /// Work budget of best-fit placement, the four orders and the local
    /// search together: bestFitWorkFloor + bestFitWork * n * ceil(log2 n)
    /// units for n non-empty requests (see bestFitWorkBudget). A unit is
    /// one request placed or one conflicting pair visited; a placement
    /// costs at most n + countConflictingPairs units. An order whose
    /// placement does not fit in what is left is skipped, and the search
    /// stops when a whole round no longer fits. The floor lets small graphs
    /// search for thousands of rounds; the n log n term keeps the
    /// allocator's total work O(n log n) on large ones, where the pairs
    /// (quadratic in the depth of a training graph) soon exceed it and
    /// only the lifetime sweeps run. 0 and 0: no best-fit placement.
    /// The defaults: the floor is what the searches of the testdata graphs
    /// need to reach LOAD (2^21 is not enough for gpt_tiny); the factor 2
    /// keeps the budget near the floor up to ~10k requests, so that a best-fit
    /// placement is paid for only while it costs about the floor (~0.3 s of
    /// the 1 s a 10k-node compile may take).
    uint64_t bestFitWork = 2;
    /// The constant part of the best-fit work budget (see bestFitWork).
    uint64_t bestFitWorkFloor = uint64_t(1) << 22;
    /// Most rounds of the best-fit local search run when no greedy layout
    /// reaches LOAD; each round is one best-fit placement, paid from the
    /// work budget (see bestFitWork).
    uint64_t searchRounds = 2000;
  };

  /// An allocator with default options.
  ArenaAllocator();
  /// An allocator with \p options.
  explicit ArenaAllocator(Options options);

  /// Lays out \p requests and returns the smallest layout: first the
  /// lifetime sweeps (forward, then reversed), then the best-fit orders
  /// (size, breadth, area, duration), then the best-fit local search; the
  /// earlier strategy wins ties, and once a layout reaches LOAD the rest
  /// are skipped (nothing can beat it). `attempts` lists every strategy
  /// tried, in order. With no strategy enabled, requests are stacked
  /// without reuse.
  ArenaLayout allocate(llvm::ArrayRef<ArenaRequest> requests) const;

  /// The options in use.
  const Options &getOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_ARENAALLOCATOR_H
