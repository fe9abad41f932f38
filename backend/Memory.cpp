//===- Memory.cpp - Counting allocator and memory reports -----------------===//
//
// MemoryCounter updates the high-water mark on every addition and copies the
// split by category only when the mark moves. CountingAllocator keeps a map
// from each live block to its counted size and category, so frees need no
// size argument and a report can always be reconciled with the blocks still
// alive.
//
//===----------------------------------------------------------------------===//

#include "backend/Memory.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cassert>
#include <cstdlib>
#include <string>

using namespace gmopt;

//===----------------------------------------------------------------------===//
// MemoryReport
//===----------------------------------------------------------------------===//

static void printBytesCell(llvm::raw_ostream &os, uint64_t bytes) {
  os << llvm::right_justify(std::to_string(bytes), 16)
     << llvm::format(" (%10.2f MiB)", static_cast<double>(bytes) / (1 << 20));
}

void MemoryReport::print(llvm::raw_ostream &os) const {
  os << llvm::left_justify("category", 16) << llvm::right_justify("at peak", 33)
     << llvm::right_justify("current", 33) << "\n";
  for (MemoryCategory category : kAllMemoryCategories) {
    os << llvm::left_justify(memoryCategoryName(category), 16);
    printBytesCell(os, atPeak(category));
    printBytesCell(os, current(category));
    os << "\n";
  }
  os << llvm::left_justify("total", 16);
  printBytesCell(os, peakBytes);
  printBytesCell(os, currentBytes);
  os << "\n";
  // Offloaded tensors: host memory, apart from the device total above.
  if (hostPeakBytes || hostCurrentBytes) {
    os << llvm::left_justify("host arena", 16);
    printBytesCell(os, hostPeakBytes);
    printBytesCell(os, hostCurrentBytes);
    os << "\n";
  }
}

llvm::json::Object MemoryReport::toJSON() const {
  llvm::json::Object byCategory;
  for (MemoryCategory category : kAllMemoryCategories)
    byCategory[memoryCategoryName(category)] =
        static_cast<int64_t>(atPeak(category));
  llvm::json::Object object;
  object["peak_bytes"] = static_cast<int64_t>(peakBytes);
  object["by_category"] = std::move(byCategory);
  object["current_bytes"] = static_cast<int64_t>(currentBytes);
  llvm::json::Object hostByCategory;
  for (MemoryCategory category : kAllMemoryCategories)
    hostByCategory[memoryCategoryName(category)] = static_cast<int64_t>(
        hostPeakByCategory[static_cast<unsigned>(category)]);
  object["host_peak_bytes"] = static_cast<int64_t>(hostPeakBytes);
  object["host_by_category"] = std::move(hostByCategory);
  object["host_current_bytes"] = static_cast<int64_t>(hostCurrentBytes);
  return object;
}

//===----------------------------------------------------------------------===//
// MemoryCounter
//===----------------------------------------------------------------------===//

void MemoryCounter::add(uint64_t bytes, MemoryCategory category) {
  current[static_cast<unsigned>(category)] += bytes;
  currentTotal += bytes;
  if (currentTotal > peakTotal) {
    peakTotal = currentTotal;
    peakSplit = current;
  }
}

void MemoryCounter::remove(uint64_t bytes, MemoryCategory category) {
  unsigned index = static_cast<unsigned>(category);
  assert(current[index] >= bytes && "releasing more bytes than counted");
  current[index] -= bytes;
  currentTotal -= bytes;
}

void MemoryCounter::transfer(MemoryCategory from, MemoryCategory to,
                             uint64_t bytes) {
  unsigned source = static_cast<unsigned>(from);
  unsigned target = static_cast<unsigned>(to);
  assert(current[source] >= bytes &&
         "moving more bytes than the category holds");
  current[source] -= bytes;
  current[target] += bytes;
  // While the total sits at the peak, the most informative split is the one
  // where the fewest bytes are unclassified (an idle arena counts as
  // Temporaries), i.e. the moment the arena held the most live values.
  unsigned temporaries = static_cast<unsigned>(MemoryCategory::Temporaries);
  if (currentTotal == peakTotal &&
      current[temporaries] < peakSplit[temporaries])
    peakSplit = current;
}

