//===- MicrosoftOpsTest.cpp - Type inference of com.microsoft ops ---------===//
//
// The ONNX Runtime gradient and training ops: result shapes of the
// gradients (SoftmaxCrossEntropyLossInternalGrad gives the logits' shape,
// LayerNormalizationGrad the X/scale/bias shapes, ConvGrad the X/W/B
// shapes), scatter-style gradients whose shape comes from a shape operand,
// the broadcast-gradient helpers evaluated at compile time, accumulation,
// mixed-precision helpers and YieldOp, with their error cases.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/ShapeValue.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

using MicrosoftOpsTest = OpTest;

TEST_F(MicrosoftOpsTest, ActivationGradients) {
  Value *dy = input("f32[batch,64,256]");
  Value *x = input("f32[batch,64,256]");
  for (const char *op : {"ReluGrad", "GeluGrad", "FastGeluGrad", "SigmoidGrad",
                         "TanhGrad", "QuickGeluGrad"})
    EXPECT_EQ(infer(msOp(op), {dy, x}), "f32[batch,64,256]") << op;
  EXPECT_TRUE(contains(infer(msOp("ReluGrad"), {dy, input("f32[batch,64,3]")}),
                       "does not match input"));
  EXPECT_TRUE(
      contains(infer(msOp("ReluGrad"), {dy, input("f16[batch,64,256]")}),
               "input 1 has dtype f16 but input 0 has f32"));
  Value *bias = input("f32[256]");
  EXPECT_EQ(infer(msOp("BiasGelu"), {x, bias}), "f32[batch,64,256]");
  EXPECT_EQ(infer(msOp("BiasGeluGrad_dX"), {dy, x, bias}), "f32[batch,64,256]");
  EXPECT_EQ(infer(msOp("FastGelu"), {x, bias}), "f32[batch,64,256]");
  EXPECT_EQ(infer(msOp("Gelu"), {x}), "f32[batch,64,256]");
  EXPECT_TRUE(contains(infer(msOp("BiasGelu"), {x, input("f32[128]")}),
                       "bias f32[128] must be a vector over the last axis"));
}

TEST_F(MicrosoftOpsTest, SoftmaxGradients) {
  Value *dy = input("f32[b,4,s,s]");
  Value *y = input("f32[b,4,s,s]");
  EXPECT_EQ(infer(msOp("SoftmaxGrad_13"), {dy, y}), "f32[b,4,s,s]");
  EXPECT_EQ(infer(msOp("LogSoftmaxGrad_13"), {dy, y}, 1, {intAttr("axis", 1)}),
            "f32[b,4,s,s]");
  EXPECT_TRUE(
      contains(infer(msOp("SoftmaxGrad"), {dy, y}, 1, {intAttr("axis", 4)}),
               "axis 4 is out of range for rank 4"));
  const OpSchema *v1 =
      OpRegistry::instance().lookup("com.microsoft", "SoftmaxGrad", 1);
  const OpSchema *v13 =
      OpRegistry::instance().lookup("com.microsoft", "SoftmaxGrad_13", 1);
  ASSERT_TRUE(v1 && v13);
  EXPECT_EQ(v1->lookupAttr("axis")->defaultValue->getInt(), 1);
  EXPECT_EQ(v13->lookupAttr("axis")->defaultValue->getInt(), -1);
}

