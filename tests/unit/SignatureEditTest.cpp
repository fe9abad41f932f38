//===- SignatureEditTest.cpp - Editing the training signature -------------===//
//
// Unit tests of the Module's signature edits (addParameter, removeParameter,
// mergeParameter, step-state slots), of the verifier's signature checks
// (kind, type, one role per value, optimizer nodes agreeing with the
// signature) and of the text IR and `.gm` round trips of the optimizer state
// and step slots. The in-graph optimizer's state lives in the signature:
// buildOptimizer records it (AdamW on mlp), the ONNX importer recovers it
// from an exported module, print/parse and `.gm` keep it, the plan's
// categories read it, and removing or merging a parameter of the fused
// optimizer node rebuilds the node without it. Merging is checked numerically:
// on gpt_tiny, two parameters fed the same values are merged and one training
// step on the CPU backend must give the same loss and, for the merged
// parameter, the sum of the two gradients.
//
//===----------------------------------------------------------------------===//

#include "TestdataTraining.h"

#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"

#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::testing;

namespace {

std::string errorText(llvm::Error err) {
  return testdataErrorText(std::move(err));
}

std::string verifyText(const Module &module) {
  return errorText(verifyModule(module));
}

std::string printed(const Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os);
  return text;
}

/// y = x * w + x * u, loss = ReduceSum(y); w and u have hand-built
/// "gradients" (Identity of x), accumulators and AdamW-like moments, and
/// the step has a learning rate, a step count and a loss scale.
struct SmallModule {
  std::unique_ptr<Module> module = std::make_unique<Module>();
  Value *x, *w, *u, *wAcc, *uAcc, *wM, *wV, *uM, *uV, *lr, *step, *scale;
  Value *loss, *wGrad, *uGrad;
  Node *wAccumulate, *uAccumulate;

  SmallModule() {
    module->opsetImports = {{"", 17}, {"com.microsoft", 1}};
    Graph &graph = module->getGraph();
    TensorType f4 = TensorType::get(DType::F32, {4});
    TensorType scalar = TensorType::get(DType::F32, {});
    x = graph.addInput(f4, "x");
    w = graph.addInput(f4, "w");
    u = graph.addInput(f4, "u");
    wAcc = graph.addInput(f4, "w_grad.accumulation.buffer");
    uAcc = graph.addInput(f4, "u_grad.accumulation.buffer");
    wM = graph.addInput(f4, "w.m");
    wV = graph.addInput(f4, "w.v");
    uM = graph.addInput(f4, "u.m");
    uV = graph.addInput(f4, "u.v");
    lr = graph.addInput(scalar, "lr");
    step = graph.addInput(TensorType::get(DType::I64, {}), "step");
    scale = graph.addInput(scalar, "scale");
    Builder b(graph);
    Value *xw = b.create({"", "Mul"}, {x, w}, {f4})->getResult(0);
    Value *xu = b.create({"", "Mul"}, {x, u}, {f4})->getResult(0);
    Value *y = b.create({"", "Add"}, {xw, xu}, {f4})->getResult(0);
    loss = b.create({"", "ReduceSum"}, {y}, {scalar},
                    {{"keepdims", Attribute::getInt(0)}})
               ->getResult(0);
    wGrad =
        b.create({"", "Identity"}, {x}, {f4}, {}, "w_grad_node")->getResult(0);
    wGrad->setName("w_grad");
    // u's gradient has a chain of its own, so removing u erases it.
    Value *uGradPart = b.create({"", "Neg"}, {x}, {f4})->getResult(0);
    uGrad = b.create({"", "Neg"}, {uGradPart}, {f4})->getResult(0);
    uGrad->setName("u_grad");
    TensorType flag = TensorType::get(DType::Bool, {1});
    wAccumulate = b.create({"com.microsoft", "InPlaceAccumulatorV2"},
                           {wAcc, wGrad}, {flag}, {}, "acc_w");
    uAccumulate = b.create({"com.microsoft", "InPlaceAccumulatorV2"},
                           {uAcc, uGrad}, {flag}, {}, "acc_u");
    // Update nodes: each reads its parameter's moments.
    b.create({"", "Add"}, {wM, wV}, {f4}, {}, "update_w");
    b.create({"", "Add"}, {uM, uV}, {f4}, {}, "update_u");
    graph.addOutput(loss);
    graph.addOutput(wAccumulate->getResult(0));
    graph.addOutput(uAccumulate->getResult(0));
    for (Node &node : graph.getNodes())
      if (node.getName().starts_with("update_"))
        graph.addOutput(node.getResult(0));

    TrainingSignature &sig = module->getSignature();
    sig.addDataInput(x);
    sig.setLoss(loss);
    sig.setStepSlot(StepSlot::LearningRate, lr);
    sig.setStepSlot(StepSlot::StepCount, step);
    sig.setStepSlot(StepSlot::LossScale, scale);
  }

