//===- TrainTestdataTest.cpp - Every testdata graph vs ONNX Runtime -------===//
//
// For every model under testdata/ with reference data: import
// training_model.onnx with the dimension bindings of its reference batch,
// canonicalize, run one step on test_data_set_0 in eager and in planned
// mode, and require (a) the two modes to agree bitwise and (b) the loss and
// every parameter gradient to match ONNX Runtime's within 1e-4 relative
// (max|got-ref| <= 1e-4 * max|ref|, floor 1e-6: the tolerance
// testdata/README.md states for gradients); then 20 steps of plain SGD (the
// in-graph SGDOptimizerV2) must follow sgd_losses.json within 1e-4 relative
// per step (the README's SGD tolerance). The same graphs compiled with the
// default pipeline (schedule, plan-buffers) must match ONNX Runtime too.
// gpt_tiny_dropout, which has no reference data, must train with its
// checkpoint's dropout ratio 0.1 and differ from gpt_tiny's ratio-0 loss.
//
// The reference batches are those of generate.py: batch 8 for mlp, cnn and
// regression_frozen; batch 4 for resnet_tiny and the GPT models, whose
// batch_x_seq is then 4 * 64 = 256.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Runtime.h"

#include "passes/DefaultPipeline.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <cmath>
#include <map>
#include <string>

using namespace gmopt;

