//===- CudaKernelTableTest.cpp - The CUDA kernel table, without a device --===//
//
// Host-only checks of the CUDA kernel table (backend/cuda/CudaDispatch.cpp,
// CudaKernelTable.h): every op of the scratch column is a table entry, and
// the workspace model the planner reads gives what each prepared kernel
// carries; the families that decode once do so at prepare, without a
// device, and refuse there what their kernels cannot run; no entry decodes
// at launch any more (dropout and the collectives were the last). A tree
// configured without the CUDA backend (no toolkit, or GMOPT_ENABLE_CUDA=OFF
// as in the sanitizer tree) has no table: there only the scratch column,
// which the planner needs everywhere, is checked, and the table's tests are
// not compiled (GMOPT_HAVE_CUDA), rather than skipped.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernelTable.h"
#include "backend/Memory.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/StringSet.h"

#include "gtest/gtest.h"

#include <set>
#include <string>

using namespace gmopt;

namespace {

TensorType type(DType dtype, std::vector<int64_t> shape) {
  return TensorType::get(dtype, shape);
}

/// A module of one node of (\p domain, \p op) over graph inputs of
/// \p inputs' types, with results of \p results' types.
struct OneNode {
  std::unique_ptr<Module> module = std::make_unique<Module>();
  Node *node = nullptr;

  OneNode(llvm::StringRef domain, llvm::StringRef op,
          std::vector<TensorType> inputs, std::vector<TensorType> results,
          std::vector<NamedAttribute> attrs = {}) {
    module->opsetImports[""] = 18;
    module->opsetImports[std::string(kMsDomain)] = 1;
    Graph &graph = module->getGraph();
    std::vector<Value *> operands;
    for (unsigned i = 0; i < inputs.size(); ++i)
      operands.push_back(graph.addInput(inputs[i], "in" + std::to_string(i)));
    Builder builder(graph);
    node = builder.create(OpName{domain.str(), op.str()}, operands, results,
                          attrs, op.str());
  }
};

TEST(CudaKernelTableTest, EveryScratchRuleIsATableEntry) {
  std::vector<std::string> ops = cuda::listKernelScratchOps();
  ASSERT_FALSE(ops.empty());
  for (const std::string &op : ops) {
    auto [domain, name] = llvm::StringRef(op).split("::");
    EXPECT_TRUE(OpRegistry::instance().knows(domain, name))
        << op << " has a scratch rule but is not a registered op";
    EXPECT_TRUE(cuda::getKernelScratchRule(domain, name)) << op;
#ifdef GMOPT_HAVE_CUDA
    EXPECT_TRUE(hasCudaKernelFor(domain, name))
        << op << " has a scratch rule but no CUDA kernel";
#endif
  }
  EXPECT_FALSE(cuda::getKernelScratchRule("", "Relu"));
}

TEST(CudaKernelTableTest, PreparedScratchIsTheWorkspaceModels) {
  // One node per kind of rule, and one without: the planner's figure
  // (getCudaKernelWorkspaceBytes) is the one the prepared kernel carries.
  OneNode matMul("", "MatMul",
                 {type(DType::F32, {2, 3}), type(DType::F32, {3, 4})},
                 {type(DType::F32, {2, 4})});
  OneNode gatherGrad(
      kMsDomain, "GatherGrad",
      {type(DType::I64, {2}), type(DType::I64, {3}), type(DType::F16, {3, 4})},
      {type(DType::F16, {5, 4})});
  OneNode floatGatherGrad(
      kMsDomain, "GatherGrad",
      {type(DType::I64, {2}), type(DType::I64, {3}), type(DType::F32, {3, 4})},
      {type(DType::F32, {5, 4})});
  OneNode relu("", "Relu", {type(DType::F32, {4})}, {type(DType::F32, {4})});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*matMul.node), kCudaGemmWorkspaceBytes);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*gatherGrad.node),
            alignBuffer(5 * 4 * sizeof(float)));
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*floatGatherGrad.node), 0u);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*relu.node), 0u);
#ifdef GMOPT_HAVE_CUDA
  ASSERT_TRUE(isCudaBackendBuilt());
  for (const Node *node :
       {matMul.node, gatherGrad.node, floatGatherGrad.node, relu.node}) {
    auto prepared = cuda::prepareCudaKernelOnHost(*node);
    ASSERT_TRUE(bool(prepared))
        << node->describe() << ": " << llvm::toString(prepared.takeError());
    EXPECT_EQ(prepared->scratchBytes, getCudaKernelWorkspaceBytes(*node))
        << node->describe();
  }
  // The GEMMs choose their algorithm on the device: only their check ran
  // (an Einsum that lowers to one as well).
  EXPECT_TRUE(cuda::prepareCudaKernelOnHost(*matMul.node)->needsDevice);
  OneNode einsum("", "Einsum",
                 {type(DType::F32, {2, 3}), type(DType::F32, {3, 4})},
                 {type(DType::F32, {2, 4})},
                 {{"equation", Attribute::getString("ij,jk->ik")}});
  auto preparedEinsum = cuda::prepareCudaKernelOnHost(*einsum.node);
  ASSERT_TRUE(bool(preparedEinsum))
      << llvm::toString(preparedEinsum.takeError());
  EXPECT_TRUE(preparedEinsum->needsDevice);
  EXPECT_TRUE(preparedEinsum->decodedAtPrepare);
  EXPECT_EQ(preparedEinsum->scratchBytes, kCudaGemmWorkspaceBytes);
