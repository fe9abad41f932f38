//===- VerifierTest.cpp - Unit tests of the module verifier ---------------===//
//
// Each invariant the verifier guards gets a module that breaks exactly that
// invariant, and the test checks the message says what broke and where.
//
//===----------------------------------------------------------------------===//

#include "ir/Verifier.h"
#include "ir/Module.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

OpName onnx(llvm::StringRef type) { return {"", type.str()}; }

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

class VerifierTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    module.opsetImports["com.microsoft"] = 1;
    x = graph().addInput(f32({2, 3}), "x");
  }
  Graph &graph() { return module.getGraph(); }

  Module module;
  Value *x = nullptr;
};

TEST_F(VerifierTest, AcceptsWellFormedGraph) {
  Builder b(graph());
  Node *relu = b.create(onnx("Relu"), {x}, {f32({2, 3})}, {}, "relu");
  Node *add = b.create(onnx("Add"), {relu->getResult(0), x}, {f32({2, 3})});
  graph().addOutput(add->getResult(0));
  EXPECT_EQ(errorText(verifyModule(module)), "<success>");
}

TEST_F(VerifierTest, RejectsUseBeforeDefinition) {
  Builder b(graph());
  Node *first = b.create(onnx("Relu"), {x}, {f32({2, 3})}, {}, "first");
  Node *second = b.create(onnx("Neg"), {x}, {f32({2, 3})}, {}, "second");
  first->setOperand(0, second->getResult(0));
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("not a topological order"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(node first)"), std::string::npos) << message;
}

TEST_F(VerifierTest, ReportsCycles) {
  Builder b(graph());
  Node *a = b.create(onnx("Add"), {x, x}, {f32({2, 3})}, {}, "a");
  Node *c = b.create(onnx("Relu"), {a->getResult(0)}, {f32({2, 3})}, {}, "c");
  a->setOperand(1, c->getResult(0));
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("cycle"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsUnknownOp) {
  Builder b(graph());
  b.create({"com.foo", "Bar"}, {x}, {f32({2, 3})}, {}, "bar");
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("unknown op 'com.foo.Bar'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(node bar)"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsWrongArity) {
  Builder b(graph());
  b.create(onnx("Relu"), {x, x}, {f32({2, 3})}, {}, "relu2");
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("relu2"), std::string::npos) << message;
  EXPECT_NE(message.find("input"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsDTypeMismatch) {
  Value *h = graph().addInput(TensorType::get(DType::F16, {2, 3}), "h");
  Builder b(graph());
  b.create(onnx("Add"), {x, h}, {f32({2, 3})}, {}, "mixed");
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("mixed"), std::string::npos) << message;
  EXPECT_NE(message.find("f16"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsResultTypeThatContradictsInference) {
  Builder b(graph());
  b.create(onnx("Relu"), {x}, {f32({3, 2})}, {}, "relu");
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("infers f32[2,3]"), std::string::npos) << message;
  VerifyOptions lax;
  lax.checkTypes = false;
  EXPECT_EQ(errorText(verifyModule(module, lax)), "<success>");
}

TEST_F(VerifierTest, RequireStaticShapes) {
  Value *dyn = graph().addInput(
      TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(3)}), "dyn");
  Builder b(graph());
  Node *relu = b.create(
      onnx("Relu"), {dyn},
      {TensorType(DType::F32, {Dim::symbolic("batch"), Dim::fixed(3)})});
  graph().addOutput(relu->getResult(0));
  EXPECT_EQ(errorText(verifyModule(module)), "<success>");
  VerifyOptions strict;
  strict.requireStaticShapes = true;
  std::string message = errorText(verifyModule(module, strict));
  EXPECT_NE(message.find("not static"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsSignatureReferringToDeadValue) {
  Builder b(graph());
  Node *relu = b.create(onnx("Relu"), {x}, {f32({2, 3})});
  graph().addOutput(relu->getResult(0));
  ParamInfo param;
  param.param = x;
  param.grad = relu->getResult(0);
  module.getSignature().appendParam(param);
  EXPECT_EQ(errorText(verifyModule(module)), "<success>");
  TrainingSignature broken;
  param.param = relu->getResult(0);
  param.grad = nullptr;
  broken.appendParam(param);
  module.setSignature(broken);
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("node result"), std::string::npos) << message;
}

TEST_F(VerifierTest, RejectsInitializerWhoseDataDisagreesWithType) {
  Value *c = graph().addInitializer(
      TensorData::fromValues<float>(DType::F32, {2}, {1.0f, 2.0f}), "c");
  c->setType(f32({3}));
  std::string message = errorText(verifyModule(module));
  EXPECT_NE(message.find("'c'"), std::string::npos) << message;
}

} // namespace
