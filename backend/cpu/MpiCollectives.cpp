//===- MpiCollectives.cpp - ZeRO's reduce-scatter and all-gather ----------===//
//
// The MPI calls behind the CPU kernels of gmopt.ReduceScatter and
// gmopt.AllGather (ZeRO stages 1 and 2): MPI_Reduce_scatter_block and
// MPI_Allgather over fp32 blocks of one shard per rank. Kept apart from
// Mpi.cpp (initialisation and the all-reduce). Compiled with GMOPT_HAVE_MPI
// where CMake found MPI; otherwise each entry point reports that gmopt was
// built without it. A shard above INT_MAX floats goes in several calls over
// column blocks of the rank-major layout (MPI counts are ints).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Mpi.h"

#include <algorithm>
#include <climits>
#include <vector>

#ifdef GMOPT_HAVE_MPI
// The C API only (see Mpi.cpp).
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

/// The error for a collective called outside an initialised MPI world.
llvm::Error notReady() {
  return mpiError(cpu::isMpiBuilt() ? "not initialised (launch with mpirun)"
                                    : "gmopt was built without MPI (install "
                                      "libopenmpi-dev and reconfigure)");
}

#ifdef GMOPT_HAVE_MPI
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

llvm::Error cpu::reduceScatterSumF32(const float *input, float *output,
                                     size_t shardCount) {
  if (!isMpiInitialized())
    return notReady();
#ifdef GMOPT_HAVE_MPI
  if (shardCount <= size_t(INT_MAX))
    return checkMpi(
        MPI_Reduce_scatter_block(input, output, static_cast<int>(shardCount),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block");
  // Column blocks: block [begin, begin + chunk) of every rank's shard.
  size_t ranks = size_t(getMpiWorldSize());
  for (size_t begin = 0; begin < shardCount;) {
    size_t chunk = std::min(shardCount - begin, size_t(INT_MAX) / ranks);
    std::vector<float> packed(chunk * ranks);
    for (size_t r = 0; r != ranks; ++r)
      std::copy(input + r * shardCount + begin,
                input + r * shardCount + begin + chunk,
                packed.begin() + r * chunk);
    if (auto err =
            checkMpi(MPI_Reduce_scatter_block(
                         packed.data(), output + begin, static_cast<int>(chunk),
                         MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Reduce_scatter_block"))
      return err;
    begin += chunk;
  }
  return llvm::Error::success();
#else
  (void)input;
  (void)output;
  (void)shardCount;
  return notReady();
#endif
}

llvm::Error cpu::allGatherF32(const float *shard, float *output,
                              size_t shardCount) {
  if (!isMpiInitialized())
    return notReady();
#ifdef GMOPT_HAVE_MPI
  if (shardCount <= size_t(INT_MAX))
    return checkMpi(
        MPI_Allgather(shard, static_cast<int>(shardCount), MPI_FLOAT, output,
                      static_cast<int>(shardCount), MPI_FLOAT, MPI_COMM_WORLD),
        "MPI_Allgather");
  size_t ranks = size_t(getMpiWorldSize());
  for (size_t begin = 0; begin < shardCount;) {
    size_t chunk = std::min(shardCount - begin, size_t(INT_MAX) / ranks);
    std::vector<float> packed(chunk * ranks);
    if (auto err = checkMpi(
            MPI_Allgather(shard + begin, static_cast<int>(chunk), MPI_FLOAT,
                          packed.data(), static_cast<int>(chunk), MPI_FLOAT,
                          MPI_COMM_WORLD),
            "MPI_Allgather"))
      return err;
    for (size_t r = 0; r != ranks; ++r)
      std::copy(packed.begin() + r * chunk, packed.begin() + (r + 1) * chunk,
                output + r * shardCount + begin);
    begin += chunk;
  }
  return llvm::Error::success();
#else
  (void)shard;
  (void)output;
  (void)shardCount;
  return notReady();
#endif
}
