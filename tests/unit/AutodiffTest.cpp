//===- AutodiffTest.cpp - The autodiff pass against ORT's training graphs -===//
//
// Unit tests of the autodiff pass: its loss-spec parser, and numerical
// equivalence with ONNX Runtime's own artifacts: for every testdata model,
// the module the pass builds from eval_model.onnx has the graph inputs,
// signature and gradient names of the imported training_model.onnx, and one
// training step of each on the CPU backend (same inputs) gives the same
// loss and gradients.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/TestdataTraining.h"

#include "passes/PassManager.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/transforms/Canonicalize.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"
#include "tests/unit/TestPaths.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::testing;

namespace {

TEST(AutodiffTest, ParsesLossSpecs) {
  auto plain = parseLossSpec("output");
  ASSERT_TRUE(bool(plain)) << testdataErrorText(plain.takeError());
  EXPECT_EQ(plain->kind, LossKind::Output);
  EXPECT_TRUE(plain->output.empty() && plain->target.empty());

  auto full = parseLossSpec("cross-entropy:logits,labels");
  ASSERT_TRUE(bool(full)) << testdataErrorText(full.takeError());
  EXPECT_EQ(full->kind, LossKind::CrossEntropy);
  EXPECT_EQ(full->output, "logits");
  EXPECT_EQ(full->target, "labels");

  auto named = parseLossSpec("mse:prediction");
  ASSERT_TRUE(bool(named)) << testdataErrorText(named.takeError());
  EXPECT_EQ(named->kind, LossKind::MeanSquaredError);
  EXPECT_EQ(named->output, "prediction");
  EXPECT_TRUE(named->target.empty());

  for (const char *kind : {"bce-with-logits", "l1"})
    EXPECT_TRUE(bool(parseLossSpec(kind))) << kind;
  EXPECT_EQ(testdataErrorText(parseLossSpec("hinge").takeError()),
            "unknown loss kind 'hinge' (expected output, cross-entropy, mse, "
            "bce-with-logits or l1)");
  EXPECT_EQ(testdataErrorText(parseLossSpec("output:loss,labels").takeError()),
            "loss kind 'output' takes no target");
}

/// The parameters that are buffers, not weights, in \p name's forward
/// model, and those its generator froze.
std::string frozenOf(llvm::StringRef name) {
  if (name == "regression_frozen")
    return "fc1.weight,fc1.bias";
  if (name.starts_with("llama"))
    return "cos,sin";
  return "";
}

/// max|a - b| / max|b|.
double relativeDifference(const TensorData &a, const TensorData &b) {
  EXPECT_EQ(a.getType(), b.getType());
  if (a.getType() != b.getType())
    return INFINITY;
  double worst = 0, largest = 1e-30;
  for (uint64_t i = 0, e = a.getNumElements(); i != e; ++i) {
    worst =
        std::max(worst, std::fabs(a.getFloatElement(i) - b.getFloatElement(i)));
    largest = std::max(largest, std::fabs(b.getFloatElement(i)));
  }
  return worst / largest;
}

TEST(AutodiffTestdataTest, EvalModelsTrainLikeOrtTrainingGraphs) {
  for (const TestdataGraph &graph : kTestdataGraphs) {
    SCOPED_TRACE(graph.name);
    std::unique_ptr<Module> reference =
        importTestdataGraph(graph.name, graph.batch);
    OnnxImportOptions options;
    options.dimBindings = testdataDims(graph);
    auto imported = importOnnxFile(
        gmopt::testdataDir() + "/" + graph.name + "/eval_model.onnx", options);
    ASSERT_TRUE(bool(imported)) << testdataErrorText(imported.takeError());
    ASSERT_TRUE(reference);
    Module &built = **imported;

    PassManager passes;
    AutodiffPass::Options autodiff;
    autodiff.frozen = frozenOf(graph.name);
    passes.addPass(std::make_unique<CanonicalizePass>());
    passes.addPass(std::make_unique<AutodiffPass>(autodiff));
    ASSERT_EQ(testdataErrorText(passes.run(built)), "<success>");
    ASSERT_EQ(testdataErrorText(verifyModule(built)), "<success>");

    // ONNX Runtime's conventions: the same graph inputs in the same order
    // (data, parameters, accumulation buffers, lazy_reset_grad), the same
    // parameters, trainability and gradient names.
    std::vector<std::string> builtInputs, referenceInputs;
    for (const auto &input : built.getGraph().getInputs())
      builtInputs.push_back(input->getName().str());
    for (const auto &input : reference->getGraph().getInputs())
      referenceInputs.push_back(input->getName().str());
    EXPECT_EQ(builtInputs, referenceInputs);
    // Parameters that are graph inputs (frozen constants may differ: ONNX
    // Runtime folds some buffers, such as GPT's causal mask, away).
    const TrainingSignature &ours = built.getSignature();
    const TrainingSignature &theirs = reference->getSignature();
    auto inputParams = [](const TrainingSignature &signature) {
      std::vector<const ParamInfo *> params;
      for (const ParamInfo &info : signature.getParams())
        if (info.param->isGraphInput())
          params.push_back(&info);
      return params;
    };
    std::vector<const ParamInfo *> oursParams = inputParams(ours);
    std::vector<const ParamInfo *> theirsParams = inputParams(theirs);
    ASSERT_EQ(oursParams.size(), theirsParams.size());
    EXPECT_EQ(ours.numTrainable(), theirs.numTrainable());
    for (size_t i = 0; i != oursParams.size(); ++i) {
      const ParamInfo &a = *oursParams[i], &b = *theirsParams[i];
      EXPECT_EQ(a.param->getName(), b.param->getName());
      EXPECT_EQ(a.trainable, b.trainable) << a.param->getName().str();
      if (a.trainable && b.trainable) {
        EXPECT_EQ(a.grad->getName(), b.grad->getName());
        EXPECT_EQ(a.accumulator->getName(), b.accumulator->getName());
      }
    }
    EXPECT_EQ(ours.getDataInputs().size(), theirs.getDataInputs().size());
    ASSERT_TRUE(ours.getLazyResetGrad() && ours.getLossGradSeed());

    // One step of each: the same loss and gradients.
    llvm::StringMap<TensorData> inputs = readTestdataInputs(graph.name);
    TrainedStep builtStep =
        trainTestdataStep(built, inputs, AllocationMode::Eager);
    TrainedStep referenceStep =
        trainTestdataStep(*reference, inputs, AllocationMode::Eager);
    ASSERT_EQ(builtStep.results.size(), referenceStep.results.size());
    double worst = 0;
    for (size_t i = 0; i != builtStep.results.size(); ++i)
      worst = std::max(worst, relativeDifference(builtStep.results[i],
                                                 referenceStep.results[i]));
    // The design's bound for an fp32 pass (measured: at most 5.4e-7).
    EXPECT_LE(worst, 1e-6);
    std::printf("%-18s %zu tensors, max relative difference %.2e\n", graph.name,
                builtStep.results.size(), worst);
  }
}

} // namespace
