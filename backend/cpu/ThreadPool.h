//===- ThreadPool.h - The CPU backend's worker threads ----------*- C++ -*-===//
//
// A small persistent pool for parallelFor. A training step is hundreds of
// short parallel loops, so waking a sleeping worker (a futex round trip of
// tens of microseconds) for each would cost more than many loops take.
// Idle workers therefore spin for a short, bounded time (kSpinMicros)
// watching for the next job, then block on a condition variable; the
// caller likewise spins briefly before sleeping on the helpers' finish. A
// job is a number of chunks handed out through an atomic counter; the
// caller works on chunks too and returns when all of them are done. One
// job runs at a time; a second caller (or a nested loop) runs its chunks
// inline. (GEMM runs single-threaded inside chunks, so no other pool
// competes for the cores while workers spin.)
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_THREADPOOL_H
#define GMOPT_BACKEND_CPU_THREADPOOL_H

#include "llvm/ADT/STLFunctionalExtras.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace gmopt {
namespace cpu {

/// Persistent worker threads that sleep when idle.
class ThreadPool {
public:
  /// The process-wide pool.
  static ThreadPool &instance();

  ThreadPool() = default;
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;
  /// Stops and joins the workers.
  ~ThreadPool();

  /// Calls body(c) for every chunk c in [0, numChunks) on up to
  /// \p numThreads threads (the caller included). Which thread runs a chunk
  /// is unspecified; every chunk runs exactly once.
  void run(unsigned numThreads, int64_t numChunks,
           llvm::function_ref<void(int64_t)> body);

  /// How long an idle worker (or a caller waiting for helpers) spins before
  /// it blocks.
  static constexpr int64_t kSpinMicros = 50;

private:
  void workerLoop();
  /// Runs chunks of the current job until none are left.
  void drainChunks();
  /// Spins until generation differs from \p seen or stopping is set, for at
  /// most kSpinMicros; returns whether it did.
  bool spinForJob(uint64_t seen) const;

  /// Serializes jobs.
  std::mutex jobMutex;
  /// Guards the fields below.
  std::mutex stateMutex;
  std::condition_variable wakeWorkers;
  std::condition_variable jobDone;
  std::vector<std::thread> workers;
  /// The current job.
  llvm::function_ref<void(int64_t)> body;
  int64_t totalChunks = 0;
  std::atomic<int64_t> nextChunk{0};
  /// Bumped when a job is published (written under stateMutex; spinning
  /// workers read it without the lock).
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stopping{false};
  /// Helpers the job still accepts; helpers that joined and are working
  /// (read without the lock by a spinning caller); workers blocked on
  /// wakeWorkers.
  unsigned openSlots = 0;
  std::atomic<unsigned> activeHelpers{0};
  unsigned sleepingWorkers = 0;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_THREADPOOL_H
