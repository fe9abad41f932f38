//===- ZeroShard.h - ZeRO stages 1 and 2: sharded state --------*- C++ -*-===//
//
// The `zero-shard` pass makes data-parallel training keep 1/N of the
// optimizer state on each of N ranks (ZeRO stage 1, as DeepSpeed does) and,
// at stage 2, 1/N of the gradient accumulation buffer too. It replaces the
// data-parallel pass (ZeRO stage 0, passes/distributed/DataParallel.h) and
// places no all-reduce. The gradients are grouped into the data-parallel pass's
// buckets (planGradientBuckets: backward order, at least `bucket-bytes`
// each); each bucket is one flat vector of E elements (its parameters in
// bucket order), padded with zeros to N * S, S = ceil(E / N), and rank r
// owns elements [r * S, (r + 1) * S):
//
//   * stage 1: the gradients accumulate whole, as on one rank; before the
//     optimizer, gmopt.ReduceScatter(accumulators) gives each rank the mean
//     over the ranks of its gradient shard;
//   * stage 2: gmopt.ReduceScatter(local gradients) is placed once the
//     bucket's last gradient is final (backward order) and its shard is
//     accumulated into one f32[S] buffer per bucket, which replaces the
//     parameters' whole accumulators (full gradients live only until their
//     bucket's reduce-scatter);
//   * both: gmopt.Shard(parameters) copies the rank's parameter shard; the
//     in-graph optimizer (AdamWOptimizer or SGDOptimizerV2, elementwise) is
//     rebuilt over the flat shards - parameter shard, gradient shard and
//     f32[S] moment shards, new graph inputs named `zero.bucketB.stateK`
//     that replace the per-parameter moments - and gmopt.AllGather writes
//     every rank's updated shard back into the parameters.
//
// The padding stays zero: its gradient, moments and parameters are zero, so
// AdamW's and SGD's updates leave it zero. The sharding is recorded in the
// module (ir/ZeroSharding.h) and the moment shards are the optimizer state
// of each bucket's first parameter. The graph is the same on every rank;
// only the collectives and gmopt.Shard read the rank, at run time, so
// `gmopt-compile --ranks N --zero S` plans one rank of any world size.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_DISTRIBUTED_ZEROSHARD_H
#define GMOPT_PASSES_DISTRIBUTED_ZEROSHARD_H

#include "passes/Pass.h"

#include <string>

namespace gmopt {

/// The `zero-shard` pass.
class ZeroShardPass : public Pass {
public:
  /// Tunables; each is a pipeline option
  /// (`zero-shard{stage=2,ranks=8,bucket-bytes=25MiB}`).
  struct Options {
    /// 1 (optimizer state sharded) or 2 (gradients too).
    int64_t stage = 1;
    /// The world size; 1 places nothing.
    int64_t ranks = 1;
    /// The smallest bucket, as bytes or with a unit (`25MiB`, `4MB`).
    std::string bucketBytes = "25MiB";
    /// `mean` (the global batch's mean loss) or `sum`.
    std::string reduction = "mean";
  };

  /// A pass with the default options.
  ZeroShardPass();
  /// A pass with \p options.
  explicit ZeroShardPass(Options options);

  llvm::StringRef getName() const override { return "zero-shard"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_DISTRIBUTED_ZEROSHARD_H
