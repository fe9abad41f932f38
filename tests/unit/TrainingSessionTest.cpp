//===- TrainingSessionTest.cpp - gmopt_runtime's training API -------------===//
//
// TrainingSession over ONNX Runtime's own artifacts (testdata/gpt_tiny,
// made by onnxruntime-training 1.19.2's generate_artifacts): its losses are
// ONNX Runtime's reference losses (adamw_losses.json, and a linear schedule's
// run recorded below), the optimizer step changes the parameters, and the
// learning rate, checkpoints with properties and optimizer state, the
// contiguous parameter buffer, the eval step and the inference export behave
// as ONNX Runtime's training API does.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/TrainingSession.h"

#include "tests/unit/TestPaths.h"
#include "tools/driver/ToolSupport.h"
#include "tools/runtime/Runtime.h"
#include "tools/runtime/TestDataSet.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

std::string artifactsDir(llvm::StringRef model = "gpt_tiny") {
  return testdataDir() + "/" + model.str();
}

/// Fails the test with \p err's message when it is an error.
#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    llvm::Error assertOkError = (expr);                                        \
    ASSERT_FALSE(assertOkError) << llvm::toString(std::move(assertOkError));   \
  } while (false)

/// Expects \p err to be an error, and consumes it.
void expectError(llvm::Error err) {
  EXPECT_TRUE(bool(err));
  llvm::consumeError(std::move(err));
}

template <typename T> T take(llvm::Expected<T> value) {
  if (!value) {
    ADD_FAILURE() << llvm::toString(value.takeError());
    return T();
  }
  return std::move(*value);
}

/// A CPU session over \p model's artifacts and checkpoint, one thread (the
/// references were made with the same sums).
std::unique_ptr<TrainingSession>
openArtifacts(bool withOptimizer = true, llvm::StringRef model = "gpt_tiny") {
  auto state = CheckpointState::load(artifactsDir(model) + "/checkpoint");
  if (!state) {
    ADD_FAILURE() << llvm::toString(state.takeError());
    return nullptr;
  }
  TrainingArtifacts artifacts =
      TrainingArtifacts::fromDirectory(artifactsDir(model));
  if (!withOptimizer)
    artifacts.optimizerModel.clear();
  TrainingSessionOptions options;
  options.backend = SessionBackend::Cpu;
  options.threads = 1;
  auto session = TrainingSession::open(artifacts, *state, options);
  if (!session) {
    ADD_FAILURE() << llvm::toString(session.takeError());
    return nullptr;
  }
  return std::move(*session);
}

/// The data inputs of test_data_set_0, in the session's input order.
std::vector<HostTensor> batchFor(const TrainingSession &session,
                                 bool training = true,
                                 llvm::StringRef model = "gpt_tiny") {
  auto set = readTestDataSet(artifactsDir(model) + "/test_data_set_0");
  if (!set) {
    ADD_FAILURE() << llvm::toString(set.takeError());
    return {};
  }
  std::vector<HostTensor> batch;
  for (const std::string &name : session.inputNames(training)) {
    const NamedTensor *tensor = set->findInput(name);
    if (!tensor) {
      ADD_FAILURE() << "test_data_set_0 has no input " << name;
      return {};
    }
    const TensorData &data = tensor->data;
    batch.push_back(take(HostTensor::copyOf(data.getType().getDType(),
                                            data.getType().getStaticShape(),
                                            data.getBytes())));
  }
  return batch;
}

double lossOf(llvm::Expected<std::vector<HostTensor>> outputs) {
  std::vector<HostTensor> values = take(std::move(outputs));
  if (values.empty()) {
    ADD_FAILURE() << "no outputs";
    return NAN;
  }
  return values.front().getElementAsDouble(0);
}

/// A fresh directory, removed with everything in it at the end of the test.
class ScratchDir {
public:
  ScratchDir() {
    EXPECT_FALSE(
        llvm::sys::fs::createUniqueDirectory("gmopt-training-session", dir));
  }
  ~ScratchDir() { llvm::sys::fs::remove_directories(dir); }
  /// \p name inside the directory.
  std::string path(llvm::StringRef name) const {
    llvm::SmallString<128> file(dir);
    llvm::sys::path::append(file, name);
    return std::string(file);
  }

private:
  llvm::SmallString<128> dir;
};

TEST(TrainingSession, NamesFollowOnnxRuntime) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  // What onnxruntime.training.api.Module reports for these artifacts.
  EXPECT_EQ(session->inputNames(true),
            (std::vector<std::string>{"input_ids", "labels"}));
  EXPECT_EQ(session->outputNames(true),
            (std::vector<std::string>{"onnx::loss::2"}));
  EXPECT_EQ(session->inputNames(false),
            (std::vector<std::string>{"input_ids", "labels"}));
  // Module.get_parameters_size(True) and (False).
  EXPECT_EQ(session->getParametersSize(true), 273152);
  EXPECT_EQ(session->getParametersSize(false), 273153);
}

