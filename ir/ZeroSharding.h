//===- ZeroSharding.h - The record of a ZeRO-sharded step ------*- C++ -*-===//
//
// ZeRO stages 1 and 2 (passes/distributed/ZeroShard.h) give every rank 1/N of
// the optimizer state (stage 2: also of the gradient accumulation buffer) as
// flat per-bucket shards. Those shards are graph inputs whose types are no
// longer the parameters', so the training signature's per-parameter slots
// cannot name them all: the bucket's moment shards are recorded as the
// optimizer state of the bucket's first parameter (so the planner, the
// runtime and checkpoints treat them as optimizer state) and this record,
// kept in the module's metadata (saved in the .gm and in exported ONNX),
// says which state is sharded, over how many ranks and how big each shard
// is; the planner reads the gradient shards' category from it and the
// runtime zero-fills them as accumulators.
//
// Metadata keys:
//   gmopt.zero          stage=S;ranks=N;buckets=K
//   gmopt.zero.bucket.B elements=E;shard=S;params=a,b;gradient=G;state=m,v;
//                       shapes=4x6,64;whole=a.m0,b.m0|a.m1,b.m1
// (`gradient` is empty at stage 1, where the gradients stay whole;
// `shapes` are the parameters' shapes, `x`-separated, `scalar` for rank 0;
// `whole` names, per state shard, the unsharded tensors it is a shard of,
// one per parameter: the names a single-process step gives them).
//
// Checkpoints are whole: getZeroShardGroups lists every sharded input with
// the whole tensors it is 1/N of, sliceZeroShard cuts a rank's shard from
// whole tensors (a checkpoint restored on any world size) and
// assembleZeroWhole puts the ranks' gathered shards back together.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_ZEROSHARDING_H
#define GMOPT_IR_ZEROSHARDING_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {

class Module;

/// One flat bucket of a sharded step.
struct ZeroBucketRecord {
  /// Elements of the bucket's parameters together (before padding).
  int64_t elements = 0;
  /// Elements of one rank's shard: ceil(elements / ranks).
  int64_t shardElements = 0;
  /// The parameters, in flat-bucket order.
  std::vector<std::string> params;
  /// The gradient accumulation shard input (stage 2), or empty.
  std::string gradientShard;
  /// The optimizer-state shard inputs (AdamW: two moments; SGD: none).
  std::vector<std::string> stateShards;
  /// The parameters' shapes, in `params` order.
  std::vector<std::vector<int64_t>> paramShapes;
  /// Per state shard, the whole state tensors of the parameters (in
  /// `params` order) it shards.
  std::vector<std::vector<std::string>> wholeStates;
};

/// The ZeRO stage, world size and buckets of a module.
struct ZeroShardingRecord {
  int64_t stage = 0;
  int64_t ranks = 1;
  std::vector<ZeroBucketRecord> buckets;
};

/// One sharded input and the whole tensors it is 1/N of: rank r holds
/// elements [r * shardElements, (r + 1) * shardElements) of the whole
/// tensors' flat concatenation (in order), zero-padded to ranks *
/// shardElements.
struct ZeroShardGroup {
  /// The shard input's name.
  std::string shard;
  /// The whole tensors, in flat-bucket order, and their shapes.
  std::vector<std::string> whole;
  std::vector<std::vector<int64_t>> shapes;
  int64_t shardElements = 0;
  /// Whether the whole tensors are parameters (ZeRO stage 3's parameter
  /// shards) rather than optimizer state.
  bool holdsParameters = false;
};

/// The sharded inputs of \p record that a checkpoint holds whole (the
/// optimizer-state shards of every bucket). Fails when the record lacks the
/// shapes or whole names (a .gm from before they were recorded).
llvm::Expected<std::vector<ZeroShardGroup>>
getZeroShardGroups(const ZeroShardingRecord &record);

/// Rank \p rank's shard of \p group, cut from the whole tensors \p whole
/// (fp32, one per group.whole, each of its shape's element count); the
/// padding past the last whole element is zero.
llvm::Expected<std::vector<float>>
sliceZeroShard(const ZeroShardGroup &group, int64_t rank, int64_t ranks,
               llvm::ArrayRef<llvm::ArrayRef<float>> whole);

/// The whole tensors of \p group from \p gathered, every rank's shard in
/// rank order (ranks * shardElements floats), one per group.whole.
llvm::Expected<std::vector<std::vector<float>>>
assembleZeroWhole(const ZeroShardGroup &group, int64_t ranks,
                  llvm::ArrayRef<float> gathered);

/// The data-parallel layout of a module: the world size its collectives
/// were placed for (1 without any) and the ZeRO stage (0 without a record).
struct DataParallelLayout {
  int64_t ranks = 1;
  int64_t stage = 0;
};
/// Reads \p module's layout off its record and its collectives.
DataParallelLayout getDataParallelLayout(const Module &module);

/// Writes \p record into \p module's metadata, replacing any earlier one.
void recordZeroSharding(Module &module, const ZeroShardingRecord &record);
/// The record of \p module, or nullopt when it is not ZeRO-sharded (or the
/// record does not parse).
std::optional<ZeroShardingRecord> readZeroSharding(const Module &module);

} // namespace gmopt

#endif // GMOPT_IR_ZEROSHARDING_H
