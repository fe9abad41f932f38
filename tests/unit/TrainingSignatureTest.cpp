//===- TrainingSignatureTest.cpp - Tests of the training signature --------===//
//
// Unit tests of inferTrainingSignature and inferNodePhases on synthetic models:
// ONNX Runtime's training_model.onnx pattern (with and without frozen
// parameters), gradient graphs that expose `P_grad` as outputs, and a
// forward-only graph; plus the small Module and TrainingSignature queries.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"

#include "OnnxTestModels.h"
#include "ir/serialization/Onnx.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <optional>

using namespace gmopt;
using namespace gmopt::test;
using TP = onnx::TensorProto;

namespace {

std::vector<std::string> names(llvm::ArrayRef<Value *> values) {
  std::vector<std::string> result;
  for (const Value *v : values)
    result.push_back(v ? v->getName().str() : "<null>");
  return result;
}

std::vector<std::string> paramNames(const TrainingSignature &sig,
                                    bool trainable) {
  std::vector<std::string> result;
  for (const ParamInfo &p : sig.getParams())
    if (p.trainable == trainable)
      result.push_back(p.param->getName().str());
  return result;
}

/// The phases the importer gave the nodes (inferNodePhases, run once by
/// importOnnx*).
llvm::DenseMap<const Node *, Phase> importedPhases(const Module &module) {
  llvm::DenseMap<const Node *, Phase> phases;
  for (const Node &node : module.getGraph().getNodes())
    phases[&node] = node.getPhase();
  return phases;
}

std::string phaseOf(const Module &module,
                    const llvm::DenseMap<const Node *, Phase> &phases,
                    llvm::StringRef nodeName) {
  for (const Node &node : module.getGraph().getNodes())
    if (node.getName() == nodeName)
      return phaseName(phases.lookup(&node)).str();
  return "<no node " + nodeName.str() + ">";
}

TEST(TrainingSignature, OrtTrainingModelPattern) {
  auto module = importOk(makeOrtMlp());
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  const TrainingSignature &sig = module->getSignature();
  EXPECT_TRUE(sig.hasGradients());
  EXPECT_EQ(sig.numTrainable(), 4u);
  EXPECT_EQ(paramNames(sig, true),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight",
                                      "fc2.bias"}));
  EXPECT_TRUE(paramNames(sig, false).empty());
  EXPECT_EQ(names(sig.getDataInputs()),
            (std::vector<std::string>{"input", "labels"}));
  ASSERT_TRUE(sig.getLoss());
  EXPECT_EQ(sig.getLoss()->getName(), "loss");
  ASSERT_TRUE(sig.getLossGradSeed());
  EXPECT_EQ(sig.getLossGradSeed()->getName(), "loss_grad");
  EXPECT_TRUE(sig.getLossGradSeed()->isInitializer());
  ASSERT_TRUE(sig.getLazyResetGrad());
  EXPECT_EQ(sig.getLazyResetGrad()->getName(), "lazy_reset_grad");

  const ParamInfo *w1 = sig.lookup(g.lookupValue("fc1.weight"));
  ASSERT_TRUE(w1);
  EXPECT_TRUE(w1->trainable);
  EXPECT_EQ(w1->grad, g.lookupValue("fc1.weight_grad"));
  EXPECT_EQ(w1->accumulator,
            g.lookupValue("fc1.weight_grad.accumulation.buffer"));
  ASSERT_TRUE(w1->accumulateNode);
  EXPECT_TRUE(w1->accumulateNode->isa(kMsDomain, "InPlaceAccumulatorV2"));
  EXPECT_EQ(w1->accumulateNode->getOperand(1), w1->grad);
  EXPECT_EQ(sig.lookup(g.lookupValue("input")), nullptr);
}