namespace {

/// One testdata model and the dimension bindings of its reference batch.
struct TestdataModel {
  const char *name;
  std::map<std::string, int64_t> dims;
};

std::ostream &operator<<(std::ostream &os, const TestdataModel &model) {
  return os << model.name;
}

const TestdataModel kModels[] = {
    {"mlp", {{"batch", 8}}},
    {"cnn", {{"batch", 8}}},
    {"resnet_tiny", {{"batch", 4}}},
    {"gpt_tiny", {{"batch", 4}, {"batch_x_seq", 256}}},
    {"gpt_tiny_untied", {{"batch", 4}, {"batch_x_seq", 256}}},
    {"gpt_opset14", {{"batch", 4}, {"batch_x_seq", 64}}},
    {"gpt_opset20", {{"batch", 4}, {"batch_x_seq", 64}}},
    {"regression_frozen", {{"batch", 8}}},
    {"bert_tiny", {{"batch", 4}}},
    {"llama_tiny", {{"batch", 4}, {"batch_x_seq", 64}}},
    {"llama_tiny_untied", {{"batch", 4}, {"batch_x_seq", 64}}},
    // Exported with a static batch of 4 (testdata/generate.py: ONNX Runtime's
    // AveragePoolGrad needs it), so there is nothing to bind.
    {"cnn_bn", {}},
};

std::string modelDir(llvm::StringRef name) {
  return (llvm::Twine(gmopt::testdataDir()) + "/" + name).str();
}

/// A testdata model loaded with its reference inputs bound.
struct LoadedTestdata {
  RunnableModel model;
  TestDataSet data;
  std::vector<BoundInput> inputs;
};

/// Loads \p model (rewritten by \p pipeline), failing the test (and
/// returning nullopt) on any error.
std::optional<LoadedTestdata> load(const TestdataModel &model,
                                   llvm::StringRef pipeline = "",
                                   const OptimizerSpec *optimizer = nullptr) {
  std::string dir = modelDir(model.name);
  auto data = readTestDataSet(dir + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!data)
    return std::nullopt;
  // No inputs for dimension inference: the explicit bindings must fit.
  auto runnable =
      loadRunnableModel(dir + "/training_model.onnx", model.dims, nullptr,
                        /*wantOriginal=*/false, pipeline, optimizer);
  EXPECT_TRUE(bool(runnable)) << llvm::toString(runnable.takeError());
  if (!runnable)
    return std::nullopt;
  InputSources sources;
  sources.testData = &*data;
  auto inputs = bindInputs(*runnable->module, sources);
  EXPECT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  if (!inputs)
    return std::nullopt;
  // Every parameter and data input comes from the reference data; only the
  // accumulation buffers (not stored) and optimizer state are zeros, and
  // the optimizer's learning rate and update signal are fed each step.
  for (const BoundInput &input : *inputs)
    EXPECT_TRUE(input.origin == InputOrigin::TestData ||
                input.origin == InputOrigin::Zeros ||
                input.origin == InputOrigin::FedEachStep)
        << input.input->getName().str() << " came from "
        << inputOriginName(input.origin).str();
  return LoadedTestdata{std::move(*runnable), std::move(*data),
                        std::move(*inputs)};
}

TrainingOptions oneStep(AllocationMode mode) {
  TrainingOptions options;
  options.executor.mode = mode;
  options.executor.threads = 1;
  options.steps = 1;
  return options;
}

class TrainTestdataTest : public ::testing::TestWithParam<TestdataModel> {};

TEST_P(TrainTestdataTest, FirstStepMatchesOnnxRuntime) {
  std::optional<LoadedTestdata> loaded = load(GetParam());
  ASSERT_TRUE(loaded);
  const Module &module = *loaded->model.module;
  std::optional<TrainingResult> eager, planned;
  for (AllocationMode mode : {AllocationMode::Eager, AllocationMode::Planned}) {
    auto result = trainModule(module, loaded->inputs, oneStep(mode));
    ASSERT_TRUE(bool(result)) << allocationModeName(mode).str() << ": "
                              << llvm::toString(result.takeError());
    auto comparisons =
        compareWithReference(*result, loaded->data, Tolerance{1e-4, 1e-6});
    ASSERT_TRUE(bool(comparisons)) << llvm::toString(comparisons.takeError());
    EXPECT_EQ(comparisons->size(), 1 + module.getSignature().numTrainable());
    for (const TensorComparison &comparison : *comparisons)
      EXPECT_TRUE(comparison.ok)
          << allocationModeName(mode).str() << " " << comparison.name
          << ": max abs error " << comparison.maxAbsError << ", max rel error "
          << comparison.maxRelError << " " << comparison.problem;
    (mode == AllocationMode::Eager ? eager : planned) = std::move(*result);
  }
  EXPECT_TRUE(eager->firstLoss == planned->firstLoss);
  ASSERT_EQ(eager->firstGradients.size(), planned->firstGradients.size());
  for (size_t i = 0; i != eager->firstGradients.size(); ++i)
    EXPECT_TRUE(eager->firstGradients[i].second ==
                planned->firstGradients[i].second)
        << "eager and planned differ on " << eager->firstGradients[i].first;
}

TEST_P(TrainTestdataTest, CompiledWithDefaultPipelineMatchesOnnxRuntime) {
  // What gmopt-compile makes (schedule and plan-buffers included) runs from
  // its plan and still computes ONNX Runtime's gradients.
  std::optional<LoadedTestdata> loaded = load(GetParam(), kDefaultPipeline);
  ASSERT_TRUE(loaded);
  EXPECT_FALSE(loaded->model.module->plan.empty());
  auto result = trainModule(*loaded->model.module, loaded->inputs,
                            oneStep(AllocationMode::Planned));
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  auto comparisons =
      compareWithReference(*result, loaded->data, Tolerance{1e-4, 1e-6});
  ASSERT_TRUE(bool(comparisons)) << llvm::toString(comparisons.takeError());
  for (const TensorComparison &comparison : *comparisons)
    EXPECT_TRUE(comparison.ok)
        << comparison.name << ": max rel error " << comparison.maxRelError
        << " " << comparison.problem;
}

TEST_P(TrainTestdataTest, SgdLossCurveMatchesOnnxRuntime) {
  auto reference =
      readSgdReference(modelDir(GetParam().name) + "/sgd_losses.json");
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  ASSERT_EQ(reference->losses.size(), 20u);
  ASSERT_EQ(reference->optimizer.kind, OptimizerKind::SGD);
  // The in-graph SGDOptimizerV2, built at load.
  std::optional<LoadedTestdata> loaded =
      load(GetParam(), "", &reference->optimizer);
  ASSERT_TRUE(loaded);
  TrainingOptions options = oneStep(AllocationMode::Planned);
  options.steps = reference->losses.size();
  options.learningRate = static_cast<float>(reference->learningRate);
  auto result = trainModule(*loaded->model.module, loaded->inputs, options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  ASSERT_EQ(result->losses.size(), reference->losses.size());
  std::vector<TensorComparison> comparisons =
      compareLossCurve(result->losses, *reference, Tolerance{1e-4, 1e-6});
  for (const TensorComparison &comparison : comparisons)
    EXPECT_TRUE(comparison.ok)
        << comparison.name << ": relative error " << comparison.maxRelError;
  // The curve really descends: the run trained.
  EXPECT_LT(result->losses.back(), result->losses.front());
}

INSTANTIATE_TEST_SUITE_P(Models, TrainTestdataTest,
                         ::testing::ValuesIn(kModels), [](const auto &info) {
                           return std::string(info.param.name);
                         });

TEST(TrainTestdataDropoutTest, GptTinyDropoutTrainsWithItsCheckpoint) {
  std::string dir = modelDir("gpt_tiny_dropout");
  std::map<std::string, int64_t> dims = {{"batch", 4}, {"batch_x_seq", 256}};
  auto model = loadRunnableModel(dir + "/training_model.onnx", dims, nullptr,
                                 /*wantOriginal=*/false);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  auto weights = readWeightFile(dir + "/checkpoint");
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  const NamedTensor *ratio = weights->lookup("dropout_ratio");
  ASSERT_TRUE(ratio);
  EXPECT_FLOAT_EQ(ratio->data.getFloatElement(0), 0.1f);
  // The batch of gpt_tiny; the weights (and the ratio) of the checkpoint.
  auto data = readTestDataSet(modelDir("gpt_tiny") + "/test_data_set_0");
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  InputSources sources;
  sources.testData = &*data;
  sources.weights = &*weights;
  auto inputs = bindInputs(*model->module, sources);
  ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  TrainingOptions options = oneStep(AllocationMode::Planned);
  options.executor.seed = 1;
  auto result = trainModule(*model->module, *inputs, options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  double withDropout = result->losses.front();
  EXPECT_TRUE(std::isfinite(withDropout));
  const NamedTensor *reference = data->findOutputByIndex(0);
  ASSERT_TRUE(reference);
  // Dropout 0.1 changes the loss of ratio 0 (gpt_tiny's reference)...
  EXPECT_GT(std::abs(withDropout - reference->data.getFloatElement(0)), 1e-4);
  // ...and is reproducible for a seed.
  auto again = trainModule(*model->module, *inputs, options);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->losses.front(), withDropout);
}

} // namespace
