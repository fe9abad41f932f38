//===- EinsumSpec.h - What an Einsum equation means -------------*- C++ -*-===//
//
// The one reading of an ai.onnx Einsum equation that shape inference, the
// cost model, the gradient rule, the CPU kernel and the CUDA plan share.
// EinsumSpec is the equation parsed on its own: a term per operand (letters
// a-z and A-Z, at most one ellipsis), the output (explicit, or numpy's
// implicit one: the ellipsis dimensions, then the letters used exactly once
// in ASCII order) and the role of each letter (batch, free or contracted).
// EinsumBinding is a spec bound to the operands' static shapes: each
// dimension of each operand named by a label (the ellipsis dimensions
// right-aligned across operands, broadcasting where their extent is 1), the
// extent of every label, the output shape and the labels summed away.
// Errors are llvm::Errors with plain messages (callers add the node).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_EINSUMSPEC_H
#define GMOPT_IR_OPS_EINSUMSPEC_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gmopt {
namespace ops {

/// Labels name the dimensions of an einsum: letters a-z are 0..25, A-Z
/// 26..51, and dimension d of the ellipsis (counted from the left of the
/// broadcast ellipsis dimensions) is kEinsumEllipsisLabel + d.
constexpr int kEinsumEllipsisLabel = 52;

/// The label of letter \p c (which must be a-z or A-Z).
int einsumLetterLabel(char c);

/// The text of \p label: its letter, or "..." for an ellipsis dimension.
std::string einsumLabelName(int label);

/// What a label does in the product.
enum class EinsumRole {
  /// In the output and in more than one operand: a batch dimension.
  Batch,
  /// In the output and in exactly one operand.
  Free,
  /// Not in the output: summed away.
  Contracted,
};

/// One term of an equation (an operand or the output) as written.
struct EinsumTerm {
  /// The letters' labels, in order, without the ellipsis.
  llvm::SmallVector<int, 8> letters;
  /// The position of the ellipsis among the letters (the number of letters
  /// before it), or -1.
  int ellipsisAt = -1;

  /// True when the term has an ellipsis.
  bool hasEllipsis() const { return ellipsisAt >= 0; }
  /// True when a letter appears twice (a diagonal).
  bool hasRepeatedLetter() const;
  /// True when the term names \p label among its letters.
  bool hasLetter(int label) const;
  /// The term as text ("ab...c").
  std::string str() const;
  /// The labels of a term's dimensions when its ellipsis stands for
  /// \p ellipsisCount dimensions: the letters with, at the ellipsis, the
  /// labels kEinsumEllipsisLabel + \p firstEllipsisDim + 0, 1, ...
  llvm::SmallVector<int, 8> expand(unsigned ellipsisCount,
                                   unsigned firstEllipsisDim = 0) const;
};

/// An Einsum equation, parsed and checked on its own (no shapes).
class EinsumSpec {
public:
  /// Parses \p equation (spaces are ignored). Rejects an empty equation,
  /// characters other than letters, ',', "->" and "...", more than one
  /// ellipsis in a term, and output letters that are repeated or appear in
  /// no operand.
  static llvm::Expected<EinsumSpec> parse(llvm::StringRef equation);

  /// The number of operand terms.
  unsigned getNumInputs() const { return inputs.size(); }
  /// The operand terms.
  llvm::ArrayRef<EinsumTerm> getInputs() const { return inputs; }
  /// The term of operand \p i.
  const EinsumTerm &getInput(unsigned i) const { return inputs[i]; }
  /// True when the equation writes its output ("...->...").
  bool hasExplicitOutput() const { return explicitOutput; }
  /// The output term: the explicit one, or numpy's implicit one.
  const EinsumTerm &getOutput() const { return output; }
  /// True when some operand term has an ellipsis.
  bool hasEllipsis() const;
  /// The number of times letter \p label is written in the operand terms.
  unsigned getLetterCount(int label) const;
  /// The number of operand terms that name letter \p label.
  unsigned getNumOperandsWith(int label) const;
  /// The role of letter \p label (one the operands name).
  EinsumRole getLetterRole(int label) const;
  /// The equation without spaces, as parsed.
  llvm::StringRef str() const { return text; }

private:
  std::string text;
  std::vector<EinsumTerm> inputs;
  EinsumTerm output;
  bool explicitOutput = false;
};

/// An EinsumSpec bound to static operand shapes: every dimension named by a
/// label, each label's extent and the output it makes.
struct EinsumBinding {
  /// The labels of each operand's dimensions. The ellipsis dimensions of
  /// all operands are right-aligned: an operand whose ellipsis stands for
  /// fewer dimensions than ellipsisRank has the last ones.
  llvm::SmallVector<llvm::SmallVector<int, 8>, 4> operandLabels;
  /// The stored shape of each operand.
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> operandShapes;
  /// The labels of the output's dimensions.
  llvm::SmallVector<int, 8> outLabels;
  /// The labels not in the output, ascending.
  llvm::SmallVector<int, 16> summedLabels;
  /// The output shape.
  llvm::SmallVector<int64_t, 8> outShape;
  /// The number of broadcast dimensions the ellipsis stands for.
  unsigned ellipsisRank = 0;
  /// The extent of each label (the broadcast extent for an ellipsis
  /// dimension).
  llvm::DenseMap<int, int64_t> extents;

  /// The extent of \p label.
  int64_t getExtent(int label) const { return extents.lookup(label); }
  /// The product of the extents of \p labels.
  int64_t getExtent(llvm::ArrayRef<int> labels) const;
  /// True when dimension \p dim of operand \p operand has extent 1 where
  /// its label's extent is larger (an ellipsis dimension broadcast).
  bool isBroadcast(unsigned operand, unsigned dim) const;
  /// True when some operand dimension is broadcast.
  bool hasBroadcast() const;
  /// True when operand \p operand has a dimension labelled \p label.
  bool operandHas(unsigned operand, int label) const;
  /// The role of \p label (batch, free or contracted) among the operands.
  EinsumRole getRole(int label) const;
};

/// Binds \p spec to operands of \p shapes. Rejects a count of shapes other
/// than the spec's operands, a rank that does not match its term, a label
/// repeated within one operand (a diagonal, which no kernel computes) and
/// extents that disagree (ellipsis dimensions broadcast from extent 1).
llvm::Expected<EinsumBinding>
bindEinsum(const EinsumSpec &spec,
           llvm::ArrayRef<llvm::SmallVector<int64_t, 8>> shapes);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_EINSUMSPEC_H
