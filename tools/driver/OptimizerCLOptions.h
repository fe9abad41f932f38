//===- OptimizerCLOptions.h - In-graph optimizer flags of the tools -*- C++ -*-===//
//
// The command-line face of OptimizerSpec, shared by gmopt-compile, gmopt-opt
// and gmopt-run: --optimizer-model (ONNX Runtime's optimizer_model.onnx,
// merged into the training module), --optimizer=adamw|sgd|none (built
// without an optimizer graph), and the AdamW hyper-parameters
// --adam-beta1, --adam-beta2, --adam-epsilon, --weight-decay, --adam-mode,
// --correct-bias (the attributes of com.microsoft AdamWOptimizer; the
// defaults are those of ONNX Runtime's generate_artifacts AdamW, so
// `--optimizer=adamw` builds what optimizer_model.onnx holds). Constructing
// an instance registers the options.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_OPTIMIZERCLOPTIONS_H
#define GMOPT_TOOLS_DRIVER_OPTIMIZERCLOPTIONS_H

#include "ir/Optimizer.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <optional>

namespace gmopt {

/// The --optimizer choices.
enum class OptimizerChoice { SGD, AdamW, None };

/// The optimizer options of a tool's command line.
class OptimizerCLOptions {
public:
  /// Registers the options; \p defaultChoice is --optimizer's default.
  explicit OptimizerCLOptions(OptimizerChoice defaultChoice);
  ~OptimizerCLOptions();

  /// The --optimizer value.
  OptimizerChoice getChoice() const;
  /// True if --optimizer was given.
  bool choiceGiven() const;
  /// The --optimizer-model path, or empty.
  std::string getOptimizerModel() const;
  /// True if any AdamW hyper-parameter flag was given.
  bool hyperparametersGiven() const;

  /// What to build: the imported --optimizer-model, else --optimizer with
  /// the hyper-parameter flags, else nullopt (none). Errors for a bad
  /// optimizer model, for --optimizer-model together with --optimizer or a
  /// hyper-parameter flag, for hyper-parameters with --optimizer=sgd|none,
  /// and for values AdamWOptimizer does not define.
  llvm::Expected<std::optional<OptimizerSpec>> getSpec() const;

private:
  struct Storage;
  std::unique_ptr<Storage> storage;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_OPTIMIZERCLOPTIONS_H
