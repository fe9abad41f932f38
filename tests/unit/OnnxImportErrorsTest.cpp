//===- OnnxImportErrorsTest.cpp - Bad ONNX inputs -------------------------===//
//
// One test per malformed or unsupported ONNX model, each with the exact
// message importOnnxBytes/File reports: truncated, garbage or missing
// files, unresolved ops, wrong arities and dtypes, missing inputs, cycles,
// duplicate definitions, unsupported opsets and IR versions, subgraph and
// other unsupported attributes, non-tensor inputs, sparse and bad
// initializers. Every error names the file and, where there is one, the
// node.
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

#include <sys/stat.h>
#include <unistd.h>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

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

/// A one-node model whose node gmopt cannot resolve, and the message.
struct UnresolvedOpCase {
  const char *op;
  const char *domain; // "" for ai.onnx; imported at opset 1 otherwise
  const char *nodeName;
  const char *message;
};

TEST(OnnxImportErrors, UnresolvedOpsNameOpDomainAndOpset) {
  const UnresolvedOpCase cases[] = {
      {"Bar", "com.foo", "bar0",
       "m.onnx: unknown op 'Bar' of domain 'com.foo' at opset 1 (node bar0)"},
      {"Frobnicate", "", "f0",
       "m.onnx: unknown op 'Frobnicate' of domain 'ai.onnx' at opset 17 "
       "(node f0)"},
      // ai.onnx Gelu exists from opset 20; at 17 the model must say
      // com.microsoft.Gelu (what ONNX Runtime's fusions write).
      {"Gelu", "", "gelu0",
       "m.onnx: op 'Gelu' does not exist in opset 17 of domain 'ai.onnx' "
       "(gmopt knows it from opset 20; node gelu0)"},
  };
  for (const UnresolvedOpCase &c : cases) {
    SCOPED_TRACE(c.op);
    ModelBuilder b;
    if (*c.domain)
      b.addOpset(c.domain, 1);
    b.input("x", TP::FLOAT, {2});
    b.node(c.op, {"x"}, {"y"}, c.nodeName, c.domain);
    b.output("y");
    EXPECT_EQ(errorOf(importBytes(b.model)), c.message);
  }
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
  for (int64_t opset : {12, 24}) {
    ModelBuilder b = reluModel();
    b.model.mutable_opset_import(0)->set_version(opset);
    EXPECT_EQ(errorOf(importBytes(b.model)),
              "m.onnx: unsupported opset " + std::to_string(opset) +
                  " for domain '' (gmopt supports opsets 13 to 23)");
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

} // namespace