void MemoryCounter::resetPeak() {
  peakTotal = currentTotal;
  peakSplit = current;
}

MemoryReport MemoryCounter::getReport() const {
  MemoryReport report;
  report.peakBytes = peakTotal;
  report.peakByCategory = peakSplit;
  report.currentBytes = currentTotal;
  report.currentByCategory = current;
  return report;
}

MemoryReport MemoryCounter::getReport(const MemoryCounter &host) const {
  MemoryReport report = getReport();
  report.hostPeakBytes = host.peakTotal;
  report.hostPeakByCategory = host.peakSplit;
  report.hostCurrentBytes = host.currentTotal;
  return report;
}

//===----------------------------------------------------------------------===//
// CountingAllocator
//===----------------------------------------------------------------------===//

CountingAllocator::~CountingAllocator() {
  for (auto &entry : blocks) {
    counter->remove(entry.second.bytes, entry.second.category);
    std::free(const_cast<void *>(entry.first));
  }
}

void *CountingAllocator::allocate(uint64_t bytes, MemoryCategory category) {
  uint64_t counted = roundUp(bytes);
  if (counted < bytes) // Overflow of the rounding.
    return nullptr;
  // aligned_alloc needs a size that is a multiple of the alignment; a
  // zero-size block still gets real storage so the pointer is distinct.
  void *ptr =
      std::aligned_alloc(kAlignment, counted == 0 ? kAlignment : counted);
  if (!ptr)
    return nullptr;
  blocks[ptr] = Block{counted, category};
  counter->add(counted, category);
  return ptr;
}

llvm::Expected<void *> CountingAllocator::tryAllocate(uint64_t bytes,
                                                      MemoryCategory category) {
  if (void *ptr = allocate(bytes, category))
    return ptr;
  return llvm::createStringError(std::errc::not_enough_memory,
                                 "out of memory allocating %llu bytes of %s",
                                 static_cast<unsigned long long>(bytes),
                                 memoryCategoryName(category).str().c_str());
}

void CountingAllocator::free(void *ptr) {
  if (!ptr)
    return;
  auto it = blocks.find(ptr);
  assert(it != blocks.end() && "freeing a block this allocator does not own");
  Block block = it->second;
  blocks.erase(it);
  counter->remove(block.bytes, block.category);
  std::free(ptr);
}

uint64_t CountingAllocator::getBlockBytes(const void *ptr) const {
  auto it = blocks.find(ptr);
  return it == blocks.end() ? 0 : it->second.bytes;
}

MemoryCategory CountingAllocator::getBlockCategory(const void *ptr) const {
  auto it = blocks.find(ptr);
  assert(it != blocks.end() && "category of a block that is not live");
  return it->second.category;
}

//===----------------------------------------------------------------------===//
// ScopedAllocation
//===----------------------------------------------------------------------===//

ScopedAllocation &
ScopedAllocation::operator=(ScopedAllocation &&other) noexcept {
  if (this != &other) {
    reset();
    allocator = other.allocator;
    ptr = other.ptr;
    bytes = other.bytes;
    other.allocator = nullptr;
    other.ptr = nullptr;
    other.bytes = 0;
  }
  return *this;
}

llvm::Expected<ScopedAllocation>
ScopedAllocation::create(CountingAllocator &allocator, uint64_t bytes,
                         MemoryCategory category) {
  auto ptr = allocator.tryAllocate(bytes, category);
  if (!ptr)
    return ptr.takeError();
  return ScopedAllocation(allocator, *ptr, bytes);
}

void ScopedAllocation::reset() {
  if (allocator && ptr)
    allocator->free(ptr);
  allocator = nullptr;
  ptr = nullptr;
  bytes = 0;
}
