//===- GmFileTest.cpp - Tests of the `.gm` container ----------------------===//
//
// Round trips (a synthetic ONNX Runtime training graph with a signature the
// importer would not infer and a trivial plan; testdata/mlp compiled with
// the default pipeline), determinism, atomic writes, and every way a file
// can be broken: wrong magic, newer or zero format version, truncation at
// many points, trailing bytes, flipped bytes (CRC), a payload that is not
// protobuf, and payloads crafted with the generated proto API whose names,
// steps, enumerations or plan do not fit the embedded model.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/GmFile.h"

#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/gm.pb.h"
#include "ir/serialization/Onnx.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"

#include "OnnxTestModels.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <functional>
#include <set>

using namespace gmopt;
using namespace gmopt::test;

namespace {

constexpr const char *kFileName = "model.gm";

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

/// The error message of loading \p bytes, or "<success>".
std::string loadError(llvm::StringRef bytes) {
  llvm::Expected<CompiledModule> loaded = readGmBytes(bytes, kFileName);
  if (loaded)
    return "<success>";
  return llvm::toString(loaded.takeError());
}

std::unique_ptr<Module> importModel(const onnx::ModelProto &model) {
  auto module = importOnnxBytes(model.SerializeAsString(), "m.onnx");
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

/// Every present value in export order: inputs, initializers, results.
std::vector<const Value *> allValues(const Module &module) {
  std::vector<const Value *> values;
  const Graph &graph = module.getGraph();
  for (const auto &input : graph.getInputs())
    values.push_back(input.get());
  for (const auto &init : graph.getInitializers())
    values.push_back(init.get());
  for (const Node &node : graph.getNodes())
    for (Value *result : node.getResults())
      if (result)
        values.push_back(result);
  return values;
}

std::string nameOf(const Value *value) {
  return value ? value->getName().str() : std::string("<none>");
}

/// Expects \p loaded to carry the same signature as \p expected, value for
/// value (compared by name, which the writer made unique).
void expectSameSignature(const Module &expected, const Module &loaded) {
  const TrainingSignature &a = expected.getSignature(),
                          &b = loaded.getSignature();
  ASSERT_EQ(a.getParams().size(), b.getParams().size());
  for (size_t i = 0; i != a.getParams().size(); ++i) {
    const ParamInfo &pa = a.getParams()[i], &pb = b.getParams()[i];
    EXPECT_EQ(nameOf(pa.param), nameOf(pb.param)) << "param " << i;
    EXPECT_EQ(pa.trainable, pb.trainable) << "param " << i;
    EXPECT_EQ(nameOf(pa.grad), nameOf(pb.grad)) << "param " << i;
    EXPECT_EQ(nameOf(pa.accumulator), nameOf(pb.accumulator)) << "param " << i;
    ASSERT_EQ(pa.accumulateNode == nullptr, pb.accumulateNode == nullptr);
    if (pa.accumulateNode) {
      EXPECT_EQ(pa.accumulateNode->getName(), pb.accumulateNode->getName());
      EXPECT_EQ(pb.accumulateNode->getGraph(), &loaded.getGraph());
    }
  }
  ASSERT_EQ(a.getDataInputs().size(), b.getDataInputs().size());
  for (size_t i = 0; i != a.getDataInputs().size(); ++i)
    EXPECT_EQ(nameOf(a.getDataInputs()[i]), nameOf(b.getDataInputs()[i]));
  EXPECT_EQ(nameOf(a.getLoss()), nameOf(b.getLoss()));
  EXPECT_EQ(nameOf(a.getLossGradSeed()), nameOf(b.getLossGradSeed()));
  EXPECT_EQ(nameOf(a.getLazyResetGrad()), nameOf(b.getLazyResetGrad()));
}

/// Expects \p loaded's plan to equal \p expected's, value for value, with
/// every figure.
void expectSamePlan(const Module &expected, const Module &loaded) {
  const ExecutionPlan &a = expected.plan, &b = loaded.plan;
  ASSERT_EQ(a.empty(), b.empty());
  std::vector<const Value *> va = allValues(expected), vb = allValues(loaded);
  ASSERT_EQ(va.size(), vb.size());
  llvm::DenseMap<const Value *, const Value *> map;
  for (size_t i = 0; i != va.size(); ++i)
    map[va[i]] = vb[i];
  EXPECT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i != va.size(); ++i) {
    const BufferAssignment *x = a.lookup(va[i]), *y = b.lookup(vb[i]);
    ASSERT_EQ(x == nullptr, y == nullptr) << nameOf(va[i]);
    if (!x)
      continue;
    std::string where = nameOf(va[i]);
    EXPECT_EQ(x->kind, y->kind) << where;
    EXPECT_EQ(x->category, y->category) << where;
    EXPECT_EQ(x->offset, y->offset) << where;
    EXPECT_EQ(x->size, y->size) << where;
    EXPECT_EQ(x->firstStep, y->firstStep) << where;
    EXPECT_EQ(x->lastStep, y->lastStep) << where;
    EXPECT_EQ(x->aliasOf ? map.lookup(x->aliasOf) : nullptr, y->aliasOf)
        << where;
  }
  EXPECT_EQ(a.arenaBytes, b.arenaBytes);
  // Workspaces, matched by schedule position.
  EXPECT_EQ(a.workspaces.size(), b.workspaces.size());
  std::vector<const Node *> nodesB;
  for (const Node &node : loaded.getGraph().getNodes())
    nodesB.push_back(&node);
  size_t position = 0;
  for (const Node &nodeA : expected.getGraph().getNodes()) {
    ASSERT_LT(position, nodesB.size());
    const WorkspaceAssignment *x = a.lookupWorkspace(&nodeA),
                              *y = b.lookupWorkspace(nodesB[position++]);
    ASSERT_EQ(x == nullptr, y == nullptr) << nodeA.describe();
    if (!x)
      continue;
    EXPECT_EQ(x->offset, y->offset);
    EXPECT_EQ(x->size, y->size);
    EXPECT_EQ(x->step, y->step);
  }
  const MemoryFigures &fa = a.figures, &fb = b.figures;
  EXPECT_EQ(fa.workspaceBytes, fb.workspaceBytes);
  EXPECT_EQ(fa.naiveBytes, fb.naiveBytes);
  EXPECT_EQ(fa.eagerEstimateBytes, fb.eagerEstimateBytes);
  EXPECT_EQ(fa.lowerBoundBytes, fb.lowerBoundBytes);
  EXPECT_EQ(fa.lowerBoundStep, fb.lowerBoundStep);
  EXPECT_EQ(fa.arenaBytes, fb.arenaBytes);
  EXPECT_EQ(fa.persistentBytes, fb.persistentBytes);
  EXPECT_EQ(fa.inPlaceSavedBytes, fb.inPlaceSavedBytes);
}

/// A valid `.gm` image of ONNX Runtime's MLP training graph (static batch):
/// the rewritten module has a trivial plan, a signature the importer would
/// not infer and, before writing, duplicate and missing names; the
/// original has its inferred signature and a trivial plan too.
class GmFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    MlpOptions options;
    options.batch = DimSpec(2);
    onnx::ModelProto model = makeOrtMlp(options);
    rewritten = importModel(model);
    original = importModel(model);
    ASSERT_TRUE(rewritten && original);
    rewritten->dimBindings["batch"] = 2;
    original->dimBindings["batch"] = 2;

