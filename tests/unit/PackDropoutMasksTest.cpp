//===- PackDropoutMasksTest.cpp - Tests of pack-dropout-masks -------------===//
//
// On the CPU backend: gpt_tiny_dropout (seven dropouts, every mask read by
// DropoutGrad) trained three AdamW steps with pack-dropout-masks gives the
// same losses, first-step gradients and final state, bit for bit, as
// without it, plans fewer bytes, and the same holds when the pass follows
// recompute (its clones draw from the original's stream) or amp. Every
// testdata graph keeps its numbers bit for bit.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/Plan.h"

#include "tests/unit/TestdataPipelineTraining.h"
#include "gtest/gtest.h"

#include <string>

using namespace gmopt;

namespace {

const gmopt::testing::TestdataGraph kDropoutGraph{"gpt_tiny_dropout", 4};

std::string pipelineWith(llvm::StringRef passes) {
  return ("canonicalize,fold-transpose," + passes + ",schedule,plan-buffers")
      .str();
}

unsigned countOps(const Module &module, llvm::StringRef domain,
                  llvm::StringRef type) {
  unsigned n = 0;
  for (const Node &node : module.getGraph().getNodes())
    n += node.isa(domain, type);
  return n;
}

/// Same losses, first gradients and final state, bitwise.
void expectSameRun(const TrainingResult &a, const TrainingResult &b,
                   llvm::StringRef how) {
  EXPECT_EQ(a.losses, b.losses) << how.str();
  ASSERT_EQ(a.firstGradients.size(), b.firstGradients.size()) << how.str();
  for (size_t i = 0; i != a.firstGradients.size(); ++i)
    EXPECT_TRUE(a.firstGradients[i].second == b.firstGradients[i].second)
        << how.str() << " gradient " << a.firstGradients[i].first;
  ASSERT_EQ(a.finalState.size(), b.finalState.size()) << how.str();
  for (size_t i = 0; i != a.finalState.size(); ++i)
    EXPECT_TRUE(a.finalState[i].data == b.finalState[i].data)
        << how.str() << " state " << a.finalState[i].name;
}

TEST(PackDropoutMasksTest, TrainsBitIdenticallyWithSmallerPlan) {
  for (const char *before : {"", "recompute{mode=selective},",
                             "amp{dtype=fp16},", "amp{dtype=bf16},"}) {
    std::string plain = pipelineWith(llvm::StringRef(before).rtrim(','));
    if (!*before)
      plain = "canonicalize,fold-transpose,schedule,plan-buffers";
    std::string packed =
        pipelineWith((std::string(before) + "pack-dropout-masks"));
    auto reference = gmopt::testing::trainWithPipeline(kDropoutGraph, plain, 3);
    auto bits = gmopt::testing::trainWithPipeline(kDropoutGraph, packed, 3);
    ASSERT_TRUE(reference && bits) << packed;
    const Module &module = *bits->module;
    // Every mask the backward pass reads is packed. (After recompute the
    // forward originals' masks are unused, and clones whose mask nothing
    // reads stay Dropout: their mask is a transient.)
    ASSERT_GT(countOps(*reference->module, kOnnxDomain, "Dropout"), 0u)
        << plain;
    EXPECT_GT(countOps(module, kMsDomain, "BitmaskDropout"), 0u) << packed;
    EXPECT_EQ(countOps(module, kMsDomain, "DropoutGrad"), 0u) << packed;
    EXPECT_EQ(countOps(module, kMsDomain, "BitmaskDropoutGrad"),
              countOps(*reference->module, kMsDomain, "DropoutGrad"))
        << packed;
    expectSameRun(bits->result, reference->result, packed);
    EXPECT_LT(module.plan.figures.plannedBytes(),
              reference->module->plan.figures.plannedBytes())
        << packed;
    // Planned equals measured, byte for byte.
    EXPECT_EQ(bits->result.memory.peakBytes, module.plan.figures.plannedBytes())
        << packed;
  }
}

TEST(PackDropoutMasksTest, EveryTestdataGraphKeepsItsNumbers) {
  // The GPT graphs carry dropouts (ratio a graph input; masks saved);
  // the others have none and keep their plan.
  for (const gmopt::testing::TestdataGraph &model :
       gmopt::testing::kTestdataGraphs) {
    auto plain = gmopt::testing::trainWithPipeline(
        model, "canonicalize,fold-transpose,schedule,plan-buffers", 2);
    auto packed = gmopt::testing::trainWithPipeline(
        model, pipelineWith("pack-dropout-masks"), 2);
    ASSERT_TRUE(plain && packed) << model.name;
    expectSameRun(packed->result, plain->result, model.name);
    EXPECT_EQ(countOps(*packed->module, kMsDomain, "DropoutGrad"), 0u)
        << model.name;
    uint64_t before = plain->module->plan.figures.plannedBytes();
    uint64_t after = packed->module->plan.figures.plannedBytes();
    if (countOps(*packed->module, kMsDomain, "BitmaskDropout") == 0)
      EXPECT_EQ(after, before) << model.name;
    else
      EXPECT_LT(after, before) << model.name;
  }
}

} // namespace
