//===- OnnxImportTest.cpp - Tests of ONNX import --------------------------===//
//
// Unit tests of importOnnxBytes/File/Model and the tensor conversions in
// OnnxTensor.h: name resolution to SSA, absent optional operands and
// results, topological reordering, type hints and dimension binding, every
// TensorProto encoding (typed fields, raw_data, external data), and one test
// per bad input with its exact message.
//
//===----------------------------------------------------------------------===//

#include "ir/Onnx.h"

#include "OnnxTestModels.h"
#include "ir/Module.h"
#include "ir/OnnxTensor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <chrono>
#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

/// Imports \p model from its serialized bytes as "m.onnx".
llvm::Expected<std::unique_ptr<Module>>
importBytes(const onnx::ModelProto &model, OnnxImportOptions options = {}) {
  return importOnnxBytes(model.SerializeAsString(), "m.onnx", options);
}

/// The message of a failed import (fails the test on success).
template <typename T> std::string errorOf(llvm::Expected<T> result) {
  if (result) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(result.takeError());
}

std::string errorOf(llvm::Error err) {
  if (!err) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(std::move(err));
}

std::unique_ptr<Module> importOk(const onnx::ModelProto &model,
                                 OnnxImportOptions options = {}) {
  auto module = importBytes(model, options);
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

std::vector<std::string> nodeNames(const Module &module) {
  std::vector<std::string> names;
  for (const Node &node : module.getGraph().getNodes())
    names.push_back(node.getName().str());
  return names;
}

/// A model computing y = Relu(x) over f32[2,3].
ModelBuilder reluModel() {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2, 3});
  b.node("Relu", {"x"}, {"y"}, "r0");
  b.output("y", TP::FLOAT, {2, 3});
  return b;
}

/// A temporary directory removed at the end of the test.
class TempDir {
public:
  TempDir() {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("gmopt-onnx-test", path);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempDir() { (void)llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> p(path);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void write(llvm::StringRef name, llvm::StringRef bytes) const {
    std::error_code ec;
    llvm::raw_fd_ostream os(file(name), ec);
    ASSERT_FALSE(ec) << ec.message();
    os << bytes;
  }

  llvm::SmallString<256> path;
};

//===----------------------------------------------------------------------===//
// Successful imports
//===----------------------------------------------------------------------===//

TEST(OnnxImport, OrtMlpValuesAndTypes) {
  auto module = importOk(makeOrtMlp());
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  EXPECT_EQ(module->irVersion, 8);
  EXPECT_EQ(module->getOpsetVersion(""), 17);
  EXPECT_EQ(module->getOpsetVersion("com.microsoft"), 1);
  EXPECT_EQ(module->producerName, "gmopt-test");
  EXPECT_EQ(g.getName(), "test_graph");
  // input, labels, 4 params, 4 buffers, lazy_reset_grad.
  EXPECT_EQ(g.getInputs().size(), 11u);
  ASSERT_EQ(g.getInitializers().size(), 2u);
  EXPECT_EQ(g.getInitializers()[0]->getName(), "loss_grad");
  EXPECT_TRUE(g.getInitializers()[0]->isInitializer());
  EXPECT_EQ(g.getInitializers()[0]->getData().getFloatElement(0), 1.0);
  EXPECT_EQ(g.getNumNodes(), 15u);
  EXPECT_EQ(g.getNumOutputs(), 5u);

  Value *input = g.lookupValue("input");
  ASSERT_TRUE(input);
  EXPECT_TRUE(input->isGraphInput());
  EXPECT_EQ(input->getType().str(), "f32[batch,4]");
  Value *fc1Out = g.lookupValue("fc1_out");
  ASSERT_TRUE(fc1Out && fc1Out->isNodeResult());
  EXPECT_EQ(fc1Out->getDefiningNode()->getName(), "Gemm_0");
  EXPECT_EQ(fc1Out->getType(),
            TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(8)}));
  EXPECT_EQ(g.lookupValue("fc1.weight_grad")->getType(),
            TensorType::get(DType::F32, {8, 4}));
  EXPECT_EQ(g.lookupValue("fc2.bias_grad")->getType(),
            TensorType::get(DType::F32, {3}));
  EXPECT_EQ(g.lookupValue("loss")->getType(), TensorType::get(DType::F32, {}));
  Node *relu = g.lookupValue("relu_out")->getDefiningNode();
  EXPECT_EQ(relu->getOperand(0), fc1Out);
  Node *reluGrad = g.lookupValue("fc1_out_grad")->getDefiningNode();
  EXPECT_TRUE(reluGrad->isa(kMsDomain, "ReluGrad"));
  EXPECT_EQ(g.getOutput(0), g.lookupValue("loss"));
  const Attribute *transB =
      g.lookupValue("logits")->getDefiningNode()->getAttr("transB");
  ASSERT_TRUE(transB);
  EXPECT_EQ(transB->getInt(), 1);
}