/// ONNX Runtime's loop (lazy_reset_grad, train step, optimizer step) on
/// \p model's artifacts follows its recorded AdamW losses.
void expectOnnxRuntimeAdamWLosses(llvm::StringRef model) {
  auto reference =
      readLossReference(artifactsDir(model) + "/adamw_losses.json");
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto session = openArtifacts(true, model);
  ASSERT_TRUE(session);
  std::vector<HostTensor> batch = batchFor(*session, true, model);
  session->setLearningRate(static_cast<float>(reference->learningRate));
  for (size_t step = 0; step != reference->losses.size(); ++step) {
    session->lazyResetGrad();
    double loss = lossOf(session->trainStep(batch));
    EXPECT_NEAR(loss, reference->losses[step],
                1e-5 * std::abs(reference->losses[step]))
        << model.str() << " step " << step;
    ASSERT_OK(session->optimizerStep());
  }
  EXPECT_EQ(session->getStepCount(),
            static_cast<int64_t>(reference->losses.size()));
}

TEST(TrainingSession, LossesEqualOnnxRuntimeAdamW) {
  expectOnnxRuntimeAdamWLosses("gpt_tiny");
  expectOnnxRuntimeAdamWLosses("bert_tiny");
}

TEST(TrainingSession, FusedStepEqualsTrainThenOptimizerStep) {
  auto separate = openArtifacts();
  auto fused = openArtifacts();
  ASSERT_TRUE(separate && fused);
  std::vector<HostTensor> batch = batchFor(*separate);
  for (int step = 0; step != 3; ++step) {
    separate->lazyResetGrad();
    double a = lossOf(separate->trainStep(batch));
    ASSERT_OK(separate->optimizerStep());
    fused->lazyResetGrad();
    double b = lossOf(fused->trainStepAndUpdate(batch));
    EXPECT_NEAR(a, b, 1e-6 * std::abs(a)) << "step " << step;
  }
  HostTensor x = take(separate->getContiguousParameters(true));
  HostTensor y = take(fused->getContiguousParameters(true));
  ASSERT_EQ(x.getNumElements(), y.getNumElements());
  double maxDiff = 0;
  for (int64_t i = 0; i != x.getNumElements(); ++i)
    maxDiff = std::max(
        maxDiff, std::abs(x.getElementAsDouble(i) - y.getElementAsDouble(i)));
  EXPECT_LT(maxDiff, 1e-6);
}

TEST(TrainingSession, OptimizerStepChangesParameters) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  std::vector<HostTensor> batch = batchFor(*session);
  // Not before a training step: there is no gradient yet.
  expectError(session->optimizerStep());
  HostTensor before = take(session->getContiguousParameters(true));
  session->lazyResetGrad();
  lossOf(session->trainStep(batch));
  HostTensor unchanged = take(session->getContiguousParameters(true));
  EXPECT_EQ(before.getBytes(), unchanged.getBytes());
  ASSERT_OK(session->optimizerStep());
  HostTensor after = take(session->getContiguousParameters(true));
  EXPECT_NE(before.getBytes(), after.getBytes());
  EXPECT_EQ(session->getStepCount(), 1);
  // Without an optimizer model there is no optimizer step.
  auto plain = openArtifacts(/*withOptimizer=*/false);
  ASSERT_TRUE(plain);
  lossOf(plain->trainStep(batch));
  expectError(plain->optimizerStep());
}

TEST(TrainingSession, LearningRateAndLinearSchedule) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  // ONNX Runtime's default, then what set_learning_rate sets.
  EXPECT_FLOAT_EQ(session->getLearningRate(), 0.001f);
  session->setLearningRate(0.02f);
  EXPECT_FLOAT_EQ(session->getLearningRate(), 0.02f);
  expectError(session->schedulerStep());
  // onnxruntime-training 1.19.2, `LinearLRScheduler(optimizer, 1, 4, 0.01)`
  // (a warm-up of 4 steps and a total of 1: its Python binding passes the
  // counts in the other order), on these artifacts and test_data_set_0:
  // per step lazy_reset_grad, train step, optimizer step, scheduler step.
  const float rates[] = {0.0f, 0.0025f, 0.005f, 0.0075f, 0.0f, 0.0f};
  const double losses[] = {6.264329433441162, 6.264329433441162,
                           5.9008893966674805, 5.469823837280273,
                           5.469216346740723};
  ASSERT_OK(session->registerLinearLRScheduler(4, 1, 0.01f));
  EXPECT_FLOAT_EQ(session->getLearningRate(), rates[0]);
  std::vector<HostTensor> batch = batchFor(*session);
  for (int step = 0; step != 5; ++step) {
    session->lazyResetGrad();
    double loss = lossOf(session->trainStep(batch));
    EXPECT_NEAR(loss, losses[step], 1e-5 * losses[step]) << "step " << step;
    ASSERT_OK(session->optimizerStep());
    ASSERT_OK(session->schedulerStep());
    EXPECT_NEAR(session->getLearningRate(), rates[step + 1], 1e-9)
        << "step " << step;
  }
  expectError(session->registerLinearLRScheduler(-1, 4, 0.01f));
}

