//===- OptimizerKernelsTest.cpp - In-graph AdamW and SGD kernels ----------===//
//
// The CPU kernels of com.microsoft AdamWOptimizer and SGDOptimizerV2 against
// a double-precision scalar reference written from ONNX Runtime's formulas
// (both adam modes, with and without bias correction, with weight decay,
// over several steps and parameters of different shapes); a closed form
// (the first bias-corrected Hugging Face step moves every weight by exactly
// lr against its gradient's sign); the update signal; and the registry
// side: operand layout, arity and shape checks, written operands.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"

#include "ir/OpRegistry.h"
#include "ir/OptimizerOps.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

/// AdamW hyper-parameters as the op's attributes spell them.
struct AdamWAttrs {
  float alpha = 0.9f, beta = 0.999f, epsilon = 1e-8f, weightDecay = 1e-2f;
  int64_t correctBias = 1, adamMode = 0;

  std::vector<NamedAttribute> attrs() const {
    return {floatAttr("alpha", alpha),
            floatAttr("beta", beta),
            floatAttr("epsilon", epsilon),
            floatAttr("weight_decay", weightDecay),
            intAttr("correct_bias", correctBias),
            intAttr("adam_mode", adamMode)};
  }
};

/// One parameter's tensors in double, for the reference.
struct ReferenceState {
  std::vector<double> weight, m1, m2;
};

/// ONNX Runtime's AdamW update (training_ops/cpu/optimizer/adamw), in
/// double: mode 0 decays the weight first and corrects the moments; mode 1
/// folds the corrections into the learning rate and decays last.
void referenceAdamW(const AdamWAttrs &a, double lr, int64_t step,
                    const std::vector<float> &grad, ReferenceState &s) {
  double alpha = a.alpha, beta = a.beta, eps = a.epsilon, wd = a.weightDecay;
  double ca = 1, cb = 1, lrCorrected = lr;
  if (a.correctBias == 1) {
    ca = 1 - std::pow(alpha, double(step));
    cb = 1 - std::pow(beta, double(step));
    lrCorrected = lr * std::sqrt(cb) / ca;
  }
  for (size_t i = 0; i < grad.size(); ++i) {
    double g = grad[i];
    double &w = s.weight[i];
    if (a.adamMode == 0)
      w -= w * lr * wd;
    s.m1[i] = alpha * s.m1[i] + (1 - alpha) * g;
    s.m2[i] = beta * s.m2[i] + (1 - beta) * g * g;
    if (a.adamMode == 0) {
      w -= lr * s.m1[i] / (ca * (std::sqrt(s.m2[i] / cb) + eps));
    } else {
      w -= lrCorrected * s.m1[i] / (std::sqrt(s.m2[i]) + eps);
      w -= lr * wd * w;
    }
  }
}

std::vector<double> toDouble(const std::vector<float> &values) {
  return std::vector<double>(values.begin(), values.end());
}

/// Expects \p got to match \p want within \p rtol of want's magnitude.
void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double rtol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double magnitude = 0;
  for (double v : want)
    magnitude = std::max(magnitude, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * magnitude) << what << " element " << i;
}

/// Runs one AdamWOptimizer node over parameters \p weights (updated in
/// place, with \p m1 and \p m2) and returns the flag.
llvm::Expected<int64_t> runAdamW(KernelRunner &runner, const AdamWAttrs &a,
                                 float lr, int64_t step, HostTensor *signal,
                                 std::vector<HostTensor> &weights,
                                 std::vector<HostTensor> &grads,
                                 std::vector<HostTensor> &m1,
                                 std::vector<HostTensor> &m2) {
  HostTensor lrTensor = HostTensor::f32({1}, {lr});
  HostTensor stepTensor = HostTensor::i64({1}, {step});
  std::vector<HostTensor *> inputs = {&lrTensor, &stepTensor, signal};
  for (auto *group : {&weights, &grads, &m1, &m2})
    for (HostTensor &t : *group)
      inputs.push_back(&t);
  auto result =
      runner.run(kMsDomain, "AdamWOptimizer", inputs,
                 {TensorType::get(DType::I64, {1})}, a.attrs(), "adamw");
  if (!result)
    return result.takeError();
  return (*result)[0].values<int64_t>()[0];
}