TEST_F(MicrosoftOpsTest, NormalizationGradients) {
  Value *x = input("f16[batch,seq,128]");
  Value *scale = input("f16[128]");
  Value *stats = input("f32[batch,seq,1]");
  EXPECT_EQ(infer(msOp("LayerNormalizationGrad"),
                  {input("f16[batch,seq,128]"), x, scale, stats, stats}, 3),
            "f16[batch,seq,128] f16[128] f16[128]");
  EXPECT_EQ(infer(msOp("SimplifiedLayerNormalizationGrad"),
                  {input("f16[batch,seq,128]"), x, scale, stats}, 2),
            "f16[batch,seq,128] f16[128]");
  EXPECT_EQ(infer(msOp("InvertibleLayerNormalizationGrad"),
                  {input("f16[batch,seq,128]"), x, scale, scale, stats}, 3),
            "f16[batch,seq,128] f16[128] f16[128]");
  EXPECT_EQ(infer(msOp("SimplifiedLayerNormalization"), {x, scale}, 2),
            "f16[batch,seq,128] f32[batch,seq,1]");
  EXPECT_EQ(infer(onnxOp("SimplifiedLayerNormalization"), {x, scale}, 2,
                  {intAttr("axis", 1)}),
            "f16[batch,seq,128] f32[batch,1,1]");
  EXPECT_TRUE(
      contains(infer(msOp("LayerNormalizationGrad"),
                     {input("f16[batch,seq,64]"), x, scale, stats, stats}, 3),
               "does not match input"));

  Value *conv = input("f32[batch,16,8,8]");
  Value *c = input("f32[16]");
  EXPECT_EQ(infer(msOp("BatchNormInternal"), {conv, c, c, c, c}, 5,
                  {floatAttr("epsilon", 1e-5f), floatAttr("momentum", 0.9f),
                   intAttr("training_mode", 1)}),
            "f32[batch,16,8,8] f32[16] f32[16] f32[16] f32[16]");
  EXPECT_TRUE(contains(
      infer(msOp("BatchNormInternal"), {conv, input("f32[8]"), c, c, c}, 5),
      "input 1 f32[8] does not match the [16] channels"));
  EXPECT_EQ(infer(msOp("BatchNormalizationGrad"),
                  {input("f32[batch,16,8,8]"), conv, c, c, c}, 3,
                  {floatAttr("epsilon", 1e-5f)}),
            "f32[batch,16,8,8] f32[16] f32[16]");
  EXPECT_TRUE(
      contains(infer(msOp("BatchNormalizationGrad"), {conv, conv, c, c, c}, 3),
               "missing required attribute 'epsilon'"));
}

TEST_F(MicrosoftOpsTest, ConvAndPoolGradients) {
  Value *x = input("f32[batch,3,32,32]");
  Value *w = input("f32[8,3,3,3]");
  Value *dy = input("f32[batch,8,32,32]");
  std::vector<NamedAttribute> attrs = {intsAttr("pads", {1, 1, 1, 1}),
                                       intsAttr("kernel_shape", {3, 3}),
                                       stringAttr("auto_pad", "NOTSET")};
  EXPECT_EQ(infer(msOp("ConvGrad"), {dy, x, w}, 3, attrs),
            "f32[batch,3,32,32] f32[8,3,3,3] f32[8]");
  // The generator leaves dX absent for the first layer.
  Node *grad = make(msOp("ConvGrad"), {dy, x, w}, 3, attrs);
  graph().dropResult(grad, 0);
  ASSERT_FALSE(static_cast<bool>(inferAndSetTypes(*grad)));
  EXPECT_EQ(grad->getResult(1)->getType().str(), "f32[8,3,3,3]");
  EXPECT_EQ(grad->getResult(2)->getType().str(), "f32[8]");
  EXPECT_TRUE(
      contains(infer(msOp("ConvGrad"), {input("f32[batch,4,32,32]"), x, w}, 3),
               "does not match weights"));
  EXPECT_EQ(infer(onnxOp("ConvGrad"), {dy, x, w}, 2, attrs),
            "f32[batch,3,32,32] f32[8,3,3,3]");

  // MaxPoolGrad finds dX's shape on the MaxPool that made the indices.
  Value *relu = input("f32[batch,6,28,28]");
  auto pool =
      build(onnxOp("MaxPool"), {relu}, 2,
            {intsAttr("kernel_shape", {2, 2}), intsAttr("strides", {2, 2})});
  Value *pooledGrad = input("f32[batch,6,14,14]");
  EXPECT_EQ(
      infer(onnxOp("MaxPoolGrad"), {pooledGrad, pool[1]}, 1,
            {intsAttr("kernel_shape", {2, 2}), intsAttr("strides", {2, 2})}),
      "f32[batch,6,28,28]");
  EXPECT_EQ(
      infer(onnxOp("MaxPoolGrad"), {pooledGrad, input("i64[batch,6,14,14]")}),
      "f32[batch,6,?,?]");
  EXPECT_EQ(
      infer(onnxOp("AveragePoolGrad"), {input("f32[2,6,28,28]")}, 1,
            {intsAttr("kernel_shape", {3, 3}), intsAttr("pads", {1, 1, 1, 1})}),
      "f32[2,6,28,28]");
  EXPECT_EQ(
      infer(onnxOp("AveragePoolGrad"), {input("f32[2,6,14,14]")}, 1,
            {intsAttr("kernel_shape", {2, 2}), intsAttr("strides", {2, 2})}),
      "f32[2,6,?,?]");
}

