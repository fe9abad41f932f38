//===- ThreadPool.cpp - The CPU backend's worker threads ------------------===//
//
// Job protocol: the caller publishes a job (body, chunk count, a number of
// open helper slots) under the state mutex and wakes the workers. A worker
// takes a slot under the mutex, then pulls chunks from the atomic counter.
// When the caller runs out of chunks it closes the remaining slots, so a
// worker that wakes late never touches a finished job, and waits until the
// helpers that did join have finished.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/ThreadPool.h"

using namespace gmopt;
using namespace gmopt::cpu;

/// True on pool worker threads: a parallel loop inside a chunk runs inline.
static thread_local bool insidePoolWork = false;

ThreadPool &ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(stateMutex);
    stopping = true;
  }
  wakeWorkers.notify_all();
  for (std::thread &worker : workers)
    worker.join();
}

void ThreadPool::drainChunks() {
  for (int64_t chunk = nextChunk.fetch_add(1); chunk < totalChunks;
       chunk = nextChunk.fetch_add(1))
    body(chunk);
}

void ThreadPool::workerLoop() {
  insidePoolWork = true;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(stateMutex);
  while (true) {
    wakeWorkers.wait(lock, [&] {
      return stopping || (generation != seen && openSlots > 0);
    });
    if (stopping)
      return;
    seen = generation;
    --openSlots;
    ++activeHelpers;
    lock.unlock();
    drainChunks();
    lock.lock();
    if (--activeHelpers == 0)
      jobDone.notify_all();
  }
}

void ThreadPool::run(unsigned numThreads, int64_t numChunks,
                     llvm::function_ref<void(int64_t)> chunkBody) {
  auto runInline = [&] {
    for (int64_t chunk = 0; chunk < numChunks; ++chunk)
      chunkBody(chunk);
  };
  unsigned helpers = static_cast<unsigned>(
      std::min<int64_t>(numThreads > 0 ? numThreads - 1 : 0, numChunks - 1));
  if (helpers == 0 || insidePoolWork) {
    runInline();
    return;
  }
  std::unique_lock<std::mutex> jobLock(jobMutex, std::try_to_lock);
  if (!jobLock.owns_lock()) {
    runInline();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stateMutex);
    while (workers.size() < helpers)
      workers.emplace_back([this] { workerLoop(); });
    body = chunkBody;
    totalChunks = numChunks;
    nextChunk.store(0);
    openSlots = helpers;
    ++generation;
  }
  wakeWorkers.notify_all();
  insidePoolWork = true;
  drainChunks();
  insidePoolWork = false;
  std::unique_lock<std::mutex> lock(stateMutex);
  openSlots = 0;
  jobDone.wait(lock, [&] { return activeHelpers == 0; });
}
