//===- CudaCoreOpsParityTest.cpp - Core math ops on CUDA vs the CPU -------===//
//
// Per-op parity of the CUDA backend's core math entries against the CPU
// backend: MatMul, Gemm and com.microsoft FusedMatMul (cuBLASLt); the
// elementwise unary and broadcasting binary ops, the activations and their
// gradients (CudaElementwiseDispatch.cpp); Softmax, LogSoftmax and their
// _13 gradients; LayerNormalization, SimplifiedLayerNormalization,
// RMSNormalization and their gradients; Gather and fp32 GatherGrad; Cast;
// Dropout, BitmaskDropout and their gradients (the masks bit for bit: Philox
// keyed by the same seed, stream id and step); AdamWOptimizer, SGDOptimizerV2
// and InPlaceAccumulatorV2 (the operands they write compared too). Each
// case is a one-node module on fresh random inputs (seeds in the case's
// name), with odd sizes (1, 7, 1023 elements) and broadcasting shapes, in
// f32 and, where the CUDA kernel takes them, f16 and bf16; run on the CPU
// backend and on the CUDA backend eagerly and planned, the results compared
// with OpParityHarness.h's per-dtype tolerance (a GEMM's scaled by the
// square root of its reduction length). Without a GPU the CUDA half skips
// with the probe's reason; the CPU half (the module verifies, the CPU
// backend runs it to finite results, the CUDA kernel table accepts it and
// a CUDA plan is made) runs in every build.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"

#include "tests/unit/OpParityHarness.h"
#include "tests/unit/OpTestHelpers.h"

#include "gtest/gtest.h"

#include <cmath>
#include <string>
#include <vector>

using namespace gmopt;
using test::Agreement;
using test::bools;
using test::CaseMaker;
using test::floatAttr;
using test::floats;
using test::int64s;
using test::intAttr;
using test::intsAttr;
using test::OpCase;
using test::shapeText;
using test::stringAttr;