TEST(OnnxImport, NormalizesAiOnnxDomain) {
  ModelBuilder b(0);
  b.model.mutable_opset_import(0)->set_domain("ai.onnx");
  b.model.mutable_opset_import(0)->set_version(17);
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"x"}, {"y"}, "r0", "ai.onnx");
  b.output("y", TP::FLOAT, {2});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  EXPECT_EQ(module->opsetImports.count(""), 1u);
  EXPECT_EQ(module->opsetImports.count("ai.onnx"), 0u);
  EXPECT_EQ(module->getGraph().getNodes().front().getDomain(), "");
  EXPECT_EQ(module->getOpsetVersion("ai.onnx"), 17);
}

TEST(OnnxImport, AcceptsOpsetRangeAndIrVersion10) {
  for (int64_t opset : {13, 21}) {
    ModelBuilder b = reluModel();
    b.model.mutable_opset_import(0)->set_version(opset);
    b.model.set_ir_version(10);
    auto module = importOk(b.model);
    ASSERT_TRUE(module) << "opset " << opset;
    EXPECT_EQ(module->getOpsetVersion(""), opset);
    EXPECT_EQ(module->irVersion, 10);
  }
}

TEST(OnnxImport, BindsSymbolicDimensions) {
  OnnxImportOptions options;
  options.dimBindings["batch"] = 16;
  auto module = importOk(makeOrtMlp(), options);
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  EXPECT_EQ(g.lookupValue("input")->getType(),
            TensorType::get(DType::F32, {16, 4}));
  EXPECT_EQ(g.lookupValue("fc1_out")->getType(),
            TensorType::get(DType::F32, {16, 8}));
  EXPECT_EQ(module->dimBindings.at("batch"), 16);
  EXPECT_FALSE(checkDimsBound(*module));
}

TEST(OnnxImport, InputWithInitializerGetsDefaultData) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {3});
  b.input("w", TP::FLOAT, {3});
  b.initializer<float>("w", TP::FLOAT, {3}, {1, 2, 3});
  b.initializer<float>("c", TP::FLOAT, {3}, {4, 5, 6});
  b.node("Add", {"x", "w"}, {"s"}, "add0");
  b.node("Add", {"s", "c"}, {"y"}, "add1");
  b.output("y", TP::FLOAT, {3});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  Value *w = g.lookupValue("w");
  EXPECT_TRUE(w->isGraphInput());
  ASSERT_TRUE(w->hasData());
  EXPECT_EQ(w->getData().getFloatElement(2), 3.0);
  Value *c = g.lookupValue("c");
  EXPECT_TRUE(c->isInitializer());
  EXPECT_EQ(c->getData().getFloatElement(0), 4.0);
  EXPECT_EQ(g.getInputs().size(), 2u);
  EXPECT_EQ(g.getInitializers().size(), 1u);
}

TEST(OnnxImport, InitializerMustMatchItsInputType) {
  ModelBuilder b;
  b.input("w", TP::FLOAT, {3});
  b.initializer<uint16_t>("w", TP::FLOAT16, {3}, {1, 2, 3});
  b.node("Relu", {"w"}, {"y"}, "r0");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: initializer 'w' of type f16[3] does not match graph "
            "input type f32[3]");
}

TEST(OnnxImport, EmptyNamesAreAbsentOperandsAndResults) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2, 4});
  b.initializer<float>("hi", TP::FLOAT, {}, {6.0f});
  b.floatInitializer("scale", {4});
  b.floatInitializer("bias", {4});
  b.node("Clip", {"x", "", "hi"}, {"clipped"}, "clip0");
  onnx::NodeProto &ln =
      b.node("LayerNormalization", {"clipped", "scale", "bias"},
             {"y", "", "inv_std"}, "ln0");
  ModelBuilder::attrInt(ln, "axis", -1);
  b.output("y", TP::FLOAT, {2, 4});
  b.output("inv_std");
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  Node *clip = g.lookupValue("clipped")->getDefiningNode();
  ASSERT_EQ(clip->getNumOperands(), 3u);
  EXPECT_EQ(clip->getOperand(1), nullptr);
  EXPECT_EQ(clip->getOperand(2), g.lookupValue("hi"));
  Node *norm = g.lookupValue("y")->getDefiningNode();
  ASSERT_EQ(norm->getNumResults(), 3u);
  EXPECT_NE(norm->getResult(0), nullptr);
  EXPECT_EQ(norm->getResult(1), nullptr);
  ASSERT_NE(norm->getResult(2), nullptr);
  EXPECT_EQ(norm->getResult(2)->getName(), "inv_std");
  EXPECT_EQ(norm->getResult(2)->getType().getDType(), DType::F32);
}

TEST(OnnxImport, ReordersNodesStablyWhenFileIsNotTopological) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"b"}, {"c"}, "C");
  b.node("Relu", {"x"}, {"a"}, "A");
  b.node("Neg", {"x"}, {"d"}, "D");
  b.node("Relu", {"a"}, {"b"}, "B");
  b.node("Add", {"c", "d"}, {"e"}, "E");
  b.output("e", TP::FLOAT, {2});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  EXPECT_EQ(nodeNames(*module),
            (std::vector<std::string>{"A", "B", "C", "D", "E"}));
}