    Graph &graph = rewritten->getGraph();
    // Names are not identities: give relu_out fc1_out's name, take one
    // result's name away, and leave a node unnamed and two with one name.
    graph.lookupValue("relu_out")->setName("fc1_out");
    graph.lookupValue("logits_grad")->setName("");
    auto it = graph.begin();
    (it++)->setName("");
    (it++)->setName("Twin");
    (it++)->setName("Twin");

    // A signature inference would not give: fc2.bias frozen, no seed.
    TrainingSignature &sig = rewritten->getSignature();
    ASSERT_EQ(sig.getParams().size(), 4u);
    const Value *fc2Bias = sig.getParams()[3].param;
    sig.setTrainable(fc2Bias, false);
    sig.setGrad(fc2Bias, nullptr);
    sig.setAccumulation(fc2Bias, nullptr, nullptr);
    sig.setLossGradSeed(nullptr);

    auto plan = makeTrivialPlan(*rewritten);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    // Kernel scratch for the second node, above the values' slices.
    WorkspaceAssignment &workspace =
        plan->workspaces[&*std::next(graph.begin())];
    workspace.offset = plan->arenaBytes;
    workspace.size = 512;
    workspace.step = 1;
    plan->arenaBytes += 512;
    plan->figures.workspaceBytes = 512;
    rewritten->plan = std::move(*plan);
    auto originalPlan = makeTrivialPlan(*original);
    ASSERT_TRUE(bool(originalPlan)) << llvm::toString(originalPlan.takeError());
    original->plan = std::move(*originalPlan);

