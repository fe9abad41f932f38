//===- LinalgOps.cpp - Matrix multiplication operator schemas -------------===//
//
// MatMul, Gemm and Einsum from ai.onnx and ONNX Runtime's FusedMatMul (a
// MatMul with transposes and a scale folded in, which the gradient builder
// emits for every MatMul backward). They are the ops mixed precision wants
// in fp16/bf16 (AmpClass::Allow) and the ones whose cost dominates a step:
// 2*M*N*K flops per (batched) product. Einsum inference reads the
// equation's EinsumSpec (EinsumSpec.h): letters bind dimensions across
// operands, the ellipsis broadcasts, and the implicit output is numpy's.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/EinsumSpec.h"
#include "ir/ops/OpDefs.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

//===----------------------------------------------------------------------===//
// MatMul and FusedMatMul
//===----------------------------------------------------------------------===//

llvm::Error inferMatMul(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1});
  if (!dtype)
    return dtype.takeError();
  const TensorType &a = ctx.getInputType(0), &b = ctx.getInputType(1);
  if (!a.hasRank() || !b.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  auto shape = matmulShape(ctx, a.getDims(), b.getDims());
  if (!shape)
    return shape.takeError();
  setOutput(ctx, 0, TensorType(*dtype, *shape));
  return llvm::Error::success();
}

/// FusedMatMul's view of an operand: transBatch moves the leading (batch)
/// dimension just before the last one, then trans swaps the last two.
DimVector fusedOperandShape(llvm::ArrayRef<Dim> raw, bool trans,
                            bool transBatch) {
  if (raw.size() == 1)
    return DimVector(raw.begin(), raw.end());
  int rank = raw.size();
  DimVector shape;
  int start = transBatch ? 1 : 0;
  int end = transBatch ? rank - 1 : rank - 2;
  for (int i = start; i < end; ++i)
    shape.push_back(raw[i]);
  const Dim &rows = raw[transBatch ? 0 : rank - 2];
  const Dim &cols = raw[rank - 1];
  shape.push_back(trans ? cols : rows);
  shape.push_back(trans ? rows : cols);
  return shape;
}

llvm::Error inferFusedMatMul(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1});
  if (!dtype)
    return dtype.takeError();
  const TensorType &a = ctx.getInputType(0), &b = ctx.getInputType(1);
  if (!a.hasRank() || !b.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  if (a.getRank() == 0 || b.getRank() == 0)
    return ctx.error("matrix multiplication operands must have rank >= 1");
  DimVector lhs =
      fusedOperandShape(a.getDims(), ctx.getIntAttr("transA", 0) != 0,
                        ctx.getIntAttr("transBatchA", 0) != 0);
  DimVector rhs =
      fusedOperandShape(b.getDims(), ctx.getIntAttr("transB", 0) != 0,
                        ctx.getIntAttr("transBatchB", 0) != 0);
  auto shape = matmulShape(ctx, lhs, rhs);
  if (!shape)
    return shape.takeError();
  setOutput(ctx, 0, TensorType(*dtype, *shape));
  return llvm::Error::success();
}

/// 2 * (result elements) * K for a product whose contraction length is
/// \p contraction.
OpCost productCost(const Node &node, const Dim &contraction) {
  OpCost cost = memoryTraffic(node);
  const Value *result = node.getResult(0);
  if (result && contraction.isStatic())
    cost.flops = 2 * staticElements(result->getType()) *
                 static_cast<uint64_t>(contraction.getExtent());
  return cost;
}

OpCost matmulCost(const Node &node) {
  const TensorType &a = node.getOperand(0)->getType();
  if (!a.hasRank() || a.getRank() == 0)
    return memoryTraffic(node);
  return productCost(node, a.getDims().back());
}

OpCost fusedMatMulCost(const Node &node) {
  const TensorType &a = node.getOperand(0)->getType();
  if (!a.hasRank() || a.getRank() == 0)
    return memoryTraffic(node);
  DimVector lhs =
      fusedOperandShape(a.getDims(), node.getIntAttr("transA", 0) != 0,
                        node.getIntAttr("transBatchA", 0) != 0);
  return productCost(node, lhs.back());
}

//===----------------------------------------------------------------------===//
// Gemm
//===----------------------------------------------------------------------===//

