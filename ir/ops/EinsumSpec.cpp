//===- EinsumSpec.cpp - What an Einsum equation means ---------------------===//
//
// Parsing and binding of Einsum equations (see EinsumSpec.h). The implicit
// output follows numpy: the ellipsis dimensions first, then every letter
// written exactly once, upper case before lower case (ASCII order).
//
//===----------------------------------------------------------------------===//

#include "ir/ops/EinsumSpec.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cassert>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

llvm::Error einsumError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The letter labels in numpy's implicit-output order (ASCII: A-Z, a-z).
llvm::SmallVector<int, 52> lettersInAsciiOrder() {
  llvm::SmallVector<int, 52> labels;
  for (int label = 26; label < 52; ++label)
    labels.push_back(label);
  for (int label = 0; label < 26; ++label)
    labels.push_back(label);
  return labels;
}

/// Parses one term ("ab...c").
llvm::Expected<EinsumTerm> parseTerm(llvm::StringRef text) {
  EinsumTerm term;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (text.substr(i).starts_with("...")) {
      if (term.hasEllipsis())
        return einsumError("more than one ellipsis in a term");
      term.ellipsisAt = term.letters.size();
      i += 2;
      continue;
    }
    if (!llvm::isAlpha(c))
      return einsumError(llvm::Twine("invalid character '") + llvm::Twine(c) +
                         "' in the equation");
    term.letters.push_back(einsumLetterLabel(c));
  }
  return term;
}

} // namespace

int ops::einsumLetterLabel(char c) {
  assert(llvm::isAlpha(c) && "einsum labels are letters");
  return c >= 'a' ? c - 'a' : 26 + (c - 'A');
}

std::string ops::einsumLabelName(int label) {
  if (label >= kEinsumEllipsisLabel)
    return "...";
  return std::string(1,
                     label < 26 ? char('a' + label) : char('A' + label - 26));
}

//===----------------------------------------------------------------------===//
// EinsumTerm
//===----------------------------------------------------------------------===//

bool EinsumTerm::hasRepeatedLetter() const {
  llvm::SmallDenseSet<int, 16> seen;
  for (int label : letters)
    if (!seen.insert(label).second)
      return true;
  return false;
}

bool EinsumTerm::hasLetter(int label) const {
  return llvm::is_contained(letters, label);
}

std::string EinsumTerm::str() const {
  std::string text;
  for (int i = 0, e = letters.size(); i <= e; ++i) {
    if (i == ellipsisAt)
      text += "...";
    if (i < e)
      text += einsumLabelName(letters[i]);
  }
  return text;
}

llvm::SmallVector<int, 8> EinsumTerm::expand(unsigned ellipsisCount,
                                             unsigned firstEllipsisDim) const {
  llvm::SmallVector<int, 8> labels;
  for (int i = 0, e = letters.size(); i <= e; ++i) {
    if (i == ellipsisAt)
      for (unsigned d = 0; d < ellipsisCount; ++d)
        labels.push_back(kEinsumEllipsisLabel + firstEllipsisDim + d);
    if (i < e)
      labels.push_back(letters[i]);
  }
  return labels;
}

//===----------------------------------------------------------------------===//
// EinsumSpec
//===----------------------------------------------------------------------===//

llvm::Expected<EinsumSpec> EinsumSpec::parse(llvm::StringRef equation) {
  EinsumSpec spec;
  for (char c : equation)
    if (c != ' ')
      spec.text.push_back(c);
  if (spec.text.empty())
    return einsumError("missing equation");
  llvm::StringRef text = spec.text;
  spec.explicitOutput = text.contains("->");
  auto [lhs, rhs] = text.split("->");
  llvm::SmallVector<llvm::StringRef, 4> terms;
  lhs.split(terms, ',');
  for (llvm::StringRef termText : terms) {
    auto term = parseTerm(termText);
    if (!term)
      return term.takeError();
    spec.inputs.push_back(std::move(*term));
  }
  if (spec.explicitOutput) {
    auto term = parseTerm(rhs);
    if (!term)
      return term.takeError();
    for (int label : term->letters)
      if (!spec.getLetterCount(label))
        return einsumError("output letter '" + einsumLabelName(label) +
                           "' appears in no operand");
    if (term->hasRepeatedLetter())
      return einsumError("an output letter is repeated in '" + rhs + "'");
    spec.output = std::move(*term);
    return spec;
  }
  if (spec.hasEllipsis())
    spec.output.ellipsisAt = 0;
  for (int label : lettersInAsciiOrder())
    if (spec.getLetterCount(label) == 1)
      spec.output.letters.push_back(label);
  return spec;
}

bool EinsumSpec::hasEllipsis() const {
  return llvm::any_of(
      inputs, [](const EinsumTerm &term) { return term.hasEllipsis(); });
}

