//===- ExternalDataTest.cpp - Compiling and running without weights -------===//
//
// Tests of lazy external data (issue 11, item 3): initializers stored in an
// external-data file are imported unread (type known, bytes mapped on
// first use), so a model whose weight files are absent imports, folds what
// it can, compiles to a .gm that refers to the files, and says which
// tensors were not read; gmopt-run's executor maps the files (no copy on
// the CPU) and fails with a message naming a missing one. Also: references
// that leave the model directory or the file are refused, a sparse file
// beyond 4 GiB is never read, and thousands of initializers import in
// linear time. A Constant node's external value (issue 34, item 7) is
// imported, folded into an initializer, trained through and written to a
// .gm unread; a reader that needs its numbers names itself, the tensor and
// the absent file. The models are built with the ONNX protobuf API.
//
//===----------------------------------------------------------------------===//

#include "OnnxTestModels.h"
#include "TestSupport.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/OnnxTensor.h"
#include "passes/PassManager.h"
#include "tools/driver/ExternalDataReport.h"
#include "tools/driver/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

/// Marks \p tensor as stored in \p location at \p offset, with the length
/// of its raw_data (none when empty).
void moveToExternal(TP &tensor, const std::string &location, uint64_t offset) {
  uint64_t length = tensor.raw_data().size();
  makeExternal(tensor, location, offset,
               length ? std::optional<uint64_t>(length) : std::nullopt);
}

/// Moves the raw_data of the initializers named \p names into a blob (each
/// at an offset aligned to 64 bytes) referred to as \p location; returns
/// the blob.
std::string externalize(onnx::ModelProto &model, const std::string &location,
                        const std::vector<std::string> &names) {
  std::string blob;
  for (TP &tensor : *model.mutable_graph()->mutable_initializer()) {
    if (std::find(names.begin(), names.end(), tensor.name()) == names.end())
      continue;
    blob.resize((blob.size() + 63) / 64 * 64, '\0');
    uint64_t offset = blob.size();
    blob += tensor.raw_data();
    moveToExternal(tensor, location, offset);
  }
  return blob;
}

const std::vector<std::string> kMlpParams = {"fc1.weight", "fc1.bias",
                                             "fc2.weight", "fc2.bias"};

/// ONNX Runtime's MLP with its parameters as initializers in external data
/// `weights.bin` (fc1 frozen, so a kernel never writes it); the blob, padded
/// to 64 KiB so that it is memory-mapped, is returned in \p blob.
onnx::ModelProto externalMlp(std::string &blob) {
  MlpOptions options;
  options.paramsAsInitializers = true;
  options.frozenFc1 = true;
  options.batch = DimSpec(2);
  onnx::ModelProto model = makeOrtMlp(options);
  blob = externalize(model, "weights.bin", kMlpParams);
  blob.resize(64 * 1024, '\0');
  return model;
}

