//===- AmpTest.cpp - Tests of the amp (mixed precision) pass --------------===//
//
// On the CPU backend (16-bit storage, fp32 arithmetic, rounding on store):
// every testdata graph trained with amp{dtype=fp16} and amp{dtype=bf16}
// agrees with its fp32 step within each type's tolerance; amp composed
// with recompute gives amp's numbers bit for bit; an overflowing step is
// skipped (parameters and moments untouched, the dynamic scale halves);
// the dynamic scale grows after its interval. Also the registry's AMP
// table for the ops the policy names, and the policy's decisions.
//
//===----------------------------------------------------------------------===//

#include "passes/amp/Amp.h"
#include "passes/PassManager.h"
#include "passes/amp/AmpPolicy.h"

#include "tools/driver/Runtime.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/Verifier.h"

#include "tests/unit/TestPaths.h"
#include "tests/unit/TestdataPipelineTraining.h"
#include "tests/unit/TestdataTraining.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace gmopt;

namespace {

std::string pipelineWith(llvm::StringRef passes) {
  return ("canonicalize,fold-transpose," + passes + ",schedule,plan-buffers")
      .str();
}

struct Trained {
  TrainingResult result;
  /// Initial values of the persistent state, by name.
  std::map<std::string, TensorData> initialState;
  uint64_t plannedBytes = 0;
  uint64_t lowNodes = 0;
};

/// \p steps AdamW steps of testdata graph \p model compiled with
/// \p pipeline.
std::optional<Trained> train(const gmopt::testing::TestdataGraph &model,
                             llvm::StringRef pipeline, unsigned steps = 1) {
  auto trained = gmopt::testing::trainWithPipeline(model, pipeline, steps);
  if (!trained)
    return std::nullopt;
  Trained result;
  for (const BoundInput &input : trained->inputs)
    result.initialState[input.input->getName().str()] = input.data;
  result.result = std::move(trained->result);
  result.plannedBytes = trained->module->plan.figures.plannedBytes();
  for (const Node &node : trained->module->getGraph().getNodes())
    if (llvm::any_of(node.getResults(), [](const Value *value) {
          return value && isLowPrecisionFloat(value->getType().getDType());
        }))
      ++result.lowNodes;
  return result;
}

double maxAbs(const TensorData &data) {
  double m = 0;
  for (uint64_t i = 0, n = data.getNumElements(); i != n; ++i)
    m = std::max(m, std::fabs(data.getFloatElement(i)));
  return m;
}

double maxAbsDiff(const TensorData &a, const TensorData &b) {
  double m = 0;
  for (uint64_t i = 0, n = a.getNumElements(); i != n; ++i)
    m = std::max(m, std::fabs(a.getFloatElement(i) - b.getFloatElement(i)));
  return m;
}

const TensorData *findState(const TrainingResult &result,
                            llvm::StringRef name) {
  for (const NamedTensor &tensor : result.finalState)
    if (tensor.name == name)
      return &tensor.data;
  return nullptr;
}

std::vector<gmopt::testing::TestdataGraph> allGraphs() {
  std::vector<gmopt::testing::TestdataGraph> graphs(
      std::begin(gmopt::testing::kTestdataGraphs),
      std::end(gmopt::testing::kTestdataGraphs));
  graphs.push_back({"gpt_tiny_dropout", 4});
  return graphs;
}

/// The stated tolerances: per gradient tensor, the largest difference from
/// fp32 relative to the tensor's largest fp32 magnitude; and the loss's
/// relative difference. fp16 keeps 11 significant bits, bf16 8.
struct Tolerance {
  const char *dtype;
  double gradient;
  double loss;
  /// The whole step's relative L2 bound where decisions flip (below).
  double flippedL2;
};
constexpr Tolerance kTolerances[] = {{"fp16", 2e-2, 5e-3, 1e-1},
                                     {"bf16", 1e-1, 3e-2, 2e-1}};

class AmpTestdataTest
    : public ::testing::TestWithParam<gmopt::testing::TestdataGraph> {};

/// Graphs whose gradients pass through ReLU and MaxPool decisions that
/// 16-bit rounding can flip: a pre-activation a few ulps from zero changes
/// sign, and that sample's whole contribution through the unit appears or
/// vanishes. On cnn in fp16 exactly one decision flips (sample 5, fc1 unit
/// 75: fp32 -1.35e-4, fp16 +5.8e-6; recomputed in PyTorch from the
/// testdata inputs), which moves fc1.bias's gradient element 75 by 0.25 of
/// the tensor's largest magnitude and reaches every earlier layer through
/// the backward pass. A per-element bound cannot hold there, so these
/// graphs bound the whole step's gradient by its relative L2 difference
/// (fp16 1e-1, bf16 2e-1: measured at most 4.5e-2 and 7.0e-2), which a
/// real fault - a gradient not unscaled, a lost contribution, a wrong cast
/// - exceeds by far. mlp flips decisions only in bf16; the smooth graphs
/// (GELU, SiLU, softmax) keep the per-element bound in both types, with
/// margin (at most 1.6e-3 of the largest magnitude in fp16, 1.7e-2 in bf16).
bool flipsDecisions(llvm::StringRef model, llvm::StringRef dtype) {
  if (model == "cnn" || model == "resnet_tiny" || model == "cnn_bn")
    return true;
  return model == "mlp" && dtype == "bf16";
}

/// ||a - b|| / ||b|| over every gradient of a step.
double relativeL2(const TrainingResult &actual,
                  const TrainingResult &expected) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i != expected.firstGradients.size(); ++i) {
    const TensorData &a = actual.firstGradients[i].second;
    const TensorData &b = expected.firstGradients[i].second;
    for (uint64_t k = 0, n = b.getNumElements(); k != n; ++k) {
      double d = a.getFloatElement(k) - b.getFloatElement(k);
      difference += d * d;
      norm += double(b.getFloatElement(k)) * b.getFloatElement(k);
    }
  }
  return norm == 0 ? difference : std::sqrt(difference / norm);
}

