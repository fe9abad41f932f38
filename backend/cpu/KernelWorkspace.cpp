//===- KernelWorkspace.cpp - Scratch sizes of the CPU kernels --------------===//
//
// The CPU backend's WorkspaceModel for the kernel families that request
// scratch through CpuKernelContext::allocateScratch and keep no decoded
// state of their own: DivGrad's broadcast copies and Pow's exponent
// conversion. Each function mirrors its kernel's requests exactly (aligned,
// in request order), from the node's static types; where the kernel's
// choice cannot be decided statically it reserves the largest request.
// Sizes saturate rather than wrap (scratchBytes, mulCount, addScratch), so
// an estimate beyond any tensor is refused by the planner instead of
// planned small. Kernels that decode their node at prepare - convolutions
// (im2col columns), layer norms, reductions, losses, matrix products
// (batch-transposed operands, 16-bit blocks) and Einsum (a dry run of its
// own contraction sequence) - declare theirs next to their kernels, from
// the same decode. A kernel that asks for more than declared
// still runs (the excess is allocated and counted as unplanned), and the
// kernel and testdata tests fail on it.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelSupport.h"

#include "ir/IR.h"

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

int64_t elementsOf(const Value *value) {
  return value ? value->getType().getNumElements() : 0;
}

/// DivGrad(dY, A, B): dY-shaped temporaries for the quotient and for A and
/// B broadcast to dY's shape, in the staged (fp32) type of 16-bit tensors.
uint64_t divGradWorkspace(const Node &node) {
  const Value *dY = node.getOperand(0);
  uint64_t one =
      scratchBytes(stagedDType(dY->getType().getDType()), elementsOf(dY));
  return addScratch(addScratch(one, one), one);
}

/// Pow(X, Y): Y converted to X's element type when they differ.
uint64_t powWorkspace(const Node &node) {
  const Value *base = node.getOperand(0), *exponent = node.getOperand(1);
  if (!base || !exponent ||
      base->getType().getDType() == exponent->getType().getDType())
    return 0;
  return scratchBytes(base->getType().getDType(), elementsOf(exponent));
}

} // namespace

void cpu::registerKernelWorkspaces(KernelTable &table) {
  table.setWorkspace(kMsDomain, "DivGrad", divGradWorkspace);
  table.setWorkspace("", "Pow", powWorkspace);
}
