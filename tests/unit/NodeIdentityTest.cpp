//===- NodeIdentityTest.cpp - Phases and random streams as node data ------===//
//
// Unit tests of what a node is in the training step: its phase and, for a
// random op, its stream id. Both are set once at import (the ONNX importer
// from ONNX Runtime's conventions and `seed` attributes, the text parser
// from the text), carried by Graph::cloneNodes and the Builder, printed and
// parsed by the text IR and stored in `.gm` files. The tests run Dropouts
// on the CPU backend: a clone draws exactly its original's mask, also after
// a `.gm` round trip that renames the nodes, and two unnamed Dropouts draw
// different masks. Renaming every node and value after import changes no
// phase and no memory category: nothing classifies by name after import.
//
//===----------------------------------------------------------------------===//

#include "TestdataTraining.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/TextIR.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace gmopt;
using namespace gmopt::testing;

namespace {

std::string errorText(llvm::Error err) {
  return testdataErrorText(std::move(err));
}

std::string printed(const Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os);
  return text;
}

std::unique_ptr<Module> parse(llvm::StringRef text) {
  auto module = parseModule(text, "test");
  EXPECT_TRUE(bool(module)) << errorText(module.takeError());
  return module ? std::move(*module) : nullptr;
}

/// One named Dropout of 4096 elements at ratio 0.5.
constexpr const char *kOneDropout = R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[4096]) {
    %ratio = constant f32[] dense<0.5>
    %training = constant bool[] dense<true>
    %y, %mask = Dropout(%x, %ratio, %training) : (f32[4096], bool[4096]) name "drop"
    return %y, %mask
  }
}
)";

/// Two unnamed Dropouts of the same input.
constexpr const char *kTwoUnnamedDropouts = R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[4096]) {
    %ratio = constant f32[] dense<0.5>
    %training = constant bool[] dense<true>
    %y1, %m1 = Dropout(%x, %ratio, %training) : (f32[4096], bool[4096])
    %y2, %m2 = Dropout(%x, %ratio, %training) : (f32[4096], bool[4096])
    return %m1, %m2
  }
}
)";

/// Runs one step (seed 7, step 3) of \p module with x = 1 and returns the
/// contents of every graph output.
std::vector<TensorData> runOutputs(const Module &module) {
  std::vector<TensorData> outputs;
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.seed = 7;
  options.threads = 1;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << errorText(executable.takeError());
  if (!executable)
    return outputs;
  const Value *x = module.getGraph().getInputs()[0].get();
  std::vector<float> ones(x->getType().getNumElements(), 1.0f);
  EXPECT_EQ(
      errorText((*executable)
                    ->setInput(x, TensorData::fromValues<float>(
                                      DType::F32, x->getType().getStaticShape(),
                                      llvm::ArrayRef<float>(ones)))),
      "<success>");
  EXPECT_EQ(errorText((*executable)->runStep(3)), "<success>");
  for (const Value *output : module.getGraph().getOutputs()) {
    auto data = (*executable)->readValue(output);
    EXPECT_TRUE(bool(data)) << errorText(data.takeError());
    outputs.push_back(data ? std::move(*data) : TensorData());
  }
  return outputs;
}

uint64_t countKept(const TensorData &mask) {
  uint64_t kept = 0;
  for (uint8_t byte : mask.getBytes())
    kept += byte;
  return kept;
}

/// Clones the Dropout of kOneDropout as a recompute node whose results
/// are graph outputs too: outputs (y, mask, y', mask').
std::unique_ptr<Module> dropoutWithClone() {
  auto module = parse(kOneDropout);
  if (!module)
    return nullptr;
  Graph &graph = module->getGraph();
  Node *drop = &*std::prev(graph.end());
  ValueMapping mapping;
  std::vector<Node *> clones = graph.cloneNodes({drop}, graph.end(), mapping);
  EXPECT_EQ(clones.size(), 1u);
  clones[0]->setPhase(Phase::Recompute);
  clones[0]->getResult(0)->setName("y_again");
  clones[0]->getResult(1)->setName("mask_again");
  graph.addOutput(clones[0]->getResult(0));
  graph.addOutput(clones[0]->getResult(1));
  EXPECT_EQ(errorText(verifyModule(*module)), "<success>");
  return module;
}

TEST(NodeIdentityTest, ParserGivesRandomNodesDistinctStreams) {
  auto module = parse(kTwoUnnamedDropouts);
  ASSERT_TRUE(module);
  auto it = module->getGraph().begin();
  const Node &first = *it++, &second = *it;
  ASSERT_TRUE(first.getStreamId() && second.getStreamId());
  EXPECT_NE(*first.getStreamId(), *second.getStreamId());
  EXPECT_EQ(first.getPhase(), Phase::Forward);
  // Printed, the ids are kept, and parsing them back changes nothing.
  std::string text = printed(*module);
  EXPECT_NE(text.find(" stream " + std::to_string(*first.getStreamId())),
            std::string::npos)
      << text;
  auto again = parse(text);
  ASSERT_TRUE(again);
  EXPECT_EQ(printed(*again), text);
}

