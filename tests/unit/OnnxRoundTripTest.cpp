//===- OnnxRoundTripTest.cpp - Tests of ONNX export and round trips -------===//
//
// import -> export -> import must give an isomorphic graph (same node
// sequence, ops, names, attributes, types) with bitwise-equal tensors, and
// export must be a fixpoint after one round. Checked on synthetic models
// (ONNX Runtime's MLP training graph, a conv model, optional operands and
// results, every attribute kind, external data) and on every
// testdata/*/training_model.onnx. Also: exported standard models pass
// onnx::checker, names are made unique, files are written atomically.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/Onnx.h"

#include "OnnxTestModels.h"
#include "TestSupport.h"
#include "ir/Module.h"

#include "onnx/checker.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <set>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

onnx::ModelProto exportOk(const Module &module) {
  auto model = exportOnnxModel(module);
  if (!model) {
    ADD_FAILURE() << llvm::toString(model.takeError());
    return {};
  }
  return std::move(*model);
}

/// import -> export -> import, expecting isomorphism and an export fixpoint.
void checkRoundTrip(const onnx::ModelProto &original,
                    OnnxImportOptions options = {}) {
  std::unique_ptr<Module> first = importOk(original, options);
  ASSERT_TRUE(first);
  onnx::ModelProto exported = exportOk(*first);
  std::unique_ptr<Module> second = importOk(exported, options);
  ASSERT_TRUE(second);
  expectIsomorphic(*first, *second);
  EXPECT_EQ(exportOk(*second).SerializeAsString(), exported.SerializeAsString())
      << "export is not a fixpoint";
}

TEST(OnnxRoundTrip, OrtMlpTrainingGraph) { checkRoundTrip(makeOrtMlp()); }

TEST(OnnxRoundTrip, OrtMlpVariants) {
  MlpOptions frozen;
  frozen.frozenFc1 = true;
  checkRoundTrip(makeOrtMlp(frozen));
  MlpOptions plain;
  plain.accumulate = false;
  plain.paramsAsInitializers = true;
  checkRoundTrip(makeOrtMlp(plain));
}

TEST(OnnxRoundTrip, ConvModel) { checkRoundTrip(makeConvModel()); }

TEST(OnnxRoundTrip, BoundDimensionsStayBound) {
  OnnxImportOptions options;
  options.dimBindings["batch"] = 3;
  checkRoundTrip(makeConvModel(), options);
}

TEST(OnnxRoundTrip, OptionalOperandsAndResults) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2, 4});
  b.initializer<float>("hi", TP::FLOAT, {}, {6.0f});
  b.floatInitializer("scale", {4});
  b.node("Clip", {"x", "", "hi"}, {"clipped"}, "clip0");
  b.node("LayerNormalization", {"clipped", "scale"}, {"y", "", "inv_std"},
         "ln0");
  b.output("y", TP::FLOAT, {2, 4});
  b.output("inv_std");
  std::unique_ptr<Module> module = importOk(b.model);
  ASSERT_TRUE(module);
  onnx::ModelProto exported = exportOk(*module);
  const onnx::NodeProto &clip = exported.graph().node(0);
  ASSERT_EQ(clip.input_size(), 3);
  EXPECT_EQ(clip.input(1), "");
  const onnx::NodeProto &ln = exported.graph().node(1);
  ASSERT_EQ(ln.output_size(), 3);
  EXPECT_EQ(ln.output(1), "");
  checkRoundTrip(b.model);
}

TEST(OnnxRoundTrip, EveryAttributeKind) {
  ModelBuilder b;
  b.addOpset("com.vendor", 2);
  b.input("x", TP::FLOAT, {2});
  onnx::NodeProto &n = b.node("Any", {"x"}, {"y"}, "any0", "com.vendor");
  ModelBuilder::attrFloat(n, "f", -0.0f);
  ModelBuilder::attrInt(n, "i", INT64_MIN);
  ModelBuilder::attrString(n, "s", std::string("a\0b", 3));
  ModelBuilder::attrFloats(n, "fs", {1.5f, 1e-30f});
  ModelBuilder::attrInts(n, "is", {});
  onnx::AttributeProto &strings =
      ModelBuilder::attr(n, "ss", onnx::AttributeProto::STRINGS);
  strings.add_strings("");
  strings.add_strings("z");
  onnx::AttributeProto &tensor =
      ModelBuilder::attr(n, "t", onnx::AttributeProto::TENSOR);
  tensor.mutable_t()->set_data_type(TP::FLOAT16);
  tensor.mutable_t()->add_dims(1);
  tensor.mutable_t()->add_int32_data(0x3c00);
  b.valueInfo("y", TP::FLOAT, {2});
  b.output("y", TP::FLOAT, {2});
  OnnxImportOptions options;
  options.verify = false;
  checkRoundTrip(b.model, options);
}

