//===- ShapeInferenceTest.cpp - Type inference of ai.onnx ops -------------===//
//
// Dtype and shape inference of the standard op families on static and
// symbolic shapes: elementwise broadcasting, matrix products and Einsum,
// convolution and pooling, normalization, softmax, dropout and losses, the
// reshape family and data movement, reductions in their versioned forms,
// and shapes computed by Shape->Gather->Concat subgraphs. Each family also
// has its error cases with the message the user sees.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"

#include "ir/ops/ShapeInference.h"
#include "ir/ops/ShapeValue.h"

using namespace gmopt;
using namespace gmopt::test;

namespace {

using ShapeInferenceTest = OpTest;

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

TEST(ShapeHelpersTest, DimArithmeticKeepsSymbolsItCan) {
  Dim batch = Dim::symbolic("batch");
  EXPECT_EQ(ops::multiplyDims({Dim::fixed(2), Dim::fixed(3)}), Dim::fixed(6));
  EXPECT_EQ(ops::multiplyDims({Dim::fixed(1), batch}), batch);
  EXPECT_EQ(ops::multiplyDims({Dim::fixed(2), batch}), Dim::unknown());
  EXPECT_EQ(ops::multiplyDims({Dim::fixed(0), batch}), Dim::fixed(0));
  EXPECT_EQ(ops::multiplyDims({}), Dim::fixed(1));
  EXPECT_EQ(ops::multiplyDims(
                {Dim::fixed(int64_t(1) << 40), Dim::fixed(int64_t(1) << 40)}),
            Dim::unknown());
  EXPECT_EQ(ops::addDims({batch, Dim::fixed(0)}), batch);
  EXPECT_EQ(ops::addDims({batch, batch}), Dim::unknown());
  EXPECT_EQ(ops::broadcastDims(batch, Dim::fixed(1)), batch);
  EXPECT_EQ(ops::broadcastDims(Dim::fixed(3), batch), Dim::fixed(3));
  EXPECT_FALSE(ops::broadcastDims(Dim::fixed(3), Dim::fixed(4)).has_value());
  EXPECT_EQ(ops::unifyDims(Dim::unknown(), batch), batch);
  EXPECT_EQ(ops::unifyDims(batch, Dim::fixed(8)), Dim::fixed(8));
  EXPECT_FALSE(ops::unifyDims(Dim::fixed(2), Dim::fixed(8)).has_value());
}

TEST(ShapeHelpersTest, WindowAndSliceArithmeticAreOverflowSafe) {
  EXPECT_EQ(ops::windowOutputSize(28, 5, 1, 1, 0, 0, "VALID", false), 24);
  EXPECT_EQ(ops::windowOutputSize(28, 5, 3, 1, 0, 0, "SAME_LOWER", false), 10);
  EXPECT_EQ(ops::windowOutputSize(5, 2, 2, 1, 0, 0, "NOTSET", true), 3);
  EXPECT_EQ(ops::windowOutputSize(4, 2, 2, 1, 0, 0, "NOTSET", true), 2);
  EXPECT_EQ(ops::windowOutputSize(10, INT64_MAX, 1, 2, 0, 0, "NOTSET", false),
            std::nullopt);
  EXPECT_EQ(
      ops::windowOutputSize(10, 3, 1, 1, INT64_MAX, INT64_MAX, "NOTSET", false),
      std::nullopt);
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(ops::sliceRange(10, 2, 8, 3), Range(2, 2));
  EXPECT_EQ(ops::sliceRange(10, -3, INT64_MAX, 1), Range(7, 3));
  EXPECT_EQ(ops::sliceRange(10, INT64_MIN, INT64_MAX, INT64_MAX), Range(0, 1));
  EXPECT_EQ(ops::sliceRange(10, INT64_MAX, INT64_MIN, INT64_MIN), Range(9, 1));
  EXPECT_EQ(ops::sliceRange(10, INT64_MAX, INT64_MIN, -1), Range(9, 10));
  EXPECT_EQ(ops::sliceRange(0, 0, 5, -1), Range(0, 0));
  EXPECT_EQ(ops::sliceRange(10, 5, 5, 1), Range(5, 0));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, BroadcastingStaticAndSymbolic) {
  EXPECT_EQ(inferOnnx("Add", {input("f32[2,3]"), input("f32[3]")}), "f32[2,3]");
  EXPECT_EQ(inferOnnx("Mul", {input("f32[batch,1,4]"), input("f32[5,1]")}),
            "f32[batch,5,4]");
  EXPECT_EQ(
      inferOnnx("Sub", {input("f32[batch,seq]"), input("f32[batch,seq]")}),
      "f32[batch,seq]");
  EXPECT_EQ(inferOnnx("Div", {input("f32[a,4]"), input("f32[b,4]")}),
            "f32[?,4]");
  EXPECT_EQ(inferOnnx("Add", {input("f32[n]"), input("f32[7]")}), "f32[7]");
  EXPECT_EQ(inferOnnx("Add", {input("f32[?]"), input("f32[1]")}), "f32[?]");
  EXPECT_EQ(inferOnnx("Add", {input("f32[*]"), input("f32[3]")}), "f32[*]");
  EXPECT_EQ(
      inferOnnx("Sum", {input("f16[2,1]"), input("f16[1,3]"), input("f16[3]")}),
      "f16[2,3]");
  EXPECT_EQ(inferOnnx("Max", {input("f32[]"), input("f32[4]")}), "f32[4]");
}

TEST_F(ShapeInferenceTest, BroadcastingErrors) {
  Node *add = make(onnxOp("Add"), {input("f32[2,3]"), input("f32[4]")});
  add->setName("add");
  EXPECT_EQ(errorOf(*add), "node add (Add): incompatible broadcast: shapes "
                           "[2,3] and [4] (input 1)");
  Node *mixed = make(onnxOp("Add"), {input("f32[3]"), input("f16[3]")});
  mixed->setName("mixed");
  EXPECT_EQ(errorOf(*mixed),
            "node mixed (Add): input 1 has dtype f16 but input 0 has f32");
}

TEST_F(ShapeInferenceTest, ComparisonsLogicAndSelection) {
  EXPECT_EQ(inferOnnx("Equal", {input("i64[batch,1]"), input("i64[4]")}),
            "bool[batch,4]");
  EXPECT_EQ(inferOnnx("Less", {input("f32[3]"), input("f32[3]")}), "bool[3]");
  EXPECT_EQ(inferOnnx("Not", {input("bool[2,2]")}), "bool[2,2]");
  EXPECT_EQ(inferOnnx("And", {input("bool[2]"), input("bool[2,1]")}),
            "bool[2,2]");
  EXPECT_TRUE(contains(inferOnnx("Not", {input("f32[2]")}),
                       "has dtype f32, expected one of bool"));
  EXPECT_EQ(inferOnnx("Where", {input("bool[1,1,8,8]"), input("f32[]"),
                                input("f32[b,4,8,8]")}),
            "f32[b,4,8,8]");
  EXPECT_TRUE(contains(
      inferOnnx("Where", {input("f32[2]"), input("f32[2]"), input("f32[2]")}),
      "(condition) has dtype f32"));
  EXPECT_EQ(inferOnnx("IsNaN", {input("f16[3,n]")}), "bool[3,n]");
  EXPECT_EQ(inferOnnx("IsInf", {input("f32[3]")}), "bool[3]");
}

TEST_F(ShapeInferenceTest, UnaryOpsCastsAndClip) {
  for (const char *op : {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg",
                         "Abs", "Reciprocal", "Erf", "Sign", "Cos", "Sin",
                         "Floor", "Ceil", "LeakyRelu"})
    EXPECT_EQ(inferOnnx(op, {input("bf16[batch,?,3]")}), "bf16[batch,?,3]")
        << op;
  EXPECT_EQ(inferOnnx("Pow", {input("f32[4,2]"), input("f64[]")}), "f32[4,2]");
  EXPECT_EQ(inferOnnx("Cast", {input("f32[b,2]")}, {intAttr("to", 10)}),
            "f16[b,2]");
  EXPECT_TRUE(
      contains(inferOnnx("Cast", {input("f32[2]")}, {intAttr("to", 99)}),
               "attribute 'to' = 99 is not a valid element type"));
  EXPECT_EQ(inferOnnx("CastLike", {input("f32[2,3]"), input("bf16[]")}),
            "bf16[2,3]");
  EXPECT_EQ(inferOnnx("Clip",
                      {input("f32[2,3]"), f32s({0.0f}, {}), f32s({6.0f}, {})}),
            "f32[2,3]");
  EXPECT_TRUE(
      contains(inferOnnx("Clip", {input("f32[2,3]"), f32s({0.0f, 1.0f}, {2})}),
               "input 1 (min) must be a scalar"));
  EXPECT_TRUE(contains(
      infer(onnxOp("Clip"), {input("f32[2]")}, 1, {floatAttr("min", 0.0f)}),
      "(Clip): unknown attribute 'min'"));
  module.opsetImports[""] = 20;
  EXPECT_EQ(
      inferOnnx("Gelu", {input("f32[4]")}, {stringAttr("approximate", "tanh")}),
      "f32[4]");
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, MatMulShapes) {
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[2,3,4]"), input("f32[4,5]")}),
            "f32[2,3,5]");
  EXPECT_EQ(
      inferOnnx("MatMul", {input("f32[batch,seq,64]"), input("f32[64,128]")}),
      "f32[batch,seq,128]");
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[b,h,s,d]"), input("f32[b,h,d,s]")}),
            "f32[b,h,s,s]");
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[4]"), input("f32[4,5]")}),
            "f32[5]");
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[3,4]"), input("f32[4]")}),
            "f32[3]");
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[4]"), input("f32[4]")}), "f32[]");
  EXPECT_EQ(inferOnnx("MatMul", {input("f32[2,1,3,4]"), input("f32[5,4,6]")}),
            "f32[2,5,3,6]");
  EXPECT_TRUE(
      contains(inferOnnx("MatMul", {input("f32[3,4]"), input("f32[5,6]")}),
               "contraction dimensions do not match: [3,4] x [5,6]"));
  EXPECT_TRUE(
      contains(inferOnnx("MatMul", {input("f32[2,3,4]"), input("f32[3,4,5]")}),
               "incompatible broadcast of batch dimensions"));
  EXPECT_TRUE(contains(inferOnnx("MatMul", {input("f32[]"), input("f32[3]")}),
                       "rank >= 1"));
}

