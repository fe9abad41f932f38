//===- PassRegistry.cpp - Creating passes by name -------------------------===//
//
// Builds the registry from Passes.def, creates passes from parsed pipeline
// elements and prints the --list-passes listing (each pass's options, then
// its declared statistics). Unknown names get a
// "did you mean" suggestion by edit distance.
//
//===----------------------------------------------------------------------===//

#include "passes/PassRegistry.h"
#include "passes/PipelineParser.h"
#include "passes/amp/Amp.h"
#include "passes/amp/PackDropoutMasks.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/distributed/DataParallel.h"
#include "passes/distributed/ZeroShard.h"
#include "passes/planning/PlanBuffers.h"
#include "passes/planning/PrintPlan.h"
#include "passes/planning/Schedule.h"
#include "passes/recompute/Recompute.h"
#include "passes/transforms/Canonicalize.h"
#include "passes/transforms/Cse.h"
#include "passes/transforms/FoldScale.h"
#include "passes/transforms/FoldTranspose.h"
#include "passes/transforms/FuseAttention.h"
#include "passes/transforms/FuseCrossEntropy.h"
#include "passes/transforms/TieWeights.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace gmopt;

namespace {

std::vector<std::unique_ptr<PassInfo>> &registry() {
  static std::vector<std::unique_ptr<PassInfo>> passes = [] {
    std::vector<std::unique_ptr<PassInfo>> builtins;
#define GMOPT_PASS(NAME, CLASS, DESCRIPTION)                                   \
  builtins.push_back(std::make_unique<PassInfo>(PassInfo{                      \
      NAME, DESCRIPTION, [] { return std::unique_ptr<Pass>(new CLASS()); }}));
#include "passes/Passes.def"
    return builtins;
  }();
  return passes;
}

/// The registered name closest to \p name, if it is close enough to be a
/// plausible typo.
std::string suggestPass(llvm::StringRef name) {
  std::string best;
  unsigned bestDistance = std::max<unsigned>(2, name.size() / 3) + 1;
  for (const auto &info : registry()) {
    unsigned distance = name.edit_distance(info->name, true, bestDistance);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = info->name;
    }
  }
  return best;
}

} // namespace

std::vector<const PassInfo *> gmopt::getRegisteredPasses() {
  std::vector<const PassInfo *> infos;
  for (const auto &info : registry())
    infos.push_back(info.get());
  llvm::sort(infos, [](const PassInfo *a, const PassInfo *b) {
    return a->name < b->name;
  });
  return infos;
}

const PassInfo *gmopt::lookupPass(llvm::StringRef name) {
  for (const auto &info : registry())
    if (info->name == name)
      return info.get();
  return nullptr;
}

llvm::Error gmopt::registerPass(PassInfo info) {
  if (lookupPass(info.name))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "pass '" + info.name +
                                       "' is already registered");
  registry().push_back(std::make_unique<PassInfo>(std::move(info)));
  return llvm::Error::success();
}

std::unique_ptr<Pass> gmopt::createPass(llvm::StringRef name) {
  const PassInfo *info = lookupPass(name);
  if (!info)
    return nullptr;
  std::unique_ptr<Pass> pass = info->create();
  assert(pass && pass->getName() == info->name &&
         "Passes.def name and Pass::getName() disagree");
  return pass;
}

llvm::Expected<std::vector<std::unique_ptr<Pass>>>
gmopt::createPipeline(llvm::StringRef pipelineText) {
  auto elements = parsePipeline(pipelineText);
  if (!elements)
    return elements.takeError();
  std::vector<std::unique_ptr<Pass>> passes;
  for (const PipelineElement &element : *elements) {
    std::unique_ptr<Pass> pass = createPass(element.name);
    if (!pass) {
      std::string message = "unknown pass '" + element.name + "'";
      std::string suggestion = suggestPass(element.name);
      if (!suggestion.empty())
        message += "; did you mean '" + suggestion + "'?";
      else
        message += " (see --list-passes)";
      return makePipelineError(pipelineText, element.column, message);
    }
    for (const PipelineOption &option : element.options) {
      if (llvm::Error err = pass->setOption(option.key, option.value)) {
        unsigned column = pass->lookupOption(option.key) ? option.valueColumn
                                                         : option.keyColumn;
        return makePipelineError(pipelineText, column,
                                 llvm::toString(std::move(err)));
      }
    }
    passes.push_back(std::move(pass));
  }
  return passes;
}

void gmopt::printRegisteredPasses(llvm::raw_ostream &os) {
  os << "Available passes:\n";
  for (const PassInfo *info : getRegisteredPasses()) {
    os << "  " << info->name << " - " << info->description << '\n';
    std::unique_ptr<Pass> pass = info->create();
    for (const PassOption &option : pass->getOptions())
      os << "      " << option.getKey() << "=<" << option.getValueKind()
         << "> (default " << quotePipelineValue(option.getDefault()) << ") - "
         << option.getDescription() << '\n';
    for (const PassStatisticInfo &statistic : pass->getDeclaredStatistics())
      os << "      (S) " << statistic.name << " - " << statistic.description
         << '\n';
  }
}