    auto bytes = writeGmBytes(*rewritten, *original, kPipeline);
    ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
    image = std::move(*bytes);
  }

  /// The payload of the image, parsed.
  gm::GmFile payload() const {
    gm::GmFile file;
    EXPECT_TRUE(file.ParseFromString(image.substr(kGmHeaderSize)));
    return file;
  }

  /// Loads the image after \p edit changed its payload.
  std::string loadEdited(const std::function<void(gm::GmFile &)> &edit) {
    gm::GmFile file = payload();
    edit(file);
    return loadError(wrapGmPayload(file.SerializeAsString()));
  }

  static constexpr const char *kPipeline = "canonicalize{dce=true}";
  std::unique_ptr<Module> rewritten, original;
  std::string image;
};

TEST_F(GmFileTest, HeaderLayout) {
  ASSERT_GT(image.size(), kGmHeaderSize);
  EXPECT_EQ(image.substr(0, 8), std::string("GMOPT\0GM", 8));
  EXPECT_EQ(image.substr(8, 4), std::string("\x02\0\0\0", 4));
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = length << 8 | static_cast<uint8_t>(image[12 + i]);
  EXPECT_EQ(length, image.size() - kGmHeaderSize);
}

TEST_F(GmFileTest, WritingMakesNamesUnique) {
  std::set<std::string> names;
  for (const Value *value : allValues(*rewritten)) {
    EXPECT_FALSE(value->getName().empty());
    EXPECT_TRUE(names.insert(value->getName().str()).second)
        << "duplicate " << value->getName().str();
  }
  std::set<std::string> nodeNames;
  for (const Node &node : rewritten->getGraph().getNodes()) {
    EXPECT_FALSE(node.getName().empty());
    EXPECT_TRUE(nodeNames.insert(node.getName().str()).second);
  }
  // The first holder keeps its name; later duplicates are renamed.
  EXPECT_EQ(rewritten->getGraph().lookupValue("fc1_out")->getDefiningNode(),
            &*rewritten->getGraph().begin());
  EXPECT_EQ(std::next(rewritten->getGraph().begin(), 1)->getName(), "Twin");
  EXPECT_EQ(std::next(rewritten->getGraph().begin(), 2)->getName(),
            "gmopt_node_1");
}

TEST_F(GmFileTest, RoundTripKeepsEverything) {
  llvm::Expected<CompiledModule> loaded = readGmBytes(image, kFileName);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  ASSERT_TRUE(loaded->module && loaded->original);
  EXPECT_EQ(loaded->pipeline, kPipeline);
  EXPECT_EQ(loaded->producerVersion, getGmoptVersion().str());
  EXPECT_FALSE(getGmoptVersion().empty());

  Module &module = *loaded->module;
  expectIsomorphic(*rewritten, module);
  expectIsomorphic(*original, *loaded->original);
  expectSameSignature(*rewritten, module);
  expectSameSignature(*original, *loaded->original);
  expectSamePlan(*rewritten, module);
  expectSamePlan(*original, *loaded->original);
  EXPECT_EQ(errorText(module.plan.validate(module)), "<success>");

  // The stored signature wins over the importer's inference.
  EXPECT_FALSE(module.getSignature().getParams()[3].trainable);
  EXPECT_EQ(module.getSignature().getLossGradSeed(), nullptr);
  EXPECT_TRUE(loaded->original->getSignature().getParams()[3].trainable);
  EXPECT_NE(loaded->original->getSignature().getLossGradSeed(), nullptr);

  std::map<std::string, int64_t> dims = {{"batch", 2}};
  EXPECT_EQ(module.dimBindings, dims);
  EXPECT_EQ(loaded->original->dimBindings, dims);
  bool recorded = false;
  for (const auto &[key, value] : module.metadata)
    if (key == kGmPipelineMetadataKey) {
      EXPECT_EQ(value, kPipeline);
      recorded = true;
    }
  EXPECT_TRUE(recorded);
}

TEST_F(GmFileTest, WritingIsDeterministic) {
  auto again = writeGmBytes(*rewritten, *original, kPipeline);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(*again, image);
}