TEST_F(MicrosoftOpsTest, DropoutVariants) {
  Value *x = input("f32[4,100]");
  Value *ratio = f32s({0.1f}, {});
  EXPECT_EQ(infer(msOp("BitmaskDropout"), {x, ratio}, 2), "f32[4,100] u32[13]");
  EXPECT_EQ(infer(msOp("BitmaskDropout"), {input("f32[b,100]")}, 2),
            "f32[b,100] u32[?]");
  EXPECT_EQ(infer(msOp("BitmaskDropoutGrad"), {x, input("u32[13]"), ratio}),
            "f32[4,100]");
  EXPECT_TRUE(
      contains(infer(msOp("BitmaskDropoutGrad"), {x, input("bool[4,100]")}),
               "(mask) has dtype bool, expected one of u32"));
  Value *mask = input("bool[4,100]");
  EXPECT_EQ(infer(msOp("DropoutGrad"),
                  {x, mask, ratio, graph().addInput(ty("bool[]"), "t")}),
            "f32[4,100]");
  EXPECT_TRUE(contains(infer(msOp("DropoutGrad"), {x, input("bool[3,100]")}),
                       "does not match gradient"));
}

TEST_F(MicrosoftOpsTest, CrossEntropyLosses) {
  Value *logits = input("f32[batch,10]");
  Value *labels = input("i64[batch]");
  EXPECT_EQ(infer(msOp("SoftmaxCrossEntropyLossInternal"), {logits, labels}, 2),
            "f32[] f32[batch,10]");
  EXPECT_EQ(
      infer(msOp("SoftmaxCrossEntropyLossInternal"),
            {logits, labels, nullptr, i64s({-100}, true)}, 2,
            {stringAttr("reduction", "none"), intAttr("output_type", 10)}),
      "f16[batch] f16[batch,10]");
  Value *dy = input("f32[]");
  Value *logProb = input("f32[batch,10]");
  EXPECT_EQ(
      infer(msOp("SoftmaxCrossEntropyLossInternalGrad"), {dy, logProb, labels}),
      "f32[batch,10]");
  EXPECT_EQ(infer(msOp("SoftmaxCrossEntropyLossInternalGrad"),
                  {dy, logProb, labels, nullptr, i64s({-1}, true)}, 1,
                  {intAttr("output_type", 16)}),
            "bf16[batch,10]");
  EXPECT_EQ(infer(msOp("SoftmaxCrossEntropyLossGrad"), {dy, logProb, labels}, 1,
                  {stringAttr("reduction", "mean")}),
            "f32[batch,10]");
  EXPECT_TRUE(contains(infer(msOp("SoftmaxCrossEntropyLossGrad"),
                             {dy, logProb, input("i64[batch,3]")}),
                       "must have the shape of f32[batch,10] without the "
                       "class axis"));
  EXPECT_TRUE(contains(infer(msOp("SoftmaxCrossEntropyLossInternal"),
                             {logits, labels}, 2, {intAttr("output_type", 7)}),
                       "output_type 7 is not a floating-point element type"));
  EXPECT_EQ(infer(msOp("SoftmaxCrossEntropy"),
                  {input("f32[n,5]"), input("f32[n,5]")}, 2),
            "f32[] f32[n,5]");
  EXPECT_EQ(infer(msOp("SoftmaxCrossEntropyGrad"),
                  {dy, input("f32[n,5]"), input("f32[n,5]")}),
            "f32[n,5]");
}

