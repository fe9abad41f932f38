//===- DataParallel.cpp - Gradient all-reduce for data parallelism --------===//
//
// Implements the `data-parallel` pass (see DataParallel.h): analysis (which
// gradients, in which order, how large) -> plan (buckets) -> rewrite (one
// gmopt.AllReduce per bucket after its last gradient's producer, uses
// redirected, dependent users moved after the collective).
//
//===----------------------------------------------------------------------===//

#include "passes/distributed/DataParallel.h"
#include "passes/DebugOutput.h"
#include "passes/planning/MemoryLimit.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

#define DEBUG_TYPE "gmopt-data-parallel"

using namespace gmopt;

namespace {

llvm::Error dataParallelError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "data-parallel: " + message);
}

/// Position of every node in the graph's current order.
llvm::DenseMap<const Node *, size_t> nodePositions(const Graph &graph) {
  llvm::DenseMap<const Node *, size_t> positions;
  size_t index = 0;
  for (const Node &node : graph.getNodes())
    positions[&node] = index++;
  return positions;
}

/// Position of \p value's producer; inputs and initializers come first.
int64_t
producerPosition(const Value *value,
                 const llvm::DenseMap<const Node *, size_t> &positions) {
  if (const Node *def = value->getDefiningNode())
    return static_cast<int64_t>(positions.lookup(def));
  return -1;
}

/// Moves the nodes before \p collective that read \p reduced (its results,
/// or the operands it reduces in place) and the nodes depending on those
/// right after it, keeping their order; \p keep (a split collective's
/// start) reads them but stays.
/// Fails when that would move a write to some storage past a node reading
/// or writing it, or when the collective would depend on itself.
llvm::Error moveDependentsAfter(Graph &graph, Node *collective,
                                Graph::iterator regionBegin,
                                llvm::ArrayRef<Value *> reduced,
                                const Node *keep = nullptr) {
  llvm::DenseSet<const Value *> tainted(reduced.begin(), reduced.end());
  std::vector<Node *> moved;
  llvm::DenseSet<const Node *> movedSet;
  for (auto it = regionBegin; &*it != collective; ++it) {
    Node &node = *it;
    if (&node == keep)
      continue;
    bool dependent = llvm::any_of(node.getOperands(), [&](const Value *v) {
      return v && tainted.count(v);
    });
    if (!dependent)
      continue;
    moved.push_back(&node);
    movedSet.insert(&node);
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (const Value *result = node.getResult(i))
        tainted.insert(result);
  }
  for (const Value *operand : collective->getOperands())
    if (operand && operand->getDefiningNode() &&
        movedSet.count(operand->getDefiningNode()))
      return dataParallelError(
          "gradient '" + operand->getName() +
          "' depends on another gradient of its bucket; the all-reduce "
          "cannot be placed");
  if (moved.empty())
    return llvm::Error::success();

  // Storage a moved node writes must not be read or written by a node it
  // now passes, nor may a passed node write storage a moved node reads.
  const OpRegistry &registry = OpRegistry::instance();
  auto written = [&](const Node &node) {
    llvm::SmallVector<const Value *, 4> values;
    for (unsigned k : getWrittenOperands(node, registry.lookup(node)))
      values.push_back(node.getOperand(k));
    return values;
  };
  for (Node *node : moved) {
    llvm::SmallVector<const Value *, 4> writes = written(*node);
    for (auto it = std::next(node->getIterator()); &*it != collective; ++it) {
      if (movedSet.count(&*it))
        continue;
      llvm::SmallVector<const Value *, 4> passedWrites = written(*it);
      for (const Value *operand : it->getOperands()) {
        // (A passed node writing its own operand is no conflict: only
        // storage both nodes touch is.)
        bool conflict =
            llvm::is_contained(writes, operand) ||
            llvm::any_of(node->getOperands(), [&](const Value *mine) {
              return mine && llvm::is_contained(passedWrites, mine);
            });
        if (operand && conflict)
          return dataParallelError("cannot move '" + node->getName() +
                                   "' after the all-reduce "
                                   "of its gradient: it would pass '" +
                                   it->getName() +
                                   "', which shares storage it writes");
      }
    }
  }
  Graph::iterator after = std::next(collective->getIterator());
  for (Node *node : moved)
    graph.moveNode(node, after);
  return llvm::Error::success();
}