TEST_F(ShapeInferenceTest, GemmShapes) {
  EXPECT_EQ(inferOnnx("Gemm",
                      {input("f32[batch,784]"), input("f32[128,784]"),
                       input("f32[128]")},
                      {intAttr("transB", 1)}),
            "f32[batch,128]");
  EXPECT_EQ(inferOnnx("Gemm", {input("f32[8,4]"), input("f32[8,6]")},
                      {intAttr("transA", 1), floatAttr("beta", 0.0f)}),
            "f32[4,6]");
  EXPECT_EQ(inferOnnx("Gemm", {input("f32[m,4]"), input("f32[4,6]"),
                               input("f32[3,1]")}),
            "f32[3,6]");
  EXPECT_TRUE(contains(inferOnnx("Gemm", {input("f32[3,4]"), input("f32[4,6]"),
                                          input("f32[5]")}),
                       "C f32[5] does not broadcast to [3,6]"));
  EXPECT_TRUE(
      contains(inferOnnx("Gemm", {input("f32[3,4]"), input("f32[5,6]")}),
               "contraction dimensions do not match"));
  EXPECT_TRUE(
      contains(inferOnnx("Gemm", {input("f32[2,3,4]"), input("f32[4,6]")}),
               "input 0 must have rank 2"));
}

