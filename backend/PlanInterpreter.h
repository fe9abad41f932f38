//===- PlanInterpreter.h - One executor for every backend -------*- C++ -*-===//
//
// gmopt executes a compiled module the same way on every backend: the plan
// interpreter decodes the graph into instructions, places every value
// (persistent blocks, arena slices at the plan's offsets, aliases, in-place
// groups, workspace slices; or, in eager mode, one block per tensor from
// its definition to its last use), accounts for memory by category, and
// runs the step loop with optional per-op profiling. A backend supplies only
// a Device (memory, copies, kernels). See backend/Device.h.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_PLANINTERPRETER_H
#define GMOPT_BACKEND_PLANINTERPRETER_H

#include "backend/Device.h"
#include "backend/Executor.h"

#include <memory>

namespace gmopt {

/// Prepares \p module to run on \p device: allocates its persistent values
/// and, in planned mode, the one arena of module.plan (or of a trivial plan
/// made with \p trivialWorkspace when the module has none). A plan made for
/// a workspace model other than the device's is refused. The module must
/// outlive the Executable, have static shapes and pass the verifier.
llvm::Expected<std::unique_ptr<Executable>>
createPlanInterpreter(const Module &module, const ExecutorOptions &options,
                      std::unique_ptr<Device> device,
                      const WorkspaceModel &trivialWorkspace);

} // namespace gmopt

#endif // GMOPT_BACKEND_PLANINTERPRETER_H
