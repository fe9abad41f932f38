//===- PassManagerTest.cpp - Unit tests of passes and the pass manager ----===//
//
// Uses passes that exist only in this test (registered at run time): one
// that breaks the IR on purpose so verify-each must catch it, one that
// fails, and one with an option of every kind that reports statistics.
// Covers verification, error propagation, statistics, IR dumps, timing,
// option parsing and the explicit, replayable pipeline string.
//
//===----------------------------------------------------------------------===//

#include "passes/PassManager.h"
#include "passes/DefaultPipeline.h"
#include "passes/Pass.h"
#include "passes/PassRegistry.h"

#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/serialization/Onnx.h"

#include "llvm/Support/raw_ostream.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

size_t countOccurrences(llvm::StringRef text, llvm::StringRef needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != llvm::StringRef::npos;
       at = text.find(needle, at + 1))
    ++count;
  return count;
}

/// A pass with one option of every kind; reports two statistics.
class OptionsTestPass : public Pass {
public:
  enum class Mode { Fast, Careful };
  struct Options {
    bool flag = true;
    int64_t count = 3;
    uint64_t limit = 10;
    double ratio = 0.5;
    std::string label = "x";
    Mode mode = Mode::Fast;
  };

  OptionsTestPass() {
    declareOption("flag", options.flag, "a flag");
    declareOption("count", options.count, "a signed count", -5, 100);
    declareOption("limit", options.limit, "an unsigned limit");
    declareOption("ratio", options.ratio, "a ratio");
    declareOption("label", options.label, "a label");
    declareEnumOption<Mode>("mode", options.mode,
                            {{"fast", Mode::Fast}, {"careful", Mode::Careful}},
                            "how to run");
  }
  llvm::StringRef getName() const override { return "test-options"; }
  llvm::Expected<bool> run(Module &, PassContext &context) override {
    addStatistic(context, "runs", 1, "Times run");
    addStatistic(context, "count", options.count, "Sum of the count option");
    return false;
  }

  Options options;
};

/// Gives the first node's result a type that contradicts inference.
class BreakVerifierPass : public Pass {
public:
  llvm::StringRef getName() const override { return "test-break-verifier"; }
  llvm::Expected<bool> run(Module &module, PassContext &) override {
    Node &first = *module.getGraph().begin();
    first.getResult(0)->setType(TensorType::get(DType::I64, {7}));
    return true;
  }
};

/// Always fails.
class FailingPass : public Pass {
public:
  llvm::StringRef getName() const override { return "test-fail"; }
  llvm::Expected<bool> run(Module &, PassContext &) override {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "something is wrong");
  }
};

/// Renames the first node but claims it changed nothing: the fingerprint
/// check must catch it.
class LyingPass : public Pass {
public:
  llvm::StringRef getName() const override { return "test-lie"; }
  llvm::Expected<bool> run(Module &module, PassContext &) override {
    module.getGraph().begin()->setName("renamed");
    return false;
  }
};

/// Renames the first node and says so.
class HonestPass : public Pass {
public:
  llvm::StringRef getName() const override { return "test-honest"; }
  llvm::Expected<bool> run(Module &module, PassContext &) override {
    module.getGraph().begin()->setName("renamed");
    return true;
  }
};

void registerTestPasses() {
  static bool registered = [] {
    llvm::cantFail(registerPass({"test-options", "test pass with options", [] {
                                   return std::unique_ptr<Pass>(
                                       new OptionsTestPass());
                                 }}));
    llvm::cantFail(registerPass(
        {"test-break-verifier", "test pass that breaks the IR",
         [] { return std::unique_ptr<Pass>(new BreakVerifierPass()); }}));
    llvm::cantFail(registerPass({"test-fail", "test pass that fails", [] {
                                   return std::unique_ptr<Pass>(
                                       new FailingPass());
                                 }}));
    llvm::cantFail(
        registerPass({"test-lie", "test pass that hides a change",
                      [] { return std::unique_ptr<Pass>(new LyingPass()); }}));
    llvm::cantFail(
        registerPass({"test-honest", "test pass that reports its change",
                      [] { return std::unique_ptr<Pass>(new HonestPass()); }}));
    return true;
  }();
  (void)registered;
}

