//===- WeightFileTest.cpp - Optimizer state and names in weight files -----===//
//
// What --weights and --save-weights do with state beyond the parameters:
// an ONNX Runtime checkpoint that its training API saved after AdamW steps
// (testdata/ort_resume, made by testdata/generate_ort_resume.py) resumes
// with ONNX Runtime's own losses, gmopt's ONNX Runtime checkpoint keeps
// that state, the FlatBuffers writer round-trips every field, state the
// module has no place for is a note or an error; and a weights file of any
// kind that names two tensors alike is refused.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Checkpoint.h"
#include "tools/driver/OptimizerStateMap.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "ir/serialization/OnnxTensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include "tests/unit/TestPaths.h"
#include "tests/unit/TestSupport.h"
#include "gtest/gtest.h"

#include "onnx/onnx_pb.h"

#include <cmath>

using namespace gmopt;
using test::errorOf;
using test::TempDir;

namespace {

std::string modelDir() { return testdataDir() + "/regression_frozen"; }
std::string resumeDir() {
  return testdataDir() + "/ort_resume/regression_frozen";
}

/// regression_frozen with the optimizer of the resume fixture (AdamW from
/// its optimizer_model.onnx) or \p optimizer, its batch and the reference
/// of ONNX Runtime's resumed run.
struct Resume {
  RunnableModel model;
  TestDataSet data;
  LossReference reference;
};

std::optional<Resume> loadResume(std::optional<OptimizerSpec> optimizer = {},
                                 bool withOptimizer = true) {
  auto reference = readLossReference(resumeDir() + "/resume_losses.json");
  EXPECT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto data = readTestDataSet(modelDir() + "/test_data_set_0");
  EXPECT_TRUE(bool(data)) << llvm::toString(data.takeError());
  if (!reference || !data)
    return std::nullopt;
  OptimizerSpec spec = optimizer ? *optimizer : reference->optimizer;
  auto model =
      loadRunnableModel(modelDir() + "/training_model.onnx", {{"batch", 8}},
                        nullptr, false, "", withOptimizer ? &spec : nullptr);
  EXPECT_TRUE(bool(model)) << llvm::toString(model.takeError());
  if (!model)
    return std::nullopt;
  return Resume{std::move(*model), std::move(*data), std::move(*reference)};
}

/// A training run from a weights file: its result and the notes the
/// adoption of the file's optimizer state gave.
struct Run {
  TrainingResult result;
  std::vector<std::string> notes;
};

llvm::Expected<Run> train(const Resume &resume, WeightSet weights,
                          unsigned steps, OptimizerStateOptions options = {},
                          bool update = true) {
  const Module &module = *resume.model.module;
  options.learningRate = static_cast<float>(resume.reference.learningRate);
  auto adoption = adoptOrtOptimizerState(weights, module, options);
  if (!adoption)
    return adoption.takeError();
  InputSources sources;
  sources.testData = &resume.data;
  sources.weights = &weights;
  sources.allowMissingWeights = options.allowMissing;
  auto inputs = bindInputs(module, sources);
  if (!inputs)
    return inputs.takeError();
  TrainingOptions training;
  training.executor.threads = 1;
  training.steps = steps;
  training.update = update;
  training.learningRate = options.learningRate;
  auto result = trainModule(module, *inputs, training);
  if (!result)
    return result.takeError();
  return Run{std::move(*result), std::move(adoption->notes)};
}

llvm::Expected<WeightSet> fixture() {
  return readWeightFile(resumeDir() + "/checkpoint");
}

/// max |got - want| / max |want|.
double relativeError(llvm::ArrayRef<double> got, llvm::ArrayRef<double> want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i != want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

const NamedTensor *finalTensor(const TrainingResult &result,
                               llvm::StringRef name) {
  for (const NamedTensor &tensor : result.finalState)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

/// Writes \p checkpoint to \p dir/\p name and reads it back as --weights.
llvm::Expected<WeightSet> throughFile(const OrtCheckpoint &checkpoint,
                                      const TempDir &dir,
                                      llvm::StringRef name) {
  dir.write(name, writeOrtCheckpoint(checkpoint));
  return readWeightFile(dir.file(name));
}

/// The fixture with \p edit applied, written to \p dir and read back.
llvm::Expected<WeightSet>
editedFixture(const TempDir &dir,
              llvm::function_ref<void(OrtCheckpoint &)> edit) {
  auto bytes = llvm::MemoryBuffer::getFile(resumeDir() + "/checkpoint");
  if (!bytes)
    return llvm::errorCodeToError(bytes.getError());
  auto checkpoint = parseOrtCheckpoint((*bytes)->getBuffer(), "fixture");
  if (!checkpoint)
    return checkpoint.takeError();
  edit(*checkpoint);
  return throughFile(*checkpoint, dir, "edited.ckpt");
}

NamedTensor tensorNamed(llvm::StringRef name, TensorData data) {
  NamedTensor tensor;
  tensor.name = name.str();
  tensor.data = std::move(data);
  return tensor;
}

//===----------------------------------------------------------------------===//
// Reading and writing ONNX Runtime checkpoints
//===----------------------------------------------------------------------===//

TEST(OrtCheckpointTest, TheResumeFixtureHoldsOnnxRuntimesAdamWGroup) {
  auto weights = fixture();
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  EXPECT_EQ(weights->kind, WeightFileKind::OrtCheckpoint);
  EXPECT_EQ(weights->tensors.size(), 6u); // fc1 frozen, fc2 and fc3 trained
  ASSERT_EQ(weights->optimizerGroups.size(), 1u);
  const OptimizerGroup &group = weights->optimizerGroups.front();
  EXPECT_EQ(group.name, "group0");
  EXPECT_EQ(group.step, 3);
  EXPECT_FLOAT_EQ(group.initialLearningRate, 0.001f);
  ASSERT_EQ(group.params.size(), 4u);
  for (const char *param :
       {"fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}) {
    const ParameterOptimizerState *state = group.lookup(param);
    ASSERT_TRUE(state) << param;
    ASSERT_EQ(state->momentums.size(), 2u) << param;
    for (const char *moment : {"momentum0", "momentum1"}) {
      const NamedTensor *tensor = state->lookup(moment);
      ASSERT_TRUE(tensor) << param << " " << moment;
      EXPECT_EQ(tensor->data.getType(), weights->lookup(param)->data.getType());
    }
  }
  EXPECT_FALSE(group.lookup("fc1.weight")); // frozen: no state
}

TEST(OrtCheckpointTest, WriterRoundTripsEveryField) {
  OrtCheckpoint checkpoint;
  checkpoint.trainable.push_back(
      tensorNamed("w", TensorData::fromValues<float>(DType::F32, {2, 3},
                                                     {1, -2, 3.5f, 4, 5, 6})));
  checkpoint.trainable.push_back(tensorNamed(
      "scalar", TensorData::fromValues<float>(DType::F32, {}, {7})));
  checkpoint.frozen.push_back(tensorNamed(
      "ids", TensorData::fromValues<int64_t>(DType::I64, {3}, {1, -2, 3})));
  checkpoint.frozen.push_back(tensorNamed(
      "empty", TensorData::fromValues<float>(DType::F32, {0, 4}, {})));
  OptimizerGroup group;
  group.name = "group0";
  group.step = (int64_t(1) << 40) + 3;
  group.initialLearningRate = 0.125f;
  ParameterOptimizerState state;
  state.param = "w";
  state.momentums.push_back(tensorNamed(
      "momentum0", TensorData::fromValues<float>(DType::F32, {2, 3},
                                                 {0.5f, 0, 0, 0, 0, -1})));
  state.momentums.push_back(tensorNamed(
      "momentum1",
      TensorData::fromValues<float>(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6})));
  group.params.push_back(state);
  checkpoint.optimizerGroups.push_back(group);
  checkpoint.properties.ints = {{"epoch", -7}, {"seen", int64_t(1) << 50}};
  checkpoint.properties.floats = {{"gmopt.loss_scale", 65536.0f}};
  checkpoint.properties.strings = {{"note", "resumed"}, {"empty", ""}};

  auto parsed = parseOrtCheckpoint(writeOrtCheckpoint(checkpoint), "ckpt");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  auto sameTensors = [](llvm::ArrayRef<NamedTensor> got,
                        llvm::ArrayRef<NamedTensor> want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i != want.size(); ++i) {
      EXPECT_EQ(got[i].name, want[i].name);
      EXPECT_TRUE(got[i].data == want[i].data) << want[i].name;
    }
  };
  sameTensors(parsed->trainable, checkpoint.trainable);
  sameTensors(parsed->frozen, checkpoint.frozen);
  ASSERT_EQ(parsed->optimizerGroups.size(), 1u);
  const OptimizerGroup &read = parsed->optimizerGroups.front();
  EXPECT_EQ(read.name, "group0");
  EXPECT_EQ(read.step, group.step);
  EXPECT_EQ(read.initialLearningRate, 0.125f);
  ASSERT_EQ(read.params.size(), 1u);
  EXPECT_EQ(read.params[0].param, "w");
  sameTensors(read.params[0].momentums, state.momentums);
  EXPECT_EQ(parsed->properties.ints, checkpoint.properties.ints);
  EXPECT_EQ(parsed->properties.floats, checkpoint.properties.floats);
  EXPECT_EQ(parsed->properties.strings, checkpoint.properties.strings);

  // ONNX Runtime's own file: read, written, read again, nothing changes.
  auto bytes = llvm::MemoryBuffer::getFile(resumeDir() + "/checkpoint");
  ASSERT_TRUE(bool(bytes));
  auto original = parseOrtCheckpoint((*bytes)->getBuffer(), "ckpt");
  ASSERT_TRUE(bool(original)) << llvm::toString(original.takeError());
  auto again = parseOrtCheckpoint(writeOrtCheckpoint(*original), "again");
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  sameTensors(again->trainable, original->trainable);
  sameTensors(again->frozen, original->frozen);
  ASSERT_EQ(again->optimizerGroups.size(), 1u);
  EXPECT_EQ(again->optimizerGroups[0].step, 3);
  for (size_t i = 0; i != original->optimizerGroups[0].params.size(); ++i)
    sameTensors(again->optimizerGroups[0].params[i].momentums,
                original->optimizerGroups[0].params[i].momentums);
}

TEST(OrtCheckpointTest, CorruptFilesAreErrorsNotCrashes) {
  auto weights = fixture();
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  auto bytes = llvm::MemoryBuffer::getFile(resumeDir() + "/checkpoint");
  ASSERT_TRUE(bool(bytes));
  auto original = parseOrtCheckpoint((*bytes)->getBuffer(), "ckpt");
  ASSERT_TRUE(bool(original));
  std::string written = writeOrtCheckpoint(*original);
  for (size_t size = 0; size < written.size(); size += 97) {
    auto parsed =
        parseOrtCheckpoint(llvm::StringRef(written).take_front(size), "ckpt");
    EXPECT_FALSE(bool(parsed)) << "truncated to " << size;
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
  // Flipped bytes anywhere in ONNX Runtime's file (the optimizer groups
  // included) fail cleanly or parse; they never read out of bounds (run
  // under ASan in CI).
  std::string file = (*bytes)->getBuffer().str();
  for (size_t at = 0; at < file.size(); at += 7) {
    std::string corrupt = file;
    corrupt[at] ^= 0x5a;
    auto parsed = parseOrtCheckpoint(corrupt, "ckpt");
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
}

//===----------------------------------------------------------------------===//
// Resuming
//===----------------------------------------------------------------------===//

/// The regression of issue 34 item 3: the moments and the step count of
/// ONNX Runtime's checkpoint go into the in-graph AdamW, so the resumed
/// losses and parameters are ONNX Runtime's own (without them step 2 was
/// 0.436055, not 0.4363527).
TEST(OrtResumeTest, LossesEqualOnnxRuntimesOwnResume) {
  std::optional<Resume> resume = loadResume();
  ASSERT_TRUE(resume);
  auto weights = fixture();
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  const LossReference &reference = resume->reference;
  auto run = train(*resume, *weights, reference.losses.size());
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  EXPECT_LE(relativeError(run->result.losses, reference.losses), 1e-6);
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("resuming ONNX Runtime's optimizer state: "
                               "momentum0, momentum1 of 4 parameters, step "
                               "3, in group 'group0'; the next update is "
                               "step 4"),
            std::string::npos)
      << run->notes[0];
  ASSERT_EQ(reference.finalParameters.size(), 4u);
  for (const LossReference::FinalParameter &param : reference.finalParameters) {
    const NamedTensor *got = finalTensor(run->result, param.name);
    ASSERT_TRUE(got) << param.name;
    std::vector<double> gotValues, wantValues;
    for (uint64_t i = 0; i != param.values.getNumElements(); ++i) {
      gotValues.push_back(got->data.getFloatElement(i));
      wantValues.push_back(param.values.getFloatElement(i));
    }
    EXPECT_LE(relativeError(gotValues, wantValues), 1e-6) << param.name;
  }
  const NamedTensor *step = finalTensor(run->result, "step");
  ASSERT_TRUE(step);
  EXPECT_EQ(step->data.getIntElement(0), 8); // 3 + 5 updates
}

/// Nothing of the loaded state is lost on the way out: a run that updates
/// nothing saves exactly what it loaded, under ONNX Runtime's names.
TEST(OrtResumeTest, SavingKeepsTheLoadedStateBitwise) {
  std::optional<Resume> resume = loadResume();
  ASSERT_TRUE(resume);
  auto weights = fixture();
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  WeightSet loaded = *weights;
  auto run = train(*resume, *weights, 1, {}, /*update=*/false);
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  auto checkpoint = makeOrtCheckpoint(
      *resume->model.module, run->result.finalState,
      &loaded.optimizerGroups.front(), &loaded.properties, 0.5f);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  TempDir dir;
  auto saved = throughFile(*checkpoint, dir, "saved.ckpt");
  ASSERT_TRUE(bool(saved)) << llvm::toString(saved.takeError());
  ASSERT_EQ(saved->tensors.size(), loaded.tensors.size());
  for (const NamedTensor &tensor : loaded.tensors) {
    const NamedTensor *again = saved->lookup(tensor.name);
    ASSERT_TRUE(again) << tensor.name;
    EXPECT_TRUE(again->data == tensor.data) << tensor.name;
  }
  // Trainable and frozen as ONNX Runtime had them.
  EXPECT_EQ(checkpoint->trainable.size(), 4u);
  EXPECT_EQ(checkpoint->frozen.size(), 2u);
  ASSERT_EQ(saved->optimizerGroups.size(), 1u);
  const OptimizerGroup &want = loaded.optimizerGroups.front();
  const OptimizerGroup &got = saved->optimizerGroups.front();
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.initialLearningRate, want.initialLearningRate);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const ParameterOptimizerState &state : want.params) {
    const ParameterOptimizerState *again = got.lookup(state.param);
    ASSERT_TRUE(again) << state.param;
    for (const NamedTensor &moment : state.momentums) {
      const NamedTensor *copy = again->lookup(moment.name);
      ASSERT_TRUE(copy) << state.param << " " << moment.name;
      EXPECT_TRUE(copy->data == moment.data)
          << state.param << " " << moment.name;
    }
  }
}

/// Resumed by gmopt, saved as an ONNX Runtime checkpoint, resumed again:
/// the same losses as one resumed run, and ONNX Runtime's.
TEST(OrtResumeTest, GmoptsCheckpointResumesWhereItStopped) {
  std::optional<Resume> resume = loadResume();
  ASSERT_TRUE(resume);
  auto weights = fixture();
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  const std::vector<double> &want = resume->reference.losses;
  auto whole = train(*resume, *weights, 5);
  ASSERT_TRUE(bool(whole)) << llvm::toString(whole.takeError());
  auto first = train(*resume, *weights, 2);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  auto checkpoint = makeOrtCheckpoint(
      *resume->model.module, first->result.finalState,
      &weights->optimizerGroups.front(), &weights->properties, 0.001f);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  TempDir dir;
  auto saved = throughFile(*checkpoint, dir, "after5.ckpt");
  ASSERT_TRUE(bool(saved)) << llvm::toString(saved.takeError());
  ASSERT_EQ(saved->optimizerGroups.size(), 1u);
  EXPECT_EQ(saved->optimizerGroups[0].step, 5);
  auto rest = train(*resume, *saved, 3);
  ASSERT_TRUE(bool(rest)) << llvm::toString(rest.takeError());
  for (size_t i = 0; i != 3; ++i)
    EXPECT_EQ(rest->result.losses[i], whole->result.losses[2 + i]) << i;
  EXPECT_LE(relativeError(rest->result.losses,
                          llvm::ArrayRef<double>(want).drop_front(2)),
            1e-6);
}

//===----------------------------------------------------------------------===//
// State the module has no place for
//===----------------------------------------------------------------------===//

TEST(OrtResumeTest, MomentsForAnSgdModuleAreAnError) {
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::SGD;
  std::optional<Resume> resume = loadResume(sgd);
  ASSERT_TRUE(resume);
  auto weights = fixture();
  ASSERT_TRUE(bool(weights));
  std::string message = errorOf(train(*resume, *weights, 1));
  EXPECT_NE(message.find("checkpoint: holds optimizer state (momentum0, "
                         "momentum1 of 4 parameters, step 3, in group "
                         "'group0'), but the module's SGD optimizer keeps "
                         "none"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("--ignore-optimizer-state"), std::string::npos);
  OptimizerStateOptions ignore;
  ignore.ignore = true;
  auto run = train(*resume, *weights, 1, ignore);
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("--ignore-optimizer-state: its optimizer state "
                               "(momentum0, momentum1 of 4 parameters"),
            std::string::npos)
      << run->notes[0];
}

TEST(OrtResumeTest, ZeroMomentsForAnSgdModuleAreANote) {
  // ONNX Runtime's SGD keeps a momentum0 of zeros it never reads.
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::SGD;
  std::optional<Resume> resume = loadResume(sgd);
  ASSERT_TRUE(resume);
  TempDir dir;
  auto zeros = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    for (ParameterOptimizerState &state : checkpoint.optimizerGroups[0].params)
      for (NamedTensor &tensor : state.momentums)
        tensor.data =
            TensorData(tensor.data.getType(),
                       std::vector<uint8_t>(tensor.data.getSizeInBytes(), 0));
  });
  ASSERT_TRUE(bool(zeros)) << llvm::toString(zeros.takeError());
  auto run = train(*resume, *zeros, 1);
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("is not used: it is all zeros, and the "
                               "module's SGD optimizer keeps none"),
            std::string::npos)
      << run->notes[0];
}

