//===- RecomputeTest.cpp - Tests of the recompute pass --------------------===//
//
// Numerical equivalence on the CPU backend: every testdata training graph
// (the dropout graph included) trained for three AdamW steps with each
// recompute mode gives the losses, final parameters and optimizer state of
// the unrewritten graph - bit for bit, since a clone runs the same kernel
// on the same operands and a cloned Dropout draws the same mask. Also: the
// saved-activation analysis, what each mode drops on the GPT graphs, and
// properties over random graphs with forward and backward phases (the
// verifier passes, every output keeps its value, budget plans fit).
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/Recompute.h"
#include "passes/PassManager.h"
#include "passes/recompute/MinCut.h"
#include "passes/recompute/SavedActivations.h"

#include "tools/driver/Runtime.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"

#include "tests/unit/TestPaths.h"
#include "tests/unit/TestdataPipelineTraining.h"
#include "tests/unit/TestdataTraining.h"
#include "gtest/gtest.h"

#include <iostream>
#include <map>
#include <random>

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// The testdata graphs, and the dropout graph with gpt_tiny's batch.
std::vector<gmopt::testing::TestdataGraph> allGraphs() {
  std::vector<gmopt::testing::TestdataGraph> graphs(
      std::begin(gmopt::testing::kTestdataGraphs),
      std::end(gmopt::testing::kTestdataGraphs));
  graphs.push_back({"gpt_tiny_dropout", 4});
  return graphs;
}

const char *const kDefault =
    "canonicalize,fold-transpose,schedule,plan-buffers";

/// The default pipeline with \p recompute before the schedule.
std::string pipelineWith(llvm::StringRef recompute) {
  return ("canonicalize,fold-transpose," + recompute + ",schedule,plan-buffers")
      .str();
}

struct Trained {
  TrainingResult result;
  uint64_t plannedBytes = 0;
  uint64_t clones = 0;
};

/// Three AdamW steps of testdata model \p model compiled with \p pipeline.
std::optional<Trained> train(const gmopt::testing::TestdataGraph &model,
                             llvm::StringRef pipeline) {
  auto trained = gmopt::testing::trainWithPipeline(model, pipeline, 3);
  if (!trained)
    return std::nullopt;
  Trained result;
  result.result = std::move(trained->result);
  result.plannedBytes = trained->module->plan.figures.plannedBytes();
  for (const Node &node : trained->module->getGraph().getNodes())
    result.clones += node.getPhase() == Phase::Recompute;
  return result;
}

class RecomputeTestdataTest
    : public ::testing::TestWithParam<gmopt::testing::TestdataGraph> {};