class PassManagerTest : public ::testing::Test {
protected:
  void SetUp() override {
    registerTestPasses();
    module.opsetImports[""] = 17;
    Graph &graph = module.getGraph();
    Value *x = graph.addInput(TensorType::get(DType::F32, {2, 3}), "x");
    Builder builder(graph);
    Node *relu = builder.create(
        {"", "Relu"}, {x}, {TensorType::get(DType::F32, {2, 3})}, {}, "relu");
    relu->getResult(0)->setName("r");
    Node *add =
        builder.create({"", "Add"}, {relu->getResult(0), x},
                       {TensorType::get(DType::F32, {2, 3})}, {}, "add");
    add->getResult(0)->setName("y");
    graph.addOutput(add->getResult(0));
  }

  /// A pass manager whose reports go to `report`.
  std::unique_ptr<PassManager> makeManager(PassManagerOptions options = {}) {
    auto manager = std::make_unique<PassManager>(std::move(options));
    manager->setReportStream(reportStream);
    return manager;
  }

  Module module;
  std::string report;
  llvm::raw_string_ostream reportStream{report};
};

TEST_F(PassManagerTest, VerificationFailureNamesThePass) {
  auto manager = makeManager();
  ASSERT_EQ(errorText(manager->addPipeline("test-options,test-break-verifier,"
                                           "test-options")),
            "<success>");
  std::string message = errorText(manager->run(module));
  EXPECT_EQ(message.rfind("verification failed after pass "
                          "'test-break-verifier': ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("(node relu)"), std::string::npos) << message;
  // The pipeline stopped: the last pass never ran.
  EXPECT_EQ(manager->getContext().getStatistic("test-options", "runs"), 1u);
}

TEST_F(PassManagerTest, VerifyEachCanBeTurnedOff) {
  PassManagerOptions options;
  options.verifyEach = false;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline("test-break-verifier")),
            "<success>");
  EXPECT_EQ(errorText(manager->run(module)), "<success>");
  EXPECT_TRUE(manager->getLastRunChanged());
}

TEST_F(PassManagerTest, PassErrorStopsThePipeline) {
  auto manager = makeManager();
  ASSERT_EQ(errorText(manager->addPipeline("test-fail,test-options")),
            "<success>");
  EXPECT_EQ(errorText(manager->run(module)),
            "pass 'test-fail' failed: something is wrong");
  EXPECT_TRUE(manager->getContext().getStatistics().empty());
}

TEST_F(PassManagerTest, StatisticsAccumulateAndPrint) {
  PassManagerOptions options;
  options.passStatistics = true;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline(
                "test-options{count=4},test-options{count=5}")),
            "<success>");
  ASSERT_EQ(errorText(manager->run(module)), "<success>");
  EXPECT_FALSE(manager->getLastRunChanged());
  EXPECT_EQ(manager->getContext().getStatistic("test-options", "runs"), 2u);
  EXPECT_EQ(manager->getContext().getStatistic("test-options", "count"), 9u);
  EXPECT_EQ(manager->getContext().getStatistic("test-options", "absent"), 0u);
  EXPECT_NE(report.find("Pass statistics report"), std::string::npos) << report;
  EXPECT_NE(report.find("test-options\n"), std::string::npos) << report;
  EXPECT_NE(report.find("(S) 9 count - Sum of the count option"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("(S) 2 runs  - Times run"), std::string::npos)
      << report;
}

TEST_F(PassManagerTest, NoReportsUnlessAsked) {
  auto manager = makeManager();
  ASSERT_EQ(errorText(manager->addPipeline("test-options")), "<success>");
  ASSERT_EQ(errorText(manager->run(module)), "<success>");
  EXPECT_EQ(report, "");
}

