//===- Memory.h - Memory categories, counting allocator ---------*- C++ -*-===//
//
// How gmopt backends measure memory. Each byte a backend allocates is
// reported to a MemoryCounter under one of the six MemoryCategory values of
// ir/Plan.h (parameters, gradients, optimizer state, activations,
// temporaries, workspace); the counter tracks the live bytes of each
// category, the high-water mark of their total and the split by category at
// the moment that mark was reached. Counting is separate from allocating:
// the plan interpreter counts device memory it gets from a Device, and
// CountingAllocator is counted host memory (CPU kernel scratch). A MemoryReport
// is a snapshot of those figures, printable as a table and as JSON. The host
// arena of offloaded tensors (ir/MemorySpaces.h) is counted by a counter of
// its own and reported beside the device figures, never in them: the peak
// is the device's, as a GPU would see it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_MEMORY_H
#define GMOPT_BACKEND_MEMORY_H

#include "ir/Plan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <cstdint>
#include <optional>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

// MemoryCategory, kNumMemoryCategories, CategoryBytes, memoryCategoryName
// and parseMemoryCategory are the IR's (ir/Plan.h): passes plan in the same
// vocabulary backends measure in.

/// Every category, in report order.
constexpr std::array<MemoryCategory, kNumMemoryCategories>
    kAllMemoryCategories = {
        MemoryCategory::Parameters,     MemoryCategory::Gradients,
        MemoryCategory::OptimizerState, MemoryCategory::Activations,
        MemoryCategory::Temporaries,    MemoryCategory::Workspace};

/// A snapshot of a CountingAllocator's figures.
struct MemoryReport {
  /// High-water mark of the total live bytes.
  uint64_t peakBytes = 0;
  /// Live bytes of each category at the moment the peak was reached.
  CategoryBytes peakByCategory{};
  /// Live bytes now.
  uint64_t currentBytes = 0;
  /// Live bytes of each category now.
  CategoryBytes currentByCategory{};
  /// High-water mark of host-arena bytes (offloaded tensors), counted apart
  /// from peakBytes.
  uint64_t hostPeakBytes = 0;
  /// Live host-arena bytes of each category at the host high-water mark
  /// (a slice counts as its value's category while the value is live, as
  /// Temporaries otherwise).
  CategoryBytes hostPeakByCategory{};
  /// Live host-arena bytes now.
  uint64_t hostCurrentBytes = 0;

  /// Live bytes of \p category at the peak.
  uint64_t atPeak(MemoryCategory category) const {
    return peakByCategory[static_cast<unsigned>(category)];
  }
  /// Live bytes of \p category now.
  uint64_t current(MemoryCategory category) const {
    return currentByCategory[static_cast<unsigned>(category)];
  }

  /// Prints a table: one row per category with its bytes at the peak and
  /// now, then the totals, then (when host memory was used) the host
  /// arena's row.
  void print(llvm::raw_ostream &os) const;
  /// The JSON form: {"peak_bytes": N, "by_category": {"parameters": N, ...},
  /// "current_bytes": N, "host_peak_bytes": N, "host_by_category": {...},
  /// "host_current_bytes": N}. by_category is the split at the peak.
  llvm::json::Object toJSON() const;
};

/// Counts live bytes by category and keeps the high-water mark of their
/// total, with the split by category at the moment that mark was reached.
/// It owns no memory: whoever allocates (a backend's device, a kernel's host
/// scratch) reports each block's bytes here, so every backend measures in
/// the same way whatever its memory is. Not thread-safe.
class MemoryCounter {
public:
  /// Counts \p bytes (already rounded to kBufferAlignment) under
  /// \p category.
  void add(uint64_t bytes, MemoryCategory category);
  /// Stops counting \p bytes of \p category; they must have been added.
  void remove(uint64_t bytes, MemoryCategory category);
  /// Moves \p bytes of live memory from \p from to \p to without changing
  /// the total: a planned arena is counted under Temporaries while a slice
  /// is unoccupied and under its value's category while it is live. At an
  /// unchanged total the peak split is refreshed when it is the peak.
  void transfer(MemoryCategory from, MemoryCategory to, uint64_t bytes);
  /// Restarts the high-water mark from the current figures.
  void resetPeak();

  /// Live bytes of \p category.
  uint64_t getCurrentBytes(MemoryCategory category) const {
    return current[static_cast<unsigned>(category)];
  }
  /// Live bytes of all categories.
  uint64_t getCurrentBytes() const { return currentTotal; }
  /// High-water mark of the total since construction or resetPeak().
  uint64_t getPeakBytes() const { return peakTotal; }
  /// Per-category split at the moment of the high-water mark.
  const CategoryBytes &getPeakByCategory() const { return peakSplit; }
  /// A snapshot of the figures.
  MemoryReport getReport() const;
  /// getReport() with \p host's figures as the host-memory ones.
  MemoryReport getReport(const MemoryCounter &host) const;

private:
  CategoryBytes current{};
  uint64_t currentTotal = 0;
  uint64_t peakTotal = 0;
  CategoryBytes peakSplit{};
};