TEST(OrtResumeTest, MomentsWithoutAnOptimizerAreANote) {
  std::optional<Resume> resume = loadResume({}, /*withOptimizer=*/false);
  ASSERT_TRUE(resume);
  auto weights = fixture();
  ASSERT_TRUE(bool(weights));
  auto run = train(*resume, *weights, 1);
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("its optimizer state (momentum0, momentum1 of "
                               "4 parameters, step 3, in group 'group0') is "
                               "not used: the module has no optimizer"),
            std::string::npos)
      << run->notes[0];
  // The parameters were still loaded.
  EXPECT_NEAR(run->result.losses[0], 0.4617463946342468, 1e-6);
}

TEST(OrtResumeTest, MissingAndForeignStateIsAnErrorNamingIt) {
  std::optional<Resume> resume = loadResume();
  ASSERT_TRUE(resume);
  TempDir dir;
  // A trainable parameter without state.
  auto missing = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    auto &params = checkpoint.optimizerGroups[0].params;
    params.erase(params.begin()); // fc2.bias (ONNX Runtime sorts by name)
  });
  ASSERT_TRUE(bool(missing)) << llvm::toString(missing.takeError());
  std::string message = errorOf(train(*resume, *missing, 1));
  EXPECT_NE(message.find("edited.ckpt: group 'group0' holds no optimizer "
                         "state for trainable parameter 'fc2.bias' (pass "
                         "--allow-missing-weights to start its moments at "
                         "zero)"),
            std::string::npos)
      << message;
  OptimizerStateOptions allow;
  allow.allowMissing = true;
  auto allowed = train(*resume, *missing, 1, allow);
  ASSERT_TRUE(bool(allowed)) << llvm::toString(allowed.takeError());
  EXPECT_NE(allowed->notes[0].find("zero moments for 'fc2.bias'"),
            std::string::npos)
      << allowed->notes[0];

  // A state tensor the optimizer does not keep.
  auto foreign = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    checkpoint.optimizerGroups[0].params[1].momentums[1].name = "velocity";
  });
  ASSERT_TRUE(bool(foreign)) << llvm::toString(foreign.takeError());
  message = errorOf(train(*resume, *foreign, 1));
  EXPECT_NE(message.find("edited.ckpt: optimizer state 'velocity' of "
                         "'fc2.weight' in group 'group0': the module's AdamW "
                         "optimizer keeps momentum0, momentum1 per "
                         "parameter, not 'velocity'"),
            std::string::npos)
      << message;

  // Two groups: the in-graph optimizer is one.
  auto twoGroups = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    checkpoint.optimizerGroups.push_back(checkpoint.optimizerGroups[0]);
    checkpoint.optimizerGroups[1].name = "group1";
  });
  ASSERT_TRUE(bool(twoGroups)) << llvm::toString(twoGroups.takeError());
  message = errorOf(train(*resume, *twoGroups, 1));
  EXPECT_NE(message.find("edited.ckpt: holds 2 optimizer groups ('group0', "
                         "'group1')"),
            std::string::npos)
      << message;

  // State of a parameter the module does not train: a note.
  auto extra = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    ParameterOptimizerState state = checkpoint.optimizerGroups[0].params[0];
    state.param = "fc1.bias";
    checkpoint.optimizerGroups[0].params.push_back(state);
  });
  ASSERT_TRUE(bool(extra)) << llvm::toString(extra.takeError());
  auto run = train(*resume, *extra, 1);
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  ASSERT_EQ(run->notes.size(), 2u);
  EXPECT_NE(run->notes[1].find("the optimizer state of 1 parameter the module "
                               "does not train is not used: 'fc1.bias'"),
            std::string::npos)
      << run->notes[1];
}