std::unique_ptr<Module> importOk(const std::string &path) {
  auto module = importOnnxFile(path);
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

const TensorData &dataOf(const Module &module, llvm::StringRef name) {
  const Value *value = module.getGraph().lookupValue(name);
  EXPECT_NE(value, nullptr) << name.str();
  return value->getData();
}

//===----------------------------------------------------------------------===//
// Lazy import
//===----------------------------------------------------------------------===//

TEST(ExternalDataLazy, ImportsWithoutTheFileAndSaysWhatWasNotRead) {
  TempDir dir;
  std::string blob;
  onnx::ModelProto model = externalMlp(blob);
  dir.write("model.onnx", model.SerializeAsString());

  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  const TensorData &weight = dataOf(*module, "fc1.weight");
  EXPECT_TRUE(weight.isExternal());
  EXPECT_FALSE(weight.isLoaded());
  EXPECT_EQ(weight.getType().str(), "f32[8,4]");
  EXPECT_EQ(weight.getSizeInBytes(), 128u);
  EXPECT_EQ(weight.getExternalRef()->location, "weights.bin");

  std::vector<UnreadExternalTensor> unread = findUnreadExternalData(*module);
  ASSERT_EQ(unread.size(), 4u);
  EXPECT_EQ(unread[0].name, "fc1.weight");
  EXPECT_EQ(unread[0].bytes, 128u);
  EXPECT_EQ(unread[0].offset, 0u);
  EXPECT_EQ(unread[0].path, dir.file("weights.bin"));
  EXPECT_FALSE(unread[0].filePresent);
  std::string note;
  llvm::raw_string_ostream os(note);
  printUnreadExternalDataNote(os, "gmopt-compile", unread, /*maxLines=*/2);
  EXPECT_EQ(note, "gmopt-compile: note: 4 external-data tensors (268 bytes) "
                  "were not read, 1 of their files is missing; gmopt-run "
                  "maps them when it runs the model\n"
                  "  fc1.weight: 128 bytes at offset 0 of " +
                      dir.file("weights.bin") +
                      " (missing)\n"
                      "  fc1.bias: 32 bytes at offset 128 of " +
                      dir.file("weights.bin") +
                      " (missing)\n"
                      "  ... and 2 more\n");

  // Asking for the bytes names the file; the answer is remembered.
  std::string message = errorOf(weight.load());
  EXPECT_EQ(message.rfind("cannot open external data file '" +
                              dir.file("weights.bin") + "': ",
                          0),
            0u)
      << message;
  EXPECT_TRUE(weight.failedToLoad());
  EXPECT_TRUE(weight.getBytes().empty());
  EXPECT_FALSE(weight.hasFoldableBytes());
}

TEST(ExternalDataLazy, PresentFileIsMappedOnFirstUseOnly) {
  TempDir dir;
  std::string blob;
  onnx::ModelProto model = externalMlp(blob);
  dir.write("model.onnx", model.SerializeAsString());
  dir.write("weights.bin", blob);

  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  const TensorData &weight = dataOf(*module, "fc1.weight");
  const TensorData &bias = dataOf(*module, "fc1.bias");
  EXPECT_FALSE(weight.isLoaded());
  // A copy shares the state: loading through it loads the original.
  TensorData copy = weight;
  ASSERT_FALSE(bool(copy.load()));
  EXPECT_TRUE(weight.isLoaded());
  EXPECT_FALSE(bias.isLoaded());
  // makeOrtMlp fills parameters with 0.01 * i - 0.1.
  EXPECT_FLOAT_EQ(weight.getFloatElement(0), -0.1f);
  EXPECT_FLOAT_EQ(weight.getFloatElement(31), 0.21f);
  // Both view one mapping of the file.
  EXPECT_EQ(bias.getBytes().data() - weight.getBytes().data(), 128);
  EXPECT_EQ(findUnreadExternalData(*module).size(), 2u);
  EXPECT_TRUE(findUnreadExternalData(*module)[0].filePresent);
}

TEST(ExternalDataLazy, EagerImportStillReadsAtOnce) {
  TempDir dir;
  std::string blob;
  onnx::ModelProto model = externalMlp(blob);
  dir.write("model.onnx", model.SerializeAsString());
  OnnxImportOptions options;
  options.lazyExternalData = false;
  std::string message =
      errorOf(importOnnxFile(dir.file("model.onnx"), options));
  EXPECT_NE(message.find("tensor 'fc1.weight': cannot open external data "
                         "file"),
            std::string::npos)
      << message;
}

TEST(ExternalDataLazy, ReferencesAreCheckedAtImport) {
  TempDir dir;
  dir.write("small.bin", std::string(100, '\0'));
  ASSERT_EQ(::symlink("/etc/passwd", dir.file("passwd.bin").c_str()), 0);
  auto importWith = [&](const std::string &location, uint64_t offset) {
    ModelBuilder b;
    b.input("x", TP::FLOAT, {4});
    moveToExternal(b.initializer<float>("w", TP::FLOAT, {4}, {1, 2, 3, 4}),
                   location, offset);
    b.node("Add", {"x", "w"}, {"s"}, "add0");
    b.output("s");
    dir.write("model.onnx", b.bytes());
    return importOnnxFile(dir.file("model.onnx"));
  };
  std::string model = dir.file("model.onnx");
  // Offset and length against the file, when it is there.
  EXPECT_EQ(errorOf(importWith("small.bin", 96)),
            model + ": tensor 'w': external data (offset 96, 16 bytes) lies "
                    "outside 'small.bin' (100 bytes)");
  EXPECT_EQ(errorOf(importWith("small.bin", 1000)),
            model + ": tensor 'w': external data (offset 1000, 16 bytes) "
                    "lies outside 'small.bin' (100 bytes)");
  EXPECT_TRUE(bool(importWith("small.bin", 84)));
  // Locations that leave the directory, whether or not the file exists.
  EXPECT_EQ(errorOf(importWith("/etc/passwd", 0)),
            model + ": tensor 'w': external data location '/etc/passwd' must "
                    "be a relative path");
  EXPECT_EQ(errorOf(importWith("/nonexistent/w.bin", 0)),
            model + ": tensor 'w': external data location '/nonexistent/w.bin' "
                    "must be a relative path");
  EXPECT_EQ(errorOf(importWith("../w.bin", 0)),
            model + ": tensor 'w': external data location '../w.bin' leaves "
                    "the model directory");
  EXPECT_EQ(errorOf(importWith("sub/../../w.bin", 0)),
            model + ": tensor 'w': external data location 'sub/../../w.bin' "
                    "leaves the model directory");
  EXPECT_EQ(errorOf(importWith("passwd.bin", 0)),
            model + ": tensor 'w': external data location 'passwd.bin' "
                    "resolves to a file outside the model directory");
  // A missing file is no import error: its bytes are not needed yet.
  auto missing = importWith("missing.bin", 1 << 20);
  ASSERT_TRUE(bool(missing)) << llvm::toString(missing.takeError());
  // A file that appears shorter than the reference fails when loaded.
  dir.write("missing.bin", std::string(8, '\0'));
  EXPECT_EQ(errorOf(dataOf(**missing, "w").load()),
            "external data (offset 1048576, 16 bytes) lies outside "
            "'missing.bin' (8 bytes)");
}

//===----------------------------------------------------------------------===//
// Folding
//===----------------------------------------------------------------------===//

/// y = Reshape(x, Add(a, b)) with int64[2] shape constants a and b; \p a
/// external in `shape.bin`, padded to \p aElements elements when larger
/// (then Add's operands disagree and nothing folds anyway).
onnx::ModelProto shapeModel(std::string &blob) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2, 6});
  b.initializer<int64_t>("a", TP::INT64, {2}, {1, 2});
  b.initializer<int64_t>("b", TP::INT64, {2}, {2, 2});
  b.node("Add", {"a", "b"}, {"shape"}, "add0");
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape0");
  b.output("y");
  onnx::ModelProto model = b.model;
  blob = externalize(model, "shape.bin", {"a"});
  return model;
}