namespace {

using Shape = std::vector<int64_t>;

const AllocationMode kBothModes[] = {AllocationMode::Eager,
                                     AllocationMode::Planned};

/// Result \p index of \p c on the CPU backend (the inputs of a gradient
/// case: a mask, saved statistics, a softmax output).
TensorData cpuResult(const OpCase &c, unsigned index) {
  auto results = test::runOpCase(c, /*onCuda=*/false);
  EXPECT_TRUE(bool(results))
      << c.what << ": " << llvm::toString(results.takeError());
  return results && index < results->size() ? (*results)[index] : TensorData();
}

/// A GEMM's tolerance scale for reduction length \p k: fp32 sums of k
/// products in another order differ by about sqrt(k) roundings.
double gemmScale(int64_t k) { return std::sqrt(static_cast<double>(k)); }

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

std::vector<OpCase> matMulCases(DType dtype) {
  CaseMaker m(dtype, 100 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  struct Product {
    Shape a, b;
    int64_t k;
  };
  for (const Product &p : std::vector<Product>{{{7, 13}, {13, 5}, 13},
                                               {{1, 1}, {1, 1}, 1},
                                               {{1, 1023}, {1023, 3}, 1023},
                                               {{2, 3, 7, 9}, {9, 4}, 9},
                                               {{2, 3, 6, 5}, {2, 3, 5, 7}, 5},
                                               {{3, 1, 6, 5}, {2, 5, 7}, 5},
                                               {{2, 1, 4, 3}, {3, 3, 1}, 3},
                                               {{9}, {9, 4}, 9},
                                               {{3, 8}, {8}, 8}}) {
    OpCase c = m.make("MatMul " + shapeText(p.a) + "x" + shapeText(p.b), "",
                      "MatMul", {m.rnd(p.a), m.rnd(p.b)});
    c.toleranceScale = gemmScale(p.k);
    cases.push_back(c);
  }
  struct GemmForm {
    bool transA, transB;
    Shape c;
    float alpha, beta;
  };
  for (const GemmForm &g : std::vector<GemmForm>{{false, false, {5}, 1, 1},
                                                 {true, false, {7, 1}, 0.5f, 2},
                                                 {false, true, {}, 1, -1},
                                                 {true, true, {7, 5}, 2, 0.25f},
                                                 {false, false, {}, 1, 0}}) {
    Shape a = g.transA ? Shape{11, 7} : Shape{7, 11};
    Shape b = g.transB ? Shape{5, 11} : Shape{11, 5};
    std::vector<TensorData> inputs = {m.rnd(a), m.rnd(b)};
    std::string what = "Gemm transA " + std::to_string(g.transA) + " transB " +
                       std::to_string(g.transB);
    if (g.beta != 0) {
      inputs.push_back(m.rnd(g.c));
      what += " C " + shapeText(g.c);
    }
    OpCase c = m.make(what, "", "Gemm", inputs,
                      {intAttr("transA", g.transA), intAttr("transB", g.transB),
                       floatAttr("alpha", g.alpha), floatAttr("beta", g.beta)});
    c.toleranceScale = gemmScale(11) * 2;
    cases.push_back(c);
  }
  OpCase fused = m.make(
      "FusedMatMul transA transB alpha batched", kMsDomain, "FusedMatMul",
      {m.rnd({2, 9, 6}), m.rnd({2, 4, 9})},
      {intAttr("transA", 1), intAttr("transB", 1), floatAttr("alpha", 0.125f)});
  fused.toleranceScale = gemmScale(9);
  cases.push_back(fused);
  // One side's batch dimensions broadcast over a plain matrix.
  OpCase broadcast = m.make("FusedMatMul transB batch over a matrix", kMsDomain,
                            "FusedMatMul", {m.rnd({3, 7, 33}), m.rnd({5, 33})},
                            {intAttr("transB", 1), floatAttr("alpha", 2)});
  broadcast.toleranceScale = gemmScale(33) * 2;
  cases.push_back(broadcast);
  // Batches broadcast against each other: several strided-batched calls.
  OpCase crossed = m.make(
      "FusedMatMul transA batches broadcast against each other", kMsDomain,
      "FusedMatMul", {m.rnd({1, 4, 9, 6}), m.rnd({3, 1, 9, 5})},
      {intAttr("transA", 1), floatAttr("alpha", 0.5f)});
  crossed.toleranceScale = gemmScale(9);
  cases.push_back(crossed);
  return cases;
}

//===----------------------------------------------------------------------===//
// Elementwise ops, activations and their gradients
//===----------------------------------------------------------------------===//

std::vector<OpCase> elementwiseCases(DType dtype) {
  CaseMaker m(dtype, 200 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  // Unary ops on their domain, at odd sizes.
  struct Unary {
    const char *domain, *op;
    float low, high;
  };
  for (const Unary &u :
       std::vector<Unary>{{"", "Relu", -1, 1},
                          {"", "Neg", -1, 1},
                          {"", "Abs", -1, 1},
                          {"", "Exp", -3, 3},
                          {"", "Log", 0.05f, 4},
                          {"", "Sqrt", 0, 4},
                          {"", "Reciprocal", 0.5f, 2},
                          {"", "Tanh", -3, 3},
                          {"", "Sigmoid", -6, 6},
                          {"", "Erf", -2, 2},
                          {kMsDomain.data(), "Gelu", -3, 3},
                          {kMsDomain.data(), "FastGelu", -3, 3},
                          {kMsDomain.data(), "QuickGelu", -3, 3}})
    for (Shape shape : {Shape{1}, Shape{7}, Shape{1023}})
      cases.push_back(m.make(std::string(u.op) + " " + shapeText(shape),
                             u.domain, u.op, {m.rnd(shape, u.low, u.high)}));
  for (const char *approximate : {"none", "tanh"}) {
    OpCase gelu = m.make(
        std::string("Gelu (opset 20) approximate ") + approximate, "", "Gelu",
        {m.rnd({3, 41}, -3, 3)}, {stringAttr("approximate", approximate)});
    gelu.onnxOpset = 20;
    cases.push_back(gelu);
  }
  // Binary ops over broadcasting shapes.
  struct Binary {
    const char *op;
    float lowB, highB;
  };
  struct Operands {
    Shape a, b;
  };
  for (const Binary &b : std::vector<Binary>{{"Add", -1, 1},
                                             {"Sub", -1, 1},
                                             {"Mul", -1, 1},
                                             {"Div", 0.5f, 2},
                                             {"Max", -1, 1},
                                             {"Min", -1, 1}})
    for (const Operands &o : std::vector<Operands>{{{7}, {7}},
                                                   {{3, 1, 5}, {4, 1}},
                                                   {{}, {2, 3}},
                                                   {{1023}, {1}},
                                                   {{1}, {1}}})
      cases.push_back(m.make(
          std::string(b.op) + " " + shapeText(o.a) + " " + shapeText(o.b), "",
          b.op, {m.rnd(o.a), m.rnd(o.b, b.lowB, b.highB)}));
  // Pow on a positive base: fractional exponents are defined.
  cases.push_back(m.make("Pow [3,1,5] [4,1]", "", "Pow",
                         {m.rnd({3, 1, 5}, 0.5f, 2), m.rnd({4, 1}, -2, 2)}));
  cases.push_back(m.make("Pow [1023] scalar 2", "", "Pow",
                         {m.rnd({1023}), m.rnd({}, 2, 2)}));
  // Activations with a bias over the last axis.
  cases.push_back(m.make("FastGelu with bias", kMsDomain, "FastGelu",
                         {m.rnd({4, 33}, -3, 3), m.rnd({33})}));
  cases.push_back(m.make("BiasGelu", kMsDomain, "BiasGelu",
                         {m.rnd({4, 33}, -3, 3), m.rnd({33})}));
  // Gradients: dY and the forward input (or output, for Sigmoid/Tanh).
  struct Grad {
    const char *op;
    float low, high;
  };
  for (const Grad &g : std::vector<Grad>{{"ReluGrad", -1, 1},
                                         {"GeluGrad", -3, 3},
                                         {"FastGeluGrad", -3, 3},
                                         {"QuickGeluGrad", -3, 3},
                                         {"SigmoidGrad", 0.01f, 0.99f},
                                         {"TanhGrad", -0.99f, 0.99f}})
    for (Shape shape : {Shape{7}, Shape{1023}})
      cases.push_back(m.make(std::string(g.op) + " " + shapeText(shape),
                             kMsDomain, g.op,
                             {m.rnd(shape), m.rnd(shape, g.low, g.high)}));
  for (const char *op : {"BiasGeluGrad_dX", "BiasFastGeluGrad_dX"})
    cases.push_back(
        m.make(op, kMsDomain, op,
               {m.rnd({4, 33}), m.rnd({4, 33}, -3, 3), m.rnd({33})}));
  return cases;
}

//===----------------------------------------------------------------------===//
// Softmax and layer norm
//===----------------------------------------------------------------------===//

std::vector<OpCase> normCases(DType dtype) {
  CaseMaker m(dtype, 300 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  struct Rows {
    Shape shape;
    int64_t axis;
  };
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (const Rows &r : std::vector<Rows>{
             {{3, 7}, -1}, {{2, 5, 9}, 1}, {{1, 1023}, -1}, {{1}, 0}}) {
      std::string where =
          shapeText(r.shape) + " axis " + std::to_string(r.axis);
      OpCase forward =
          m.make(std::string(op) + " " + where, "", op, {m.rnd(r.shape, -4, 4)},
                 {intAttr("axis", r.axis)});
      cases.push_back(forward);
      // The gradient of the CPU's forward output.
      std::string grad = std::string(op) + "Grad_13";
      cases.push_back(m.make(grad + " " + where, kMsDomain, grad,
                             {m.rnd(r.shape), cpuResult(forward, 0)},
                             {intAttr("axis", r.axis)}));
    }
  OpCase coerced = m.make("Softmax (opset 17) [2,3,4] axis 1", "", "Softmax",
                          {m.rnd({2, 3, 4}, -4, 4)}, {intAttr("axis", 1)});
  cases.push_back(coerced);
  cases.push_back(
      m.make("SoftmaxGrad (coerced) [2,3,4] axis 1", kMsDomain, "SoftmaxGrad",
             {m.rnd({2, 3, 4}), cpuResult(coerced, 0)}, {intAttr("axis", 1)}));

  struct Norm {
    Shape x, scale;
    int64_t axis;
  };
  for (const Norm &n : std::vector<Norm>{{{4, 33}, {33}, -1},
                                         {{2, 3, 8}, {3, 8}, 1},
                                         {{1, 1023}, {1023}, -1},
                                         {{3, 1}, {1}, -1}}) {
    std::string where = shapeText(n.x) + " axis " + std::to_string(n.axis);
    std::vector<NamedAttribute> attrs = {intAttr("axis", n.axis),
                                         floatAttr("epsilon", 1e-5f)};
    TensorData x = m.rnd(n.x, -2, 3), scale = m.rnd(n.scale);
    OpCase layerNorm =
        m.make("LayerNormalization " + where, "", "LayerNormalization",
               {x, scale, m.rnd(n.scale)}, attrs, 3);
    cases.push_back(layerNorm);
    OpCase grad = m.make("LayerNormalizationGrad " + where, kMsDomain,
                         "LayerNormalizationGrad",
                         {m.rnd(n.x), x, scale, cpuResult(layerNorm, 1),
                          cpuResult(layerNorm, 2)},
                         {intAttr("axis", n.axis)}, 3);
    // dScale and dBias sum over the rows, dX over each row.
    grad.toleranceScale = 2;
    cases.push_back(grad);
    for (llvm::StringRef domain :
         {llvm::StringRef(""), llvm::StringRef(kMsDomain)}) {
      OpCase simplified =
          m.make("SimplifiedLayerNormalization (" +
                     (domain.empty() ? std::string("ai.onnx") : domain.str()) +
                     ") " + where,
                 domain, "SimplifiedLayerNormalization", {x, scale}, attrs, 2);
      cases.push_back(simplified);
      if (!domain.empty())
        continue;
      // ai.onnx RMSNormalization (opset 23): the same kernel, Y only.
      OpCase rms = m.make("RMSNormalization " + where, "", "RMSNormalization",
                          {x, scale}, attrs);
      rms.onnxOpset = 23;
      cases.push_back(rms);
      // A scale of the trailing dimension, broadcast over the others.
      if (n.scale.size() > 1) {
        OpCase broadcast =
            m.make("RMSNormalization (scale [" +
                       std::to_string(n.scale.back()) + "]) " + where,
                   "", "RMSNormalization", {x, m.rnd({n.scale.back()})}, attrs);
        broadcast.onnxOpset = 23;
        cases.push_back(broadcast);
      }
      OpCase simplifiedGrad =
          m.make("SimplifiedLayerNormalizationGrad " + where, kMsDomain,
                 "SimplifiedLayerNormalizationGrad",
                 {m.rnd(n.x), x, scale, cpuResult(simplified, 1)},
                 {intAttr("axis", n.axis)}, 2);
      simplifiedGrad.toleranceScale = 2;
      cases.push_back(simplifiedGrad);
    }
  }
  return cases;
}

//===----------------------------------------------------------------------===//
// Gather, GatherGrad, Cast
//===----------------------------------------------------------------------===//

std::vector<OpCase> gatherCases(DType dtype) {
  CaseMaker m(dtype, 400 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  auto exact = [](OpCase c) {
    c.agreement = Agreement::Exact;
    return c;
  };
  cases.push_back(
      exact(m.make("Gather axis 0 negative and repeated indices", "", "Gather",
                   {m.rnd({10, 4}), int64s({6}, {3, 0, 9, 3, -1, -10})})));
  cases.push_back(exact(
      m.make("Gather axis 1 int32 indices", "", "Gather",
             {m.rnd({3, 5, 4}), TensorData::fromValues<int32_t>(
                                    DType::I32, {2, 3}, {4, 0, 1, 1, -5, 2})},
             {intAttr("axis", 1)})));
  cases.push_back(exact(m.make("Gather [1023] scalar index", "", "Gather",
                               {m.rnd({1023}), int64s({}, {1022})})));
  if (dtype != DType::F32)
    return cases; // 16-bit GatherGrad: CudaCnnAmpParityTest.
  OpCase grad = m.make(
      "GatherGrad axis 0 repeated indices", kMsDomain, "GatherGrad",
      {int64s({2}, {10, 4}), int64s({6}, {3, 0, 7, 3, -1, 3}), m.rnd({6, 4})});
  grad.constantOperands = {0};
  cases.push_back(grad);
  OpCase axis1 =
      m.make("GatherGrad axis 1", kMsDomain, "GatherGrad",
             {int64s({3}, {3, 5, 4}), int64s({2, 3}, {4, 0, 1, 1, 4, 2}),
              m.rnd({3, 2, 3, 4})},
             {intAttr("axis", 1)});
  axis1.constantOperands = {0};
  cases.push_back(axis1);
  OpCase embedding =
      m.make("GatherGrad [1023, 7] embedding", kMsDomain, "GatherGrad",
             {int64s({2}, {1023, 7}), int64s({5}, {0, 1022, 511, 0, 7}),
              m.rnd({5, 7})});
  embedding.constantOperands = {0};
  cases.push_back(embedding);
  return cases;
}

/// Casts between every storage type the backends share (exact: both round
/// to nearest even and truncate toward zero the same way).
std::vector<OpCase> castCases() {
  std::vector<OpCase> cases;
  struct Conversion {
    DType from, to;
    int64_t onnxTo;
  };
  unsigned seed = 500;
  for (const Conversion &c :
       std::vector<Conversion>{{DType::F32, DType::F16, 10},
                               {DType::F32, DType::BF16, 16},
                               {DType::F16, DType::F32, 1},
                               {DType::BF16, DType::F32, 1},
                               {DType::F16, DType::BF16, 16},
                               {DType::F32, DType::I64, 7},
                               {DType::F32, DType::I32, 6},
                               {DType::F32, DType::Bool, 9},
                               {DType::I64, DType::F32, 1},
                               {DType::Bool, DType::F16, 10}}) {
    CaseMaker m(c.from, seed);
    seed += 10;
    for (Shape shape : {Shape{1}, Shape{7}, Shape{1023}}) {
      TensorData input;
      if (c.from == DType::I64) {
        std::vector<int64_t> values(shape[0]);
        for (size_t i = 0; i < values.size(); ++i)
          values[i] = static_cast<int64_t>(i * 7919 % 2001) - 1000;
        input = int64s(shape, values);
      } else if (c.from == DType::Bool) {
        std::vector<uint8_t> values(shape[0]);
        for (size_t i = 0; i < values.size(); ++i)
          values[i] = (i * 7) % 3 == 0;
        input = bools(shape, values);
      } else {
        input = m.rnd(shape, -300, 300);
      }
      OpCase cast = m.make("Cast to " + dtypeName(c.to).str() + " " +
                               shapeText(shape) + " from",
                           "", "Cast", {input}, {intAttr("to", c.onnxTo)});
      cast.agreement = Agreement::Exact;
      cases.push_back(cast);
    }
  }
  return cases;
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

std::vector<OpCase> dropoutCases(DType dtype) {
  CaseMaker m(dtype, 600 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  TensorData training = bools({}, {1});
  for (const char *op : {"Dropout", "BitmaskDropout"}) {
    llvm::StringRef domain =
        op[0] == 'B' ? llvm::StringRef(kMsDomain) : llvm::StringRef("");
    for (Shape shape : {Shape{1}, Shape{7}, Shape{1023}, Shape{4, 33}}) {
      // The ratio a graph input (read on the device) or a constant.
      for (bool constantRatio : {false, true}) {
        OpCase forward = m.make(
            std::string(op) + " " + shapeText(shape) +
                (constantRatio ? " constant ratio 0.3" : " ratio input 0.3"),
            domain, op, {m.rnd(shape), floats({}, {0.3f}), training}, {}, 2);
        if (constantRatio)
          forward.constantOperands = {1};
        cases.push_back(forward);
        std::string grad = std::string(op) + "Grad";
        OpCase backward = m.make(grad + " " + shapeText(shape), kMsDomain, grad,
                                 {m.rnd(shape), cpuResult(forward, 1),
                                  floats({}, {0.3f}), training});
        backward.constantOperands = forward.constantOperands;
        cases.push_back(backward);
      }
    }
    OpCase seeded =
        m.make(std::string(op) + " seed attribute ratio 0.5", domain, op,
               {m.rnd({1023}), floats({}, {0.5f}), training},
               {intAttr("seed", 42)}, 2);
    cases.push_back(seeded);
    OpCase inference = m.make(std::string(op) + " inference (no training_mode)",
                              domain, op, {m.rnd({7})}, {}, 2);
    cases.push_back(inference);
  }
  return cases;
}

//===----------------------------------------------------------------------===//
// Optimizers and the accumulator
//===----------------------------------------------------------------------===//

std::vector<OpCase> trainingCases() {
  CaseMaker m(DType::F32, 700);
  std::vector<OpCase> cases;
  std::vector<Shape> params = {{3, 5}, {1023}, {1}};
  for (int64_t mode : {0, 1})
    for (int64_t correctBias : {0, 1}) {
      std::vector<TensorData> inputs = {floats({1}, {0.01f}), int64s({1}, {3}),
                                        bools({1}, {1})};
      for (const Shape &shape : params)
        inputs.push_back(m.rnd(shape));
      for (const Shape &shape : params)
        inputs.push_back(m.rnd(shape, -0.5f, 0.5f));
      for (const Shape &shape : params)
        inputs.push_back(m.rnd(shape, -0.1f, 0.1f));
      for (const Shape &shape : params)
        inputs.push_back(m.rnd(shape, 0, 0.01f));
      OpCase adamW = m.make(
          "AdamWOptimizer adam_mode " + std::to_string(mode) +
              " correct_bias " + std::to_string(correctBias),
          kMsDomain, "AdamWOptimizer", inputs,
          {intAttr("adam_mode", mode), intAttr("correct_bias", correctBias),
           floatAttr("weight_decay", 0.1f), floatAttr("epsilon", 1e-6f)});
      adamW.comparesWrittenOperands = true;
      cases.push_back(adamW);
    }
  for (uint8_t update : {1, 0}) {
    std::vector<TensorData> inputs = {floats({1}, {0.25f}),
                                      bools({1}, {update})};
    for (const Shape &shape : params)
      inputs.push_back(m.rnd(shape));
    for (const Shape &shape : params)
      inputs.push_back(m.rnd(shape));
    OpCase sgd =
        m.make("SGDOptimizerV2 update_signal " + std::to_string(update),
               kMsDomain, "SGDOptimizerV2", inputs);
    sgd.comparesWrittenOperands = true;
    cases.push_back(sgd);
  }
  for (Shape shape : {Shape{1}, Shape{7}, Shape{1023}})
    for (int overwrite : {-1, 0, 1}) {
      std::vector<TensorData> inputs = {m.rnd(shape), m.rnd(shape)};
      if (overwrite >= 0)
        inputs.push_back(bools({1}, {static_cast<uint8_t>(overwrite)}));
      OpCase accumulate =
          m.make("InPlaceAccumulatorV2 " + shapeText(shape) + " overwrite " +
                     (overwrite < 0 ? std::string("absent")
                                    : std::to_string(overwrite)),
                 kMsDomain, "InPlaceAccumulatorV2", inputs, {}, 2);
      accumulate.comparesWrittenOperands = true;
      cases.push_back(accumulate);
    }
  return cases;
}

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

/// Every case of every family, for the host checks.
std::vector<OpCase> allCases() {
  std::vector<OpCase> cases;
  auto append = [&](std::vector<OpCase> more) {
    cases.insert(cases.end(), more.begin(), more.end());
  };
  for (DType dtype : kFloatTypes) {
    append(matMulCases(dtype));
    append(elementwiseCases(dtype));
    append(normCases(dtype));
    append(gatherCases(dtype));
    append(dropoutCases(dtype));
  }
  append(castCases());
  append(trainingCases());
  return cases;
}

} // namespace

TEST(CudaCoreOpsParityTest, CasesRunOnTheCpuBackendAndPassTheCudaChecks) {
  // The harness and the cases, in every build: each module verifies, runs
  // on the CPU backend to finite results, and is accepted and planned by
  // the CUDA backend's prepare-time checks (which need no device).
  std::vector<OpCase> cases = allCases();
  EXPECT_GT(cases.size(), 300u);
  for (const OpCase &c : cases) {
    SCOPED_TRACE(c.what);
    test::checkCpuHalf(c);
    test::expectCudaAccepts(c);
  }
}

TEST(CudaCoreOpsParityTest, DropoutCasesDrawNonTrivialMasksOnTheCpu) {
  // The dropout cases compare masks bit for bit, so they must not be
  // trivial: a mask keeps about 1 - ratio of the elements.
  std::vector<OpCase> cases = dropoutCases(DType::F32);
  auto it = llvm::find_if(cases, [](const OpCase &c) {
    return c.op == "Dropout" && c.inputs[0].getNumElements() == 1023 &&
           c.inputs.size() == 3;
  });
  ASSERT_NE(it, cases.end());
  const OpCase &c = *it;
  TensorData mask = cpuResult(c, 1);
  ASSERT_EQ(mask.getNumElements(), 1023u);
  uint64_t kept = 0;
  for (uint8_t byte : mask.getBytes())
    kept += byte != 0;
  EXPECT_GT(kept, 600u);
  EXPECT_LT(kept, 830u);
}

TEST(CudaCoreOpsParityTest, MatrixProductsMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(matMulCases(dtype), kBothModes);
}

TEST(CudaCoreOpsParityTest, ElementwiseOpsAndActivationsMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(elementwiseCases(dtype), kBothModes);
}

TEST(CudaCoreOpsParityTest, SoftmaxAndLayerNormMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(normCases(dtype), kBothModes);
}

TEST(CudaCoreOpsParityTest, GatherAndCastMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(gatherCases(dtype), kBothModes);
  test::expectCudaParity(castCases(), kBothModes);
}

TEST(CudaCoreOpsParityTest, DropoutMasksAreBitIdenticalToTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(dropoutCases(dtype), kBothModes);
}

TEST(CudaCoreOpsParityTest, OptimizersAndAccumulatorMatchTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  test::expectCudaParity(trainingCases(), kBothModes);
}