TEST_P(AmpTestdataTest, GradientsAgreeWithFp32) {
  const gmopt::testing::TestdataGraph &model = GetParam();
  std::optional<Trained> reference = train(model, pipelineWith("canonicalize"));
  ASSERT_TRUE(reference);
  for (const Tolerance &tolerance : kTolerances) {
    std::string amp = std::string("amp{dtype=") + tolerance.dtype + "}";
    std::optional<Trained> mixed = train(model, pipelineWith(amp));
    ASSERT_TRUE(mixed) << amp;
    EXPECT_GT(mixed->lowNodes, 0u) << model.name << " " << amp;
    // Nothing overflows at the initial scale on these graphs.
    EXPECT_EQ(mixed->result.updates, 1u) << model.name << " " << amp;
    double loss = reference->result.losses[0];
    EXPECT_NEAR(mixed->result.losses[0], loss,
                tolerance.loss * std::max(1.0, std::fabs(loss)))
        << model.name << " " << amp;
    ASSERT_EQ(mixed->result.firstGradients.size(),
              reference->result.firstGradients.size());
    if (flipsDecisions(model.name, tolerance.dtype)) {
      EXPECT_LE(relativeL2(mixed->result, reference->result),
                tolerance.flippedL2)
          << model.name << " " << amp;
      continue;
    }
    for (size_t i = 0; i != reference->result.firstGradients.size(); ++i) {
      const auto &[name, expected] = reference->result.firstGradients[i];
      const TensorData &actual = mixed->result.firstGradients[i].second;
      ASSERT_EQ(actual.getType(), expected.getType()) << name;
      double scale = maxAbs(expected);
      if (scale == 0)
        continue;
      EXPECT_LE(maxAbsDiff(actual, expected), tolerance.gradient * scale)
          << model.name << " " << amp << " gradient of " << name;
    }
  }
}