TEST(TrainingSignature, OrtFrozenParametersStayInputs) {
  MlpOptions opts;
  opts.frozenFc1 = true;
  auto module = importOk(makeOrtMlp(opts));
  ASSERT_TRUE(module);
  const TrainingSignature &sig = module->getSignature();
  EXPECT_EQ(paramNames(sig, true),
            (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  EXPECT_EQ(paramNames(sig, false),
            (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
  EXPECT_EQ(sig.numTrainable(), 2u);
  // Parameters are listed in graph-input order, frozen ones included.
  ASSERT_EQ(sig.getParams().size(), 4u);
  EXPECT_EQ(sig.getParams()[0].param->getName(), "fc1.weight");
  EXPECT_FALSE(sig.getParams()[0].trainable);
  EXPECT_EQ(sig.getParams()[0].grad, nullptr);
  EXPECT_EQ(sig.getParams()[0].accumulator, nullptr);
  EXPECT_EQ(names(sig.getDataInputs()),
            (std::vector<std::string>{"input", "labels"}));
}

TEST(TrainingSignature, FrozenInputAfterTrainableOnes) {
  // A frozen parameter without a PyTorch-style name, placed after the
  // trainable ones as ONNX Runtime does, is still a parameter.
  onnx::ModelProto model = makeOrtMlp();
  onnx::GraphProto *g = model.mutable_graph();
  onnx::ValueInfoProto *extra = g->add_input();
  extra->set_name("temperature");
  ModelBuilder::setType(*extra->mutable_type(), TP::FLOAT, {3});
  onnx::NodeProto *n = g->add_node();
  n->set_op_type("Mul");
  n->set_name("scale_logits");
  n->add_input("logits");
  n->add_input("temperature");
  n->add_output("scaled_logits");
  auto module = importOk(model);
  ASSERT_TRUE(module);
  EXPECT_EQ(paramNames(module->getSignature(), false),
            (std::vector<std::string>{"temperature"}));
  EXPECT_EQ(names(module->getSignature().getDataInputs()),
            (std::vector<std::string>{"input", "labels"}));
}

TEST(TrainingSignature, GradientsAsPlainOutputs) {
  MlpOptions opts;
  opts.accumulate = false;
  opts.paramsAsInitializers = true;
  auto module = importOk(makeOrtMlp(opts));
  ASSERT_TRUE(module);
  const Graph &g = module->getGraph();
  const TrainingSignature &sig = module->getSignature();
  EXPECT_TRUE(sig.hasGradients());
  EXPECT_EQ(paramNames(sig, true),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight",
                                      "fc2.bias"}));
  for (const ParamInfo &p : sig.getParams()) {
    EXPECT_TRUE(p.param->isInitializer());
    ASSERT_TRUE(p.grad);
    EXPECT_EQ(p.grad->getName(), p.param->getName().str() + "_grad");
    EXPECT_TRUE(p.grad->isGraphOutput());
    EXPECT_EQ(p.accumulator, nullptr);
    EXPECT_EQ(p.accumulateNode, nullptr);
  }
  EXPECT_EQ(sig.getLoss(), g.lookupValue("loss"));
  EXPECT_EQ(sig.getLossGradSeed(), g.lookupValue("loss_grad"));
  EXPECT_EQ(sig.getLazyResetGrad(), nullptr);
  EXPECT_EQ(names(sig.getDataInputs()),
            (std::vector<std::string>{"input", "labels"}));
}

TEST(TrainingSignature, ForwardOnlyGraph) {
  auto module = importOk(makeConvModel());
  ASSERT_TRUE(module);
  const TrainingSignature &sig = module->getSignature();
  EXPECT_FALSE(sig.hasGradients());
  EXPECT_EQ(sig.numTrainable(), 0u);
  EXPECT_EQ(paramNames(sig, false),
            (std::vector<std::string>{"conv.weight", "conv.bias", "fc.weight",
                                      "fc.bias"}));
  EXPECT_EQ(names(sig.getDataInputs()), (std::vector<std::string>{"image"}));
  ASSERT_TRUE(sig.getLoss());
  EXPECT_EQ(sig.getLoss()->getName(), "score");
  EXPECT_EQ(sig.getLossGradSeed(), nullptr);
  EXPECT_EQ(sig.getLazyResetGrad(), nullptr);
  auto phases = importedPhases(*module);
  for (const Node &node : module->getGraph().getNodes())
    EXPECT_EQ(phases.lookup(&node), Phase::Forward) << node.describe();
}

TEST(TrainingSignature, ScalarConstantsAreNotParameters) {
  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  b.initializer<float>("eps", TP::FLOAT, {}, {1e-5f});
  b.initializer<float>("table", TP::FLOAT, {4}, {1, 2, 3, 4});
  b.initializer<int64_t>("shape", TP::INT64, {1}, {4});
  b.node("Add", {"x", "eps"}, {"a"}, "add0");
  b.node("Mul", {"a", "table"}, {"m"}, "mul0");
  b.node("Reshape", {"m", "shape"}, {"y"}, "reshape0");
  b.output("y", TP::FLOAT, {4});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  EXPECT_EQ(paramNames(module->getSignature(), false),
            (std::vector<std::string>{"table"}));
  EXPECT_EQ(names(module->getSignature().getDataInputs()),
            (std::vector<std::string>{"x"}));
  // No scalar output: a forward graph has no loss.
  EXPECT_EQ(module->getSignature().getLoss(), nullptr);
}

TEST(ClassifyNodes, OrtTrainingModelPhases) {
  onnx::ModelProto model = makeOrtMlp();
  // An update reading an accumulation output belongs to the optimizer too.
  onnx::NodeProto *n = model.mutable_graph()->add_node();
  n->set_op_type("Not");
  n->set_name("after_accumulation");
  n->add_input("fc1.weight_grad.accumulation.out");
  n->add_output("not_flag");
  auto module = importOk(model);
  ASSERT_TRUE(module);
  auto phases = importedPhases(*module);
  EXPECT_EQ(phases.size(), module->getGraph().getNumNodes());
  for (const char *name :
       {"Gemm_0", "Relu_1", "Gemm_2", "SoftmaxCrossEntropyLoss_3"})
    EXPECT_EQ(phaseOf(*module, phases, name), "forward") << name;
  for (const char *name :
       {"SoftmaxCrossEntropyLoss_3_Grad/SoftmaxCrossEntropyLossInternalGrad_0",
        "Gemm_2_Grad/Gemm_0", "Gemm_2_Grad/ReduceSum_1", "Gemm_2_Grad/Gemm_2",
        "Relu_1_Grad/ReluGrad_0", "Gemm_0_Grad/Gemm_0",
        "Gemm_0_Grad/ReduceSum_1"})
    EXPECT_EQ(phaseOf(*module, phases, name), "backward") << name;
  for (const char *name :
       {"GradientAccumulator0", "GradientAccumulator3", "after_accumulation"})
    EXPECT_EQ(phaseOf(*module, phases, name), "optimizer") << name;
}

TEST(ClassifyNodes, BackwardByDependenceOnTheSeedAlone) {
  // No ONNX Runtime naming at all: only the dataflow from `loss_grad`
  // identifies the backward pass.
  ModelBuilder b;
  b.input("x", TP::FLOAT, {4});
  b.initializer<float>("w", TP::FLOAT, {4}, {1, 2, 3, 4});
  b.initializer<float>("loss_grad", TP::FLOAT, {}, {1});
  b.node("Mul", {"x", "w"}, {"p"}, "fwd_mul");
  b.node("ReduceSum", {"p"}, {"loss"}, "fwd_sum");
  b.node("Expand", {"loss_grad", "shape4"}, {"p_bwd"}, "bwd_expand");
  b.initializer<int64_t>("shape4", TP::INT64, {1}, {4});
  b.node("Mul", {"p_bwd", "x"}, {"w_gradient"}, "bwd_mul");
  onnx::NodeProto &sum = *b.graph().mutable_node(1);
  ModelBuilder::attrInt(sum, "keepdims", 0);
  b.output("loss", TP::FLOAT, {});
  b.output("w_gradient", TP::FLOAT, {4});
  auto module = importOk(b.model);
  ASSERT_TRUE(module);
  EXPECT_EQ(module->getSignature().getLoss(),
            module->getGraph().lookupValue("loss"));
  EXPECT_EQ(module->getSignature().getLossGradSeed(),
            module->getGraph().lookupValue("loss_grad"));
  auto phases = importedPhases(*module);
  EXPECT_EQ(phaseOf(*module, phases, "fwd_mul"), "forward");
  EXPECT_EQ(phaseOf(*module, phases, "fwd_sum"), "forward");
  EXPECT_EQ(phaseOf(*module, phases, "bwd_expand"), "backward");
  EXPECT_EQ(phaseOf(*module, phases, "bwd_mul"), "backward");
  // `w` is read by the forward pass: a frozen parameter (no `w_grad`).
  EXPECT_EQ(paramNames(module->getSignature(), false),
            (std::vector<std::string>{"w"}));
}

TEST(ModuleQueries, OpsetVersionsAndPhaseNames) {
  Module module;
  module.opsetImports[""] = 17;
  module.opsetImports["com.microsoft"] = 1;
  EXPECT_EQ(module.getOpsetVersion(""), 17);
  EXPECT_EQ(module.getOpsetVersion("ai.onnx"), 17);
  EXPECT_EQ(module.getOpsetVersion("com.microsoft"), 1);
  EXPECT_EQ(module.getOpsetVersion("com.other"), 0);
  EXPECT_EQ(phaseName(Phase::Forward), "forward");
  EXPECT_EQ(phaseName(Phase::Backward), "backward");
  EXPECT_EQ(phaseName(Phase::Optimizer), "optimizer");
  EXPECT_EQ(phaseName(Phase::Recompute), "recompute");
  EXPECT_EQ(parsePhaseName("recompute"), Phase::Recompute);
  EXPECT_EQ(parsePhaseName("sideways"), std::nullopt);

  TrainingSignature empty;
  EXPECT_FALSE(empty.hasGradients());
  EXPECT_EQ(empty.numTrainable(), 0u);
  EXPECT_EQ(empty.lookup(nullptr), nullptr);
}

TEST(ModuleQueries, SignatureOfGraphBuiltInMemory) {
  // inferTrainingSignature works on any Module, not only imported ones.
  Module module;
  module.opsetImports[""] = 17;
  Graph &g = module.getGraph();
  TensorType f32x2 = TensorType::get(DType::F32, {2});
  Value *x = g.addInput(f32x2, "x");
  Value *w = g.addInput(f32x2, "w");
  // After a trainable parameter: a symbolic input is data, a static float
  // one a frozen parameter, a non-float one data.
  Value *batch = g.addInput(TensorType(DType::F32, {Dim::symbolic("n")}), "y");
  Value *frozen = g.addInput(f32x2, "k");
  Value *ids = g.addInput(TensorType::get(DType::I64, {2}), "ids");
  Builder builder(g);
  Node *mul = builder.create({"", "Mul"}, {w, x}, {f32x2}, {}, "mul");
  mul->getResult(0)->setName("w_grad");
  g.addOutput(mul->getResult(0));
  inferTrainingSignature(module);
  const TrainingSignature &sig = module.getSignature();
  ASSERT_EQ(sig.getParams().size(), 2u);
  EXPECT_EQ(sig.getParams()[0].param, w);
  EXPECT_TRUE(sig.getParams()[0].trainable);
  EXPECT_EQ(sig.getParams()[0].grad, mul->getResult(0));
  EXPECT_EQ(sig.getParams()[1].param, frozen);
  EXPECT_FALSE(sig.getParams()[1].trainable);
  EXPECT_EQ(sig.getDataInputs().vec(), (std::vector<Value *>{x, batch, ids}));
  // Re-running replaces, never appends.
  inferTrainingSignature(module);
  EXPECT_EQ(module.getSignature().getParams().size(), 2u);
}

/// Reads testdata/<model>/test_data_set_0/manifest.json.
std::optional<llvm::json::Value> readManifest(llvm::StringRef modelDir) {
  llvm::SmallString<256> path(modelDir);
  llvm::sys::path::append(path, "test_data_set_0", "manifest.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return std::nullopt;
  auto parsed = llvm::json::parse((*buffer)->getBuffer());
  if (!parsed) {
    ADD_FAILURE() << path.str().str() << ": "
                  << llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  return std::move(*parsed);
}

TEST(TrainingSignature, MatchesTestdataManifests) {
  // The generator records the role of every graph input and output of each
  // real ONNX Runtime training graph; the inferred signature must agree.
  unsigned checked = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(gmopt::testdataDir(), ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::SmallString<256> modelPath(it->path());
    llvm::sys::path::append(modelPath, "training_model.onnx");
    std::optional<llvm::json::Value> manifest = readManifest(it->path());
    if (!manifest || !llvm::sys::fs::exists(modelPath))
      continue;
    SCOPED_TRACE(modelPath.str().str());
    auto module = importOnnxFile(modelPath);
    ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
    const Graph &g = (*module)->getGraph();
    const TrainingSignature &sig = (*module)->getSignature();
    auto isAccumulator = [&](const Value *v) {
      return llvm::any_of(sig.getParams(), [&](const ParamInfo &p) {
        return p.accumulator == v;
      });
    };
    const llvm::json::Object *root = manifest->getAsObject();
    ASSERT_TRUE(root);
    for (const char *section : {"inputs", "outputs"}) {
      const llvm::json::Array *entries = root->getArray(section);
      ASSERT_TRUE(entries) << section;
      for (const llvm::json::Value &entry : *entries) {
        const llvm::json::Object *obj = entry.getAsObject();
        ASSERT_TRUE(obj);
        std::string name = obj->getString("name").value_or("").str();
        std::string role = obj->getString("role").value_or("").str();
        SCOPED_TRACE(name + " (" + role + ")");
        Value *value = g.lookupValue(name);
        ASSERT_TRUE(value);
        const ParamInfo *param = sig.lookup(value);
        if (role == "data") {
          EXPECT_TRUE(llvm::is_contained(sig.getDataInputs(), value));
        } else if (role == "parameter") {
          ASSERT_TRUE(param);
          EXPECT_TRUE(param->trainable);
          ASSERT_TRUE(param->grad);
          EXPECT_EQ(param->grad->getName(), name + "_grad");
          ASSERT_TRUE(param->accumulator);
          EXPECT_EQ(param->accumulator->getName(),
                    name + "_grad.accumulation.buffer");
          EXPECT_TRUE(param->accumulateNode);
        } else if (role == "frozen_parameter") {
          ASSERT_TRUE(param);
          EXPECT_FALSE(param->trainable);
          EXPECT_EQ(param->grad, nullptr);
        } else if (role == "gradient_buffer") {
          EXPECT_TRUE(isAccumulator(value));
        } else if (role == "lazy_reset_grad") {
          EXPECT_EQ(sig.getLazyResetGrad(), value);
        } else if (role == "loss") {
          EXPECT_EQ(sig.getLoss(), value);
          ASSERT_TRUE(sig.getLossGradSeed());
          EXPECT_EQ(sig.getLossGradSeed()->getName(), name + "_grad");
        } else if (role == "accumulation_flag") {
          EXPECT_EQ(phaseOf(**module, importedPhases(**module),
                            value->getDefiningNode()->getName()),
                    "optimizer");
        } else if (role == "gradient") {
          EXPECT_TRUE(llvm::any_of(sig.getParams(), [&](const ParamInfo &p) {
            return p.grad == value;
          }));
        } else {
          ADD_FAILURE() << "unknown role";
        }
      }
    }

    // Phases: the loss is computed forward, every gradient backward, and
    // nothing forward reads a backward value.
    auto phases = importedPhases(**module);
    EXPECT_EQ(phases.lookup(sig.getLoss()->getDefiningNode()), Phase::Forward);
    for (const ParamInfo &p : sig.getParams()) {
      if (p.grad) {
        EXPECT_EQ(phases.lookup(p.grad->getDefiningNode()), Phase::Backward)
            << p.grad->getName().str();
      }
    }
    for (const Node &node : g.getNodes()) {
      if (phases.lookup(&node) != Phase::Forward)
        continue;
      for (const Value *operand : node.getOperands()) {
        if (operand && operand->getDefiningNode()) {
          EXPECT_EQ(phases.lookup(operand->getDefiningNode()), Phase::Forward)
              << node.describe();
        }
      }
    }
    ++checked;
  }
  // Committed fixtures: none found is a failure, never a skip.
  EXPECT_GT(checked, 0u) << "no testdata/*/test_data_set_0/manifest.json";
}

} // namespace
