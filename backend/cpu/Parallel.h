//===- Parallel.h - Fixed-chunk parallel loops for CPU kernels --*- C++ -*-===//
//
// A tiny parallel-for over the backend's ThreadPool. Work is cut into chunks
// whose boundaries depend only on the problem size and a grain, never on the
// thread count, so a kernel that reduces within chunks and then combines the
// chunk results in chunk order produces the same bits with 1 or N threads.
// Small problems run inline on the calling thread. The body is called once
// per chunk (through a function_ref), never per element.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_PARALLEL_H
#define GMOPT_BACKEND_CPU_PARALLEL_H

#include "backend/cpu/ThreadPool.h"

#include <algorithm>
#include <cstdint>

namespace gmopt {
namespace cpu {

/// Number of chunks parallelFor cuts [0, total) into for \p grain.
inline int64_t numChunks(int64_t total, int64_t grain) {
  grain = std::max<int64_t>(grain, 1);
  return total <= 0 ? 0 : (total + grain - 1) / grain;
}

/// Calls body(begin, end) for consecutive chunks of at most \p grain items
/// covering [0, total), on up to \p numThreads threads. Chunk boundaries are
/// multiples of \p grain whatever the thread count.
template <typename Body>
void parallelFor(unsigned numThreads, int64_t total, int64_t grain,
                 const Body &body) {
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = numChunks(total, grain);
  if (chunks == 0)
    return;
  if (numThreads <= 1 || chunks == 1) {
    for (int64_t c = 0; c < chunks; ++c)
      body(c * grain, std::min(total, (c + 1) * grain));
    return;
  }
  ThreadPool::instance().run(numThreads, chunks, [&](int64_t c) {
    body(c * grain, std::min(total, (c + 1) * grain));
  });
}

/// Grain for loops over \p total items each costing about \p costPerItem
/// elementary operations: chunks of roughly 32K operations.
inline int64_t grainFor(int64_t costPerItem) {
  constexpr int64_t kChunkWork = 32768;
  return std::max<int64_t>(1, kChunkWork / std::max<int64_t>(costPerItem, 1));
}

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_PARALLEL_H
