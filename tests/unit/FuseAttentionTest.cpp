//===- FuseAttentionTest.cpp - Tests of the fuse-attention pass -----------===//
//
// Numerical equivalence on the CPU backend: every attention graph of
// testdata (GPT with its causal Where, Llama with its keep-polarity causal
// Where, BERT with an additive padding mask, GPT with attention dropout)
// give the same loss and gradients, to 1e-5 of each tensor's largest
// magnitude, before and after fuse-attention, at several step indices (so
// several dropout masks), straight from the importer, after the default
// pipeline's canonicalize,fold-transpose,fold-scale prefix, and inside the
// whole default pipeline (selective recompute, schedule, plan). Also:
// every attention layer fuses, forward and backward, no [.., sq, sk] value
// is left, a second run changes nothing, and the fused ops survive the
// text form and the .gm container.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/PassTestSupport.h"
#include "tests/unit/TestdataTraining.h"

#include "passes/PassManager.h"

#include "backend/Executor.h"
#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/Verifier.h"
#include "ir/ops/AttentionSpec.h"
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

/// A graph with the number of attention layers it has.
struct AttentionGraph {
  const char *name;
  /// Whose test_data_set_0 feeds it.
  const char *inputs;
  int64_t batch;
  unsigned layers;
  /// The dropout ratio fed (0: the graph's inputs as they are).
  float dropoutRatio = 0;
};

constexpr AttentionGraph kGraphs[] = {
    {"gpt_tiny", "gpt_tiny", 4, 2},
    {"llama_tiny", "llama_tiny", 4, 2},
    {"bert_tiny", "bert_tiny", 4, 2},
    {"gpt_tiny_dropout", "gpt_tiny", 4, 2, 0.2f},
    {"gpt_tiny_untied", "gpt_tiny_untied", 4, 2},
    {"gpt_opset14", "gpt_opset14", 4, 2},
    {"gpt_opset20", "gpt_opset20", 4, 2},
    {"llama_tiny_untied", "llama_tiny_untied", 4, 1},
};

llvm::StringMap<TensorData> graphInputs(const AttentionGraph &graph) {
  llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.inputs);
  if (graph.dropoutRatio > 0)
    inputs["dropout_ratio"] =
        TensorData::fromValues<float>(DType::F32, {}, {graph.dropoutRatio});
  return inputs;
}

TEST(FuseAttentionTestdataTest, GradientsMatchTheUnfusedGraph) {
  for (const AttentionGraph &graph : kGraphs) {
    llvm::StringMap<TensorData> inputs = graphInputs(graph);
    // The pass after each prefix, and inside the default pipeline (before
    // selective recompute, then scheduled and planned).
    for (auto [prefix, suffix] :
         {std::pair<const char *, const char *>{"canonicalize", ""},
          {"canonicalize,fold-transpose,fold-scale", ""},
          {"canonicalize,fold-transpose,fold-scale",
           ",recompute{mode=selective},schedule,plan-buffers"}}) {
      SCOPED_TRACE(std::string(graph.name) + ": " + prefix + "," +
                   "fuse-attention" + suffix);
      std::unique_ptr<Module> original =
          importTestdataGraph(graph.name, graph.batch);
      std::unique_ptr<Module> fused =
          importTestdataGraph(graph.name, graph.batch);
      ASSERT_TRUE(original && fused);
      ASSERT_EQ(runPipeline(*original, std::string(prefix) + suffix),
                "<success>");
      PassManager manager;
      ASSERT_EQ(runPipeline(*fused,
                            std::string(prefix) + ",fuse-attention" + suffix,
                            &manager),
                "<success>");
      EXPECT_EQ(errorText(verifyModule(*fused)), "<success>");
      EXPECT_EQ(manager.getContext().getStatistic("fuse-attention", "fused"),
                graph.layers);
      expectSameSteps(*original, *fused, inputs, {0, 1, 5}, *suffix != 0);
    }
  }
}

TEST(FuseAttentionTestdataTest, GmoptAutodiffGradientsMatchTheUnfusedGraph) {
  // The same layers differentiated by gmopt's autodiff from the forward
  // models (eval_model.onnx), rather than by ONNX Runtime's generator.
  for (const AttentionGraph &graph : kGraphs) {
    llvm::StringRef name = graph.name;
    if (name != "gpt_tiny" && name != "bert_tiny" && name != "llama_tiny")
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
    ASSERT_EQ(
        runPipeline(**fused, "autodiff,canonicalize,fuse-attention", &manager),
        "<success>");
    EXPECT_EQ(manager.getContext().getStatistic("fuse-attention", "fused"),
              graph.layers);
    llvm::StringMap<TensorData> inputs = graphInputs(graph);
    std::vector<TensorData> expected = trainStep(**original, inputs, 0);
    std::vector<TensorData> actual = trainStep(**fused, inputs, 0);
    ASSERT_EQ(actual.size(), expected.size());
    ASSERT_GT(actual.size(), 1u);
    for (size_t i = 0; i != expected.size(); ++i)
      EXPECT_LE(relativeError(actual[i], expected[i]), 1e-5) << "result " << i;
  }
}