TEST_P(RecomputeTestdataTest, EveryModeTrainsLikeTheOriginal) {
  const gmopt::testing::TestdataGraph &model = GetParam();
  std::optional<Trained> original = train(model, kDefault);
  ASSERT_TRUE(original);
  ASSERT_EQ(original->result.losses.size(), 3u);
  std::optional<uint64_t> fullPeak;
  for (std::string recompute :
       {"recompute{mode=selective}", "recompute{mode=sqrt}",
        "recompute{mode=full}", "budget"}) {
    // Budget gets the peak full mode planned: a feasible limit by
    // construction, which budget must meet.
    if (recompute == "budget")
      recompute =
          "recompute{mode=budget,memory-limit=" + std::to_string(*fullPeak) +
          "}";
    std::optional<Trained> rewritten = train(model, pipelineWith(recompute));
    ASSERT_TRUE(rewritten) << recompute;
    if (recompute.find("full") != std::string::npos)
      fullPeak = rewritten->plannedBytes;
    if (recompute.find("budget") != std::string::npos) {
      EXPECT_LE(rewritten->plannedBytes, *fullPeak) << model.name;
    }
    EXPECT_EQ(rewritten->result.losses, original->result.losses)
        << model.name << " " << recompute;
    ASSERT_EQ(rewritten->result.finalState.size(),
              original->result.finalState.size());
    for (size_t i = 0; i != original->result.finalState.size(); ++i)
      EXPECT_TRUE(rewritten->result.finalState[i].data ==
                  original->result.finalState[i].data)
          << model.name << " " << recompute << ": "
          << original->result.finalState[i].name;
    if (llvm::StringRef(recompute).contains("full") &&
        llvm::StringRef(model.name).starts_with("gpt")) {
      EXPECT_GT(rewritten->clones, 0u) << model.name;
      EXPECT_LT(rewritten->plannedBytes, original->plannedBytes) << model.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, RecomputeTestdataTest, ::testing::ValuesIn(allGraphs()),
    [](const ::testing::TestParamInfo<gmopt::testing::TestdataGraph> &info) {
      return std::string(info.param.name);
    });

//===----------------------------------------------------------------------===//
// Analysis and modes on a GPT graph
//===----------------------------------------------------------------------===//

std::unique_ptr<Module> importGpt() {
  OnnxImportOptions options;
  options.dimBindings = {{"batch", 4}, {"batch_x_seq", 256}};
  auto module = importOnnxFile(
      gmopt::testdataDir() + "/gpt_tiny_dropout/training_model.onnx", options);
  EXPECT_TRUE(bool(module)) << errorText(module.takeError());
  if (!module)
    return nullptr;
  PassManager manager;
  EXPECT_EQ(errorText(manager.addPipeline("canonicalize,fold-transpose")),
            "<success>");
  EXPECT_EQ(errorText(manager.run(**module)), "<success>");
  return std::move(*module);
}

TEST(SavedActivationsTest, GptSavedActivationsAreForwardValuesReadLater) {
  std::unique_ptr<Module> module = importGpt();
  ASSERT_TRUE(module);
  auto analysis = SavedActivations::compute(*module);
  ASSERT_TRUE(bool(analysis)) << errorText(analysis.takeError());
  EXPECT_FALSE(analysis->getSaved().empty());
  uint64_t bytes = 0;
  for (const SavedActivation &activation : analysis->getSaved()) {
    const Node *producer = activation.value->getDefiningNode();
    ASSERT_TRUE(producer);
    EXPECT_EQ(producer->getPhase(), Phase::Forward);
    EXPECT_EQ(analysis->getForwardNodes()[activation.producer], producer);
    bool readLater = false;
    for (const OpOperand &use : activation.value->getUses())
      readLater |=
          use.getOwner() && use.getOwner()->getPhase() != Phase::Forward;
    EXPECT_TRUE(readLater) << activation.value->getName().str();
    EXPECT_EQ(activation.bytes, activation.value->getType().getSizeInBytes());
    bytes += activation.bytes;
  }
  EXPECT_EQ(bytes, analysis->getSavedBytes());
  // Dropout has a stream id, so it is recomputable; nothing in a forward
  // pass of ONNX Runtime's has side effects.
  unsigned dropouts = 0;
  for (uint32_t p = 0; p != analysis->getForwardNodes().size(); ++p)
    if (analysis->getForwardNodes()[p]->getOpType() == "Dropout") {
      ++dropouts;
      EXPECT_TRUE(analysis->isRecomputable(p));
    }
  EXPECT_GT(dropouts, 0u);
  // Regions stop at kept values: with nothing kept a saved value's region
  // reaches back to graph inputs and parameters only.
  const SavedActivation *last = nullptr;
  for (const SavedActivation &activation : analysis->getSaved())
    if (analysis->isRecomputable(activation.producer))
      last = &activation;
  ASSERT_TRUE(last);
  auto region = analysis->computeRegion(last->value, {});
  ASSERT_TRUE(bool(region)) << errorText(region.takeError());
  EXPECT_FALSE(region->nodes.empty());
  EXPECT_TRUE(llvm::is_sorted(region->nodes));
  for (const Value *source : region->sources)
    EXPECT_TRUE(analysis->isAlwaysAvailable(source) ||
                !analysis->isRecomputable(
                    *analysis->getForwardPosition(source->getDefiningNode())))
        << source->getName().str();
}

TEST(RecomputeTest, ModesOrderByMemoryAndFlops) {
  std::unique_ptr<Module> module = importGpt();
  ASSERT_TRUE(module);
  auto analysis = SavedActivations::compute(*module);
  ASSERT_TRUE(bool(analysis)) << errorText(analysis.takeError());
  auto selective = planRecompute(*analysis, RecomputeMode::Selective);
  auto full = planRecompute(*analysis, RecomputeMode::Full);
  ASSERT_TRUE(bool(selective)) << errorText(selective.takeError());
  ASSERT_TRUE(bool(full)) << errorText(full.takeError());
  // Selective drops saved bytes for a small share of the step's FLOPs;
  // full keeps less and recomputes more.
  EXPECT_LT(selective->savedBytesAfter, selective->savedBytesBefore);
  EXPECT_LT(full->savedBytesAfter, selective->savedBytesAfter);
  EXPECT_LT(selective->recomputeFlops, full->recomputeFlops);
  EXPECT_LT(selective->recomputeFlops * 10, selective->stepFlops);
  // Selective never clones a product with a weight; it does clone the
  // attention core (products of two activations), unless told not to.
  auto productsCloned = [&](const RecomputePlan &plan) {
    unsigned core = 0;
    for (const RecomputePlan::Group &group : plan.groups)
      for (uint32_t position : group.nodes) {
        const Node *node = analysis->getForwardNodes()[position];
        llvm::StringRef op = node->getOpType();
        if (op != "MatMul" && op != "Gemm" && op != "FusedMatMul")
          continue;
        EXPECT_NE(op, "Gemm");
        for (unsigned i = 0; i != 2; ++i) {
          EXPECT_TRUE(analysis->isForwardValue(node->getOperand(i)))
              << node->describe();
          EXPECT_FALSE(analysis->isParameterDerived(node->getOperand(i)))
              << node->describe();
        }
        ++core;
      }
    return core;
  };
  EXPECT_GT(productsCloned(*selective), 0u);
  RecomputeTuning noCore;
  noCore.attentionCore = false;
  auto weightsOnly =
      planRecompute(*analysis, RecomputeMode::Selective, 0, noCore);
  ASSERT_TRUE(bool(weightsOnly)) << errorText(weightsOnly.takeError());
  EXPECT_EQ(productsCloned(*weightsOnly), 0u);
  EXPECT_GT(weightsOnly->savedBytesAfter, selective->savedBytesAfter);
}

TEST(RecomputeTest, PartsOfSelectiveTakeTheMostEfficientGroupsFirst) {
  std::unique_ptr<Module> module = importGpt();
  ASSERT_TRUE(module);
  auto analysis = SavedActivations::compute(*module);
  ASSERT_TRUE(bool(analysis)) << errorText(analysis.takeError());
  auto selective = planRecompute(*analysis, RecomputeMode::Selective);
  ASSERT_TRUE(bool(selective)) << errorText(selective.takeError());
  ASSERT_GT(selective->groups.size(), 2u);
  uint64_t previousFlops = 0;
  for (size_t k = 1; k <= selective->groups.size(); ++k) {
    RecomputePlan part = takeMostEfficientGroups(*selective, *analysis, k);
    ASSERT_EQ(part.groups.size(), k);
    EXPECT_GE(part.recomputeFlops, previousFlops);
    EXPECT_LE(part.savedBytesAfter, part.savedBytesBefore);
    previousFlops = part.recomputeFlops;
    for (size_t i = 1; i < part.groups.size(); ++i)
      EXPECT_LE(part.groups[i - 1].placeBefore, part.groups[i].placeBefore);
  }
  RecomputePlan all =
      takeMostEfficientGroups(*selective, *analysis, selective->groups.size());
  EXPECT_EQ(all.recomputeFlops, selective->recomputeFlops);
  EXPECT_EQ(all.dropped, selective->dropped);
  EXPECT_EQ(all.savedBytesAfter, selective->savedBytesAfter);
  // Applied, a part verifies and trains like the whole (RecomputeTestdata
  // covers the numerics of budget plans).
  RecomputePlan half = takeMostEfficientGroups(*selective, *analysis,
                                               selective->groups.size() / 2);
  ASSERT_EQ(errorText(applyRecomputePlan(*module, *analysis, half)),
            "<success>");
  EXPECT_EQ(errorText(verifyModule(*module)), "<success>");
}

TEST(RecomputeTest, GraphsAsImportedStayTopological) {
  // Without canonicalize, ONNX Runtime's graphs keep forward nodes (shape
  // arithmetic) after backward ones: a group's sources can be defined after
  // its first reader. Such groups are not placed (or not merged); the
  // result must verify in every mode.
  for (const gmopt::testing::TestdataGraph &graph : allGraphs())
    for (const char *recompute :
         {"recompute{mode=selective}", "recompute{mode=sqrt}",
          "recompute{mode=full}"}) {
      std::unique_ptr<Module> module =
          gmopt::testing::importTestdataGraph(graph.name, graph.batch);
      ASSERT_TRUE(module);
      PassManager manager;
      ASSERT_EQ(
          errorText(manager.addPipeline(std::string(recompute) + ",schedule")),
          "<success>");
      EXPECT_EQ(errorText(manager.run(*module)), "<success>")
          << graph.name << " " << recompute;
    }
}

TEST(RecomputeTest, SecondRunChangesNothing) {
  std::unique_ptr<Module> module = importGpt();
  ASSERT_TRUE(module);
  RecomputePass pass;
  PassContext context;
  auto first = pass.run(*module, context);
  ASSERT_TRUE(bool(first)) << errorText(first.takeError());
  EXPECT_TRUE(*first);
  EXPECT_EQ(errorText(verifyModule(*module)), "<success>");
  size_t nodes = module->getGraph().getNumNodes();
  auto second = pass.run(*module, context);
  ASSERT_TRUE(bool(second)) << errorText(second.takeError());
  EXPECT_FALSE(*second);
  EXPECT_EQ(module->getGraph().getNumNodes(), nodes);
}

TEST(RecomputeTest, SymbolicShapesAreAnError) {
  auto module =
      importOnnxFile(gmopt::testdataDir() + "/gpt_tiny/training_model.onnx");
  ASSERT_TRUE(bool(module)) << errorText(module.takeError());
  RecomputePass pass;
  PassContext context;
  auto changed = pass.run(**module, context);
  ASSERT_FALSE(bool(changed));
  EXPECT_NE(errorText(changed.takeError()).find("no static shape"),
            std::string::npos);
}

TEST(RecomputeTest, OptionsParseAndPrint) {
  RecomputePass pass;
  EXPECT_EQ(pass.getPipelineElement(),
            "recompute{mode=selective,memory-limit=\"\",attention-core=true,"
            "cost-model=cpu,flops-per-byte=64,written-bytes-per-byte=16,"
            "drop=\"\","
            "search-work=65536,print-plan=false}");
  EXPECT_EQ(errorText(pass.setOption("mode", "budget")), "<success>");
  EXPECT_EQ(errorText(pass.setOption("search-work", "0")), "<success>");
  EXPECT_EQ(pass.getPassOptions().searchWork, 0u);
  EXPECT_EQ(errorText(pass.setOption("memory-limit", "60%")), "<success>");
  EXPECT_EQ(pass.getPassOptions().mode, RecomputeMode::Budget);
  EXPECT_NE(errorText(pass.setOption("mode", "sometimes")), "<success>");
}

//===----------------------------------------------------------------------===//
// Minimum cut
//===----------------------------------------------------------------------===//

TEST(MinCutTest, MatchesExhaustiveSearchOnRandomNetworks) {
  std::mt19937 rng(7);
  for (unsigned trial = 0; trial != 300; ++trial) {
    const uint32_t n = 3 + rng() % 8;
    struct Edge {
      uint32_t from, to;
      uint64_t capacity;
    };
    std::vector<Edge> edges;
    for (unsigned e = 0, m = rng() % (3 * n); e != m; ++e) {
      uint32_t from = rng() % n, to = rng() % n;
      if (from == to)
        continue;
      uint64_t capacity = rng() % 7 == 0 ? FlowNetwork::kInfinite : rng() % 50;
      edges.push_back({from, to, capacity});
    }
    FlowNetwork network(n);
    for (const Edge &edge : edges)
      network.addEdge(edge.from, edge.to, edge.capacity);
    uint64_t flow = network.maxFlow(0, n - 1);
    // Every cut with the source on one side and the sink on the other.
    uint64_t best = FlowNetwork::kInfinite;
    for (uint32_t mask = 0; mask != (1u << n); ++mask) {
      if (!(mask & 1) || (mask >> (n - 1) & 1))
        continue;
      uint64_t cut = 0;
      for (const Edge &edge : edges)
        if ((mask >> edge.from & 1) && !(mask >> edge.to & 1))
          cut = std::min(FlowNetwork::kInfinite, cut + edge.capacity);
      best = std::min(best, cut);
    }
    ASSERT_EQ(flow, best) << "trial " << trial;
    // The reported source side is a cut of that capacity.
    uint64_t cut = 0;
    for (const Edge &edge : edges)
      if (network.onSourceSide(edge.from) && !network.onSourceSide(edge.to))
        cut = std::min(FlowNetwork::kInfinite, cut + edge.capacity);
    EXPECT_TRUE(network.onSourceSide(0));
    if (flow < FlowNetwork::kInfinite) {
      EXPECT_FALSE(network.onSourceSide(n - 1));
      EXPECT_EQ(cut, flow) << "trial " << trial;
    }
  }
}

//===----------------------------------------------------------------------===//
// Random graphs
//===----------------------------------------------------------------------===//

TensorType f32(int64_t rows, int64_t cols) {
  return TensorType::get(DType::F32, {rows, cols});
}

/// A random training-like graph: a forward chain of products, activations,
/// sums and dropouts over square f32 tensors, then backward nodes that read
/// random forward values (the saved activations) and combine them into one
/// output, which is what the test compares.
void buildRandomStep(Module &module, std::mt19937 &rng, unsigned numForward) {
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  const int64_t n = 8 + rng() % 3 * 8;
  Value *x = graph.addInput(f32(n, n), "x");
  Value *w = graph.addInput(f32(n, n), "w");
  Value *dy = graph.addInput(f32(n, n), "dy");
  Builder b(graph);
  Value *ratio = b.createConstant(
      TensorData::fromValues<float>(DType::F32, {}, {0.25f}), "ratio");
  Value *training = b.createConstant(
      TensorData(TensorType::get(DType::Bool, {}), std::vector<uint8_t>{1}),
      "training");
  std::vector<Value *> values = {x};
  auto pick = [&](unsigned window) {
    unsigned size = values.size();
    unsigned lo = size > window ? size - window : 0;
    return values[std::uniform_int_distribution<unsigned>(lo, size - 1)(rng)];
  };
  auto make = [&](llvm::StringRef op, llvm::ArrayRef<Value *> operands,
                  unsigned results = 1) {
    Node *node = b.create({"", op.str()}, operands,
                          std::vector<TensorType>(results, f32(n, n)));
    return node;
  };
  for (unsigned i = 0; i != numForward; ++i) {
    int kind = rng() % 8;
    if (kind == 0 || kind == 1) {
      values.push_back(make("MatMul", {pick(4), w})->getResult(0));
    } else if (kind == 2) {
      values.push_back(make("Relu", {pick(3)})->getResult(0));
    } else if (kind == 3) {
      values.push_back(make("Sigmoid", {pick(3)})->getResult(0));
    } else if (kind == 4) {
      values.push_back(make("Add", {pick(3), pick(12)})->getResult(0));
    } else if (kind == 5) {
      values.push_back(make("Mul", {pick(3), pick(6)})->getResult(0));
    } else if (kind == 6) {
      Node *dropout =
          b.create({"", "Dropout"}, {pick(3), ratio, training},
                   {f32(n, n), TensorType::get(DType::Bool, {n, n})});
      dropout->setStreamId(1000 + i);
      values.push_back(dropout->getResult(0));
    } else {
      values.push_back(make("Tanh", {pick(3)})->getResult(0));
    }
  }
  b.setPhase(Phase::Backward);
  Value *grad = dy;
  unsigned reads = 2 + rng() % std::max(2u, numForward / 2);
  for (unsigned i = 0; i != reads; ++i) {
    Value *saved = values[rng() % values.size()];
    grad = make(rng() % 2 ? "Mul" : "Add", {grad, saved})->getResult(0);
    if (rng() % 3 == 0)
      grad = make("Tanh", {grad})->getResult(0);
  }
  graph.addOutput(grad);
}

/// The value of every graph output after one step of \p module.
std::vector<TensorData> runOutputs(const Module &module,
                                   const std::vector<TensorData> &inputs) {
  std::vector<TensorData> outputs;
  ExecutorOptions options;
  options.mode = AllocationMode::Planned;
  options.seed = 3;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << errorText(executable.takeError());
  if (!executable)
    return outputs;
  for (size_t i = 0; i != inputs.size(); ++i)
    EXPECT_EQ(errorText((*executable)
                            ->setInput(module.getGraph().getInputs()[i].get(),
                                       inputs[i])),
              "<success>");
  EXPECT_EQ(errorText((*executable)->runStep(0)), "<success>");
  for (const Value *output : module.getGraph().getOutputs()) {
    auto value = (*executable)->readValue(output);
    EXPECT_TRUE(bool(value)) << errorText(value.takeError());
    outputs.push_back(value ? std::move(*value) : TensorData());
  }
  return outputs;
}

TEST(RecomputeRandomTest, RewrittenStepsVerifyComputeTheSameAndFit) {
  std::mt19937 rng(2026);
  unsigned rewrote = 0, fitted = 0, refused = 0;
  for (unsigned trial = 0; trial != 120; ++trial) {
    Module original;
    const uint32_t seed = rng();
    std::mt19937 graphRng(seed);
    buildRandomStep(original, graphRng, 6 + trial % 40);
    ASSERT_EQ(errorText(verifyModule(original)), "<success>") << trial;
    std::vector<TensorData> inputs;
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (const auto &input : original.getGraph().getInputs()) {
      std::vector<float> elements(input->getType().getNumElements());
      for (float &e : elements)
        e = uniform(rng);
      inputs.push_back(TensorData::fromValues<float>(
          DType::F32, input->getType().getStaticShape(), elements));
    }
    PassManager plain;
    ASSERT_EQ(errorText(plain.addPipeline("schedule,plan-buffers")),
              "<success>");
    ASSERT_EQ(errorText(plain.run(original)), "<success>");
    std::vector<TensorData> expected = runOutputs(original, inputs);
    uint64_t originalPeak = original.plan.figures.plannedBytes();

    unsigned percent = 55 + rng() % 46;
    for (std::string recompute : {std::string("recompute{mode=selective}"),
                                  std::string("recompute{mode=sqrt}"),
                                  std::string("recompute{mode=full}"),
                                  "recompute{mode=budget,memory-limit=" +
                                      std::to_string(percent) + "%}"}) {
      // The identical graph again, from the same seed.
      Module module;
      std::mt19937 sameRng(seed);
      buildRandomStep(module, sameRng, 6 + trial % 40);
      PassManager rewrite;
      ASSERT_EQ(errorText(rewrite.addPipeline(recompute)), "<success>");
      llvm::Error err = rewrite.run(module);
      if (err) {
        std::string text = errorText(std::move(err));
        ASSERT_NE(recompute.find("budget"), std::string::npos) << text;
        EXPECT_NE(text.find("cannot be met"), std::string::npos) << text;
        ++refused;
        continue;
      }
      // Each clone's anchor: the nearest node before it that is not a
      // clone. The recompute pass placed every clone in the backward
      // region, before the first later-phase reader of what it provides.
      llvm::DenseMap<const Node *, const Node *> anchorOf;
      const Node *anchor = nullptr;
      for (const Node &node : module.getGraph().getNodes()) {
        if (node.getPhase() != Phase::Recompute) {
          anchor = &node;
          continue;
        }
        ++rewrote;
        anchorOf[&node] = anchor;
        for (const Value *result : node.getResults()) {
          if (!result)
            continue;
          for (const OpOperand &use : result->getUses())
            EXPECT_TRUE(!use.getOwner() ||
                        use.getOwner()->getPhase() != Phase::Forward)
                << trial << " " << recompute
                << ": a forward node reads a clone";
        }
      }
      PassManager plan;
      ASSERT_EQ(errorText(plan.addPipeline("schedule,plan-buffers")),
                "<success>");
      ASSERT_EQ(errorText(plan.run(module)), "<success>");
      ASSERT_EQ(errorText(verifyModule(module)), "<success>")
          << trial << " " << recompute;
      // The schedule never hoists a clone above its anchor.
      llvm::DenseSet<const Node *> seen;
      for (const Node &node : module.getGraph().getNodes()) {
        if (const Node *a = anchorOf.lookup(&node)) {
          EXPECT_TRUE(seen.contains(a))
              << trial << " " << recompute << ": clone hoisted";
        }
        seen.insert(&node);
      }
      if (recompute.find("budget") != std::string::npos) {
        EXPECT_LE(module.plan.figures.plannedBytes(),
                  originalPeak * percent / 100)
            << trial;
        ++fitted;
      }
      std::vector<TensorData> actual = runOutputs(module, inputs);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i != expected.size(); ++i)
        EXPECT_TRUE(actual[i] == expected[i]) << trial << " " << recompute;
    }
  }
  // Not vacuous: clones were made, budgets were met and refused.
  EXPECT_GT(rewrote, 100u);
  EXPECT_GT(fitted, 10u);
  EXPECT_GT(refused, 0u);
}

} // namespace

