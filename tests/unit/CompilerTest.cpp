//===- CompilerTest.cpp - gmopt_compiler's compile() ----------------------===//
//
// compile() as a library call on ONNX Runtime's gpt_tiny artifacts: the
// optimizer model merged in and the default pipeline planned; an empty
// pipeline runs no pass; a pipeline that does not parse is refused before
// any work; a memory limit chooses a configuration that fits it.
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"

#include "tests/unit/TestPaths.h"

#include "ir/Optimizer.h"

#include <gtest/gtest.h>

using namespace gmopt;

namespace {

CompileOptions gptTinyOptions() {
  CompileOptions options;
  options.inputPath = testdataDir() + "/gpt_tiny/training_model.onnx";
  options.dims = {{"batch", 4}, {"batch_x_seq", 256}};
  return options;
}

TEST(Compiler, DefaultPipelineWithOptimizerModel) {
  CompileOptions options = gptTinyOptions();
  auto spec = importOptimizerModelFile(testdataDir() +
                                       "/gpt_tiny/optimizer_model.onnx");
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  options.optimizer = *spec;
  auto result = compile(options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  ASSERT_TRUE(result->module && result->original);
  EXPECT_NE(findOptimizerNode(*result->module), nullptr);
  EXPECT_NE(findOptimizerNode(*result->original), nullptr);
  EXPECT_FALSE(result->module->plan.empty());
  EXPECT_NE(result->pipeline.find("plan-buffers"), std::string::npos);
  EXPECT_GT(result->module->plan.figures.plannedBytes(), 0u);
  EXPECT_EQ(result->accumulate, 1u);
}

TEST(Compiler, EmptyPipelineRunsNoPass) {
  CompileOptions options = gptTinyOptions();
  options.pipeline = "";
  options.keepOriginal = false;
  auto result = compile(options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  EXPECT_TRUE(result->module->plan.empty());
  EXPECT_EQ(result->original, nullptr);
}

TEST(Compiler, BadPipelineAndUnboundDimension) {
  CompileOptions options = gptTinyOptions();
  options.pipeline = "no-such-pass";
  llvm::Error err = checkPipeline(options);
  EXPECT_TRUE(bool(err));
  llvm::consumeError(std::move(err));
  CompileOptions unbound = gptTinyOptions();
  unbound.dims.clear();
  auto result = compile(unbound);
  ASSERT_FALSE(bool(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("batch"),
            std::string::npos);
}

TEST(Compiler, MemoryLimitChoosesAConfigurationThatFits) {
  auto plain = compile(gptTinyOptions());
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  uint64_t peak = plain->module->plan.figures.plannedBytes();
  CompileOptions options = gptTinyOptions();
  auto request = makeFitRequest(std::to_string(peak * 9 / 10), "", false,
                                "batch", "cpu", options.dims, plain->pipeline);
  ASSERT_TRUE(bool(request)) << llvm::toString(request.takeError());
  options.fit = std::move(*request);
  auto fitted = compile(options);
  ASSERT_TRUE(bool(fitted)) << llvm::toString(fitted.takeError());
  EXPECT_LE(fitted->module->plan.figures.plannedBytes(), peak * 9 / 10);
  EXPECT_TRUE(fitted->fitJson.has_value());
}

} // namespace