TEST_F(PassManagerTest, PrintIRAfterNamedPass) {
  PassManagerOptions options;
  options.printAfter = {"test-options"};
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline("canonicalize,test-options")),
            "<success>");
  ASSERT_EQ(errorText(manager->run(module)), "<success>");
  EXPECT_EQ(countOccurrences(
                report, "// -----// IR Dump After test-options //----- //\n"),
            1u)
      << report;
  EXPECT_EQ(countOccurrences(report, "IR Dump After canonicalize"), 0u)
      << report;
  EXPECT_EQ(countOccurrences(report, "IR Dump Before"), 0u) << report;
  // The dump is the module in the text form, after the header.
  size_t header = report.find("IR Dump After test-options");
  EXPECT_NE(report.find("Relu", header), std::string::npos) << report;
  EXPECT_NE(report.find("module", header), std::string::npos) << report;
}

TEST_F(PassManagerTest, PrintIRBeforeAndAfterAll) {
  PassManagerOptions options;
  options.printBeforeAll = true;
  options.printAfterAll = true;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline("test-options,canonicalize")),
            "<success>");
  ASSERT_EQ(errorText(manager->run(module)), "<success>");
  EXPECT_EQ(countOccurrences(report, "// -----// IR Dump Before "), 2u)
      << report;
  EXPECT_EQ(countOccurrences(report, "// -----// IR Dump After "), 2u)
      << report;
  size_t before = report.find("IR Dump Before canonicalize");
  size_t after = report.find("IR Dump After canonicalize");
  ASSERT_NE(before, std::string::npos);
  ASSERT_NE(after, std::string::npos);
  EXPECT_LT(before, after);
  EXPECT_LT(report.find("IR Dump After test-options"), before);
}

TEST_F(PassManagerTest, TimePassesPrintsEveryPassAndTheVerifier) {
  PassManagerOptions options;
  options.timePasses = true;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline("test-options,canonicalize")),
            "<success>");
  ASSERT_EQ(errorText(manager->run(module)), "<success>");
  ASSERT_EQ(manager->getTimings().size(), 3u);
  EXPECT_EQ(manager->getTimings()[0].name, "test-options");
  EXPECT_EQ(manager->getTimings()[1].name, "canonicalize");
  EXPECT_EQ(manager->getTimings()[2].name, "(verifier)");
  EXPECT_NE(report.find("Pass execution timing report"), std::string::npos)
      << report;
  EXPECT_NE(report.find("  canonicalize\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  (verifier)\n"), std::string::npos) << report;
  EXPECT_NE(report.find("(100.0%)  Total\n"), std::string::npos) << report;
}

TEST_F(PassManagerTest, PipelineStringIsExplicitAndReparses) {
  auto manager = makeManager();
  ASSERT_EQ(errorText(manager->addPipeline(
                "test-options{mode=careful,label=\"a b\",ratio=0.25},"
                "canonicalize{dce=false}")),
            "<success>");
  std::string pipeline = manager->getPipelineString();
  EXPECT_EQ(pipeline,
            "test-options{flag=true,count=3,limit=10,ratio=0.25,label=\"a b\","
            "mode=careful},canonicalize{dce=false,remove-identity=true,"
            "fold-constants=true,fold-casts=true,max-fold-elements=1024}");
  auto replay = makeManager();
  ASSERT_EQ(errorText(replay->addPipeline(pipeline)), "<success>");
  EXPECT_EQ(replay->getPipelineString(), pipeline);
}

TEST_F(PassManagerTest, FailedAddPipelineAddsNothing) {
  auto manager = makeManager();
  std::string message = errorText(manager->addPipeline("test-options,nope"));
  EXPECT_NE(message.find("unknown pass 'nope'"), std::string::npos) << message;
  EXPECT_EQ(manager->size(), 0u);
}

