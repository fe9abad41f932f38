//===- KernelWorkspace.cpp - Scratch sizes of the CPU kernels --------------===//
//
// The CPU backend's WorkspaceModel for the kernel families that request
// scratch through CpuKernelContext::allocateScratch: convolution columns,
// batch-transposed FusedMatMul operands, DivGrad's broadcast copies and
// Pow's exponent conversion. Each function mirrors its kernel's requests
// exactly (aligned, in request order), from the node's static types and
// attributes; where the kernel's choice cannot be decided statically it
// reserves the largest request. Sizes saturate rather than wrap
// (scratchBytes, mulCount, addScratch), so an estimate beyond any tensor is
// refused by the planner instead of planned small. Layer norms, reductions,
// losses, matrix products (batch-transposed operands, 16-bit blocks) and
// Einsum (a dry run of its own contraction sequence) declare
// theirs next to their kernels. A kernel that asks for more than declared
// still runs (the excess is allocated and counted as unplanned), and the
// kernel and testdata tests fail on it.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelSupport.h"

#include "ir/IR.h"

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

llvm::SmallVector<int64_t, 6> shapeOf(const Value *value) {
  llvm::SmallVector<int64_t, 6> shape;
  if (value) {
    auto dims = value->getType().getStaticShape();
    shape.assign(dims.begin(), dims.end());
  }
  return shape;
}

int64_t elementsOf(const Value *value) {
  return value ? value->getType().getNumElements() : 0;
}

const Value *operandOrNull(const Node &node, unsigned index) {
  return index < node.getNumOperands() ? node.getOperand(index) : nullptr;
}

/// Conv(X, W, B?) -> Y and ConvGrad(dY, X, W) -> (dX?, dW?, dB?): one
/// im2col matrix of (C/group * kernel) rows by output pixels, except for a
/// 1x1, stride-1, unpadded convolution, which multiplies the image directly.
/// ConvGrad needs it only when it computes dX or dW.
template <bool Grad> uint64_t convWorkspace(const Node &node) {
  const Value *w = operandOrNull(node, Grad ? 2 : 1);
  const Value *spatialSource =
      Grad ? operandOrNull(node, 0) : node.getResult(0);
  llvm::SmallVector<int64_t, 6> wShape = shapeOf(w),
                                outShape = shapeOf(spatialSource);
  if (wShape.size() < 3 || outShape.size() != wShape.size())
    return 0;
  if (Grad && !node.getResult(0) &&
      !(node.getNumResults() > 1 && node.getResult(1)))
    return 0;
  int64_t kernelSize = product(llvm::ArrayRef<int64_t>(wShape).drop_front(2));
  bool unitStrides = llvm::all_of(node.getIntsAttr("strides", {}),
                                  [](int64_t s) { return s == 1; });
  bool unpadded = llvm::all_of(node.getIntsAttr("pads", {}),
                               [](int64_t p) { return p == 0; });
  llvm::StringRef autoPad = node.getStringAttr("auto_pad", "NOTSET");
  bool direct = kernelSize == 1 && unitStrides && unpadded &&
                (autoPad == "NOTSET" || autoPad == "VALID");
  if (direct)
    return 0;
  // Rows and columns each come from one verified tensor; their product
  // may exceed any tensor, so it saturates (and the planner refuses it).
  int64_t colRows = mulCount(wShape[1], kernelSize);
  // A float64 convolution's columns are float64 (every other type is
  // computed in float32).
  DType dtype = w->getType().getDType() == DType::F64 ? DType::F64 : DType::F32;
  return scratchBytes(
      dtype,
      mulCount(colRows,
               product(llvm::ArrayRef<int64_t>(outShape).drop_front(2))));
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
  table.setWorkspace("", "Conv", convWorkspace<false>);
  table.setWorkspace("", "ConvGrad", convWorkspace<true>);
  table.setWorkspace(kMsDomain, "ConvGrad", convWorkspace<true>);
  table.setWorkspace(kMsDomain, "DivGrad", divGradWorkspace);
  table.setWorkspace("", "Pow", powWorkspace);
}
