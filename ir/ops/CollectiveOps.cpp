//===- CollectiveOps.cpp - Schemas of gmopt's collective ops -------------===//
//
// Registers the data-parallel collectives of the `gmopt` domain (see
// ir/Collectives.h). gmopt.AllReduce takes a bucket of gradients and returns
// each reduced over the ranks; it has TraitSideEffect because it talks to
// the other ranks: dead-code elimination must not drop it, CSE must not
// merge two of them and the scheduler keeps the collectives in one order on
// every rank (a reordering on one rank alone would deadlock). It writes none
// of its operands. Its cost counts the ring all-reduce's network traffic.
//
//===----------------------------------------------------------------------===//

#include "ir/Collectives.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeInference.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;
using namespace gmopt::ops;

uint64_t gmopt::ringAllReduceTraffic(uint64_t bucketBytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  return bucketBytes / static_cast<uint64_t>(ranks) * 2 *
         static_cast<uint64_t>(ranks - 1);
}

namespace {

llvm::Error inferAllReduce(InferenceContext &ctx) {
  std::string reduction = ctx.getStringAttr("reduction");
  if (reduction != "sum" && reduction != "mean")
    return ctx.error("reduction must be \"sum\" or \"mean\", got \"" +
                     reduction + "\"");
  if (ctx.getIntAttr("ranks", 1) < 1)
    return ctx.error(llvm::formatv("ranks must be at least 1, got {0}",
                                   ctx.getIntAttr("ranks", 1)));
  if (ctx.getNumOutputs() != ctx.getNumInputs())
    return ctx.error(llvm::formatv("{0} operands but {1} results: a bucket "
                                   "returns one reduced value per operand",
                                   ctx.getNumInputs(), ctx.getNumOutputs()));
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i) {
    if (!ctx.hasInput(i))
      return ctx.error(llvm::formatv("operand {0} is absent", i));
    const TensorType &type = ctx.getInputType(i);
    if (!isFloatingPoint(type.getDType()))
      return ctx.error(llvm::formatv("operand {0} is {1}; only floating-point "
                                     "tensors are reduced",
                                     i, type.str()));
    setOutput(ctx, i, type);
  }
  return llvm::Error::success();
}

/// One addition per element and rank; the bucket is read and written once
/// locally, and the ring all-reduce's traffic is added to both directions.
OpCost allReduceCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  int64_t ranks = 1;
  if (const Attribute *attr = node.getAttr("ranks"))
    ranks = attr->getInt();
  uint64_t elements = 0;
  for (const Value *operand : node.getOperands())
    if (operand)
      elements += staticElements(operand->getType());
  cost.flops = elements * static_cast<uint64_t>(ranks > 1 ? ranks - 1 : 0);
  uint64_t traffic = ringAllReduceTraffic(cost.bytesRead, ranks);
  cost.bytesRead += traffic;
  cost.bytesWritten += traffic;
  return cost;
}

} // namespace

void ops::registerCollectiveOps(OpRegistry &registry) {
  SchemaBuilder(kGmoptDomain, kAllReduceOp, 1)
      .inputs(1, kVariadic)
      .outputs(1, kVariadic)
      .attrString("reduction", "mean")
      .attrInt("ranks", 1)
      .traits(TraitSideEffect)
      .writesOperands(
          [](const Node &) { return llvm::SmallVector<unsigned, 8>(); })
      .amp(AmpClass::None)
      .infer(inferAllReduce)
      .cost(allReduceCost)
      .add(registry);
}