TEST(OnnxImport, KeepsFileOrderWhenAlreadyTopological) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Neg", {"x"}, {"d"}, "D");
  b.node("Relu", {"x"}, {"a"}, "A");
  b.node("Add", {"a", "d"}, {"e"}, "E");
  b.output("e", TP::FLOAT, {2});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  EXPECT_EQ(nodeNames(*module), (std::vector<std::string>{"D", "A", "E"}));
}

TEST(OnnxImport, TypesComeFromValueInfoWithoutVerification) {
  ModelBuilder b;
  b.addOpset("com.vendor", 1);
  b.input("x", TP::FLOAT, {"n", 3});
  b.node("Mystery", {"x"}, {"y"}, "m0", "com.vendor");
  b.node("Mystery", {"y"}, {"z"}, "m1", "com.vendor");
  b.valueInfo("y", TP::FLOAT16, {"n", 5});
  b.output("z", TP::INT64, {7});
  OnnxImportOptions options;
  options.verify = false;
  options.dimBindings["n"] = 2;
  auto module = importOk(b.model, options);
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  EXPECT_EQ(g.lookupValue("x")->getType(), TensorType::get(DType::F32, {2, 3}));
  EXPECT_EQ(g.lookupValue("y")->getType(), TensorType::get(DType::F16, {2, 5}));
  EXPECT_EQ(g.lookupValue("z")->getType(), TensorType::get(DType::I64, {7}));
}

TEST(OnnxImport, AllAttributeKinds) {
  ModelBuilder b;
  b.addOpset("com.vendor", 1);
  b.input("x", TP::FLOAT, {2});
  onnx::NodeProto &n = b.node("Any", {"x"}, {"y"}, "any0", "com.vendor");
  ModelBuilder::attrFloat(n, "f", 0.5f);
  ModelBuilder::attrInt(n, "i", -7);
  ModelBuilder::attrString(n, "s", "hello");
  ModelBuilder::attrFloats(n, "fs", {1.5f, -2.0f});
  ModelBuilder::attrInts(n, "is", {1, 2, 3});
  onnx::AttributeProto &strings =
      ModelBuilder::attr(n, "ss", onnx::AttributeProto::STRINGS);
  strings.add_strings("a");
  strings.add_strings("bc");
  onnx::AttributeProto &tensor =
      ModelBuilder::attr(n, "t", onnx::AttributeProto::TENSOR);
  tensor.mutable_t()->set_data_type(TP::INT64);
  tensor.mutable_t()->add_dims(2);
  tensor.mutable_t()->add_int64_data(40);
  tensor.mutable_t()->add_int64_data(2);
  // An attribute written without its type (old exporters).
  onnx::AttributeProto *untyped = n.add_attribute();
  untyped->set_name("legacy");
  untyped->set_i(9);
  b.output("y");
  OnnxImportOptions options;
  options.verify = false;
  auto module = importOk(b.model, options);
  ASSERT_TRUE(module);
  const Node &node = module->getGraph().getNodes().front();
  EXPECT_EQ(node.getAttr("f")->getFloat(), 0.5f);
  EXPECT_EQ(node.getAttr("i")->getInt(), -7);
  EXPECT_EQ(node.getAttr("s")->getString(), "hello");
  EXPECT_EQ(node.getAttr("fs")->getFloats(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(node.getAttr("is")->getInts(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(node.getAttr("ss")->getStrings(),
            (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(node.getAttr("t")->getTensor().getIntValues(),
            (std::vector<int64_t>{40, 2}));
  EXPECT_EQ(node.getAttr("legacy")->getKind(), Attribute::Kind::Int);
  EXPECT_EQ(node.getAttr("legacy")->getInt(), 9);
}

TEST(OnnxImport, ImportModelCopiesWithoutTouchingTheProto) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {3});
  b.initializer<float>("c", TP::FLOAT, {3}, {4, 5, 6});
  b.node("Add", {"x", "c"}, {"y"}, "add0");
  b.output("y", TP::FLOAT, {3});
  auto module = importOnnxModel(b.model, "m.onnx");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  EXPECT_EQ(b.model.graph().initializer(0).raw_data().size(), 12u);
  EXPECT_EQ(
      (*module)->getGraph().lookupValue("c")->getData().getFloatElement(1),
      5.0);
}

//===----------------------------------------------------------------------===//
// Bad inputs: one test each, with the exact message
//===----------------------------------------------------------------------===//

TEST(OnnxImportErrors, TruncatedFile) {
  std::string bytes = makeOrtMlp().SerializeAsString();
  bytes.resize(bytes.size() / 2);
  EXPECT_EQ(errorOf(importOnnxBytes(bytes, "t.onnx")),
            "t.onnx: not a valid ONNX model (protobuf parse failed)");
}

TEST(OnnxImportErrors, GarbageBytes) {
  std::string bytes = "\xff\xff\xff\xff\xff\x0fthis is not a model";
  EXPECT_EQ(errorOf(importOnnxBytes(bytes, "g.onnx")),
            "g.onnx: not a valid ONNX model (protobuf parse failed)");
}

TEST(OnnxImportErrors, EmptyFileHasNoGraph) {
  EXPECT_EQ(errorOf(importOnnxBytes("", "e.onnx")),
            "e.onnx: not a valid ONNX model (no graph)");
}

TEST(OnnxImportErrors, MissingFile) {
  std::string message =
      errorOf(importOnnxFile("/nonexistent/gmopt/model.onnx"));
  EXPECT_EQ(message, "/nonexistent/gmopt/model.onnx: No such file or "
                     "directory");
}

TEST(OnnxImportErrors, UnknownOp) {
  ModelBuilder b;
  b.addOpset("com.foo", 1);
  b.input("x", TP::FLOAT, {2});
  b.node("Bar", {"x"}, {"y"}, "bar0", "com.foo");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: unknown op 'Bar' of domain 'com.foo' at opset 1 (node "
            "bar0)");
}

TEST(OnnxImportErrors, UnknownStandardOpNamesTheDefaultDomain) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Frobnicate", {"x"}, {"y"}, "f0");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: unknown op 'Frobnicate' of domain 'ai.onnx' at opset 17 "
            "(node f0)");
}

TEST(OnnxImportErrors, KnownOpAtAnOpsetBeforeItsFirstVersion) {
  // ai.onnx Gelu exists from opset 20; at 17 the model must say
  // com.microsoft.Gelu (what ONNX Runtime's fusions write).
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Gelu", {"x"}, {"y"}, "gelu0");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: op 'Gelu' does not exist in opset 17 of domain 'ai.onnx' "
            "(gmopt knows it from opset 20; node gelu0)");
}

TEST(OnnxImportErrors, WrongArity) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"x", "x"}, {"y"}, "relu0");
  b.output("y");
  std::string message = errorOf(importBytes(b.model));
  EXPECT_EQ(message.rfind("m.onnx: ", 0), 0u) << message;
  EXPECT_NE(message.find("relu0"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(OnnxImportErrors, DtypeMismatch) {
  ModelBuilder b;
  b.input("a", TP::FLOAT, {2});
  b.input("b", TP::FLOAT16, {2});
  b.node("Add", {"a", "b"}, {"y"}, "add0");
  b.output("y");
  std::string message = errorOf(importBytes(b.model));
  EXPECT_EQ(message.rfind("m.onnx: ", 0), 0u) << message;
  EXPECT_NE(message.find("add0"), std::string::npos) << message;
}

TEST(OnnxImportErrors, MissingInput) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"nope"}, {"y"}, "r0");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: value 'nope' used by node r0 is not defined");
}

