//===- ThreadPool.h - The CPU backend's worker threads ----------*- C++ -*-===//
//
// A small persistent pool for parallelFor. Idle workers block on a
// condition variable instead of spinning: the backend alternates its own
// parallel loops with OpenBLAS calls that run on OpenBLAS's threads, and a
// spinning pool (OpenMP's default) would steal the cores GEMM needs. A job
// is a number of chunks handed out through an atomic counter; the caller
// works on chunks too and returns when all of them are done. One job runs
// at a time; a second caller (or a nested loop) runs its chunks inline.
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

private:
  void workerLoop();
  /// Runs chunks of the current job until none are left.
  void drainChunks();

  /// Serializes jobs.
  std::mutex jobMutex;
  /// Guards the fields below.
  std::mutex stateMutex;
  std::condition_variable wakeWorkers;
  std::condition_variable jobDone;
  std::vector<std::thread> workers;
  bool stopping = false;
  /// The current job.
  llvm::function_ref<void(int64_t)> body;
  int64_t totalChunks = 0;
  std::atomic<int64_t> nextChunk{0};
  uint64_t generation = 0;
  /// Helpers the job still accepts, helpers that joined, helpers working.
  unsigned openSlots = 0;
  unsigned activeHelpers = 0;
};

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_THREADPOOL_H