  ParamInfo entry(Value *param, Value *grad, Value *acc, Node *node, Value *m,
                  Value *v) const {
    ParamInfo info;
    info.param = param;
    info.grad = grad;
    info.accumulator = acc;
    info.accumulateNode = node;
    info.optimizerState = {m, v};
    return info;
  }

  void addBoth() {
    ASSERT_EQ(errorText(module->addParameter(
                  entry(w, wGrad, wAcc, wAccumulate, wM, wV))),
              "<success>");
    ASSERT_EQ(errorText(module->addParameter(
                  entry(u, uGrad, uAcc, uAccumulate, uM, uV))),
              "<success>");
  }
};

TEST(SignatureEditTest, AddParameterChecksItsEntry) {
  SmallModule m;
  m.addBoth();
  EXPECT_EQ(verifyText(*m.module), "<success>");
  const TrainingSignature &sig = m.module->getSignature();
  ASSERT_EQ(sig.getParams().size(), 2u);
  EXPECT_EQ(sig.lookup(m.w)->optimizerState.size(), 2u);
  EXPECT_EQ(sig.getStepSlot(StepSlot::LearningRate), m.lr);

  // A second entry for w, a gradient of the wrong type, a node result as
  // accumulator and a value already in a role are refused, changing
  // nothing.
  SmallModule n;
  ASSERT_EQ(errorText(n.module->addParameter(
                n.entry(n.w, n.wGrad, n.wAcc, n.wAccumulate, n.wM, n.wV))),
            "<success>");
  EXPECT_NE(errorText(n.module->addParameter(
                n.entry(n.w, nullptr, nullptr, nullptr, n.uM, n.uV))),
            "<success>");
  Value *scalar =
      n.module->getGraph().addInput(TensorType::get(DType::F32, {}), "scalar");
  ParamInfo mistyped = n.entry(n.u, scalar, nullptr, nullptr, n.uM, n.uV);
  EXPECT_NE(errorText(n.module->addParameter(mistyped)).find("has type f32[]"),
            std::string::npos);
  ParamInfo resultAccumulator =
      n.entry(n.u, n.uGrad, n.uGrad, nullptr, n.uM, n.uV);
  EXPECT_NE(errorText(n.module->addParameter(resultAccumulator)), "<success>");
  ParamInfo taken = n.entry(n.u, n.uGrad, n.uAcc, nullptr, n.wM, n.uV);
  EXPECT_NE(errorText(n.module->addParameter(taken)).find("already plays"),
            std::string::npos);
  ParamInfo frozen = n.entry(n.u, n.uGrad, nullptr, nullptr, n.uM, n.uV);
  frozen.trainable = false;
  EXPECT_NE(errorText(n.module->addParameter(frozen)), "<success>");
  EXPECT_EQ(n.module->getSignature().getParams().size(), 1u);
}

TEST(SignatureEditTest, RemoveParameterErasesWhatLivedForIt) {
  SmallModule m;
  m.addBoth();
  Graph &graph = m.module->getGraph();
  size_t nodes = graph.getNumNodes(), inputs = graph.getInputs().size();
  // u is still read by the forward pass: refused, nothing changes.
  std::string refused = errorText(m.module->removeParameter(m.u));
  EXPECT_NE(refused.find("still read by node"), std::string::npos) << refused;
  EXPECT_EQ(graph.getNumNodes(), nodes);
  EXPECT_NE(errorText(m.module->removeParameter(m.x)).find("not a parameter"),
            std::string::npos);

  // Once the forward pass reads a constant instead, u goes with its
  // gradient chain (two Negs), accumulation node, update node, outputs,
  // accumulator and moments.
  Value *constant = graph.addInitializer(
      TensorData::fromValues<float>(DType::F32, {4}, {1, 2, 3, 4}), "u_const");
  m.u->replaceAllUsesWith(constant);
  ASSERT_EQ(errorText(m.module->removeParameter(m.u)), "<success>");
  EXPECT_EQ(graph.getNumNodes(), nodes - 4);
  EXPECT_EQ(graph.getInputs().size(), inputs - 4);
  EXPECT_EQ(graph.getNumOutputs(), 3u);
  EXPECT_EQ(graph.lookupValue("u"), nullptr);
  EXPECT_EQ(graph.lookupValue("u.m"), nullptr);
  EXPECT_EQ(graph.lookupValue("u_grad.accumulation.buffer"), nullptr);
  EXPECT_EQ(m.module->getSignature().getParams().size(), 1u);
  EXPECT_EQ(verifyText(*m.module), "<success>");
}