/// Trains two parameters of different shapes for three steps with \p a and
/// compares weights and moments with the reference after every step.
void checkAgainstReference(const AdamWAttrs &a) {
  std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}};
  std::vector<HostTensor> weights, m1, m2;
  std::vector<ReferenceState> reference;
  for (unsigned p = 0; p < shapes.size(); ++p) {
    size_t n = p == 0 ? 15 : 7;
    std::vector<float> w = randomFloats(n, 10 + p);
    weights.push_back(HostTensor::f32(shapes[p], w));
    m1.push_back(HostTensor::f32(shapes[p], std::vector<float>(n, 0)));
    m2.push_back(HostTensor::f32(shapes[p], std::vector<float>(n, 0)));
    reference.push_back(
        {toDouble(w), std::vector<double>(n, 0), std::vector<double>(n, 0)});
  }
  KernelRunner runner;
  const float lr = 0.01f;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<HostTensor> grads;
    for (unsigned p = 0; p < shapes.size(); ++p) {
      std::vector<float> g =
          randomFloats(reference[p].weight.size(), 100 * step + p, -0.5f, 0.5f);
      grads.push_back(HostTensor::f32(shapes[p], g));
      referenceAdamW(a, lr, step, g, reference[p]);
    }
    auto flag = runAdamW(runner, a, lr, step, nullptr, weights, grads, m1, m2);
    ASSERT_TRUE(static_cast<bool>(flag)) << llvm::toString(flag.takeError());
    EXPECT_EQ(*flag, 1);
    std::string what = "mode " + std::to_string(a.adamMode) + " bias " +
                       std::to_string(a.correctBias) + " step " +
                       std::to_string(step);
    for (unsigned p = 0; p < shapes.size(); ++p) {
      expectClose(weights[p].floats(), reference[p].weight, 1e-6,
                  what + " weight " + std::to_string(p));
      expectClose(m1[p].floats(), reference[p].m1, 1e-6,
                  what + " m1 " + std::to_string(p));
      expectClose(m2[p].floats(), reference[p].m2, 1e-6,
                  what + " m2 " + std::to_string(p));
    }
  }
}

TEST(OptimizerKernelsTest, AdamWMatchesTheReferenceInEveryMode) {
  for (int64_t mode : {0, 1})
    for (int64_t bias : {0, 1}) {
      AdamWAttrs a;
      a.adamMode = mode;
      a.correctBias = bias;
      a.weightDecay = 0.1f;
      a.epsilon = 1e-6f;
      checkAgainstReference(a);
    }
}

