//===- TieWeights.h - One parameter where there were copies -----*- C++ -*-===//
//
// `tie-weights{mode=auto|suggest|explicit, pairs="A=B,C=D^T"}` merges
// parameters that are copies of one another. Exporters break ties: PyTorch's
// constant folding stores a transposed copy of a tied LM-head weight
// (PyTorch issue 108342), and training that graph trains two weights that
// drift apart, each with its own gradient, accumulation buffer and
// optimizer state.
//
//   * explicit: `pairs` names them; `A=B` keeps A and replaces B, `C=D^T`
//     keeps C and replaces D, which is C transposed (D's uses read
//     Transpose(C), which fold-transpose then folds into the products).
//     Unknown names, non-parameters and shape mismatches are errors.
//   * auto: ties parameters whose initial values are bitwise identical or
//     exact transposes of each other, of one element type and
//     trainability, and not constant-filled (a tensor whose elements are
//     all equal - zeros, ones - is never tied by value). The values come
//     from the tool's --weights file (setParameterValues) or the
//     parameter's own data (an initializer, an input's default); pairs
//     whose shapes match but whose values are unknown are reported, not
//     tied. The earlier parameter in signature order is kept.
//   * suggest: the same search; reports, changes nothing.
//
// The rewrite is Module::mergeParameter (ir/Module.h): the kept
// parameter's gradient becomes the sum of both contributions (a transposed
// copy's gradient transposed first), through the kept parameter's one
// accumulator; the copy's gradient output, accumulation buffer, optimizer
// state and its operands in a fused optimizer node leave the module (and
// so the plan and the checkpoint). Statistics: pairs tied, bytes removed
// per category (parameters, gradients, optimizer_state).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_TIEWEIGHTS_H
#define GMOPT_PASSES_TRANSFORMS_TIEWEIGHTS_H

#include "passes/Pass.h"

#include "ir/Attribute.h"

#include "llvm/ADT/StringRef.h"

#include <functional>
#include <string>
#include <vector>

namespace gmopt {

class Module;
class Value;

/// The value of the parameter named \p name, or null when unknown.
using ParameterValues = std::function<const TensorData *(llvm::StringRef)>;

/// Two parameters to make one: \p dropped becomes \p kept (or, when
/// \p transposed, kept's transpose).
struct TiePair {
  Value *kept = nullptr;
  Value *dropped = nullptr;
  bool transposed = false;
  /// `B -> A^T`.
  std::string str() const;
};

/// What the search over a module's parameters found.
struct TieSearch {
  /// Pairs whose values are bitwise identical (or transposed).
  std::vector<TiePair> ties;
  /// Pairs whose types match but whose values are not both known.
  std::vector<TiePair> undecided;
  /// Parameters skipped because every element is the same.
  std::vector<Value *> constantFilled;
};

/// Searches \p module's parameters for copies (see the file comment);
/// \p values may be empty.
TieSearch findTies(const Module &module, const ParameterValues &values);

/// Parses `A=B,C=D^T` against \p module's parameters.
llvm::Expected<std::vector<TiePair>> parseTiePairs(const Module &module,
                                                   llvm::StringRef pairs);

/// Bytes a tie removes, by plan category.
struct TieSavings {
  uint64_t parameters = 0;
  uint64_t gradients = 0;
  uint64_t optimizerState = 0;
};

/// Merges \p pair.dropped into \p pair.kept (see the file comment). Fails,
/// changing nothing, when they are not two parameters of matching types
/// and trainability.
llvm::Expected<TieSavings> tieParameters(Module &module, const TiePair &pair);

/// How the pass picks its pairs.
enum class TieMode : uint8_t { Auto, Suggest, Explicit };

/// Repairs parameters whose accumulation buffer several accumulation nodes
/// write (a graph that accumulates each use's gradient separately): with
/// lazy_reset_grad each of them would overwrite the buffer, keeping only
/// the last contribution. The gradients are summed into one value (the
/// parameter's gradient now) that the last of those nodes accumulates; the
/// others go, with their graph outputs. Returns how many parameters were
/// repaired.
unsigned mergeDuplicateAccumulations(Module &module);

/// The `tie-weights` pass.
class TieWeightsPass : public Pass {
public:
  struct Options {
    TieMode mode = TieMode::Auto;
    /// explicit: `A=B,C=D^T`.
    std::string pairs;
    /// Print what was found and done to stderr.
    bool printPlan = false;
    /// Note on stderr the pairs whose values are unknown (auto, suggest).
    /// gmopt-compile --train ties quietly: there the user asked for no
    /// tying, so only what is proven is done and nothing else is said. Set
    /// by the tool, not a pipeline option.
    bool reportUndecided = true;
  };

  TieWeightsPass();
  explicit TieWeightsPass(Options options);

  llvm::StringRef getName() const override { return "tie-weights"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override;

  /// Where auto and suggest read initial values (the tool's --weights).
  void setParameterValues(ParameterValues lookup) {
    values = std::move(lookup);
  }

private:
  Options options;
  ParameterValues values;
};

class PassManager;

/// Gives \p values to every tie-weights pass of \p passManager's pipeline
/// (the tools' --weights file or test data). Returns how many there were.
unsigned installParameterValues(PassManager &passManager,
                                const ParameterValues &values);

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_TIEWEIGHTS_H
