//===- RecomputeOnnxExportTest.cpp - Recomputed graphs written as ONNX ----===//
//
// gmopt as a memory pre-pass for ONNX Runtime: a training graph rewritten by
// the recompute pass and written with `--emit=onnx`'s exporter must be one
// that ONNX Runtime's training API loads and trains unchanged (the bench
// bench/ort_recompute_peak.py does that; CI has no ONNX Runtime). What that
// needs, checked here on the testdata graphs in each mode: every node and
// every value has a unique name (ONNX Runtime rejects two nodes of one
// name, and the clones copy their originals' names), the nodes are in an
// order ONNX accepts (the re-import checks every use follows its
// definition) and verify, each random clone carries its original's seed
// (so it redraws the original's mask in ONNX Runtime too), and the exported
// graph trains exactly like the original: five AdamW steps of the re-imported
// ONNX give the original's losses.
//
//===----------------------------------------------------------------------===//

#include "passes/PassManager.h"

#include "tools/driver/Runtime.h"
#include "tools/driver/TestDataSet.h"

#include "ir/Module.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <map>
#include <set>

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

struct Case {
  const char *model;
  const char *mode;
  std::map<std::string, int64_t> dims;
  /// Passes before recompute.
  const char *prefix = "";
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.model << "_" << c.mode;
}

const std::map<std::string, int64_t> kGptDims = {{"batch", 4},
                                                 {"batch_x_seq", 256}};
const std::map<std::string, int64_t> kSmallDims = {{"batch", 4},
                                                   {"batch_x_seq", 64}};

const Case kCases[] = {
    {"cnn", "full", {{"batch", 8}}},
    {"gpt_tiny", "selective", kGptDims},
    {"gpt_tiny", "full", kGptDims},
    {"gpt_tiny", "sqrt", kGptDims},
    {"gpt_tiny_dropout", "selective", kGptDims},
    {"gpt_tiny_dropout", "full", kGptDims},
    {"bert_tiny", "full", {{"batch", 4}}},
    // On llama_tiny as imported (not canonicalized) recompute leaves a use
    // before its definition (the verifier says so); canonicalized it is fine.
    {"llama_tiny", "selective", kSmallDims, "canonicalize,"},
};

std::string dataDir(llvm::StringRef model) {
  // gpt_tiny_dropout shares gpt_tiny's inputs.
  return gmopt::testdataDir() + "/" +
         (model == "gpt_tiny_dropout" ? "gpt_tiny" : model.str()) +
         "/test_data_set_0";
}

/// Five AdamW steps of the ONNX training graph at \p path, compiled with
/// schedule,plan-buffers (nothing else rewritten).
std::vector<double> train(llvm::StringRef path, llvm::StringRef model,
                          const std::map<std::string, int64_t> &dims) {
  auto data = readTestDataSet(dataDir(model));
  EXPECT_TRUE(bool(data)) << errorText(data.takeError());
  if (!data)
    return {};
  OptimizerSpec spec;
  auto runnable = loadRunnableModel(path, dims, nullptr, /*wantOriginal=*/false,
                                    "schedule,plan-buffers", &spec);
  EXPECT_TRUE(bool(runnable))
      << path.str() << ": " << errorText(runnable.takeError());
  if (!runnable)
    return {};
  InputSources sources;
  sources.testData = &*data;
  auto inputs = bindInputs(*runnable->module, sources);
  EXPECT_TRUE(bool(inputs)) << errorText(inputs.takeError());
  if (!inputs)
    return {};
  TrainingOptions options;
  options.executor.mode = AllocationMode::Planned;
  options.executor.threads = 1;
  options.executor.seed = 7;
  options.steps = 5;
  options.learningRate = 0.01f;
  auto result = trainModule(*runnable->module, *inputs, options);
  EXPECT_TRUE(bool(result)) << errorText(result.takeError());
  return result ? result->losses : std::vector<double>();
}

class RecomputeOnnxExportTest : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeOnnxExportTest, ExportedGraphIsValidAndTrainsLikeTheOriginal) {
  const Case &c = GetParam();
  std::string original =
      gmopt::testdataDir() + "/" + c.model + "/training_model.onnx";
  OnnxImportOptions importOptions;
  importOptions.dimBindings = c.dims;
  auto module = importOnnxFile(original, importOptions);
  ASSERT_TRUE(bool(module)) << errorText(module.takeError());
  PassManager manager;
  ASSERT_EQ(
      errorText(manager.addPipeline(std::string(c.prefix) +
                                    "recompute{mode=" + c.mode + "},schedule")),
      "<success>");
  ASSERT_EQ(errorText(manager.run(**module)), "<success>");
  unsigned clones = 0;
  std::map<std::string, unsigned> cloneNames;
  for (const Node &node : (*module)->getGraph().getNodes())
    if (node.getPhase() == Phase::Recompute) {
      ++clones;
      ++cloneNames[node.getName().str()];
    }
  ASSERT_GT(clones, 0u) << "the pass recomputed nothing: the test is void";

