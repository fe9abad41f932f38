//===- Mpi.h - The MPI world of a data-parallel CPU run ---------*- C++ -*-===//
//
// The CPU backend runs gmopt.AllReduce over the ranks of a data-parallel
// world. gmopt-run forms it in one of two ways: under an MPI launcher
// (mpirun; Open MPI's OMPI_COMM_WORLD_SIZE or the PMI/PMIx variables of
// other launchers) the world is MPI's, initialised here and finalised at
// exit; from torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) where no MPI launcher ran, it is gmopt's own TCP world
// (TcpWorld.h, which says why MPI cannot be used there). The functions
// below hide which: the kernels and the driver call the same ones.
//
// No collective waits forever. Each one (MPI_Iallreduce polled with
// MPI_Test, or the TCP world's polled sockets) has a deadline, the
// collective timeout (300 s unless set); alongside each MPI collective
// every rank posts a small arrival notice to every other, so a rank that
// times out names the ranks whose notices did not come. After a failure
// the world is broken: abortWorld() tells the others (MPI_Abort, which
// makes mpirun end every rank; or the TCP world's abort message) and the
// caller exits. MPI is optional at build time (CMake's find_package(MPI));
// without it the MPI functions exist and say so, and the TCP world works.
//
// For tests only, GMOPT_TEST_FAULT=hang:RANK:STEP or die:RANK:STEP makes
// rank RANK hang (sleep for an hour) or die (SIGKILL) as it enters its
// first collective of optimizer step STEP (see setCollectiveStep).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_MPI_H
#define GMOPT_BACKEND_CPU_MPI_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gmopt {
namespace cpu {

/// The default collective timeout, in seconds.
constexpr double kDefaultCollectiveTimeoutSeconds = 300;

/// True if gmopt was built with MPI.
bool isMpiBuilt();
/// True if the environment says an MPI launcher (mpirun) started this
/// process.
bool isLaunchedByMpi();
/// True if no MPI launcher started this process and WORLD_SIZE is set
/// (a torchrun-style launch).
bool isLaunchedByEnvironment();
/// Initialises MPI once and arranges MPI_Finalize at exit. Fails when gmopt
/// was built without MPI or MPI cannot start.
llvm::Error initializeMpi();
/// Forms the TCP world from RANK, WORLD_SIZE, MASTER_ADDR (default
/// 127.0.0.1) and MASTER_PORT (default 29500), with the world secret of
/// GMOPT_WORLD_SECRET or GMOPT_WORLD_SECRET_FILE (cpu::readWorldSecret;
/// needed for several ranks); LOCAL_RANK is accepted and not needed on the
/// CPU. Waits up to the collective timeout for the other ranks. Fails on
/// malformed variables, without a secret, or when the world does not form.
llvm::Error initializeEnvironmentWorld();
/// True once a world (MPI's or the TCP one) is up.
bool isMpiInitialized();
/// "MPI" or "TCP" (the world's transport), "none" before initialisation.
const char *getWorldTransportName();
/// This process's rank (0 before initialisation).
int getMpiRank();
/// The world size (1 before initialisation).
int getMpiWorldSize();

/// Sets the seconds a collective may wait for the other ranks.
void setCollectiveTimeout(double seconds);
/// The seconds a collective may wait for the other ranks.
double getCollectiveTimeout();
/// Tells the world which optimizer step the next collectives belong to
/// (for error messages and GMOPT_TEST_FAULT); 1 until called.
void setCollectiveStep(unsigned step);

/// Sums \p count floats at \p data over every rank, in place. Fails when
/// no world is up, when the call fails, or when some rank does not arrive
/// within the collective timeout (naming it).
llvm::Error allReduceSumF32(float *data, size_t count);
/// The split all-reduce (gmopt.AllReduceStart / AllReduceWait): starts
/// summing \p count floats at \p data over every rank, in place, and
/// returns at once under MPI (MPI_Iallreduce); \p data must not be touched
/// until finishAllReduceSumF32(\p data). The TCP world has no non-blocking
/// collective and completes it here. Every rank must start and finish its
/// all-reduces in the same order.
llvm::Error startAllReduceSumF32(float *data, size_t count);
/// Completes the all-reduce started on \p data, with the arrival notices
/// and the collective timeout of allReduceSumF32 (naming a rank that does
/// not arrive). Fails when none was started on \p data.
llvm::Error finishAllReduceSumF32(float *data);
/// Lets MPI progress the started all-reduces (one MPI_Test each); cheap,
/// called by the CPU plan interpreter between nodes while some are in
/// flight. No-op otherwise.
void progressCollectives();
/// Started all-reduces not yet finished.
size_t getPendingCollectiveCount();
/// Every rank's \p mine (the same length on every rank), concatenated in
/// rank order; \p what names the exchange in errors.
llvm::Expected<std::vector<uint64_t>>
allGatherU64(llvm::ArrayRef<uint64_t> mine, llvm::StringRef what);
/// The mean of \p value over the ranks, added in rank order (so every rank
/// gets the same double).
llvm::Expected<double> averageOverRanks(double value, llvm::StringRef what);
/// After this rank failed with \p message (already printed): makes the
/// other ranks stop too - MPI_Abort(\p exitCode) under MPI, which does not
/// return; the TCP world's abort message otherwise, after which the caller
/// exits. No-op without a world of several ranks.
void abortWorld(llvm::StringRef message, int exitCode);

// ZeRO's collectives (Mpi.cpp).

/// Sums \p input (getMpiWorldSize() * \p shardCount floats, in rank order)
/// over every rank and writes this rank's \p shardCount-float block of the
/// sum to \p output. Fails when no world is up, the call fails or a rank
/// does not arrive within the collective timeout (Mpi.cpp).
llvm::Error reduceScatterSumF32(const float *input, float *output,
                                size_t shardCount);
/// Gathers every rank's \p shardCount floats at \p shard into \p output
/// (getMpiWorldSize() * \p shardCount floats, in rank order). Fails like
/// reduceScatterSumF32.
llvm::Error allGatherF32(const float *shard, float *output, size_t shardCount);
/// Copies \p bytes bytes at \p data on rank \p root into \p data on every
/// rank, for small payloads (the CUDA backend's NCCL bootstrap sends its
/// unique id with it): an all-gather over the world's transport, under the
/// collective timeout. Fails like reduceScatterSumF32.
llvm::Error broadcastBytes(void *data, size_t bytes, int root);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_MPI_H
