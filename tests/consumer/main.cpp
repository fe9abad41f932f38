//===- main.cpp - A program built against the installed gmopt -------------===//
//
// An out-of-tree user of gmopt's libraries (find_package(gmopt)): it
// registers its own pass, `count-ops`, which counts the graph's nodes by op
// and reports them as pass statistics, runs it in a textual pipeline between
// gmopt's passes on an ONNX training graph, planning for the CPU backend's
// kernel workspace as gmopt-compile does, and prints the planned memory
// figures. Usage: gmopt-consumer MODEL.onnx [PIPELINE]. The last line is one
// JSON object (pipeline, statistics, memory) that run-consumer-test.sh checks
// against gmopt-compile's report.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/CpuKernel.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"
#include "passes/planning/PlanBuffers.h"
#include "passes/planning/PlanReport.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

using namespace gmopt;

namespace {

/// Counts nodes by op (`MatMul`, `com.microsoft.SoftmaxGrad`, ...); changes
/// nothing.
class CountOpsPass : public Pass {
public:
  llvm::StringRef getName() const override { return "count-ops"; }
  llvm::Expected<bool> run(Module &module, PassContext &context) override {
    std::map<std::string, uint64_t> counts; // by name: a stable order
    for (const Node &node : module.getGraph().getNodes())
      ++counts[node.getOp().str()];
    addStatistic(context, "nodes", module.getGraph().getNumNodes(),
                 "nodes in the graph");
    addStatistic(context, "op-types", counts.size(), "distinct ops");
    for (const auto &[op, count] : counts)
      addStatistic(context, op, count, "nodes of op");
    return false;
  }
};

int fail(llvm::Error err) {
  llvm::errs() << "gmopt-consumer: error: " << llvm::toString(std::move(err))
               << '\n';
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    llvm::errs() << "usage: gmopt-consumer MODEL.onnx [PIPELINE]\n";
    return 2;
  }
  if (llvm::Error err =
          registerPass({"count-ops", "count the graph's nodes by op", [] {
                          return std::unique_ptr<Pass>(new CountOpsPass());
                        }}))
    return fail(std::move(err));

  OnnxImportOptions importOptions;
  importOptions.dimBindings = {{"batch", 4}, {"batch_x_seq", 256}};
  // The graph as imported, for the eager baseline, and the one compiled.
  auto original = importOnnxFile(argv[1], importOptions);
  if (!original)
    return fail(original.takeError());
  auto module = importOnnxFile(argv[1], importOptions);
  if (!module)
    return fail(module.takeError());

  PassManagerOptions options;
  options.passStatistics = true;
  PassManager passManager(options);
  passManager.setReportStream(llvm::outs());
  WorkspaceModel workspace = cpu::getCpuKernelWorkspaceBytes;
  passManager.getContext().setWorkspaceModel(workspace,
                                             cpu::kCpuWorkspaceModelName.str());
  if (llvm::Error err = passManager.addPipeline(
          argc == 3 ? argv[2] : "canonicalize,count-ops,schedule,plan-buffers"))
    return fail(std::move(err));
  if (llvm::Error err = passManager.run(**module))
    return fail(std::move(err));
  auto eagerBaseline = estimateEagerPeakBytes(**original, workspace);
  if (!eagerBaseline)
    return fail(eagerBaseline.takeError());

  llvm::outs() << "pipeline: " << passManager.getPipelineString() << '\n';
  printPlanReport(**module, llvm::outs(), *eagerBaseline);
  llvm::json::Object summary{
      {"pipeline", passManager.getPipelineString()},
      {"pass_statistics", passStatisticsJson(passManager.getContext())},
      {"memory", planReportJson(**module, *eagerBaseline)}};
  llvm::outs() << llvm::json::Value(std::move(summary)) << '\n';
  return 0;
}
