//===- RuntimeTest.cpp - Unit tests of gmopt-run's runtime library --------===//
//
// The pieces of tools/driver/ that gmopt-run is made of: weight files (ONNX
// Runtime's FlatBuffers checkpoints against the test data they were made
// with, corrupt ones, TensorProto sequences, ONNX initializers), label and
// index ranges, input binding (priorities, synthetic values, the error for
// each kind of bad input), model loading (dimension inference, `.gm`
// files), the training loop's numerical failures and accumulation, the
// comparison criterion, backend selection, and a whole in-process session.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Runtime.h"
#include "tools/driver/Checkpoint.h"
#include "tools/driver/RunReport.h"
#include "tools/driver/RunSession.h"
#include "tools/driver/TestDataSet.h"

#include "ir/Module.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "backend/cuda/CudaDevice.h"

#include "tests/unit/MlpTestdata.h"
#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace gmopt;

namespace {

std::string modelDir(llvm::StringRef name) {
  return (llvm::Twine(gmopt::testdataDir()) + "/" + name).str();
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

template <typename T> std::string errorText(llvm::Expected<T> &value) {
  return value ? std::string("<success>") : llvm::toString(value.takeError());
}

/// A fresh temporary directory, removed with its contents at scope exit.
class TempDir {
public:
  TempDir() {
    llvm::SmallString<128> dir;
    EXPECT_FALSE(
        llvm::sys::fs::createUniqueDirectory("gmopt-runtime-test", dir));
    path = dir.str().str();
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    return path + "/" + name.str();
  }
  std::string path;
};

void writeFile(const std::string &path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  ASSERT_FALSE(ec) << ec.message();
  os << bytes;
}

std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  EXPECT_TRUE(bool(buffer)) << path;
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

using test::loadMlp;
using test::Mlp;

const Value *inputNamed(const Module &module, llvm::StringRef name) {
  for (const auto &input : module.getGraph().getInputs())
    if (input->getName() == name)
      return input.get();
  return nullptr;
}

const BoundInput *boundNamed(const std::vector<BoundInput> &bound,
                             llvm::StringRef name) {
  for (const BoundInput &binding : bound)
    if (binding.input->getName() == name)
      return &binding;
  return nullptr;
}

/// \p set with input \p name replaced by \p data.
TestDataSet withInput(TestDataSet set, llvm::StringRef name, TensorData data) {
  for (NamedTensor &tensor : set.inputs)
    if (tensor.name == name)
      tensor.data = std::move(data);
  return set;
}

//===----------------------------------------------------------------------===//
// Weight files
//===----------------------------------------------------------------------===//

class CheckpointTest : public ::testing::TestWithParam<const char *> {};

TEST_P(CheckpointTest, HoldsTheTestDataParametersBitwise) {
  std::string dir = modelDir(GetParam());
  auto weights = readWeightFile(dir + "/checkpoint");
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  EXPECT_EQ(weights->kind, WeightFileKind::OrtCheckpoint);
  auto data = readTestDataSet(dir + "/test_data_set_0");
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  ASSERT_FALSE(weights->tensors.empty());
  for (const NamedTensor &tensor : weights->tensors) {
    const NamedTensor *input = data->findInput(tensor.name);
    ASSERT_TRUE(input) << tensor.name << " is not an input of the test data";
    EXPECT_TRUE(tensor.data == input->data) << tensor.name;
  }
  // Every parameter of the training graph (trainable and frozen) is there.
  auto model = loadRunnableModel(dir + "/training_model.onnx", {}, &*data,
                                 /*wantOriginal=*/false);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  for (const ParamInfo &param : model->module->getSignature().getParams())
    if (param.param->isGraphInput()) {
      EXPECT_TRUE(weights->lookup(param.param->getName()))
          << param.param->getName().str();
    }
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointTest,
                         ::testing::Values("mlp", "cnn", "resnet_tiny",
                                           "gpt_tiny", "gpt_tiny_untied",
                                           "gpt_opset14", "gpt_opset20",
                                           "regression_frozen", "bert_tiny",
                                           "llama_tiny", "llama_tiny_untied",
                                           "cnn_bn"));

TEST(CheckpointFileTest, FrozenParametersAndDropoutRatioAreRead) {
  auto frozen = readWeightFile(modelDir("regression_frozen") + "/checkpoint");
  ASSERT_TRUE(bool(frozen)) << llvm::toString(frozen.takeError());
  EXPECT_TRUE(frozen->lookup("fc1.weight"));
  EXPECT_TRUE(frozen->lookup("fc2.weight"));
  auto dropout = readWeightFile(modelDir("gpt_tiny_dropout") + "/checkpoint");
  ASSERT_TRUE(bool(dropout)) << llvm::toString(dropout.takeError());
  const NamedTensor *ratio = dropout->lookup("dropout_ratio");
  ASSERT_TRUE(ratio);
  EXPECT_EQ(ratio->data.getType(), TensorType::get(DType::F32, {}));
  EXPECT_FLOAT_EQ(ratio->data.getFloatElement(0), 0.1f);
}

TEST(CheckpointFileTest, CorruptCheckpointsAreErrorsNotCrashes) {
  std::string bytes = readFile(modelDir("regression_frozen") + "/checkpoint");
  ASSERT_GT(bytes.size(), 1000u);
  // Every truncation fails (the tensors' bytes are checked against their
  // shapes, and offsets against the size).
  for (size_t size = 0; size < bytes.size(); size += 61) {
    auto parsed =
        parseOrtCheckpoint(llvm::StringRef(bytes).take_front(size), "ckpt");
    EXPECT_FALSE(bool(parsed)) << "truncated to " << size;
    if (!parsed) {
      EXPECT_EQ(llvm::toString(parsed.takeError()).rfind("ckpt: ", 0), 0u);
    }
  }
  // Flipped bytes in the tables either fail cleanly or parse (a flip in a
  // value); they never read out of bounds (run under ASan in CI).
  for (size_t at = 0; at < 400; ++at) {
    std::string corrupt = bytes;
    corrupt[at] ^= 0xa5;
    auto parsed = parseOrtCheckpoint(corrupt, "ckpt");
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
  std::string badRoot = bytes;
  badRoot[0] = '\xff';
  badRoot[1] = '\xff';
  auto parsed = parseOrtCheckpoint(badRoot, "ckpt");
  EXPECT_EQ(errorText(parsed),
            "ckpt: corrupt ONNX Runtime checkpoint (an offset points outside "
            "the file)");
  auto notCheckpoint = parseOrtCheckpoint("0123456789abcdef", "x");
  EXPECT_NE(errorText(notCheckpoint).find("not an ONNX Runtime checkpoint"),
            std::string::npos);
}

TEST(CheckpointFileTest, TensorSequenceRoundTrips) {
  std::vector<NamedTensor> tensors(2);
  tensors[0].name = "a.weight";
  tensors[0].data = TensorData::fromValues<float>(DType::F32, {2, 2},
                                                  {1.0f, -2.0f, 3.5f, 4.0f});
  tensors[1].name = "steps";
  tensors[1].data = TensorData::fromValues<int64_t>(DType::I64, {1}, {42});
  std::string bytes = writeTensorSequence(tensors);
  TempDir dir;
  writeFile(dir.file("tensors.pbseq"), bytes);
  for (const std::string &path : {dir.file("tensors.pbseq"), dir.path}) {
    auto read = readWeightFile(path);
    ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
    EXPECT_EQ(read->kind, WeightFileKind::TensorSequence);
    ASSERT_EQ(read->tensors.size(), 2u);
    EXPECT_TRUE(read->lookup("a.weight")->data == tensors[0].data);
    EXPECT_TRUE(read->lookup("steps")->data == tensors[1].data);
  }
  auto truncated = parseTensorSequence(llvm::StringRef(bytes).drop_back(3),
                                       "seq.pbseq", dir.path);
  EXPECT_NE(
      errorText(truncated).find("seq.pbseq: truncated TensorProto sequence"),
      std::string::npos);
}

TEST(CheckpointFileTest, OnnxModelInitializersAreWeights) {
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  Value *x = graph.addInput(TensorType::get(DType::F32, {3}), "x");
  Value *bias = graph.addInitializer(
      TensorData::fromValues<float>(DType::F32, {3}, {0.5f, 1.5f, 2.5f}),
      "fc.bias");
  Builder builder(graph);
  Node *add = builder.create({"", "Add"}, {x, bias},
                             {TensorType::get(DType::F32, {3})}, {}, "add");
  graph.addOutput(add->getResult(0));
  TempDir dir;
  ASSERT_EQ(errorText(exportOnnxFile(module, dir.file("weights.onnx"))),
            "<success>");
  auto read = readWeightFile(dir.file("weights.onnx"));
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(read->kind, WeightFileKind::OnnxModel);
  ASSERT_TRUE(read->lookup("fc.bias"));
  EXPECT_TRUE(read->lookup("fc.bias")->data == bias->getData());

  writeFile(dir.file("garbage.bin"), "\x01\x02garbage");
  auto garbage = readWeightFile(dir.file("garbage.bin"));
  EXPECT_NE(errorText(garbage).find("not an ONNX model, an ONNX Runtime "
                                    "checkpoint or a TensorProto sequence"),
            std::string::npos);
  auto missing = readWeightFile(dir.file("missing.onnx"));
  EXPECT_NE(errorText(missing).find("No such file"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Ranges and input binding
//===----------------------------------------------------------------------===//

TEST(IndexRangeTest, DerivedFromLossesAndGathers) {
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  std::optional<IndexRange> labels =
      deriveIndexRange(inputNamed(module, "labels"));
  ASSERT_TRUE(labels);
  EXPECT_EQ(labels->lowest, 0);
  EXPECT_EQ(labels->end, 10);
  EXPECT_EQ(labels->role, "labels");
  EXPECT_FALSE(deriveIndexRange(inputNamed(module, "input")));

  auto gpt = loadRunnableModel(modelDir("gpt_tiny") + "/training_model.onnx",
                               {{"batch", 2}, {"batch_x_seq", 128}}, nullptr,
                               /*wantOriginal=*/false);
  ASSERT_TRUE(bool(gpt)) << llvm::toString(gpt.takeError());
  std::optional<IndexRange> ids =
      deriveIndexRange(inputNamed(*gpt->module, "input_ids"));
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->lowest, -512);
  EXPECT_EQ(ids->end, 512);
  EXPECT_EQ(ids->syntheticLowest, 0);
  EXPECT_EQ(ids->role, "index");
  std::optional<IndexRange> next =
      deriveIndexRange(inputNamed(*gpt->module, "labels"));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->end, 512);
  EXPECT_EQ(next->role, "labels");
}

TEST(BindInputsTest, SyntheticValuesAreSeededAndValid) {
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  InputSources sources;
  sources.seed = 3;
  auto first = bindInputs(module, sources);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  auto again = bindInputs(module, sources);
  ASSERT_TRUE(bool(again));
  sources.seed = 4;
  auto other = bindInputs(module, sources);
  ASSERT_TRUE(bool(other));
  ASSERT_EQ(first->size(), module.getGraph().getInputs().size());
  for (size_t i = 0; i != first->size(); ++i)
    EXPECT_TRUE((*first)[i].data == (*again)[i].data);

  const BoundInput *labels = boundNamed(*first, "labels");
  ASSERT_TRUE(labels);
  EXPECT_EQ(labels->origin, InputOrigin::Synthetic);
  for (int64_t label : labels->data.getIntValues()) {
    EXPECT_GE(label, 0);
    EXPECT_LT(label, 10);
  }
  const BoundInput *input = boundNamed(*first, "input");
  double sum = 0, squares = 0;
  uint64_t n = input->data.getNumElements();
  for (uint64_t i = 0; i != n; ++i) {
    double v = input->data.getFloatElement(i);
    sum += v;
    squares += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(squares / n), 1.0, 0.05);
  EXPECT_FALSE(input->data == boundNamed(*other, "input")->data);

  // Xavier-uniform matrices, zero biases, zero buffers, lazy_reset_grad true.
  const BoundInput *weight = boundNamed(*first, "fc1.weight");
  double limit = std::sqrt(6.0 / (784 + 512)), largest = 0;
  for (uint64_t i = 0; i != weight->data.getNumElements(); ++i)
    largest = std::max(largest, std::abs(weight->data.getFloatElement(i)));
  EXPECT_LE(largest, limit);
  EXPECT_GT(largest, 0.9 * limit);
  EXPECT_EQ(boundNamed(*first, "fc1.bias")->data.getFloatElement(0), 0.0);
  const BoundInput *buffer =
      boundNamed(*first, "fc1.weight_grad.accumulation.buffer");
  EXPECT_EQ(buffer->origin, InputOrigin::Zeros);
  const BoundInput *reset = boundNamed(*first, "lazy_reset_grad");
  EXPECT_EQ(reset->origin, InputOrigin::DefaultTrue);
  EXPECT_EQ(reset->data.getIntElement(0), 1);
}

TEST(BindInputsTest, BadInputsAreReportedBeforeRunning) {
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  std::vector<int64_t> labels =
      mlp->data.findInput("labels")->data.getIntValues();
  labels[5] = 12;
  TestDataSet outOfRange =
      withInput(mlp->data, "labels",
                TensorData::fromValues<int64_t>(DType::I64, {8}, labels));
  InputSources sources;
  sources.testData = &outOfRange;
  auto bound = bindInputs(module, sources);
  EXPECT_EQ(errorText(bound),
            mlp->data.findInput("labels")->source +
                ": labels value 12 out of range [0, 10) in input 'labels'");

  TestDataSet wrongShape =
      withInput(mlp->data, "labels",
                TensorData::fromValues<int64_t>(DType::I64, {4}, {1, 2, 3, 4}));
  sources.testData = &wrongShape;
  bound = bindInputs(module, sources);
  std::string message = errorText(bound);
  EXPECT_NE(message.find("input 'labels' expects i64[8] but the file holds "
                         "i64[4]"),
            std::string::npos)
      << message;

  TestDataSet wrongType =
      withInput(mlp->data, "labels",
                TensorData::fromValues<int32_t>(DType::I32, {8},
                                                {0, 1, 2, 3, 4, 5, 6, 7}));
  sources.testData = &wrongType;
  bound = bindInputs(module, sources);
  EXPECT_NE(errorText(bound).find("expects i64[8] but the file holds i32[8]"),
            std::string::npos);
}

TEST(BindInputsTest, InternalLossLabelsMayHoldTheIgnoreIndexOperand) {
  // ONNX Runtime's Internal losses take the ignored label as a constant
  // operand (its exporter's F.cross_entropy: -100), not an attribute.
  for (bool grad : {false, true}) {
    Module module;
    module.opsetImports[""] = 17;
    module.opsetImports["com.microsoft"] = 1;
    Graph &graph = module.getGraph();
    TensorType scoresType = TensorType::get(DType::F32, {4, 3});
    Value *scores = graph.addInput(scoresType, "scores");
    Value *labels = graph.addInput(TensorType::get(DType::I64, {4}), "labels");
    Value *ignore = graph.addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, {}, {-100}), "ignore");
    Builder builder(graph);
    Node *loss = builder.create(
        {"com.microsoft", "SoftmaxCrossEntropyLossInternal"},
        {scores, labels, nullptr, ignore},
        {TensorType::get(DType::F32, {}), scoresType},
        {NamedAttribute{"reduction", Attribute::getString("mean")}}, "loss");
    graph.addOutput(loss->getResult(0));
    if (grad) {
      Value *seed = graph.addInitializer(
          TensorData::fromValues<float>(DType::F32, {}, {1.0f}), "seed");
      Node *lossGrad = builder.create(
          {"com.microsoft", "SoftmaxCrossEntropyLossInternalGrad"},
          {seed, loss->getResult(1), labels, nullptr, ignore}, {scoresType},
          {NamedAttribute{"reduction", Attribute::getString("mean")}},
          "loss_grad");
      graph.addOutput(lossGrad->getResult(0));
    }
    auto withLabels = [&](std::vector<int64_t> values) {
      TestDataSet set;
      set.inputs.push_back(
          {"scores", "scores.pb", 0,
           TensorData::fromValues<float>(DType::F32, {4, 3},
                                         std::vector<float>(12, 0.5f))});
      set.inputs.push_back(
          {"labels", "labels.pb", 1,
           TensorData::fromValues<int64_t>(DType::I64, {4}, values)});
      return set;
    };
    TestDataSet ignored = withLabels({0, -100, 2, 1});
    InputSources sources;
    sources.testData = &ignored;
    auto bound = bindInputs(module, sources);
    EXPECT_TRUE(bool(bound)) << errorText(bound);
    TestDataSet outOfRange = withLabels({0, -7, 2, 1});
    sources.testData = &outOfRange;
    auto refused = bindInputs(module, sources);
    EXPECT_EQ(errorText(refused),
              "labels.pb: labels value -7 out of range [0, 3) in input "
              "'labels'");
  }
}

TEST(BindInputsTest, WeightsComeFirstAndMissingOnesAreNamed) {
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  auto gptWeights = readWeightFile(modelDir("gpt_tiny") + "/checkpoint");
  ASSERT_TRUE(bool(gptWeights));
  InputSources sources;
  sources.testData = &mlp->data;
  sources.weights = &*gptWeights;
  auto bound = bindInputs(module, sources);
  EXPECT_EQ(errorText(bound), gptWeights->path +
                                  ": no value for parameter 'fc1.weight' (pass "
                                  "--allow-missing-weights to initialize it)");
  sources.allowMissingWeights = true;
  bound = bindInputs(module, sources);
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  EXPECT_EQ(boundNamed(*bound, "fc1.weight")->origin, InputOrigin::TestData);

  // A weights file wins over the test data for parameters; the rest come
  // from the test data when missing weights are allowed.
  WeightSet weights;
  weights.path = "w.pbseq";
  NamedTensor bias;
  bias.name = "fc3.bias";
  bias.source = "w.pbseq: tensor 'fc3.bias'";
  std::vector<float> values(10, 0.25f);
  bias.data = TensorData::fromValues<float>(DType::F32, {10}, values);
  weights.tensors.push_back(bias);
  sources.weights = &weights;
  bound = bindInputs(module, sources);
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  EXPECT_EQ(boundNamed(*bound, "fc3.bias")->origin, InputOrigin::Weights);
  EXPECT_TRUE(boundNamed(*bound, "fc3.bias")->data == bias.data);
  EXPECT_EQ(boundNamed(*bound, "fc2.bias")->origin, InputOrigin::TestData);

  weights.tensors[0].data =
      TensorData::fromValues<float>(DType::F32, {2}, {1, 2});
  bound = bindInputs(module, sources);
  EXPECT_EQ(errorText(bound), "w.pbseq: tensor 'fc3.bias': input 'fc3.bias' "
                              "expects f32[10] but the weights file holds "
                              "f32[2]");
}

TEST(BindInputsTest, TestDataMustHoldEveryDataInput) {
  // With test data, a data input it lacks is an error, not random values.
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  const Module &module = *mlp->model.module;
  TestDataSet noLabels = mlp->data;
  llvm::erase_if(noLabels.inputs,
                 [](const NamedTensor &t) { return t.name == "labels"; });
  InputSources sources;
  sources.testData = &noLabels;
  auto bound = bindInputs(module, sources);
  EXPECT_EQ(errorText(bound),
            "data input 'labels' has no tensor in --inputs " +
                noLabels.directory +
                " (expected an input_K.pb holding a tensor named 'labels', or "
                "an unnamed input_1.pb; synthetic data is only used without "
                "--inputs)");
  // Parameters, buffers and lazy_reset_grad still have their defaults.
  TestDataSet dataOnly = mlp->data;
  llvm::erase_if(dataOnly.inputs, [](const NamedTensor &t) {
    return t.name != "input" && t.name != "labels";
  });
  sources.testData = &dataOnly;
  bound = bindInputs(module, sources);
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  EXPECT_EQ(boundNamed(*bound, "labels")->origin, InputOrigin::TestData);
  EXPECT_EQ(boundNamed(*bound, "fc1.weight")->origin, InputOrigin::Synthetic);
  EXPECT_EQ(boundNamed(*bound, "lazy_reset_grad")->origin,
            InputOrigin::DefaultTrue);
}

TEST(TestDataSetTest, AmbiguousSetsAreRefused) {
  TempDir dir;
  std::string set = modelDir("mlp") + "/test_data_set_0";
  auto copy = [&](const std::string &from, const std::string &to) {
    ASSERT_FALSE(llvm::sys::fs::copy_file(set + "/" + from, dir.file(to)));
  };
  copy("input_0.pb", "input_0.pb");
  copy("input_1.pb", "input_1.pb");
  ASSERT_TRUE(bool(readTestDataSet(dir.path)));
  // Two files holding `input`: which one a lookup found depended on the
  // directory order.
  copy("input_0.pb", "input_7.pb");
  auto twice = readTestDataSet(dir.path);
  EXPECT_EQ(errorText(twice), dir.file("input_0.pb") + " and " +
                                  dir.file("input_7.pb") +
                                  " both hold a tensor named 'input'");
  llvm::sys::fs::remove(dir.file("input_7.pb"));
  // Two files numbered 1.
  copy("input_2.pb", "input_01.pb");
  auto renumbered = readTestDataSet(dir.path);
  std::string message = errorText(renumbered);
  EXPECT_NE(message.find(" have the same number 1"), std::string::npos)
      << message;
}

// bert_tiny's attention_mask only meets `attention_mask == 0`: synthetic
// data draws 0 or 1, so some keys are padding and some are not.
TEST(BindInputsTest, MaskComparedWithConstantsGetsBothOutcomes) {
  auto bert = loadRunnableModel(modelDir("bert_tiny") + "/training_model.onnx",
                                {{"batch", 4}}, nullptr,
                                /*wantOriginal=*/false);
  ASSERT_TRUE(bool(bert)) << llvm::toString(bert.takeError());
  EXPECT_FALSE(deriveIndexRange(inputNamed(*bert->module, "attention_mask")));
  auto bound = bindInputs(*bert->module, InputSources());
  ASSERT_TRUE(bool(bound)) << llvm::toString(bound.takeError());
  const BoundInput *mask = boundNamed(*bound, "attention_mask");
  ASSERT_TRUE(mask);
  EXPECT_EQ(mask->origin, InputOrigin::Synthetic);
  std::vector<int64_t> values = mask->data.getIntValues();
  EXPECT_EQ(values.size(), 64u);
  for (int64_t v : values)
    EXPECT_TRUE(v == 0 || v == 1) << v;
  EXPECT_TRUE(llvm::is_contained(values, 0));
  EXPECT_TRUE(llvm::is_contained(values, 1));
  for (int64_t id : boundNamed(*bound, "input_ids")->data.getIntValues()) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 64);
  }

