//===- PassRegistry.h - Creating passes by name -----------------*- C++ -*-===//
//
// The registry maps pipeline names to pass factories. It is filled from
// Passes.def; tests and out-of-tree users may add passes with registerPass.
// createPipeline turns pipeline text into configured pass instances, with
// every error (unknown pass, unknown option, bad value) pointing at its
// column.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PASSREGISTRY_H
#define GMOPT_PASSES_PASSREGISTRY_H

#include "passes/Pass.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

/// How to create one registered pass.
struct PassInfo {
  /// The pipeline name, e.g. `canonicalize`.
  std::string name;
  /// One-line summary for --list-passes.
  std::string description;
  /// Creates an instance with default options.
  std::function<std::unique_ptr<Pass>()> create;
};

/// Every registered pass, sorted by name.
std::vector<const PassInfo *> getRegisteredPasses();
/// The pass registered as \p name, or null.
const PassInfo *lookupPass(llvm::StringRef name);
/// Registers an extra pass (tests, plugins). Fails if the name is taken.
llvm::Error registerPass(PassInfo info);
/// Creates pass \p name with default options, or null if unknown.
std::unique_ptr<Pass> createPass(llvm::StringRef name);

/// Parses \p pipelineText and creates its passes with their options set.
llvm::Expected<std::vector<std::unique_ptr<Pass>>>
createPipeline(llvm::StringRef pipelineText);

/// Prints every registered pass with its description, options and declared
/// statistics (`(S) name - description`), as --list-passes shows them.
void printRegisteredPasses(llvm::raw_ostream &os);

} // namespace gmopt

#endif // GMOPT_PASSES_PASSREGISTRY_H