//===----------------------------------------------------------------------===//
// Two tensors of one name (issue 34 item 4)
//===----------------------------------------------------------------------===//

TEST(WeightFileNamesTest, TensorSequenceWithTwoOfANameIsRefused) {
  std::vector<NamedTensor> tensors = {
      tensorNamed("fc.weight",
                  TensorData::fromValues<float>(DType::F32, {2}, {1, 2})),
      tensorNamed("fc.bias",
                  TensorData::fromValues<float>(DType::F32, {1}, {3})),
      tensorNamed("fc.weight",
                  TensorData::fromValues<float>(DType::F32, {2}, {4, 5}))};
  TempDir dir;
  dir.write("w.pbseq", writeTensorSequence(tensors));
  EXPECT_EQ(errorOf(readWeightFile(dir.file("w.pbseq"))),
            dir.file("w.pbseq") +
                ": entry 0 and entry 2 are both named 'fc.weight' (a weights "
                "file must name each tensor once)");
}

TEST(WeightFileNamesTest, OnnxModelWithTwoInitializersOfANameIsRefused) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("g");
  for (float value : {1.0f, 2.0f}) {
    onnx::TensorProto *init = graph->add_initializer();
    exportTensor(TensorData::fromValues<float>(DType::F32, {1}, {value}),
                 *init);
    init->set_name("fc.bias");
  }
  TempDir dir;
  dir.write("w.onnx", model.SerializeAsString());
  EXPECT_EQ(errorOf(readWeightFile(dir.file("w.onnx"))),
            dir.file("w.onnx") +
                ": initializer 0 and initializer 1 are both named 'fc.bias' "
                "(a weights file must name each tensor once)");
}

