//===- ThreadPool.cpp - The CPU backend's worker threads ------------------===//
//
// Job protocol: the caller publishes a job (body, chunk count, a number of
// open helper slots) under the state mutex, bumps the generation and wakes
// the workers that sleep (spinning ones see the new generation). A worker
// takes a slot under the mutex, then pulls chunks from the atomic counter.
// When the caller runs out of chunks it closes the remaining slots, so a
// worker that arrives late never touches a finished job (it only notes the
// generation it missed), and waits until the helpers that did join have
// finished. A worker sleeps only while the generation is the one it last
// saw, and the caller reads the number of sleepers under the same mutex
// it publishes under, so no wake-up is lost.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/ThreadPool.h"

#include <chrono>

using namespace gmopt;
using namespace gmopt::cpu;

/// True on pool worker threads: a parallel loop inside a chunk runs inline.
static thread_local bool insidePoolWork = false;

/// Tells the core this is a spin-wait loop (saves power, frees the sibling
/// hyperthread).
static inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins until \p done() or kSpinMicros have passed; returns done().
template <typename Predicate> static bool spinUntil(const Predicate &done) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::microseconds(ThreadPool::kSpinMicros);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done())
        return true;
      cpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return done();
  }
}

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

bool ThreadPool::spinForJob(uint64_t seen) const {
  return spinUntil([&] {
    return generation.load(std::memory_order_acquire) != seen ||
           stopping.load(std::memory_order_relaxed);
  });
}

void ThreadPool::workerLoop() {
  insidePoolWork = true;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(stateMutex);
  while (true) {
    if (stopping)
      return;
    uint64_t current = generation.load(std::memory_order_relaxed);
    if (current != seen) {
      seen = current;
      if (openSlots > 0) {
        --openSlots;
        activeHelpers.fetch_add(1);
        lock.unlock();
        drainChunks();
        lock.lock();
        if (activeHelpers.fetch_sub(1) == 1)
          jobDone.notify_all();
        continue;
      }
      // The job closed before this worker came: wait for the next one.
    }
    lock.unlock();
    bool woken = spinForJob(seen);
    lock.lock();
    if (woken)
      continue;
    ++sleepingWorkers;
    wakeWorkers.wait(lock,
                     [&] { return stopping || generation.load() != seen; });
    --sleepingWorkers;
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
  bool wakeSleepers;
  {
    std::lock_guard<std::mutex> lock(stateMutex);
    while (workers.size() < helpers)
      workers.emplace_back([this] { workerLoop(); });
    body = chunkBody;
    totalChunks = numChunks;
    nextChunk.store(0);
    openSlots = helpers;
    generation.fetch_add(1, std::memory_order_release);
    wakeSleepers = sleepingWorkers > 0;
  }
  if (wakeSleepers)
    wakeWorkers.notify_all();
  insidePoolWork = true;
  drainChunks();
  insidePoolWork = false;
  std::unique_lock<std::mutex> lock(stateMutex);
  openSlots = 0;
  lock.unlock();
  // Helpers that joined are finishing their last chunks: usually a short
  // wait, spun; a long one sleeps.
  if (spinUntil([&] { return activeHelpers.load() == 0; }))
    return;
  lock.lock();
  jobDone.wait(lock, [&] { return activeHelpers.load() == 0; });
}