TEST(OnnxRoundTrip, ExportWritesModelFacts) {
  onnx::ModelProto model = makeOrtMlp();
  model.set_doc_string("docs");
  model.set_domain("org.example");
  model.set_model_version(7);
  onnx::StringStringEntryProto *meta = model.add_metadata_props();
  meta->set_key("author");
  meta->set_value("gmopt");
  std::unique_ptr<Module> module = importOk(model);
  ASSERT_TRUE(module);
  onnx::ModelProto exported = exportOk(*module);
  EXPECT_EQ(exported.ir_version(), 8);
  EXPECT_EQ(exported.producer_name(), "gmopt-test");
  EXPECT_EQ(exported.doc_string(), "docs");
  EXPECT_EQ(exported.domain(), "org.example");
  EXPECT_EQ(exported.model_version(), 7);
  ASSERT_EQ(exported.metadata_props_size(), 1);
  EXPECT_EQ(exported.metadata_props(0).key(), "author");
  std::map<std::string, int64_t> opsets;
  for (const auto &opset : exported.opset_import())
    opsets[opset.domain()] = opset.version();
  EXPECT_EQ(opsets,
            (std::map<std::string, int64_t>{{"", 17}, {"com.microsoft", 1}}));
  const onnx::GraphProto &g = exported.graph();
  EXPECT_EQ(g.name(), "test_graph");
  // Symbolic dimensions are written as dim_param.
  const onnx::TensorShapeProto &shape = g.input(0).type().tensor_type().shape();
  ASSERT_EQ(shape.dim_size(), 2);
  EXPECT_EQ(shape.dim(0).dim_param(), "batch");
  EXPECT_EQ(shape.dim(1).dim_value(), 4);
  // value_info for every typed intermediate (15 node results, 5 outputs).
  EXPECT_EQ(g.value_info_size(), 16 - 5);
  EXPECT_EQ(g.initializer(0).name(), "loss_grad");
  EXPECT_TRUE(g.initializer(0).has_raw_data());
}

TEST(OnnxRoundTrip, LiteralInitializersStayLiterals) {
  // A Constant node's value (a literal, never a parameter) is an ONNX
  // initializer like a weight: the export lists the literals in
  // metadata_props, the import marks them again and keeps the entry out of
  // the module's metadata, so a second export writes the same bytes.
  std::unique_ptr<Module> module = importOk(makeOrtMlp());
  ASSERT_TRUE(module);
  Value *literal = module->getGraph().getInitializers().front().get();
  literal->setLiteral(true);
  onnx::ModelProto exported = exportOk(*module);
  ASSERT_EQ(exported.metadata_props_size(), 1);
  EXPECT_EQ(exported.metadata_props(0).key(), kLiteralInitializersKey);
  EXPECT_EQ(exported.metadata_props(0).value(),
            "[\"" + literal->getName().str() + "\"]");
  std::unique_ptr<Module> reimported = importOk(exported);
  ASSERT_TRUE(reimported);
  EXPECT_TRUE(reimported->metadata.empty());
  for (const auto &init : reimported->getGraph().getInitializers())
    EXPECT_EQ(init->isLiteral(), init->getName() == literal->getName())
        << init->getName().str();
  EXPECT_EQ(exportOk(*reimported).SerializeAsString(),
            exported.SerializeAsString());

  // A list that names no initializer, or is no list, is an error.
  for (const char *bad : {"[\"nope\"]", "{}", "[1]", "not json"}) {
    onnx::ModelProto model = exported;
    model.mutable_metadata_props(0)->set_value(bad);
    auto result = importOnnxModel(model, "m.onnx");
    ASSERT_FALSE(bool(result)) << bad;
    std::string message = llvm::toString(result.takeError());
    EXPECT_NE(message.find("gmopt.literal_initializers"), std::string::npos)
        << message;
  }
}

