//===- TieWeightsTest.cpp - Tests of the tie-weights pass -----------------===//
//
// On the testdata graphs, with the initial values of their reference
// batches: auto finds exactly one pair - gpt_tiny_untied's head copy of the
// token embedding, transposed (PyTorch's constant folding made it) - and
// nothing on any other graph. Tied, gpt_tiny_untied has gpt_tiny's
// parameters; its merged gradient is the sum of the two original ones (the
// head's transposed); and trained 20 AdamW steps from the same initial
// values it follows gpt_tiny's ONNX Runtime reference losses (tying
// restores the model gpt_tiny is). Under AdamW it holds parameter +
// accumulation buffer + two moments = 4 x vocab x d_model x 4 bytes less.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/TieWeights.h"

#include "tools/driver/Runtime.h"

#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"

#include "tests/unit/TestdataPipelineTraining.h"
#include "tests/unit/TestdataTraining.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>

using namespace gmopt;
using gmopt::testing::TestdataGraph;

namespace {

constexpr const char *kTiedPipeline =
    "canonicalize,tie-weights,fold-transpose,schedule,plan-buffers";
constexpr const char *kPlainPipeline =
    "canonicalize,fold-transpose,schedule,plan-buffers";

std::string dirOf(llvm::StringRef name) {
  return testdataDir() + "/" + name.str();
}

/// The test data's tensors as the pass's value lookup.
ParameterValues valuesOf(const TestDataSet &data) {
  return [&data](llvm::StringRef name) -> const TensorData * {
    const NamedTensor *tensor = data.findInput(name);
    return tensor ? &tensor->data : nullptr;
  };
}

TEST(TieWeightsTest, AutoFindsExactlyTheUntiedHead) {
  for (const TestdataGraph &graph : gmopt::testing::kTestdataGraphs) {
    auto data = readTestDataSet(dirOf(graph.name) + "/test_data_set_0");
    ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
    std::unique_ptr<Module> module =
        gmopt::testing::importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    TieSearch search = findTies(*module, valuesOf(*data));
    EXPECT_TRUE(search.undecided.empty()) << graph.name;
    if (llvm::StringRef(graph.name) != "gpt_tiny_untied") {
      EXPECT_TRUE(search.ties.empty())
          << graph.name << ": " << search.ties.front().str();
      continue;
    }
    ASSERT_EQ(search.ties.size(), 1u);
    const TiePair &pair = search.ties.front();
    EXPECT_EQ(pair.kept->getName(), "wte.weight");
    EXPECT_TRUE(pair.transposed);
    EXPECT_EQ(pair.dropped->getType().str(), "f32[128,512]");
  }
}

TEST(TieWeightsTest, WithoutValuesNothingIsTiedAndThePairsAreReported) {
  std::unique_ptr<Module> module =
      gmopt::testing::importTestdataGraph("gpt_tiny_untied", 4);
  ASSERT_TRUE(module);
  TieSearch search = findTies(*module, ParameterValues());
  EXPECT_TRUE(search.ties.empty());
  EXPECT_FALSE(search.undecided.empty());
}

const TensorData *gradientOf(const TrainingResult &result,
                             llvm::StringRef name) {
  for (const auto &[param, gradient] : result.firstGradients)
    if (param == name)
      return &gradient;
  return nullptr;
}

TEST(TieWeightsTest, MergedGradientIsTheSumOfTheTwo) {
  const TestdataGraph untied{"gpt_tiny_untied", 4};
  auto plainRun = gmopt::testing::trainWithPipeline(untied, kPlainPipeline, 1);
  auto tiedRun = gmopt::testing::trainWithPipeline(untied, kTiedPipeline, 1);
  ASSERT_TRUE(plainRun && tiedRun);
  const std::unique_ptr<Module> &plainModule = plainRun->module;
  const std::unique_ptr<Module> &tiedModule = tiedRun->module;
  const TrainingResult *plain = &plainRun->result, *tied = &tiedRun->result;
  EXPECT_EQ(tiedModule->getSignature().numTrainable() + 1,
            plainModule->getSignature().numTrainable());
  // The head copy: the plain module's [128,512] parameter.
  std::string head;
  for (const ParamInfo &info : plainModule->getSignature().getParams())
    if (info.param->getType().str() == "f32[128,512]")
      head = info.param->getName().str();
  ASSERT_FALSE(head.empty());
  EXPECT_EQ(gradientOf(*tied, head), nullptr);
  const TensorData *wte = gradientOf(*plain, "wte.weight");
  const TensorData *copy = gradientOf(*plain, head);
  const TensorData *merged = gradientOf(*tied, "wte.weight");
  ASSERT_TRUE(wte && copy && merged);
  ASSERT_EQ(merged->getNumElements(), wte->getNumElements());
  const int64_t vocab = 512, width = 128;
  double largest = 0, worst = 0;
  for (int64_t v = 0; v != vocab; ++v)
    for (int64_t d = 0; d != width; ++d) {
      double expected = double(float(wte->getFloatElement(v * width + d) +
                                     copy->getFloatElement(d * vocab + v)));
      largest = std::max(largest, std::fabs(expected));
      worst = std::max(
          worst, std::fabs(merged->getFloatElement(v * width + d) - expected));
    }
  ASSERT_GT(largest, 0);
  EXPECT_LE(worst, 1e-6 * largest) << "largest " << largest;
  EXPECT_EQ(tied->losses, plain->losses);
}

TEST(TieWeightsTest, TiedUntiedFollowsGptTinysOnnxRuntimeReference) {
  auto reference = readLossReference(dirOf("gpt_tiny") + "/adamw_losses.json");
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto data = readTestDataSet(dirOf("gpt_tiny_untied") + "/test_data_set_0");
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  std::map<std::string, int64_t> dims = {{"batch", 4}, {"batch_x_seq", 256}};
  CategoryBytes persistent[2] = {};
  for (int tiedRun = 0; tiedRun != 2; ++tiedRun) {
    auto runnable = loadRunnableModel(
        dirOf("gpt_tiny_untied") + "/training_model.onnx", dims, &*data, false,
        tiedRun ? kTiedPipeline : kPlainPipeline, &reference->optimizer);
    ASSERT_TRUE(bool(runnable)) << llvm::toString(runnable.takeError());
    const Module &module = *runnable->module;
    persistent[tiedRun] = module.plan.figures.persistentBytes;
    if (!tiedRun)
      continue;
    InputSources sources;
    sources.testData = &*data;
    auto inputs = bindInputs(module, sources);
    ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
    TrainingOptions options;
    options.executor.mode = AllocationMode::Planned;
    options.executor.threads = 1;
    options.steps = reference->losses.size();
    options.learningRate = static_cast<float>(reference->learningRate);
    auto result = trainModule(module, *inputs, options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    for (const TensorComparison &c :
         compareLossCurve(result->losses, *reference, Tolerance{1e-5, 1e-7}))
      EXPECT_TRUE(c.ok) << c.name << ": relative error " << c.maxRelError;
    EXPECT_EQ(result->memory.peakBytes, module.plan.figures.plannedBytes());
  }
  // Parameter, accumulation buffer and two AdamW moments of the head copy
  // (the plan's persistent bytes also lose the copy's accumulation flag, a
  // graph output).
  auto saved = [&](MemoryCategory category) {
    unsigned k = static_cast<unsigned>(category);
    return persistent[0][k] - persistent[1][k];
  };
  const uint64_t matrix = 512 * 128 * 4;
  EXPECT_EQ(saved(MemoryCategory::Parameters), matrix);
  EXPECT_EQ(saved(MemoryCategory::Gradients), matrix);
  EXPECT_EQ(saved(MemoryCategory::OptimizerState), 2 * matrix);
}

} // namespace
