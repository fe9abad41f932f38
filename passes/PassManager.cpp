//===- PassManager.cpp - Running a pipeline of passes ---------------------===//
//
// The run loop: dump before, time and run the pass, dump after, verify,
// accumulate timings; then the reports. Errors from a pass or from the
// verifier are returned with the pass named, never printed here, so the
// tool prints each failure exactly once.
//
//===----------------------------------------------------------------------===//

#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "ir/Module.h"
#include "ir/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace gmopt;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

llvm::Error prefixError(llvm::Error err, const llvm::Twine &prefix) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 prefix + llvm::toString(std::move(err)));
}

} // namespace

PassManager::PassManager(PassManagerOptions options)
    : options(std::move(options)), reportStream(&llvm::errs()) {}

PassManager::~PassManager() = default;

void PassManager::addPass(std::unique_ptr<Pass> pass) {
  assert(pass && "adding a null pass");
  passes.push_back(std::move(pass));
}

llvm::Error PassManager::addPipeline(llvm::StringRef pipelineText) {
  auto created = createPipeline(pipelineText);
  if (!created)
    return created.takeError();
  for (std::unique_ptr<Pass> &pass : *created)
    passes.push_back(std::move(pass));
  return llvm::Error::success();
}

std::string PassManager::getPipelineString() const {
  std::string text;
  for (const std::unique_ptr<Pass> &pass : passes) {
    if (!text.empty())
      text += ',';
    text += pass->getPipelineElement();
  }
  return text;
}

bool PassManager::shouldPrintBefore(const Pass &pass) const {
  return options.printBeforeAll ||
         llvm::is_contained(options.printBefore, pass.getName());
}

bool PassManager::shouldPrintAfter(const Pass &pass) const {
  return options.printAfterAll ||
         llvm::is_contained(options.printAfter, pass.getName());
}

void PassManager::dumpIR(const Module &module, llvm::StringRef when,
                         const Pass &pass) const {
  // The header of mlir's --mlir-print-ir-after, so tools that split dumps
  // on it keep working.
  *reportStream << "// -----// IR Dump " << when << ' ' << pass.getName()
                << " //----- //\n";
  printModule(module, *reportStream, options.dumpOptions);
  *reportStream << '\n';
  reportStream->flush();
}

llvm::Error PassManager::run(Module &module) {
  timings.clear();
  context.clearStatistics();
  lastRunChanged = false;
  double verifierSeconds = 0;
  for (const std::unique_ptr<Pass> &pass : passes) {
    if (shouldPrintBefore(*pass))
      dumpIR(module, "Before", *pass);

    auto start = std::chrono::steady_clock::now();
    llvm::Expected<bool> changed = pass->run(module, context);
    timings.push_back({pass->getName().str(), secondsSince(start)});
    if (!changed)
      return prefixError(changed.takeError(),
                         "pass '" + pass->getName() + "' failed: ");
    lastRunChanged |= *changed;

    if (shouldPrintAfter(*pass))
      dumpIR(module, "After", *pass);

    if (options.verifyEach) {
      auto verifyStart = std::chrono::steady_clock::now();
      llvm::Error err = verifyModule(module);
      verifierSeconds += secondsSince(verifyStart);
      if (err)
        return prefixError(std::move(err), "verification failed after pass '" +
                                               pass->getName() + "': ");
    }
  }
  if (options.verifyEach && !passes.empty())
    timings.push_back({"(verifier)", verifierSeconds});

  if (options.timePasses)
    printTimings(*reportStream);
  if (options.passStatistics)
    context.printStatistics(*reportStream);
  reportStream->flush();
  return llvm::Error::success();
}

void PassManager::printTimings(llvm::raw_ostream &os) const {
  double total = 0;
  for (const PassTiming &timing : timings)
    total += timing.seconds;
  os << "===" << std::string(73, '-') << "===\n"
     << "                      ... Pass execution timing report ...\n"
     << "===" << std::string(73, '-') << "===\n"
     << llvm::format("  Total Execution Time: %.4f seconds\n\n", total)
     << "  ----Wall Time----  ----Name----\n";
  for (const PassTiming &timing : timings)
    os << llvm::format("  %8.4f (%5.1f%%)  ", timing.seconds,
                       total > 0 ? 100.0 * timing.seconds / total : 0.0)
       << timing.name << '\n';
  os << llvm::format("  %8.4f (100.0%%)  Total\n", total);
}