TEST_F(PassManagerTest, OptionValuesAreParsedStrictly) {
  OptionsTestPass pass;
  EXPECT_EQ(errorText(pass.setOption("count", "12")), "<success>");
  EXPECT_EQ(pass.options.count, 12);
  EXPECT_EQ(errorText(pass.setOption("count", "-5")), "<success>");
  EXPECT_EQ(pass.options.count, -5);
  EXPECT_EQ(errorText(pass.setOption("count", "12x")),
            "pass 'test-options': option 'count': invalid value '12x': "
            "expected an integer");
  EXPECT_EQ(errorText(pass.setOption("count", "101")),
            "pass 'test-options': option 'count': invalid value '101': "
            "expected an integer in [-5, 100]");
  EXPECT_EQ(errorText(pass.setOption("limit", "-1")),
            "pass 'test-options': option 'limit': invalid value '-1': "
            "expected a non-negative integer");
  EXPECT_EQ(errorText(pass.setOption("ratio", "abc")),
            "pass 'test-options': option 'ratio': invalid value 'abc': "
            "expected a finite number");
  EXPECT_EQ(errorText(pass.setOption("flag", "yes")),
            "pass 'test-options': option 'flag': invalid value 'yes': "
            "expected true or false");
  EXPECT_EQ(errorText(pass.setOption("flag", "0")), "<success>");
  EXPECT_FALSE(pass.options.flag);
  EXPECT_EQ(errorText(pass.setOption("mode", "slow")),
            "pass 'test-options': option 'mode': invalid value 'slow': "
            "expected one of fast|careful");
  EXPECT_EQ(errorText(pass.setOption("colour", "red")),
            "pass 'test-options' has no option 'colour' (options: flag, count, "
            "limit, ratio, label, mode)");
  // A failed set leaves the previous value.
  EXPECT_EQ(pass.options.count, -5);
  EXPECT_EQ(pass.options.mode, OptionsTestPass::Mode::Fast);
}

TEST_F(PassManagerTest, OptionDefaultsAreRecorded) {
  OptionsTestPass pass;
  ASSERT_EQ(pass.getOptions().size(), 6u);
  EXPECT_EQ(pass.lookupOption("ratio")->getDefault(), "0.5");
  EXPECT_EQ(pass.lookupOption("mode")->getValueKind(), "fast|careful");
  llvm::cantFail(pass.setOption("mode", "careful"));
  EXPECT_EQ(pass.lookupOption("mode")->getDefault(), "fast");
  EXPECT_EQ(pass.lookupOption("mode")->getValue(), "careful");
  EXPECT_EQ(pass.lookupOption("nope"), nullptr);
}

TEST_F(PassManagerTest, RegistryIsConsistent) {
  for (const PassInfo *info : getRegisteredPasses()) {
    std::unique_ptr<Pass> pass = createPass(info->name);
    ASSERT_TRUE(pass) << info->name;
    EXPECT_EQ(pass->getName(), info->name);
    EXPECT_FALSE(info->description.empty()) << info->name;
  }
  EXPECT_NE(lookupPass("canonicalize"), nullptr);
  EXPECT_EQ(createPass("nope"), nullptr);
  std::string message = errorText(registerPass(
      {"canonicalize", "again", [] { return createPass("canonicalize"); }}));
  EXPECT_EQ(message, "pass 'canonicalize' is already registered");
}

TEST_F(PassManagerTest, AChangingPassClearsThePlan) {
  auto plan = makeTrivialPlan(module);
  ASSERT_TRUE(bool(plan)) << errorText(plan.takeError());
  module.plan = std::move(*plan);
  ASSERT_FALSE(module.plan.empty());
  // An unchanging pass keeps the plan...
  auto keep = makeManager();
  ASSERT_EQ(errorText(keep->addPipeline("test-options")), "<success>");
  ASSERT_EQ(errorText(keep->run(module)), "<success>");
  EXPECT_FALSE(module.plan.empty());
  // ...a changing one drops it, though it never touched the plan itself...
  auto change = makeManager();
  ASSERT_EQ(errorText(change->addPipeline("test-honest")), "<success>");
  ASSERT_EQ(errorText(change->run(module)), "<success>");
  EXPECT_TRUE(module.plan.empty());
  // ...and the planner's own plan survives its "changed".
  auto planner = makeManager();
  ASSERT_EQ(errorText(planner->addPipeline("test-honest,plan-buffers")),
            "<success>");
  ASSERT_EQ(errorText(planner->run(module)), "<success>");
  EXPECT_FALSE(module.plan.empty());
}

