//===- MemoryAccountingTest.cpp - Tests of the counting allocator ---------===//
//
// The memory vocabulary of the backends: category names, 256-byte alignment
// and rounding, per-category live bytes, the high-water mark and its split
// by category at the moment it was reached, resetting the mark, scoped
// allocations, and the table and JSON forms of a MemoryReport.
//
//===----------------------------------------------------------------------===//

#include "backend/Memory.h"

#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <set>

using namespace gmopt;

namespace {

TEST(MemoryCategoryTest, NamesRoundTrip) {
  std::set<std::string> names;
  for (MemoryCategory category : kAllMemoryCategories) {
    llvm::StringRef name = memoryCategoryName(category);
    names.insert(name.str());
    auto parsed = parseMemoryCategory(name);
    ASSERT_TRUE(parsed.has_value()) << name.str();
    EXPECT_EQ(*parsed, category);
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"parameters", "gradients", "optimizer_state",
                                   "activations", "temporaries", "workspace"}));
  EXPECT_FALSE(parseMemoryCategory("weights").has_value());
}

TEST(CountingAllocatorTest, AlignsAndRoundsUp) {
  CountingAllocator allocator;
  void *a = allocator.allocate(1, MemoryCategory::Temporaries);
  void *b = allocator.allocate(300, MemoryCategory::Temporaries);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 256, 0u);
  EXPECT_EQ(allocator.getBlockBytes(a), 256u);
  EXPECT_EQ(allocator.getBlockBytes(b), 512u);
  EXPECT_EQ(allocator.getCurrentBytes(), 768u);
  EXPECT_EQ(CountingAllocator::roundUp(0), 0u);
  EXPECT_EQ(CountingAllocator::roundUp(256), 256u);
  EXPECT_EQ(CountingAllocator::roundUp(257), 512u);
  allocator.free(a);
  allocator.free(b);
  EXPECT_EQ(allocator.getCurrentBytes(), 0u);
  EXPECT_EQ(allocator.getNumLiveBlocks(), 0u);
}

TEST(CountingAllocatorTest, ZeroSizeBlocksAreDistinctAndFree) {
  CountingAllocator allocator;
  void *a = allocator.allocate(0, MemoryCategory::Workspace);
  void *b = allocator.allocate(0, MemoryCategory::Workspace);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(allocator.getCurrentBytes(), 0u);
  EXPECT_EQ(allocator.getPeakBytes(), 0u);
  EXPECT_EQ(allocator.getNumLiveBlocks(), 2u);
  allocator.free(a);
  allocator.free(b);
  allocator.free(nullptr);
  EXPECT_EQ(allocator.getNumLiveBlocks(), 0u);
}

TEST(CountingAllocatorTest, TracksCategoriesAndPeakSplit) {
  CountingAllocator allocator;
  void *params = allocator.allocate(1024, MemoryCategory::Parameters);
  void *act = allocator.allocate(2048, MemoryCategory::Activations);
  void *tmp = allocator.allocate(512, MemoryCategory::Temporaries);
  // Peak so far: 3584 = 1024 params + 2048 activations + 512 temporaries.
  EXPECT_EQ(allocator.getPeakBytes(), 3584u);
  allocator.free(act);
  allocator.free(tmp);
  void *grad = allocator.allocate(1024, MemoryCategory::Gradients);
  // Below the old peak: the recorded split must not change.
  EXPECT_EQ(allocator.getCurrentBytes(), 2048u);
  MemoryReport report = allocator.getReport();
  EXPECT_EQ(report.peakBytes, 3584u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Parameters), 1024u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Activations), 2048u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Temporaries), 512u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Gradients), 0u);
  EXPECT_EQ(report.current(MemoryCategory::Gradients), 1024u);
  EXPECT_EQ(report.current(MemoryCategory::Activations), 0u);
  EXPECT_EQ(report.currentBytes, 2048u);
  // A new, higher mark records the split at that moment.
  void *state = allocator.allocate(4096, MemoryCategory::OptimizerState);
  report = allocator.getReport();
  EXPECT_EQ(report.peakBytes, 6144u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Parameters), 1024u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Gradients), 1024u);
  EXPECT_EQ(report.atPeak(MemoryCategory::OptimizerState), 4096u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Activations), 0u);
  uint64_t splitTotal = 0;
  for (uint64_t bytes : report.peakByCategory)
    splitTotal += bytes;
  EXPECT_EQ(splitTotal, report.peakBytes);
  allocator.free(params);
  allocator.free(grad);
  allocator.free(state);
}