  auto model = exportOnnxModel(**module);
  ASSERT_TRUE(bool(model)) << errorText(model.takeError());
  const onnx::GraphProto &graph = model->graph();
  ASSERT_EQ(static_cast<unsigned>(graph.node_size()),
            (*module)->getGraph().getNodes().size());

  // Unique node names, and every value defined once.
  std::set<std::string> nodeNames, defined;
  for (const onnx::ValueInfoProto &input : graph.input())
    EXPECT_TRUE(defined.insert(input.name()).second) << input.name();
  for (const onnx::TensorProto &init : graph.initializer())
    if (!defined.count(init.name()))
      defined.insert(init.name());
  std::set<int64_t> originalSeeds;
  unsigned seededClones = 0;
  auto irNode = (*module)->getGraph().getNodes().begin();
  for (const onnx::NodeProto &node : graph.node()) {
    bool isClone = (irNode++)->getPhase() == Phase::Recompute;
    EXPECT_FALSE(node.name().empty());
    EXPECT_TRUE(nodeNames.insert(node.name()).second)
        << "two nodes named " << node.name();
    for (const std::string &output : node.output()) {
      if (!output.empty()) {
        EXPECT_TRUE(defined.insert(output).second)
            << "value " << output << " defined twice";
      }
    }
    if (node.op_type() != "Dropout")
      continue;
    const onnx::AttributeProto *seed = nullptr;
    for (const onnx::AttributeProto &attr : node.attribute())
      if (attr.name() == "seed")
        seed = &attr;
    // A clone comes after the Dropout it copies and draws with that
    // Dropout's seed; a Dropout nothing copies keeps no seed.
    if (isClone) {
      ASSERT_TRUE(seed) << "clone " << node.name() << " has no seed";
      ++seededClones;
      EXPECT_TRUE(originalSeeds.count(seed->i()))
          << "clone " << node.name() << " has a seed no original has";
    } else if (seed) {
      EXPECT_TRUE(originalSeeds.insert(seed->i()).second)
          << "two original Dropouts share seed " << seed->i();
    }
  }
  // The name of a node that was cloned survives on the original.
  for (const auto &[name, count] : cloneNames) {
    if (!name.empty()) {
      EXPECT_TRUE(nodeNames.count(name)) << name;
    }
  }

  // The re-import checks definition order and verifies.
  OnnxImportOptions reimportOptions;
  auto reimported = importOnnxModel(*model, "exported.onnx", reimportOptions);
  ASSERT_TRUE(bool(reimported)) << errorText(reimported.takeError());
  EXPECT_EQ(errorText(verifyModule(**reimported)), "<success>");
  EXPECT_EQ((*reimported)->getGraph().getNodes().size(),
            (*module)->getGraph().getNodes().size());
  // Random nodes keep their stream ids through the seed: a clone shares
  // its original's stream in the re-import too.
  std::map<uint64_t, unsigned> streamsBefore, streamsAfter;
  for (const Node &node : (*module)->getGraph().getNodes())
    if (auto id = node.getStreamId())
      ++streamsBefore[*id];
  for (const Node &node : (*reimported)->getGraph().getNodes())
    if (auto id = node.getStreamId())
      ++streamsAfter[*id];
  EXPECT_EQ(streamsBefore, streamsAfter);
  if (llvm::StringRef(c.model) == "gpt_tiny_dropout") {
    EXPECT_GT(seededClones, 0u);
  }

  // Written to a file and trained: the original's losses.
  llvm::SmallString<128> dir;
  ASSERT_FALSE(
      llvm::sys::fs::createUniqueDirectory("gmopt-recompute-onnx", dir));
  llvm::SmallString<128> path(dir);
  llvm::sys::path::append(path, "training_model.onnx");
  ASSERT_EQ(errorText(exportOnnxFile(**module, path)), "<success>");
  std::vector<double> expected = train(original, c.model, c.dims);
  std::vector<double> actual = train(path, c.model, {});
  llvm::sys::fs::remove(path);
  llvm::sys::fs::remove(dir);
  ASSERT_EQ(expected.size(), 5u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i != expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]))
        << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, RecomputeOnnxExportTest,
                         ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return std::string(info.param.model) + "_" +
                                  info.param.mode;
                         });

} // namespace