TEST(NodeIdentityTest, TwoUnnamedDropoutsDrawDifferentMasks) {
  auto module = parse(kTwoUnnamedDropouts);
  ASSERT_TRUE(module);
  std::vector<TensorData> masks = runOutputs(*module);
  ASSERT_EQ(masks.size(), 2u);
  EXPECT_NE(masks[0].getBytes(), masks[1].getBytes());
  // Both are real draws at ratio 0.5 (5 sigma of 4096 draws is 160).
  EXPECT_NEAR(static_cast<double>(countKept(masks[0])), 2048, 160);
  EXPECT_NEAR(static_cast<double>(countKept(masks[1])), 2048, 160);
}

TEST(NodeIdentityTest, ClonedDropoutDrawsTheOriginalsMask) {
  auto module = dropoutWithClone();
  ASSERT_TRUE(module);
  const Node &original = *module->getGraph().begin();
  const Node &clone = *std::next(module->getGraph().begin());
  EXPECT_EQ(clone.getStreamId(), original.getStreamId());
  EXPECT_EQ(clone.getPhase(), Phase::Recompute);
  std::vector<TensorData> outputs = runOutputs(*module);
  ASSERT_EQ(outputs.size(), 4u);
  EXPECT_EQ(outputs[1].getBytes(), outputs[3].getBytes()) << "masks";
  EXPECT_EQ(outputs[0].getBytes(), outputs[2].getBytes()) << "outputs";
  EXPECT_NEAR(static_cast<double>(countKept(outputs[1])), 2048, 160);
}

TEST(NodeIdentityTest, CloneKeepsItsMaskAcrossAGmRoundTripThatRenames) {
  auto module = dropoutWithClone();
  auto original = parse(kOneDropout);
  ASSERT_TRUE(module && original);
  std::vector<TensorData> before = runOutputs(*module);
  ASSERT_EQ(before.size(), 4u);
  // Rename the original; the clone keeps "drop" (the writer would have
  // uniquified two of them anyway). Names no longer say which is which.
  module->getGraph().begin()->setName("renamed");
  auto bytes = writeGmBytes(*module, *original, "");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "dropout.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  const Graph &graph = loaded->module->getGraph();
  ASSERT_EQ(graph.getNumNodes(), 2u);
  const Node &first = *graph.getNodes().begin();
  const Node &second = *std::next(graph.getNodes().begin());
  EXPECT_EQ(first.getName(), "renamed");
  EXPECT_EQ(second.getPhase(), Phase::Recompute);
  EXPECT_EQ(first.getStreamId(), second.getStreamId());
  std::vector<TensorData> after = runOutputs(*loaded->module);
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i != 4; ++i)
    EXPECT_EQ(after[i].getBytes(), before[i].getBytes()) << "output " << i;

  // Renaming every node of the loaded module changes no draw either.
  for (Node &node : loaded->module->getGraph().getNodes())
    node.setName("other_" + node.getName().str());
  std::vector<TensorData> renamed = runOutputs(*loaded->module);
  ASSERT_EQ(renamed.size(), 4u);
  EXPECT_EQ(renamed[1].getBytes(), before[1].getBytes());
  EXPECT_EQ(renamed[3].getBytes(), before[1].getBytes());
}

TEST(NodeIdentityTest, CloneAndBuilderCarryPhaseAndStream) {
  auto module = parse(kOneDropout);
  ASSERT_TRUE(module);
  Graph &graph = module->getGraph();
  Node *drop = &*graph.begin();
  drop->setPhase(Phase::Backward);
  drop->setStreamId(42);
  ValueMapping mapping;
  Node *clone = graph.cloneNodes({drop}, graph.end(), mapping)[0];
  EXPECT_EQ(clone->getPhase(), Phase::Backward);
  EXPECT_EQ(clone->getStreamId(), std::optional<uint64_t>(42));
  Builder builder(graph);
  EXPECT_EQ(builder.getPhase(), Phase::Forward);
  builder.setPhase(Phase::Optimizer);
  Node *neg = builder.create({"", "Neg"}, {drop->getResult(0)},
                             {drop->getResult(0)->getType()});
  EXPECT_EQ(neg->getPhase(), Phase::Optimizer);
  EXPECT_FALSE(neg->getStreamId());
}

TEST(NodeIdentityTest, VerifierWantsStreamsOnRandomNodesOnly) {
  auto module = parse(kOneDropout);
  ASSERT_TRUE(module);
  Node &drop = *module->getGraph().begin();
  drop.setStreamId(std::nullopt);
  EXPECT_NE(errorText(verifyModule(*module)).find("has no stream id"),
            std::string::npos);
  drop.setStreamId(5);
  EXPECT_EQ(errorText(verifyModule(*module)), "<success>");
  Builder builder(module->getGraph());
  Node *neg = builder.create({"", "Neg"}, {drop.getResult(0)},
                             {drop.getResult(0)->getType()});
  neg->setStreamId(6);
  EXPECT_NE(errorText(verifyModule(*module)).find("draws no random numbers"),
            std::string::npos);
}