#endif
}

#ifdef GMOPT_HAVE_CUDA

TEST(CudaKernelTableTest, DecodedFamiliesPrepareWithoutADevice) {
  TensorType x = type(DType::F32, {2, 3, 4});
  std::vector<OneNode> nodes;
  nodes.emplace_back(
      "", "LayerNormalization",
      std::vector<TensorType>{x, type(DType::F32, {4}), type(DType::F32, {4})},
      std::vector<TensorType>{x},
      std::vector<NamedAttribute>{{"axis", Attribute::getInt(-1)}});
  nodes.emplace_back(
      kMsDomain, "SimplifiedLayerNormalizationGrad",
      std::vector<TensorType>{x, x, type(DType::F32, {4}),
                              type(DType::F32, {2, 3, 1})},
      std::vector<TensorType>{x, type(DType::F32, {4})},
      std::vector<NamedAttribute>{{"axis", Attribute::getInt(-1)}});
  nodes.emplace_back(
      "", "ReduceSum", std::vector<TensorType>{x},
      std::vector<TensorType>{type(DType::F32, {2, 1, 4})},
      std::vector<NamedAttribute>{{"axes", Attribute::getInts({1})}});
  nodes.emplace_back(
      "", "ArgMax", std::vector<TensorType>{x},
      std::vector<TensorType>{type(DType::I64, {2, 3, 1})},
      std::vector<NamedAttribute>{{"axis", Attribute::getInt(2)}});
  nodes.emplace_back(
      "", "InstanceNormalization",
      std::vector<TensorType>{x, type(DType::F32, {3}), type(DType::F32, {3})},
      std::vector<TensorType>{x});
  nodes.emplace_back(kMsDomain, "DivGrad",
                     std::vector<TensorType>{x, x, type(DType::F32, {4})},
                     std::vector<TensorType>{x, type(DType::F32, {4})});
  nodes.emplace_back(
      "", "SoftmaxCrossEntropyLoss",
      std::vector<TensorType>{type(DType::F32, {2, 5}), type(DType::I64, {2})},
      std::vector<TensorType>{type(DType::F32, {}), type(DType::F32, {2, 5})});
  nodes.emplace_back(kMsDomain, "SoftmaxCrossEntropyGrad",
                     std::vector<TensorType>{type(DType::F32, {}),
                                             type(DType::F32, {2, 5}),
                                             type(DType::F32, {2, 5})},
                     std::vector<TensorType>{type(DType::F32, {2, 5})});
  nodes.emplace_back(
      "", "GatherElements",
      std::vector<TensorType>{x, type(DType::I64, {2, 3, 2})},
      std::vector<TensorType>{type(DType::F32, {2, 3, 2})},
      std::vector<NamedAttribute>{{"axis", Attribute::getInt(2)}});
  nodes.emplace_back("", "Size", std::vector<TensorType>{x},
                     std::vector<TensorType>{type(DType::I64, {})});
  nodes.emplace_back("", "Constant", std::vector<TensorType>{},
                     std::vector<TensorType>{type(DType::I64, {3})},
                     std::vector<NamedAttribute>{
                         {"value_ints", Attribute::getInts({1, 2, 3})}});
  nodes.emplace_back(kMsDomain, "ZeroGradient",
                     std::vector<TensorType>{x, type(DType::Bool, {})},
                     std::vector<TensorType>{x});
  nodes.emplace_back(kMsDomain, "IsAllFinite",
                     std::vector<TensorType>{x, type(DType::F16, {4})},
                     std::vector<TensorType>{type(DType::Bool, {})});
  nodes.emplace_back(kMsDomain, "InPlaceAccumulatorV2",
                     std::vector<TensorType>{x, x},
                     std::vector<TensorType>{type(DType::Bool, {1}), x});
  nodes.emplace_back("", "Transpose", std::vector<TensorType>{x},
                     std::vector<TensorType>{type(DType::F32, {4, 3, 2})});
  nodes.emplace_back(
      "", "Concat", std::vector<TensorType>{x, x},
      std::vector<TensorType>{type(DType::F32, {2, 6, 4})},
      std::vector<NamedAttribute>{{"axis", Attribute::getInt(1)}});
  nodes.emplace_back(
      "", "Cast", std::vector<TensorType>{x},
      std::vector<TensorType>{type(DType::F16, {2, 3, 4})},
      std::vector<NamedAttribute>{{"to", Attribute::getInt(10)}});
  nodes.emplace_back("", "Less",
                     std::vector<TensorType>{x, type(DType::F32, {4})},
                     std::vector<TensorType>{type(DType::Bool, {2, 3, 4})});
  nodes.emplace_back(
      "", "MaxPool", std::vector<TensorType>{type(DType::F32, {1, 2, 4, 4})},
      std::vector<TensorType>{type(DType::F32, {1, 2, 2, 2})},
      std::vector<NamedAttribute>{{"kernel_shape", Attribute::getInts({2, 2})},
                                  {"strides", Attribute::getInts({2, 2})}});
  nodes.emplace_back("", "GlobalAveragePool",
                     std::vector<TensorType>{type(DType::F16, {1, 2, 4, 4})},
                     std::vector<TensorType>{type(DType::F16, {1, 2, 1, 1})});
  for (const OneNode &one : nodes) {
    const Node &node = *one.node;
    ASSERT_TRUE(
        cuda::isCudaKernelDecodedAtPrepare(node.getDomain(), node.getOpType()))
        << node.getOp().str();
    auto prepared = cuda::prepareCudaKernelOnHost(node);
    ASSERT_TRUE(bool(prepared))
        << node.describe() << ": " << llvm::toString(prepared.takeError());
    EXPECT_TRUE(prepared->decodedAtPrepare) << node.describe();
    EXPECT_FALSE(prepared->needsDevice) << node.describe();
  }
}

