//===- EinsumPlan.cpp - An einsum equation as CUDA loops ------------------===//
//
// Parses an Einsum equation with the CPU kernel's rules and lays it out as
// an EinsumGeometry (see EinsumPlan.h). Labels are numbered as the CPU
// kernel numbers them (a-z 0..25, A-Z 26..51, ellipsis dimensions 52 +
// position), so the implicit output orders them the same way. Compiled in
// every build so its tests run without the CUDA toolkit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/EinsumPlan.h"
#include "ir/IR.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

#include <cstdint>
#include <string>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

constexpr int kEllipsisLabel = 52;

llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Parses one term. For an operand \p rank is its rank and \p ellipsisCount
/// receives the dimensions "..." stands for; for the output (rank < 0)
/// \p ellipsisCount gives them.
llvm::Expected<llvm::SmallVector<int, 8>>
parseTerm(llvm::StringRef term, int rank, unsigned &ellipsisCount) {
  llvm::SmallVector<int, 8> letters;
  int ellipsisAt = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.substr(i).starts_with("...")) {
      if (ellipsisAt >= 0)
        return planError("more than one ellipsis in a term");
      ellipsisAt = letters.size();
      i += 2;
      continue;
    }
    char c = term[i];
    if (c >= 'a' && c <= 'z')
      letters.push_back(c - 'a');
    else if (c >= 'A' && c <= 'Z')
      letters.push_back(26 + (c - 'A'));
    else
      return planError(llvm::Twine("invalid character '") + llvm::Twine(c) +
                       "' in the equation");
  }
  if (rank >= 0) {
    int lettersCount = letters.size();
    if (ellipsisAt < 0 ? lettersCount != rank : lettersCount > rank)
      return planError("term '" + term + "' does not match rank " +
                       llvm::Twine(rank));
    ellipsisCount = ellipsisAt >= 0 ? rank - lettersCount : 0;
  } else if (ellipsisAt < 0) {
    ellipsisCount = 0;
  }
  llvm::SmallVector<int, 8> labels;
  for (int i = 0, e = letters.size(); i <= e; ++i) {
    if (i == ellipsisAt)
      for (unsigned d = 0; d < ellipsisCount; ++d)
        labels.push_back(kEllipsisLabel + d);
    if (i < e)
      labels.push_back(letters[i]);
  }
  return labels;
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

/// The GEMM form of A (\p a) times B (\p b) into \p out, if it has one.
std::optional<EinsumGemm> gemmForm(llvm::ArrayRef<int> a, llvm::ArrayRef<int> b,
                                   llvm::ArrayRef<int> out,
                                   const llvm::DenseMap<int, int64_t> &sizes) {
  auto in = [](llvm::ArrayRef<int> labels, int label) {
    return llvm::is_contained(labels, label);
  };
  for (int label : a)
    if (!in(b, label) && !in(out, label))
      return std::nullopt; // Summed from A alone.
  for (int label : b)
    if (!in(a, label) && !in(out, label))
      return std::nullopt;
  Labels batch = labelsWhere(out, [&](int l) { return in(a, l) && in(b, l); });
  Labels m = labelsWhere(out, [&](int l) { return in(a, l) && !in(b, l); });
  Labels n = labelsWhere(out, [&](int l) { return in(b, l) && !in(a, l); });
  Labels k = labelsWhere(a, [&](int l) { return in(b, l) && !in(out, l); });
  if (Labels(out.begin(), out.end()) != concat(batch, m, n))
    return std::nullopt;
  EinsumGemm gemm;
  Labels aLabels(a.begin(), a.end()), bLabels(b.begin(), b.end());
  if (aLabels == concat(batch, m, k))
    gemm.transA = false;
  else if (aLabels == concat(batch, k, m))
    gemm.transA = true;
  else
    return std::nullopt;
  if (bLabels == concat(batch, k, n))
    gemm.transB = false;
  else if (bLabels == concat(batch, n, k))
    gemm.transB = true;
  else
    return std::nullopt;
  auto extent = [&](llvm::ArrayRef<int> labels) {
    int64_t size = 1;
    for (int label : labels)
      size *= sizes.lookup(label);
    return size;
  };
  gemm.batch = extent(batch);
  gemm.m = extent(m);
  gemm.n = extent(n);
  gemm.k = extent(k);
  if (gemm.batch <= 0 || gemm.m <= 0 || gemm.n <= 0 || gemm.k <= 0 ||
      gemm.batch > INT32_MAX)
    return std::nullopt;
  return gemm;
}

} // namespace

