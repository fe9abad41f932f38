//===- DataParallel.h - Gradient all-reduce for data parallelism -*- C++
//-*-===//
//
// Data-parallel training (ZeRO stage 0): every rank holds all parameters,
// runs the step on its share of the global batch and, before the gradients
// reach the accumulators and the optimizer, averages them over the ranks.
// The `data-parallel` pass places that exchange in the graph as
// gmopt.AllReduce nodes (ir/Collectives.h), so the planner counts their
// buffers and a backend may overlap them with the rest of the backward pass:
//
//   * each trainable parameter's gradient is final once its producer has run
//     (ONNX Runtime's graph then adds it into X_grad.accumulation.buffer with
//     InPlaceAccumulatorV2, which the in-graph optimizer reads);
//   * gradients are grouped in the order they become final (backward order)
//     into buckets of at least `bucket-bytes` (PyTorch DDP's 25 MiB) - the
//     last bucket may be smaller - and each bucket's AllReduce is placed right
//     after the producer of its last gradient;
//   * every other use of a gradient (its accumulator, a direct optimizer
//     input, a graph output) reads the reduced value instead, which takes
//     the gradient's name and its place in the training signature (the local
//     value is renamed `X_grad.local`); those users, and what depends on
//     them, move after the AllReduce when they stood before it.
//
// In place (`in-place=true`, the default, for buckets of fp32 gradients
// that are node results and not views), the all-reduce instead writes the
// reduced values into the local gradients' own buffers and returns only a
// done flag; the gradients keep their names and signature slots and their
// readers move after it. A bucket's gradients are then held once (plus the
// packed bucket as the kernel's workspace while it runs, none for a bucket
// of one tensor) instead of three times: local value, packed bucket and
// reduced copy.
//
// Overlapped (`overlap=true`, in-place buckets only), each bucket's
// all-reduce is split: gmopt.AllReduceStart right after the producer of its
// last gradient starts the exchange and returns; gmopt.AllReduceWait, placed
// just before the first node that reads one of the bucket's gradients
// (after the rest of the backward pass where the graph allows), completes it
// and writes the reduced values in place. The wait reads every gradient of
// the bucket and the start's handle (the packed bucket), so the planner
// keeps them all live, and no other node reads or writes them, from start to
// wait (as in PyTorch DDP's reducer, the exchange of the last layers'
// gradients runs while the first layers' are computed).
//
// With the mean reduction and equal per-rank batches this makes the
// accumulated gradient the gradient of the global batch's mean loss, so the
// optimizer takes the single-process step on every rank.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_DISTRIBUTED_DATAPARALLEL_H
#define GMOPT_PASSES_DISTRIBUTED_DATAPARALLEL_H

#include "passes/Pass.h"

#include <string>
#include <vector>

namespace gmopt {

/// One bucket of the data-parallel plan.
struct GradientBucket {
  /// Indices into TrainingSignature::getParams() of the bucket's
  /// gradients, in the order they become final.
  std::vector<unsigned> params;
  /// Sum of the gradients' bytes.
  uint64_t bytes = 0;
};

/// What the pass will place: buckets in backward order.
struct DataParallelPlan {
  std::vector<GradientBucket> buckets;
  /// One line per bucket: `bucket K: N gradients, B bytes: a_grad, ...`.
  void print(llvm::raw_ostream &os, const Module &module) const;
};

/// Groups the trainable gradients of \p module in the order their producers
/// stand in the graph into buckets of at least \p bucketBytes (the last may
/// be smaller). Fails on a gradient whose size is not static or whose dtype
/// is not floating point.
llvm::Expected<DataParallelPlan> planGradientBuckets(const Module &module,
                                                     uint64_t bucketBytes);

class Graph;
class Node;
class Value;

/// Where a bucket's gradients come into being in a graph's current order.
struct ProducerSpan {
  /// The earliest producer; null when some value has none (a graph input or
  /// initializer, there from the start).
  Node *first = nullptr;
  /// The latest producer; null when no value has one.
  Node *last = nullptr;
};

/// One walk over \p graph: the span of \p values' producers. The
/// data-parallel and zero-shard passes place a bucket's collective after
/// `last` (and move what reads the gradients from `first` on), and call it
/// per bucket because each placement edits the order.
ProducerSpan findProducerSpan(Graph &graph, llvm::ArrayRef<Value *> values);

/// The `data-parallel` pass.
class DataParallelPass : public Pass {
public:
  /// Tunables; each is a pipeline option
  /// (`data-parallel{ranks=2,bucket-bytes=25MiB}`).
  struct Options {
    /// The world size the step runs on; 1 places nothing.
    int64_t ranks = 1;
    /// The smallest bucket, as bytes or with a unit (`25MiB`, `4MB`).
    std::string bucketBytes = "25MiB";
    /// `mean` (the global batch's mean loss) or `sum`.
    std::string reduction = "mean";
    /// Reduce each bucket in place (see the file comment).
    bool inPlace = true;
    /// Split each in-place bucket's all-reduce into AllReduceStart and
    /// AllReduceWait (see the file comment).
    bool overlap = false;
  };

  /// A pass with the default options.
  DataParallelPass();
  /// A pass with \p options.
  explicit DataParallelPass(Options options);

  llvm::StringRef getName() const override { return "data-parallel"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// The current option values.
  const Options &getPassOptions() const { return options; }

private:
  Options options;
};

} // namespace gmopt

#endif // GMOPT_PASSES_DISTRIBUTED_DATAPARALLEL_H