namespace {

/// Applies \p plan to \p module and plans it: the planned peak.
uint64_t plannedPeakWith(Module &module, const SavedActivations &analysis,
                         const RecomputePlan &plan) {
  EXPECT_EQ(errorText(applyRecomputePlan(module, analysis, plan)), "<success>");
  PassManager manager;
  EXPECT_EQ(errorText(manager.addPipeline("schedule,plan-buffers")),
            "<success>");
  EXPECT_EQ(errorText(manager.run(module)), "<success>");
  return module.plan.figures.plannedBytes();
}

} // namespace

TEST(RecomputeRandomTest, BudgetNearsTheExhaustiveOptimum) {
  // On random graphs with few saved activations, every subset of them is
  // dropped (explicit mode's choice, the space budget searches) and
  // planned; at four limits from the unrewritten peak down to the smallest
  // peak any subset reaches, budget must fit, must not refuse (a subset
  // fits), and should come near the least FLOPs of a subset that fits.
  std::mt19937 rng(12);
  unsigned limits = 0, exact = 0, within10 = 0, refused = 0;
  double worst = 1;
  for (unsigned trial = 0; trial != 60; ++trial) {
    const uint32_t seed = rng();
    const unsigned numForward = 5 + trial % 9;
    auto build = [&] {
      auto module = std::make_unique<Module>();
      std::mt19937 graphRng(seed);
      buildRandomStep(*module, graphRng, numForward);
      return module;
    };
    std::unique_ptr<Module> probe = build();
    auto probeAnalysis = SavedActivations::compute(*probe);
    ASSERT_TRUE(bool(probeAnalysis)) << errorText(probeAnalysis.takeError());
    std::vector<size_t> droppable;
    for (size_t i = 0; i != probeAnalysis->getSaved().size(); ++i)
      if (probeAnalysis->isRecomputable(probeAnalysis->getSaved()[i].producer))
        droppable.push_back(i);
    if (droppable.empty() || droppable.size() > 8)
      continue;
    std::vector<std::pair<uint64_t, uint64_t>> points; // (peak, flops)
    for (uint32_t mask = 0; mask != 1u << droppable.size(); ++mask) {
      std::unique_ptr<Module> module = build();
      auto analysis = SavedActivations::compute(*module);
      ASSERT_TRUE(bool(analysis));
      RecomputeAdjustment adjust;
      for (size_t bit = 0; bit != droppable.size(); ++bit)
        if (mask >> bit & 1)
          adjust.drop.push_back(analysis->getSaved()[droppable[bit]].value);
      auto plan =
          planRecompute(*analysis, RecomputeMode::Explicit, 0, {}, adjust);
      ASSERT_TRUE(bool(plan)) << errorText(plan.takeError());
      points.push_back(
          {plannedPeakWith(*module, *analysis, *plan), plan->recomputeFlops});
    }
    const uint64_t base = points[0].first;
    uint64_t smallest = base;
    for (const auto &point : points)
      smallest = std::min(smallest, point.first);
    if (smallest == base)
      continue;
    for (unsigned k = 1; k <= 4; ++k) {
      const uint64_t limit = base - k * (base - smallest) / 4;
      uint64_t optimal = UINT64_MAX;
      for (const auto &[peak, flops] : points)
        if (peak <= limit)
          optimal = std::min(optimal, flops);
      std::unique_ptr<Module> module = build();
      PassManager manager;
      ASSERT_EQ(errorText(manager.addPipeline(
                    "recompute{mode=budget,memory-limit=" +
                    std::to_string(limit) + "},schedule,plan-buffers")),
                "<success>");
      llvm::Error err = manager.run(*module);
      ++limits;
      if (err) {
        std::string text = errorText(std::move(err));
        EXPECT_NE(text.find("cannot be met"), std::string::npos) << text;
        ADD_FAILURE() << "trial " << trial << " limit " << k << "/4 (" << limit
                      << ", smallest subset peak " << smallest << ", base "
                      << base << ") refused: " << text;
        ++refused;
        continue;
      }
      EXPECT_LE(module->plan.figures.plannedBytes(), limit) << trial;
      uint64_t flops =
          manager.getContext().getStatistic("recompute", "recompute-flops");
      double ratio = optimal ? double(flops) / optimal : flops ? 1e9 : 1;
      worst = std::max(worst, ratio);
      exact += flops <= optimal;
      within10 += ratio <= 1.1;
      if (ratio > 1.1)
        std::cerr << "trial " << trial << " limit " << k << "/4: budget "
                  << flops << " FLOPs, optimum " << optimal << "\n";
    }
  }
  std::cerr << "budget against the exhaustive optimum: " << limits
            << " limits, " << exact << " optimal, " << within10
            << " within 10%, " << refused << " refused, worst ratio " << worst
            << "\n";
  EXPECT_GT(limits, 40u);
  EXPECT_EQ(refused, 0u);
  EXPECT_GE(within10 * 10, limits * 9);
}