TEST(OnnxImportErrors, UnnamedNodesAreDescribedByOpAndIndex) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"x"}, {"a"});
  b.node("Relu", {"nope"}, {"y"});
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: value 'nope' used by node Relu#1 is not defined");
}

TEST(OnnxImportErrors, Cycle) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Add", {"x", "b"}, {"a"}, "nodeA");
  b.node("Relu", {"a"}, {"b"}, "nodeB");
  b.output("a");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: graph has a cycle through node nodeA");
}

TEST(OnnxImportErrors, SelfLoop) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Add", {"x", "a"}, {"a"}, "self");
  b.output("a");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: graph has a cycle through node self");
}

TEST(OnnxImportErrors, DuplicateDefinition) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  b.node("Relu", {"x"}, {"y"}, "r0");
  b.node("Neg", {"x"}, {"y"}, "r1");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: value 'y' is defined more than once (node r1)");

  ModelBuilder c;
  c.input("x", TP::FLOAT, {2});
  c.node("Relu", {"x"}, {"x"}, "r0");
  c.output("x");
  EXPECT_EQ(errorOf(importBytes(c.model)),
            "m.onnx: value 'x' is defined more than once (node r0)");

  ModelBuilder d;
  d.input("x", TP::FLOAT, {2});
  d.input("x", TP::FLOAT, {2});
  d.output("x");
  EXPECT_EQ(errorOf(importBytes(d.model)),
            "m.onnx: graph input 'x' is declared more than once");

  ModelBuilder e = reluModel();
  e.initializer<float>("k", TP::FLOAT, {1}, {1});
  e.initializer<float>("k", TP::FLOAT, {1}, {2});
  EXPECT_EQ(errorOf(importBytes(e.model)),
            "m.onnx: initializer 'k' is defined more than once");
}

TEST(OnnxImportErrors, UndefinedGraphOutput) {
  ModelBuilder b = reluModel();
  b.output("ghost");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: graph output 'ghost' is not defined");
}

TEST(OnnxImportErrors, UnsupportedOpset) {
  for (int64_t opset : {12, 22}) {
    ModelBuilder b = reluModel();
    b.model.mutable_opset_import(0)->set_version(opset);
    EXPECT_EQ(errorOf(importBytes(b.model)),
              "m.onnx: unsupported opset " + std::to_string(opset) +
                  " for domain '' (gmopt supports opsets 13 to 21)");
  }
}

TEST(OnnxImportErrors, ConflictingOpsetImports) {
  ModelBuilder b = reluModel();
  b.addOpset("ai.onnx", 17); // The same import spelled twice is harmless.
  EXPECT_TRUE(importOk(b.model));
  b.addOpset("ai.onnx", 18);
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: domain '' is imported at opsets 17 and 18");
  ModelBuilder c = reluModel();
  c.addOpset("com.microsoft", 0);
  EXPECT_EQ(errorOf(importBytes(c.model)),
            "m.onnx: invalid opset version 0 for domain 'com.microsoft'");
}