unsigned countNodes(const Module &module, llvm::StringRef opType) {
  unsigned n = 0;
  for (const Node &node : module.getGraph().getNodes())
    n += node.getOpType() == opType;
  return n;
}

llvm::Error runPipeline(Module &module, llvm::StringRef pipeline) {
  PassManager passManager;
  if (llvm::Error err = passManager.addPipeline(pipeline))
    return err;
  return passManager.run(module);
}

TEST(ExternalDataFolding, UnavailableTensorIsLeftAlone) {
  TempDir dir;
  std::string blob;
  dir.write("model.onnx", shapeModel(blob).SerializeAsString());
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  // Type inference could not read the shape: y's type is not known.
  EXPECT_FALSE(module->getGraph().getOutput(0)->getType().hasStaticShape());
  ASSERT_FALSE(bool(runPipeline(*module, "canonicalize")));
  EXPECT_EQ(countNodes(*module, "Add"), 1u);
  EXPECT_EQ(countNodes(*module, "Reshape"), 1u);
  EXPECT_TRUE(dataOf(*module, "a").failedToLoad());
}

TEST(ExternalDataFolding, SmallPresentTensorIsReadAndFolded) {
  TempDir dir;
  std::string blob;
  dir.write("model.onnx", shapeModel(blob).SerializeAsString());
  dir.write("shape.bin", blob);
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  EXPECT_EQ(module->getGraph().getOutput(0)->getType().str(), "f32[3,4]");
  ASSERT_FALSE(bool(runPipeline(*module, "canonicalize")));
  EXPECT_EQ(countNodes(*module, "Add"), 0u);
  EXPECT_EQ(countNodes(*module, "Reshape"), 1u);
}