TEST_F(GmFileTest, ModulesWithoutPlansRoundTrip) {
  rewritten->plan.clear();
  original->plan.clear();
  auto bytes = writeGmBytes(*rewritten, *original, "");
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  llvm::Expected<CompiledModule> loaded = readGmBytes(*bytes, kFileName);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_TRUE(loaded->module->plan.empty());
  EXPECT_TRUE(loaded->original->plan.empty());
  EXPECT_EQ(loaded->pipeline, "");
  for (const auto &entry : loaded->module->metadata)
    EXPECT_NE(entry.first, kGmPipelineMetadataKey);
}

TEST_F(GmFileTest, WriterRefusesAnInvalidPlan) {
  Value *relu = rewritten->getGraph().lookupValue("fc1_out");
  ASSERT_TRUE(relu);
  rewritten->plan.buffers.erase(relu);
  std::string message =
      errorText(writeGmBytes(*rewritten, *original, kPipeline).takeError());
  EXPECT_NE(message.find("cannot write the rewritten model: invalid plan"),
            std::string::npos)
      << message;
}

TEST_F(GmFileTest, WrongMagic) {
  std::string bytes = image;
  bytes[0] = 'X';
  EXPECT_EQ(loadError(bytes), "model.gm: not a gmopt .gm file");
  // An ONNX model is not a .gm file either.
  EXPECT_EQ(loadError(makeOrtMlp().SerializeAsString()),
            "model.gm: not a gmopt .gm file");
  EXPECT_EQ(loadError(""),
            "model.gm: not a gmopt .gm file (the file is empty)");
}

TEST_F(GmFileTest, NewerAndInvalidFormatVersions) {
  std::string payloadBytes = image.substr(kGmHeaderSize);
  EXPECT_EQ(loadError(wrapGmPayload(payloadBytes, 7)),
            "model.gm: .gm format version 7 is newer than this gmopt (2)");
  EXPECT_EQ(loadError(wrapGmPayload(payloadBytes, 0)),
            "model.gm: invalid .gm format version 0");
  EXPECT_EQ(loadError(wrapGmPayload(payloadBytes, kGmFormatVersion)),
            "<success>");
  // Version 2 only widened names from `string` to `bytes` (the same wire
  // format): a version-1 file with UTF-8 names loads as it always did.
  EXPECT_EQ(loadError(wrapGmPayload(payloadBytes, 1)), "<success>");
}

TEST_F(GmFileTest, NamesNeedNotBeUtf8) {
  // ONNX allows any bytes in a name; what the writer writes, the reader
  // must load, and libprotobuf must not complain on stderr either way.
  Graph &graph = rewritten->getGraph();
  Node &node = *std::next(graph.begin(), 3);
  node.setName("node\xff");
  Value *value = graph.lookupValue("fc1_out");
  ASSERT_TRUE(value);
  value->setName("value\xfe\xff");
  testing::internal::CaptureStderr();
  auto bytes = writeGmBytes(*rewritten, *original, "pipeline\xff");
  std::string writeLog = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  EXPECT_EQ(writeLog, "");
  testing::internal::CaptureStderr();
  llvm::Expected<CompiledModule> loaded = readGmBytes(*bytes, kFileName);
  std::string readLog = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(readLog, "");
  EXPECT_EQ(loaded->pipeline, "pipeline\xff");
  Graph &loadedGraph = loaded->module->getGraph();
  EXPECT_NE(loadedGraph.lookupValue("value\xfe\xff"), nullptr);
  EXPECT_EQ(std::next(loadedGraph.begin(), 3)->getName(), "node\xff");
  expectIsomorphic(*rewritten, *loaded->module);
  expectSamePlan(*rewritten, *loaded->module);
}

TEST_F(GmFileTest, InvalidUtf8InAStoredNameIsOneError) {
  // A crafted, CRC-valid file whose plan names a value that is not UTF-8:
  // one error of ours, no libprotobuf log line before it.
  testing::internal::CaptureStderr();
  std::string message = loadEdited([](gm::GmFile &file) {
    file.mutable_rewritten()->mutable_plan()->mutable_buffers(0)->set_value(
        "\xff\xfe");
  });
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(message, "model.gm: plan refers to unknown value '\xff\xfe'");
}