TEST_F(ShapeInferenceTest, EinsumFromTheEquation) {
  auto eq = [](llvm::StringRef e) { return stringAttr("equation", e); };
  module.opsetImports[""] = 17;
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[3,4]"), input("f32[4,5]")},
                      {eq("ij,jk->ik")}),
            "f32[3,5]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[b,3,4]"), input("f32[b,4,5]")},
                      {eq("bij,bjk->bik")}),
            "f32[b,3,5]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[2,1,3,4]"), input("f32[7,4,5]")},
                      {eq("...ij,...jk->...ik")}),
            "f32[2,7,3,5]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[3,4]"), input("f32[4,5]")},
                      {eq("ij,jk")}),
            "f32[3,5]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[3,4]")}, {eq("ij->ji")}),
            "f32[4,3]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[n,n]")}, {eq("ii->i")}), "f32[n]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[2,3]"), input("f32[2,3]")},
                      {eq("ij,ij->")}),
            "f32[]");
  EXPECT_EQ(inferOnnx("Einsum", {input("f32[b,h,s,d]"), input("f32[b,h,t,d]")},
                      {eq("bhsd, bhtd -> bhst")}),
            "f32[b,h,s,t]");
  EXPECT_TRUE(
      contains(inferOnnx("Einsum", {input("f32[3,4]"), input("f32[5,6]")},
                         {eq("ij,jk->ik")}),
               "letter 'j' binds extents [4] and [5]"));
  EXPECT_TRUE(
      contains(inferOnnx("Einsum", {input("f32[3,4]")}, {eq("ij,jk->ik")}),
               "has 2 operands but the node has 1 inputs"));
  EXPECT_TRUE(contains(inferOnnx("Einsum", {input("f32[3,4]")}, {eq("ij->iz")}),
                       "output letter 'z'"));
  EXPECT_TRUE(
      contains(inferOnnx("Einsum", {input("f32[3,4,5]")}, {eq("ij->i")}),
               "input 0 has rank 3"));
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, ConvShapes) {
  Value *x = input("f32[batch,1,28,28]");
  Value *w = input("f32[6,1,5,5]");
  EXPECT_EQ(inferOnnx("Conv", {x, w, input("f32[6]")},
                      {intsAttr("pads", {2, 2, 2, 2})}),
            "f32[batch,6,28,28]");
  EXPECT_EQ(inferOnnx("Conv", {x, w}), "f32[batch,6,24,24]");
  EXPECT_EQ(inferOnnx("Conv", {x, w}, {intsAttr("strides", {2, 2})}),
            "f32[batch,6,12,12]");
  EXPECT_EQ(inferOnnx("Conv", {x, w}, {intsAttr("dilations", {2, 2})}),
            "f32[batch,6,20,20]");
  EXPECT_EQ(inferOnnx("Conv", {x, w},
                      {stringAttr("auto_pad", "SAME_UPPER"),
                       intsAttr("strides", {3, 3})}),
            "f32[batch,6,10,10]");
  EXPECT_EQ(inferOnnx("Conv", {input("f32[1,3,h,9]"), input("f32[4,3,3,3]")}),
            "f32[1,4,?,7]");
  EXPECT_EQ(inferOnnx("Conv", {input("f32[1,3,16]"), input("f32[4,3,3]")}),
            "f32[1,4,14]");
  EXPECT_TRUE(contains(
      inferOnnx("Conv", {input("f32[1,4,8,8]"), input("f32[6,3,3,3]")}),
      "input has 4 channels but weights"));
  EXPECT_TRUE(
      contains(inferOnnx("Conv", {input("f32[1,4,8,8]"), input("f32[6,2,3,3]")},
                         {intAttr("group", 4)}),
               "input has 4 channels"));
  EXPECT_TRUE(contains(
      inferOnnx("Conv", {input("f32[1,3,2,2]"), input("f32[6,3,3,3]")}),
      "does not fit spatial dimension 0"));
  EXPECT_TRUE(contains(inferOnnx("Conv", {x, w, input("f32[5]")}),
                       "bias f32[5] does not match"));
  EXPECT_TRUE(contains(inferOnnx("Conv", {x, w}, {intsAttr("pads", {1, 1})}),
                       "pads has 2 values, expected 4"));
}

TEST_F(ShapeInferenceTest, PoolingShapes) {
  Value *x = input("f32[batch,6,28,28]");
  EXPECT_EQ(
      infer(onnxOp("MaxPool"), {x}, 2,
            {intsAttr("kernel_shape", {2, 2}), intsAttr("strides", {2, 2})}),
      "f32[batch,6,14,14] i64[batch,6,14,14]");
  EXPECT_EQ(inferOnnx("MaxPool", {input("f32[1,1,5,5]")},
                      {intsAttr("kernel_shape", {2, 2}),
                       intsAttr("strides", {2, 2}), intAttr("ceil_mode", 1)}),
            "f32[1,1,3,3]");
  EXPECT_EQ(inferOnnx("MaxPool", {input("f32[1,1,5,5]")},
                      {intsAttr("kernel_shape", {2, 2}),
                       intsAttr("strides", {2, 2})}),
            "f32[1,1,2,2]");
  EXPECT_EQ(inferOnnx("AveragePool", {x},
                      {intsAttr("kernel_shape", {3, 3}),
                       intsAttr("pads", {1, 1, 1, 1})}),
            "f32[batch,6,28,28]");
  EXPECT_EQ(inferOnnx("GlobalAveragePool", {x}), "f32[batch,6,1,1]");
  EXPECT_TRUE(contains(inferOnnx("MaxPool", {x}),
                       "missing required attribute 'kernel_shape'"));
  EXPECT_TRUE(contains(inferOnnx("MaxPool", {input("f32[2,3]")},
                                 {intsAttr("kernel_shape", {2})}),
                       "rank >= 3"));
}

