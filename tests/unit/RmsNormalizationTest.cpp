//===- RmsNormalizationTest.cpp - ai.onnx RMSNormalization end to end -----===//
//
// ONNX's RMSNormalization (opset 23) through the layers that read it: the
// row split every normalization shares (ir/ops/NormRows.h), the schema's
// type inference and its errors (bad axis, scalar X, a scale that does not
// broadcast to the normalized shape, mixed element types), and the gradient
// rule's backward graph - SimplifiedLayerNormalizationGrad fed by an
// inverse deviation recomputed from X in the stash type - checked against
// finite differences where the stash type differs from X's. The kernels are
// checked in CpuKernelsNormTest, the rule over random shapes in
// GradientCheckTest.
//
//===----------------------------------------------------------------------===//

#include "GradientCheckHarness.h"
#include "OpTestHelpers.h"

#include "ir/ops/NormRows.h"

using namespace gmopt;
using namespace gmopt::gradcheck;
using namespace gmopt::test;

namespace {

/// A module importing ai.onnx 23, RMSNormalization's first opset.
class RmsNormalizationTest : public OpTest {
protected:
  RmsNormalizationTest() { module.opsetImports[""] = 23; }

  std::string inferRms(llvm::ArrayRef<Value *> operands,
                       llvm::ArrayRef<NamedAttribute> attrs = {}) {
    return infer(onnxOp("RMSNormalization"), operands, 1, attrs);
  }
};

NamedAttribute axisAttr(int64_t axis) {
  return {"axis", Attribute::getInt(axis)};
}

TEST_F(RmsNormalizationTest, NormRowsSplitsXAtTheAxis) {
  Node *rms = make(onnxOp("RMSNormalization"),
                   {input("f32[2,3,4]"), input("f32[3,4]")}, 1, {axisAttr(1)});
  auto rows = norm::getNormRows(*rms, {2, 3, 4});
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  EXPECT_EQ(rows->axis, 1u);
  EXPECT_EQ(rows->rows, 2);
  EXPECT_EQ(rows->cols, 12);
  EXPECT_EQ(norm::getNormKind(*rms), norm::NormKind::Rms);
  EXPECT_EQ(llvm::toString(norm::getNormRows(*rms, {2}).takeError()),
            "axis 1 is out of range for rank 1");
  EXPECT_EQ(llvm::toString(norm::getNormRows(*rms, {}).takeError()),
            "X must have rank >= 1 to be normalized, got a scalar");
  EXPECT_EQ(llvm::toString(
                norm::getNormRows(*rms, {int64_t(1) << 40, 1 << 20, 1 << 20})
                    .takeError()),
            "the element count of X overflows int64");

  Node *layer = make(onnxOp("LayerNormalization"),
                     {input("f32[2,3,4]"), input("f32[4]")});
  auto lastAxis = norm::getNormRows(*layer, {2, 3, 4});
  ASSERT_TRUE(bool(lastAxis));
  EXPECT_EQ(lastAxis->axis, 2u);
  EXPECT_EQ(lastAxis->rows, 6);
  EXPECT_EQ(lastAxis->cols, 4);
  EXPECT_EQ(norm::getNormKind(*layer), norm::NormKind::Layer);
  EXPECT_EQ(
      norm::getNormKind(*make(msOp("SimplifiedLayerNormalizationGrad"), {}, 1)),
      norm::NormKind::Rms);
}

TEST(NormRowsTest, ParamPeriodIsTheTrailingBlockAParameterCovers) {
  using norm::getParamPeriod;
  EXPECT_EQ(getParamPeriod({3, 4}, {3, 4}), 12);
  EXPECT_EQ(getParamPeriod({3, 4}, {1, 3, 4}), 12);
  EXPECT_EQ(getParamPeriod({3, 4}, {4}), 4);
  EXPECT_EQ(getParamPeriod({3, 4}, {1, 4}), 4);
  EXPECT_EQ(getParamPeriod({3, 4}, {1}), 1);
  EXPECT_EQ(getParamPeriod({3, 4}, {}), 1);
  EXPECT_EQ(getParamPeriod({4, 1}, {4, 1}), 4);
  // Broadcast along a trailing dimension is no period: a full copy.
  EXPECT_EQ(getParamPeriod({3, 4}, {3, 1}), std::nullopt);
  EXPECT_EQ(getParamPeriod({3, 4}, {2, 3, 4}), std::nullopt);
  EXPECT_EQ(getParamPeriod({3, 4}, {5}), std::nullopt);
}

TEST_F(RmsNormalizationTest, InfersXsTypeAndOnlyFromOpset23) {
  Value *x = input("f32[batch,seq,128]");
  EXPECT_EQ(inferRms({x, input("f32[128]")}), "f32[batch,seq,128]");
  EXPECT_EQ(inferRms({x, input("f32[seq,128]")}, {axisAttr(1)}),
            "f32[batch,seq,128]");
  // A scale that broadcasts to the normalized shape [seq,128].
  EXPECT_EQ(inferRms({x, input("f32[1,128]")}, {axisAttr(-2)}),
            "f32[batch,seq,128]");
  EXPECT_EQ(inferRms({input("f16[4,8]"), input("f16[8]")}), "f16[4,8]");
  const OpRegistry &registry = OpRegistry::instance();
  EXPECT_TRUE(registry.lookup(kOnnxDomain, "RMSNormalization", 23));
  EXPECT_FALSE(registry.lookup(kOnnxDomain, "RMSNormalization", 21));
  const OpSchema *schema = registry.lookup(kOnnxDomain, "RMSNormalization", 23);
  ASSERT_TRUE(schema);
  EXPECT_EQ(schema->amp, AmpClass::Fp32Compute);
}

TEST_F(RmsNormalizationTest, BadModelsAreErrors) {
  Value *x = input("f32[batch,seq,128]");
  EXPECT_TRUE(contains(inferRms({x, input("f32[128]")}, {axisAttr(3)}),
                       "axis 3 is out of range for rank 3"));
  EXPECT_TRUE(contains(inferRms({x, input("f32[128]")}, {axisAttr(-4)}),
                       "axis -4 is out of range for rank 3"));
  EXPECT_TRUE(contains(inferRms({input("f32[]"), input("f32[]")}),
                       "X must have rank >= 1"));
  EXPECT_TRUE(contains(inferRms({x, input("f32[64]")}),
                       "input 1 f32[64] does not broadcast to the normalized "
                       "shape [128]"));
  // Unidirectional: a scale may not widen the normalized shape.
  EXPECT_TRUE(contains(
      inferRms({input("f32[2,1,4]"), input("f32[3,1]")}, {axisAttr(1)}),
      "does not broadcast to the normalized shape [1,4]"));
  EXPECT_TRUE(contains(inferRms({x, input("f32[2,seq,128]")}, {axisAttr(1)}),
                       "does not broadcast"));
  EXPECT_TRUE(contains(inferRms({x, input("f16[128]")}),
                       "input 1 has dtype f16 but input 0 has f32"));
  EXPECT_TRUE(contains(
      inferRms({x, input("f32[128]")}, {{"stash_type", Attribute::getInt(7)}}),
      "stash_type must be a floating-point element type"));
}

/// Float64 X and scale with the statistic stashed in float32 (stash_type
/// 1, the default): the gradient rule casts X to float32 for the inverse
/// deviation, and the float64 gradients still match finite differences
/// (to the float32 statistic's precision, well inside kFloat64's
/// tolerance).
GradientCase stashedInFloat32(bool trainMode) {
  return GradientCase(
      "RMSNormalization stash_type 1",
      [](CaseBuilder &b) {
        b.module.opsetImports[""] = 23;
        std::vector<int64_t> shape = {b.pick(1, 3), b.pick(2, 4), 5};
        return b.op("RMSNormalization",
                    {b.param(shape, -2, 2), b.param({5}, 0.5, 1.5)},
                    {{"epsilon", Attribute::getFloat(1e-5f)}});
      },
      3, trainMode);
}

TEST(RmsNormalizationGradientTest, RecomputesTheStatisticInTheStashType) {
  InputRanges ranges;
  std::unique_ptr<Module> module =
      buildCase(stashedInFloat32(true), 7, DType::F64, ranges);
  ASSERT_TRUE(module);
  AutodiffPass::Options options;
  options.frozen = "projection";
  AutodiffPass autodiff(options);
  PassContext context;
  auto changed = autodiff.run(*module, context);
  ASSERT_TRUE(bool(changed)) << errorText(changed.takeError());
  ASSERT_EQ(errorText(verifyModule(*module)), "<success>");
  const Node *grad = nullptr, *cast = nullptr;
  for (const Node &node : module->getGraph()) {
    if (node.getOpType() == "SimplifiedLayerNormalizationGrad")
      grad = &node;
    if (node.getOpType() == "Cast" && node.getPhase() == Phase::Backward)
      cast = &node;
  }
  ASSERT_TRUE(grad) << "no SimplifiedLayerNormalizationGrad";
  ASSERT_TRUE(cast) << "X is not cast to the stash type";
  EXPECT_EQ(grad->getDomain(), kMsDomain);
  EXPECT_EQ(grad->getOperand(1)->getName(), "p0");
  EXPECT_EQ(grad->getOperand(3)->getType().getDType(), DType::F32);
  EXPECT_EQ(cast->getOperand(0)->getName(), "p0");
  EXPECT_EQ(cast->getResult(0)->getType().getDType(), DType::F32);
  // Nothing X-sized is computed for the statistic: the one reduction reads
  // the cast X directly.
  unsigned reductions = 0;
  for (const Node &node : module->getGraph())
    if (node.getOpType() == "ReduceSumSquare") {
      ++reductions;
      EXPECT_EQ(node.getOperand(0), cast->getResult(0));
    }
  EXPECT_EQ(reductions, 1u);
}

TEST(RmsNormalizationGradientTest, StashedInFloat32MatchesFiniteDifferences) {
  for (bool trainMode : {true, false})
    for (unsigned seed = 0; seed != 3; ++seed)
      EXPECT_EQ(checkTrial(stashedInFloat32(trainMode), 100 + seed, DType::F64),
                2u)
          << "train-mode " << trainMode << ", seed " << seed;
}

} // namespace
