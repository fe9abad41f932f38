//===- Collectives.h - Names of gmopt's collective graph ops ----*- C++ -*-===//
//
// Data-parallel training exchanges gradients between ranks with collective
// operations that are ordinary graph nodes, so that every pass sees them
// and the planner counts their buffers. They live in gmopt's own domain
// `gmopt` rather than in com.microsoft: ONNX Runtime's NcclAllReduce names
// one transport (NCCL), only sums and carries no rank count, while gmopt's
// op is transport-neutral (MPI on the CPU backend, NCCL on CUDA), can average
// and records the world size it was placed for, which its cost model and the
// per-rank planning of `gmopt-compile --ranks N` read without any machines.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_COLLECTIVES_H
#define GMOPT_IR_COLLECTIVES_H

#include "ir/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace gmopt {

/// gmopt's own op domain (collectives).
constexpr llvm::StringLiteral kGmoptDomain = "gmopt";

/// `gmopt.AllReduce(x1, ..., xk) {reduction = "mean"|"sum", ranks = N}`:
/// result i is the element-wise sum (or mean) of operand i over all N ranks.
/// The k operands form one bucket that moves in a single collective call.
/// With `in_place = 1` the fp32 operands are reduced in place (written
/// operands) and the one result is a bool[1] done flag.
constexpr llvm::StringLiteral kAllReduceOp = "AllReduce";

/// `gmopt.AllReduceStart(x1, ..., xk) {reduction, ranks = N}` -> handle:
/// starts the in-place all-reduce of an fp32 bucket and returns while it is
/// in flight (the data-parallel pass's `overlap`). The handle is the packed
/// f32[E] bucket the exchange runs in (E = the operands' elements), or a
/// bool[1] token for a bucket of one tensor, which is reduced in its own
/// buffer. The bucket's buffers stay live and unwritten until the wait,
/// which reads them all.
constexpr llvm::StringLiteral kAllReduceStartOp = "AllReduceStart";

/// `gmopt.AllReduceWait(handle, x1, ..., xk) {reduction, ranks = N}` ->
/// bool[1]: completes the all-reduce its AllReduceStart started and writes
/// the reduced (summed or averaged) values into x1..xk in place (written
/// operands); the result is a done flag.
constexpr llvm::StringLiteral kAllReduceWaitOp = "AllReduceWait";

/// `gmopt.ReduceScatter(x1, ..., xk) {reduction, ranks = N}` -> f32[S]:
/// the operands are flattened into one bucket of E elements, padded with
/// zeros to N * S (S = zeroShardElements(E, N)), summed (or averaged) over
/// the ranks, and rank r keeps elements [r * S, (r + 1) * S) (ZeRO's
/// gradient shard).
constexpr llvm::StringLiteral kReduceScatterOp = "ReduceScatter";

/// `gmopt.AllGather(shard, w1, ..., wk) {ranks = N}` -> bool[1]: gathers
/// every rank's f32[S] shard into the flat bucket of w1..wk (in rank order)
/// and writes it back into w1..wk in place, dropping the padding (ZeRO's
/// parameter all-gather after each rank updated its shard).
constexpr llvm::StringLiteral kAllGatherOp = "AllGather";

/// `gmopt.Shard(x1, ..., xk) {ranks = N}` -> f32[S]: this rank's slice of
/// the operands' flat, zero-padded bucket (no communication; the slice
/// depends on the rank the step runs on).
constexpr llvm::StringLiteral kShardOp = "Shard";

/// True for every op of the gmopt domain that talks to other ranks.
bool isCommunicatingCollective(const Node &node);

/// True for the collectives that reduce over the ranks and so carry a
/// `reduction`: AllReduce, AllReduceStart, AllReduceWait, ReduceScatter.
bool isReducingCollective(const Node &node);

/// What a collective's attributes say, decoded in one place: shape
/// inference, the cost model, the CPU kernels and the CUDA plan read it.
struct CollectiveAttrs {
  /// `ranks`: the world size the node was placed for.
  int64_t ranks = 1;
  /// A reducing collective's `reduction` is "mean" (else "sum").
  bool mean = true;
  /// AllReduce's `in_place = 1`: the fp32 operands are reduced in place.
  bool inPlace = false;
};

/// \p node's collective attributes: an error (a bare message; callers name
/// the node their own way) for `ranks` below 1 or, on a reducing
/// collective, a `reduction` other than mean or sum.
llvm::Expected<CollectiveAttrs> getCollectiveAttrs(const Node &node);

/// \p node's `ranks` as getCollectiveAttrs decodes it, 1 where it does not
/// decode (for the cost model, which the verifier runs after).
int64_t getCollectiveRanks(const Node &node);

/// Elements of one rank's shard of a bucket of \p elements over \p ranks:
/// ceil(elements / ranks) (the bucket is padded to ranks * shard).
int64_t zeroShardElements(int64_t elements, int64_t ranks);

/// One contiguous run of a flat bucket range that comes from one operand:
/// elements [operandOffset, operandOffset + count) of operand `operand` are
/// elements [rangeOffset, rangeOffset + count) of the range.
struct BucketPiece {
  unsigned operand = 0;
  int64_t operandOffset = 0;
  int64_t rangeOffset = 0;
  int64_t count = 0;
};

/// The pieces of flat bucket elements [begin, begin + count) of a bucket
/// whose operands hold \p operandElements elements each, in order; empty
/// operands give no piece. Range positions no piece covers (past the
/// bucket: ZeRO's padding) are zero in every collective. Shared by the CPU
/// and CUDA kernels, which pack and unpack buckets by it.
std::vector<BucketPiece> bucketPieces(llvm::ArrayRef<int64_t> operandElements,
                                      int64_t begin, int64_t count);

/// Bytes that one rank sends (and receives) in a ring all-reduce of
/// \p bucketBytes over \p ranks ranks: 2 (N - 1) / N of the bucket; 0 for
/// a single rank.
uint64_t ringAllReduceTraffic(uint64_t bucketBytes, int64_t ranks);

/// Bytes one rank sends (and receives) in a ring reduce-scatter or
/// all-gather whose per-rank shard is \p shardBytes: (N - 1) shards; 0 for
/// a single rank. A reduce-scatter followed by an all-gather moves what one
/// all-reduce does.
uint64_t ringShardTraffic(uint64_t shardBytes, int64_t ranks);

/// Bytes \p node sends over the network on one rank (a ring all-reduce,
/// reduce-scatter or all-gather of its bucket); 0 for every other node and
/// for one rank. The same bytes are part of its OpCost traffic.
uint64_t collectiveNetworkBytes(const Node &node);

} // namespace gmopt

#endif // GMOPT_IR_COLLECTIVES_H