TEST(SignatureEditTest, UpdateNodeOfTwoParametersIsNotRemovedHalfway) {
  SmallModule m;
  m.addBoth();
  Graph &graph = m.module->getGraph();
  // A fused update that reads the moments of both parameters.
  Builder b(graph);
  Node *fused = b.create({"", "Add"}, {m.uM, m.wV},
                         {TensorType::get(DType::F32, {4})}, {}, "fused");
  graph.addOutput(fused->getResult(0));
  Value *constant = graph.addInitializer(
      TensorData::fromValues<float>(DType::F32, {4}, {1, 2, 3, 4}), "u_const");
  m.u->replaceAllUsesWith(constant);
  std::string refused = errorText(m.module->removeParameter(m.u));
  EXPECT_NE(refused.find("also updates parameter 'w'"), std::string::npos)
      << refused;
  EXPECT_EQ(m.module->getSignature().getParams().size(), 2u);
}

TEST(SignatureEditTest, MergeSumsGradientsAndDropsTheDuplicate) {
  SmallModule m;
  m.addBoth();
  Graph &graph = m.module->getGraph();
  EXPECT_NE(errorText(m.module->mergeParameter(m.w, m.w)), "<success>");
  EXPECT_NE(errorText(m.module->mergeParameter(m.w, m.x)), "<success>");
  ASSERT_EQ(errorText(m.module->mergeParameter(m.w, m.u)), "<success>");
  EXPECT_EQ(verifyText(*m.module), "<success>");
  const TrainingSignature &sig = m.module->getSignature();
  ASSERT_EQ(sig.getParams().size(), 1u);
  const ParamInfo &merged = sig.getParams()[0];
  EXPECT_EQ(merged.param, m.w);
  // The gradient is Add(w's own, u's), and the accumulation reads it.
  Node *sum = merged.grad->getDefiningNode();
  ASSERT_TRUE(sum);
  EXPECT_TRUE(sum->isa("", "Add"));
  EXPECT_EQ(sum->getOperand(0), m.wGrad);
  EXPECT_EQ(sum->getOperand(1), m.uGrad);
  EXPECT_EQ(merged.grad->getName(), "w_grad");
  EXPECT_EQ(m.wAccumulate->getOperand(1), merged.grad);
  EXPECT_EQ(graph.lookupValue("u"), nullptr);
  EXPECT_EQ(graph.lookupValue("u.v"), nullptr);
  EXPECT_EQ(graph.lookupValue("u_grad.accumulation.buffer"), nullptr);
  // The forward pass now reads w twice.
  EXPECT_EQ(m.w->getUsers().size(), 2u);
}

TEST(SignatureEditTest, MergeRefusesMismatchedParameters) {
  SmallModule m;
  m.addBoth();
  Graph &graph = m.module->getGraph();
  Value *other = graph.addInput(TensorType::get(DType::F32, {2}), "other");
  ParamInfo info;
  info.param = other;
  info.trainable = false;
  ASSERT_EQ(errorText(m.module->addParameter(info)), "<success>");
  std::string text = errorText(m.module->mergeParameter(m.w, other));
  EXPECT_NE(text.find("types differ"), std::string::npos) << text;
  EXPECT_EQ(m.module->getSignature().getParams().size(), 3u);
}

