//===- FuseCrossEntropyTest.cpp - Tests of the fuse-cross-entropy pass ----===//
//
// Numerical equivalence on the CPU backend: the language-model graphs of
// testdata (GPT with its tied embedding as LM head, Llama, their untied
// variants and other opsets) give the same loss and gradients, to 1e-5 of
// each tensor's largest magnitude, before and after fuse-cross-entropy, at
// several step indices (and as gmopt's autodiff differentiates the forward
// models), after the default pipeline's
// canonicalize,fold-transpose,fold-scale prefix, and with fuse-attention,
// selective recompute, schedule and plan-buffers around it. Also: the
// loss fuses, forward and backward, no [N, V] value is left, a second run
// changes nothing, and the fused ops survive the text form and the .gm
// container.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/PassTestSupport.h"
#include "tests/unit/TestdataTraining.h"

#include "passes/PassManager.h"

#include "backend/Executor.h"
#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/Verifier.h"
#include "ir/ops/CrossEntropySpec.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/TextIR.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::testing;

namespace {

std::string errorText(llvm::Error err) {
  return testdataErrorText(std::move(err));
}

/// A language-model graph and its vocabulary size.
struct LossGraph {
  const char *name;
  int64_t batch;
  int64_t vocab;
};

constexpr LossGraph kGraphs[] = {
    {"gpt_tiny", 4, 512},        {"llama_tiny", 4, 64},
    {"gpt_tiny_untied", 4, 512}, {"llama_tiny_untied", 4, 64},
    {"gpt_opset14", 4, 512},     {"gpt_opset20", 4, 512},
};

TEST(FuseCrossEntropyTestdataTest, GradientsMatchTheUnfusedGraph) {
  for (const LossGraph &graph : kGraphs) {
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    for (auto [prefix, suffix] :
         {std::pair<const char *, const char *>{
              "canonicalize,fold-transpose,fold-scale", ""},
          {"canonicalize,fold-transpose,fold-scale,fuse-attention",
           ",recompute{mode=selective},schedule,plan-buffers"}}) {
      SCOPED_TRACE(std::string(graph.name) + ": " + prefix +
                   ",fuse-cross-entropy" + suffix);
      std::unique_ptr<Module> original =
          importTestdataGraph(graph.name, graph.batch);
      std::unique_ptr<Module> fused =
          importTestdataGraph(graph.name, graph.batch);
      ASSERT_TRUE(original && fused);
      ASSERT_EQ(runPipeline(*original, std::string(prefix) + suffix),
                "<success>");
      PassManager manager;
      ASSERT_EQ(
          runPipeline(*fused,
                      std::string(prefix) + ",fuse-cross-entropy" + suffix,
                      &manager),
          "<success>");
      EXPECT_EQ(errorText(verifyModule(*fused)), "<success>");
      EXPECT_EQ(
          manager.getContext().getStatistic("fuse-cross-entropy", "fused"), 1u);
      expectSameSteps(*original, *fused, inputs, {0, 1, 5}, *suffix != 0);
    }
  }
}

TEST(FuseCrossEntropyTestdataTest, ForwardGradientMatchesTheUnfusedGraph) {
  // mode=forward-gradient with the smallest chunks it makes (D / 2 + 1
  // tokens: a partial last chunk on every graph), the gradient computed in
  // the forward pass and scaled by dloss in the backward pass; alone and in
  // the default pipeline's company.
  for (const LossGraph &graph : kGraphs) {
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    std::string pass =
        "fuse-cross-entropy{mode=forward-gradient,chunk-bytes=1}";
    for (auto [prefix, suffix] :
         {std::pair<const char *, const char *>{
              "canonicalize,fold-transpose,fold-scale", ""},
          {"canonicalize,fold-transpose,fold-scale,fuse-attention",
           ",pack-dropout-masks,recompute{mode=selective},schedule,"
           "plan-buffers"}}) {
      SCOPED_TRACE(std::string(graph.name) + ": " + prefix + "," + pass +
                   suffix);
      std::unique_ptr<Module> original =
          importTestdataGraph(graph.name, graph.batch);
      std::unique_ptr<Module> rewritten =
          importTestdataGraph(graph.name, graph.batch);
      ASSERT_TRUE(original && rewritten);
      ASSERT_EQ(runPipeline(*original, std::string(prefix) + suffix),
                "<success>");
      PassManager manager;
      ASSERT_EQ(runPipeline(*rewritten,
                            std::string(prefix) + "," + pass + suffix,
                            &manager),
                "<success>");
      EXPECT_EQ(errorText(verifyModule(*rewritten)), "<success>");
      const PassContext &context = manager.getContext();
      EXPECT_EQ(context.getStatistic("fuse-cross-entropy", "forward-gradient"),
                1u);
      uint64_t chunks = context.getStatistic("fuse-cross-entropy", "chunks");
      EXPECT_GT(chunks, 1u);
      EXPECT_EQ(countOps(*rewritten, kGmoptDomain, kFusedLinearCrossEntropyOp),
                0u);
      // One loss per chunk, each on fewer than all the tokens, together on
      // all of them.
      int64_t tokens = graph.batch * testdataSequenceLength(graph.name);
      int64_t rows = 0;
      uint64_t losses = 0;
      for (const Node &node : rewritten->getGraph().getNodes())
        if (node.isa(kOnnxDomain, "SoftmaxCrossEntropyLoss")) {
          const TensorType &type = node.getOperand(0)->getType();
          ASSERT_TRUE(type.hasStaticShape()) << node.describe();
          EXPECT_LT(type.getStaticShape()[0], tokens) << node.describe();
          rows += type.getStaticShape()[0];
          ++losses;
        }
      EXPECT_EQ(losses, chunks);
      EXPECT_EQ(rows, tokens);
      expectSameSteps(*original, *rewritten, inputs, {0, 1}, *suffix != 0);
    }
  }
}

TEST(FuseCrossEntropyTestdataTest, GmoptAutodiffGradientsMatchTheUnfusedGraph) {
  // The heads differentiated by gmopt's autodiff from the forward models
  // (eval_model.onnx): W reaches the product through a Transpose ([D, V],
  // trans_w = 0) and dW leaves through one.
  for (const LossGraph &graph : kGraphs) {
    llvm::StringRef name = graph.name;
    if (name != "gpt_tiny" && name != "llama_tiny")
      continue;
    SCOPED_TRACE(graph.name);
    OnnxImportOptions options;
    options.dimBindings = {
        {"batch", graph.batch},
        {"batch_x_seq", graph.batch * testdataSequenceLength(name)}};
    std::string path =
        gmopt::testdataDir() + "/" + name.str() + "/eval_model.onnx";
    auto original = importOnnxFile(path, options);
    auto fused = importOnnxFile(path, options);
    ASSERT_TRUE(original && fused);
    ASSERT_EQ(runPipeline(**original, "autodiff,canonicalize"), "<success>");
    PassManager manager;
    ASSERT_EQ(runPipeline(**fused, "autodiff,canonicalize,fuse-cross-entropy",
                          &manager),
              "<success>");
    EXPECT_EQ(manager.getContext().getStatistic("fuse-cross-entropy", "fused"),
              1u);
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    std::vector<TensorData> expected = trainStep(**original, inputs, 0);
    std::vector<TensorData> actual = trainStep(**fused, inputs, 0);
    ASSERT_EQ(actual.size(), expected.size());
    ASSERT_GT(actual.size(), 1u);
    for (size_t i = 0; i != expected.size(); ++i)
      EXPECT_LE(relativeError(actual[i], expected[i]), 1e-5) << "result " << i;
  }
}

TEST(FuseCrossEntropyTestdataTest, NoVocabularySizedValueIsLeft) {
  for (const LossGraph &graph : kGraphs) {
    SCOPED_TRACE(graph.name);
    std::unique_ptr<Module> module =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    ASSERT_EQ(runPipeline(*module, "canonicalize,fold-transpose,fold-scale,"
                                   "fuse-cross-entropy"),
              "<success>");
    EXPECT_EQ(countOps(*module, kGmoptDomain, kFusedLinearCrossEntropyOp), 1u);
    EXPECT_EQ(countOps(*module, kGmoptDomain, kFusedLinearCrossEntropyGradOp),
              1u);
    EXPECT_EQ(countOps(*module, kOnnxDomain, "SoftmaxCrossEntropyLoss"), 0u);
    EXPECT_EQ(countOps(*module, kMsDomain, "SoftmaxCrossEntropyLossGrad"), 0u);
    // No activation with the vocabulary as its last extent remains (the
    // weight and its gradient, accumulator and optimizer state are [V, D]
    // or [D, V] and are not produced by a [.., V] product).
    for (const Node &node : module->getGraph().getNodes()) {
      if (node.getPhase() == Phase::Optimizer)
        continue;
      for (const Value *result : node.getResults()) {
        if (!result || !result->getType().hasRank() ||
            result->getType().getRank() == 0)
          continue;
        const TensorType &type = result->getType();
        if (type.getRank() >= 2 && type.getDims().back().isStatic() &&
            type.getDims().back().getExtent() == graph.vocab &&
            !node.isa(kGmoptDomain, kFusedLinearCrossEntropyGradOp) &&
            !node.isa(kMsDomain, "InPlaceAccumulatorV2"))
          ADD_FAILURE() << "vocabulary-sized value left: " << node.describe();
      }
    }
    PassManager again;
    ASSERT_EQ(runPipeline(*module, "fuse-cross-entropy", &again), "<success>");
    EXPECT_EQ(again.getContext().getStatistic("fuse-cross-entropy", "fused"),
              0u);
  }
}

TEST(FuseCrossEntropyTestdataTest, FusedOpsRoundTripThroughTextAndGm) {
  std::unique_ptr<Module> module = importTestdataGraph("gpt_tiny", 4);
  std::unique_ptr<Module> original = importTestdataGraph("gpt_tiny", 4);
  ASSERT_TRUE(module && original);
  ASSERT_EQ(runPipeline(*module, "canonicalize,fuse-cross-entropy"),
            "<success>");
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(*module, os);
  os.flush();
  auto parsed = parseModule(text, "<fused>");
  ASSERT_TRUE(bool(parsed)) << errorText(parsed.takeError());
  std::string again;
  llvm::raw_string_ostream againOs(again);
  printModule(**parsed, againOs);
  againOs.flush();
  EXPECT_EQ(again, text);
  EXPECT_EQ(errorText(verifyModule(**parsed)), "<success>");

  auto bytes =
      writeGmBytes(*module, *original, "canonicalize,fuse-cross-entropy");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "fused.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  EXPECT_EQ(countOps(*loaded->module, kGmoptDomain, kFusedLinearCrossEntropyOp),
            1u);
  EXPECT_EQ(
      countOps(*loaded->module, kGmoptDomain, kFusedLinearCrossEntropyGradOp),
      1u);
}

} // namespace