TEST(ExternalDataFolding, LargeTensorIsNeverReadAtCompileTime) {
  // An int64 constant above kMaxFoldedExternalBytes feeds a foldable op: it
  // is not read, so the op stays.
  TempDir dir;
  constexpr int64_t kElements = kMaxFoldedExternalBytes / 8 + 1;
  ModelBuilder b;
  b.input("x", TP::INT64, {kElements});
  b.initializer<int64_t>("big", TP::INT64, {kElements},
                         std::vector<int64_t>(kElements, 1));
  b.initializer<int64_t>("one", TP::INT64, {kElements},
                         std::vector<int64_t>(kElements, 1));
  b.node("Add", {"big", "one"}, {"sum"}, "add0");
  b.node("Add", {"x", "sum"}, {"y"}, "add1");
  b.output("y");
  onnx::ModelProto model = b.model;
  std::string blob = externalize(model, "big.bin", {"big"});
  dir.write("model.onnx", model.SerializeAsString());
  dir.write("big.bin", blob);
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  ASSERT_FALSE(bool(runPipeline(*module, "canonicalize")));
  EXPECT_EQ(countNodes(*module, "Add"), 2u);
  EXPECT_FALSE(dataOf(*module, "big").isLoaded());
  EXPECT_FALSE(dataOf(*module, "big").failedToLoad());
}

//===----------------------------------------------------------------------===//
// Constant nodes (issue 34, item 7)
//===----------------------------------------------------------------------===//

/// The node that holds the external value, named as torchtune's Llama-2
/// export names the rotary positions.
constexpr const char *kRotaryNode = "/layers.0/attn/pos_embeddings/Constant_1";

/// A forward model in the shape of torchtune's rotary embedding: the
/// positions are a Constant node's value, f32[2,4], stored in `rotary.bin`
/// (which need not exist; its bytes are returned in \p blob), and
/// y = MatMul(x * Cos(positions), w) with w an ordinary initializer.
onnx::ModelProto rotaryModel(std::string &blob) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2, 4});
  b.floatInitializer("w", {4, 4});
  onnx::NodeProto &constant =
      b.node("Constant", {}, {"positions"}, kRotaryNode);
  TP &value =
      *ModelBuilder::attr(constant, "value", onnx::AttributeProto::TENSOR)
           .mutable_t();
  value.set_data_type(TP::FLOAT);
  value.add_dims(2);
  value.add_dims(4);
  std::vector<float> positions = {0, 1, 2, 3, 4, 5, 6, 7};
  blob.assign(reinterpret_cast<const char *>(positions.data()),
              positions.size() * sizeof(float));
  makeExternal(value, "rotary.bin", 0, blob.size());
  b.node("Cos", {"positions"}, {"cos"}, "cos0");
  b.node("Mul", {"x", "cos"}, {"rotated"}, "mul0");
  b.node("MatMul", {"rotated", "w"}, {"y"}, "matmul0");
  b.output("y");
  return b.model;
}

