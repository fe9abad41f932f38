//===- NamingTest.cpp - Tests of unique value and node names --------------===//
//
// computeUniqueValueNames / uniquifyValueNames and their node counterparts:
// first holders keep their names, duplicates and unnamed entities get
// invented names that collide with nothing in the graph, the result is
// deterministic, and the ONNX exporter writes exactly these names (for
// values and for nodes).
//
//===----------------------------------------------------------------------===//

#include "ir/Naming.h"

#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

TensorType f32(llvm::ArrayRef<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

/// x -> Relu "a" -> Neg "a" (duplicate) -> Abs "" (unnamed) -> Exp
/// "gmopt_0" (looks invented) -> output; nodes named "n", "n", "", "m".
class NamingTest : public ::testing::Test {
protected:
  void SetUp() override {
    module.opsetImports[""] = 17;
    Graph &graph = module.getGraph();
    x = graph.addInput(f32({4}), "x");
    Builder b(graph);
    relu = b.create({"", "Relu"}, {x}, {f32({4})}, {}, "n")->getResult(0);
    relu->setName("a");
    neg = b.create({"", "Neg"}, {relu}, {f32({4})}, {}, "n")->getResult(0);
    neg->setName("a");
    abs = b.create({"", "Abs"}, {neg}, {f32({4})}, {}, "")->getResult(0);
    exp = b.create({"", "Exp"}, {abs}, {f32({4})}, {}, "m")->getResult(0);
    exp->setName("gmopt_0");
    graph.addOutput(exp);
  }

  Module module;
  Value *x, *relu, *neg, *abs, *exp;
};

TEST_F(NamingTest, FirstHolderKeepsItsNameOthersGetFreshOnes) {
  auto names = computeUniqueValueNames(module.getGraph());
  EXPECT_EQ(names[x], "x");
  EXPECT_EQ(names[relu], "a");
  // gmopt_0 is taken by a later value, so inventing starts at gmopt_1.
  EXPECT_EQ(names[neg], "gmopt_1");
  EXPECT_EQ(names[abs], "gmopt_2");
  EXPECT_EQ(names[exp], "gmopt_0");
  // Computing names changes nothing.
  EXPECT_EQ(neg->getName(), "a");
  EXPECT_EQ(abs->getName(), "");
}

TEST_F(NamingTest, UniquifyRenamesOnlyDuplicatesAndUnnamed) {
  uniquifyValueNames(module);
  EXPECT_EQ(x->getName(), "x");
  EXPECT_EQ(relu->getName(), "a");
  EXPECT_EQ(neg->getName(), "gmopt_1");
  EXPECT_EQ(abs->getName(), "gmopt_2");
  EXPECT_EQ(exp->getName(), "gmopt_0");
  // Idempotent.
  uniquifyValueNames(module);
  EXPECT_EQ(neg->getName(), "gmopt_1");
  EXPECT_EQ(abs->getName(), "gmopt_2");
}

TEST_F(NamingTest, ExporterUsesTheSameNames) {
  auto names = computeUniqueValueNames(module.getGraph());
  auto model = exportOnnxModel(module);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  const onnx::GraphProto &graph = model->graph();
  ASSERT_EQ(graph.node_size(), 4);
  EXPECT_EQ(graph.node(0).output(0), names[relu]);
  EXPECT_EQ(graph.node(1).output(0), names[neg]);
  EXPECT_EQ(graph.node(2).output(0), names[abs]);
  EXPECT_EQ(graph.node(3).output(0), names[exp]);
  // After uniquifying, every value is exported under its own name.
  uniquifyValueNames(module);
  auto again = exportOnnxModel(module);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->SerializeAsString(), model->SerializeAsString());
  EXPECT_EQ(again->graph().node(1).output(0), neg->getName());
}

TEST_F(NamingTest, NodeNames) {
  Graph &graph = module.getGraph();
  auto names = computeUniqueNodeNames(graph);
  std::vector<std::string> expected = {"n", "gmopt_node_0", "gmopt_node_1",
                                       "m"};
  unsigned i = 0;
  for (const Node &node : graph.getNodes())
    EXPECT_EQ(names[&node], expected[i++]);
  uniquifyNodeNames(module);
  i = 0;
  for (const Node &node : graph.getNodes())
    EXPECT_EQ(node.getName(), expected[i++]);
}

TEST_F(NamingTest, ExporterWritesUniqueNodeNames) {
  // ONNX Runtime rejects two nodes of one name; the exporter writes the
  // computeUniqueNodeNames names, the module keeps its own.
  auto model = exportOnnxModel(module);
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  std::vector<std::string> expected = {"n", "gmopt_node_0", "gmopt_node_1",
                                       "m"};
  ASSERT_EQ(model->graph().node_size(), 4);
  for (int i = 0; i != 4; ++i)
    EXPECT_EQ(model->graph().node(i).name(), expected[i]);
  EXPECT_EQ(module.getGraph().getNodes().begin()->getName(), "n");
  EXPECT_EQ(std::next(module.getGraph().getNodes().begin())->getName(), "n");
}

} // namespace