//===----------------------------------------------------------------------===//
// Normalization, softmax, dropout, losses
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, BatchNormalizationVersions) {
  Value *x = input("f32[batch,16,8,8]");
  Value *c = input("f32[16]");
  EXPECT_EQ(infer(onnxOp("BatchNormalization"), {x, c, c, c, c}, 3,
                  {intAttr("training_mode", 1)}),
            "f32[batch,16,8,8] f32[16] f32[16]");
  EXPECT_EQ(infer(onnxOp("BatchNormalization"), {x, c, c, c, c}, 1),
            "f32[batch,16,8,8]");
  EXPECT_TRUE(contains(infer(onnxOp("BatchNormalization"), {x, c, c, c, c}, 5),
                       "expected 1 to 3 outputs, got 5"));
  module.opsetImports[""] = 13;
  EXPECT_EQ(infer(onnxOp("BatchNormalization"), {x, c, c, c, c}, 5),
            "f32[batch,16,8,8] f32[16] f32[16] f32[16] f32[16]");
  EXPECT_TRUE(contains(infer(onnxOp("BatchNormalization"), {x, c, c, c, c}, 1,
                             {intAttr("training_mode", 1)}),
                       "unknown attribute 'training_mode'"));
  EXPECT_TRUE(contains(
      infer(onnxOp("BatchNormalization"), {x, input("f32[8]"), c, c, c}, 1),
      "input 1 f32[8] does not match the [16] channels"));
}

TEST_F(ShapeInferenceTest, LayerNormalization) {
  Value *x = input("f32[batch,seq,128]");
  Value *scale = input("f32[128]");
  EXPECT_EQ(infer(onnxOp("LayerNormalization"), {x, scale, scale}, 3),
            "f32[batch,seq,128] f32[batch,seq,1] f32[batch,seq,1]");
  EXPECT_EQ(infer(onnxOp("LayerNormalization"), {x, input("f32[seq,128]")}, 2,
                  {intAttr("axis", 1)}),
            "f32[batch,seq,128] f32[batch,1,1]");
  EXPECT_EQ(infer(onnxOp("LayerNormalization"),
                  {input("f16[4,8]"), input("f16[8]")}, 3),
            "f16[4,8] f32[4,1] f32[4,1]");
  EXPECT_TRUE(contains(
      infer(onnxOp("LayerNormalization"), {x, scale}, 1, {intAttr("axis", 3)}),
      "axis 3 is out of range for rank 3"));
  EXPECT_TRUE(
      contains(infer(onnxOp("LayerNormalization"), {x, input("f32[64]")}, 1),
               "does not broadcast to the normalized shape [128]"));
}

TEST_F(ShapeInferenceTest, SoftmaxDropoutAndLosses) {
  EXPECT_EQ(inferOnnx("Softmax", {input("f32[b,4,s,s]")}), "f32[b,4,s,s]");
  EXPECT_TRUE(
      contains(inferOnnx("Softmax", {input("f32[2,3]")}, {intAttr("axis", 2)}),
               "axis 2 is out of range for rank 2"));
  EXPECT_EQ(inferOnnx("LogSoftmax", {input("f32[2,3]")}, {intAttr("axis", -2)}),
            "f32[2,3]");

  Value *x = input("f32[batch,64,128]");
  EXPECT_EQ(infer(onnxOp("Dropout"),
                  {x, f32s({0.1f}, {}), graph().addInput(ty("bool[]"), "mode")},
                  2),
            "f32[batch,64,128] bool[batch,64,128]");
  EXPECT_EQ(infer(onnxOp("Dropout"), {x}, 1, {intAttr("seed", 3)}),
            "f32[batch,64,128]");
  EXPECT_TRUE(contains(infer(onnxOp("Dropout"), {x, nullptr, x}, 1),
                       "(training_mode) has dtype f32"));

  Value *logits = input("f32[batch,10]");
  Value *labels = input("i64[batch]");
  EXPECT_EQ(infer(onnxOp("SoftmaxCrossEntropyLoss"), {logits, labels}, 2),
            "f32[] f32[batch,10]");
  EXPECT_EQ(infer(onnxOp("SoftmaxCrossEntropyLoss"), {logits, labels}, 1,
                  {stringAttr("reduction", "none")}),
            "f32[batch]");
  EXPECT_EQ(
      infer(onnxOp("SoftmaxCrossEntropyLoss"),
            {input("f32[2,5,7]"), input("i32[2,7]"), input("f32[5]")}, 1,
            {stringAttr("reduction", "none"), intAttr("ignore_index", -100)}),
      "f32[2,7]");
  EXPECT_TRUE(contains(infer(onnxOp("SoftmaxCrossEntropyLoss"),
                             {input("f32[4,10]"), input("i64[5]")}),
                       "labels i64[5] do not match scores f32[4,10]"));
  EXPECT_TRUE(contains(
      infer(onnxOp("SoftmaxCrossEntropyLoss"), {logits, input("f32[batch]")}),
      "(labels) has dtype f32"));
  EXPECT_TRUE(
      contains(infer(onnxOp("SoftmaxCrossEntropyLoss"), {logits, labels}, 1,
                     {stringAttr("reduction", "avg")}),
               "reduction must be none, sum or mean"));
  EXPECT_EQ(inferOnnx("NegativeLogLikelihoodLoss",
                      {input("f32[n,3]"), input("i64[n]")},
                      {stringAttr("reduction", "sum")}),
            "f32[]");
}