  // Compared with 2 (through a Cast) and with 5: [2, 7) holds both
  // constants and a value equal to neither. One use that is not such a
  // comparison (Neg) and nothing is derivable.
  for (bool alsoNegated : {false, true}) {
    Module module;
    module.opsetImports[""] = 17;
    Graph &graph = module.getGraph();
    TensorType i64x = TensorType::get(DType::I64, {256});
    TensorType boolx = TensorType::get(DType::Bool, {256});
    Value *code = graph.addInput(i64x, "code");
    Value *two = graph.addInitializer(
        TensorData::fromValues<int32_t>(DType::I32, {}, {2}), "two");
    Value *five = graph.addInitializer(
        TensorData::fromValues<int64_t>(DType::I64, {}, {5}), "five");
    Builder builder(graph);
    Node *cast = builder.create(
        {"", "Cast"}, {code}, {TensorType::get(DType::I32, {256})},
        {NamedAttribute{"to", Attribute::getInt(6)}}, "cast");
    Node *isTwo = builder.create({"", "Equal"}, {cast->getResult(0), two},
                                 {boolx}, {}, "is_two");
    Node *isFive =
        builder.create({"", "Equal"}, {five, code}, {boolx}, {}, "is_five");
    graph.addOutput(isTwo->getResult(0));
    graph.addOutput(isFive->getResult(0));
    if (alsoNegated)
      graph.addOutput(
          builder.create({"", "Neg"}, {code}, {i64x}, {}, "neg")->getResult(0));
    auto synthetic = bindInputs(module, InputSources());
    if (alsoNegated) {
      EXPECT_NE(errorText(synthetic).find("cannot derive the valid range of "
                                          "integer input 'code'"),
                std::string::npos);
      continue;
    }
    ASSERT_TRUE(bool(synthetic)) << llvm::toString(synthetic.takeError());
    std::vector<int64_t> codes =
        boundNamed(*synthetic, "code")->data.getIntValues();
    for (int64_t v : codes) {
      EXPECT_GE(v, 2);
      EXPECT_LT(v, 7);
    }
    EXPECT_TRUE(llvm::is_contained(codes, 2));
    EXPECT_TRUE(llvm::is_contained(codes, 5));
    EXPECT_TRUE(llvm::is_contained(codes, 6));
  }
}