TEST_F(MicrosoftOpsTest, GradientsShapedByAShapeOperand) {
  Value *weights = input("f32[512,128]");
  Value *shape = build1(onnxOp("Shape"), {weights});
  EXPECT_EQ(infer(msOp("GatherGrad"),
                  {shape, input("i64[batch,64]"), input("f32[batch,64,128]")}),
            "f32[512,128]");
  EXPECT_EQ(infer(msOp("GatherGrad"), {input("i64[2]"), input("i64[batch,64]"),
                                       input("f32[batch,64,128]")}),
            "f32[?,?]");
  EXPECT_TRUE(contains(infer(msOp("GatherGrad"), {shape, input("i64[batch,64]"),
                                                  input("f32[batch,64,100]")}),
                       "does not match the gather output [batch,64,128]"));
  Value *positions = input("f32[64,128]");
  EXPECT_EQ(infer(msOp("SliceGrad"),
                  {input("f32[16,128]"), build1(onnxOp("Shape"), {positions}),
                   i64s({0}), i64s({16}), i64s({0}), i64s({1})}),
            "f32[64,128]");
  EXPECT_EQ(infer(msOp("GatherElementsGrad"),
                  {input("f32[n,1]"), i64s({7, 10}), input("i64[n,1]")}, 1,
                  {intAttr("axis", 1)}),
            "f32[7,10]");
  EXPECT_TRUE(
      contains(infer(msOp("GatherGrad"),
                     {i64s({4, -2}), input("i64[3]"), input("f32[3,5]")}),
               "shape element -2 is negative"));
}

TEST_F(MicrosoftOpsTest, BroadcastGradientHelpersEvaluateAtCompileTime) {
  Value *a = input("f32[batch,64,128]");
  Value *b = input("f32[128]");
  Value *shapeA = build1(onnxOp("Shape"), {a});
  Value *shapeB = build1(onnxOp("Shape"), {b});
  auto axes = build(msOp("BroadcastGradientArgs"), {shapeA, shapeB}, 2);
  EXPECT_EQ(axes[0]->getType().str(), "i64[0]");
  EXPECT_EQ(axes[1]->getType().str(), "i64[2]");
  Value *dy = input("f32[batch,64,128]");
  EXPECT_EQ(infer(msOp("ReduceSumTraining"), {dy, axes[1]}, 1,
                  {intAttr("keepdims", 1), intAttr("noop_with_empty_axes", 1)}),
            "f32[1,1,128]");
  EXPECT_EQ(infer(msOp("ReduceSumTraining"), {dy, axes[0]}, 1,
                  {intAttr("noop_with_empty_axes", 1)}),
            "f32[batch,64,128]");
  EXPECT_EQ(infer(msOp("ReduceSumTraining"), {dy, input("i64[?]")}, 1,
                  {intAttr("keepdims", 0)}),
            "f32[*]");
  // A symbolic dimension against 1 could be 1: the axes stay unknown.
  auto unknown = build(msOp("BroadcastGradientArgs"),
                       {build1(onnxOp("Shape"), {input("f32[n,4]")}),
                        build1(onnxOp("Shape"), {input("f32[1,4]")})},
                       2);
  EXPECT_EQ(unknown[0]->getType().str(), "i64[?]");

  EXPECT_EQ(infer(msOp("DivGrad"), {dy, a, b}, 2),
            "f32[batch,64,128] f32[128]");
  EXPECT_EQ(infer(msOp("Scale"), {dy, i64s({4}, true)}, 1,
                  {intAttr("scale_down", 1)}),
            "f32[batch,64,128]");
  EXPECT_TRUE(contains(infer(msOp("Scale"), {dy, f32s({1, 2}, {2})}),
                       "scale must hold one element"));
  EXPECT_EQ(infer(msOp("FusedMatMul"),
                  {input("f32[b,s,64]"), input("f32[128,64]")}, 1,
                  {intAttr("transB", 1), floatAttr("alpha", 0.5f)}),
            "f32[b,s,128]");
  EXPECT_EQ(infer(msOp("FusedMatMul"),
                  {input("f32[b,h,s,d]"), input("f32[b,h,s,t]")}, 1,
                  {intAttr("transA", 1)}),
            "f32[b,h,d,t]");
  EXPECT_EQ(infer(msOp("FusedMatMul"),
                  {input("f32[4,2,3]"), input("f32[2,3,5]")}, 1,
                  {intAttr("transBatchA", 1)}),
            "f32[2,4,5]");
  EXPECT_TRUE(contains(
      infer(msOp("FusedMatMul"), {input("f32[4,3]"), input("f32[4,5]")}),
      "contraction dimensions do not match"));
}