TEST(CudaKernelTableTest, ADecodeRefusesAtPrepare) {
  // ReduceSum's axes as a graph input: the launch could not read them on
  // the host, so preparing the node fails, naming it.
  OneNode reduce("", "ReduceSum",
                 {type(DType::F32, {2, 3}), type(DType::I64, {1})},
                 {type(DType::F32, {2, 1})});
  auto prepared = cuda::prepareCudaKernelOnHost(*reduce.node);
  ASSERT_FALSE(bool(prepared));
  std::string message = llvm::toString(prepared.takeError());
  EXPECT_NE(message.find("axes must be a constant"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(node ReduceSum)"), std::string::npos) << message;
}

TEST(CudaKernelTableTest, DropoutAndCollectivesDecodeAtPrepare) {
  // A ratio read on the device, a training flag, the node's stream.
  OneNode dropout(
      "", "Dropout",
      {type(DType::F32, {2, 16}), type(DType::F32, {}), type(DType::Bool, {})},
      {type(DType::F32, {2, 16}), type(DType::Bool, {2, 16})});
  dropout.node->setStreamId(7);
  auto prepared = cuda::prepareCudaKernelOnHost(*dropout.node);
  ASSERT_TRUE(bool(prepared)) << llvm::toString(prepared.takeError());
  EXPECT_TRUE(prepared->decodedAtPrepare);
  // Without a stream id the draw has no Philox key: refused at prepare.
  dropout.node->setStreamId(std::nullopt);
  auto refused = cuda::prepareCudaKernelOnHost(*dropout.node);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("no stream id"),
            std::string::npos);

  OneNode grad(kMsDomain, "BitmaskDropoutGrad",
               {type(DType::F16, {40}), type(DType::U32, {2})},
               {type(DType::F16, {40})});
  auto preparedGrad = cuda::prepareCudaKernelOnHost(*grad.node);
  ASSERT_TRUE(bool(preparedGrad)) << llvm::toString(preparedGrad.takeError());
  EXPECT_TRUE(preparedGrad->decodedAtPrepare);

  OneNode allReduce(kGmoptDomain, "AllReduce",
                    {type(DType::F32, {4}), type(DType::F16, {3})},
                    {type(DType::F32, {4}), type(DType::F16, {3})},
                    {{"ranks", Attribute::getInt(1)},
                     {"reduction", Attribute::getString("sum")}});
  auto preparedReduce = cuda::prepareCudaKernelOnHost(*allReduce.node);
  ASSERT_TRUE(bool(preparedReduce))
      << llvm::toString(preparedReduce.takeError());
  EXPECT_TRUE(preparedReduce->decodedAtPrepare);
  EXPECT_EQ(preparedReduce->scratchBytes, 0u);

  // A reduction the collectives do not know is refused at prepare.
  OneNode unknown(kGmoptDomain, "AllReduce", {type(DType::F32, {4})},
                  {type(DType::F32, {4})},
                  {{"ranks", Attribute::getInt(1)},
                   {"reduction", Attribute::getString("max")}});
  auto refusedReduce = cuda::prepareCudaKernelOnHost(*unknown.node);
  EXPECT_FALSE(bool(refusedReduce));
  llvm::consumeError(refusedReduce.takeError());
}

TEST(CudaKernelTableTest, EveryEntryDecodesAtPrepare) {
  // Dropout and the collectives were the last families decoding at launch
  // (issue 35): every entry now decodes its nodes once, when prepared.
  std::set<std::string> ops;
  for (const OpSchema *schema : OpRegistry::instance().all())
    ops.insert(schema->domain + "::" + schema->name);
  std::string decodingAtLaunch;
  size_t entries = 0;
  for (const std::string &op : ops) {
    auto [domain, name] = llvm::StringRef(op).split("::");
    if (!hasCudaKernelFor(domain, name))
      continue;
    ++entries;
    if (!cuda::isCudaKernelDecodedAtPrepare(domain, name))
      decodingAtLaunch += "  " + op + "\n";
  }
  EXPECT_GT(entries, 50u) << "the CUDA kernel table looks empty";
  EXPECT_TRUE(decodingAtLaunch.empty())
      << "CUDA entries that decode at launch:\n"
      << decodingAtLaunch;
}

#endif // GMOPT_HAVE_CUDA

} // namespace
