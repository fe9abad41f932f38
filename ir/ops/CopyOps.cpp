//===- CopyOps.cpp - Schemas of gmopt's host<->device copy ops ------------===//
//
// Registers gmopt.CopyToHostStart, gmopt.CopyToDeviceStart and gmopt.CopyWait
// (ir/MemorySpaces.h), the graph ops an offload is made of. They are split
// into start and wait like the overlapped all-reduce, so the schedule and
// liveness see when bytes are in flight. Each has TraitSideEffect (dead-code
// elimination keeps a copy, CSE never merges two, the scheduler keeps them
// in order) but writes none of its operands. CopyWait is a view of its
// operand 0: its result shares the copy's bytes, and its operand 1, the
// copy's source, is read only so that it stays live until the copy is done.
// The rules that pair a start with its wait and keep host memory away from
// kernels are the verifier's (checkMemorySpaceRules); the inference checks
// below are those of types alone.
//
//===----------------------------------------------------------------------===//

#include "ir/Collectives.h"
#include "ir/MemorySpaces.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeInference.h"

using namespace gmopt;
using namespace gmopt::ops;

namespace {

llvm::Error inferCopyStart(InferenceContext &ctx) {
  if (!ctx.hasInput(0))
    return ctx.error("the tensor to copy (operand 0) is absent");
  setOutput(ctx, 0, ctx.getInputType(0));
  return llvm::Error::success();
}

llvm::Error inferCopyWait(InferenceContext &ctx) {
  if (!ctx.hasInput(0) || !ctx.hasInput(1))
    return ctx.error("CopyWait takes the copy's target and its source");
  const TensorType &target = ctx.getInputType(0);
  const TensorType &source = ctx.getInputType(1);
  if (target != source)
    return ctx.error("the copy's target is " + target.str() +
                     " but its source is " + source.str());
  setOutput(ctx, 0, target);
  return llvm::Error::success();
}

/// A copy moves its tensor's bytes once: read on one side, written on the
/// other, no arithmetic.
OpCost copyCost(const Node &node) {
  OpCost cost;
  if (const Value *source = node.getOperand(0))
    cost.bytesRead = cost.bytesWritten = staticBytes(source->getType());
  return cost;
}

llvm::SmallVector<unsigned, 8> writesNothing(const Node &) { return {}; }

} // namespace

void ops::registerCopyOps(OpRegistry &registry) {
  for (llvm::StringRef op : {kCopyToHostStartOp, kCopyToDeviceStartOp})
    SchemaBuilder(kGmoptDomain, op, 1)
        .inputs(1)
        .outputs(1)
        .traits(TraitSideEffect)
        .writesOperands(writesNothing)
        .amp(AmpClass::None)
        .infer(inferCopyStart)
        .cost(copyCost)
        .add(registry);
  SchemaBuilder(kGmoptDomain, kCopyWaitOp, 1)
      .inputs(2)
      .outputs(1)
      .traits(TraitSideEffect | TraitView)
      .writesOperands(writesNothing)
      .amp(AmpClass::None)
      .infer(inferCopyWait)
      .cost(zeroCost())
      .add(registry);
}
