//===- LinalgOps.cpp - Matrix multiplication operator schemas -------------===//
//
// MatMul, Gemm and Einsum from ai.onnx and ONNX Runtime's FusedMatMul (a
// MatMul with transposes and a scale folded in, which the gradient builder
// emits for every MatMul backward). They are the ops mixed precision wants
// in fp16/bf16 (AmpClass::Allow) and the ones whose cost dominates a step:
// 2*M*N*K flops per (batched) product. Einsum inference works from the
// equation in general: letters bind dimensions across operands, the
// ellipsis broadcasts, and the implicit output is numpy's.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cctype>
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

/// One operand (or the output) of an einsum equation.
struct EinsumTerm {
  std::string letters;
  /// Position of the ellipsis among the letters, or -1.
  int ellipsisAt = -1;
};

/// A parsed equation: input terms and the explicit output, if any.
struct EinsumEquation {
  std::vector<EinsumTerm> inputs;
  std::optional<EinsumTerm> output;
};

std::optional<EinsumTerm> parseTerm(llvm::StringRef text) {
  EinsumTerm term;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '.') {
      if (!text.substr(i).starts_with("...") || term.ellipsisAt >= 0)
        return std::nullopt;
      term.ellipsisAt = term.letters.size();
      i += 3;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(c)))
      return std::nullopt;
    term.letters.push_back(c);
    ++i;
  }
  return term;
}

std::optional<EinsumEquation> parseEquation(llvm::StringRef equation) {
  std::string compact;
  for (char c : equation)
    if (c != ' ')
      compact.push_back(c);
  llvm::StringRef text = compact;
  EinsumEquation parsed;
  auto [lhs, rhs] = text.split("->");
  bool hasArrow = text.contains("->");
  llvm::SmallVector<llvm::StringRef, 4> terms;
  lhs.split(terms, ',');
  for (llvm::StringRef termText : terms) {
    std::optional<EinsumTerm> term = parseTerm(termText);
    if (!term)
      return std::nullopt;
    parsed.inputs.push_back(*term);
  }
  if (hasArrow) {
    std::optional<EinsumTerm> term = parseTerm(rhs);
    if (!term)
      return std::nullopt;
    parsed.output = *term;
  }
  return parsed;
}

llvm::Error inferEinsum(InferenceContext &ctx) {
  llvm::SmallVector<unsigned, 4> indices;
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
    indices.push_back(i);
  auto dtype = checkSameDType(ctx, indices);
  if (!dtype)
    return dtype.takeError();
  std::string equationText = ctx.getStringAttr("equation");
  std::optional<EinsumEquation> equation = parseEquation(equationText);
  if (!equation)
    return ctx.error("malformed einsum equation '" + equationText + "'");
  if (equation->inputs.size() != ctx.getNumInputs())
    return ctx.error(llvm::formatv("equation '{0}' has {1} operands but the "
                                   "node has {2} inputs",
                                   equationText, equation->inputs.size(),
                                   ctx.getNumInputs()));
  std::map<char, Dim> letterDims;
  std::map<char, unsigned> letterCounts;
  std::optional<DimVector> ellipsisDims = DimVector();
  bool anyEllipsis = false;
  for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i) {
    const EinsumTerm &term = equation->inputs[i];
    for (char c : term.letters)
      ++letterCounts[c];
    anyEllipsis |= term.ellipsisAt >= 0;
    const TensorType &type = ctx.getInputType(i);
    if (!type.hasRank()) {
      if (term.ellipsisAt >= 0)
        ellipsisDims.reset();
      continue;
    }
    int64_t numLetters = term.letters.size();
    int64_t rank = type.getRank();
    if (term.ellipsisAt < 0 ? rank != numLetters : rank < numLetters)
      return ctx.error(llvm::formatv("input {0} has rank {1}, which does not "
                                     "match its equation term",
                                     i, rank));
    int64_t ellipsisRank = rank - numLetters;
    llvm::ArrayRef<Dim> dims = type.getDims();
    for (int64_t l = 0; l != numLetters; ++l) {
      int64_t dimIndex =
          (term.ellipsisAt >= 0 && l >= term.ellipsisAt) ? l + ellipsisRank : l;
      char c = term.letters[l];
      auto it = letterDims.find(c);
      if (it == letterDims.end()) {
        letterDims[c] = dims[dimIndex];
        continue;
      }
      std::optional<Dim> merged = unifyDims(it->second, dims[dimIndex]);
      if (!merged)
        return ctx.error(llvm::formatv("letter '{0}' binds extents {1} and "
                                       "{2}",
                                       c, shapeString(it->second),
                                       shapeString(dims[dimIndex])));
      it->second = *merged;
    }
    if (term.ellipsisAt >= 0 && ellipsisDims) {
      llvm::ArrayRef<Dim> sub = dims.slice(term.ellipsisAt, ellipsisRank);
      std::optional<DimVector> merged = broadcastShapes(*ellipsisDims, sub);
      if (!merged)
        return ctx.error("incompatible broadcast of the '...' dimensions");
      ellipsisDims = std::move(merged);
    }
  }
  EinsumTerm output;
  if (equation->output) {
    output = *equation->output;
    for (char c : output.letters)
      if (!letterCounts.count(c))
        return ctx.error(llvm::formatv("output letter '{0}' does not appear "
                                       "in any input",
                                       c));
    if (output.ellipsisAt >= 0 && !anyEllipsis)
      output.ellipsisAt = -1;
  } else {
    // numpy's implicit output: broadcast dims, then the letters used once.
    if (anyEllipsis)
      output.ellipsisAt = 0;
    for (const auto &[c, count] : letterCounts)
      if (count == 1)
        output.letters.push_back(c);
  }
  if (output.ellipsisAt >= 0 && !ellipsisDims) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  DimVector out;
  for (size_t l = 0; l <= output.letters.size(); ++l) {
    if (output.ellipsisAt == static_cast<int>(l))
      out.append(ellipsisDims->begin(), ellipsisDims->end());
    if (l == output.letters.size())
      break;
    auto it = letterDims.find(output.letters[l]);
    out.push_back(it == letterDims.end() ? Dim::unknown() : it->second);
  }
  setOutput(ctx, 0, TensorType(*dtype, out));
  return llvm::Error::success();
}

/// 2 flops per point of the full iteration space (every letter and the
/// broadcast dimensions).
OpCost einsumCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  std::optional<EinsumEquation> equation =
      parseEquation(node.getStringAttr("equation", ""));
  if (!equation || equation->inputs.size() != node.getNumOperands())
    return cost;
  std::map<char, int64_t> extents;
  uint64_t broadcastPoints = 1;
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const TensorType &type = node.getOperand(i)->getType();
    if (!type.hasStaticShape())
      return cost;
    const EinsumTerm &term = equation->inputs[i];
    int64_t ellipsisRank = type.getRank() - term.letters.size();
    if (ellipsisRank < 0)
      return cost;
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    for (size_t l = 0; l != term.letters.size(); ++l) {
      size_t dimIndex =
          (term.ellipsisAt >= 0 && static_cast<int>(l) >= term.ellipsisAt)
              ? l + ellipsisRank
              : l;
      extents[term.letters[l]] = shape[dimIndex];
    }
    if (term.ellipsisAt >= 0) {
      uint64_t points = 1;
      for (int64_t d = 0; d != ellipsisRank; ++d)
        points *= shape[term.ellipsisAt + d];
      broadcastPoints = std::max(broadcastPoints, points);
    }
  }
  uint64_t points = broadcastPoints;
  for (const auto &entry : extents)
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