const Node *findNode(const Module &module, llvm::StringRef name) {
  for (const Node &node : module.getGraph().getNodes())
    if (node.getName() == name)
      return &node;
  return nullptr;
}

/// The value attribute of the model's Constant node.
const TensorData *constantValue(const Module &module) {
  const Node *node = findNode(module, kRotaryNode);
  if (!node || !node->getAttr("value"))
    return nullptr;
  return &node->getAttr("value")->getTensor();
}

TEST(ExternalDataConstant, ImportLeavesTheValueUnreadAndSaysSo) {
  TempDir dir;
  std::string blob;
  dir.write("model.onnx", rotaryModel(blob).SerializeAsString());
  // Before: "attribute 'value': tensor '<unnamed>': cannot open external
  // data file" at import.
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  const TensorData *value = constantValue(*module);
  ASSERT_NE(value, nullptr);
  EXPECT_TRUE(value->isExternal());
  EXPECT_FALSE(value->isLoaded());
  EXPECT_FALSE(value->failedToLoad());
  EXPECT_EQ(value->getType().str(), "f32[2,4]");
  // Its shape is all the types need.
  EXPECT_EQ(module->getGraph().getOutput(0)->getType().str(), "f32[2,4]");

  std::vector<UnreadExternalTensor> unread = findUnreadExternalData(*module);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0].name, "positions");
  EXPECT_EQ(unread[0].node, kRotaryNode);
  EXPECT_EQ(unread[0].bytes, 32u);
  EXPECT_FALSE(unread[0].filePresent);
  std::string note;
  llvm::raw_string_ostream os(note);
  printUnreadExternalDataNote(os, "gmopt-opt", unread);
  EXPECT_EQ(note, "gmopt-opt: note: 1 external-data tensor (32 bytes) were "
                  "not read, 1 of their files is missing; gmopt-run maps "
                  "them when it runs the model\n"
                  "  positions (node " +
                      std::string(kRotaryNode) + "): 32 bytes at offset 0 of " +
                      dir.file("rotary.bin") + " (missing)\n");
  llvm::json::Object json = unreadExternalDataJson(unread);
  const llvm::json::Object *entry =
      json.getArray("tensors")->front().getAsObject();
  EXPECT_EQ(entry->getString("node"), llvm::StringRef(kRotaryNode));
  EXPECT_EQ(entry->getBoolean("file_present"), false);

  // Eager import still reads it at once.
  OnnxImportOptions eager;
  eager.lazyExternalData = false;
  std::string message = errorOf(importOnnxFile(dir.file("model.onnx"), eager));
  EXPECT_NE(message.find("attribute 'value': tensor '<unnamed>': cannot open "
                         "external data file"),
            std::string::npos)
      << message;
}

TEST(ExternalDataConstant, TrainingCompilesWithoutTheFile) {
  TempDir dir;
  std::string blob;
  dir.write("model.onnx", rotaryModel(blob).SerializeAsString());
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);
  std::unique_ptr<Module> original = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(original);

  // canonicalize turns the Constant into an initializer that carries the
  // reference: nothing is read, not even tried.
  ASSERT_FALSE(bool(runPipeline(*module, "canonicalize")));
  EXPECT_EQ(countNodes(*module, "Constant"), 0u);
  const TensorData &positions = dataOf(*module, "positions");
  EXPECT_TRUE(positions.isExternal());
  EXPECT_FALSE(positions.isLoaded());
  EXPECT_FALSE(positions.failedToLoad());
  EXPECT_EQ(positions.getExternalRef()->location, "rotary.bin");

  // The training step is built and planned from shapes alone.
  llvm::Error err = runPipeline(*module, "autodiff{loss=\"mse:y,target\"}," +
                                             kOnnxRunPipeline.str());
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  EXPECT_FALSE(module->plan.empty());
  EXPECT_FALSE(dataOf(*module, "positions").isLoaded());
  EXPECT_FALSE(dataOf(*module, "positions").failedToLoad());
  std::vector<UnreadExternalTensor> unread = findUnreadExternalData(*module);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0].name, "positions");
  EXPECT_EQ(unread[0].node, "");

  // The .gm refers to the file, and loading it reads nothing.
  auto bytes = writeGmBytes(*module, *original, kOnnxRunPipeline);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto compiled = readGmBytes(*bytes, dir.file("model.gm"), dir.path);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  const TensorData &loaded = dataOf(*compiled->module, "positions");
  EXPECT_TRUE(loaded.isExternal());
  EXPECT_FALSE(loaded.isLoaded());
}

