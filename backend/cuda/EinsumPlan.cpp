//===- EinsumPlan.cpp - An einsum equation as CUDA loops ------------------===//
//
// Lays an Einsum's EinsumBinding (ir/ops/EinsumSpec.h, the reading the CPU
// kernel and shape inference share) out as an EinsumGeometry and finds its
// strided-batch GEMM form (see EinsumPlan.h). Compiled in every build so
// its tests run without the CUDA toolkit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/EinsumPlan.h"
#include "ir/IR.h"
#include "ir/ops/EinsumSpec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

#include <cstdint>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

using Labels = llvm::SmallVector<int, 8>;

/// The labels of \p from that satisfy \p keep, in order.
template <typename Pred>
Labels labelsWhere(llvm::ArrayRef<int> from, Pred keep) {
  Labels result;
  for (int label : from)
    if (keep(label))
      result.push_back(label);
  return result;
}

Labels concat(llvm::ArrayRef<int> a, llvm::ArrayRef<int> b,
              llvm::ArrayRef<int> c = {}) {
  Labels result(a.begin(), a.end());
  result.append(b.begin(), b.end());
  result.append(c.begin(), c.end());
  return result;
}

/// The GEMM form of a two-operand \p binding with operand \p a as A, if it
/// has one: the batch labels lead the output and both operands, M is A's
/// free labels, N is B's, K the contracted labels (all in both operands).
std::optional<EinsumGemm> gemmForm(const ops::EinsumBinding &binding,
                                   unsigned a) {
  unsigned b = 1 - a;
  llvm::ArrayRef<int> aLabels = binding.operandLabels[a];
  llvm::ArrayRef<int> bLabels = binding.operandLabels[b];
  llvm::ArrayRef<int> out = binding.outLabels;
  auto role = [&](int label) { return binding.getRole(label); };
  for (int label : binding.summedLabels)
    if (!binding.operandHas(a, label) || !binding.operandHas(b, label))
      return std::nullopt; // Summed from one operand alone.
  Labels batch = labelsWhere(
      out, [&](int l) { return role(l) == ops::EinsumRole::Batch; });
  Labels m = labelsWhere(out, [&](int l) {
    return role(l) == ops::EinsumRole::Free && binding.operandHas(a, l);
  });
  Labels n = labelsWhere(out, [&](int l) {
    return role(l) == ops::EinsumRole::Free && binding.operandHas(b, l);
  });
  Labels k = labelsWhere(
      aLabels, [&](int l) { return role(l) == ops::EinsumRole::Contracted; });
  if (Labels(out.begin(), out.end()) != concat(batch, m, n))
    return std::nullopt;
  EinsumGemm gemm;
  if (Labels(aLabels.begin(), aLabels.end()) == concat(batch, m, k))
    gemm.transA = false;
  else if (Labels(aLabels.begin(), aLabels.end()) == concat(batch, k, m))
    gemm.transA = true;
  else
    return std::nullopt;
  if (Labels(bLabels.begin(), bLabels.end()) == concat(batch, k, n))
    gemm.transB = false;
  else if (Labels(bLabels.begin(), bLabels.end()) == concat(batch, n, k))
    gemm.transB = true;
  else
    return std::nullopt;
  gemm.batch = binding.getExtent(batch);
  gemm.m = binding.getExtent(m);
  gemm.n = binding.getExtent(n);
  gemm.k = binding.getExtent(k);
  if (gemm.batch <= 0 || gemm.m <= 0 || gemm.n <= 0 || gemm.k <= 0 ||
      gemm.batch > INT32_MAX)
    return std::nullopt;
  gemm.swapOperands = a == 1;
  return gemm;
}

} // namespace

llvm::Expected<EinsumPlan>
cuda::planEinsum(llvm::StringRef equation,
                 llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> operandShapes) {
  auto spec = ops::EinsumSpec::parse(equation);
  if (!spec)
    return spec.takeError();
  if (operandShapes.size() > static_cast<size_t>(kMaxEinsumOperands))
    return planError("more than " + llvm::Twine(kMaxEinsumOperands) +
                     " operands (the CUDA kernel's limit)");
  auto binding = ops::bindEinsum(*spec, operandShapes);
  if (!binding)
    return binding.takeError();
  llvm::ArrayRef<int> outLabels = binding->outLabels;
  llvm::ArrayRef<int> sumLabels = binding->summedLabels;
  if (outLabels.size() > static_cast<size_t>(kMaxEinsumLabels) ||
      sumLabels.size() > static_cast<size_t>(kMaxEinsumLabels))
    return planError("more than " + llvm::Twine(kMaxEinsumLabels) +
                     " output or summed labels (the CUDA kernel's limit)");

  EinsumPlan plan;
  EinsumGeometry &g = plan.geometry;
  unsigned numInputs = operandShapes.size();
  g.operands = numInputs;
  g.outLabels = outLabels.size();
  g.sumLabels = sumLabels.size();
  for (unsigned l = 0; l < outLabels.size(); ++l) {
    g.outExtent[l] = binding->getExtent(outLabels[l]);
    g.outElements *= g.outExtent[l];
  }
  plan.outShape = binding->outShape;
  for (unsigned l = 0; l < sumLabels.size(); ++l) {
    g.sumExtent[l] = binding->getExtent(sumLabels[l]);
    g.sumElements *= g.sumExtent[l];
  }
  for (unsigned i = 0; i < numInputs; ++i) {
    llvm::ArrayRef<int> labels = binding->operandLabels[i];
    int64_t stride = 1;
    for (int d = static_cast<int>(labels.size()) - 1; d >= 0; --d) {
      // A broadcast (unit) ellipsis dimension has stride 0.
      int64_t labelStride = binding->isBroadcast(i, d) ? 0 : stride;
      stride *= operandShapes[i][d];
      const int *out = llvm::find(outLabels, labels[d]);
      if (out != outLabels.end())
        g.outStride[i][out - outLabels.begin()] = labelStride;
      else
        g.sumStride[i][llvm::find(sumLabels, labels[d]) - sumLabels.begin()] =
            labelStride;
    }
  }
  // A GEMM reads the operands as stored: nothing may broadcast.
  if (numInputs == 2 && !binding->hasBroadcast()) {
    plan.gemm = gemmForm(*binding, 0);
    if (!plan.gemm)
      plan.gemm = gemmForm(*binding, 1);
  }
  return plan;
}

bool cuda::isCublasEinsum(const Node &node) {
  bool onnx = node.getDomain().empty();
  if (!onnx || node.getOpType() != "Einsum" || node.getNumResults() != 1)
    return false;
  auto isStaticF32 = [](const Value *value) {
    return value && value->getType().getDType() == DType::F32 &&
           value->getType().hasStaticShape();
  };
  if (!isStaticF32(node.getResult(0)))
    return false;
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
  for (const Value *operand : node.getOperands()) {
    if (!isStaticF32(operand))
      return false;
    llvm::SmallVector<int64_t, 4> dims = operand->getType().getStaticShape();
    shapes.emplace_back(dims.begin(), dims.end());
  }
  auto plan = planEinsum(node.getStringAttr("equation", ""), shapes);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return false;
  }
  return plan->gemm.has_value();
}