TEST_F(GmFileTest, APlanWhoseStorageDiesBeforeItsLastReaderIsRefused) {
  // A crafted, CRC-valid file whose plan ends an arena buffer at its own
  // definition although the graph reads it later: the recorded intervals
  // are checked against liveness re-derived from the graph, not trusted
  // (such a plan let a later buffer take the bytes and trained wrongly).
  bool edited = false;
  std::string message = loadEdited([&](gm::GmFile &file) {
    gm::Plan *plan = file.mutable_rewritten()->mutable_plan();
    for (gm::Buffer &buffer : *plan->mutable_buffers())
      if (!edited && buffer.kind() == gm::STORAGE_KIND_ARENA &&
          buffer.last_step() > buffer.first_step()) {
        buffer.set_last_step(buffer.first_step());
        edited = true;
      }
  });
  ASSERT_TRUE(edited);
  EXPECT_NE(message.find("is live over steps"), std::string::npos) << message;
  EXPECT_NE(message.find("but its arena storage"), std::string::npos)
      << message;
}

TEST_F(GmFileTest, TruncatedAnywhere) {
  std::vector<size_t> cuts = {1,
                              4,
                              7,
                              8,
                              12,
                              19,
                              20,
                              23,
                              24,
                              25,
                              40,
                              image.size() / 2,
                              image.size() - 1};
  for (size_t cut : cuts) {
    std::string message = loadError(llvm::StringRef(image).take_front(cut));
    EXPECT_EQ(message.rfind("model.gm: truncated .gm file", 0), 0u)
        << "cut at " << cut << ": " << message;
  }
}

TEST_F(GmFileTest, TrailingBytes) {
  std::string message = loadError(image + "x");
  EXPECT_EQ(message, llvm::formatv("model.gm: corrupt .gm file: payload length "
                                   "mismatch: the header declares {0} bytes "
                                   "but {1} follow",
                                   image.size() - kGmHeaderSize,
                                   image.size() - kGmHeaderSize + 1)
                         .str());
}

TEST_F(GmFileTest, FlippedBytesFailTheCrc) {
  for (size_t at : {kGmHeaderSize, kGmHeaderSize + 1, image.size() / 2,
                    image.size() - 1, size_t(20), size_t(23)}) {
    std::string bytes = image;
    bytes[at] ^= 0x20;
    std::string message = loadError(bytes);
    EXPECT_EQ(message.rfind("model.gm: corrupt .gm file: CRC-32 mismatch", 0),
              0u)
        << "byte " << at << ": " << message;
  }
}

TEST_F(GmFileTest, PayloadThatIsNotProtobuf) {
  EXPECT_EQ(loadError(wrapGmPayload("\xff\xff\xff\xff\xff")),
            "model.gm: corrupt .gm file: the payload is not a valid "
            "gmopt.gm.GmFile message");
}

TEST_F(GmFileTest, MissingModels) {
  EXPECT_EQ(loadEdited([](gm::GmFile &f) { f.clear_rewritten(); }),
            "model.gm: the .gm file holds no rewritten model");
  EXPECT_EQ(loadEdited([](gm::GmFile &f) { f.clear_original(); }),
            "model.gm: the .gm file holds no original model");
}

TEST_F(GmFileTest, EmbeddedModelThatDoesNotImport) {
  std::string message = loadEdited(
      [](gm::GmFile &f) { f.mutable_rewritten()->set_onnx("garbage"); });
  EXPECT_EQ(message.rfind("model.gm: embedded rewritten model: not a valid "
                          "ONNX model",
                          0),
            0u)
      << message;
  // An unknown op in the original model.
  message = loadEdited([](gm::GmFile &f) {
    onnx::ModelProto model;
    ASSERT_TRUE(model.ParseFromString(f.original().onnx()));
    model.mutable_graph()->mutable_node(0)->set_op_type("Frobnicate");
    f.mutable_original()->set_onnx(model.SerializeAsString());
  });
  EXPECT_EQ(message.rfind("model.gm: embedded original model: unknown op "
                          "'Frobnicate'",
                          0),
            0u)
      << message;
}

TEST_F(GmFileTest, DimBindings) {
  EXPECT_EQ(loadEdited([](gm::GmFile &f) {
              f.mutable_dim_bindings(0)->set_extent(-3);
            }),
            "model.gm: dimension 'batch' is bound to -3, a negative extent");
  EXPECT_EQ(loadEdited([](gm::GmFile &f) {
              *f.add_dim_bindings() = f.dim_bindings(0);
            }),
            "model.gm: dimension 'batch' is bound twice");
}