TEST(OnnxImportErrors, IrVersionTooNew) {
  ModelBuilder b = reluModel();
  b.model.set_ir_version(11);
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: unsupported ONNX ir_version 11 (gmopt reads ir_version 3 "
            "to 10)");
}

TEST(OnnxImportErrors, IrVersionTooOld) {
  ModelBuilder b = reluModel();
  b.model.set_ir_version(2);
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: unsupported ONNX ir_version 2 (gmopt reads ir_version 3 "
            "to 10)");
}

TEST(OnnxImportErrors, NegativeDimBinding) {
  OnnxImportOptions options;
  options.dimBindings["batch"] = -1;
  EXPECT_EQ(errorOf(importBytes(makeOrtMlp(), options)),
            "m.onnx: dimension binding batch=-1 is negative");
}

TEST(OnnxImportErrors, MissingOpsetImport) {
  ModelBuilder b = reluModel();
  b.model.clear_opset_import();
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: domain '' of op 'Relu' has no opset import (node r0)");
}

TEST(OnnxImportErrors, SubgraphAttribute) {
  ModelBuilder b;
  b.input("cond", TP::BOOL, {});
  onnx::NodeProto &n = b.node("If", {"cond"}, {"y"}, "if0");
  onnx::AttributeProto &then =
      ModelBuilder::attr(n, "then_branch", onnx::AttributeProto::GRAPH);
  then.mutable_g()->set_name("then");
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: subgraph attribute 'then_branch' is not supported (node "
            "if0)");
}

TEST(OnnxImportErrors, UnsupportedAttributeKinds) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {2});
  onnx::NodeProto &n = b.node("Relu", {"x"}, {"y"}, "r0");
  ModelBuilder::attr(n, "sp", onnx::AttributeProto::SPARSE_TENSOR);
  b.output("y");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: sparse tensor attribute 'sp' is not supported (node r0)");

  ModelBuilder c;
  c.input("x", TP::FLOAT, {2});
  onnx::NodeProto &m = c.node("Relu", {"x"}, {"y"}, "r0");
  ModelBuilder::attr(m, "tp", onnx::AttributeProto::TYPE_PROTO);
  c.output("y");
  EXPECT_EQ(errorOf(importBytes(c.model)),
            "m.onnx: type attribute 'tp' is not supported (node r0)");
}

TEST(OnnxImportErrors, NonTensorInput) {
  ModelBuilder b;
  onnx::ValueInfoProto *in = b.graph().add_input();
  in->set_name("seq");
  in->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(TP::FLOAT);
  b.output("seq");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: graph input 'seq' has a non-tensor type (sequence, map, "
            "optional or sparse), which is not supported");
}

TEST(OnnxImportErrors, SparseInitializer) {
  ModelBuilder b = reluModel();
  onnx::SparseTensorProto *sparse = b.graph().add_sparse_initializer();
  sparse->mutable_values()->set_name("sp");
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: sparse initializer 'sp' is not supported");
}

TEST(OnnxImportErrors, BadInitializerIsNamed) {
  ModelBuilder b = reluModel();
  b.initializer<float>("w", TP::FLOAT, {4}, {1, 2, 3});
  EXPECT_EQ(errorOf(importBytes(b.model)),
            "m.onnx: tensor 'w': raw_data has 12 bytes, expected 16");
}

//===----------------------------------------------------------------------===//
// checkDimsBound
//===----------------------------------------------------------------------===//

TEST(CheckDimsBound, ReportsFirstUnboundSymbol) {
  auto module = importOk(makeOrtMlp());
  ASSERT_TRUE(module);
  EXPECT_EQ(errorOf(checkDimsBound(*module)),
            "symbolic dimension 'batch' of value 'input' is not bound; pass "
            "--dim batch=N");
  module->dimBindings["batch"] = 4;
  EXPECT_FALSE(checkDimsBound(*module));
}

TEST(CheckDimsBound, StaticModelIsBound) {
  auto module = importOk(makeOrtMlp({false, true, false, DimSpec(4)}));
  ASSERT_TRUE(module);
  EXPECT_FALSE(checkDimsBound(*module));
}

//===----------------------------------------------------------------------===//
// Tensor encodings
//===----------------------------------------------------------------------===//