//===----------------------------------------------------------------------===//
// Reshape family and shape values
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, ReshapeWithConstantShapes) {
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[4,6]"), i64s({2, -1})}),
            "f32[2,12]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[batch,128,64]"), i64s({0, -1})}),
            "f32[batch,8192]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[b,s,256]"), i64s({0, 0, 4, -1})}),
            "f32[b,s,4,64]");
  // -1 absorbs the one symbol that does not cancel.
  EXPECT_EQ(
      inferOnnx("Reshape", {input("f32[batch,64,512]"), i64s({-1, 32768})}),
      "f32[batch,32768]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[batch,64,512]"), i64s({-1, 256})}),
            "f32[?,256]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[?,3]"), i64s({0, 3, 1})}),
            "f32[?,3,1]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[?,3]"), i64s({-1})}), "f32[?]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[3,4]"), input("i64[3]")}),
            "f32[?,?,?]");
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[3,4]"), input("i64[?]")}),
            "f32[*]");
  EXPECT_TRUE(
      contains(inferOnnx("Reshape", {input("f32[4,6]"), i64s({-1, -1})}),
               "more than one -1"));
  EXPECT_TRUE(contains(inferOnnx("Reshape", {input("f32[4,6]"), i64s({5, -1})}),
                       "24 elements are not divisible by 5"));
  EXPECT_TRUE(contains(inferOnnx("Reshape", {input("f32[4,6]"), i64s({5, 5})}),
                       "element counts differ"));
  EXPECT_TRUE(
      contains(inferOnnx("Reshape", {input("f32[4,6]"), i64s({0, 0, 0})}),
               "shape element 2 is 0 (copy)"));
  EXPECT_TRUE(contains(inferOnnx("Reshape", {input("f32[4,6]"), i64s({-2})}),
                       "invalid shape element -2"));
  EXPECT_EQ(inferOnnx("Reshape", {input("f32[0,6]"), i64s({0, 3, 2})},
                      {intAttr("allowzero", 1)}),
            "f32[0,3,2]");
}

TEST_F(ShapeInferenceTest, ReshapeThroughShapeSubgraph) {
  // The pattern torch exports for attention heads: the target shape is
  // built from Shape(x) so the symbolic batch survives.
  Value *x = input("f32[batch,64,384]");
  Value *shape = build1(onnxOp("Shape"), {x}, {intAttr("start", 0)});
  EXPECT_EQ(shape->getType().str(), "i64[3]");
  Value *first = build1(onnxOp("Gather"), {shape, i64s({0}, true)});
  EXPECT_EQ(first->getType().str(), "i64[]");
  Value *unsqueezed = build1(onnxOp("Unsqueeze"), {first, i64s({0})});
  Value *target =
      build1(onnxOp("Concat"), {unsqueezed, i64s({-1}), i64s({4, 32})},
             {intAttr("axis", 0)});
  EXPECT_EQ(target->getType().str(), "i64[4]");
  std::optional<ops::SymIntVector> values = ops::getShapeValue(*target);
  ASSERT_TRUE(values.has_value());
  ASSERT_EQ(values->size(), 4u);
  EXPECT_TRUE((*values)[0].isSymbol());
  EXPECT_EQ((*values)[0].getSymbol(), "batch");
  Value *heads = build1(onnxOp("Reshape"), {x, target});
  EXPECT_EQ(heads->getType().str(), "f32[batch,192,4,32]");

  // The same through ConcatTraining and a Slice of the shape.
  Value *tail = build1(onnxOp("Slice"), {shape, i64s({1}), i64s({3})});
  auto concat = build(msOp("ConcatTraining"), {unsqueezed, tail}, 2,
                      {intAttr("axis", 0)});
  EXPECT_EQ(concat[1]->getType().str(), "i64[2]");
  EXPECT_EQ(build1(onnxOp("Reshape"), {input("f32[batch,24576]"), concat[0]})
                ->getType()
                .str(),
            "f32[batch,64,384]");

  // Size(x) / Size(y) computed at compile time.
  Value *size = build1(onnxOp("Size"), {input("f32[2,3]")});
  EXPECT_EQ(size->getType().str(), "i64[]");
  EXPECT_EQ(ops::getIntValues(*size), (std::vector<int64_t>{6}));
  Value *ratio = build1(onnxOp("Div"), {size, i64s({3}, true)});
  EXPECT_EQ(ops::getIntValues(*ratio), (std::vector<int64_t>{2}));
}

