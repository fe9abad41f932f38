//===- FoldScaleTest.cpp - Tests of the fold-scale pass -------------------===//
//
// Numerical equivalence on the CPU backend: every testdata training graph
// trained for one step before and after fold-scale gives the same loss and
// gradients; folding only the products' own scales (of-products) changes
// not a bit, folding scaled operands (into-products) only the rounding of
// one product. Also: what the pass removes from the GPT graphs (each
// attention layer's forward and backward score scaling), and that a second
// run changes nothing.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/PassTestSupport.h"
#include "tests/unit/TestdataTraining.h"

#include "passes/PassManager.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Verifier.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::testing;

namespace {

std::string errorText(llvm::Error err) {
  return testdataErrorText(std::move(err));
}

bool sameBytes(const TensorData &a, const TensorData &b) {
  llvm::ArrayRef<uint8_t> x = a.getBytes(), y = b.getBytes();
  return a.getType() == b.getType() && x.size() == y.size() &&
         std::memcmp(x.data(), y.data(), x.size()) == 0;
}

TEST(FoldScaleTestdataTest, GradientsMatchTheUnfoldedGraph) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    ASSERT_FALSE(inputs.empty()) << graph.name;
    std::unique_ptr<Module> original =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(original);
    ASSERT_EQ(runPipeline(*original, "canonicalize,fold-transpose"),
              "<success>");
    std::vector<TensorData> expected =
        trainTestdataStep(*original, inputs, AllocationMode::Eager).results;
    for (bool into : {false, true}) {
      std::unique_ptr<Module> folded =
          importTestdataGraph(graph.name, graph.batch);
      ASSERT_TRUE(folded);
      std::string pipeline = "canonicalize,fold-transpose,fold-scale{"
                             "into-products=" +
                             std::string(into ? "true" : "false") + "}";
      ASSERT_EQ(runPipeline(*folded, pipeline), "<success>") << graph.name;
      EXPECT_EQ(errorText(verifyModule(*folded)), "<success>") << graph.name;
      std::vector<TensorData> actual =
          trainTestdataStep(*folded, inputs, AllocationMode::Eager).results;
      ASSERT_EQ(actual.size(), expected.size()) << graph.name;
      ASSERT_GT(actual.size(), 1u) << graph.name;
      for (size_t i = 0; i != expected.size(); ++i) {
        if (into)
          EXPECT_LE(relativeError(actual[i], expected[i]), 1e-5)
              << graph.name << ": result " << i;
        else
          EXPECT_TRUE(sameBytes(actual[i], expected[i]))
              << graph.name << ": result " << i << " differs by "
              << relativeError(actual[i], expected[i]);
      }
    }
  }
}

TEST(FoldScaleTestdataTest, GptScoreScalesFold) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    if (!llvm::StringRef(graph.name).starts_with("gpt"))
      continue;
    std::unique_ptr<Module> module =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    ASSERT_EQ(runPipeline(*module, "canonicalize,fold-transpose"), "<success>");
    unsigned before = countOps(*module, kOnnxDomain, "Mul");
    PassManager manager;
    ASSERT_EQ(errorText(manager.addPipeline("fold-scale")), "<success>");
    ASSERT_EQ(errorText(manager.run(*module)), "<success>");
    EXPECT_EQ(errorText(verifyModule(*module)), "<success>") << graph.name;
    // Two attention layers: the scores' scale (forward) and the score
    // gradient's (backward) in each.
    EXPECT_EQ(countOps(*module, kOnnxDomain, "Mul"), before - 4) << graph.name;
    EXPECT_EQ(
        manager.getContext().getStatistic("fold-scale", "folded-of-products"),
        2u)
        << graph.name;
    EXPECT_EQ(
        manager.getContext().getStatistic("fold-scale", "folded-into-products"),
        2u)
        << graph.name;
    PassManager again;
    ASSERT_EQ(errorText(again.addPipeline("fold-scale")), "<success>");
    ASSERT_EQ(errorText(again.run(*module)), "<success>");
    EXPECT_EQ(
        again.getContext().getStatistic("fold-scale", "folded-of-products"),
        0u);
    EXPECT_EQ(
        again.getContext().getStatistic("fold-scale", "folded-into-products"),
        0u);
  }
}

} // namespace
