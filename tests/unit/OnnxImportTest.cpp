//===- OnnxImportTest.cpp - Tests of ONNX import --------------------------===//
//
// Unit tests of importOnnxBytes/File/Model on well-formed models: name
// resolution to SSA, absent optional operands and results, topological
// reordering, type hints and dimension binding, checkDimsBound, and import
// time at scale. Bad inputs are in OnnxImportErrorsTest.cpp, tensor
// encodings and external data in OnnxTensorImportTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "ir/serialization/Onnx.h"

#include "OnnxTestModels.h"
#include "TestSupport.h"
#include "ir/Module.h"
#include "ir/serialization/OnnxTensor.h"

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