TEST(BindInputsTest, IntegerInputWithoutRangeNeedsData) {
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  Value *count = graph.addInput(TensorType::get(DType::I64, {2}), "count");
  Builder builder(graph);
  Node *neg = builder.create({"", "Neg"}, {count},
                             {TensorType::get(DType::I64, {2})}, {}, "neg");
  graph.addOutput(neg->getResult(0));
  auto bound = bindInputs(module, InputSources());
  EXPECT_NE(errorText(bound).find("cannot derive the valid range of integer "
                                  "input 'count'"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Model loading
//===----------------------------------------------------------------------===//

TEST(LoadModelTest, DimensionsAreInferredFromTheInputs) {
  auto data = readTestDataSet(modelDir("resnet_tiny") + "/test_data_set_0");
  ASSERT_TRUE(bool(data));
  auto model =
      loadRunnableModel(modelDir("resnet_tiny") + "/training_model.onnx", {},
                        &*data, /*wantOriginal=*/true);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->dims.at("batch"), 4);
  EXPECT_EQ(inputNamed(*model->module, "input")->getType(),
            TensorType::get(DType::F32, {4, 3, 32, 32}));
  ASSERT_TRUE(model->original);
  // The default pipeline shrinks the graph (canonicalize, fold-transpose);
  // recompute's clones come on top.
  unsigned notRecomputed = 0;
  for (const Node &node : model->module->getGraph().getNodes())
    notRecomputed += node.getPhase() != Phase::Recompute;
  EXPECT_GT(model->original->getGraph().getNumNodes(), notRecomputed);
  EXPECT_NE(model->pipeline.find("canonicalize"), std::string::npos);

  // Inputs that disagree on a dimension.
  TestDataSet mixed =
      withInput(*data, "labels",
                TensorData::fromValues<int64_t>(DType::I64, {2}, {1, 2}));
  auto contradiction = loadRunnableModel(
      modelDir("resnet_tiny") + "/training_model.onnx", {}, &mixed, false);
  std::string message = errorText(contradiction);
  EXPECT_NE(message.find(": dimension 'batch' is 2 here but 4 in"),
            std::string::npos)
      << message;
  // An explicit --dim wins; the inputs then do not fit.
  auto explicitDim =
      loadRunnableModel(modelDir("resnet_tiny") + "/training_model.onnx",
                        {{"batch", 8}}, &*data, false);
  ASSERT_TRUE(bool(explicitDim));
  InputSources sources;
  sources.testData = &*data;
  auto bound = bindInputs(*explicitDim->module, sources);
  EXPECT_NE(errorText(bound).find("expects f32[8,3,32,32]"), std::string::npos);
}

TEST(LoadModelTest, UnboundDimensionsAndNonTrainingGraphsAreErrors) {
  std::string mlp = modelDir("mlp") + "/training_model.onnx";
  auto unbound = loadRunnableModel(mlp, {}, nullptr, false);
  std::string message = errorText(unbound);
  EXPECT_NE(message.find(mlp + ": symbolic dimension 'batch'"),
            std::string::npos)
      << message;
  std::string relu =
      gmopt::testSourceDir() + "/tests/lit/Inputs/onnx/valid_relu.onnx";
  auto inference = loadRunnableModel(relu, {}, nullptr, false);
  message = errorText(inference);
  EXPECT_NE(message.find("no gradients found"), std::string::npos) << message;
  auto missing = loadRunnableModel("/nonexistent/model.gm", {}, nullptr, false);
  EXPECT_EQ(errorText(missing),
            "/nonexistent/model.gm: No such file or directory");
}

TEST(LoadModelTest, GmFilesRunAndMatchTheReference) {
  std::optional<Mlp> mlp = loadMlp(/*wantOriginal=*/true);
  ASSERT_TRUE(mlp);
  TempDir dir;
  std::string path = dir.file("mlp.gm");
  ASSERT_EQ(errorText(writeGmFile(path, *mlp->model.module,
                                  *mlp->model.original, mlp->model.pipeline)),
            "<success>");
  auto loaded = loadRunnableModel(path, {}, nullptr, /*wantOriginal=*/true);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_TRUE(loaded->fromGmFile);
  EXPECT_EQ(loaded->pipeline, mlp->model.pipeline);
  ASSERT_TRUE(loaded->original);
  InputSources sources;
  sources.testData = &mlp->data;
  for (Module *module : {loaded->module.get(), loaded->original.get()}) {
    auto inputs = bindInputs(*module, sources);
    ASSERT_TRUE(bool(inputs)) << llvm::toString(inputs.takeError());
    TrainingOptions options;
    options.executor.threads = 1;
    auto result = trainModule(*module, *inputs, options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    auto comparisons = compareWithReference(*result, mlp->data, Tolerance());
    ASSERT_TRUE(bool(comparisons)) << llvm::toString(comparisons.takeError());
    EXPECT_TRUE(allWithinTolerance(*comparisons));
  }

  std::string bytes = readFile(path);
  writeFile(dir.file("corrupt.gm"), llvm::StringRef(bytes).drop_back(10));
  auto corrupt = loadRunnableModel(dir.file("corrupt.gm"), {}, nullptr, false);
  std::string message = errorText(corrupt);
  EXPECT_EQ(message.rfind(dir.file("corrupt.gm") + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(".gm file"), std::string::npos) << message;
}

//===----------------------------------------------------------------------===//
// Training and comparisons
//===----------------------------------------------------------------------===//

TEST(TrainModuleTest, NonFiniteLossIsANumericalError) {
  std::optional<Mlp> mlp = loadMlp();
  ASSERT_TRUE(mlp);
  std::vector<float> input(8 * 784, 1.0f);
  input[100] = std::nanf("");
  TestDataSet poisoned =
      withInput(mlp->data, "input",
                TensorData::fromValues<float>(DType::F32, {8, 784}, input));
  InputSources sources;
  sources.testData = &poisoned;
  auto inputs = bindInputs(*mlp->model.module, sources);
  ASSERT_TRUE(bool(inputs));
  TrainingOptions options;
  options.executor.threads = 1;
  options.steps = 3;
  auto result = trainModule(*mlp->model.module, *inputs, options);
  ASSERT_FALSE(bool(result));
  llvm::Error err = result.takeError();
  EXPECT_EQ(exitCodeFor(err), kNumericalFailureExitCode);
  EXPECT_EQ(llvm::toString(std::move(err)), "loss is NaN at step 1");

  // A learning rate that blows the weights up fails at a later step.
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::SGD;
  std::optional<Mlp> trained = loadMlp(false, &sgd);
  ASSERT_TRUE(trained);
  sources.testData = &trained->data;
  inputs = bindInputs(*trained->model.module, sources);
  ASSERT_TRUE(bool(inputs));
  options.learningRate = 1e30f;
  result = trainModule(*trained->model.module, *inputs, options);
  ASSERT_FALSE(bool(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_EQ(message.rfind("loss is ", 0), 0u);
  EXPECT_EQ(message.find("at step 1"), std::string::npos) << message;
  EXPECT_EQ(exitCodeFor(llvm::make_error<llvm::StringError>(
                "x", llvm::inconvertibleErrorCode())) == kInputErrorExitCode,
            true);
}

TEST(TrainModuleTest, AccumulationSumsMicroSteps) {
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::SGD;
  std::optional<Mlp> mlp = loadMlp(false, &sgd);
  ASSERT_TRUE(mlp);
  InputSources sources;
  sources.testData = &mlp->data;
  auto inputs = bindInputs(*mlp->model.module, sources);
  ASSERT_TRUE(bool(inputs));
  TrainingOptions options;
  options.executor.threads = 1;
  options.accumulate = 3;
  options.steps = 2;
  options.learningRate = 0.05f;
  auto result = trainModule(*mlp->model.module, *inputs, options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  EXPECT_EQ(result->microStepMilliseconds.size(), 6u);
  // The optimizer fired once per optimizer step, on its last micro-step.
  EXPECT_EQ(result->updates, 2u);
  ASSERT_EQ(result->losses.size(), 2u);
  // Step 1's micro-steps all see the same weights and batch.
  EXPECT_FLOAT_EQ(result->losses[0], result->firstLoss.getFloatElement(0));
  EXPECT_LT(result->losses[1], result->losses[0]);
  auto comparisons = compareWithReference(*result, mlp->data, Tolerance());
  ASSERT_TRUE(bool(comparisons));
  EXPECT_TRUE(allWithinTolerance(*comparisons));
}

TEST(CompareTest, CriterionIsRelativeToTheLargestReferenceWithAFloor) {
  auto tensor = [](std::vector<float> values) {
    return TensorData::fromValues<float>(DType::F32, {int64_t(values.size())},
                                         values);
  };
  Tolerance tolerance{1e-3, 1e-6};
  // max|ref| = 8: errors up to 8e-3 pass, whatever the element's own size.
  EXPECT_TRUE(compareTensors("a", tensor({8.0f, 0.0f}), tensor({8.0f, 0.0078f}),
                             tolerance)
                  .ok);
  TensorComparison over = compareTensors("a", tensor({8.0f, 0.0f}),
                                         tensor({8.0f, 0.0082f}), tolerance);
  EXPECT_FALSE(over.ok);
  EXPECT_NEAR(over.maxRelError, 0.0082 / 8.0, 1e-9);
  // An all-zero reference falls back to the absolute floor.
  EXPECT_TRUE(
      compareTensors("z", tensor({5e-7f}), tensor({0.0f}), tolerance).ok);
  EXPECT_FALSE(
      compareTensors("z", tensor({5e-6f}), tensor({0.0f}), tolerance).ok);
  TensorComparison nan =
      compareTensors("n", tensor({std::nanf("")}), tensor({1.0f}), tolerance);
  EXPECT_FALSE(nan.ok);
  EXPECT_EQ(nan.problem, "non-finite values");
  TensorComparison shape =
      compareTensors("s", tensor({1.0f, 2.0f}), tensor({1.0f}), tolerance);
  EXPECT_FALSE(shape.ok);
  EXPECT_EQ(shape.problem, "got f32[2] but the reference is f32[1]");
}

TEST(CompareTest, SgdReferenceFiles) {
  auto reference = readSgdReference(modelDir("mlp") + "/sgd_losses.json");
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  EXPECT_DOUBLE_EQ(reference->learningRate, 0.05);
  ASSERT_EQ(reference->losses.size(), 20u);
  std::vector<double> losses(reference->losses.begin(),
                             reference->losses.end());
  losses[3] *= 1.001;
  std::vector<TensorComparison> comparisons =
      compareLossCurve(losses, *reference, Tolerance());
  ASSERT_EQ(comparisons.size(), 20u);
  EXPECT_FALSE(comparisons[3].ok);
  EXPECT_EQ(comparisons[3].name, "loss[3]");
  comparisons.erase(comparisons.begin() + 3);
  EXPECT_TRUE(allWithinTolerance(comparisons));

  TempDir dir;
  writeFile(dir.file("bad.json"), "{\"losses\": [1, 2]}");
  auto bad = readSgdReference(dir.file("bad.json"));
  EXPECT_EQ(errorText(bad),
            dir.file("bad.json") + ": missing or invalid \"learning_rate\"");
}

TEST(RunSessionTest, FailedCheckStillWritesTheReport) {
  TempDir dir;
  RunConfig config;
  config.modelPath = modelDir("mlp") + "/training_model.onnx";
  config.backend = BackendKind::Cpu;
  config.executor.threads = 1;
  config.inputsDir = modelDir("mlp") + "/test_data_set_0";
  config.checkDir = config.inputsDir;
  config.tolerance = Tolerance{0, 0};
  config.reportJsonPath = dir.file("report.json");
  std::string out, notices;
  llvm::raw_string_ostream outStream(out), noticeStream(notices);
  llvm::Error err = runSession(config, outStream, noticeStream);
  ASSERT_TRUE(bool(err));
  EXPECT_EQ(exitCodeFor(err), kNumericalFailureExitCode);
  std::string message = llvm::toString(std::move(err));
  EXPECT_EQ(message.rfind(config.checkDir + ": check failed: ", 0), 0u)
      << message;
  EXPECT_TRUE(notices.empty()) << notices;
  EXPECT_NE(out.find("FAIL"), std::string::npos);
  auto json = llvm::json::parse(readFile(config.reportJsonPath));
  ASSERT_TRUE(bool(json)) << llvm::toString(json.takeError());
  const llvm::json::Object *check = json->getAsObject()->getObject("check");
  ASSERT_TRUE(check);
  EXPECT_EQ(check->getBoolean("passed"), std::optional<bool>(false));

  // The auto backend explains its choice once.
  config.backend = BackendKind::Auto;
  config.checkDir.clear();
  config.reportJsonPath.clear();
  err = runSession(config, outStream, noticeStream);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  std::string probeNotice;
  ASSERT_TRUE(bool(selectBackend(BackendKind::Auto, probeNotice)));
  EXPECT_EQ(notices,
            probeNotice.empty() ? "" : "gmopt-run: " + probeNotice + "\n");
}

TEST(RunSessionTest, NoticesOnlyWhenTheRunProceeds) {
  RunConfig config;
  config.modelPath = modelDir("mlp") + "/training_model.onnx";
  config.backend = BackendKind::Auto;
  config.executor.threads = 1;
  config.dims = {{"batch", 2}};
  std::string out, notices;
  llvm::raw_string_ostream outStream(out), noticeStream(notices);

  // An error before training: the error alone, no fallback notice.
  config.inputsDir = modelDir("mlp") + "/no-such-set";
  llvm::Error err = runSession(config, outStream, noticeStream);
  EXPECT_TRUE(bool(err));
  llvm::consumeError(std::move(err));
  EXPECT_TRUE(notices.empty()) << notices;

  // Without --inputs: the notice, then the synthetic-data note, once each.
  config.inputsDir.clear();
  err = runSession(config, outStream, noticeStream);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  std::string probeNotice;
  ASSERT_TRUE(bool(selectBackend(BackendKind::Auto, probeNotice)));
  EXPECT_EQ(notices, "gmopt-run: " + probeNotice +
                         "\ngmopt-run: note: no --inputs given; data inputs "
                         "'input', 'labels' get seeded synthetic values\n");
}

TEST(RunSessionTest, TolerancesMustBeFiniteAndNonNegative) {
  RunConfig config;
  config.modelPath = modelDir("mlp") + "/training_model.onnx";
  config.backend = BackendKind::Cpu;
  std::string out, notices;
  llvm::raw_string_ostream outStream(out), noticeStream(notices);
  auto messageFor = [&](double rtol, double atol) {
    config.tolerance = Tolerance{rtol, atol};
    return errorText(runSession(config, outStream, noticeStream));
  };
  EXPECT_EQ(messageFor(std::nan(""), 1e-6),
            "--rtol must be a finite non-negative number, not nan");
  EXPECT_EQ(messageFor(1e-4, std::nan("")),
            "--atol must be a finite non-negative number, not nan");
  EXPECT_EQ(messageFor(-1, 1e-6),
            "--rtol must be a finite non-negative number, not -1");
  EXPECT_EQ(messageFor(1e-4, INFINITY),
            "--atol must be a finite non-negative number, not inf");
  EXPECT_TRUE(out.empty()) << out;
  EXPECT_TRUE(notices.empty()) << notices;
}

TEST(BackendTest, AutoFallsBackToTheCpuAndCudaSaysWhy) {
  // Without a usable device every request ends on the CPU, with a notice
  // giving the probe's reason, or in an error that is that reason; with
  // one, auto and cuda both pick the CUDA backend.
  auto probe = probeCudaDevice();
  std::string probeError = probe ? "" : llvm::toString(probe.takeError());
  std::string notice;
  auto automatic = selectBackend(BackendKind::Auto, notice);
  ASSERT_TRUE(bool(automatic));
  if (probeError.empty()) {
    EXPECT_EQ(*automatic, BackendKind::Cuda);
    EXPECT_TRUE(notice.empty()) << notice;
  } else {
    EXPECT_EQ(*automatic, BackendKind::Cpu);
    EXPECT_EQ(notice.rfind("no CUDA device (", 0), 0u) << notice;
    EXPECT_NE(notice.find(probeError.rfind("no CUDA device", 0) == 0
                              ? probeError
                              : "(" + probeError + ")"),
              std::string::npos)
        << notice;
    EXPECT_EQ(llvm::StringRef(notice).ends_with("; using the CPU backend"),
              true)
        << notice;
  }
  auto cpu = selectBackend(BackendKind::Cpu, notice);
  ASSERT_TRUE(bool(cpu));
  EXPECT_TRUE(notice.empty());
  auto cuda = selectBackend(BackendKind::Cuda, notice);
  if (probeError.empty()) {
    ASSERT_TRUE(bool(cuda)) << errorText(cuda);
    EXPECT_EQ(*cuda, BackendKind::Cuda);
  } else {
    EXPECT_EQ(errorText(cuda), probeError);
  }
}

} // namespace