TEST(CountingAllocatorTest, ResetPeakStartsFromCurrent) {
  CountingAllocator allocator;
  void *big = allocator.allocate(8192, MemoryCategory::Activations);
  void *small = allocator.allocate(256, MemoryCategory::Parameters);
  allocator.free(big);
  EXPECT_EQ(allocator.getPeakBytes(), 8448u);
  allocator.resetPeak();
  EXPECT_EQ(allocator.getPeakBytes(), 256u);
  EXPECT_EQ(allocator.getPeakByCategory()[static_cast<unsigned>(
                MemoryCategory::Parameters)],
            256u);
  EXPECT_EQ(allocator.getPeakByCategory()[static_cast<unsigned>(
                MemoryCategory::Activations)],
            0u);
  void *w = allocator.allocate(1000, MemoryCategory::Workspace);
  EXPECT_EQ(allocator.getPeakBytes(), 256u + 1024u);
  allocator.free(w);
  allocator.free(small);
}

TEST(CountingAllocatorTest, ScopedAllocationFreesOnDestruction) {
  CountingAllocator allocator;
  {
    auto block =
        ScopedAllocation::create(allocator, 100, MemoryCategory::Workspace);
    ASSERT_TRUE(static_cast<bool>(block));
    EXPECT_EQ(allocator.getCurrentBytes(MemoryCategory::Workspace), 256u);
    ScopedAllocation moved = std::move(*block);
    EXPECT_EQ(block->get(), nullptr);
    EXPECT_NE(moved.get(), nullptr);
    EXPECT_EQ(allocator.getNumLiveBlocks(), 1u);
  }
  EXPECT_EQ(allocator.getCurrentBytes(), 0u);
  EXPECT_EQ(allocator.getPeakBytes(), 256u);
}

TEST(CountingAllocatorTest, OutOfMemoryIsAnError) {
  CountingAllocator allocator;
  auto block =
      allocator.tryAllocate(UINT64_MAX - 10, MemoryCategory::Activations);
  ASSERT_FALSE(static_cast<bool>(block));
  std::string message = llvm::toString(block.takeError());
  EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  EXPECT_EQ(allocator.getCurrentBytes(), 0u);
}

TEST(MemoryReportTest, PrintsTableAndJSON) {
  CountingAllocator allocator;
  void *p = allocator.allocate(1 << 20, MemoryCategory::Parameters);
  void *g = allocator.allocate(512, MemoryCategory::Gradients);
  MemoryReport report = allocator.getReport();
  std::string table;
  llvm::raw_string_ostream os(table);
  report.print(os);
  os.flush();
  for (MemoryCategory category : kAllMemoryCategories)
    EXPECT_NE(table.find(memoryCategoryName(category).str()), std::string::npos)
        << table;
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_NE(table.find("1049088"), std::string::npos) << table; // 1 MiB + 512

  llvm::json::Object json = report.toJSON();
  EXPECT_EQ(json.getInteger("peak_bytes"), int64_t(1049088));
  const llvm::json::Object *byCategory = json.getObject("by_category");
  ASSERT_NE(byCategory, nullptr);
  EXPECT_EQ(byCategory->size(), kNumMemoryCategories);
  EXPECT_EQ(byCategory->getInteger("parameters"), int64_t(1 << 20));
  EXPECT_EQ(byCategory->getInteger("gradients"), int64_t(512));
  EXPECT_EQ(byCategory->getInteger("optimizer_state"), int64_t(0));
  EXPECT_EQ(byCategory->getInteger("workspace"), int64_t(0));
  allocator.free(p);
  allocator.free(g);
}

} // namespace

TEST(MemoryCounterTest, CountsWithoutOwningMemory) {
  MemoryCounter counter;
  counter.add(512, MemoryCategory::Parameters);
  counter.add(256, MemoryCategory::Activations);
  counter.transfer(MemoryCategory::Activations, MemoryCategory::Workspace, 256);
  EXPECT_EQ(counter.getCurrentBytes(), 768u);
  EXPECT_EQ(counter.getCurrentBytes(MemoryCategory::Workspace), 256u);
  counter.remove(256, MemoryCategory::Workspace);
  MemoryReport report = counter.getReport();
  EXPECT_EQ(report.peakBytes, 768u);
  EXPECT_EQ(report.currentBytes, 512u);
  EXPECT_EQ(report.atPeak(MemoryCategory::Parameters), 512u);
}

TEST(MemoryCounterTest, AllocatorsCanShareOneCounter) {
  // A kernel's host scratch and a device's blocks land in one report.
  MemoryCounter counter;
  counter.add(1024, MemoryCategory::Temporaries);
  {
    CountingAllocator scratch(counter);
    void *block = scratch.allocate(100, MemoryCategory::Workspace);
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(counter.getCurrentBytes(MemoryCategory::Workspace),
              CountingAllocator::kAlignment);
    EXPECT_EQ(counter.getPeakBytes(), 1024 + CountingAllocator::kAlignment);
  } // The allocator's destructor frees and uncounts its live blocks.
  EXPECT_EQ(counter.getCurrentBytes(), 1024u);
  EXPECT_EQ(counter.getCurrentBytes(MemoryCategory::Workspace), 0u);
}
