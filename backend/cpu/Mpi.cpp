//===- Mpi.cpp - The MPI world of a data-parallel CPU run -----------------===//
//
// MPI initialisation, rank queries and the in-place float sum behind the CPU
// kernel of gmopt.AllReduce. Compiled with GMOPT_HAVE_MPI where CMake found
// MPI; otherwise each entry point reports that gmopt was built without it.
// Counts above INT_MAX elements go in several calls (MPI counts are ints).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Mpi.h"

#include "llvm/Support/FormatVariadic.h"

#include <climits>
#include <cstdlib>

#ifdef GMOPT_HAVE_MPI
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated
// C++ bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

using namespace gmopt;

namespace {

llvm::Error mpiError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "MPI: " + message);
}

bool initialized = false;
int rank = 0;
int worldSize = 1;

#ifdef GMOPT_HAVE_MPI
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

llvm::Error checkMpi(int code, llvm::StringRef call) {
  if (code == MPI_SUCCESS)
    return llvm::Error::success();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return mpiError(call + " failed: " + llvm::StringRef(text, length));
}
#endif

} // namespace

bool cpu::isMpiBuilt() {
#ifdef GMOPT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool cpu::isLaunchedByMpi() {
  for (const char *variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(variable))
      return true;
  return false;
}

llvm::Error cpu::initializeMpi() {
  if (initialized)
    return llvm::Error::success();
#ifdef GMOPT_HAVE_MPI
  int provided = 0;
  if (auto err = checkMpi(
          MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
          "MPI_Init_thread"))
    return err;
  std::atexit(finalizeAtExit);
  // Errors come back as codes (turned into llvm::Error) instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (auto err =
          checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"))
    return err;
  if (auto err =
          checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &worldSize), "MPI_Comm_size"))
    return err;
  initialized = true;
  return llvm::Error::success();
#else
  return mpiError("gmopt was built without MPI (install libopenmpi-dev and "
                  "reconfigure)");
#endif
}

bool cpu::isMpiInitialized() { return initialized; }
int cpu::getMpiRank() { return rank; }
int cpu::getMpiWorldSize() { return worldSize; }

llvm::Error cpu::allReduceSumF32(float *data, size_t count) {
  if (!initialized)
    return mpiError(isMpiBuilt() ? "not initialised (launch with mpirun)"
                                 : "gmopt was built without MPI (install "
                                   "libopenmpi-dev and reconfigure)");
#ifdef GMOPT_HAVE_MPI
  while (count != 0) {
    int chunk = count > size_t(INT_MAX) ? INT_MAX : static_cast<int>(count);
    if (auto err = checkMpi(MPI_Allreduce(MPI_IN_PLACE, data, chunk, MPI_FLOAT,
                                          MPI_SUM, MPI_COMM_WORLD),
                            "MPI_Allreduce"))
      return err;
    data += chunk;
    count -= size_t(chunk);
  }
  return llvm::Error::success();
#else
  (void)data;
  return llvm::Error::success();
#endif
}

llvm::Error cpu::broadcastBytes(void *data, size_t bytes, int root) {
  if (!initialized)
    return mpiError(isMpiBuilt() ? "not initialised (launch with mpirun)"
                                 : "gmopt was built without MPI (install "
                                   "libopenmpi-dev and reconfigure)");
#ifdef GMOPT_HAVE_MPI
  auto *cursor = static_cast<char *>(data);
  while (bytes != 0) {
    int chunk = bytes > size_t(INT_MAX) ? INT_MAX : static_cast<int>(bytes);
    if (auto err = checkMpi(
            MPI_Bcast(cursor, chunk, MPI_BYTE, root, MPI_COMM_WORLD),
            "MPI_Bcast"))
      return err;
    cursor += chunk;
    bytes -= size_t(chunk);
  }
  return llvm::Error::success();
#else
  (void)data;
  (void)bytes;
  (void)root;
  return llvm::Error::success();
#endif
}
