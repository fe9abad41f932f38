//===- ThreadCountDeterminismTest.cpp - Bits independent of threads -------===//
//
// The CPU kernel library promises results bitwise independent of the
// thread count (fixed chunking in Parallel.h, fixed GEMM blocks in Blas.h,
// fixed-lane sums in Simd.h). Checked end to end: one training step of
// every testdata graph, compiled with the default pipeline, gives the same
// loss and gradient bits with 1, 2 and 3 threads.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/TestdataTraining.h"

#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"

#include "gtest/gtest.h"

using namespace gmopt;
using namespace gmopt::testing;

namespace {

TEST(ThreadCountDeterminismTest, TrainingStepBitsDoNotDependOnThreads) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    std::unique_ptr<Module> module =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    PassManager manager;
    ASSERT_EQ(testdataErrorText(manager.addPipeline(kDefaultPipeline)),
              "<success>");
    ASSERT_EQ(testdataErrorText(manager.run(*module)), "<success>")
        << graph.name;
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    ASSERT_FALSE(inputs.empty()) << graph.name;
    std::vector<TensorData> one =
        trainTestdataStep(*module, inputs, AllocationMode::Planned, 1).results;
    ASSERT_GT(one.size(), 1u) << graph.name;
    for (unsigned threads : {2u, 3u}) {
      std::vector<TensorData> many =
          trainTestdataStep(*module, inputs, AllocationMode::Planned, threads)
              .results;
      ASSERT_EQ(many.size(), one.size()) << graph.name;
      for (size_t i = 0; i != one.size(); ++i)
        EXPECT_TRUE(many[i] == one[i])
            << graph.name << ": result " << i << " differs with " << threads
            << " threads";
    }
  }
}

} // namespace