TEST(SignatureEditTest, VerifierRejectsBadEntries) {
  {
    SmallModule m;
    m.addBoth();
    // A gradient of the wrong type.
    m.module->getSignature().setGrad(m.w, m.loss);
    EXPECT_NE(verifyText(*m.module).find("has type f32[], not f32[4]"),
              std::string::npos);
  }
  {
    SmallModule m;
    m.addBoth();
    // An accumulator that is a node result.
    m.module->getSignature().setAccumulation(m.w, m.uGrad, m.wAccumulate);
    EXPECT_NE(verifyText(*m.module).find("is a node result, not a graph input"),
              std::string::npos);
  }
  {
    SmallModule m;
    m.addBoth();
    // One value in two roles.
    m.module->getSignature().setStepSlot(StepSlot::LossScale, m.wM);
    EXPECT_NE(verifyText(*m.module).find("is both"), std::string::npos);
  }
  {
    SmallModule m, other;
    m.addBoth();
    // A value of another graph.
    m.module->getSignature().setStepSlot(StepSlot::LearningRate, other.lr);
    EXPECT_NE(verifyText(*m.module).find("not in the graph"),
              std::string::npos);
  }
}

TEST(SignatureEditTest, ErasingASignatureValueAssertsInDebugBuilds) {
#ifdef NDEBUG
  GTEST_SKIP() << "assertions are compiled out (NDEBUG)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SmallModule m;
        m.addBoth();
        // The accumulator is unused once its node is gone, but the
        // signature still names it.
        Graph &graph = m.module->getGraph();
        graph.removeOutput(1);
        for (unsigned i = 0; i != 2; ++i)
          m.wAccumulate->setOperand(i, nullptr);
        graph.eraseNode(m.wAccumulate);
      },
      "training signature refers to");
#endif
}