TEST_P(AmpTestdataTest, ComposesWithRecompute) {
  const gmopt::testing::TestdataGraph &model = GetParam();
  std::optional<Trained> amp = train(model, pipelineWith("amp"), 3);
  ASSERT_TRUE(amp);
  for (const char *order :
       {"amp,recompute{mode=selective}", "amp,recompute{mode=full}",
        "recompute{mode=selective},amp"}) {
    std::optional<Trained> both = train(model, pipelineWith(order), 3);
    ASSERT_TRUE(both) << order;
    EXPECT_EQ(both->result.losses, amp->result.losses)
        << model.name << " " << order;
    ASSERT_EQ(both->result.finalState.size(), amp->result.finalState.size());
    for (size_t i = 0; i != amp->result.finalState.size(); ++i)
      EXPECT_TRUE(both->result.finalState[i].data ==
                  amp->result.finalState[i].data)
          << model.name << " " << order << " "
          << amp->result.finalState[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Testdata, AmpTestdataTest, ::testing::ValuesIn(allGraphs()),
    [](const ::testing::TestParamInfo<gmopt::testing::TestdataGraph> &info) {
      return std::string(info.param.name);
    });

const gmopt::testing::TestdataGraph kMlp{"mlp", 8};

TEST(AmpLossScaling, OverflowSkipsTheStepAndBacksOff) {
  // A scale no fp16 gradient survives: every step overflows.
  std::optional<Trained> trained =
      train(kMlp,
            pipelineWith("amp{dtype=fp16,loss-scale=dynamic,init-scale=1e30,"
                         "max-scale=1e30}"),
            2);
  ASSERT_TRUE(trained);
  EXPECT_EQ(trained->result.updates, 0u);
  const TensorData *scale = findState(trained->result, "loss_scale");
  ASSERT_TRUE(scale);
  EXPECT_FLOAT_EQ(float(scale->getFloatElement(0)), 1e30f * 0.25f);
  const TensorData *good = findState(trained->result, "loss_scale_good_steps");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->getFloatElement(0), 0.0);
  // Parameters and moments untouched.
  size_t compared = 0;
  for (const NamedTensor &state : trained->result.finalState) {
    auto it = trained->initialState.find(state.name);
    ASSERT_NE(it, trained->initialState.end()) << state.name;
    if (state.name == "loss_scale")
      continue;
    EXPECT_TRUE(state.data == it->second) << state.name;
    ++compared;
  }
  EXPECT_GT(compared, 4u);
}

TEST(AmpLossScaling, StaticScaleSkipsWithoutChanging) {
  std::optional<Trained> trained =
      train(kMlp, pipelineWith("amp{dtype=fp16,loss-scale=static:1e30}"), 2);
  ASSERT_TRUE(trained);
  EXPECT_EQ(trained->result.updates, 0u);
  const TensorData *scale = findState(trained->result, "loss_scale");
  ASSERT_TRUE(scale);
  EXPECT_FLOAT_EQ(float(scale->getFloatElement(0)), 1e30f);
  EXPECT_FALSE(findState(trained->result, "loss_scale_good_steps"));
}

TEST(AmpLossScaling, DynamicScaleGrowsAfterItsInterval) {
  std::optional<Trained> trained = train(
      kMlp, pipelineWith("amp{dtype=fp16,init-scale=1024,growth-interval=2}"),
      5);
  ASSERT_TRUE(trained);
  EXPECT_EQ(trained->result.updates, 5u);
  const TensorData *scale = findState(trained->result, "loss_scale");
  const TensorData *good = findState(trained->result, "loss_scale_good_steps");
  ASSERT_TRUE(scale && good);
  // Five finite steps: grown after steps 2 and 4, one step counted since.
  EXPECT_EQ(scale->getFloatElement(0), 4096.0);
  EXPECT_EQ(good->getFloatElement(0), 1.0);
}

TEST(AmpRegistry, ClassesOfTheOpsThePolicyNames) {
  const OpRegistry &registry = OpRegistry::instance();
  auto classOf = [&](llvm::StringRef domain, llvm::StringRef op) {
    const OpSchema *schema = registry.lookup(domain, op, 100);
    EXPECT_TRUE(schema) << domain.str() << "::" << op.str();
    return schema ? schema->amp : AmpClass::None;
  };
  for (const char *op : {"MatMul", "Gemm", "Conv"})
    EXPECT_EQ(classOf(kOnnxDomain, op), AmpClass::Allow) << op;
  for (const char *op : {"FusedMatMul", "ConvGrad"})
    EXPECT_EQ(classOf(kMsDomain, op), AmpClass::Allow) << op;
  for (const char *op :
       {"LogSoftmax", "BatchNormalization", "ReduceSum", "ReduceMean", "Exp",
        "Log", "Pow", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
    EXPECT_EQ(classOf(kOnnxDomain, op), AmpClass::Deny) << op;
  for (const char *op : {"LogSoftmaxGrad_13", "BatchNormalizationGrad",
                         "SoftmaxCrossEntropyLossInternal",
                         "SoftmaxCrossEntropyLossInternalGrad"})
    EXPECT_EQ(classOf(kMsDomain, op), AmpClass::Deny) << op;
  // fp32 arithmetic on 16-bit storage (strict-fp32 makes them Deny).
  for (const char *op : {"Softmax", "LayerNormalization"})
    EXPECT_EQ(classOf(kOnnxDomain, op), AmpClass::Fp32Compute) << op;
  for (const char *op :
       {"SoftmaxGrad_13", "LayerNormalizationGrad",
        "SimplifiedLayerNormalization", "SimplifiedLayerNormalizationGrad"})
    EXPECT_EQ(classOf(kMsDomain, op), AmpClass::Fp32Compute) << op;
  for (const char *op : {"Add", "Mul", "Relu", "Reshape", "Transpose",
                         "Dropout", "Where", "Concat"})
    EXPECT_EQ(classOf(kOnnxDomain, op), AmpClass::Follow) << op;
  for (const char *op : {"Cast", "Shape"})
    EXPECT_EQ(classOf(kOnnxDomain, op), AmpClass::None) << op;
  // Dropout's ratio keeps its type; its data follows.
  const OpSchema *dropout = registry.lookup(kOnnxDomain, "Dropout", 17);
  ASSERT_TRUE(dropout);
  EXPECT_TRUE(dropout->isAmpOperand(0));
  EXPECT_FALSE(dropout->isAmpOperand(1));
}

TEST(AmpOptions, BadValuesAreErrors) {
  for (const char *pipeline :
       {"amp{dtype=fp8}", "amp{loss-scale=sometimes}",
        "amp{loss-scale=static:-1}", "amp{loss-scale=static:x}",
        "amp{backoff-factor=2}", "amp{init-scale=1,min-scale=2}"}) {
    auto runnable = loadRunnableModel(
        gmopt::testdataDir() + "/mlp/training_model.onnx",
        gmopt::testing::testdataDims(kMlp), nullptr, false, pipeline);
    ASSERT_FALSE(bool(runnable)) << pipeline;
    std::string message =
        gmopt::testing::testdataErrorText(runnable.takeError());
    EXPECT_NE(message.find("amp"), std::string::npos) << message;
  }
}

} // namespace