llvm::Expected<EinsumPlan>
cuda::planEinsum(llvm::StringRef rawEquation,
                 llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> operandShapes) {
  std::string equation;
  for (char c : rawEquation)
    if (c != ' ')
      equation.push_back(c);
  if (equation.empty())
    return planError("missing equation");
  bool explicitOutput = llvm::StringRef(equation).contains("->");
  auto [lhs, rhs] = llvm::StringRef(equation).split("->");
  llvm::SmallVector<llvm::StringRef, 4> terms;
  lhs.split(terms, ',');
  unsigned numInputs = operandShapes.size();
  if (terms.size() != numInputs)
    return planError("the equation names " + llvm::Twine(terms.size()) +
                     " operands but the node has " + llvm::Twine(numInputs));
  if (numInputs > static_cast<unsigned>(kMaxEinsumOperands))
    return planError("more than " + llvm::Twine(kMaxEinsumOperands) +
                     " operands (the CUDA kernel's limit)");

  llvm::SmallVector<llvm::SmallVector<int, 8>, 4> labels(numInputs);
  llvm::SmallVector<unsigned, 4> ellipsisCounts(numInputs, 0);
  unsigned ellipsisRank = 0;
  for (unsigned i = 0; i < numInputs; ++i) {
    auto parsed =
        parseTerm(terms[i], operandShapes[i].size(), ellipsisCounts[i]);
    if (!parsed)
      return parsed.takeError();
    labels[i] = std::move(*parsed);
    ellipsisRank = std::max(ellipsisRank, ellipsisCounts[i]);
  }
  // Bind extents; ellipsis dimensions are right-aligned and broadcast.
  llvm::DenseMap<int, int64_t> sizes;
  llvm::DenseMap<int, unsigned> occurrences;
  for (unsigned i = 0; i < numInputs; ++i) {
    llvm::SmallDenseSet<int, 16> seen;
    for (unsigned d = 0; d < labels[i].size(); ++d) {
      int &label = labels[i][d];
      if (label >= kEllipsisLabel)
        label += ellipsisRank - ellipsisCounts[i];
      if (!seen.insert(label).second)
        return planError("a label repeated within one operand (a diagonal) "
                         "is not supported");
      ++occurrences[label];
      int64_t extent = operandShapes[i][d];
      auto [it, inserted] = sizes.try_emplace(label, extent);
      if (inserted || it->second == extent)
        continue;
      if (label >= kEllipsisLabel && (it->second == 1 || extent == 1)) {
        it->second = std::max(it->second, extent);
        continue;
      }
      return planError("label extents disagree: " + llvm::Twine(it->second) +
                       " and " + llvm::Twine(extent));
    }
  }
  // Output labels: explicit, or numpy's implicit rule (the ellipsis
  // dimensions, then the labels used once, A-Z before a-z).
  llvm::SmallVector<int, 8> outLabels;
  if (explicitOutput) {
    unsigned outEllipsis = ellipsisRank;
    auto parsed = parseTerm(rhs, -1, outEllipsis);
    if (!parsed)
      return parsed.takeError();
    outLabels = std::move(*parsed);
    llvm::SmallDenseSet<int, 16> seen;
    for (int label : outLabels) {
      if (!sizes.count(label))
        return planError("an output label appears in no operand");
      if (!seen.insert(label).second)
        return planError("an output label is repeated");
    }
  } else {
    for (unsigned e = 0; e < ellipsisRank; ++e)
      outLabels.push_back(kEllipsisLabel + e);
    for (int label = 26; label < 52; ++label)
      if (occurrences.lookup(label) == 1)
        outLabels.push_back(label);
    for (int label = 0; label < 26; ++label)
      if (occurrences.lookup(label) == 1)
        outLabels.push_back(label);
  }
  llvm::SmallVector<int, 16> sumLabels;
  for (int label = 0; label < kEllipsisLabel + int(ellipsisRank); ++label)
    if (sizes.count(label) && !llvm::is_contained(outLabels, label))
      sumLabels.push_back(label);
  if (outLabels.size() > static_cast<size_t>(kMaxEinsumLabels) ||
      sumLabels.size() > static_cast<size_t>(kMaxEinsumLabels))
    return planError("more than " + llvm::Twine(kMaxEinsumLabels) +
                     " output or summed labels (the CUDA kernel's limit)");

  EinsumPlan plan;
  EinsumGeometry &g = plan.geometry;
  g.operands = numInputs;
  g.outLabels = outLabels.size();
  g.sumLabels = sumLabels.size();
  for (unsigned l = 0; l < outLabels.size(); ++l) {
    g.outExtent[l] = sizes.lookup(outLabels[l]);
    g.outElements *= g.outExtent[l];
    plan.outShape.push_back(g.outExtent[l]);
  }
  for (unsigned l = 0; l < sumLabels.size(); ++l) {
    g.sumExtent[l] = sizes.lookup(sumLabels[l]);
    g.sumElements *= g.sumExtent[l];
  }
  for (unsigned i = 0; i < numInputs; ++i) {
    int64_t stride = 1;
    for (int d = static_cast<int>(labels[i].size()) - 1; d >= 0; --d) {
      int label = labels[i][d];
      int64_t extent = operandShapes[i][d];
      // A unit ellipsis dimension broadcasts: stride 0.
      int64_t labelStride =
          extent == 1 && sizes.lookup(label) != 1 ? 0 : stride;
      stride *= extent;
      auto *out = llvm::find(outLabels, label);
      if (out != outLabels.end())
        g.outStride[i][out - outLabels.begin()] = labelStride;
      else
        g.sumStride[i][llvm::find(sumLabels, label) - sumLabels.begin()] =
            labelStride;
    }
  }
  // A GEMM reads the operands as stored: nothing may broadcast.
  bool broadcasts = false;
  for (unsigned i = 0; i < numInputs; ++i)
    for (unsigned d = 0; d < labels[i].size(); ++d)
      broadcasts |= operandShapes[i][d] != sizes.lookup(labels[i][d]);
  if (numInputs == 2 && !broadcasts) {
    plan.gemm = gemmForm(labels[0], labels[1], outLabels, sizes);
    if (!plan.gemm) {
      plan.gemm = gemmForm(labels[1], labels[0], outLabels, sizes);
      if (plan.gemm)
        plan.gemm->swapOperands = true;
    }
  }
  return plan;
}

bool cuda::isCublasEinsum(const Node &node) {
  bool onnx = node.getDomain().empty() || node.getDomain() == "ai.onnx";
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