TEST(TrainingSession, CheckpointRoundTripWithPropertiesAndOptimizerState) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  std::vector<HostTensor> batch = batchFor(*session);
  for (int step = 0; step != 2; ++step) {
    session->lazyResetGrad();
    lossOf(session->trainStep(batch));
    ASSERT_OK(session->optimizerStep());
  }
  CheckpointState &state = session->getCheckpointState();
  state.addProperty("epoch", int64_t(3));
  state.addProperty("best_loss", 5.25f);
  state.addProperty("dataset", std::string("tiny"));
  ScratchDir scratch;
  std::string path = scratch.path("checkpoint");
  ASSERT_OK(session->saveCheckpoint(path, /*includeOptimizerState=*/true));

  // The next loss of the session that goes on...
  session->lazyResetGrad();
  double expected = lossOf(session->trainStep(batch));
  ASSERT_OK(session->optimizerStep());
  session->lazyResetGrad();
  double expectedNext = lossOf(session->trainStep(batch));

  // ... is the resumed one's.
  auto loaded = CheckpointState::load(path);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_TRUE(loaded->hasOptimizerState());
  EXPECT_EQ(std::get<int64_t>(take(loaded->getProperty("epoch"))), 3);
  EXPECT_EQ(std::get<float>(take(loaded->getProperty("best_loss"))), 5.25f);
  EXPECT_EQ(std::get<std::string>(take(loaded->getProperty("dataset"))),
            "tiny");
  EXPECT_FALSE(loaded->hasProperty("missing"));
  TrainingSessionOptions options;
  options.backend = SessionBackend::Cpu;
  options.threads = 1;
  auto resumed = take(TrainingSession::open(
      TrainingArtifacts::fromDirectory(artifactsDir()), *loaded, options));
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->getStepCount(), 2);
  resumed->lazyResetGrad();
  EXPECT_NEAR(lossOf(resumed->trainStep(batch)), expected,
              1e-6 * std::abs(expected));
  ASSERT_OK(resumed->optimizerStep());
  resumed->lazyResetGrad();
  EXPECT_NEAR(lossOf(resumed->trainStep(batch)), expectedNext,
              1e-6 * std::abs(expectedNext));

  // The session itself goes back to the checkpoint.
  ASSERT_OK(session->loadCheckpoint(path));
  EXPECT_EQ(session->getStepCount(), 2);
  session->lazyResetGrad();
  EXPECT_NEAR(lossOf(session->trainStep(batch)), expected,
              1e-6 * std::abs(expected));
  ASSERT_OK(session->optimizerStep());
  EXPECT_EQ(session->getStepCount(), 3);
  session->lazyResetGrad();
  EXPECT_NEAR(lossOf(session->trainStep(batch)), expectedNext,
              1e-6 * std::abs(expectedNext));

  // Without the optimizer state the step count starts again.
  std::string plainPath = scratch.path("plain_checkpoint");
  ASSERT_OK(session->saveCheckpoint(plainPath, false));
  auto plain = CheckpointState::load(plainPath);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_FALSE(plain->hasOptimizerState());
}

TEST(TrainingSession, ContiguousParametersRoundTrip) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  HostTensor all = take(session->getContiguousParameters(false));
  EXPECT_EQ(all.getNumElements(), session->getParametersSize(false));
  HostTensor trainable = take(session->getContiguousParameters(true));
  ASSERT_EQ(trainable.getNumElements(), session->getParametersSize(true));
  // The first trainable parameter leads the buffer.
  std::string first = session->parameterNames(true).front();
  HostTensor firstValue = take(session->getParameter(first));
  ASSERT_GT(firstValue.getNumElements(), 0);
  EXPECT_EQ(trainable.getValues<float>()[0], firstValue.getValues<float>()[0]);
  // Scale the buffer, copy it back, read it again.
  HostTensor scaled = trainable.clone();
  for (float &element : llvm::MutableArrayRef<float>(
           static_cast<float *>(scaled.data()), scaled.getNumElements()))
    element *= 0.5f;
  ASSERT_OK(session->copyBufferToParameters(scaled, true));
  HostTensor back = take(session->getContiguousParameters(true));
  EXPECT_EQ(back.getBytes(), scaled.getBytes());
  EXPECT_EQ(take(session->getParameter(first)).getValues<float>()[0],
            0.5f * firstValue.getValues<float>()[0]);
  // A buffer of the wrong size is refused.
  expectError(session->copyBufferToParameters(all, true));
}