TEST_F(GmFileTest, PlanReferencesOutOfRange) {
  EXPECT_EQ(
      loadEdited([](gm::GmFile &f) {
        f.mutable_rewritten()->mutable_plan()->mutable_buffers(0)->set_value(
            "x");
      }),
      "model.gm: plan refers to unknown value 'x'");
  EXPECT_EQ(
      loadEdited([](gm::GmFile &f) {
        f.mutable_original()->mutable_plan()->mutable_buffers(3)->set_value(
            "nope");
      }),
      "model.gm: original model: plan refers to unknown value 'nope'");

  // Steps past the schedule.
  std::string message = loadEdited([](gm::GmFile &f) {
    gm::Plan *plan = f.mutable_rewritten()->mutable_plan();
    plan->mutable_buffers(0)->set_last_step(plan->schedule_size());
  });
  EXPECT_NE(message.find("out of range for a schedule of"), std::string::npos)
      << message;
}

TEST_F(GmFileTest, WorkspaceReferences) {
  auto edit = [&](const std::function<void(gm::Workspace &)> &change) {
    return loadEdited([&](gm::GmFile &f) {
      change(*f.mutable_rewritten()->mutable_plan()->mutable_workspaces(0));
    });
  };
  std::string message = edit([](gm::Workspace &w) { w.set_step(1000); });
  EXPECT_NE(message.find("a workspace is at step 1000, out of range"),
            std::string::npos)
      << message;
  message = edit([](gm::Workspace &w) { w.set_offset(~uint64_t(0) - 8); });
  EXPECT_NE(message.find("does not fit in the"), std::string::npos) << message;
  message = edit([](gm::Workspace &w) { w.set_size(100); });
  EXPECT_NE(message.find("is empty or not aligned"), std::string::npos)
      << message;
  // Over a value's slice that is live at the same step.
  message = edit([](gm::Workspace &w) { w.set_offset(0); });
  EXPECT_NE(message.find("overlap in both address and live range"),
            std::string::npos)
      << message;
  message = loadEdited([](gm::GmFile &f) {
    gm::Plan *plan = f.mutable_rewritten()->mutable_plan();
    *plan->add_workspaces() = plan->workspaces(0);
  });
  EXPECT_NE(message.find("plan has two workspaces for"), std::string::npos)
      << message;
}

TEST_F(GmFileTest, AliasReferences) {
  // Make some arena buffer an alias of a value that does not exist, then an
  // alias of nothing; a non-alias may not name one.
  auto findArena = [](gm::Plan &plan) -> gm::Buffer * {
    for (gm::Buffer &buffer : *plan.mutable_buffers())
      if (buffer.kind() == gm::STORAGE_KIND_ARENA)
        return &buffer;
    return nullptr;
  };
  std::string message = loadEdited([&](gm::GmFile &f) {
    gm::Buffer *buffer = findArena(*f.mutable_rewritten()->mutable_plan());
    ASSERT_TRUE(buffer);
    buffer->set_kind(gm::STORAGE_KIND_ALIAS);
    buffer->set_alias_of("ghost");
  });
  EXPECT_NE(message.find("plan refers to unknown value 'ghost' (aliased by"),
            std::string::npos)
      << message;
  message = loadEdited([&](gm::GmFile &f) {
    gm::Buffer *buffer = findArena(*f.mutable_rewritten()->mutable_plan());
    ASSERT_TRUE(buffer);
    buffer->set_kind(gm::STORAGE_KIND_ALIAS);
  });
  EXPECT_NE(message.find("is an alias but names no value it aliases"),
            std::string::npos)
      << message;
  message = loadEdited([&](gm::GmFile &f) {
    gm::Buffer *buffer = findArena(*f.mutable_rewritten()->mutable_plan());
    ASSERT_TRUE(buffer);
    buffer->set_alias_of("input");
  });
  EXPECT_NE(message.find("is not an alias but names 'input'"),
            std::string::npos)
      << message;
}

TEST_F(GmFileTest, SignatureReferencesOutOfRange) {
  EXPECT_EQ(
      loadEdited([](gm::GmFile &f) {
        f.mutable_rewritten()->mutable_signature()->mutable_params(0)->set_grad(
            "nope");
      }),
      "model.gm: signature refers to unknown value 'nope' (the gradient "
      "of parameter 'fc1.weight')");
  EXPECT_EQ(loadEdited([](gm::GmFile &f) {
              f.mutable_rewritten()->mutable_signature()->set_loss("gone");
            }),
            "model.gm: signature refers to unknown value 'gone' (the loss)");
  EXPECT_EQ(loadEdited([](gm::GmFile &f) {
              f.mutable_original()
                  ->mutable_signature()
                  ->mutable_params(1)
                  ->set_accumulate_node("NoSuchNode");
            }),
            "model.gm: original model: signature refers to unknown node "
            "'NoSuchNode' (the accumulation node of parameter 'fc1.bias')");
  EXPECT_EQ(loadEdited([](gm::GmFile &f) {
              gm::TrainingSignature *sig =
                  f.mutable_rewritten()->mutable_signature();
              *sig->add_params() = sig->params(0);
            }),
            "model.gm: signature lists parameter 'fc1.weight' twice");
  // Names resolve, but a node result cannot be a parameter.
  std::string message = loadEdited([](gm::GmFile &f) {
    f.mutable_rewritten()->mutable_signature()->mutable_params(0)->set_value(
        "logits");
  });
  EXPECT_EQ(message.rfind("model.gm: ", 0), 0u);
  EXPECT_NE(message.find("is a node result"), std::string::npos) << message;
}