llvm::Error inferGemm(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  const TensorType &a = ctx.getInputType(0), &b = ctx.getInputType(1);
  for (unsigned i : {0u, 1u}) {
    const TensorType &type = ctx.getInputType(i);
    if (type.hasRank() && type.getRank() != 2)
      return ctx.error(
          llvm::formatv("input {0} must have rank 2, got {1}", i, type.str()));
  }
  bool transA = ctx.getIntAttr("transA", 0) != 0;
  bool transB = ctx.getIntAttr("transB", 0) != 0;
  Dim m = a.hasRank() ? a.getDim(transA ? 1 : 0) : Dim::unknown();
  Dim k1 = a.hasRank() ? a.getDim(transA ? 0 : 1) : Dim::unknown();
  Dim k2 = b.hasRank() ? b.getDim(transB ? 1 : 0) : Dim::unknown();
  Dim n = b.hasRank() ? b.getDim(transB ? 0 : 1) : Dim::unknown();
  if (!unifyDims(k1, k2))
    return ctx.error("contraction dimensions do not match: " + a.str() +
                     (transA ? "^T" : "") + " x " + b.str() +
                     (transB ? "^T" : ""));
  DimVector out = {m, n};
  if (ctx.hasInput(2)) {
    const TensorType &c = ctx.getInputType(2);
    if (c.hasRank()) {
      std::optional<DimVector> merged = broadcastShapes(out, c.getDims());
      bool unidirectional =
          merged && c.getRank() <= 2 &&
          llvm::all_of(llvm::zip(*merged, out), [](auto pair) {
            const Dim &got = std::get<0>(pair), &want = std::get<1>(pair);
            return !got.isStatic() || !want.isStatic() ||
                   got.getExtent() == want.getExtent();
          });
      if (!unidirectional)
        return ctx.error("incompatible broadcast: C " + c.str() +
                         " does not broadcast to " + shapeString(out));
      // C may pin down an unknown M or N.
      for (unsigned i = 0; i != 2; ++i)
        if (!out[i].isStatic() && (*merged)[i].isStatic())
          out[i] = (*merged)[i];
    }
  }
  setOutput(ctx, 0, TensorType(*dtype, out));
  return llvm::Error::success();
}