TEST(OnnxRoundTrip, StandardModelPassesOnnxChecker) {
  std::unique_ptr<Module> module = importOk(makeConvModel());
  ASSERT_TRUE(module);
  ASSERT_LE(module->irVersion, 8);
  ASSERT_LE(module->getOpsetVersion(""), 17);
  onnx::ModelProto exported = exportOk(*module);
  EXPECT_NO_THROW(onnx::checker::check_model(exported));
  // The checker must also accept what gmopt invents: unique names for
  // unnamed values, and inputs carrying default initializers.
  Graph &g = module->getGraph();
  for (Node &node : g.getNodes())
    if (node.getName() == "Relu_1")
      node.getResult(0)->setName("");
  exported = exportOk(*module);
  EXPECT_NO_THROW(onnx::checker::check_model(exported));
}

TEST(OnnxRoundTrip, InventsUniqueNames) {
  Module module;
  module.opsetImports[""] = 17;
  Graph &g = module.getGraph();
  TensorType f32x2 = TensorType::get(DType::F32, {2});
  Value *x = g.addInput(f32x2, "x");
  Builder builder(g);
  Node *a = builder.create({"", "Relu"}, {x}, {f32x2}, {}, "a");
  a->getResult(0)->setName("x"); // Collides with the input.
  Node *b = builder.create({"", "Neg"}, {a->getResult(0)}, {f32x2}, {}, "b");
  Node *c = builder.create({"", "Relu"}, {b->getResult(0)}, {f32x2}, {}, "c");
  c->getResult(0)->setName("gmopt_0"); // Looks like an invented name.
  g.addOutput(c->getResult(0));
  g.addOutput(a->getResult(0));

  onnx::ModelProto exported = exportOk(module);
  const onnx::GraphProto &graph = exported.graph();
  ASSERT_EQ(graph.node_size(), 3);
  EXPECT_EQ(graph.input(0).name(), "x");
  EXPECT_EQ(graph.node(0).output(0), "gmopt_1");
  EXPECT_EQ(graph.node(1).input(0), "gmopt_1");
  EXPECT_EQ(graph.node(1).output(0), "gmopt_2");
  EXPECT_EQ(graph.node(2).output(0), "gmopt_0");
  EXPECT_EQ(graph.output(0).name(), "gmopt_0");
  EXPECT_EQ(graph.output(1).name(), "gmopt_1");
  EXPECT_EQ(graph.name(), "gmopt");
  EXPECT_EQ(exported.producer_name(), "gmopt");
  EXPECT_NO_THROW(onnx::checker::check_model(exported));

  std::unique_ptr<Module> back = importOk(exported);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->getGraph().getNumNodes(), 3u);
}

TEST(OnnxRoundTrip, ExportErrors) {
  Module module;
  Graph &g = module.getGraph();
  Value *x = g.addInput(TensorType::get(DType::F32, {2}), "x");
  Builder builder(g);
  Node *relu = builder.create({"", "Relu"}, {x},
                              {TensorType::get(DType::F32, {2})}, {}, "r");
  g.addOutput(relu->getResult(0));
  auto model = exportOnnxModel(module);
  ASSERT_FALSE(bool(model));
  EXPECT_EQ(llvm::toString(model.takeError()),
            "cannot export node r: the module has no opset import for "
            "domain ''");

  // com.microsoft ops get ONNX Runtime's version 1 when not imported.
  module.opsetImports[""] = 17;
  builder.create({"com.microsoft", "ReluGrad"}, {x, relu->getResult(0)},
                 {TensorType::get(DType::F32, {2})}, {}, "g");
  model = exportOnnxModel(module);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  ASSERT_EQ(model->opset_import_size(), 2);
  EXPECT_EQ(model->opset_import(1).domain(), "com.microsoft");
  EXPECT_EQ(model->opset_import(1).version(), 1);

  llvm::Error err = exportOnnxFile(module, "/nonexistent/gmopt/dir/m.onnx");
  ASSERT_TRUE(bool(err));
  std::string message = llvm::toString(std::move(err));
  EXPECT_EQ(message.rfind("/nonexistent/gmopt/dir/m.onnx: cannot create a "
                          "temporary file: ",
                          0),
            0u)
      << message;
}

