//===- TestdataPipelineTraining.h - AdamW steps of a compiled graph -*- C++ -*-===//
//
// Shared by the tests of the rewrites that must keep (recompute) or nearly
// keep (amp) a training step's numbers: compile a testdata graph through the
// driver with a pipeline and ONNX Runtime's AdamW settings, bind its
// test_data_set_0 inputs, and run AdamW steps on the CPU backend (planned,
// one thread, fixed seed). Failures are GoogleTest expectations naming the
// model and pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_TESTDATAPIPELINETRAINING_H
#define GMOPT_TESTS_UNIT_TESTDATAPIPELINETRAINING_H

#include "tools/driver/Runtime.h"

#include "ir/Optimizer.h"
#include "ir/Verifier.h"

#include "tests/unit/TestdataTraining.h"

#include <optional>

namespace gmopt {
namespace testing {

/// A compiled module and what training it produced.
struct PipelineTraining {
  std::unique_ptr<Module> module;
  /// The inputs bound before the first step (the initial state).
  std::vector<BoundInput> inputs;
  TrainingResult result;
};

/// \p steps AdamW steps (learning rate 0.01) of testdata graph \p model
/// compiled with \p pipeline (its passes see the inputs' values: the
/// parameters' initial values for tie-weights); gpt_tiny_dropout reads
/// gpt_tiny's inputs.
inline std::optional<PipelineTraining>
trainWithPipeline(const TestdataGraph &model, llvm::StringRef pipeline,
                  unsigned steps) {
  std::string dir = testdataDir() + "/" + model.name;
  std::string dataDir = llvm::StringRef(model.name) == "gpt_tiny_dropout"
                            ? testdataDir() + "/gpt_tiny/test_data_set_0"
                            : dir + "/test_data_set_0";
  auto data = readTestDataSet(dataDir);
  EXPECT_TRUE(bool(data)) << testdataErrorText(data.takeError());
  if (!data)
    return std::nullopt;
  OptimizerSpec spec;
  auto runnable =
      loadRunnableModel(dir + "/training_model.onnx", testdataDims(model),
                        &*data, /*wantOriginal=*/false, pipeline, &spec);
  EXPECT_TRUE(bool(runnable)) << model.name << " " << pipeline.str() << ": "
                              << testdataErrorText(runnable.takeError());
  if (!runnable)
    return std::nullopt;
  PipelineTraining trained;
  trained.module = std::move(runnable->module);
  EXPECT_EQ(testdataErrorText(verifyModule(*trained.module)), "<success>")
      << pipeline.str();
  InputSources sources;
  sources.testData = &*data;
  auto inputs = bindInputs(*trained.module, sources);
  EXPECT_TRUE(bool(inputs)) << testdataErrorText(inputs.takeError());
  if (!inputs)
    return std::nullopt;
  trained.inputs = *inputs;
  TrainingOptions options;
  options.executor.mode = AllocationMode::Planned;
  options.executor.threads = 1;
  options.executor.seed = 7;
  options.steps = steps;
  options.learningRate = 0.01f;
  auto result = trainModule(*trained.module, *inputs, options);
  EXPECT_TRUE(bool(result)) << model.name << " " << pipeline.str() << ": "
                            << testdataErrorText(result.takeError());
  if (!result)
    return std::nullopt;
  trained.result = std::move(*result);
  return trained;
}

} // namespace testing
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_TESTDATAPIPELINETRAINING_H