TEST_F(GmFileTest, ScheduleMustMatchTheModel) {
  std::string message = loadEdited([](gm::GmFile &f) {
    gm::Plan *plan = f.mutable_rewritten()->mutable_plan();
    plan->mutable_schedule()->SwapElements(0, 1);
  });
  EXPECT_NE(message.find("plan schedule does not match the model's node "
                         "order: step 0"),
            std::string::npos)
      << message;
  message = loadEdited([](gm::GmFile &f) {
    f.mutable_rewritten()->mutable_plan()->mutable_schedule()->RemoveLast();
  });
  EXPECT_NE(message.find("plan schedule has"), std::string::npos) << message;
}

TEST_F(GmFileTest, InvalidEnumerationsAndSizes) {
  EXPECT_EQ(
      loadEdited([](gm::GmFile &f) {
        f.mutable_rewritten()->mutable_plan()->mutable_buffers(0)->set_kind(
            gm::STORAGE_KIND_UNSPECIFIED);
      }),
      "model.gm: plan: the buffer of 'input' has invalid storage kind 0");
  EXPECT_EQ(
      loadEdited([](gm::GmFile &f) {
        f.mutable_rewritten()->mutable_plan()->mutable_buffers(0)->set_category(
            static_cast<gm::MemoryCategory>(42));
      }),
      "model.gm: plan: the buffer of 'input' has invalid memory "
      "category 42");
  std::string message = loadEdited([](gm::GmFile &f) {
    f.mutable_rewritten()->mutable_plan()->mutable_buffers(0)->set_size(1);
  });
  EXPECT_NE(message.find("has size 1 but its type f32[2,4] needs 32 bytes"),
            std::string::npos)
      << message;
}

TEST_F(GmFileTest, PlanThatFailsValidation) {
  // Two arena slices at one offset over overlapping live ranges.
  std::string message = loadEdited([](gm::GmFile &f) {
    gm::Plan *plan = f.mutable_rewritten()->mutable_plan();
    std::vector<gm::Buffer *> arena;
    for (gm::Buffer &buffer : *plan->mutable_buffers())
      if (buffer.kind() == gm::STORAGE_KIND_ARENA)
        arena.push_back(&buffer);
    ASSERT_GE(arena.size(), 2u);
    for (gm::Buffer *buffer : arena) {
      buffer->set_offset(0);
      buffer->set_first_step(0);
      buffer->set_last_step(0);
    }
  });
  EXPECT_EQ(message.rfind("model.gm: invalid plan: ", 0), 0u) << message;
  EXPECT_NE(message.find("overlap"), std::string::npos) << message;

  // A value without a buffer.
  message = loadEdited([](gm::GmFile &f) {
    f.mutable_rewritten()->mutable_plan()->mutable_buffers()->RemoveLast();
  });
  EXPECT_EQ(message.rfind("model.gm: invalid plan: ", 0), 0u) << message;
  EXPECT_NE(message.find("has no buffer"), std::string::npos) << message;

  // Two buffers for one value.
  message = loadEdited([](gm::GmFile &f) {
    gm::Plan *plan = f.mutable_rewritten()->mutable_plan();
    *plan->add_buffers() = plan->buffers(0);
  });
  EXPECT_EQ(message, "model.gm: plan has two buffers for value 'input'");

  // An offset so large that offset + size wraps around.
  message = loadEdited([](gm::GmFile &f) {
    for (gm::Buffer &buffer :
         *f.mutable_rewritten()->mutable_plan()->mutable_buffers())
      if (buffer.kind() == gm::STORAGE_KIND_ARENA) {
        buffer.set_offset(~uint64_t(0) - 255);
        return;
      }
    FAIL() << "no arena buffer";
  });
  EXPECT_NE(message.find("does not fit in the"), std::string::npos) << message;
}

