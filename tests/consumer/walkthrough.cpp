// README's walkthrough through the library: import a training graph, run
// gmopt's passes, print the memory report. Usage: walkthrough MODEL.onnx
#include "backend/cpu/CpuKernel.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"
#include "passes/PassManager.h"
#include "passes/planning/PlanBuffers.h"
#include "passes/planning/PlanReport.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

static int fail(llvm::Error err) {
  llvm::errs() << "error: " << llvm::toString(std::move(err)) << '\n';
  return 1;
}

int main(int argc, char **argv) {
  OnnxImportOptions import;
  import.dimBindings = {{"batch", 4}, { "batch_x_seq", 256 }};
  auto original = importOnnxFile(argv[1], import); // the baseline
  auto module = importOnnxFile(argv[1], import);   // the one rewritten
  if (!original || !module)
    return fail(llvm::joinErrors(original.takeError(), module.takeError()));
  PassManager passes;
  WorkspaceModel workspace = cpu::getCpuKernelWorkspaceBytes; // CPU scratch
  passes.getContext().setWorkspaceModel(workspace,
                                        cpu::kCpuWorkspaceModelName.str());
  if (llvm::Error err =
          passes.addPipeline("canonicalize,fold-transpose,"
                             "recompute{mode=selective},schedule,plan-buffers"))
    return fail(std::move(err));
  if (llvm::Error err = passes.run(**module))
    return fail(std::move(err));
  auto eager = estimateEagerPeakBytes(**original, workspace);
  if (!eager)
    return fail(eager.takeError());
  printPlanReport(**module, llvm::outs(), *eager);
}