TEST_F(MicrosoftOpsTest, ConcatAndSplitTraining) {
  EXPECT_EQ(infer(msOp("ConcatTraining"),
                  {input("f32[b,3]"), input("f32[b,5]"), input("f32[b,1]")}, 2,
                  {intAttr("axis", 1)}),
            "f32[b,9] i64[3]");
  EXPECT_TRUE(contains(infer(msOp("ConcatTraining"), {input("f32[2]")}, 1),
                       "missing required attribute 'axis'"));
  Value *x = input("f32[7,2]");
  EXPECT_EQ(infer(msOp("SplitTraining"), {x, i64s({})}, 3),
            "f32[3,2] f32[2,2] f32[2,2]");
  EXPECT_EQ(infer(msOp("SplitTraining"), {x, i64s({1, 6})}, 2),
            "f32[1,2] f32[6,2]");
  EXPECT_EQ(infer(msOp("SplitTraining"), {x, input("i64[2]")}, 2,
                  {intAttr("axis", 1)}),
            "f32[7,?] f32[7,?]");
  EXPECT_TRUE(contains(infer(msOp("SplitTraining"), {x, i64s({1, 5})}, 2),
                       "split sizes sum to 6 but axis 0 has extent 7"));
}

// The backward of a ConcatTraining splits its gradient by the forward's
// per_input_length: those are the inputs' extents on the axis, known at
// compile time (symbols kept), so the pieces get the inputs' shapes.
TEST_F(MicrosoftOpsTest, SplitTrainingByConcatTrainingLengths) {
  auto concat = build(msOp("ConcatTraining"),
                      {input("f32[b,2,s,8]"), input("f32[b,2,s,8]")}, 2,
                      {intAttr("axis", -1)});
  std::optional<ops::SymIntVector> lengths = ops::getShapeValue(*concat[1]);
  ASSERT_TRUE(lengths.has_value());
  EXPECT_EQ(ops::getIntValues(*concat[1]), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(infer(msOp("SplitTraining"), {input("f32[b,2,s,16]"), concat[1]}, 2,
                  {intAttr("axis", -1)}),
            "f32[b,2,s,8] f32[b,2,s,8]");
  // Symbolic extents on the axis stay symbolic in the pieces.
  auto symbolic =
      build(msOp("ConcatTraining"), {input("f32[b,3]"), input("f32[b,n]")}, 2,
            {intAttr("axis", 1)});
  EXPECT_EQ(infer(msOp("SplitTraining"), {input("f32[b,m]"), symbolic[1]}, 2,
                  {intAttr("axis", 1)}),
            "f32[b,3] f32[b,n]");
  // An unranked input leaves the lengths unknown.
  auto unranked =
      build(msOp("ConcatTraining"), {input("f32[b,3]"), input("f32[*]")}, 2,
            {intAttr("axis", 1)});
  EXPECT_FALSE(ops::getShapeValue(*unranked[1]).has_value());
}

TEST_F(MicrosoftOpsTest, AccumulationAndMixedPrecision) {
  Value *buffer = input("f32[384,128]");
  Value *grad = input("f32[384,128]");
  Value *reset = graph().addInput(ty("bool[1]"), "lazy_reset_grad");
  EXPECT_EQ(infer(msOp("InPlaceAccumulatorV2"), {buffer, grad, reset}),
            "bool[1]");
  EXPECT_EQ(infer(msOp("InPlaceAccumulatorV2"), {buffer, grad}, 2),
            "bool[1] f32[384,128]");
  EXPECT_TRUE(contains(
      infer(msOp("InPlaceAccumulatorV2"), {buffer, input("f32[128,384]")}),
      "does not match the accumulation buffer"));
  EXPECT_TRUE(contains(
      infer(msOp("InPlaceAccumulatorV2"), {buffer, grad, input("f32[1]")}),
      "(flag) has dtype f32"));
  EXPECT_EQ(infer(msOp("InPlaceAccumulator"), {buffer, input("f16[384,128]")}),
            "f32[384,128]");
  EXPECT_EQ(infer(msOp("ZeroGradient"), {buffer, reset}), "f32[384,128]");

  Node *accumulate = make(msOp("InPlaceAccumulatorV2"), {buffer, grad, reset});
  OpCost cost = estimateCost(*accumulate);
  EXPECT_EQ(cost.flops, 384u * 128);
  EXPECT_EQ(cost.bytesWritten, 384u * 128 * 4);

  EXPECT_EQ(infer(msOp("IsAllFinite"), {grad, input("f16[3]")}), "bool[]");
  EXPECT_TRUE(contains(infer(msOp("IsAllFinite"), {input("i64[3]")}),
                       "(tensor) has dtype i64"));
  Value *lossScale = f32s({1024.0f}, {});
  EXPECT_EQ(infer(msOp("MixedPrecisionScale"),
                  {lossScale, input("f16[4,4]"), input("f16[8]")}, 2,
                  {intAttr("to", 1)}),
            "f32[4,4] f32[8]");
  EXPECT_EQ(infer(msOp("MixedPrecisionScale"),
                  {lossScale, input("f16[4,4]"), input("f16[8]")}, 1,
                  {intAttr("to", 1), intAttr("fuse_outputs", 1)}),
            "f32[24]");
  EXPECT_TRUE(
      contains(infer(msOp("MixedPrecisionScale"),
                     {lossScale, input("f16[4,4]")}, 2, {intAttr("to", 1)}),
               "expected one output per scaled input (1), got 2"));
  EXPECT_TRUE(
      contains(infer(msOp("MixedPrecisionScale"),
                     {lossScale, input("f16[4,4]")}, 1, {intAttr("to", 7)}),
               "is not a floating-point element type"));

  EXPECT_EQ(infer(msOp("YieldOp"),
                  {input("f32[]"), input("i64[3]"), input("f32[b,4]")}, 2,
                  {intsAttr("non_differentiable_outputs", {1}),
                   intsAttr("full_shape_outputs", {0, 2})}),
            "f32[] f32[b,4]");
  EXPECT_EQ(infer(msOp("YieldOp"), {input("f32[b,4]")}, 1,
                  {intsAttr("full_shape_outputs", {})}),
            "f32[*]");
  EXPECT_TRUE(contains(infer(msOp("YieldOp"), {input("f32[]")}, 2,
                             {intsAttr("full_shape_outputs", {0})}),
                       "need 1 gradient outputs, got 2"));
}

} // namespace