TEST(WeightFileNamesTest, OrtCheckpointWithTwoOfANameIsRefused) {
  TempDir dir;
  auto trainableAndFrozen = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    checkpoint.frozen.push_back(checkpoint.trainable[1]);
  });
  EXPECT_EQ(errorOf(std::move(trainableAndFrozen)),
            dir.file("edited.ckpt") +
                ": trainable parameter 1 and frozen parameter 2 are both "
                "named 'fc2.weight' (a weights file must name each tensor "
                "once)");
  auto twoStates = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    auto &params = checkpoint.optimizerGroups[0].params;
    params.push_back(params[0]);
  });
  EXPECT_EQ(errorOf(std::move(twoStates)),
            dir.file("edited.ckpt") +
                ": parameter state 0 of group 'group0' and parameter state 4 "
                "of group 'group0' are both named 'fc2.bias' (a weights file "
                "must name each tensor once)");
  auto twoMoments = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    auto &momentums = checkpoint.optimizerGroups[0].params[2].momentums;
    momentums[1].name = momentums[0].name;
  });
  EXPECT_EQ(errorOf(std::move(twoMoments)),
            dir.file("edited.ckpt") +
                ": state tensor 0 of 'fc3.bias' in group 'group0' and state "
                "tensor 1 of 'fc3.bias' in group 'group0' are both named "
                "'momentum0' (a weights file must name each tensor once)");
  auto twoGroups = editedFixture(dir, [](OrtCheckpoint &checkpoint) {
    checkpoint.optimizerGroups.push_back(checkpoint.optimizerGroups[0]);
  });
  EXPECT_EQ(errorOf(std::move(twoGroups)),
            dir.file("edited.ckpt") +
                ": optimizer group 0 and optimizer group 1 are both named "
                "'group0' (a weights file must name each tensor once)");
}

} // namespace