TEST(SignatureEditTest, TextRoundTripKeepsStateAndSlots) {
  SmallModule m;
  m.addBoth();
  std::string text = printed(*m.module);
  EXPECT_NE(text.find("param %w trainable grad %w_grad accumulator "
                      "%w_grad.accumulation.buffer via \"acc_w\" state %w.m, "
                      "%w.v"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("learning_rate %lr"), std::string::npos);
  EXPECT_NE(text.find("step_count %step"), std::string::npos);
  EXPECT_NE(text.find("loss_scale %scale"), std::string::npos);
  auto parsed = parseModule(text, "round-trip");
  ASSERT_TRUE(bool(parsed)) << errorText(parsed.takeError());
  EXPECT_EQ(printed(**parsed), text);
  const TrainingSignature &sig = (*parsed)->getSignature();
  ASSERT_TRUE(sig.getStepSlot(StepSlot::StepCount));
  EXPECT_EQ(sig.getStepSlot(StepSlot::StepCount)->getName(), "step");
  ASSERT_EQ(sig.getParams().size(), 2u);
  EXPECT_EQ(sig.getParams()[1].optimizerState[1]->getName(), "u.v");
}

TEST(SignatureEditTest, GmRoundTripKeepsStateAndSlots) {
  SmallModule rewritten, original;
  rewritten.addBoth();
  for (unsigned i = 0; i != kNumStepSlots; ++i)
    original.module->getSignature().clearStepSlot(static_cast<StepSlot>(i));
  auto bytes = writeGmBytes(*rewritten.module, *original.module, "");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "slots.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  const TrainingSignature &sig = loaded->module->getSignature();
  ASSERT_EQ(sig.getParams().size(), 2u);
  const ParamInfo &u = sig.getParams()[1];
  ASSERT_EQ(u.optimizerState.size(), 2u);
  EXPECT_EQ(u.optimizerState[0]->getName(), "u.m");
  EXPECT_EQ(u.optimizerState[1]->getName(), "u.v");
  for (auto [slot, name] : {std::pair{StepSlot::LearningRate, "lr"},
                            std::pair{StepSlot::StepCount, "step"},
                            std::pair{StepSlot::LossScale, "scale"}}) {
    ASSERT_TRUE(sig.getStepSlot(slot)) << stepSlotName(slot).str();
    EXPECT_EQ(sig.getStepSlot(slot)->getName(), name);
  }
  // The original had no slots and still has none.
  EXPECT_FALSE(
      loaded->original->getSignature().getStepSlot(StepSlot::LearningRate));
}

/// Bitwise comparison as floats within a relative tolerance.
void expectClose(const TensorData &actual, const std::vector<float> &expected,
                 const std::string &what) {
  ASSERT_EQ(actual.getNumElements(), expected.size()) << what;
  for (size_t i = 0; i != expected.size(); ++i) {
    float a = static_cast<float>(actual.getFloatElement(i));
    float tolerance = 1e-5f * std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(a, expected[i], tolerance) << what << " element " << i;
  }
}

std::vector<float> floats(const TensorData &data) {
  std::vector<float> values(data.getNumElements());
  for (size_t i = 0; i != values.size(); ++i)
    values[i] = static_cast<float>(data.getFloatElement(i));
  return values;
}

TEST(SignatureEditTest, MergedGptParametersTrainWithTheSummedGradient) {
  auto module = importTestdataGraph("gpt_tiny", 4);
  ASSERT_TRUE(module);
  llvm::StringMap<TensorData> inputs = readTestdataInputs("gpt_tiny");
  // Two trainable parameters of one type (the first two layer-norm
  // weights), fed the same values as tying would make them.
  const TrainingSignature &sig = module->getSignature();
  std::vector<const ParamInfo *> trainable;
  for (const ParamInfo &p : sig.getParams())
    if (p.trainable)
      trainable.push_back(&p);
  const ParamInfo *into = nullptr, *from = nullptr;
  size_t intoIndex = 0, fromIndex = 0;
  for (size_t i = 0; i != trainable.size(); ++i) {
    if (!trainable[i]->param->getName().ends_with("ln_1.weight"))
      continue;
    for (size_t j = 0; j != trainable.size() && !from; ++j)
      if (trainable[j]->param->getName().ends_with("ln_2.weight")) {
        into = trainable[i];
        from = trainable[j];
        intoIndex = i + 1;
        fromIndex = j + 1;
      }
    break;
  }
  ASSERT_TRUE(into && from) << "no layer-norm weights in gpt_tiny";
  ASSERT_EQ(into->param->getType(), from->param->getType());
  ASSERT_TRUE(inputs.count(into->param->getName()));
  inputs[from->param->getName()] = inputs[into->param->getName()];
  TrainedStep before =
      trainTestdataStep(*module, inputs, AllocationMode::Eager);
  ASSERT_EQ(before.results.size(), trainable.size() + 1);
  for (size_t index : {intoIndex, fromIndex}) {
    std::vector<float> values = floats(before.results[index]);
    ASSERT_TRUE(llvm::any_of(values, [](float v) { return v != 0; }));
  }
  std::string intoName = into->param->getName().str();
  std::string fromName = from->param->getName().str();
  size_t index = 0;
  std::vector<float> expected = floats(before.results[intoIndex]);
  std::vector<float> fromGrad = floats(before.results[fromIndex]);
  for (size_t i = 0; i != expected.size(); ++i)
    expected[i] += fromGrad[i];

  size_t numParams = sig.getParams().size();
  ASSERT_EQ(errorText(module->mergeParameter(into->param, from->param)),
            "<success>");
  ASSERT_EQ(verifyText(*module), "<success>");
  EXPECT_EQ(module->getGraph().lookupValue(fromName), nullptr);
  EXPECT_EQ(module->getSignature().getParams().size(), numParams - 1);
  TrainedStep after = trainTestdataStep(*module, inputs, AllocationMode::Eager);
  ASSERT_FALSE(after.results.empty());
  EXPECT_EQ(floats(after.results[0]), floats(before.results[0])) << "loss";
  size_t afterIndex = 0;
  index = 0;
  for (const ParamInfo &p : module->getSignature().getParams()) {
    if (!p.trainable)
      continue;
    ++index;
    if (p.param->getName() == intoName)
      afterIndex = index;
  }
  ASSERT_NE(afterIndex, 0u);
  ASSERT_LT(afterIndex, after.results.size());
  expectClose(after.results[afterIndex], expected, intoName + " gradient");
}

//===----------------------------------------------------------------------===//
// The in-graph optimizer's state in the signature
//===----------------------------------------------------------------------===//

/// mlp with `--optimizer=adamw`'s optimizer built in (null after a failed
/// expectation).
std::unique_ptr<Module> mlpWithOptimizer(OptimizerKind kind) {
  std::unique_ptr<Module> module = importTestdataGraph("mlp", 8);
  if (!module)
    return nullptr;
  OptimizerSpec spec;
  spec.kind = kind;
  auto node = buildOptimizer(*module, spec);
  EXPECT_TRUE(bool(node)) << errorText(node.takeError());
  return node ? std::move(module) : nullptr;
}

/// Each parameter's state and each slot, by name:
/// `param: state, state; ...; learning_rate=..., step_count=...`.
std::string describeOptimizerState(const Module &module) {
  std::string text;
  for (const ParamInfo &param : module.getSignature().getParams()) {
    text += param.param->getName().str() + ":";
    for (const Value *state : param.optimizerState)
      text += " " + state->getName().str();
    text += "; ";
  }
  for (unsigned i = 0; i != kNumStepSlots; ++i) {
    StepSlot slot = static_cast<StepSlot>(i);
    if (const Value *value = module.getSignature().getStepSlot(slot))
      text += stepSlotName(slot).str() + "=" + value->getName().str() + " ";
  }
  return text;
}

TEST(SignatureEditTest, BuiltAdamWRecordsItsStateInTheSignature) {
  std::unique_ptr<Module> module = mlpWithOptimizer(OptimizerKind::AdamW);
  ASSERT_TRUE(module);
  const TrainingSignature &sig = module->getSignature();
  Node *node = findOptimizerNode(*module);
  ASSERT_TRUE(node);
  EXPECT_EQ(node->getPhase(), Phase::Optimizer);
  OptimizerOperands layout(*node);
  ASSERT_TRUE(layout.isWellFormed());
  ASSERT_EQ(layout.size(), sig.numTrainable());
  for (unsigned i = 0; i != layout.size(); ++i) {
    const ParamInfo *info = sig.lookup(layout.getParam(i));
    ASSERT_TRUE(info) << i;
    ASSERT_EQ(info->optimizerState.size(), 2u);
    EXPECT_EQ(info->optimizerState[0], layout.getState(0, i));
    EXPECT_EQ(info->optimizerState[1], layout.getState(1, i));
    EXPECT_EQ(info->optimizerState[0]->getName(),
              info->param->getName().str() + ".momentum0");
  }
  EXPECT_EQ(sig.getStepSlot(StepSlot::StepCount), layout.getStep());
  EXPECT_EQ(sig.getStepSlot(StepSlot::LearningRate), layout.getLearningRate());
  EXPECT_EQ(sig.getStepSlot(StepSlot::LossScale), nullptr);
  EXPECT_EQ(verifyText(*module), "<success>");

  // The plan's categories read the signature: moments and the step count
  // are optimizer state, the learning rate an input like the data.
  auto categories = categorizeValues(*module);
  for (const ParamInfo &param : sig.getParams())
    for (const Value *state : param.optimizerState)
      EXPECT_EQ(categories.lookup(state), MemoryCategory::OptimizerState)
          << state->getName().str();
  EXPECT_EQ(categories.lookup(layout.getStep()),
            MemoryCategory::OptimizerState);
  EXPECT_EQ(categories.lookup(layout.getLearningRate()),
            MemoryCategory::Activations);

  // A second optimizer is refused, and so is one whose slot is taken.
  auto again = buildOptimizer(*module, OptimizerSpec());
  EXPECT_NE(errorText(again.takeError()).find("already has an optimizer"),
            std::string::npos);
  SmallModule small;
  small.addBoth();
  auto taken = buildOptimizer(*small.module, OptimizerSpec());
  EXPECT_NE(
      errorText(taken.takeError()).find("learning_rate slot is already 'lr'"),
      std::string::npos);
}

TEST(SignatureEditTest, BuiltSgdHasALearningRateAndNoState) {
  std::unique_ptr<Module> module = mlpWithOptimizer(OptimizerKind::SGD);
  ASSERT_TRUE(module);
  const TrainingSignature &sig = module->getSignature();
  for (const ParamInfo &param : sig.getParams())
    EXPECT_TRUE(param.optimizerState.empty()) << param.param->getName().str();
  Node *node = findOptimizerNode(*module);
  ASSERT_TRUE(node);
  EXPECT_EQ(node->getPhase(), Phase::Optimizer);
  EXPECT_EQ(sig.getStepSlot(StepSlot::LearningRate),
            OptimizerOperands(*node).getLearningRate());
  EXPECT_EQ(sig.getStepSlot(StepSlot::StepCount), nullptr);
  EXPECT_EQ(verifyText(*module), "<success>");
}

TEST(SignatureEditTest, AdamWStateSurvivesTextGmAndOnnx) {
  std::unique_ptr<Module> module = mlpWithOptimizer(OptimizerKind::AdamW);
  ASSERT_TRUE(module);
  std::string expected = describeOptimizerState(*module);
  ASSERT_NE(expected.find(".momentum1"), std::string::npos) << expected;
  ASSERT_NE(expected.find("step_count=step"), std::string::npos) << expected;

  // Print and parse.
  std::string text = printed(*module);
  auto parsed = parseModule(text, "adamw.gmir");
  ASSERT_TRUE(bool(parsed)) << errorText(parsed.takeError());
  EXPECT_EQ(describeOptimizerState(**parsed), expected);
  EXPECT_EQ(printed(**parsed), text);
  EXPECT_EQ(findOptimizerNode(**parsed)->getPhase(), Phase::Optimizer);

  // .gm write and load (the original without an optimizer).
  std::unique_ptr<Module> original = importTestdataGraph("mlp", 8);
  ASSERT_TRUE(original);
  auto bytes = writeGmBytes(*module, *original, "adamw");
  ASSERT_TRUE(bool(bytes)) << errorText(bytes.takeError());
  auto loaded = readGmBytes(*bytes, "adamw.gm");
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  EXPECT_EQ(describeOptimizerState(*loaded->module), expected);
  EXPECT_EQ(verifyText(*loaded->module), "<success>");
  EXPECT_EQ(findOptimizerNode(*loaded->module)->getPhase(), Phase::Optimizer);
  EXPECT_EQ(describeOptimizerState(*loaded->original),
            describeOptimizerState(*original));

  // ONNX export and import: no signature travels, the importer recovers
  // it from the optimizer node; the update signal is no data input.
  auto proto = exportOnnxModel(*module);
  ASSERT_TRUE(bool(proto)) << errorText(proto.takeError());
  OnnxImportOptions options;
  options.dimBindings = {{"batch", 8}};
  auto reimported = importOnnxModel(*proto, "adamw.onnx", options);
  ASSERT_TRUE(bool(reimported)) << errorText(reimported.takeError());
  EXPECT_EQ(describeOptimizerState(**reimported), expected);
  for (const Value *data : (*reimported)->getSignature().getDataInputs())
    EXPECT_NE(data->getName(), "optimizer.update_signal");
  EXPECT_EQ(findOptimizerNode(**reimported)->getPhase(), Phase::Optimizer);
}

TEST(SignatureEditTest, VerifierRejectsAnOptimizerTheSignatureDoesNotKnow) {
  std::unique_ptr<Module> module = mlpWithOptimizer(OptimizerKind::AdamW);
  ASSERT_TRUE(module);
  TrainingSignature &sig = module->getSignature();
  const ParamInfo &first = sig.getParams().front();
  ASSERT_TRUE(first.trainable);
  Value *param = first.param;
  llvm::SmallVector<Value *, 2> state(first.optimizerState.begin(),
                                      first.optimizerState.end());
  sig.setOptimizerState(param, {});
  std::string lost = verifyText(*module);
  EXPECT_NE(lost.find("optimizer node"), std::string::npos) << lost;
  EXPECT_NE(lost.find("the signature records none"), std::string::npos) << lost;
  sig.setOptimizerState(param, {state[1], state[0]});
  EXPECT_NE(verifyText(*module).find("with state '" +
                                     state[0]->getName().str() + "', '" +
                                     state[1]->getName().str() + "'"),
            std::string::npos);
  sig.setOptimizerState(param, state);
  ASSERT_EQ(verifyText(*module), "<success>");
  Value *step = sig.getStepSlot(StepSlot::StepCount);
  sig.clearStepSlot(StepSlot::StepCount);
  std::string noStep = verifyText(*module);
  EXPECT_NE(noStep.find("step_count slot is empty"), std::string::npos)
      << noStep;
  sig.setStepSlot(StepSlot::StepCount, step);
  EXPECT_EQ(verifyText(*module), "<success>");
}

TEST(SignatureEditTest, FusedOptimizerIsRebuiltWithoutAMergedParameter) {
  for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::SGD}) {
    std::unique_ptr<Module> module = importTestdataGraph("gpt_tiny", 4);
    ASSERT_TRUE(module);
    OptimizerSpec spec;
    spec.kind = kind;
    auto built = buildOptimizer(*module, spec);
    ASSERT_TRUE(bool(built)) << errorText(built.takeError());
    const TrainingSignature &sig = module->getSignature();
    size_t trainable = sig.numTrainable();
    unsigned updated = OptimizerOperands(**built).size();
    std::string name = (*built)->getName().str();
    // Two parameters of one type (the two blocks' first layer norms).
    const ParamInfo *into = nullptr, *from = nullptr;
    for (const ParamInfo &a : sig.getParams())
      for (const ParamInfo &b : sig.getParams())
        if (!into && &a != &b && a.trainable && b.trainable &&
            a.param->getType() == b.param->getType()) {
          into = &a;
          from = &b;
        }
    ASSERT_TRUE(into);
    Value *kept = into->param;
    std::string fromName = from->param->getName().str();
    llvm::SmallVector<std::string, 2> stateNames;
    for (const Value *state : from->optimizerState)
      stateNames.push_back(state->getName().str());
    EXPECT_EQ(stateNames.size(), kind == OptimizerKind::AdamW ? 2u : 0u);
    ASSERT_EQ(errorText(module->mergeParameter(kept, from->param)),
              "<success>");
    EXPECT_EQ(verifyText(*module), "<success>");
    EXPECT_EQ(sig.numTrainable(), trainable - 1);
    Node *optimizer = findOptimizerNode(*module);
    ASSERT_TRUE(optimizer);
    OptimizerOperands layout(*optimizer);
    EXPECT_EQ(layout.size(), updated - 1);
    EXPECT_EQ(optimizer->getName(), name);
    for (const auto &input : module->getGraph().getInputs()) {
      EXPECT_NE(input->getName(), fromName);
      for (const std::string &state : stateNames)
        EXPECT_NE(input->getName(), state);
    }
    // The kept parameter is still updated, with its own state.
    bool updatesKept = false;
    for (unsigned i = 0; i != layout.size(); ++i)
      updatesKept |= optimizer->getOperand(layout.paramIndex(i)) == kept;
    EXPECT_TRUE(updatesKept);
  }
}