TEST_F(ShapeInferenceTest, ViewsSqueezeUnsqueezeFlattenIdentity) {
  EXPECT_EQ(inferOnnx("Identity", {input("f32[b,2]")}), "f32[b,2]");
  EXPECT_EQ(inferOnnx("Flatten", {input("f32[batch,3,4]")}), "f32[batch,12]");
  EXPECT_EQ(
      inferOnnx("Flatten", {input("f32[batch,3,4]")}, {intAttr("axis", 0)}),
      "f32[1,?]");
  EXPECT_EQ(inferOnnx("Flatten", {input("f32[2,3,4]")}, {intAttr("axis", -1)}),
            "f32[6,4]");
  EXPECT_EQ(inferOnnx("Flatten", {input("f32[2,3,4]")}, {intAttr("axis", 3)}),
            "f32[24,1]");
  EXPECT_TRUE(
      contains(inferOnnx("Flatten", {input("f32[2,3]")}, {intAttr("axis", 3)}),
               "axis 3 is out of range for rank 2"));

  EXPECT_EQ(inferOnnx("Squeeze", {input("f32[1,b,1,4]"), i64s({0, 2})}),
            "f32[b,4]");
  EXPECT_EQ(inferOnnx("Squeeze", {input("f32[1,3,1]")}), "f32[3]");
  EXPECT_EQ(inferOnnx("Squeeze", {input("f32[1,b]")}), "f32[*]");
  EXPECT_TRUE(contains(inferOnnx("Squeeze", {input("f32[2,3]"), i64s({1})}),
                       "cannot squeeze axis 1 of extent 3"));
  EXPECT_TRUE(contains(inferOnnx("Squeeze", {input("f32[1,3]"), i64s({2})}),
                       "axes 2 is out of range for rank 2"));
  EXPECT_EQ(inferOnnx("Unsqueeze", {input("f32[3]"), i64s({0, -1})}),
            "f32[1,3,1]");
  EXPECT_EQ(inferOnnx("Unsqueeze", {input("i64[]"), i64s({0})}), "i64[1]");
  EXPECT_EQ(inferOnnx("Unsqueeze", {input("f32[b,4]"), input("i64[2]")}),
            "f32[?,?,?,?]");
  EXPECT_TRUE(contains(inferOnnx("Unsqueeze", {input("f32[3]"), i64s({1, 1})}),
                       "axes contains axis 1 twice"));

  // Opset 11 takes the axes as an attribute.
  module.opsetImports[""] = 11;
  EXPECT_EQ(inferOnnx("Unsqueeze", {input("f32[3]")}, {intsAttr("axes", {1})}),
            "f32[3,1]");
  EXPECT_EQ(inferOnnx("Squeeze", {input("f32[3,1]")}, {intsAttr("axes", {1})}),
            "f32[3]");
  EXPECT_TRUE(contains(inferOnnx("Unsqueeze", {input("f32[3]"), i64s({1})}),
                       "expected 1 input, got 2"));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, TransposeConcatSlice) {
  EXPECT_EQ(inferOnnx("Transpose", {input("f32[b,s,h,d]")},
                      {intsAttr("perm", {0, 2, 1, 3})}),
            "f32[b,h,s,d]");
  EXPECT_EQ(inferOnnx("Transpose", {input("f32[2,3,4]")}), "f32[4,3,2]");
  EXPECT_TRUE(contains(
      inferOnnx("Transpose", {input("f32[2,3]")}, {intsAttr("perm", {0, 0})}),
      "perm is not a permutation"));

  EXPECT_EQ(inferOnnx("Concat", {input("f32[2,3]"), input("f32[2,5]")},
                      {intAttr("axis", 1)}),
            "f32[2,8]");
  EXPECT_EQ(inferOnnx("Concat", {input("f32[b,3]"), input("f32[?,3]")},
                      {intAttr("axis", -1)}),
            "f32[b,6]");
  EXPECT_EQ(inferOnnx("Concat", {input("f32[s,3]"), input("f32[2,3]")},
                      {intAttr("axis", 0)}),
            "f32[?,3]");
  EXPECT_TRUE(
      contains(inferOnnx("Concat", {input("f32[2,3]"), input("f32[4,5]")},
                         {intAttr("axis", 1)}),
               "dimension 0 of input 1 is [4]"));
  EXPECT_TRUE(
      contains(inferOnnx("Concat", {input("f32[2,3]"), input("f32[2,3,1]")},
                         {intAttr("axis", 0)}),
               "input 1 has rank 3 but input 0 has rank 2"));
  EXPECT_TRUE(
      contains(inferOnnx("Concat", {input("f32[2,3]")}, {intAttr("axis", 2)}),
               "axis 2 is out of range for rank 2"));

  Value *x = input("f32[batch,64,128]");
  EXPECT_EQ(inferOnnx("Slice", {x, i64s({0}), i64s({32}), i64s({1})}),
            "f32[batch,32,128]");
  EXPECT_EQ(inferOnnx("Slice", {x, i64s({-10}), i64s({INT64_MAX}), i64s({2})}),
            "f32[batch,64,10]");
  EXPECT_EQ(inferOnnx("Slice", {x, i64s({0, 1}), i64s({INT64_MAX, 64}),
                                i64s({0, 1}), i64s({1, 2})}),
            "f32[batch,32,128]");
  EXPECT_EQ(inferOnnx("Slice",
                      {x, i64s({5}), i64s({INT64_MIN}), i64s({2}), i64s({-1})}),
            "f32[batch,64,6]");
  EXPECT_EQ(inferOnnx("Slice", {x, i64s({2}), i64s({3}), i64s({0})}),
            "f32[?,64,128]");
  EXPECT_EQ(inferOnnx("Slice", {x, input("i64[1]"), i64s({3}), i64s({1})}),
            "f32[batch,?,128]");
  EXPECT_EQ(inferOnnx("Slice", {x, input("i64[1]"), i64s({3})}), "f32[?,?,?]");
  EXPECT_TRUE(contains(
      inferOnnx("Slice", {x, i64s({0}), i64s({1}), i64s({1}), i64s({0})}),
      "slice step must not be 0"));
  EXPECT_TRUE(contains(inferOnnx("Slice", {x, i64s({0, 0}), i64s({1})}),
                       "must have the same length"));
}

TEST_F(ShapeInferenceTest, SplitVersions) {
  Value *x = input("f32[batch,64,384]");
  EXPECT_EQ(infer(onnxOp("Split"), {x, i64s({128, 128, 128})}, 3,
                  {intAttr("axis", 2)}),
            "f32[batch,64,128] f32[batch,64,128] f32[batch,64,128]");
  EXPECT_EQ(infer(onnxOp("Split"), {x}, 2, {intAttr("axis", -1)}),
            "f32[batch,64,192] f32[batch,64,192]");
  EXPECT_EQ(
      infer(onnxOp("Split"), {x, i64s({100, 284})}, 2, {intAttr("axis", 2)}),
      "f32[batch,64,100] f32[batch,64,284]");
  EXPECT_EQ(infer(onnxOp("Split"), {x}, 2), "f32[?,64,384] f32[?,64,384]");
  EXPECT_TRUE(contains(
      infer(onnxOp("Split"), {x, i64s({100, 200})}, 2, {intAttr("axis", 2)}),
      "split sizes sum to 300 but axis 2 has extent 384"));
  EXPECT_TRUE(contains(infer(onnxOp("Split"), {input("f32[7]")}, 2),
                       "not divisible into 2 equal outputs"));
  EXPECT_TRUE(contains(
      infer(onnxOp("Split"), {input("f32[6]")}, 2, {intAttr("num_outputs", 2)}),
      "unknown attribute 'num_outputs'"));
  EXPECT_TRUE(contains(infer(onnxOp("Split"), {input("f32[6]"), i64s({6})}, 2),
                       "split has 1 values but the node has 2 outputs"));

  module.opsetImports[""] = 18;
  EXPECT_EQ(
      infer(onnxOp("Split"), {input("f32[7]")}, 3, {intAttr("num_outputs", 3)}),
      "f32[3] f32[3] f32[1]");
  EXPECT_TRUE(contains(
      infer(onnxOp("Split"), {input("f32[7]")}, 2, {intAttr("num_outputs", 3)}),
      "num_outputs is 3 but the node has 2 outputs"));

  module.opsetImports[""] = 11;
  EXPECT_EQ(infer(onnxOp("Split"), {input("f32[6,2]")}, 2,
                  {intsAttr("split", {2, 4})}),
            "f32[2,2] f32[4,2]");
  EXPECT_TRUE(contains(infer(onnxOp("Split"), {input("f32[6]"), i64s({6})}, 1),
                       "expected 1 input, got 2"));
}