TEST(FuseAttentionTestdataTest, DropoutIsActiveAndFollowsTheStep) {
  // The dropout case above proves bit-identical masks only if they drop:
  // the loss with ratio 0.2 differs from ratio 0, and between steps.
  const AttentionGraph &graph = kGraphs[3];
  std::unique_ptr<Module> fused = importTestdataGraph(graph.name, graph.batch);
  ASSERT_TRUE(fused);
  ASSERT_EQ(runPipeline(*fused, "canonicalize,fuse-attention"), "<success>");
  llvm::StringMap<TensorData> inputs = graphInputs(graph);
  std::vector<TensorData> dropped0 = trainStep(*fused, inputs, 0);
  std::vector<TensorData> dropped1 = trainStep(*fused, inputs, 1);
  inputs["dropout_ratio"] = TensorData::fromValues<float>(DType::F32, {}, {0});
  std::vector<TensorData> kept = trainStep(*fused, inputs, 0);
  ASSERT_FALSE(dropped0.empty() || dropped1.empty() || kept.empty());
  EXPECT_GT(relativeError(dropped0[0], kept[0]), 1e-4);
  EXPECT_GT(relativeError(dropped0[0], dropped1[0]), 1e-4);
}

TEST(FuseAttentionTestdataTest, NoScoreSizedValueIsLeft) {
  for (const AttentionGraph &graph : kGraphs) {
    SCOPED_TRACE(graph.name);
    std::unique_ptr<Module> module =
        importTestdataGraph(graph.name, graph.batch);
    ASSERT_TRUE(module);
    ASSERT_EQ(runPipeline(*module, "canonicalize,fuse-attention"), "<success>");
    EXPECT_EQ(countOps(*module, kGmoptDomain, kFusedAttentionOp), graph.layers);
    EXPECT_EQ(countOps(*module, kGmoptDomain, kFusedAttentionGradOp),
              graph.layers);
    EXPECT_EQ(countOps(*module, kOnnxDomain, "Softmax"), 0u);
    EXPECT_EQ(countOps(*module, kMsDomain, "SoftmaxGrad_13"), 0u);
    // No value of the [.., sq, sk] attention scores remains (GPT: 64
    // positions, head size 32, so only scores are [.., 64, 64]).
    if (llvm::StringRef(graph.name).starts_with("gpt"))
      for (const Node &node : module->getGraph().getNodes())
        for (const Value *result : node.getResults()) {
          if (!result || !result->getType().hasStaticShape() ||
              result->getType().getDType() == DType::Bool)
            continue;
          auto shape = result->getType().getStaticShape();
          if (shape.size() == 4 && shape[2] == 64 && shape[3] == 64)
            ADD_FAILURE() << "score-sized value left: " << node.describe();
        }
    PassManager again;
    ASSERT_EQ(runPipeline(*module, "fuse-attention", &again), "<success>");
    EXPECT_EQ(again.getContext().getStatistic("fuse-attention", "fused"), 0u);
  }
}

TEST(FuseAttentionTestdataTest, FusedOpsRoundTripThroughTextAndGm) {
  std::unique_ptr<Module> module = importTestdataGraph("gpt_tiny_dropout", 4);
  std::unique_ptr<Module> original = importTestdataGraph("gpt_tiny_dropout", 4);
  ASSERT_TRUE(module && original);
  ASSERT_EQ(runPipeline(*module, "canonicalize,fuse-attention"), "<success>");
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

  auto bytes = writeGmBytes(*module, *original, "canonicalize,fuse-attention");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "fused.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  EXPECT_EQ(countOps(*loaded->module, kGmoptDomain, kFusedAttentionOp), 2u);
  EXPECT_EQ(countOps(*loaded->module, kGmoptDomain, kFusedAttentionGradOp), 2u);
  // Each fused pair carries the dropout's stream id.
  for (const Node &node : loaded->module->getGraph().getNodes())
    if (node.isa(kGmoptDomain, kFusedAttentionOp) ||
        node.isa(kGmoptDomain, kFusedAttentionGradOp)) {
      EXPECT_TRUE(node.getStreamId().has_value()) << node.describe();
    }
}

} // namespace