TEST(NodeIdentityTest, TextPhasesRoundTripAndDefaultToForward) {
  auto module = parse(R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[4]) {
    %a = Relu(%x) : f32[4]
    %b = Neg(%a) : f32[4] phase backward
    %c = Neg(%b) : f32[4] name "n" phase optimizer
    %d = Relu(%x) : f32[4] phase recompute
    return %c, %d
  }
}
)");
  ASSERT_TRUE(module);
  std::vector<Phase> phases;
  for (const Node &node : module->getGraph().getNodes())
    phases.push_back(node.getPhase());
  EXPECT_EQ(phases, (std::vector<Phase>{Phase::Forward, Phase::Backward,
                                        Phase::Optimizer, Phase::Recompute}));
  std::string text = printed(*module);
  EXPECT_NE(text.find("= Neg(%a) : f32[4] phase backward\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("name \"n\" phase optimizer\n"), std::string::npos);
  EXPECT_NE(text.find("%a = Relu(%x) : f32[4]\n"), std::string::npos);
  auto again = parse(text);
  ASSERT_TRUE(again);
  EXPECT_EQ(printed(*again), text);
  auto bad = parseModule(R"(
module {
  graph @g(%x: f32[4]) {
    %a = Relu(%x) : f32[4] phase sideways
    return %a
  }
}
)",
                         "bad");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(errorText(bad.takeError()).find("after 'phase'"),
            std::string::npos);
}

TEST(NodeIdentityTest, ImportedDropoutsHaveDistinctStreamsThatSurviveGm) {
  auto module = importTestdataGraph("gpt_tiny_dropout", 4);
  ASSERT_TRUE(module);
  auto original = importTestdataGraph("gpt_tiny_dropout", 4);
  ASSERT_TRUE(original);
  std::vector<uint64_t> streams;
  llvm::DenseSet<uint64_t> distinct;
  for (const Node &node : module->getGraph().getNodes()) {
    if (!node.isa("", "Dropout"))
      continue;
    ASSERT_TRUE(node.getStreamId()) << node.describe();
    EXPECT_EQ(node.getPhase(), Phase::Forward) << node.describe();
    streams.push_back(*node.getStreamId());
    distinct.insert(*node.getStreamId());
  }
  ASSERT_FALSE(streams.empty()) << "gpt_tiny_dropout has no Dropout";
  EXPECT_EQ(distinct.size(), streams.size());
  // Rename every node before writing: the stored ids do not depend on it.
  for (Node &node : module->getGraph().getNodes())
    node.setName("");
  auto bytes = writeGmBytes(*module, *original, "");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "gpt.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  std::vector<uint64_t> loadedStreams;
  std::vector<Phase> before, after;
  for (const Node &node : module->getGraph().getNodes())
    before.push_back(node.getPhase());
  for (const Node &node : loaded->module->getGraph().getNodes()) {
    after.push_back(node.getPhase());
    if (node.isa("", "Dropout"))
      loadedStreams.push_back(*node.getStreamId());
  }
  EXPECT_EQ(loadedStreams, streams);
  EXPECT_EQ(after, before);
}

TEST(NodeIdentityTest, NoNameClassificationAfterImport) {
  auto module = importTestdataGraph("mlp", 8);
  ASSERT_TRUE(module);
  llvm::DenseMap<const Value *, MemoryCategory> before =
      categorizeValues(*module);
  std::vector<Phase> phasesBefore;
  for (const Node &node : module->getGraph().getNodes())
    phasesBefore.push_back(node.getPhase());
  EXPECT_TRUE(llvm::is_contained(phasesBefore, Phase::Backward));
  EXPECT_TRUE(llvm::is_contained(phasesBefore, Phase::Optimizer));
  // Names that no convention recognises.
  unsigned counter = 0;
  Graph &graph = module->getGraph();
  for (const auto &input : graph.getInputs())
    input->setName("v" + std::to_string(counter++));
  for (const auto &init : graph.getInitializers())
    init->setName("v" + std::to_string(counter++));
  for (Node &node : graph.getNodes()) {
    node.setName("n" + std::to_string(counter++));
    for (Value *result : node.getResults())
      if (result)
        result->setName("v" + std::to_string(counter++));
  }
  std::vector<Phase> phasesAfter;
  for (const Node &node : graph.getNodes())
    phasesAfter.push_back(node.getPhase());
  EXPECT_EQ(phasesAfter, phasesBefore);
  llvm::DenseMap<const Value *, MemoryCategory> after =
      categorizeValues(*module);
  EXPECT_EQ(after.size(), before.size());
  for (const auto &[value, category] : before)
    EXPECT_EQ(after.lookup(value), category) << value->getName().str();
}

} // namespace
