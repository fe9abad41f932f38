//===- TestdataTraining.h - One training step of a testdata graph -*- C++ -*-===//
//
// Shared by the tests that train the bundled ONNX Runtime graphs on the CPU
// backend (plan-buffers, fold-transpose, thread-count determinism): import
// testdata/<model>/training_model.onnx with its reference batch bound, read
// its test_data_set_0 inputs (through the driver's readTestDataSet), and run
// one step, returning the loss and every trainable parameter's gradient
// together with what the executor measured. Failures are reported as
// GoogleTest expectations naming the model.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_TESTDATATRAINING_H
#define GMOPT_TESTS_UNIT_TESTDATATRAINING_H

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"
#include "tools/driver/TestDataSet.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gmopt {
namespace testing {

/// A bundled training graph and ONNX Runtime's reference batch for it.
struct TestdataGraph {
  const char *name;
  int64_t batch;
  /// The sequence length of the token graphs (`batch_x_seq` = batch * seq).
  int64_t seq = 64;
};

/// The graphs with their own reference data (gpt_tiny_dropout shares
/// gpt_tiny's).
inline constexpr TestdataGraph kTestdataGraphs[] = {
    {"mlp", 8},
    {"cnn", 8},
    {"resnet_tiny", 4},
    {"gpt_tiny", 4},
    {"gpt_tiny_untied", 4},
    {"gpt_opset14", 4, 16},
    {"gpt_opset20", 4, 16},
    {"regression_frozen", 8},
    {"bert_tiny", 4, 16},
    {"llama_tiny", 4, 16},
    {"llama_tiny_untied", 4, 16},
    {"cnn_bn", 4},
};

/// The dimension bindings of \p graph's reference batch, as the driver's
/// loadRunnableModel takes them (`batch`, and `batch_x_seq` for the token
/// graphs; a binding the graph does not use is ignored).
inline std::map<std::string, int64_t> testdataDims(const TestdataGraph &graph) {
  return {{"batch", graph.batch}, {"batch_x_seq", graph.batch * graph.seq}};
}

inline std::string testdataErrorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// The GPT sequence length of testdata graph \p name (kTestdataGraphs; 64
/// for a graph not listed there, such as gpt_tiny_dropout).
inline int64_t testdataSequenceLength(llvm::StringRef name) {
  for (const TestdataGraph &graph : kTestdataGraphs)
    if (name == graph.name)
      return graph.seq;
  return 64;
}

/// testdata/<\p name>/training_model.onnx with `batch` = \p batch and
/// `batch_x_seq` = batch * seq bound (null after a failed expectation).
inline std::unique_ptr<Module> importTestdataGraph(llvm::StringRef name,
                                                   int64_t batch) {
  OnnxImportOptions options;
  options.dimBindings = {{"batch", batch},
                         {"batch_x_seq", batch * testdataSequenceLength(name)}};
  auto module = importOnnxFile(gmopt::testdataDir() + "/" + name.str() +
                                   "/training_model.onnx",
                               options);
  EXPECT_TRUE(bool(module))
      << name.str() << ": " << testdataErrorText(module.takeError());
  return module ? std::move(*module) : nullptr;
}

/// The inputs of testdata/<\p name>/test_data_set_0, by graph input name.
inline llvm::StringMap<TensorData> readTestdataInputs(llvm::StringRef name) {
  llvm::StringMap<TensorData> inputs;
  auto set = readTestDataSet(gmopt::testdataDir() + "/" + name.str() +
                             "/test_data_set_0");
  EXPECT_TRUE(bool(set)) << testdataErrorText(set.takeError());
  if (set)
    for (const NamedTensor &input : set->inputs)
      inputs[input.name] = input.data;
  return inputs;
}

/// What one training step gave.
struct TrainedStep {
  /// The loss, then every trainable parameter's gradient in signature order.
  std::vector<TensorData> results;
  MemoryReport memory;
  uint64_t arenaBytes = 0;
  uint64_t unplannedScratchBytes = 0;
};

/// One training step of \p module in \p mode on \p threads threads (seed
/// 7), run as step \p stepIndex (which keys the random streams), fed
/// \p inputs; graph inputs not among them (zero accumulation buffers) are
/// fed zeros.
inline TrainedStep trainTestdataStep(const Module &module,
                                     const llvm::StringMap<TensorData> &inputs,
                                     AllocationMode mode, unsigned threads = 1,
                                     uint64_t stepIndex = 0) {
  TrainedStep step;
  ExecutorOptions options;
  options.mode = mode;
  options.seed = 7;
  options.threads = threads;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << testdataErrorText(executable.takeError());
  if (!executable)
    return step;
  for (const auto &input : module.getGraph().getInputs()) {
    auto it = inputs.find(input->getName());
    TensorData data = it != inputs.end()
                          ? it->second
                          : TensorData(input->getType(),
                                       std::vector<uint8_t>(
                                           input->getType().getSizeInBytes()));
    EXPECT_EQ(testdataErrorText((*executable)->setInput(input.get(), data)),
              "<success>")
        << input->getName().str();
  }
  EXPECT_EQ(testdataErrorText((*executable)->runStep(stepIndex)), "<success>");
  auto loss = (*executable)->readValue(module.getSignature().getLoss());
  EXPECT_TRUE(bool(loss)) << testdataErrorText(loss.takeError());
  step.results.push_back(loss ? std::move(*loss) : TensorData());
  for (const ParamInfo &param : module.getSignature().getParams()) {
    if (!param.trainable)
      continue;
    auto gradient = (*executable)->readGradient(param);
    EXPECT_TRUE(bool(gradient)) << testdataErrorText(gradient.takeError());
    step.results.push_back(gradient ? std::move(*gradient) : TensorData());
  }
  step.memory = (*executable)->getMemoryReport();
  step.arenaBytes = (*executable)->getArenaBytes();
  step.unplannedScratchBytes = (*executable)->getUnplannedScratchBytes();
  return step;
}

} // namespace testing
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_TESTDATATRAINING_H