TEST_F(ShapeInferenceTest, ExpandTileTriluPad) {
  EXPECT_EQ(inferOnnx("Expand", {input("f32[3,1]"), i64s({2, 1, 4})}),
            "f32[2,3,4]");
  Value *big = input("f32[batch,16,8,8]");
  Value *shape = build1(onnxOp("Shape"), {big});
  EXPECT_EQ(inferOnnx("Expand", {input("f32[batch,16,1,1]"), shape}),
            "f32[batch,16,8,8]");
  EXPECT_EQ(inferOnnx("Expand", {input("f32[3]"), input("i64[2]")}),
            "f32[?,?]");
  EXPECT_TRUE(contains(inferOnnx("Expand", {input("f32[3]"), i64s({4})}),
                       "incompatible broadcast: cannot expand f32[3] to [4]"));
  EXPECT_EQ(inferOnnx("Tile", {input("f32[b,3]"), i64s({1, 4})}), "f32[b,12]");
  EXPECT_EQ(inferOnnx("Tile", {input("f32[b,3]"), i64s({2, 1})}), "f32[?,3]");
  EXPECT_TRUE(contains(inferOnnx("Tile", {input("f32[2,3]"), i64s({2})}),
                       "repeats has 1 values but the input has rank 2"));
  EXPECT_EQ(inferOnnx("Trilu", {input("f32[b,4,4]"), i64s({1}, true)},
                      {intAttr("upper", 0)}),
            "f32[b,4,4]");
  EXPECT_TRUE(contains(inferOnnx("Trilu", {input("f32[4]")}), "rank >= 2"));
  EXPECT_EQ(
      inferOnnx("Pad", {input("f32[1,3,4,4]"), i64s({0, 0, 1, 2, 0, 0, 1, 2})}),
      "f32[1,3,6,8]");
  // ONNX Runtime's Pad gradient crops by Pad(dY, Neg(pads)): the negated
  // constants are known, so the batch symbol survives the crop.
  Value *pads = i64s({0, 1, 0, 2});
  Value *negPads = build1(onnxOp("Neg"), {pads});
  EXPECT_EQ(ops::getIntValues(*negPads), (std::vector<int64_t>{0, -1, 0, -2}));
  EXPECT_EQ(inferOnnx("Pad", {input("f32[batch,11]"), negPads}),
            "f32[batch,8]");
  // A negated symbol is no extent: unknown, not the symbol.
  Value *negShape =
      build1(onnxOp("Neg"), {build1(onnxOp("Shape"), {input("f32[batch]")})});
  std::optional<ops::SymIntVector> negValues = ops::getShapeValue(*negShape);
  ASSERT_TRUE(negValues.has_value());
  EXPECT_TRUE((*negValues)[0].isUnknown());
}

TEST_F(ShapeInferenceTest, AttributeValuesAddedInLaterOpsets) {
  // Pad's "wrap" mode exists from opset 19, the scatters' "max" and "min"
  // reductions from 18: an older opset refuses them and says which.
  auto pad = [&](llvm::StringRef mode) {
    return inferOnnx("Pad", {input("f32[2,3]"), i64s({0, 1, 0, 1})},
                     {stringAttr("mode", mode)});
  };
  module.opsetImports[""] = 18;
  EXPECT_EQ(pad("reflect"), "f32[2,5]");
  EXPECT_TRUE(contains(pad("wrap"), "mode 'wrap' is not defined at this "
                                    "opset (it defines 'constant', "
                                    "'reflect', 'edge'; 'wrap' needs opset "
                                    "19)"));
  module.opsetImports[""] = 19;
  EXPECT_EQ(pad("wrap"), "f32[2,5]");
  EXPECT_TRUE(contains(pad("mirror"), "mode 'mirror' is not defined"));
  auto scatter = [&](llvm::StringRef op, llvm::StringRef reduction) {
    return inferOnnx(op,
                     {input("f32[4,3]"), input("i64[2,3]"), input("f32[2,3]")},
                     {stringAttr("reduction", reduction)});
  };
  module.opsetImports[""] = 16;
  EXPECT_EQ(scatter("ScatterElements", "add"), "f32[4,3]");
  EXPECT_TRUE(contains(scatter("ScatterElements", "max"),
                       "'max' and 'min' need opset 18"));
  EXPECT_TRUE(
      contains(scatter("ScatterND", "min"), "'max' and 'min' need opset 18"));
  module.opsetImports[""] = 18;
  EXPECT_EQ(scatter("ScatterElements", "max"), "f32[4,3]");
  EXPECT_EQ(inferOnnx("ScatterND",
                      {input("f32[4,3]"), input("i64[2,1]"), input("f32[2,3]")},
                      {stringAttr("reduction", "min")}),
            "f32[4,3]");
}

