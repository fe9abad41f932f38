//===- PassManagerCLOptions.cpp - Pass-manager flags of the tools ---------===//
//
// The llvm::cl options behind PassManagerCLOptions, all in gmopt's option
// category so they are what --help lists.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"

#include "backend/cpu/CpuKernel.h"
#include "backend/cuda/CudaDevice.h"
#include "passes/DebugOutput.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "llvm/Support/CommandLine.h"

using namespace gmopt;
namespace cl = llvm::cl;

struct PassManagerCLOptions::Storage {
  explicit Storage(const std::string &help)
      : passesHelp(help),
        passes("passes", cl::desc(passesHelp), cl::value_desc("pipeline"),
               cl::cat(getGmoptCategory())),
        printIRBefore("print-ir-before",
                      cl::desc("Print the IR before each run of these passes"),
                      cl::value_desc("pass"), cl::CommaSeparated,
                      cl::cat(getGmoptCategory())),
        printIRAfter("print-ir-after",
                     cl::desc("Print the IR after each run of these passes"),
                     cl::value_desc("pass"), cl::CommaSeparated,
                     cl::cat(getGmoptCategory())),
        printIRBeforeAll("print-ir-before-all",
                         cl::desc("Print the IR before every pass"),
                         cl::cat(getGmoptCategory())),
        printIRAfterAll("print-ir-after-all",
                        cl::desc("Print the IR after every pass"),
                        cl::cat(getGmoptCategory())),
        verifyEach("verify-each",
                   cl::desc("Run the verifier after each pass (default true)"),
                   cl::init(true), cl::cat(getGmoptCategory())),
        timePasses("time-passes",
                   cl::desc("Print the wall time of each pass to stderr"),
                   cl::cat(getGmoptCategory())),
        passStatistics("pass-statistics",
                       cl::desc("Print pass statistics to stderr"),
                       cl::cat(getGmoptCategory())),
        printPipeline("print-pipeline",
                      cl::desc("Print the pipeline that ran, with every "
                               "option explicit, to stderr"),
                      cl::cat(getGmoptCategory())),
        listPasses("list-passes",
                   cl::desc("List the available passes and their options"),
                   cl::cat(getGmoptCategory())),
        debug("debug", cl::desc("Print every debug trace to stderr"),
              cl::cat(getGmoptCategory())),
        debugOnly("debug-only",
                  cl::desc("Print the debug traces of these DEBUG_TYPEs, e.g. "
                           "gmopt-canonicalize"),
                  cl::value_desc("type"), cl::CommaSeparated,
                  cl::cat(getGmoptCategory())),
        workspace("workspace",
                  cl::desc("Kernel scratch the plan reserves per node"),
                  cl::values(clEnumValN(WorkspaceTarget::Cpu, "cpu",
                                        "the CPU kernels' scratch (default)"),
                             clEnumValN(WorkspaceTarget::Cuda, "cuda",
                                        "the CUDA kernels' scratch (cuBLASLt "
                                        "and cuDNN workspaces)"),
                             clEnumValN(WorkspaceTarget::None, "none",
                                        "none: kernels allocate scratch "
                                        "outside the plan")),
                  cl::init(WorkspaceTarget::Cpu), cl::cat(getGmoptCategory())) {
  }

  /// cl::desc keeps a StringRef, so the text must outlive the option.
  std::string passesHelp;
  cl::opt<std::string> passes;
  cl::list<std::string> printIRBefore;
  cl::list<std::string> printIRAfter;
  cl::opt<bool> printIRBeforeAll;
  cl::opt<bool> printIRAfterAll;
  cl::opt<bool> verifyEach;
  cl::opt<bool> timePasses;
  cl::opt<bool> passStatistics;
  cl::opt<bool> printPipeline;
  cl::opt<bool> listPasses;
  cl::opt<bool> debug;
  cl::list<std::string> debugOnly;
  cl::opt<WorkspaceTarget> workspace;
};

PassManagerCLOptions::PassManagerCLOptions(const std::string &passesHelp)
    : storage(std::make_unique<Storage>(passesHelp)) {}

PassManagerCLOptions::~PassManagerCLOptions() = default;

bool PassManagerCLOptions::hasPipeline() const {
  return storage->passes.getNumOccurrences() != 0;
}

std::string PassManagerCLOptions::getPipeline() const {
  return storage->passes;
}

bool PassManagerCLOptions::shouldPrintPipeline() const {
  return storage->printPipeline;
}

WorkspaceModel gmopt::getWorkspaceModel(WorkspaceTarget target) {
  switch (target) {
  case WorkspaceTarget::Cpu:
    return cpu::getCpuKernelWorkspaceBytes;
  case WorkspaceTarget::Cuda:
    return getCudaKernelWorkspaceBytes;
  case WorkspaceTarget::None:
    return nullptr;
  }
  return nullptr;
}

llvm::StringRef gmopt::workspaceModelName(WorkspaceTarget target) {
  switch (target) {
  case WorkspaceTarget::Cpu:
    return cpu::kCpuWorkspaceModelName;
  case WorkspaceTarget::Cuda:
    return kCudaWorkspaceModelName;
  case WorkspaceTarget::None:
    return kNoWorkspaceModelName;
  }
  return kNoWorkspaceModelName;
}

WorkspaceModel PassManagerCLOptions::getWorkspaceModel() const {
  return gmopt::getWorkspaceModel(storage->workspace);
}

bool PassManagerCLOptions::shouldListPasses() const {
  return storage->listPasses;
}

llvm::Error PassManagerCLOptions::configure(PassManager &passManager) const {
  for (const auto *list : {&storage->printIRBefore, &storage->printIRAfter})
    for (const std::string &name : *list)
      if (!lookupPass(name))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "--%s: unknown pass '%s' (see --list-passes)",
            list == &storage->printIRBefore ? "print-ir-before"
                                            : "print-ir-after",
            name.c_str());
  PassManagerOptions &options = passManager.getOptions();
  options.verifyEach = storage->verifyEach;
  options.printBeforeAll = storage->printIRBeforeAll;
  options.printAfterAll = storage->printIRAfterAll;
  options.printBefore.assign(storage->printIRBefore.begin(),
                             storage->printIRBefore.end());
  options.printAfter.assign(storage->printIRAfter.begin(),
                            storage->printIRAfter.end());
  passManager.getContext().setWorkspaceModel(
      getWorkspaceModel(), workspaceModelName(storage->workspace).str());
  options.timePasses = storage->timePasses;
  options.passStatistics = storage->passStatistics;
  setDebugAll(storage->debug);
  setDebugTypes(std::vector<std::string>(storage->debugOnly.begin(),
                                         storage->debugOnly.end()));
  return llvm::Error::success();
}