TEST(ExternalDataConstant, AReaderThatNeedsTheValueNamesItselfAndTheTensor) {
  TempDir dir;
  std::string blob;
  dir.write("model.onnx", rotaryModel(blob).SerializeAsString());
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(module);

  // Writing ONNX with the bytes inline needs them.
  EXPECT_EQ(errorOf(exportOnnxModel(*module)),
            "ONNX export needs the value of tensor 'positions' (node " +
                std::string(kRotaryNode) + "), whose external data file '" +
                dir.file("rotary.bin") + "' is absent");
  const TensorData *value = constantValue(*module);
  ASSERT_NE(value, nullptr);
  std::string message = errorOf(
      requireTensorValue(*value, "fold-scale", "positions", kRotaryNode));
  EXPECT_EQ(message, "fold-scale needs the value of tensor 'positions' (node " +
                         std::string(kRotaryNode) +
                         "), whose external data file '" +
                         dir.file("rotary.bin") + "' is absent");

  // Keeping references from its directory (the .gm writer) needs nothing.
  OnnxExportOptions keep;
  keep.keepExternalReferencesFrom = dir.path.str().str();
  auto kept = exportOnnxModel(*module, keep);
  ASSERT_TRUE(bool(kept)) << llvm::toString(kept.takeError());
  const onnx::TensorProto *reference = nullptr;
  for (const onnx::NodeProto &node : kept->graph().node())
    if (node.op_type() == "Constant")
      reference = &node.attribute(0).t();
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(reference->data_location(), TP::EXTERNAL);
  EXPECT_EQ(reference->external_data(0).value(), "rotary.bin");

  // A file that is there but unusable is another message (the reference
  // is checked against the file at import, so it shrinks after).
  dir.write("rotary.bin", blob);
  std::unique_ptr<Module> shrunk = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(shrunk);
  dir.write("rotary.bin", std::string(8, '\0'));
  EXPECT_EQ(errorOf(requireTensorValue(*constantValue(*shrunk), "fold-scale",
                                       "positions")),
            "fold-scale needs the value of tensor 'positions', whose external "
            "data cannot be read: external data (offset 0, 32 bytes) lies "
            "outside 'rotary.bin' (8 bytes)");

  // With the file, the value is read where it is needed, and exported.
  dir.write("rotary.bin", blob);
  std::unique_ptr<Module> present = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(present);
  EXPECT_FALSE(constantValue(*present)->isLoaded());
  auto inlined = exportOnnxModel(*present);
  ASSERT_TRUE(bool(inlined)) << llvm::toString(inlined.takeError());
  EXPECT_TRUE(constantValue(*present)->isLoaded());
  EXPECT_FLOAT_EQ(constantValue(*present)->getFloatElement(7), 7.0f);
  for (const onnx::NodeProto &node : inlined->graph().node()) {
    if (node.op_type() == "Constant") {
      EXPECT_EQ(node.attribute(0).t().raw_data(), blob);
    }
  }
}

//===----------------------------------------------------------------------===//
// .gm files and running
//===----------------------------------------------------------------------===//

ExecutorOptions oneThread() {
  ExecutorOptions options;
  options.threads = 1;
  return options;
}