TEST_F(ShapeInferenceTest, GathersShapesAndConstants) {
  EXPECT_EQ(
      inferOnnx("Gather", {input("f32[512,128]"), input("i64[batch,64]")}),
      "f32[batch,64,128]");
  EXPECT_EQ(inferOnnx("Gather", {input("f32[4,5,6]"), input("i32[2]")},
                      {intAttr("axis", 1)}),
            "f32[4,2,6]");
  EXPECT_EQ(inferOnnx("Gather", {input("i64[3]"), i64s({0}, true)}), "i64[]");
  EXPECT_TRUE(contains(inferOnnx("Gather", {input("f32[4]"), input("f32[2]")}),
                       "(indices) has dtype f32"));
  EXPECT_TRUE(contains(inferOnnx("Gather", {input("f32[4]"), input("i64[2]")},
                                 {intAttr("axis", 1)}),
                       "axis 1 is out of range for rank 1"));
  EXPECT_EQ(inferOnnx("GatherElements", {input("f32[n,10]"), input("i64[n,1]")},
                      {intAttr("axis", 1)}),
            "f32[n,1]");
  EXPECT_TRUE(contains(
      inferOnnx("GatherElements", {input("f32[4,10]"), input("i64[4]")}),
      "indices have rank 1 but data has rank 2"));

  EXPECT_EQ(inferOnnx("Shape", {input("f32[b,3,4]")}), "i64[3]");
  EXPECT_EQ(inferOnnx("Shape", {input("f32[b,3,4]")},
                      {intAttr("start", 1), intAttr("end", -1)}),
            "i64[1]");
  EXPECT_EQ(inferOnnx("Shape", {input("f32[*]")}), "i64[?]");
  EXPECT_EQ(inferOnnx("Size", {input("f32[b,3]")}), "i64[]");
  EXPECT_EQ(inferOnnx("ConstantOfShape", {i64s({2, 3})}), "f32[2,3]");
  TensorData one = TensorData::fromValues<int64_t>(DType::I64, {1}, {1});
  EXPECT_EQ(inferOnnx("ConstantOfShape",
                      {build1(onnxOp("Shape"), {input("f32[b,5]")})},
                      {{"value", Attribute::getTensor(one)}}),
            "i64[b,5]");
  EXPECT_EQ(
      inferOnnx("Range", {i64s({0}, true), i64s({10}, true), i64s({3}, true)}),
      "i64[4]");
  EXPECT_EQ(inferOnnx("Range",
                      {f32s({1.0f}, {}), f32s({0.0f}, {}), f32s({-0.25f}, {})}),
            "f32[4]");
  EXPECT_EQ(
      inferOnnx("Range", {input("i64[]"), i64s({10}, true), i64s({1}, true)}),
      "i64[?]");
  EXPECT_EQ(inferOnnx("OneHot", {input("i64[b,3]"), i64s({10}, true),
                                 f32s({0.0f, 1.0f}, {2})}),
            "f32[b,3,10]");
  EXPECT_EQ(
      inferOnnx("OneHot",
                {input("i64[b]"), i64s({10}, true), f32s({0.0f, 1.0f}, {2})},
                {intAttr("axis", 0)}),
      "f32[10,b]");
  EXPECT_EQ(inferOnnx("ArgMax", {input("f32[b,10]")}, {intAttr("axis", 1)}),
            "i64[b,1]");
  EXPECT_EQ(inferOnnx("ArgMax", {input("f32[b,10]")},
                      {intAttr("axis", -1), intAttr("keepdims", 0)}),
            "i64[b]");
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, ReduceSumAxesMovedToAnInputAtOpset13) {
  Value *x = input("f32[batch,64,128]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x, i64s({0, 1})}, {intAttr("keepdims", 0)}),
            "f32[128]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x, i64s({-1})}), "f32[batch,64,1]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x}), "f32[1,1,1]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x}, {intAttr("keepdims", 0)}), "f32[]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x, i64s({})},
                      {intAttr("noop_with_empty_axes", 1)}),
            "f32[batch,64,128]");
  EXPECT_EQ(inferOnnx("ReduceSum", {x, input("i64[1]")}), "f32[?,?,?]");
  EXPECT_EQ(
      inferOnnx("ReduceSum", {x, input("i64[1]")}, {intAttr("keepdims", 0)}),
      "f32[?,?]");
  EXPECT_TRUE(contains(inferOnnx("ReduceSum", {x, i64s({3})}),
                       "axes 3 is out of range for rank 3"));
  EXPECT_TRUE(contains(inferOnnx("ReduceSum", {x}, {intsAttr("axes", {0})}),
                       "unknown attribute 'axes'"));

  module.opsetImports[""] = 11;
  EXPECT_EQ(inferOnnx("ReduceSum", {x},
                      {intsAttr("axes", {0, 1}), intAttr("keepdims", 0)}),
            "f32[128]");
  EXPECT_TRUE(contains(inferOnnx("ReduceSum", {x, i64s({0})}),
                       "expected 1 input, got 2"));
}

TEST_F(ShapeInferenceTest, ReduceMeanAxesMovedToAnInputAtOpset18) {
  Value *x = input("f32[batch,10]");
  module.opsetImports[""] = 13;
  EXPECT_EQ(inferOnnx("ReduceMean", {x}, {intsAttr("axes", {1})}),
            "f32[batch,1]");
  EXPECT_EQ(inferOnnx("ReduceMean", {x}, {intAttr("keepdims", 0)}), "f32[]");
  EXPECT_TRUE(contains(inferOnnx("ReduceMean", {x, i64s({1})}),
                       "expected 1 input, got 2"));
  module.opsetImports[""] = 18;
  EXPECT_EQ(inferOnnx("ReduceMean", {x, i64s({1})}, {intAttr("keepdims", 0)}),
            "f32[batch]");
  EXPECT_TRUE(contains(inferOnnx("ReduceMean", {x}, {intsAttr("axes", {1})}),
                       "unknown attribute 'axes'"));
  EXPECT_EQ(inferOnnx("ReduceMax", {x, i64s({0})}), "f32[1,10]");
  EXPECT_EQ(inferOnnx("ReduceSumSquare", {x}), "f32[1,1]");
}

} // namespace
