//===- AccumulationTest.cpp - Gradient accumulation semantics -------------===//
//
// What gmopt-run promises for gradient accumulation (tools/driver/Runtime.h,
// TrainingOptions): K micro-steps over K batches give the gradient of one
// step over the concatenated batch (the 1/K is applied through the
// loss-gradient seed), on testdata/mlp split four ways; a graph without
// lazy_reset_grad never sums across optimizer steps, with K = 1 and K = 4;
// InPlaceAccumulator (V1), which returns the sum instead of writing its
// buffer, accumulates the same way; and a folder of test_data_set_N folders
// is read in order of N.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "ir/Module.h"
#include "ir/serialization/OnnxTensor.h"
#include "ir/serialization/TextIR.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <cstring>

using namespace gmopt;

namespace {

/// A two-layer classifier with ONNX Runtime's accumulation pattern but no
/// lazy_reset_grad input (InPlaceAccumulatorV2 with two operands), or with
/// InPlaceAccumulator (V1), whose sums are graph outputs.
std::string smallGraph(bool v1) {
  std::string accumulate;
  std::string outputs;
  for (const char *name : {"w1", "b1", "w2", "b2"}) {
    std::string p = name;
    if (v1) {
      accumulate += "    %" + p +
                    "_grad.sum = com.microsoft.InPlaceAccumulator(%" + p +
                    "_grad.accumulation.buffer, %" + p + "_grad) : " +
                    (p == "w1"   ? "f32[5,6]"
                     : p == "b1" ? "f32[5]"
                     : p == "w2" ? "f32[3,5]"
                                 : "f32[3]") +
                    "\n";
      outputs += ", %" + p + "_grad.sum";
    } else {
      accumulate += "    %" + p +
                    "_grad.accumulation.out, _ = "
                    "com.microsoft.InPlaceAccumulatorV2(%" +
                    p + "_grad.accumulation.buffer, %" + p +
                    "_grad) : bool[1]\n";
      outputs += ", %" + p + "_grad.accumulation.out";
    }
  }
  return R"(
module attributes {ir_version = 8, opsets = {"" = 17, "com.microsoft" = 1}} {
  graph @two_layer(%input: f32[4,6], %labels: i64[4], %w1: f32[5,6], %b1: f32[5], %w2: f32[3,5], %b2: f32[3], %w1_grad.accumulation.buffer: f32[5,6], %b1_grad.accumulation.buffer: f32[5], %w2_grad.accumulation.buffer: f32[3,5], %b2_grad.accumulation.buffer: f32[3]) {
    %loss_grad = constant f32[] dense<1.0>
    %axes = constant i64[1] dense<[0]>
    %h = Gemm(%input, %w1, %b1) {transB = 1} : f32[4,5]
    %r = Relu(%h) : f32[4,5]
    %logits = Gemm(%r, %w2, %b2) {transB = 1} : f32[4,3]
    %loss, %log_prob = com.microsoft.SoftmaxCrossEntropyLossInternal(%logits, %labels, _, _) {reduction = "mean"} : (f32[], f32[4,3])
    %logits_grad = com.microsoft.SoftmaxCrossEntropyLossInternalGrad(%loss_grad, %log_prob, %labels, _, _) {reduction = "mean"} : f32[4,3]
    %w2_grad = Gemm(%logits_grad, %r) {transA = 1} : f32[3,5]
    %b2_grad = ReduceSum(%logits_grad, %axes) {keepdims = 0} : f32[3]
    %r_grad = Gemm(%logits_grad, %w2) : f32[4,5]
    %h_grad = com.microsoft.ReluGrad(%r_grad, %r) : f32[4,5]
    %w1_grad = Gemm(%h_grad, %input) {transA = 1} : f32[5,6]
    %b1_grad = ReduceSum(%h_grad, %axes) {keepdims = 0} : f32[5]
)" + accumulate +
         "    return %loss" + outputs + "\n  }\n}\n";
}

std::unique_ptr<Module> parseSmallGraph(bool v1) {
  auto parsed = parseModule(smallGraph(v1), "two_layer.gmir");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (!parsed)
    return nullptr;
  inferTrainingSignature(**parsed);
  return std::move(*parsed);
}

using Gradients = std::vector<std::pair<std::string, TensorData>>;

/// max |a - b| / max |b| over every gradient (both lists in one order).
double maxRelativeDifference(const Gradients &a, const Gradients &b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i != std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    TensorComparison comparison =
        compareTensors(a[i].first, a[i].second, b[i].second, Tolerance());
    worst = std::max(worst, comparison.maxRelError);
  }
  return worst;
}

llvm::Expected<TrainingResult> train(const Module &module, unsigned steps,
                                     unsigned accumulate,
                                     const TestDataSet *data = nullptr) {
  InputSources sources;
  sources.testData = data;
  sources.seed = 3;
  auto inputs = bindInputs(module, sources);
  if (!inputs)
    return inputs.takeError();
  TrainingOptions options;
  options.executor.threads = 1;
  options.steps = steps;
  options.accumulate = accumulate;
  return trainModule(module, *inputs, options);
}

TEST(AccumulationTest, WithoutLazyResetNothingIsSummedAcrossSteps) {
  std::unique_ptr<Module> module = parseSmallGraph(/*v1=*/false);
  ASSERT_TRUE(module);
  ASSERT_EQ(module->getSignature().getLazyResetGrad(), nullptr);
  auto plan = planAccumulation(*module, 1);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->buffersToZero.size(), 4u);