/// Compiles \p path with the default run pipeline into \p gmPath.
void compileToGm(const std::string &path, const std::string &gmPath) {
  std::unique_ptr<Module> module = importOk(path);
  ASSERT_TRUE(module);
  std::unique_ptr<Module> original = importOk(path);
  ASSERT_TRUE(original);
  ASSERT_FALSE(bool(runPipeline(*module, kOnnxRunPipeline)));
  llvm::Error err = writeGmFile(gmPath, *module, *original, kOnnxRunPipeline);
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  // Nothing was read to compile.
  EXPECT_EQ(findUnreadExternalData(*module).size(), 4u);
}

TEST(ExternalDataGm, CompiledWithoutWeightsRunsWhenTheyArePresent) {
  TempDir dir;
  std::string blob;
  onnx::ModelProto model = externalMlp(blob);
  dir.write("model.onnx", model.SerializeAsString());
  compileToGm(dir.file("model.onnx"), dir.file("model.gm"));

  // Loading reads nothing; the references resolve in the recorded
  // directory.
  auto compiled = readGmFile(dir.file("model.gm"));
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  const TensorData &weight = dataOf(*compiled->module, "fc1.weight");
  EXPECT_TRUE(weight.isExternal());
  EXPECT_FALSE(weight.isLoaded());
  llvm::SmallString<256> realDir;
  ASSERT_FALSE(llvm::sys::fs::real_path(dir.path, realDir));
  EXPECT_EQ(weight.getExternalSource()->getBaseDir(), realDir.str());

  // Without the file, preparing the executor names it.
  auto executable =
      prepareExecutable(*compiled->module, BackendKind::Cpu, oneThread());
  std::string message = errorOf(std::move(executable));
  EXPECT_EQ(message.rfind("initializer '", 0), 0u) << message;
  EXPECT_NE(message.find("': cannot open external data file '" +
                         realDir.str().str() + "/weights.bin': "),
            std::string::npos)
      << message;

  // With it, the CPU executor runs the step from the mapped file.
  dir.write("weights.bin", blob);
  auto again = readGmFile(dir.file("model.gm"));
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  auto runnable =
      prepareExecutable(*again->module, BackendKind::Cpu, oneThread());
  ASSERT_TRUE(bool(runnable)) << llvm::toString(runnable.takeError());
  EXPECT_TRUE(dataOf(*again->module, "fc1.weight").isLoaded());
  // The frozen parameter is used where it lies in the mapping, and holds
  // the file's values.
  const Value *weightValue =
      again->module->getGraph().lookupValue("fc1.weight");
  auto read = (*runnable)->readValue(weightValue);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_FLOAT_EQ(read->getFloatElement(31), 0.21f);
  // Writing it copies it first (the mapping is read-only; the file is never
  // written).
  std::vector<float> zeros(32, 0.0f);
  ASSERT_FALSE(bool((*runnable)->writeValue(
      weightValue, TensorData::fromValues<float>(DType::F32, {8, 4}, zeros))));
  auto written = (*runnable)->readValue(weightValue);
  ASSERT_TRUE(bool(written));
  EXPECT_EQ(written->getFloatElement(31), 0.0);
  EXPECT_FLOAT_EQ(dataOf(*again->module, "fc1.weight").getFloatElement(31),
                  0.21f);

  // Another directory may be named at load time.
  TempDir other;
  other.write("weights.bin", blob);
  auto moved = readGmFile(dir.file("model.gm"), other.path);
  ASSERT_TRUE(bool(moved)) << llvm::toString(moved.takeError());
  EXPECT_EQ(
      dataOf(*moved->module, "fc1.weight").getExternalSource()->getBaseDir(),
      other.path.str());
}

//===----------------------------------------------------------------------===//
// Scale
//===----------------------------------------------------------------------===//