TEST(TrainingSession, EvalStepAndInferenceExport) {
  auto session = openArtifacts();
  ASSERT_TRUE(session);
  // onnxruntime-training 1.19.2's eval of the checkpoint on test_data_set_0
  // (no update yet): the same value as its first training loss.
  double evalLoss = lossOf(session->evalStep(batchFor(*session, false)));
  // (onnxruntime.InferenceSession runs the exported model of the test below
  // to 6.00549, the loss after one update, as this session's eval does.)
  EXPECT_NEAR(evalLoss, 6.264329433441162, 1e-5 * 6.264329433441162);
  // After an update the eval loss follows the new parameters.
  std::vector<HostTensor> batch = batchFor(*session);
  session->lazyResetGrad();
  lossOf(session->trainStepAndUpdate(batch));
  session->lazyResetGrad();
  double trained = lossOf(session->trainStep(batch));
  double evalAfter = lossOf(session->evalStep(batchFor(*session, false)));
  EXPECT_NEAR(evalAfter, trained, 1e-5 * trained);
  EXPECT_LT(evalAfter, evalLoss);

  // The inference model: parameters as initializers, the loss as output.
  ScratchDir scratch;
  std::string path = scratch.path("inference.onnx");
  ASSERT_OK(session->exportModelForInferencing(path, {"onnx::loss::2"}));
  auto module =
      loadModule(path, InputFormat::Onnx, {{"batch", 4}, {"batch_x_seq", 256}});
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  std::vector<std::string> inputs;
  for (const auto &input : (*module)->getGraph().getInputs())
    inputs.push_back(input->getName().str());
  EXPECT_EQ(inputs, (std::vector<std::string>{"input_ids", "labels"}));
  expectError(session->exportModelForInferencing(path, {"no_such"}));
}

TEST(TrainingSession, MemoryLimitAppliedAtOpen) {
  auto plain = openArtifacts();
  ASSERT_TRUE(plain);
  std::vector<HostTensor> batch = batchFor(*plain);
  double loss = lossOf(plain->trainStep(batch));
  SessionMemory memory = take(plain->getMemory());
  uint64_t peak = memory.planned.plannedBytes();
  ASSERT_GT(peak, 0u);

  auto state = take(CheckpointState::load(artifactsDir() + "/checkpoint"));
  TrainingSessionOptions options;
  options.backend = SessionBackend::Cpu;
  options.threads = 1;
  options.memoryLimitBytes = peak * 9 / 10;
  auto limited = take(TrainingSession::open(
      TrainingArtifacts::fromDirectory(artifactsDir()), state, options));
  ASSERT_TRUE(limited);
  // Compiled at the first step (the batch binds the dimensions), within the
  // limit, and training the same numbers.
  EXPECT_NEAR(lossOf(limited->trainStep(batch)), loss, 1e-5 * loss);
  SessionMemory limitedMemory = take(limited->getMemory());
  EXPECT_LE(limitedMemory.planned.plannedBytes(), *options.memoryLimitBytes);
  EXPECT_NE(limitedMemory.pipeline, memory.pipeline);

  // A limit nothing reaches is an error at the step that compiles.
  options.memoryLimitBytes = 1024;
  auto tooSmallState =
      take(CheckpointState::load(artifactsDir() + "/checkpoint"));
  auto tooSmall = take(
      TrainingSession::open(TrainingArtifacts::fromDirectory(artifactsDir()),
                            tooSmallState, options));
  ASSERT_TRUE(tooSmall);
  auto failed = tooSmall->trainStep(batch);
  EXPECT_FALSE(bool(failed));
  if (!failed)
    llvm::consumeError(failed.takeError());
}

TEST(HostTensor, OwnsOrBorrows) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  HostTensor borrowed =
      take(HostTensor::borrow(DType::F32, {2, 3}, values.data(),
                              values.size() * sizeof(float), nullptr));
  EXPECT_EQ(borrowed.data(), values.data());
  EXPECT_EQ(borrowed.describe(), "f32[2, 3]");
  HostTensor copy = borrowed.clone();
  EXPECT_NE(copy.data(), values.data());
  EXPECT_EQ(copy.getValues<float>()[5], 6.0f);
  EXPECT_TRUE(bool(copy.getOwner()));
  auto wrongSize = HostTensor::borrow(DType::F32, {2, 2}, values.data(),
                                      values.size() * sizeof(float), nullptr);
  EXPECT_FALSE(bool(wrongSize));
  llvm::consumeError(wrongSize.takeError());
  auto negative = HostTensor::allocate(DType::F32, {-1});
  EXPECT_FALSE(bool(negative));
  llvm::consumeError(negative.takeError());
}

} // namespace