  auto once = train(*module, 1, 1);
  ASSERT_TRUE(bool(once)) << llvm::toString(once.takeError());
  for (unsigned accumulate : {1u, 4u}) {
    // No optimizer: every step sees the same weights and batch, so each
    // step's accumulated (mean) gradient is the one-step gradient.
    auto run = train(*module, 3, accumulate);
    ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
    EXPECT_LE(maxRelativeDifference(run->firstGradients, once->firstGradients),
              1e-6)
        << "accumulate " << accumulate;
    EXPECT_LE(maxRelativeDifference(run->lastGradients, once->firstGradients),
              1e-6)
        << "accumulate " << accumulate;
  }
}

TEST(AccumulationTest, InPlaceAccumulatorV1ReturnsTheSum) {
  std::unique_ptr<Module> v1 = parseSmallGraph(/*v1=*/true);
  std::unique_ptr<Module> v2 = parseSmallGraph(/*v1=*/false);
  ASSERT_TRUE(v1 && v2);
  for (const ParamInfo &param : v1->getSignature().getParams()) {
    if (param.trainable) {
      EXPECT_TRUE(param.accumulator && param.accumulateNode)
          << param.param->getName().str();
    }
  }
  auto plan = planAccumulation(*v1, 2);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->feedBack.size(), 4u);
  for (unsigned accumulate : {1u, 3u}) {
    auto withV1 = train(*v1, 2, accumulate);
    auto withV2 = train(*v2, 2, accumulate);
    ASSERT_TRUE(bool(withV1)) << llvm::toString(withV1.takeError());
    ASSERT_TRUE(bool(withV2)) << llvm::toString(withV2.takeError());
    EXPECT_LE(
        maxRelativeDifference(withV1->lastGradients, withV2->lastGradients),
        1e-6)
        << "accumulate " << accumulate;
  }
}

/// Rows [begin, begin + count) of \p data, a tensor whose first dimension
/// is the batch.
TensorData sliceRows(const TensorData &data, int64_t begin, int64_t count) {
  const TensorType &type = data.getType();
  llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
  uint64_t rowBytes = data.getBytes().size() / shape[0];
  shape[0] = count;
  std::vector<uint8_t> bytes(data.getBytes().begin() + begin * rowBytes,
                             data.getBytes().begin() +
                                 (begin + count) * rowBytes);
  return TensorData(TensorType::get(type.getDType(), shape), std::move(bytes));
}

/// The testdata graphs without batch statistics (BatchNorm's mean over a
/// micro-batch is not the whole batch's) and without random ops.
class FourMicroBatches : public testing::TestWithParam<const char *> {};

