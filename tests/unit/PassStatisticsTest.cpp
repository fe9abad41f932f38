//===- PassStatisticsTest.cpp - Statistics declared with their pass -------===//
//
// Every statistic a pass reports is one it declared in its constructor
// (declareStatistic), so --list-passes can show them: the default pipeline
// on the mlp training graph, and a wider one (cse, tie-weights, amp,
// pack-dropout-masks, sqrt recompute) on gpt_tiny_dropout, report only
// declared statistics with their declared descriptions; the check finds a
// statistic a pass reports without declaring it; every registered pass's
// declarations are well formed; and --list-passes prints them under the
// pass's options.
//
//===----------------------------------------------------------------------===//

#include "passes/DefaultPipeline.h"
#include "passes/Pass.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <map>
#include <set>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  if (!err)
    return "<success>";
  return llvm::toString(std::move(err));
}

/// `pass/name: why` for each statistic in \p context that its pass did not
/// declare, or declared with another description.
std::vector<std::string> undeclaredStatistics(const PassContext &context) {
  std::vector<std::string> problems;
  for (const PassStatistic &statistic : context.getStatistics()) {
    std::string where = statistic.pass + "/" + statistic.name;
    std::unique_ptr<Pass> pass = createPass(statistic.pass);
    if (!pass) {
      problems.push_back(where + ": no registered pass");
      continue;
    }
    const PassStatisticInfo *declared = pass->lookupStatistic(statistic.name);
    if (!declared)
      problems.push_back(where + ": not declared");
    else if (declared->description != statistic.description)
      problems.push_back(where + ": reported as '" + statistic.description +
                         "', declared as '" + declared->description + "'");
  }
  return problems;
}

/// The passes that reported at least one statistic into \p context.
std::set<std::string> reportingPasses(const PassContext &context) {
  std::set<std::string> passes;
  for (const PassStatistic &statistic : context.getStatistics())
    passes.insert(statistic.pass);
  return passes;
}

/// Runs \p pipeline on testdata model \p model; the manager's context.
void runPipeline(llvm::StringRef model,
                 const std::map<std::string, int64_t> &dims,
                 llvm::StringRef pipeline, PassManager &manager) {
  OnnxImportOptions importOptions;
  importOptions.dimBindings = dims;
  auto imported = importOnnxFile(gmopt::testdataDir() + "/" + model.str() +
                                     "/training_model.onnx",
                                 importOptions);
  ASSERT_TRUE(bool(imported)) << errorText(imported.takeError());
  ASSERT_EQ(errorText(manager.addPipeline(pipeline)), "<success>");
  ASSERT_EQ(errorText(manager.run(**imported)), "<success>");
}

TEST(PassStatisticsTest, DefaultPipelineReportsOnlyDeclaredStatistics) {
  PassManager manager;
  runPipeline("mlp", {{"batch", 8}}, kDefaultPipeline, manager);
  const PassContext &context = manager.getContext();
  EXPECT_EQ(undeclaredStatistics(context), std::vector<std::string>{});
  // Every pass of the default pipeline reports (so the check above saw
  // each pass's statistics, not an empty table).
  std::set<std::string> expected = {
      "canonicalize",   "fold-transpose",     "fold-scale",
      "fuse-attention", "fuse-cross-entropy", "pack-dropout-masks",
      "recompute",      "schedule",           "plan-buffers"};
  EXPECT_EQ(reportingPasses(context), expected);
}

TEST(PassStatisticsTest, WiderPipelineReportsOnlyDeclaredStatistics) {
  PassManager manager;
  runPipeline("gpt_tiny_dropout", {{"batch", 4}, {"batch_x_seq", 4 * 64}},
              "canonicalize,cse,tie-weights,amp{dtype=bf16},"
              "pack-dropout-masks,recompute{mode=sqrt},schedule,plan-buffers",
              manager);
  const PassContext &context = manager.getContext();
  EXPECT_EQ(undeclaredStatistics(context), std::vector<std::string>{});
  std::set<std::string> expected = {
      "canonicalize",       "cse",       "tie-weights", "amp",
      "pack-dropout-masks", "recompute", "schedule",    "plan-buffers"};
  EXPECT_EQ(reportingPasses(context), expected);
}

/// Reports a statistic it never declared, as a pass with a typo would.
class UndeclaredStatisticPass : public Pass {
public:
  UndeclaredStatisticPass() { declareStatistic("runs", "Times run"); }
  llvm::StringRef getName() const override { return "test-undeclared"; }
  llvm::Expected<bool> run(Module &, PassContext &context) override {
    addStatistic(context, "runs", 1);
    addStatistic(context, "rnus", 1, "a typo of runs");
    return false;
  }
};

TEST(PassStatisticsTest, TheCheckFindsAnUndeclaredStatistic) {
  ASSERT_EQ(errorText(registerPass({"test-undeclared", "reports a typo",
                                    [] {
                                      return std::unique_ptr<Pass>(
                                          new UndeclaredStatisticPass());
                                    }})),
            "<success>");
  Module module;
  PassManagerOptions options;
  options.verifyEach = false;
  PassManager manager(options);
  ASSERT_EQ(errorText(manager.addPipeline("test-undeclared")), "<success>");
  ASSERT_EQ(errorText(manager.run(module)), "<success>");
  EXPECT_EQ(undeclaredStatistics(manager.getContext()),
            std::vector<std::string>{"test-undeclared/rnus: not declared"});
}

TEST(PassStatisticsTest, DeclarationsAreWellFormed) {
  unsigned declaring = 0;
  for (const PassInfo *info : getRegisteredPasses()) {
    std::unique_ptr<Pass> pass = info->create();
    std::set<std::string> names;
    for (const PassStatisticInfo &statistic : pass->getDeclaredStatistics()) {
      EXPECT_TRUE(names.insert(statistic.name).second)
          << info->name << " declares " << statistic.name << " twice";
      EXPECT_FALSE(statistic.description.empty())
          << info->name << "/" << statistic.name;
      // Kebab-case: lower-case letters, digits and single dashes.
      bool kebab = !statistic.name.empty() &&
                   llvm::isAlpha(statistic.name.front()) &&
                   statistic.name.back() != '-' &&
                   statistic.name.find("--") == std::string::npos;
      for (char c : statistic.name)
        kebab &= llvm::isLower(c) || llvm::isDigit(c) || c == '-';
      EXPECT_TRUE(kebab) << info->name << "/" << statistic.name;
    }
    declaring += !names.empty();
  }
  // Every pass that changes or plans the module reports what it did
  // (print-plan only prints).
  EXPECT_GE(declaring, getRegisteredPasses().size() - 1);
}

TEST(PassStatisticsTest, ListPassesShowsStatisticsUnderOptions) {
  std::string listing;
  llvm::raw_string_ostream os(listing);
  printRegisteredPasses(os);
  size_t pass = listing.find("\n  canonicalize - ");
  size_t option = listing.find("max-fold-elements=<uint>", pass);
  size_t statistic = listing.find(
      "\n      (S) nodes-erased - Nodes erased (dead, folded, Identity or "
      "Constant)\n",
      pass);
  size_t next = listing.find("\n  cse - ", pass);
  ASSERT_NE(pass, std::string::npos) << listing;
  EXPECT_LT(pass, option) << listing;
  EXPECT_LT(option, statistic) << listing;
  EXPECT_LT(statistic, next) << listing;
}

} // namespace