TEST(OptimizerKernelsTest, FirstCorrectedHuggingFaceStepIsLrTimesSign) {
  // m1 = (1-a) g, m2 = (1-b) g^2, lr' = lr sqrt(1-b) / (1-a): with eps = 0
  // and no decay the step is exactly lr * sign(g), up to fp32 rounding.
  AdamWAttrs a;
  a.adamMode = 1;
  a.epsilon = 0;
  a.weightDecay = 0;
  std::vector<HostTensor> w = {HostTensor::f32({4}, {1, 2, 3, 4})};
  std::vector<HostTensor> g = {HostTensor::f32({4}, {0.5f, -3, 1e-3f, -7})};
  std::vector<HostTensor> m1 = {HostTensor::f32({4}, {0, 0, 0, 0})};
  std::vector<HostTensor> m2 = {HostTensor::f32({4}, {0, 0, 0, 0})};
  KernelRunner runner;
  auto flag = runAdamW(runner, a, 0.25f, 1, nullptr, w, g, m1, m2);
  ASSERT_TRUE(static_cast<bool>(flag)) << llvm::toString(flag.takeError());
  std::vector<float> got = w[0].floats();
  std::vector<float> want = {0.75f, 2.25f, 2.75f, 4.25f};
  for (unsigned i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  EXPECT_FLOAT_EQ(m1[0].floats()[1], -0.3f);
}

TEST(OptimizerKernelsTest, WeightDecayPlacementDiffersBetweenModes) {
  // With a zero gradient only the decay moves the weight: mode 0 decays
  // before the (zero) step, mode 1 after it; both give w (1 - lr wd).
  for (int64_t mode : {0, 1}) {
    AdamWAttrs a;
    a.adamMode = mode;
    a.weightDecay = 0.5f;
    std::vector<HostTensor> w = {HostTensor::f32({2}, {2, -4})};
    std::vector<HostTensor> g = {HostTensor::f32({2}, {0, 0})};
    std::vector<HostTensor> m1 = {HostTensor::f32({2}, {0, 0})};
    std::vector<HostTensor> m2 = {HostTensor::f32({2}, {0, 0})};
    KernelRunner runner;
    auto flag = runAdamW(runner, a, 0.1f, 1, nullptr, w, g, m1, m2);
    ASSERT_TRUE(static_cast<bool>(flag));
    EXPECT_EQ(w[0].floats(), (std::vector<float>{1.9f, -3.8f})) << mode;
  }
}

TEST(OptimizerKernelsTest, FalseUpdateSignalSkipsTheUpdate) {
  AdamWAttrs a;
  std::vector<HostTensor> w = {HostTensor::f32({2}, {1, 2})};
  std::vector<HostTensor> g = {HostTensor::f32({2}, {1, 1})};
  std::vector<HostTensor> m1 = {HostTensor::f32({2}, {0.5f, 0.5f})};
  std::vector<HostTensor> m2 = {HostTensor::f32({2}, {0.5f, 0.5f})};
  HostTensor no = HostTensor::boolean({1}, {0}),
             yes = HostTensor::boolean({1}, {1});
  KernelRunner runner;
  auto skipped = runAdamW(runner, a, 0.1f, 1, &no, w, g, m1, m2);
  ASSERT_TRUE(static_cast<bool>(skipped));
  EXPECT_EQ(*skipped, 0);
  EXPECT_EQ(w[0].floats(), (std::vector<float>{1, 2}));
  EXPECT_EQ(m1[0].floats(), (std::vector<float>{0.5f, 0.5f}));
  auto applied = runAdamW(runner, a, 0.1f, 1, &yes, w, g, m1, m2);
  ASSERT_TRUE(static_cast<bool>(applied));
  EXPECT_EQ(*applied, 1);
  EXPECT_NE(w[0].floats()[0], 1.0f);

  // SGD: skipped, then applied (w += -lr g, exactly).
  HostTensor lr = HostTensor::f32({1}, {0.5f});
  HostTensor w1 = HostTensor::f32({3}, {1, 2, 3}),
             g1 = HostTensor::f32({3}, {2, 4, -2});
  HostTensor w2 = HostTensor::f32({1}, {10}), g2 = HostTensor::f32({1}, {1});
  auto flagType = TensorType::get(DType::Bool, {1});
  auto sgdSkipped = runner.run(kMsDomain, "SGDOptimizerV2",
                               {&lr, &no, &w1, &w2, &g1, &g2}, {flagType});
  ASSERT_TRUE(static_cast<bool>(sgdSkipped))
      << llvm::toString(sgdSkipped.takeError());
  EXPECT_EQ((*sgdSkipped)[0].values<uint8_t>(), (std::vector<uint8_t>{0}));
  EXPECT_EQ(w1.floats(), (std::vector<float>{1, 2, 3}));
  auto sgd = runner.run(kMsDomain, "SGDOptimizerV2",
                        {&lr, nullptr, &w1, &w2, &g1, &g2}, {flagType});
  ASSERT_TRUE(static_cast<bool>(sgd)) << llvm::toString(sgd.takeError());
  EXPECT_EQ((*sgd)[0].values<uint8_t>(), (std::vector<uint8_t>{1}));
  EXPECT_EQ(w1.floats(), (std::vector<float>{0, 0, 4}));
  EXPECT_EQ(w2.floats(), (std::vector<float>{9.5f}));
}

TEST(OptimizerKernelsTest, KernelsRejectWhatTheyCannotUpdate) {
  KernelRunner runner;
  std::vector<HostTensor> w = {HostTensor::f32({2}, {1, 2})};
  std::vector<HostTensor> g = {HostTensor::f32({2}, {1, 1})};
  std::vector<HostTensor> m1 = {HostTensor::f32({2}, {0, 0})};
  std::vector<HostTensor> m2 = {HostTensor::f32({2}, {0, 0})};
  AdamWAttrs badMode;
  badMode.adamMode = 2;
  auto mode = runAdamW(runner, badMode, 0.1f, 1, nullptr, w, g, m1, m2);
  ASSERT_FALSE(static_cast<bool>(mode));
  EXPECT_NE(llvm::toString(mode.takeError()).find("adam_mode"),
            std::string::npos);
  std::vector<HostTensor> half = {HostTensor::f16({2}, {1, 2})};
  auto f16 = runAdamW(runner, AdamWAttrs(), 0.1f, 1, nullptr, half, g, m1, m2);
  ASSERT_FALSE(static_cast<bool>(f16));
  EXPECT_NE(llvm::toString(f16.takeError()).find("float32"), std::string::npos);
  std::vector<HostTensor> wide = {HostTensor::f32({3}, {0, 0, 0})};
  auto shape = runAdamW(runner, AdamWAttrs(), 0.1f, 1, nullptr, w, g, wide, m2);
  ASSERT_FALSE(static_cast<bool>(shape));
  EXPECT_NE(llvm::toString(shape.takeError()).find("shape"), std::string::npos);
}

/// A module with one AdamWOptimizer over \p numParams parameters of shape
/// {4} and \p extra extra operands.
struct OptimizerModule {
  Module module;
  Node *node = nullptr;

  OptimizerModule(unsigned numParams, unsigned extra = 0,
                  std::vector<int64_t> momentShape = {4}) {
    module.opsetImports[""] = 17;
    module.opsetImports[std::string(kMsDomain)] = 1;
    Graph &graph = module.getGraph();
    Value *lr = graph.addInput(TensorType::get(DType::F32, {1}), "lr");
    Value *step = graph.addInput(TensorType::get(DType::I64, {1}), "step");
    Value *signal =
        graph.addInput(TensorType::get(DType::Bool, {1}), "update_signal");
    std::vector<Value *> params, grads;
    llvm::SmallVector<Value *, 8> first, second;
    for (unsigned i = 0; i < numParams; ++i) {
      std::string n = std::to_string(i);
      params.push_back(
          graph.addInput(TensorType::get(DType::F32, {4}), "w" + n));
      grads.push_back(
          graph.addInput(TensorType::get(DType::F32, {4}), "g" + n));
      first.push_back(
          graph.addInput(TensorType::get(DType::F32, momentShape), "m" + n));
      second.push_back(
          graph.addInput(TensorType::get(DType::F32, {4}), "v" + n));
    }
    std::vector<Value *> operands = OptimizerOperands::layout(
        OptimizerKind::AdamW, lr, step, signal, params, grads, {first, second});
    for (unsigned i = 0; i < extra; ++i)
      operands.push_back(graph.addInput(TensorType::get(DType::F32, {4}),
                                        "x" + std::to_string(i)));
    Builder builder(graph);
    node = builder.create(OpName{std::string(kMsDomain), "AdamWOptimizer"},
                          operands, {TensorType()}, {}, "adamw");
  }
};

TEST(OptimizerKernelsTest, RegistryChecksTheOperandGroups) {
  OptimizerModule good(2);
  auto types = inferNodeTypes(*good.node);
  ASSERT_TRUE(static_cast<bool>(types)) << llvm::toString(types.takeError());
  EXPECT_EQ((*types)[0], TensorType::get(DType::I64, {1}));
  const OpSchema *schema = OpRegistry::instance().lookup(*good.node);
  ASSERT_NE(schema, nullptr);
  EXPECT_TRUE(schema->hasTrait(TraitSideEffect));
  // Weights 3,4 and moments 7..10 are written; lr, step, signal and the
  // gradients 5,6 only read.
  EXPECT_EQ(getWrittenOperands(*good.node, schema),
            (llvm::SmallVector<unsigned, 8>{3, 4, 7, 8, 9, 10}));
  OptimizerOperands layout(*good.node);
  EXPECT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout.getGrad(1)->getName(), "g1");
  EXPECT_EQ(layout.getState(1, 0)->getName(), "v0");

  OptimizerModule ragged(2, /*extra=*/1);
  auto arity = inferNodeTypes(*ragged.node);
  ASSERT_FALSE(static_cast<bool>(arity));
  EXPECT_NE(llvm::toString(arity.takeError()).find("groups"),
            std::string::npos);

  OptimizerModule mismatched(1, 0, {5});
  auto shapes = inferNodeTypes(*mismatched.node);
  ASSERT_FALSE(static_cast<bool>(shapes));
  EXPECT_NE(llvm::toString(shapes.takeError()).find("parameter 0"),
            std::string::npos);
}

} // namespace