/// Places a bucket's split all-reduce (`overlap`): gmopt.AllReduceStart
/// at \p builder's insertion point (right after the last gradient's
/// producer) and gmopt.AllReduceWait as late as the graph allows - just
/// before the first node that reads a gradient of the bucket or depends on
/// one, which all move after the wait. The nodes between start and wait
/// (the rest of the backward pass) run while the exchange is in flight.
/// When the gradients' users cannot be moved past those nodes (storage
/// they share), the wait stands right after the start instead. Returns 1
/// when the wait is not right after the start (the bucket overlaps).
llvm::Expected<unsigned> placeOverlapped(Graph &graph, Builder &builder,
                                         Graph::iterator regionBegin,
                                         llvm::ArrayRef<Value *> grads,
                                         llvm::ArrayRef<NamedAttribute> attrs,
                                         const std::string &name) {
  std::vector<NamedAttribute> startAttrs(attrs.begin(), attrs.end());
  Node *start = builder.create(
      OpName{kGmoptDomain.str(), kAllReduceStartOp.str()}, grads,
      {grads.size() == 1
           ? TensorType::get(DType::Bool, {1})
           : TensorType::get(DType::F32, {[&] {
                               int64_t elements = 0;
                               for (const Value *grad : grads)
                                 elements += grad->getType().getNumElements();
                               return elements;
                             }()})},
      startAttrs, name + ".start");
  start->getResult(0)->setName(name + ".handle");
  llvm::SmallVector<Value *, 8> waitOperands = {start->getResult(0)};
  waitOperands.append(grads.begin(), grads.end());
  builder.setInsertionPointToEnd();
  Node *wait = builder.create(
      OpName{kGmoptDomain.str(), kAllReduceWaitOp.str()}, waitOperands,
      {TensorType::get(DType::Bool, {1})}, startAttrs, name + ".wait");
  wait->getResult(0)->setName(name + ".done");
  // The start reads the gradients, but stays before the wait.
  llvm::Error late =
      moveDependentsAfter(graph, wait, regionBegin, grads, start);
  if (!late) {
    // Nothing between start and wait may read or write the gradients.
    for (auto it = std::next(start->getIterator()); &*it != wait; ++it)
      assert(llvm::none_of(it->getOperands(),
                           [&](const Value *v) {
                             return v && llvm::is_contained(grads, v);
                           }) &&
             "a gradient is read while its all-reduce is in flight");
    return std::next(start->getIterator()) != wait->getIterator() ? 1u : 0u;
  }
  GMOPT_DEBUG(gmopt::dbgs() << "data-parallel: " << name << " not overlapped: "
                            << llvm::toString(std::move(late)) << '\n');
  llvm::consumeError(std::move(late));
  graph.moveNode(wait, std::next(start->getIterator()));
  if (auto err = moveDependentsAfter(graph, wait, regionBegin, grads, start))
    return err;
  return 0u;
}

} // namespace

ProducerSpan gmopt::findProducerSpan(Graph &graph,
                                     llvm::ArrayRef<Value *> values) {
  llvm::SmallPtrSet<const Node *, 16> producers;
  bool fromStart = false;
  for (const Value *value : values) {
    if (const Node *def = value->getDefiningNode())
      producers.insert(def);
    else
      fromStart = true;
  }
  ProducerSpan span;
  for (Node &node : graph.getNodes()) {
    if (!producers.count(&node))
      continue;
    if (!span.first && !fromStart)
      span.first = &node;
    span.last = &node;
  }
  return span;
}

void DataParallelPlan::print(llvm::raw_ostream &os,
                             const Module &module) const {
  llvm::ArrayRef<ParamInfo> params = module.getSignature().getParams();
  for (size_t k = 0, e = buckets.size(); k != e; ++k) {
    const GradientBucket &bucket = buckets[k];
    os << "bucket " << k << ": " << bucket.params.size() << " gradients, "
       << bucket.bytes << " bytes:";
    for (unsigned index : bucket.params)
      os << ' ' << params[index].grad->getName();
    os << '\n';
  }
}