OpCost gemmCost(const Node &node) {
  const TensorType &a = node.getOperand(0)->getType();
  if (!a.hasRank() || a.getRank() != 2)
    return memoryTraffic(node);
  bool transA = node.getIntAttr("transA", 0) != 0;
  return productCost(node, a.getDim(transA ? 0 : 1));
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

llvm::Error inferEinsum(InferenceContext &ctx) {
  llvm::SmallVector<unsigned, 4> indices;
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
    indices.push_back(i);
  auto dtype = checkSameDType(ctx, indices);
  if (!dtype)
    return dtype.takeError();
  std::string equationText = ctx.getStringAttr("equation");
  auto spec = EinsumSpec::parse(equationText);
  if (!spec)
    return ctx.error("einsum equation '" + equationText +
                     "': " + llvm::toString(spec.takeError()));
  if (spec->getNumInputs() != ctx.getNumInputs())
    return ctx.error(llvm::formatv("equation '{0}' has {1} operands but the "
                                   "node has {2} inputs",
                                   equationText, spec->getNumInputs(),
                                   ctx.getNumInputs()));
  // The symbolic counterpart of bindEinsum: letters unify their dimensions,
  // the ellipsis dimensions broadcast; an unranked operand binds nothing.
  std::map<int, Dim> letterDims;
  std::optional<DimVector> ellipsisDims = DimVector();
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i) {
    const EinsumTerm &term = spec->getInput(i);
    const TensorType &type = ctx.getInputType(i);
    if (!type.hasRank()) {
      if (term.hasEllipsis())
        ellipsisDims.reset();
      continue;
    }
    int64_t numLetters = term.letters.size();
    int64_t rank = type.getRank();
    if (term.hasEllipsis() ? rank < numLetters : rank != numLetters)
      return ctx.error(llvm::formatv("input {0} has rank {1}, which does not "
                                     "match its equation term '{2}'",
                                     i, rank, term.str()));
    int64_t ellipsisRank = rank - numLetters;
    llvm::ArrayRef<Dim> dims = type.getDims();
    for (int64_t l = 0; l != numLetters; ++l) {
      int64_t dimIndex =
          (term.hasEllipsis() && l >= term.ellipsisAt) ? l + ellipsisRank : l;
      int label = term.letters[l];
      auto [it, inserted] = letterDims.try_emplace(label, dims[dimIndex]);
      if (inserted)
        continue;
      std::optional<Dim> merged = unifyDims(it->second, dims[dimIndex]);
      if (!merged)
        return ctx.error(llvm::formatv("letter '{0}' binds extents {1} and "
                                       "{2}",
                                       einsumLabelName(label),
                                       shapeString(it->second),
                                       shapeString(dims[dimIndex])));
      it->second = *merged;
    }
    if (term.hasEllipsis() && ellipsisDims) {
      llvm::ArrayRef<Dim> sub = dims.slice(term.ellipsisAt, ellipsisRank);
      std::optional<DimVector> merged = broadcastShapes(*ellipsisDims, sub);
      if (!merged)
        return ctx.error("incompatible broadcast of the '...' dimensions");
      ellipsisDims = std::move(merged);
    }
  }
  const EinsumTerm &output = spec->getOutput();
  // An output ellipsis without one among the operands stands for nothing.
  bool outputEllipsis = output.hasEllipsis() && spec->hasEllipsis();
  if (outputEllipsis && !ellipsisDims) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  DimVector out;
  for (size_t l = 0; l <= output.letters.size(); ++l) {
    if (outputEllipsis && output.ellipsisAt == static_cast<int>(l))
      out.append(ellipsisDims->begin(), ellipsisDims->end());
    if (l == output.letters.size())
      break;
    auto it = letterDims.find(output.letters[l]);
    out.push_back(it == letterDims.end() ? Dim::unknown() : it->second);
  }
  setOutput(ctx, 0, TensorType(*dtype, out));
  return llvm::Error::success();
}

/// 2 flops per point of the full iteration space (every label, the
/// broadcast ellipsis dimensions included).
OpCost einsumCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  auto spec = EinsumSpec::parse(node.getStringAttr("equation", ""));
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return cost;
  }
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
  for (const Value *operand : node.getOperands()) {
    if (!operand || !operand->getType().hasStaticShape())
      return cost;
    llvm::SmallVector<int64_t, 4> shape = operand->getType().getStaticShape();
    shapes.emplace_back(shape.begin(), shape.end());
  }
  auto binding = bindEinsum(*spec, shapes);
  if (!binding) {
    llvm::consumeError(binding.takeError());
    return cost;
  }
  uint64_t points = 1;
  for (const auto &entry : binding->extents)
    points *= static_cast<uint64_t>(entry.second);
  cost.flops = 2 * points;
  return cost;
}

} // namespace

void ops::registerLinalgOps(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "MatMul", 1)
      .inputs(2)
      .outputs(1)
      .amp(AmpClass::Allow)
      .infer(inferMatMul)
      .cost(matmulCost)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Gemm", 11)
      .inputs(2, 3)
      .outputs(1)
      .attrFloat("alpha", 1.0f)
      .attrFloat("beta", 1.0f)
      .attrInt("transA", 0)
      .attrInt("transB", 0)
      .amp(AmpClass::Allow)
      .infer(inferGemm)
      .cost(gemmCost)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "Einsum", 12)
      .inputs(1, kVariadic)
      .outputs(1)
      .requiredAttr("equation", Attribute::Kind::String)
      .amp(AmpClass::Allow)
      .infer(inferEinsum)
      .cost(einsumCost)
      .add(registry);
}

void ops::registerMicrosoftLinalgOps(OpRegistry &registry) {
  SchemaBuilder(kMsDomain, "FusedMatMul", 1)
      .inputs(2)
      .outputs(1)
      .attrFloat("alpha", 1.0f)
      .attrInt("transA", 0)
      .attrInt("transB", 0)
      .attrInt("transBatchA", 0)
      .attrInt("transBatchB", 0)
      .amp(AmpClass::Allow)
      .infer(inferFusedMatMul)
      .cost(fusedMatMulCost)
      .add(registry);
}