TEST_F(PassManagerTest, FingerprintSeesEveryKindOfEdit) {
  uint64_t base = computeFingerprint(module);
  EXPECT_EQ(computeFingerprint(module), base);
  Node &relu = *module.getGraph().begin();
  relu.setAttr("alpha", Attribute::getFloat(0.5f));
  uint64_t withAttr = computeFingerprint(module);
  EXPECT_NE(withAttr, base);
  relu.getResult(0)->setType(TensorType::get(DType::F16, {2, 3}));
  uint64_t withType = computeFingerprint(module);
  EXPECT_NE(withType, withAttr);
  Node &add = *std::next(module.getGraph().begin());
  add.setOperand(1, relu.getResult(0));
  uint64_t withOperand = computeFingerprint(module);
  EXPECT_NE(withOperand, withType);
  module.getSignature().setLoss(add.getResult(0));
  EXPECT_NE(computeFingerprint(module), withOperand);
}

TEST_F(PassManagerTest, APassThatHidesAChangeAborts) {
  PassManagerOptions options;
  options.checkUnchangedPasses = true;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline("test-options,test-lie")),
            "<success>");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)manager->run(module),
               "pass 'test-lie' reported no change but changed the module");
}

TEST_F(PassManagerTest, ChecksUnchangedPassesWhenAssertionsAreOn) {
#ifdef NDEBUG
  GTEST_SKIP() << "NDEBUG build: the check is off by default";
#else
  auto manager = makeManager();
  ASSERT_EQ(errorText(manager->addPipeline("test-lie")), "<success>");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)manager->run(module), "reported no change");
#endif
}

TEST_F(PassManagerTest, DefaultPipelinePassesAreHonest) {
  // Every real pass of the default pipeline, fingerprint-checked on a
  // training graph (a pass that lied would abort the test).
  OnnxImportOptions importOptions;
  importOptions.dimBindings = {{"batch", 8}};
  auto imported = importOnnxFile(
      gmopt::testdataDir() + "/mlp/training_model.onnx", importOptions);
  ASSERT_TRUE(bool(imported)) << errorText(imported.takeError());
  PassManagerOptions options;
  options.checkUnchangedPasses = true;
  auto manager = makeManager(options);
  ASSERT_EQ(errorText(manager->addPipeline(kDefaultPipeline)), "<success>");
  EXPECT_EQ(errorText(manager->run(**imported)), "<success>");
  EXPECT_FALSE((*imported)->plan.empty());
  // Running it again on the rewritten graph mostly changes nothing.
  EXPECT_EQ(errorText(manager->run(**imported)), "<success>");
}

TEST_F(PassManagerTest, DefaultPipelineParses) {
  auto passes = createPipeline(kDefaultPipeline);
  ASSERT_TRUE(static_cast<bool>(passes)) << errorText(passes.takeError());
  EXPECT_FALSE(passes->empty());
}

TEST_F(PassManagerTest, ListPassesShowsDescriptionsAndOptions) {
  std::string listing;
  llvm::raw_string_ostream os(listing);
  printRegisteredPasses(os);
  EXPECT_NE(listing.find("  canonicalize - DCE, Identity removal, constant "
                         "folding of shape arithmetic\n"),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find("max-fold-elements=<uint> (default 1024) - "),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find("test-options - test pass with options"),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find("label=<string> (default x) - a label"),
            std::string::npos)
      << listing;
}

} // namespace