TEST(OnnxTensor, TypedFieldsForEveryDType) {
  auto check = [](TP tensor, DType dtype, std::vector<uint8_t> expected) {
    llvm::Expected<TensorData> data = importTensor(tensor, nullptr);
    ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
    EXPECT_EQ(data->getType().getDType(), dtype);
    EXPECT_EQ(
        std::vector<uint8_t>(data->getBytes().begin(), data->getBytes().end()),
        expected)
        << dtypeName(dtype).str();
  };
  auto make = [](int32_t dtype, std::vector<int64_t> dims) {
    TP t;
    t.set_name("t");
    t.set_data_type(dtype);
    for (int64_t d : dims)
      t.add_dims(d);
    return t;
  };
  auto bytesOf = [](auto... values) {
    std::vector<uint8_t> bytes;
    auto append = [&](auto v) {
      const auto *p = reinterpret_cast<const uint8_t *>(&v);
      bytes.insert(bytes.end(), p, p + sizeof(v));
    };
    (append(values), ...);
    return bytes;
  };

  TP f32 = make(TP::FLOAT, {2});
  f32.add_float_data(1.5f);
  f32.add_float_data(-2.0f);
  check(f32, DType::F32, bytesOf(1.5f, -2.0f));

  TP c64 = make(TP::COMPLEX64, {1});
  c64.add_float_data(1.0f);
  c64.add_float_data(2.0f);
  check(c64, DType::C64, bytesOf(1.0f, 2.0f));

  TP f64 = make(TP::DOUBLE, {1});
  f64.add_double_data(0.25);
  check(f64, DType::F64, bytesOf(0.25));

  TP c128 = make(TP::COMPLEX128, {1});
  c128.add_double_data(3.0);
  c128.add_double_data(4.0);
  check(c128, DType::C128, bytesOf(3.0, 4.0));

  TP i64 = make(TP::INT64, {2});
  i64.add_int64_data(-1);
  i64.add_int64_data(1LL << 40);
  check(i64, DType::I64, bytesOf(int64_t(-1), int64_t(1LL << 40)));

  TP u64 = make(TP::UINT64, {1});
  u64.add_uint64_data(~0ULL);
  check(u64, DType::U64, bytesOf(uint64_t(~0ULL)));

  TP u32 = make(TP::UINT32, {1});
  u32.add_uint64_data(0xdeadbeefULL);
  check(u32, DType::U32, bytesOf(uint32_t(0xdeadbeef)));

  TP i32 = make(TP::INT32, {1});
  i32.add_int32_data(-5);
  check(i32, DType::I32, bytesOf(int32_t(-5)));

  TP i16 = make(TP::INT16, {2});
  i16.add_int32_data(-2);
  i16.add_int32_data(300);
  check(i16, DType::I16, bytesOf(int16_t(-2), int16_t(300)));

  TP u16 = make(TP::UINT16, {1});
  u16.add_int32_data(65535);
  check(u16, DType::U16, bytesOf(uint16_t(65535)));

  TP f16 = make(TP::FLOAT16, {1});
  f16.add_int32_data(0x3c00); // 1.0
  check(f16, DType::F16, bytesOf(uint16_t(0x3c00)));

  TP bf16 = make(TP::BFLOAT16, {1});
  bf16.add_int32_data(0x3f80); // 1.0
  check(bf16, DType::BF16, bytesOf(uint16_t(0x3f80)));

  TP i8 = make(TP::INT8, {2});
  i8.add_int32_data(-1);
  i8.add_int32_data(127);
  check(i8, DType::I8, bytesOf(int8_t(-1), int8_t(127)));

  TP u8 = make(TP::UINT8, {1});
  u8.add_int32_data(200);
  check(u8, DType::U8, bytesOf(uint8_t(200)));

  TP boolean = make(TP::BOOL, {3});
  boolean.add_int32_data(0);
  boolean.add_int32_data(1);
  boolean.add_int32_data(5);
  check(boolean, DType::Bool, {0, 1, 1});

  TP f8 = make(int32_t(DType::F8E4M3FN), {1});
  f8.add_int32_data(0x38);
  check(f8, DType::F8E4M3FN, {0x38});

  // Three 4-bit values packed into two bytes, one int32 per byte.
  TP i4 = make(int32_t(DType::I4), {3});
  i4.add_int32_data(0x21);
  i4.add_int32_data(0x03);
  check(i4, DType::I4, {0x21, 0x03});

  TP empty = make(TP::FLOAT, {2, 0});
  check(empty, DType::F32, {});

  TP raw = make(TP::INT32, {2});
  raw.set_raw_data(std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8));
  check(raw, DType::I32, bytesOf(int32_t(1), int32_t(2)));
}

TEST(OnnxTensor, RejectsMalformedTensors) {
  auto message = [](const TP &t) { return errorOf(importTensor(t, nullptr)); };
  TP count;
  count.set_name("w");
  count.set_data_type(TP::FLOAT);
  count.add_dims(3);
  count.add_float_data(1);
  EXPECT_EQ(message(count), "tensor 'w': float_data has 1 values, expected 3");

  TP none;
  none.set_name("w");
  none.set_data_type(TP::INT64);
  none.add_dims(2);
  EXPECT_EQ(message(none), "tensor 'w': has no data (2 elements expected)");

  TP str;
  str.set_name("s");
  str.set_data_type(TP::STRING);
  str.add_string_data("x");
  EXPECT_EQ(message(str), "tensor 's': string tensors are not supported");

  TP seg;
  seg.set_name("w");
  seg.set_data_type(TP::FLOAT);
  seg.mutable_segment()->set_begin(0);
  EXPECT_EQ(message(seg), "tensor 'w': segmented tensors are not supported");

  TP negative;
  negative.set_name("w");
  negative.set_data_type(TP::FLOAT);
  negative.add_dims(-1);
  EXPECT_EQ(message(negative), "tensor 'w': negative dimension -1");

  TP huge;
  huge.set_name("w");
  huge.set_data_type(TP::FLOAT);
  for (int i = 0; i < 4; ++i)
    huge.add_dims(1LL << 20);
  EXPECT_EQ(message(huge), "tensor 'w': type f32[1048576,1048576,1048576,"
                           "1048576] is larger than gmopt's limit of 2^50 "
                           "bytes per tensor");

  TP badType;
  badType.set_name("w");
  badType.set_data_type(99);
  EXPECT_EQ(message(badType), "tensor 'w': unknown element type 99");
}