TEST(SignatureEditTest, RemovingTheSoleOptimizedParameterRemovesItsState) {
  // y = x * w, loss = ReduceSum(y), with a hand-made gradient of w.
  auto module = std::make_unique<Module>();
  module->opsetImports = {{"", 17}, {"com.microsoft", 1}};
  Graph &graph = module->getGraph();
  TensorType f4 = TensorType::get(DType::F32, {4});
  Value *x = graph.addInput(f4, "x");
  Value *w = graph.addInput(f4, "w");
  Builder b(graph);
  Node *mul = b.create({"", "Mul"}, {x, w}, {f4});
  Value *loss = b.create({"", "ReduceSum"}, {mul->getResult(0)},
                         {TensorType::get(DType::F32, {})},
                         {{"keepdims", Attribute::getInt(0)}})
                    ->getResult(0);
  Value *grad = b.create({"", "Neg"}, {x}, {f4})->getResult(0);
  grad->setName("w_grad");
  graph.addOutput(loss);
  graph.addOutput(grad);
  module->getSignature().addDataInput(x);
  module->getSignature().setLoss(loss);
  ParamInfo info;
  info.param = w;
  info.grad = grad;
  ASSERT_EQ(errorText(module->addParameter(info)), "<success>");
  auto node = buildOptimizer(*module, OptimizerSpec());
  ASSERT_TRUE(bool(node)) << errorText(node.takeError());
  ASSERT_EQ(module->getSignature().getParams()[0].optimizerState.size(), 2u);
  ASSERT_EQ(verifyText(*module), "<success>");

  // Still read by the forward pass: refused.
  EXPECT_NE(errorText(module->removeParameter(w)).find("still read by"),
            std::string::npos);
  Value *constant = graph.addInitializer(
      TensorData::fromValues<float>(DType::F32, {4}, {1, 2, 3, 4}), "w_const");
  mul->setOperand(1, constant);
  ASSERT_EQ(errorText(module->removeParameter(w)), "<success>");
  EXPECT_EQ(findOptimizerNode(*module), nullptr);
  EXPECT_EQ(graph.lookupValue("w.momentum0"), nullptr);
  EXPECT_EQ(graph.lookupValue("w.momentum1"), nullptr);
  EXPECT_EQ(graph.lookupValue("w"), nullptr);
  EXPECT_TRUE(module->getSignature().getParams().empty());
  // The step slots stay; the verifier accepts the module.
  EXPECT_TRUE(module->getSignature().getStepSlot(StepSlot::StepCount));
  EXPECT_EQ(verifyText(*module), "<success>");
}

} // namespace
