//===- Mpi.h - The MPI world of a data-parallel CPU run ---------*- C++ -*-===//
//
// The CPU backend runs gmopt.AllReduce over MPI. MPI is optional at build
// time (CMake's find_package(MPI)); without it every function here still
// exists and says so, so callers need no #ifdefs. gmopt-run initialises MPI
// when an MPI launcher started it (Open MPI's OMPI_COMM_WORLD_SIZE, or the
// PMI/PMIx variables of other launchers) and finalises it at exit.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_MPI_H
#define GMOPT_BACKEND_CPU_MPI_H

#include "llvm/Support/Error.h"

#include <cstddef>

namespace gmopt {
namespace cpu {

/// True if gmopt was built with MPI.
bool isMpiBuilt();
/// True if the environment says an MPI launcher (mpirun) started this
/// process.
bool isLaunchedByMpi();
/// Initialises MPI once and arranges MPI_Finalize at exit. Fails when gmopt
/// was built without MPI or MPI cannot start.
llvm::Error initializeMpi();
/// True once initializeMpi succeeded.
bool isMpiInitialized();
/// This process's rank (0 before initialisation).
int getMpiRank();
/// The world size (1 before initialisation).
int getMpiWorldSize();
/// Sums \p count floats at \p data over every rank, in place. Fails when
/// MPI is not initialised or the call fails.
llvm::Error allReduceSumF32(float *data, size_t count);
/// Copies \p bytes bytes at \p data on rank \p root into \p data on every
/// rank (MPI_Bcast; the CUDA backend's NCCL bootstrap sends its unique id
/// with it). Fails when MPI is not initialised or the call fails.
llvm::Error broadcastBytes(void *data, size_t bytes, int root);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_MPI_H