TEST_F(GmFileTest, FileWritesAreAtomic) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("gmfile-test", dir));
  auto listDir = [&] {
    std::set<std::string> entries;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec))
      entries.insert(llvm::sys::path::filename(it->path()).str());
    return entries;
  };
  llvm::SmallString<128> path(dir);
  llvm::sys::path::append(path, "out.gm");

  // Over an existing file: replaced, and nothing else left behind.
  {
    std::error_code ec;
    llvm::raw_fd_ostream stale(path, ec);
    ASSERT_FALSE(ec);
    stale << "stale";
  }
  ASSERT_EQ(errorText(writeGmFile(path, *rewritten, *original, kPipeline)),
            "<success>");
  EXPECT_EQ(listDir(), std::set<std::string>{"out.gm"});
  auto written = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(written));
  EXPECT_EQ((*written)->getBuffer(), image);
  llvm::Expected<CompiledModule> loaded = readGmFile(path);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());

  // A target that cannot be replaced (a non-empty directory): an error
  // naming it, and no temporary file left.
  llvm::SmallString<128> blocked(dir);
  llvm::sys::path::append(blocked, "blocked.gm");
  ASSERT_FALSE(llvm::sys::fs::create_directory(blocked));
  llvm::SmallString<128> inside(blocked);
  llvm::sys::path::append(inside, "keep");
  ASSERT_FALSE(llvm::sys::fs::create_directory(inside));
  std::string message =
      errorText(writeGmFile(blocked, *rewritten, *original, kPipeline));
  EXPECT_EQ(message.rfind((blocked + ": ").str(), 0), 0u) << message;
  EXPECT_EQ(listDir(), (std::set<std::string>{"blocked.gm", "out.gm"}));

  // A directory that does not exist.
  llvm::SmallString<128> missing(dir);
  llvm::sys::path::append(missing, "no", "such", "dir.gm");
  message = errorText(writeGmFile(missing, *rewritten, *original, kPipeline));
  EXPECT_NE(message.find("cannot create a temporary file"), std::string::npos)
      << message;

  ASSERT_FALSE(llvm::sys::fs::remove_directories(dir));
}

TEST(GmFile, ReadingAMissingFile) {
  llvm::Expected<CompiledModule> loaded =
      readGmFile("/nonexistent/gmopt/model.gm");
  ASSERT_FALSE(bool(loaded));
  EXPECT_EQ(llvm::toString(loaded.takeError()),
            "/nonexistent/gmopt/model.gm: No such file or directory");
}

TEST(GmFile, CompiledMlpRoundTrip) {
  std::string path = gmopt::testdataDir() + "/mlp/training_model.onnx";
  OnnxImportOptions options;
  options.dimBindings = {{"batch", 4}};
  auto module = importOnnxFile(path, options);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  auto original = importOnnxFile(path, options);
  ASSERT_TRUE(bool(original)) << llvm::toString(original.takeError());

  PassManager passManager;
  ASSERT_EQ(errorText(passManager.addPipeline(kDefaultPipeline)), "<success>");
  ASSERT_EQ(errorText(passManager.run(**module)), "<success>");
  std::string pipeline = passManager.getPipelineString();
  (*module)->metadata.emplace_back(kGmPipelineMetadataKey.str(), pipeline);
  if ((*module)->plan.empty()) {
    // A default pipeline without a planner still round-trips a plan.
    auto plan = makeTrivialPlan(**module);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    (*module)->plan = std::move(*plan);
  }

  auto bytes = writeGmBytes(**module, **original, pipeline);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  llvm::Expected<CompiledModule> loaded = readGmBytes(*bytes, "mlp.gm");
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->pipeline, pipeline);
  expectIsomorphic(**module, *loaded->module);
  expectIsomorphic(**original, *loaded->original);
  expectSameSignature(**module, *loaded->module);
  expectSameSignature(**original, *loaded->original);
  expectSamePlan(**module, *loaded->module);
  EXPECT_TRUE(loaded->original->plan.empty());
  EXPECT_TRUE(loaded->module->getSignature().hasGradients());
  EXPECT_EQ(loaded->module->getSignature().numTrainable(), 6u);

  // Loading and writing again gives the same bytes.
  auto again = writeGmBytes(*loaded->module, *loaded->original, pipeline);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(*again, *bytes);
}

} // namespace