/// Host memory that is counted: each block is allocated with aligned_alloc
/// and reported to a MemoryCounter (its own, or one the caller shares, such
/// as a plan interpreter's, so a CPU kernel's scratch is counted with the
/// rest of the step). Blocks are aligned to kAlignment bytes and counted at
/// their size rounded up to a multiple of kAlignment (what they really
/// occupy, and what the buffer planner assumes). Not thread-safe.
class CountingAllocator {
public:
  /// Alignment of every block, in bytes (the planner's alignment).
  static constexpr uint64_t kAlignment = kBufferAlignment;

  /// An allocator with its own counter.
  CountingAllocator() : counter(&ownCounter) {}
  /// An allocator that reports to \p counter, which must outlive it.
  explicit CountingAllocator(MemoryCounter &counter) : counter(&counter) {}
  CountingAllocator(const CountingAllocator &) = delete;
  CountingAllocator &operator=(const CountingAllocator &) = delete;
  /// Frees every block still live.
  ~CountingAllocator();

  /// \p bytes rounded up to a multiple of kAlignment.
  static uint64_t roundUp(uint64_t bytes) { return alignBuffer(bytes); }

  /// Allocates \p bytes under \p category. A zero-size request gives a
  /// valid, distinct pointer that counts zero bytes. Returns null when the
  /// system is out of memory (nothing is counted then).
  void *allocate(uint64_t bytes, MemoryCategory category);
  /// Like allocate, but an out-of-memory failure is an llvm::Error.
  llvm::Expected<void *> tryAllocate(uint64_t bytes, MemoryCategory category);
  /// Frees a block returned by allocate. Null is ignored.
  void free(void *ptr);

  /// Counted bytes of the live block \p ptr (0 if unknown).
  uint64_t getBlockBytes(const void *ptr) const;
  /// Category of the live block \p ptr; it must be live.
  MemoryCategory getBlockCategory(const void *ptr) const;
  /// Number of live blocks.
  size_t getNumLiveBlocks() const { return blocks.size(); }

  /// The counter blocks are reported to.
  MemoryCounter &getCounter() const { return *counter; }
  /// Live bytes of \p category (of the counter: shared counters include
  /// other allocations).
  uint64_t getCurrentBytes(MemoryCategory category) const {
    return counter->getCurrentBytes(category);
  }
  /// Live bytes of all categories.
  uint64_t getCurrentBytes() const { return counter->getCurrentBytes(); }
  /// High-water mark of the total since construction or resetPeak().
  uint64_t getPeakBytes() const { return counter->getPeakBytes(); }
  /// Per-category split at the moment of the high-water mark.
  const CategoryBytes &getPeakByCategory() const {
    return counter->getPeakByCategory();
  }
  /// Restarts the high-water mark from the current figures.
  void resetPeak() { counter->resetPeak(); }
  /// See MemoryCounter::transfer.
  void transfer(MemoryCategory from, MemoryCategory to, uint64_t bytes) {
    counter->transfer(from, to, bytes);
  }
  /// A snapshot of the counter's figures.
  MemoryReport getReport() const { return counter->getReport(); }

private:
  struct Block {
    uint64_t bytes;
    MemoryCategory category;
  };
  llvm::DenseMap<const void *, Block> blocks;
  MemoryCounter ownCounter;
  MemoryCounter *counter;
};

/// A block owned by a scope: freed through its allocator on destruction.
class ScopedAllocation {
public:
  ScopedAllocation() = default;
  /// Takes ownership of \p ptr, a block of \p allocator.
  ScopedAllocation(CountingAllocator &allocator, void *ptr, uint64_t bytes)
      : allocator(&allocator), ptr(ptr), bytes(bytes) {}
  ScopedAllocation(ScopedAllocation &&other) noexcept {
    *this = std::move(other);
  }
  ScopedAllocation &operator=(ScopedAllocation &&other) noexcept;
  ScopedAllocation(const ScopedAllocation &) = delete;
  ScopedAllocation &operator=(const ScopedAllocation &) = delete;
  ~ScopedAllocation() { reset(); }

  /// Allocates \p bytes of \p category from \p allocator.
  static llvm::Expected<ScopedAllocation>
  create(CountingAllocator &allocator, uint64_t bytes, MemoryCategory category);

  /// The block (null when empty).
  void *get() const { return ptr; }
  /// The block as an array of \p T.
  template <typename T> T *getAs() const { return static_cast<T *>(ptr); }
  /// Requested size in bytes.
  uint64_t size() const { return bytes; }
  /// Frees the block now.
  void reset();

private:
  CountingAllocator *allocator = nullptr;
  void *ptr = nullptr;
  uint64_t bytes = 0;
};

} // namespace gmopt

#endif // GMOPT_BACKEND_MEMORY_H