llvm::Expected<DataParallelPlan>
gmopt::planGradientBuckets(const Module &module, uint64_t bucketBytes) {
  llvm::ArrayRef<ParamInfo> params = module.getSignature().getParams();
  llvm::DenseMap<const Node *, size_t> positions =
      nodePositions(module.getGraph());
  std::vector<unsigned> order;
  for (unsigned i = 0, e = params.size(); i != e; ++i) {
    const ParamInfo &info = params[i];
    if (!info.trainable || !info.grad)
      continue;
    const TensorType &type = info.grad->getType();
    if (!type.hasStaticShape())
      return dataParallelError("gradient '" + info.grad->getName() +
                               "' has no static shape (" + type.str() +
                               "); bind its dims with --dim");
    if (!isFloatingPoint(type.getDType()))
      return dataParallelError("gradient '" + info.grad->getName() + "' is " +
                               type.str() + ", not floating point");
    order.push_back(i);
  }
  // Backward order: the order the gradients become final; ties (the same
  // producer) keep signature order.
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    return producerPosition(params[a].grad, positions) <
           producerPosition(params[b].grad, positions);
  });
  DataParallelPlan plan;
  for (unsigned index : order) {
    if (plan.buckets.empty() || plan.buckets.back().bytes >= bucketBytes)
      plan.buckets.emplace_back();
    GradientBucket &bucket = plan.buckets.back();
    bucket.params.push_back(index);
    bucket.bytes += params[index].grad->getType().getSizeInBytes();
  }
  return plan;
}

DataParallelPass::DataParallelPass() : DataParallelPass(Options()) {}

DataParallelPass::DataParallelPass(Options initial) : options(initial) {
  declareOption("ranks", options.ranks,
                "the world size; 1 places no collective", 1, int64_t(1) << 24);
  declareOption("bucket-bytes", options.bucketBytes,
                "smallest gradient bucket: bytes or `25MiB`, `4MB`");
  declareOption("reduction", options.reduction,
                "`mean` (global batch mean loss) or `sum` over ranks");
  declareOption("in-place", options.inPlace,
                "reduce each fp32 bucket in place in the gradients' buffers "
                "(no reduced copy)");
  declareOption("overlap", options.overlap,
                "split each in-place bucket's all-reduce into a start after "
                "its last gradient and a wait before its first user, so it "
                "runs while the rest of the backward pass computes");
  declareStatistic("buckets", "gradient buckets all-reduced");
  declareStatistic("gradients", "gradients all-reduced");
  declareStatistic("in-place-buckets",
                   "buckets reduced in place (no reduced copy)");
  declareStatistic("overlapped-buckets",
                   "buckets whose all-reduce runs while later nodes compute");
  declareStatistic("bucket-bytes",
                   "bytes of all buckets (one rank's share of the exchange)");
}

