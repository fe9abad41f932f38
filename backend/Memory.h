//===- Memory.h - Memory categories, counting allocator ---------*- C++ -*-===//
//
// How gmopt backends measure memory. Each byte a backend allocates goes
// through a CountingAllocator under one of the six MemoryCategory values of
// ir/Plan.h (parameters, gradients, optimizer state, activations,
// temporaries, workspace); the allocator tracks the live bytes of each
// category, the high-water mark of their total and the split by category at
// the moment that mark was reached. A MemoryReport is a snapshot of those
// figures, printable as a table and as JSON.
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

  /// Live bytes of \p category at the peak.
  uint64_t atPeak(MemoryCategory category) const {
    return peakByCategory[static_cast<unsigned>(category)];
  }
  /// Live bytes of \p category now.
  uint64_t current(MemoryCategory category) const {
    return currentByCategory[static_cast<unsigned>(category)];
  }

  /// Prints a table: one row per category with its bytes at the peak and
  /// now, then the totals.
  void print(llvm::raw_ostream &os) const;
  /// The JSON form: {"peak_bytes": N, "by_category": {"parameters": N, ...},
  /// "current_bytes": N}. by_category is the split at the peak.
  llvm::json::Object toJSON() const;
};

/// The allocator every backend allocation goes through. Blocks are aligned
/// to kAlignment bytes and counted at their size rounded up to a multiple of
/// kAlignment (what they really occupy, and what the buffer planner assumes).
/// Not thread-safe.
class CountingAllocator {
public:
  /// Alignment of every block, in bytes (the planner's alignment).
  static constexpr uint64_t kAlignment = kBufferAlignment;

  CountingAllocator() = default;
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

  /// Restarts the high-water mark from the current figures.
  void resetPeak();
  /// Moves \p bytes of live memory from \p from to \p to without changing
  /// the total: a planned arena is counted under Temporaries while a slice
  /// is unoccupied and under its value's category while it is live. At an
  /// unchanged total the peak split is refreshed when it is the peak.
  void transfer(MemoryCategory from, MemoryCategory to, uint64_t bytes);
  /// A snapshot of the figures.
  MemoryReport getReport() const;

private:
  struct Block {
    uint64_t bytes;
    MemoryCategory category;
  };
  llvm::DenseMap<const void *, Block> blocks;
  CategoryBytes current{};
  uint64_t currentTotal = 0;
  uint64_t peakTotal = 0;
  CategoryBytes peakSplit{};
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