unsigned EinsumSpec::getLetterCount(int label) const {
  unsigned count = 0;
  for (const EinsumTerm &term : inputs)
    count += llvm::count(term.letters, label);
  return count;
}

unsigned EinsumSpec::getNumOperandsWith(int label) const {
  return llvm::count_if(
      inputs, [&](const EinsumTerm &term) { return term.hasLetter(label); });
}

EinsumRole EinsumSpec::getLetterRole(int label) const {
  if (!output.hasLetter(label))
    return EinsumRole::Contracted;
  return getNumOperandsWith(label) > 1 ? EinsumRole::Batch : EinsumRole::Free;
}

//===----------------------------------------------------------------------===//
// EinsumBinding
//===----------------------------------------------------------------------===//

int64_t EinsumBinding::getExtent(llvm::ArrayRef<int> labels) const {
  int64_t size = 1;
  for (int label : labels)
    size *= getExtent(label);
  return size;
}

bool EinsumBinding::isBroadcast(unsigned operand, unsigned dim) const {
  return operandShapes[operand][dim] != getExtent(operandLabels[operand][dim]);
}

bool EinsumBinding::hasBroadcast() const {
  for (unsigned i = 0, e = operandLabels.size(); i != e; ++i)
    for (unsigned d = 0, r = operandLabels[i].size(); d != r; ++d)
      if (isBroadcast(i, d))
        return true;
  return false;
}

bool EinsumBinding::operandHas(unsigned operand, int label) const {
  return llvm::is_contained(operandLabels[operand], label);
}

EinsumRole EinsumBinding::getRole(int label) const {
  if (!llvm::is_contained(outLabels, label))
    return EinsumRole::Contracted;
  unsigned operands = 0;
  for (unsigned i = 0, e = operandLabels.size(); i != e; ++i)
    operands += operandHas(i, label);
  return operands > 1 ? EinsumRole::Batch : EinsumRole::Free;
}

llvm::Expected<EinsumBinding>
ops::bindEinsum(const EinsumSpec &spec,
                llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> shapes) {
  unsigned numInputs = spec.getNumInputs();
  if (shapes.size() != numInputs)
    return einsumError("the equation names " + llvm::Twine(numInputs) +
                       " operands but the node has " +
                       llvm::Twine(shapes.size()));
  EinsumBinding binding;
  llvm::SmallVector<unsigned, 4> ellipsisCounts(numInputs, 0);
  for (unsigned i = 0; i < numInputs; ++i) {
    const EinsumTerm &term = spec.getInput(i);
    int64_t rank = shapes[i].size();
    int64_t numLetters = term.letters.size();
    if (term.hasEllipsis() ? rank < numLetters : rank != numLetters)
      return einsumError("input " + llvm::Twine(i) + " has rank " +
                         llvm::Twine(rank) + ", which does not match rank " +
                         llvm::Twine(numLetters) +
                         (term.hasEllipsis() ? " or more" : "") +
                         " of its term '" + term.str() + "'");
    if (term.hasRepeatedLetter())
      return einsumError("a label repeated within one operand (a diagonal) is "
                         "not supported");
    ellipsisCounts[i] = rank - numLetters;
    binding.ellipsisRank = std::max(binding.ellipsisRank, ellipsisCounts[i]);
  }
  // Bind extents; the ellipsis dimensions are right-aligned and broadcast.
  for (unsigned i = 0; i < numInputs; ++i) {
    binding.operandLabels.push_back(spec.getInput(i).expand(
        ellipsisCounts[i], binding.ellipsisRank - ellipsisCounts[i]));
    binding.operandShapes.emplace_back(shapes[i].begin(), shapes[i].end());
    const llvm::SmallVector<int, 8> &labels = binding.operandLabels.back();
    for (unsigned d = 0; d < labels.size(); ++d) {
      int label = labels[d];
      int64_t extent = shapes[i][d];
      auto [it, inserted] = binding.extents.try_emplace(label, extent);
      if (inserted || it->second == extent)
        continue;
      if (label >= kEinsumEllipsisLabel && (it->second == 1 || extent == 1)) {
        it->second = std::max(it->second, extent);
        continue;
      }
      return einsumError("label extents disagree: '" + einsumLabelName(label) +
                         "' binds " + llvm::Twine(it->second) + " and " +
                         llvm::Twine(extent));
    }
  }
  binding.outLabels = spec.getOutput().expand(binding.ellipsisRank);
  for (int label : binding.outLabels)
    binding.outShape.push_back(binding.getExtent(label));
  int numLabels = kEinsumEllipsisLabel + binding.ellipsisRank;
  for (int label = 0; label < numLabels; ++label)
    if (binding.extents.count(label) &&
        !llvm::is_contained(binding.outLabels, label))
      binding.summedLabels.push_back(label);
  return binding;
}
