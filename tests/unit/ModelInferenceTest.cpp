//===- ModelInferenceTest.cpp - Op registry on the real training graphs ---===//
//
// Runs the registry over every training graph in testdata/ (ONNX Runtime's
// own output): after import, all recorded result types are erased and
// re-inferred node by node from the graph inputs alone. With the batch
// dimension bound every result must come out static and agree with what
// ONNX Runtime recorded; with it symbolic, every result must still be
// ranked and keep the batch symbol where the graph preserves it. Every
// node must also get a cost estimate.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/serialization/Onnx.h"
#include "tests/unit/TestdataTraining.h"

#include "llvm/Support/FileSystem.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <map>
#include <string>

using namespace gmopt;

namespace {

const char *const kModels[] = {"mlp",
                               "cnn",
                               "resnet_tiny",
                               "gpt_tiny",
                               "gpt_tiny_untied",
                               "gpt_tiny_dropout",
                               "gpt_opset14",
                               "gpt_opset20",
                               "regression_frozen",
                               "bert_tiny",
                               "llama_tiny",
                               "llama_tiny_untied",
                               "cnn_bn"};

std::string modelPath(llvm::StringRef model) {
  return gmopt::testdataDir() + "/" + model.str() + "/training_model.onnx";
}

/// Whether \p node's result types are not a function of its operands, so
/// only the graph's recorded types give them: AveragePoolGrad takes dY alone
/// and a stride-2 pool maps extents 16 and 17 both to 8 (ONNX Runtime's
/// kernel, too, reads dX's shape from the graph).
bool resultTypesAreRecordedOnly(const Node &node) {
  return node.isa(kOnnxDomain, "AveragePoolGrad");
}

/// Erases every node result type (but those resultTypesAreRecordedOnly
/// keeps) and re-infers them in schedule order. Returns the recorded types,
/// keyed by node result, for comparison.
std::map<const Value *, TensorType> reinferAll(Module &module) {
  std::map<const Value *, TensorType> recorded;
  for (Node &node : module.getGraph().getNodes())
    for (Value *result : node.getResults())
      if (result && !resultTypesAreRecordedOnly(node)) {
        recorded[result] = result->getType();
        result->setType(TensorType());
      }
  for (Node &node : module.getGraph().getNodes())
    if (llvm::Error err = inferAndSetTypes(node))
      ADD_FAILURE() << llvm::toString(std::move(err));
  return recorded;
}

class ModelInferenceTest : public ::testing::TestWithParam<const char *> {};

TEST_P(ModelInferenceTest, EveryResultIsStaticOnceTheBatchIsBound) {
  std::string path = modelPath(GetParam());
  // A committed fixture: missing is a failure, never a skip.
  ASSERT_TRUE(llvm::sys::fs::exists(path)) << "missing " << path;
  OnnxImportOptions options;
  options.dimBindings = {
      {"batch", 8},
      {"batch_x_seq", 8 * gmopt::testing::testdataSequenceLength(GetParam())}};
  auto module = importOnnxFile(path, options);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  std::map<const Value *, TensorType> recorded = reinferAll(**module);
  unsigned numNodes = 0;
  for (Node &node : (*module)->getGraph().getNodes()) {
    ++numNodes;
    ASSERT_NE(OpRegistry::instance().lookup(node), nullptr)
        << node.getOp().str();
    for (Value *result : node.getResults()) {
      if (!result)
        continue;
      const TensorType &type = result->getType();
      EXPECT_TRUE(type.hasStaticShape())
          << node.describe() << " (" << node.getOp().str() << ") result "
          << result->getResultIndex() << ": " << type.str();
      const TensorType &before = recorded[result];
      if (before.hasStaticShape()) {
        EXPECT_EQ(type, before)
            << node.describe() << " result " << result->getResultIndex();
      }
    }
    OpCost cost = estimateCost(node);
    EXPECT_LE(cost.flops, uint64_t(1) << 40) << node.describe();
  }
  EXPECT_GT(numNodes, 5u);
}

TEST_P(ModelInferenceTest, SymbolicBatchStaysSymbolic) {
  std::string path = modelPath(GetParam());
  // A committed fixture: missing is a failure, never a skip.
  ASSERT_TRUE(llvm::sys::fs::exists(path)) << "missing " << path;
  auto module = importOnnxFile(path);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  reinferAll(**module);
  unsigned numBatchResults = 0;
  for (Node &node : (*module)->getGraph().getNodes())
    for (Value *result : node.getResults()) {
      if (!result)
        continue;
      const TensorType &type = result->getType();
      EXPECT_TRUE(type.hasRank())
          << node.describe() << " (" << node.getOp().str() << ")";
      EXPECT_NE(type.getDType(), DType::Undefined) << node.describe();
      if (type.hasRank())
        for (const Dim &dim : type.getDims())
          if (dim.isSymbolic() && (dim.getSymbol() == "batch" ||
                                   dim.getSymbol() == "batch_x_seq")) {
            ++numBatchResults;
            break;
          }
    }
  // The forward activations and their gradients all carry the batch; cnn_bn
  // is exported with a static batch (testdata/generate.py: ONNX Runtime's
  // AveragePoolGrad needs one), so none of its results can.
  if (llvm::StringRef(GetParam()) == "cnn_bn")
    EXPECT_EQ(numBatchResults, 0u);
  else
    EXPECT_GT(numBatchResults, 3u);
}

INSTANTIATE_TEST_SUITE_P(TrainingGraphs, ModelInferenceTest,
                         ::testing::ValuesIn(kModels));

} // namespace