TEST(OnnxTensor, StealingMovesRawDataOut) {
  TP t;
  t.set_name("w");
  t.set_data_type(TP::FLOAT);
  t.add_dims(2);
  t.set_raw_data(std::string(8, '\x01'));
  const char *before = t.raw_data().data();
  llvm::Expected<TensorData> data = importTensorStealing(t, nullptr);
  ASSERT_TRUE(bool(data)) << llvm::toString(data.takeError());
  // The TensorData views the very buffer the proto held.
  EXPECT_EQ(reinterpret_cast<const char *>(data->getBytes().data()), before);
  EXPECT_FALSE(t.has_raw_data());
  EXPECT_EQ(data->getBytes().size(), 8u);
}

TEST(OnnxTensor, TypeConversion) {
  onnx::TypeProto type;
  ModelBuilder::setType(type, TP::FLOAT, {"b", 3});
  type.mutable_tensor_type()->mutable_shape()->add_dim(); // unknown
  llvm::Expected<TensorType> t = importType(type, "v");
  ASSERT_TRUE(bool(t));
  EXPECT_EQ(*t, TensorType(DType::F32, {Dim::symbolic("b"), Dim::fixed(3),
                                        Dim::unknown()}));
  onnx::TypeProto back;
  exportType(*t, back);
  EXPECT_EQ(back.SerializeAsString(), type.SerializeAsString());

  onnx::TypeProto unranked;
  unranked.mutable_tensor_type()->set_elem_type(TP::INT64);
  t = importType(unranked, "v");
  ASSERT_TRUE(bool(t));
  EXPECT_FALSE(t->hasRank());
  EXPECT_EQ(t->getDType(), DType::I64);

  onnx::TypeProto bad;
  bad.mutable_tensor_type()->set_elem_type(77);
  EXPECT_EQ(errorOf(importType(bad, "value 'v'")),
            "value 'v' has unknown element type 77");
}

//===----------------------------------------------------------------------===//
// External data
//===----------------------------------------------------------------------===//

/// Marks \p tensor as stored in \p location at \p offset.
void makeExternal(TP &tensor, const std::string &location, uint64_t offset,
                  std::optional<uint64_t> length = std::nullopt) {
  tensor.clear_raw_data();
  tensor.set_data_location(TP::EXTERNAL);
  auto add = [&](const std::string &key, const std::string &value) {
    onnx::StringStringEntryProto *e = tensor.add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  if (length)
    add("length", std::to_string(*length));
}

TEST(OnnxImportExternal, ViewsMappedFileInPlace) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4}, c = {5, 6};
  std::string blob(64, '\0');
  std::memcpy(&blob[0], a.data(), 16);
  std::memcpy(&blob[32], c.data(), 8);
  dir.write("weights.bin", blob);

  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  b.input("y", TP::FLOAT, {2});
  makeExternal(b.initializer<float>("a", TP::FLOAT, {4}, {}), "weights.bin", 0,
               16);
  makeExternal(b.initializer<float>("c", TP::FLOAT, {2}, {}), "weights.bin",
               32);
  b.node("Add", {"x", "a"}, {"s"}, "add0");
  b.node("Add", {"y", "c"}, {"t"}, "add1");
  b.output("s", TP::FLOAT, {4});
  b.output("t", TP::FLOAT, {2});
  dir.write("model.onnx", b.bytes());

  auto module = importOnnxFile(dir.file("model.onnx"));
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  const Graph &g = (*module)->getGraph();
  const TensorData &da = g.lookupValue("a")->getData();
  const TensorData &dc = g.lookupValue("c")->getData();
  EXPECT_EQ(da.getFloatElement(3), 4.0);
  EXPECT_EQ(dc.getFloatElement(0), 5.0);
  // Both tensors view one mapping of the file rather than copies.
  EXPECT_EQ(dc.getBytes().data() - da.getBytes().data(), 32);

  // An explicit directory overrides the model's own.
  OnnxImportOptions options;
  options.externalDataDir = std::string(dir.path);
  auto fromBytes = importOnnxBytes(b.bytes(), "elsewhere/m.onnx", options);
  ASSERT_TRUE(bool(fromBytes)) << llvm::toString(fromBytes.takeError());
}