TEST(OnnxRoundTrip, FileWithExternalData) {
  TempDir dir;
  MlpOptions opts;
  opts.paramsAsInitializers = true;
  std::unique_ptr<Module> module = importOk(makeOrtMlp(opts));
  ASSERT_TRUE(module);

  std::string path = dir.file("out.onnx");
  OnnxExportOptions exportOptions;
  exportOptions.externalDataThreshold = 64;
  ASSERT_FALSE(bool(exportOnnxFile(*module, path, exportOptions)));
  // Only the model and its data file; no temporary files left behind.
  EXPECT_EQ(dir.list(), (std::set<std::string>{"out.onnx", "out.onnx.data"}));

  auto buffer = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(buffer));
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromArray((*buffer)->getBufferStart(),
                                     (*buffer)->getBufferSize()));
  std::map<std::string, const onnx::TensorProto *> inits;
  for (const onnx::TensorProto &t : written.graph().initializer())
    inits[t.name()] = &t;
  // fc1.weight: 128 bytes, fc2.weight: 96 bytes -> external; biases inline.
  const onnx::TensorProto *w1 = inits.at("fc1.weight");
  EXPECT_EQ(w1->data_location(), TP::EXTERNAL);
  EXPECT_FALSE(w1->has_raw_data());
  std::map<std::string, std::string> keys;
  for (const auto &entry : w1->external_data())
    keys[entry.key()] = entry.value();
  EXPECT_EQ(keys.at("location"), "out.onnx.data");
  EXPECT_EQ(keys.at("offset"), "0");
  EXPECT_EQ(keys.at("length"), "128");
  EXPECT_EQ(inits.at("fc2.weight")->data_location(), TP::EXTERNAL);
  EXPECT_EQ(inits.at("fc1.bias")->data_location(), TP::DEFAULT);
  EXPECT_TRUE(inits.at("fc1.bias")->has_raw_data());

  auto reimported = importOnnxFile(path);
  ASSERT_TRUE(bool(reimported)) << llvm::toString(reimported.takeError());
  expectIsomorphic(*module, **reimported);

  // Overwrite the files while the reimported module still maps the old
  // data file: the old mapping stays valid and the new files are complete.
  ASSERT_FALSE(bool(exportOnnxFile(**reimported, path, exportOptions)));
  auto again = importOnnxFile(path);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  expectIsomorphic(*module, **again);
  expectIsomorphic(**reimported, **again);
  EXPECT_EQ(dir.list(), (std::set<std::string>{"out.onnx", "out.onnx.data"}));

  // Without a threshold everything is inline.
  std::string inlinePath = dir.file("inline.onnx");
  ASSERT_FALSE(bool(exportOnnxFile(*module, inlinePath)));
  EXPECT_FALSE(llvm::sys::fs::exists(inlinePath + ".data"));
  auto inlined = importOnnxFile(inlinePath);
  ASSERT_TRUE(bool(inlined)) << llvm::toString(inlined.takeError());
  expectIsomorphic(*module, **inlined);
}

TEST(OnnxRoundTrip, TestdataTrainingModels) {
  std::vector<std::string> models;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(gmopt::testdataDir(), ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::SmallString<256> candidate(it->path());
    llvm::sys::path::append(candidate, "training_model.onnx");
    if (llvm::sys::fs::exists(candidate))
      models.push_back(std::string(candidate));
  }
  // Committed fixtures: none found is a failure, never a skip.
  ASSERT_FALSE(models.empty())
      << "no " << gmopt::testdataDir() << "/*/training_model.onnx";
  std::sort(models.begin(), models.end());
  for (const std::string &path : models) {
    SCOPED_TRACE(path);
    auto first = importOnnxFile(path);
    ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
    EXPECT_TRUE((*first)->getSignature().hasGradients());
    EXPECT_TRUE((*first)->getSignature().getLoss());
    onnx::ModelProto exported = exportOk(**first);
    auto second = importOnnxModel(exported, path);
    ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
    expectIsomorphic(**first, **second);
    EXPECT_EQ(exportOk(**second).SerializeAsString(),
              exported.SerializeAsString());

    // Whatever onnx::checker accepts in the original it must accept in the
    // export (cnn uses ONNX Runtime's MaxPoolGrad in the default domain,
    // which the checker rejects in both).
    auto buffer = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(bool(buffer));
    onnx::ModelProto original;
    ASSERT_TRUE(original.ParseFromArray((*buffer)->getBufferStart(),
                                        (*buffer)->getBufferSize()));
    bool originalValid = true;
    try {
      onnx::checker::check_model(original);
    } catch (const std::exception &) {
      originalValid = false;
    }
    if (originalValid) {
      EXPECT_NO_THROW(onnx::checker::check_model(exported));
    }
  }
}

} // namespace
