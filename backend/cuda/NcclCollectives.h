//===- NcclCollectives.h - gmopt's collectives on CUDA over NCCL -*- C++ -*-===//
//
// The CUDA backend runs the data-parallel collectives (ir/Collectives.h)
// with NCCL on the backend's stream:
// - gmopt.AllReduce: one ncclAllReduce per operand of the bucket inside one
//   ncclGroupStart/ncclGroupEnd, with ncclAvg for the mean; in place
//   (`in_place = 1`) the operands are their own results. No packing, so no
//   workspace.
// - gmopt.AllReduceStart / AllReduceWait (the overlapped all-reduce): the
//   start packs a bucket of several tensors into its handle (a bucket of
//   one tensor stays in its buffer) and enqueues the in-place all-reduce on
//   the device's communication stream after an event of its compute
//   stream, so the rest of the backward pass runs beside it; the wait makes
//   the compute stream wait for the all-reduce's done event
//   (cudaStreamWaitEvent: the host never blocks or polls) and unpacks the
//   handle. Both are captured into a CUDA graph as they are.
// - ZeRO's gmopt.ReduceScatter and gmopt.AllGather pack and unpack the
//   flat, zero-padded bucket in the node's planned workspace (ranks x shard
//   floats) around one ncclReduceScatter / ncclAllGather; gmopt.Shard is a
//   local copy of this rank's block. With one rank the bucket is its only
//   shard: it is packed straight into the result (or read straight from
//   the shard) and, where there is a communicator, the collective runs in
//   place, so one GPU exercises the same NCCL calls.
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
// With ranks = 1 and no NCCL the ops are device copies.
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
llvm::Expected<std::vector<uint8_t>> agreeOnUniqueId(
    const CollectiveBootstrap &bootstrap, size_t idBytes,
    llvm::function_ref<llvm::Expected<std::vector<uint8_t>>()> makeId);

/// Success when the collective \p node was placed for \p bootstrap's world
/// size (its `ranks` attribute); else an error naming the node, both sizes
/// and how to launch it.
llvm::Error checkCollectiveWorld(const Node &node,
                                 const CollectiveBootstrap &bootstrap);

/// True for the gmopt-domain collectives the CUDA backend runs (the
/// all-reduces, ZeRO's reduce-scatter, all-gather and shard).
bool isCudaCollective(const Node &node);

/// True when \p module has a collective node (isCudaCollective).
bool hasCollectives(const Module &module);

/// The error for the NCCL call \p call that returned \p result (\p text:
/// ncclGetErrorString's, \p detail: ncclGetLastError's, may be empty), for
/// \p node when it is known.
llvm::Error ncclCallError(llvm::StringRef call, int result,
                          llvm::StringRef text, llvm::StringRef detail,
                          const Node *node);

/// The CUDA kernel check of gmopt.AllReduce: float operands (f32, f16,
/// bf16) with results of the same types and shapes (in place: f32 operands
/// and a bool done flag), a known reduction, and NCCL in the build when it
/// spans several ranks.
llvm::Error checkCudaAllReduce(const Node &node);

/// The CUDA kernel check of the other collectives (AllReduceStart,
/// AllReduceWait, ReduceScatter, AllGather, Shard): static fp32 bucket
/// operands, a handle or shard of the size the bucket needs, a known
/// reduction, and NCCL in the build when the op talks to several ranks.
llvm::Error checkCudaShardedCollective(const Node &node);

/// Workspace bytes the CUDA kernel of collective \p node needs (aligned
/// like every planned buffer): the padded flat bucket (ranks x shard floats) of
/// a ReduceScatter or AllGather over several ranks; 0 otherwise.
uint64_t getCudaCollectiveWorkspaceBytes(const Node &node);

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

  /// The ranks of the communicator, and this process's.
  int getWorldSize() const { return worldSize; }
  int getRank() const { return rank; }
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
  /// Enqueues on \p stream the reduce-scatter of \p send (worldSize x
  /// \p recvCount f32 elements) into \p recv (\p recvCount elements, this
  /// rank's block), summed or averaged. In place when \p recv is \p send's
  /// block of this rank.
  llvm::Error reduceScatter(const Node &node, const void *send, void *recv,
                            int64_t recvCount, bool mean, CUstream_st *stream);
  /// Enqueues on \p stream the all-gather of every rank's \p sendCount f32
  /// elements at \p send into \p recv (worldSize x sendCount, rank order).
  llvm::Error allGather(const Node &node, const void *send, void *recv,
                        int64_t sendCount, CUstream_st *stream);
  /// Starts the in-place f32 all-reduce of \p buffers (counts[i] elements
  /// each) on \p commStream once \p stream reaches this point (an event
  /// recorded on \p stream that \p commStream waits for), records its done
  /// event on \p commStream and returns while it runs; \p key (the
  /// handle's address) names it to waitAllReduce. A key already in flight
  /// is an error.
  llvm::Error startAllReduce(const Node &node, const void *key,
                             llvm::ArrayRef<void *> buffers,
                             llvm::ArrayRef<int64_t> counts, bool mean,
                             CUstream_st *stream, CUstream_st *commStream);
  /// Makes \p stream wait (on the device, cudaStreamWaitEvent) for the
  /// all-reduce started under \p key; an unknown key is an error naming
  /// \p node.
  llvm::Error waitAllReduce(const Node &node, const void *key,
                            CUstream_st *stream);
  /// All-reduces started and not yet waited for.
  size_t getInFlightCount() const;

  /// The error of an asynchronous NCCL failure (a peer that died, a
  /// network error) since the last call, naming \p node; success if none.
  llvm::Error checkAsyncError(const Node *node);

private:
  NcclCommunicator() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
  int worldSize = 1;
  int rank = 0;
  std::string version;
};

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_NCCLCOLLECTIVES_H
