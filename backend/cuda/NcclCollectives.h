//===- NcclCollectives.h - gmopt.AllReduce on CUDA over NCCL ----*- C++ -*-===//
//
// The CUDA backend runs the data-parallel gradient all-reduce
// (gmopt.AllReduce, ir/Collectives.h) with NCCL: one ncclAllReduce per
// operand of the bucket inside one ncclGroupStart/ncclGroupEnd, on the
// backend's stream, with ncclAvg for the mean (no packing, so no workspace).
// The ranks agree on NCCL's unique id through a CollectiveBootstrap: rank 0
// makes the id and the bootstrap carries it to the others. The driver makes
// one over MPI when mpirun started the process; any other rendezvous (the
// torchrun-style environment variables, say) only has to fill in the same
// struct. A single process gets a one-rank communicator.
//
// NCCL is optional twice over: at configure time (no nccl.h: the backend
// says it was built without NCCL) and at run time (libnccl.so.2 is opened
// with dlopen when a graph first needs it, so gmopt's binaries start on a
// machine without NCCL and only a multi-rank run there fails, saying so).
// With ranks = 1 and no NCCL the op is a device copy.
//
// This header has no CUDA or NCCL types: the driver, the tests and builds
// without the toolkit include it. Every NCCL call's failure is an
// llvm::Error naming the call and the node.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_NCCLCOLLECTIVES_H
#define GMOPT_BACKEND_CUDA_NCCLCOLLECTIVES_H

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;

namespace gmopt {

class Module;
class Node;

/// How the processes of a data-parallel run find each other for NCCL.
struct CollectiveBootstrap {
  /// This process's rank and the number of ranks.
  int rank = 0;
  int worldSize = 1;
  /// This rank's index among the ranks on its machine (it uses GPU
  /// localRank modulo the device count); -1: unknown, the first GPU.
  int localRank = -1;
  /// Where the figures came from, for messages ("a single process", "MPI").
  std::string source = "a single process";
  /// Copies rank 0's \p bytes into every other rank's \p bytes: a
  /// collective call every rank makes with buffers of the same size. Unset
  /// for a single process.
  std::function<llvm::Error(llvm::MutableArrayRef<uint8_t> bytes)>
      broadcastFromRankZero;
};

/// True when gmopt was built with NCCL's header (the CUDA backend can run
/// gmopt.AllReduce over several ranks, given libnccl.so.2 at run time).
bool isNcclBuilt();

/// The id every rank of \p bootstrap agrees on: rank 0's \p makeId, carried
/// to the others by the bootstrap's broadcast (which \p makeId is not
/// called on). A bootstrap of several ranks without a broadcast, a rank
/// outside [0, worldSize), an id of a size other than \p idBytes and a
/// failed broadcast are errors.
llvm::Expected<std::vector<uint8_t>>
agreeOnUniqueId(const CollectiveBootstrap &bootstrap, size_t idBytes,
                llvm::function_ref<llvm::Expected<std::vector<uint8_t>>()>
                    makeId);

/// Success when the collective \p node was placed for \p bootstrap's world
/// size (its `ranks` attribute); else an error naming the node, both sizes
/// and how to launch it.
llvm::Error checkCollectiveWorld(const Node &node,
                                 const CollectiveBootstrap &bootstrap);

/// True when \p module has a collective node.
bool hasCollectives(const Module &module);

/// The error for the NCCL call \p call that returned \p result (\p text:
/// ncclGetErrorString's, \p detail: ncclGetLastError's, may be empty), for
/// \p node when it is known.
llvm::Error ncclCallError(llvm::StringRef call, int result,
                          llvm::StringRef text, llvm::StringRef detail,
                          const Node *node);

/// The CUDA kernel check of gmopt.AllReduce: float operands (f32, f16,
/// bf16) with results of the same types and shapes, a known reduction, and
/// NCCL in the build when it spans several ranks.
llvm::Error checkCudaAllReduce(const Node &node);

/// An NCCL communicator over the ranks of a bootstrap, on one device (built
/// with the toolkit and NCCL; elsewhere create fails saying why).
class NcclCommunicator {
public:
  /// Opens libnccl.so.2, agrees on a unique id through \p bootstrap and
  /// makes this rank's communicator on CUDA device \p deviceOrdinal (the
  /// current device). Every rank must call it.
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  create(const CollectiveBootstrap &bootstrap, int deviceOrdinal);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  /// The ranks of the communicator.
  int getWorldSize() const { return worldSize; }
  /// NCCL's version, e.g. "2.28.3".
  const std::string &getVersion() const { return version; }

  /// Enqueues on \p stream the all-reduce of each operands[i] (counts[i]
  /// elements of \p dtype: f32, f16 or bf16) into results[i] (may be the
  /// same buffer), summing or, with \p mean, averaging over the ranks, as
  /// one NCCL group. Errors name the call and \p node.
  llvm::Error allReduce(const Node &node, llvm::ArrayRef<const void *> operands,
                        llvm::ArrayRef<void *> results,
                        llvm::ArrayRef<int64_t> counts, DType dtype, bool mean,
                        CUstream_st *stream);
  /// The error of an asynchronous NCCL failure (a peer that died, a
  /// network error) since the last call, naming \p node; success if none.
  llvm::Error checkAsyncError(const Node *node);

private:
  NcclCommunicator() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
  int worldSize = 1;
  std::string version;
};

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_NCCLCOLLECTIVES_H