TEST(ExternalDataScale, SparseFileBeyondFourGiBIsNotRead) {
  TempDir dir;
  // 5 GiB of holes: nothing is written to disk.
  constexpr uint64_t kFileBytes = uint64_t(5) << 30;
  {
    int fd = ::open(dir.file("big.bin").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kFileBytes)), 0);
    ::close(fd);
  }
  // Three 800 MiB tensors (2.4 GiB in all) at offsets beyond 2^31 and 2^32,
  // and a small one at the very end.
  ModelBuilder b;
  b.input("x", TP::FLOAT, {200 << 20});
  std::vector<std::pair<std::string, uint64_t>> tensors = {
      {"w0", uint64_t(1) << 30},
      {"w1", (uint64_t(1) << 31) + 4096},
      {"w2", (uint64_t(1) << 32) - 4096}};
  std::string last = "x";
  for (const auto &[name, offset] : tensors) {
    TP &tensor = b.initializer<float>(name, TP::FLOAT, {200 << 20}, {});
    moveToExternal(tensor, "big.bin", offset);
    b.node("Add", {last, name}, {name + "_sum"}, name + "_add");
    last = name + "_sum";
  }
  moveToExternal(b.initializer<float>("tail", TP::FLOAT, {1}, {}), "big.bin",
                 kFileBytes - 4);
  b.node("Mul", {last, "tail"}, {"y"}, "mul");
  b.output("y");
  dir.write("model.onnx", b.bytes());

  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(module);
  EXPECT_LT(seconds, 30.0);
  for (const char *name : {"w0", "w1", "w2", "tail"})
    EXPECT_FALSE(dataOf(*module, name).isLoaded()) << name;
  EXPECT_EQ(dataOf(*module, "w2").getExternalRef()->offset,
            (uint64_t(1) << 32) - 4096);

  // A .gm of it refers to the file: it stays small.
  std::unique_ptr<Module> original = importOk(dir.file("model.onnx"));
  ASSERT_TRUE(original);
  auto bytes = writeGmBytes(*module, *original, "");
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  EXPECT_LT(bytes->size(), 64u * 1024);
  for (const char *name : {"w0", "w1", "w2", "tail"})
    EXPECT_FALSE(dataOf(*module, name).isLoaded()) << name;

  // The tensor past 4 GiB reads (holes read as zeros) through the mapping.
  const TensorData &tail = dataOf(*module, "tail");
  ASSERT_FALSE(bool(tail.load()));
  EXPECT_EQ(tail.getFloatElement(0), 0.0);
  EXPECT_FALSE(dataOf(*module, "w2").isLoaded());
}

/// A chain y = ((x + w0) + w1) + ... over \p n external initializers of
/// f32[4] in `weights.bin` (which need not exist).
onnx::ModelProto manyInitializers(int n) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  std::string last = "x";
  for (int i = 0; i < n; ++i) {
    std::string name = "w" + std::to_string(i);
    moveToExternal(b.initializer<float>(name, TP::FLOAT, {4}, {0, 0, 0, 0}),
                   "weights.bin", uint64_t(i) * 16);
    std::string sum = "s" + std::to_string(i);
    b.node("Add", {last, name}, {sum}, "add" + std::to_string(i));
    last = sum;
  }
  b.output(last);
  return b.model;
}

TEST(ExternalDataScale, TwentyThousandInitializersImportInLinearTime) {
  TempDir dir;
  auto importTime = [&](int n) {
    dir.write("model.onnx", manyInitializers(n).SerializeAsString());
    auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Module> module = importOk(dir.file("model.onnx"));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_TRUE(module);
    if (module) {
      EXPECT_EQ(module->getGraph().getInitializers().size(), size_t(n));
      EXPECT_EQ(findUnreadExternalData(*module).size(), size_t(n));
    }
    return seconds;
  };
  double small = importTime(5000);
  double large = importTime(20000);
  // Linear: about 4x. A per-initializer scan of the others (quadratic)
  // would be 16x; allow much noise from a busy machine.
  EXPECT_LT(large, 30.0);
  EXPECT_LT(large, 12 * small + 0.5) << small << " s vs " << large << " s";
}

} // namespace