TEST_P(FourMicroBatches, EqualOneConcatenatedBatch) {
  std::string dir = gmopt::testdataDir() + "/" + GetParam();
  auto data = readTestDataSet(dir + "/test_data_set_0");
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  std::string model = dir + "/training_model.onnx";
  auto whole = loadRunnableModel(model, {}, &*data, false);
  ASSERT_TRUE(bool(whole)) << llvm::toString(whole.takeError());
  llvm::ArrayRef<Value *> dataInputs =
      whole->module->getSignature().getDataInputs();
  ASSERT_FALSE(dataInputs.empty());

  // One step over ONNX Runtime's batch.
  auto reference = train(*whole->module, 1, 1, &*data);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());

  // Four micro-steps over its quarters (each data input split along its
  // first dimension), parameters from the same set, each quarter a
  // test-data folder.
  std::vector<TestDataSet> quarters(4);
  for (int64_t k = 0; k != 4; ++k) {
    quarters[k].directory = "quarter";
    for (const NamedTensor &tensor : data->inputs) {
      NamedTensor part = tensor;
      bool isData = llvm::any_of(dataInputs, [&](const Value *input) {
        return input->getName() == tensor.name;
      });
      if (isData) {
        int64_t rows = tensor.data.getType().getStaticShape()[0];
        ASSERT_EQ(rows % 4, 0) << tensor.name;
        part.data = sliceRows(tensor.data, k * rows / 4, rows / 4);
      }
      quarters[k].inputs.push_back(std::move(part));
    }
  }
  // Through the files a user passes as `--inputs DIR`: the quarters are
  // written as DIR/test_data_set_K/input_N.pb and read back as sets.
  llvm::SmallString<128> root;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("gmopt-quarters", root));
  for (int64_t k = 0; k != 4; ++k) {
    llvm::SmallString<128> set(root);
    llvm::sys::path::append(set, "test_data_set_" + std::to_string(k));
    ASSERT_FALSE(llvm::sys::fs::create_directory(set));
    for (size_t i = 0; i != quarters[k].inputs.size(); ++i) {
      const NamedTensor &tensor = quarters[k].inputs[i];
      onnx::TensorProto proto;
      exportTensor(tensor.data, proto);
      proto.set_name(tensor.name);
      llvm::SmallString<128> file(set);
      llvm::sys::path::append(file, "input_" + std::to_string(i) + ".pb");
      std::error_code ec;
      llvm::raw_fd_ostream out(file, ec);
      ASSERT_FALSE(ec) << ec.message();
      out << proto.SerializeAsString();
    }
  }
  auto sets = readTestDataSets(root);
  llvm::sys::fs::remove_directories(root);
  ASSERT_TRUE(bool(sets)) << llvm::toString(sets.takeError());
  ASSERT_EQ(sets->size(), 4u);
  quarters = std::move(*sets);

  auto quarter = loadRunnableModel(model, {}, &quarters[0], false);
  ASSERT_TRUE(bool(quarter)) << llvm::toString(quarter.takeError());
  const Module &module = *quarter->module;
  InputSources sources;
  sources.testData = &quarters[0];
  auto inputs = bindInputs(module, sources);
  ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
  TrainingOptions options;
  options.executor.threads = 1;
  options.accumulate = 4;
  for (const TestDataSet &part : quarters) {
    sources.testData = &part;
    auto bound = bindInputs(module, sources);
    ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
    std::vector<BoundInput> batch;
    for (BoundInput &binding : *bound)
      if (llvm::is_contained(module.getSignature().getDataInputs(),
                             binding.input))
        batch.push_back(std::move(binding));
    ASSERT_EQ(batch.size(), dataInputs.size());
    options.batches.push_back(std::move(batch));
  }
  auto accumulated = trainModule(module, *inputs, options);
  ASSERT_TRUE(bool(accumulated)) << llvm::toString(accumulated.takeError());
  ASSERT_EQ(accumulated->firstGradients.size(),
            reference->firstGradients.size());
  EXPECT_LE(maxRelativeDifference(accumulated->firstGradients,
                                  reference->firstGradients),
            1e-5);
  // The reported loss is the mean of the four micro-batch means.
  EXPECT_NEAR(accumulated->losses[0], reference->losses[0],
              1e-5 * std::abs(reference->losses[0]));
}

INSTANTIATE_TEST_SUITE_P(Testdata, FourMicroBatches,
                         testing::Values("mlp", "cnn", "gpt_tiny",
                                         "gpt_tiny_untied", "gpt_opset14",
                                         "gpt_opset20", "regression_frozen",
                                         "bert_tiny", "llama_tiny",
                                         "llama_tiny_untied"),
                         [](const testing::TestParamInfo<const char *> &info) {
                           return std::string(info.param);
                         });

TEST(AccumulationTest, AccumulatingNeedsAConstantSeed) {
  std::unique_ptr<Module> module = parseSmallGraph(/*v1=*/false);
  ASSERT_TRUE(module);
  module->getSignature().setLossGradSeed(nullptr);
  auto plan = planAccumulation(*module, 2);
  ASSERT_FALSE(bool(plan));
  EXPECT_NE(llvm::toString(plan.takeError()).find("loss-gradient seed"),
            std::string::npos);
  EXPECT_TRUE(bool(planAccumulation(*module, 1)));
}

TEST(AccumulationTest, ReadsTestDataSetFoldersInOrder) {
  llvm::SmallString<128> root;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("gmopt-sets", root));
  std::string source = gmopt::testdataDir() + "/mlp/test_data_set_0/input_1.pb";
  for (int n : {10, 2}) {
    llvm::SmallString<128> set(root);
    llvm::sys::path::append(set, "test_data_set_" + std::to_string(n));
    ASSERT_FALSE(llvm::sys::fs::create_directory(set));
    llvm::sys::path::append(set, "input_0.pb");
    ASSERT_FALSE(llvm::sys::fs::copy_file(source, set));
  }
  auto sets = readTestDataSets(root);
  ASSERT_TRUE(bool(sets)) << llvm::toString(sets.takeError());
  ASSERT_EQ(sets->size(), 2u);
  EXPECT_TRUE(llvm::StringRef((*sets)[0].directory).ends_with("_2"));
  EXPECT_TRUE(llvm::StringRef((*sets)[1].directory).ends_with("_10"));
  // One set given directly is one set.
  auto one = readTestDataSets((*sets)[0].directory);
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  EXPECT_EQ(one->size(), 1u);
  llvm::sys::fs::remove_directories(root);
}

} // namespace
