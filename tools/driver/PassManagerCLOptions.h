//===- PassManagerCLOptions.h - Pass-manager flags of the tools -*- C++ -*-===//
//
// The command-line face of PassManagerOptions, shared by gmopt-opt and
// gmopt-compile (after mlir/lib/Pass/PassManagerOptions.cpp): --passes,
// --print-ir-before/after[-all], --verify-each, --time-passes,
// --pass-statistics, --print-pipeline, --list-passes, gmopt's own
// --debug / --debug-only (see passes/DebugOutput.h), and --workspace (whose
// kernel scratch plan-buffers reserves). Constructing an
// instance registers the options, so a tool creates one before parsing its
// command line.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_PASSMANAGERCLOPTIONS_H
#define GMOPT_TOOLS_DRIVER_PASSMANAGERCLOPTIONS_H

#include "ir/Plan.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace gmopt {

class PassManager;

/// Whose kernel scratch the planner reserves (--workspace).
enum class WorkspaceTarget { Cpu, Cuda, None };

/// The WorkspaceModel of \p target (null for None).
WorkspaceModel getWorkspaceModel(WorkspaceTarget target);
/// The name plans record for \p target's model (`cpu`, `cuda`, `none`).
llvm::StringRef workspaceModelName(WorkspaceTarget target);

/// The pass-manager options of a tool's command line.
class PassManagerCLOptions {
public:
  /// Registers the options; \p passesHelp describes --passes for this tool.
  explicit PassManagerCLOptions(const std::string &passesHelp);
  ~PassManagerCLOptions();

  /// True if --passes was given (even as the empty pipeline).
  bool hasPipeline() const;
  /// The --passes text.
  std::string getPipeline() const;
  /// True if --print-pipeline was given.
  bool shouldPrintPipeline() const;
  /// True if --list-passes was given.
  bool shouldListPasses() const;

  /// The --workspace model (the CPU kernels' unless --workspace=none).
  WorkspaceModel getWorkspaceModel() const;
  /// Applies the instrumentation and debug flags and the workspace model to
  /// \p passManager. Fails if
  /// --print-ir-before/after names a pass that does not exist.
  llvm::Error configure(PassManager &passManager) const;

private:
  struct Storage;
  std::unique_ptr<Storage> storage;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_PASSMANAGERCLOPTIONS_H