llvm::Expected<bool> DataParallelPass::run(Module &module,
                                           PassContext &context) {
  if (options.reduction != "mean" && options.reduction != "sum")
    return dataParallelError("reduction must be mean or sum, got '" +
                             options.reduction + "'");
  auto limit =
      parseMemoryLimit(options.bucketBytes, "data-parallel: bucket-bytes");
  if (!limit)
    return limit.takeError();
  if (!limit->bytes)
    return dataParallelError("bucket-bytes must be bytes, not a percentage");
  Graph &graph = module.getGraph();
  for (const Node &node : graph.getNodes())
    if (node.isa(kGmoptDomain, kAllReduceOp) ||
        node.isa(kGmoptDomain, kAllReduceStartOp))
      return dataParallelError("the module already has all-reduces (node '" +
                               node.getName() + "')");
  if (options.ranks == 1)
    return false;
  if (!module.getSignature().hasGradients())
    return dataParallelError("the module has no gradients to all-reduce");

  auto plan = planGradientBuckets(module, *limit->bytes);
  if (!plan)
    return plan.takeError();
  GMOPT_DEBUG({
    gmopt::dbgs() << "data-parallel plan:\n";
    plan->print(gmopt::dbgs(), module);
  });
  if (!module.opsetImports.count(kGmoptDomain.str()))
    module.opsetImports[kGmoptDomain.str()] = 1;

  TrainingSignature &signature = module.getSignature();
  uint64_t gradients = 0, bytes = 0, inPlaceBuckets = 0, overlapped = 0;
  for (size_t k = 0, e = plan->buckets.size(); k != e; ++k) {
    const GradientBucket &bucket = plan->buckets[k];
    // Re-read the parameters each bucket: earlier buckets re-pointed grads.
    llvm::SmallVector<const Value *, 8> paramValues;
    llvm::SmallVector<Value *, 8> grads;
    llvm::SmallVector<TensorType, 8> types;
    for (unsigned index : bucket.params) {
      const ParamInfo &info = signature.getParams()[index];
      paramValues.push_back(info.param);
      grads.push_back(info.grad);
      types.push_back(info.grad->getType());
    }
    ProducerSpan span = findProducerSpan(graph, grads);
    // In place unless a gradient is not fp32, is no node's result or is a
    // view (writing it would write the viewed value, whose other readers
    // are not the gradient's).
    const OpRegistry &registry = OpRegistry::instance();
    bool inPlace =
        options.inPlace && llvm::all_of(grads, [&](const Value *grad) {
          const Node *def = grad->getDefiningNode();
          const OpSchema *schema = def ? registry.lookup(*def) : nullptr;
          return grad->getType().getDType() == DType::F32 && schema &&
                 !schema->hasTrait(TraitView) && llvm::count(grads, grad) == 1;
        });
    Builder builder(graph);
    builder.setPhase(Phase::Backward);
    if (span.last)
      builder.setInsertionPointAfter(span.last);
    else
      builder.setInsertionPointToStart();
    Graph::iterator regionBegin =
        span.first ? span.first->getIterator() : graph.begin();
    std::vector<NamedAttribute> attrs = {
        NamedAttribute{"reduction", Attribute::getString(options.reduction)},
        NamedAttribute{"ranks", Attribute::getInt(options.ranks)}};
    std::string name = "allreduce.bucket" + std::to_string(k);
    if (inPlace && options.overlap) {
      auto placed = placeOverlapped(graph, builder, regionBegin, grads, attrs,
                                    "allreduce.bucket" + std::to_string(k));
      if (!placed)
        return placed.takeError();
      overlapped += *placed;
      ++inPlaceBuckets;
      gradients += grads.size();
      bytes += bucket.bytes;
      continue;
    }
    if (inPlace) {
      attrs.push_back(NamedAttribute{"in_place", Attribute::getInt(1)});
      Node *collective =
          builder.create(OpName{kGmoptDomain.str(), kAllReduceOp.str()}, grads,
                         {TensorType::get(DType::Bool, {1})}, attrs, name);
      collective->getResult(0)->setName(name + ".done");
      if (auto err = moveDependentsAfter(graph, collective, regionBegin, grads))
        return err;
      ++inPlaceBuckets;
      gradients += grads.size();
      bytes += bucket.bytes;
      continue;
    }
    Node *collective =
        builder.create(OpName{kGmoptDomain.str(), kAllReduceOp.str()}, grads,
                       types, attrs, name);
    llvm::SmallVector<Value *, 8> results;
    for (unsigned i = 0, n = grads.size(); i != n; ++i) {
      Value *reduced = collective->getResult(i);
      std::string name = grads[i]->getName().str();
      grads[i]->replaceAllUsesWith(reduced);
      collective->setOperand(i, grads[i]);
      grads[i]->setName(name + ".local");
      reduced->setName(name);
      bool found = signature.setGrad(paramValues[i], reduced);
      assert(found && "bucket parameter left the signature");
      (void)found;
      results.push_back(reduced);
    }
    if (auto err = moveDependentsAfter(graph, collective, regionBegin, results))
      return err;
    gradients += grads.size();
    bytes += bucket.bytes;
  }
  addStatistic(context, "buckets", plan->buckets.size());
  addStatistic(context, "gradients", gradients);
  addStatistic(context, "in-place-buckets", inPlaceBuckets);
  addStatistic(context, "overlapped-buckets", overlapped);
  addStatistic(context, "bucket-bytes", bytes);
  return true;
}
