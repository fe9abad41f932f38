//===- FoldTransposeTest.cpp - Tests of the fold-transpose pass -----------===//
//
// Numerical equivalence on the CPU backend (the shape of Glow's
// checkNumericalEquivalence): every testdata training graph trained for one
// step before and after fold-transpose gives the same loss and gradients up
// to the rounding of a transposed BLAS call. Also: what the pass removes
// from the GPT graphs, that a second run changes nothing, and the rewrites
// on small graphs with operands of every fold position.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/PassTestSupport.h"
#include "tests/unit/TestdataTraining.h"

#include "passes/PassManager.h"
#include "passes/transforms/FoldTranspose.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Verifier.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace gmopt;
using namespace gmopt::testing;

namespace {

std::string errorText(llvm::Error err) {
  return testdataErrorText(std::move(err));
}

//===----------------------------------------------------------------------===//
// Testdata graphs
//===----------------------------------------------------------------------===//

TEST(FoldTransposeTestdataTest, GradientsMatchTheUnfoldedGraph) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    std::unique_ptr<Module> original =
        importTestdataGraph(graph.name, graph.batch);
    std::unique_ptr<Module> folded =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(original && folded);
    ASSERT_EQ(runPipeline(*original, "canonicalize"), "<success>");
    ASSERT_EQ(runPipeline(*folded, "canonicalize,fold-transpose"), "<success>")
        << graph.name;
    EXPECT_EQ(errorText(verifyModule(*folded)), "<success>") << graph.name;
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    ASSERT_FALSE(inputs.empty()) << graph.name;
    std::vector<TensorData> expected =
        trainTestdataStep(*original, inputs, AllocationMode::Eager).results;
    for (unsigned threads : {1u, 2u}) {
      std::vector<TensorData> actual =
          trainTestdataStep(*folded, inputs, AllocationMode::Eager, threads)
              .results;
      ASSERT_EQ(actual.size(), expected.size()) << graph.name;
      ASSERT_GT(actual.size(), 1u) << graph.name;
      for (size_t i = 0; i != expected.size(); ++i)
        EXPECT_LE(relativeError(actual[i], expected[i]), 1e-5)
            << graph.name << ": result " << i << " with " << threads
            << " threads";
    }
  }
}

TEST(FoldTransposeTestdataTest, GptTransposesFoldIntoProducts) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    if (!llvm::StringRef(graph.name).starts_with("gpt"))
      continue;
    std::unique_ptr<Module> module =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    ASSERT_EQ(runPipeline(*module, "canonicalize"), "<success>");
    unsigned before = countOps(*module, kOnnxDomain, "Transpose");
    FoldTransposePass pass;
    PassContext context;
    auto changed = pass.run(*module, context);
    ASSERT_TRUE(bool(changed)) << errorText(changed.takeError());
    EXPECT_TRUE(*changed);
    EXPECT_EQ(errorText(verifyModule(*module)), "<success>") << graph.name;
    unsigned after = countOps(*module, kOnnxDomain, "Transpose");
    // The exports without constant folding (gpt_tiny, gpt_opset14,
    // gpt_opset20) spell their tied weights as Transpose(W) (forward) and
    // Transpose(Gemm(...)) (weight gradients): those go. The untied export
    // stores the weights transposed already. The attention head splits and
    // merges stay in all, as row copies.
    if (llvm::StringRef(graph.name) != "gpt_tiny_untied") {
      EXPECT_EQ(after, before - 18) << graph.name;
    } else {
      EXPECT_EQ(after, before) << graph.name;
    }
    EXPECT_GT(context.getStatistic("fold-transpose", "folded-into-products"),
              0u)
        << graph.name;
    for (const Node &node : module->getGraph().getNodes()) {
      if (!node.isa(kOnnxDomain, "Transpose"))
        continue;
      std::vector<int64_t> perm = node.getIntsAttr("perm", {});
      ASSERT_FALSE(perm.empty());
      EXPECT_EQ(perm.back(), int64_t(perm.size()) - 1)
          << graph.name << ": " << node.describe()
          << " still moves the last axis";
    }
    // A second run finds nothing left to fold.
    auto again = pass.run(*module, context);
    ASSERT_TRUE(bool(again)) << errorText(again.takeError());
    EXPECT_FALSE(*again) << graph.name;
  }
}

//===----------------------------------------------------------------------===//
// Small graphs
//===----------------------------------------------------------------------===//

TensorData randomTensor(llvm::ArrayRef<int64_t> shape, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  int64_t count = 1;
  for (int64_t extent : shape)
    count *= extent;
  std::vector<float> values(count);
  for (float &value : values)
    value = distribution(generator);
  return TensorData::fromValues<float>(DType::F32, shape, values);
}

