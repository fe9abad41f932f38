//===- PrintPlan.cpp - Printing module.plan for golden tests --------------===//
//
// Prints `plan { ... }` (or that there is none) and returns "unchanged".
//
//===----------------------------------------------------------------------===//

#include "passes/planning/PrintPlan.h"
#include "passes/planning/PlanReport.h"

#include "ir/Module.h"

#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

PrintPlanPass::PrintPlanPass() : PrintPlanPass(Options(), llvm::outs()) {}

PrintPlanPass::PrintPlanPass(Options initial, llvm::raw_ostream &os)
    : options(initial), os(os) {
  declareOption("report", options.report,
                "also print the figures as the report table");
}

llvm::Expected<bool> PrintPlanPass::run(Module &module, PassContext &context) {
  if (module.plan.empty())
    os << "plan {}\n";
  else
    module.plan.print(module, os);
  if (options.report)
    printPlanReport(module, os);
  os.flush();
  return false;
}