TEST(OnnxImportExternal, Errors) {
  TempDir dir;
  dir.write("small.bin", std::string(8, '\0'));
  auto importWith = [&](const std::string &location, uint64_t offset,
                        std::optional<uint64_t> length = std::nullopt) {
    ModelBuilder b;
    b.input("x", TP::FLOAT, {4});
    makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), location,
                 offset, length);
    b.node("Add", {"x", "w"}, {"s"}, "add0");
    b.output("s");
    dir.write("model.onnx", b.bytes());
    return errorOf(importOnnxFile(dir.file("model.onnx")));
  };
  std::string model = dir.file("model.onnx");
  EXPECT_EQ(importWith("small.bin", 0),
            model + ": tensor 'w': external data (offset 0, 16 bytes) lies "
                    "outside 'small.bin' (8 bytes)");
  EXPECT_EQ(importWith("small.bin", 0, 8),
            model + ": tensor 'w': external data length 8 does not match the "
                    "16 bytes of its shape");
  EXPECT_EQ(importWith("/etc/passwd", 0),
            model + ": tensor 'w': external data location '/etc/passwd' must "
                    "be a relative path");
  EXPECT_EQ(importWith("../x.bin", 0),
            model + ": tensor 'w': external data location '../x.bin' leaves "
                    "the model directory");
  // A missing file is no import error (its bytes are read lazily); the
  // load names it.
  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), "missing.bin",
               0);
  b.node("Add", {"x", "w"}, {"s"}, "add0");
  b.output("s");
  dir.write("model.onnx", b.bytes());
  auto imported = importOnnxFile(dir.file("model.onnx"));
  ASSERT_TRUE(bool(imported)) << llvm::toString(imported.takeError());
  std::string missing =
      errorOf((*imported)->getGraph().lookupValue("w")->getData().load());
  EXPECT_EQ(missing.rfind("cannot open external data file '" +
                              dir.file("missing.bin") + "': ",
                          0),
            0u)
      << missing;
}

TEST(OnnxImportExternal, LinksMustStayInsideTheModelDirectory) {
  TempDir dir;
  std::vector<float> values = {1, 2, 3, 4};
  std::string blob(16, '\0');
  std::memcpy(&blob[0], values.data(), 16);
  dir.write("weights.bin", blob);
  ASSERT_EQ(::symlink("weights.bin", dir.file("alias.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", dir.file("passwd.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", dir.file("zero.bin").c_str()), 0);
  ASSERT_EQ(::symlink("/etc", dir.file("etc").c_str()), 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  auto importWith = [&](const std::string &location) {
    ModelBuilder b;
    b.input("x", TP::FLOAT, {4});
    makeExternal(b.initializer<float>("w", TP::FLOAT, {4}, {}), location, 0);
    b.node("Add", {"x", "w"}, {"s"}, "add0");
    b.output("s");
    dir.write("model.onnx", b.bytes());
    auto module = importOnnxFile(dir.file("model.onnx"));
    return module ? std::string("<success>")
                  : llvm::toString(module.takeError());
  };
  std::string model = dir.file("model.onnx");
  // A link that stays inside is followed.
  EXPECT_EQ(importWith("alias.bin"), "<success>");
  // Links out of the directory are refused before anything is read, so
  // nothing of the file can appear in a message.
  for (const char *location : {"passwd.bin", "zero.bin", "etc/passwd"}) {
    std::string message = importWith(location);
    EXPECT_EQ(message, model + ": tensor 'w': external data location '" +
                           location +
                           "' resolves to a file outside the model directory");
    EXPECT_EQ(message.find("root"), std::string::npos) << message;
  }
  // Inside, but not a regular file: refused without opening it (a FIFO
  // would block).
  llvm::SmallString<256> realFifo;
  ASSERT_FALSE(llvm::sys::fs::real_path(dir.file("fifo.bin"), realFifo));
  EXPECT_EQ(importWith("fifo.bin"),
            model + ": tensor 'w': external data location 'fifo.bin': " +
                realFifo.str().str() + ": is a FIFO, not a regular file");
}

//===----------------------------------------------------------------------===//
// Scale
//===----------------------------------------------------------------------===//

/// A chain of \p n Relu nodes, in file order or reversed.
onnx::ModelProto makeChain(int n, bool reversed) {
  ModelBuilder b;
  b.input("v0", TP::FLOAT, {"batch", 16});
  for (int i = 0; i < n; ++i) {
    int k = reversed ? n - 1 - i : i;
    b.node("Relu", {"v" + std::to_string(k)}, {"v" + std::to_string(k + 1)},
           "relu" + std::to_string(k));
  }
  b.output("v" + std::to_string(n), TP::FLOAT, {"batch", 16});
  return b.model;
}

TEST(OnnxImportScale, HundredThousandNodes) {
  constexpr int kNodes = 100000;
  for (bool reversed : {false, true}) {
    onnx::ModelProto model = makeChain(kNodes, reversed);
    auto start = std::chrono::steady_clock::now();
    auto module = importBytes(model);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
    const Graph &g = (*module)->getGraph();
    ASSERT_EQ(g.getNumNodes(), size_t(kNodes));
    EXPECT_EQ(g.getNodes().front().getName(), "relu0");
    EXPECT_EQ(g.getNodes().back().getName(),
              "relu" + std::to_string(kNodes - 1));
    EXPECT_EQ(g.getOutput(0)->getType().str(), "f32[batch,16]");
    // Linear import takes about a second even in a debug build on a busy
    // machine; a quadratic name lookup or ordering would take hours.
    EXPECT_LT(seconds, 120.0) << (reversed ? "reversed" : "in order");
  }
}

} // namespace