/// The graph outputs of one forward run of \p module on \p inputs.
std::vector<TensorData> runForward(const Module &module,
                                   llvm::ArrayRef<TensorData> inputs) {
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << errorText(executable.takeError());
  if (!executable)
    return {};
  const Graph &graph = module.getGraph();
  for (unsigned i = 0; i < graph.getInputs().size(); ++i)
    EXPECT_EQ(
        errorText(
            (*executable)->setInput(graph.getInputs()[i].get(), inputs[i])),
        "<success>");
  EXPECT_EQ(errorText((*executable)->runStep(0)), "<success>");
  std::vector<TensorData> outputs;
  for (Value *output : graph.getOutputs()) {
    auto data = (*executable)->readValue(output);
    EXPECT_TRUE(bool(data)) << errorText(data.takeError());
    outputs.push_back(data ? std::move(*data) : TensorData());
  }
  return outputs;
}

/// Builds x [2,3,5,4] and four products over transposes of it: a MatMul
/// reading a weight transpose, a FusedMatMul reading it with transB, a
/// Gemm's transpose, and an attention-style [0,2,3,1] transpose.
std::unique_ptr<Module> makeProducts() {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 17;
  module->opsetImports["com.microsoft"] = 1;
  Graph &graph = module->getGraph();
  Value *x = graph.addInput(TensorType::get(DType::F32, {2, 3, 5, 4}), "x");
  Value *w = graph.addInput(TensorType::get(DType::F32, {6, 4}), "w");
  Value *a = graph.addInput(TensorType::get(DType::F32, {7, 5}), "a");
  Value *b = graph.addInput(TensorType::get(DType::F32, {7, 6}), "b");
  Value *k = graph.addInput(TensorType::get(DType::F32, {2, 5, 3, 4}), "k");
  Builder builder(graph);
  auto make = [&](OpName op, llvm::ArrayRef<Value *> operands,
                  llvm::ArrayRef<int64_t> shape,
                  llvm::ArrayRef<NamedAttribute> attrs, std::string name) {
    Value *result = builder
                        .create(std::move(op), operands,
                                {TensorType::get(DType::F32, shape)}, attrs)
                        ->getResult(0);
    result->setName(name);
    return result;
  };
  auto perm = [](std::vector<int64_t> p) {
    return NamedAttribute{"perm", Attribute::getInts(std::move(p))};
  };
  Value *wt = make({"", "Transpose"}, {w}, {4, 6}, {perm({1, 0})}, "wt");
  Value *y1 = make({"", "MatMul"}, {x, wt}, {2, 3, 5, 6}, {}, "y1");
  Value *y2 = make({"com.microsoft", "FusedMatMul"}, {y1, wt}, {2, 3, 5, 4},
                   {{"transB", Attribute::getInt(1)}}, "y2");
  Value *g = make({"", "Gemm"}, {a, b}, {5, 6},
                  {{"transA", Attribute::getInt(1)}}, "g");
  Value *y3 = make({"", "Transpose"}, {g}, {6, 5}, {perm({1, 0})}, "y3");
  Value *kt =
      make({"", "Transpose"}, {k}, {2, 3, 4, 5}, {perm({0, 2, 3, 1})}, "kt");
  Value *y4 = make({"", "MatMul"}, {x, kt}, {2, 3, 5, 5}, {}, "y4");
  for (Value *output : {y2, y3, y4})
    graph.addOutput(output);
  return module;
}

TEST(FoldTransposeTest, SmallProductsMatchTheUnfoldedGraph) {
  std::unique_ptr<Module> original = makeProducts();
  std::unique_ptr<Module> folded = makeProducts();
  ASSERT_EQ(errorText(verifyModule(*original)), "<success>");
  FoldTransposePass pass;
  PassContext context;
  auto changed = pass.run(*folded, context);
  ASSERT_TRUE(bool(changed)) << errorText(changed.takeError());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(errorText(verifyModule(*folded)), "<success>");
  // wt and y3's transpose go; kt stays as a [0,2,1,3] row copy.
  EXPECT_EQ(countOps(*folded, kOnnxDomain, "Transpose"), 1u);
  EXPECT_EQ(countOps(*folded, kOnnxDomain, "MatMul"), 0u);
  EXPECT_EQ(context.getStatistic("fold-transpose", "folded-into-products"), 2u);
  EXPECT_EQ(context.getStatistic("fold-transpose", "folded-of-products"), 1u);
  std::vector<TensorData> inputs = {
      randomTensor({2, 3, 5, 4}, 1), randomTensor({6, 4}, 2),
      randomTensor({7, 5}, 3), randomTensor({7, 6}, 4),
      randomTensor({2, 5, 3, 4}, 5)};
  std::vector<TensorData> expected = runForward(*original, inputs);
  std::vector<TensorData> actual = runForward(*folded, inputs);
  ASSERT_EQ(actual.size(), 3u);
  ASSERT_EQ(expected.size(), 3u);
  for (size_t i = 0; i != expected.size(); ++i)
    EXPECT_LE(relativeError(actual[i], expected[i]), 1e-6) << "output " << i;
}

} // namespace
