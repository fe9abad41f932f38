//===- ThreadCountDeterminismTest.cpp - Bits independent of threads -------===//
//
// The CPU kernel library promises results bitwise independent of the
// thread count (fixed chunking in Parallel.h, fixed GEMM blocks in Blas.h,
// fixed-lane sums in Simd.h). Checked end to end: one training step of
// every testdata graph, compiled with the default pipeline, gives the same
// loss and gradient bits with 1, 2 and 3 threads.
//
//===----------------------------------------------------------------------===//

#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Onnx.h"
#include "ir/OnnxTensor.h"

#include "onnx/onnx_pb.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

struct TestGraph {
  const char *name;
  int64_t batch;
};

const TestGraph kTestGraphs[] = {
    {"mlp", 8},      {"cnn", 8},
    {"resnet_tiny", 4}, {"gpt_tiny", 4},
    {"gpt_tiny_untied", 4}, {"regression_frozen", 8},
};

std::unique_ptr<Module> importTestGraph(const TestGraph &graph) {
  OnnxImportOptions options;
  options.dimBindings = {{"batch", graph.batch},
                         {"batch_x_seq", graph.batch * 64}};
  auto module = importOnnxFile(std::string(GMOPT_TESTDATA_DIR) + "/" +
                                   graph.name + "/training_model.onnx",
                               options);
  EXPECT_TRUE(bool(module)) << errorText(module.takeError());
  return module ? std::move(*module) : nullptr;
}

llvm::StringMap<TensorData> readInputs(const TestGraph &graph) {
  llvm::StringMap<TensorData> inputs;
  std::string directory = std::string(GMOPT_TESTDATA_DIR) + "/" + graph.name +
                          "/test_data_set_0";
  for (unsigned index = 0; index != 256; ++index) {
    std::string path = directory + "/input_" + std::to_string(index) + ".pb";
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer)
      continue;
    onnx::TensorProto proto;
    EXPECT_TRUE(proto.ParseFromArray((*buffer)->getBufferStart(),
                                     (*buffer)->getBufferSize()))
        << path;
    auto data = importTensor(proto, nullptr);
    EXPECT_TRUE(bool(data)) << errorText(data.takeError());
    if (data)
      inputs[proto.name()] = std::move(*data);
  }
  return inputs;
}

/// One training step of \p module from its planned arena on \p threads
/// threads: the loss, then every trainable parameter's gradient in
/// signature order.
std::vector<TensorData> trainStep(const Module &module,
                                  const llvm::StringMap<TensorData> &inputs,
                                  unsigned threads) {
  ExecutorOptions options;
  options.mode = AllocationMode::Planned;
  options.seed = 7;
  options.threads = threads;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << errorText(executable.takeError());
  if (!executable)
    return {};
  for (const auto &input : module.getGraph().getInputs()) {
    auto it = inputs.find(input->getName());
    TensorData data = it != inputs.end()
                          ? it->second
                          : TensorData(input->getType(),
                                       std::vector<uint8_t>(
                                           input->getType().getSizeInBytes()));
    EXPECT_EQ(errorText((*executable)->setInput(input.get(), data)),
              "<success>")
        << input->getName().str();
  }
  EXPECT_EQ(errorText((*executable)->runStep(0)), "<success>");
  std::vector<TensorData> results;
  auto loss = (*executable)->readValue(module.signature.loss);
  EXPECT_TRUE(bool(loss)) << errorText(loss.takeError());
  results.push_back(loss ? std::move(*loss) : TensorData());
  for (const ParamInfo &param : module.signature.params) {
    if (!param.trainable)
      continue;
    auto gradient = (*executable)->readGradient(param);
    EXPECT_TRUE(bool(gradient)) << errorText(gradient.takeError());
    results.push_back(gradient ? std::move(*gradient) : TensorData());
  }
  return results;
}

TEST(ThreadCountDeterminismTest, TrainingStepBitsDoNotDependOnThreads) {
  for (const TestGraph &graph : kTestGraphs) {
    std::unique_ptr<Module> module = importTestGraph(graph);
    ASSERT_TRUE(module);
    PassManager manager;
    ASSERT_EQ(errorText(manager.addPipeline(kDefaultPipeline)), "<success>");
    ASSERT_EQ(errorText(manager.run(*module)), "<success>") << graph.name;
    llvm::StringMap<TensorData> inputs = readInputs(graph);
    ASSERT_FALSE(inputs.empty()) << graph.name;
    std::vector<TensorData> one = trainStep(*module, inputs, 1);
    ASSERT_GT(one.size(), 1u) << graph.name;
    for (unsigned threads : {2u, 3u}) {
      std::vector<TensorData> many = trainStep(*module, inputs, threads);
      ASSERT_EQ(many.size(), one.size()) << graph.name;
      for (size_t i = 0; i != one.size(); ++i)
        EXPECT_TRUE(many[i] == one[i])
            << graph.name << ": result " << i << " differs with " << threads
            << " threads";
    }
  }
}

} // namespace
