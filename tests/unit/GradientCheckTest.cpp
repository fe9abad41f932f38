//===- GradientCheckTest.cpp - Finite-difference checks of each rule ------===//
//
// ONNX Runtime's gradient checker, for gmopt's autodiff: each case builds a
// one-op (or few-op) forward graph over random shapes and attributes, adds
// the loss sum(Y * R) with a random R (so every element of dY differs),
// runs the autodiff pass, and compares the gradient the CPU backend
// computes for every float parameter with central finite differences of
// the forward graph's loss, also run on the CPU backend. The graphs run in
// float64 (parameters, constants, every kernel and every gradient op), so a
// step of 1e-6 and agreement within 1e-6 of the largest numeric entry (plus
// 1e-7 absolute) hold (see kFloat64), which a wrong rule (a dropped term, a
// transposed operand, a missed broadcast) misses by orders of magnitude and
// even a float32 rounding inside a kernel misses. The same cases run once
// more in float32, the type models train in, with a step of 1e-2 and 1e-2
// relative (see kFloat32).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/GradientCheckHarness.h"

#include "ir/OpRegistry.h"
#include "passes/autodiff/GradientRules.h"

#include "llvm/ADT/StringSet.h"

#include "gtest/gtest.h"

#include <set>
#include <vector>

using namespace gmopt;
using namespace gmopt::gradcheck;

namespace {

/// A float32 1-D constant (Resize's scales and roi are float32 whatever
/// the case's float type).
Value *f32Constant(CaseBuilder &b, std::vector<float> values,
                   const std::string &name) {
  return b.graph.addInitializer(
      TensorData::fromValues<float>(
          DType::F32, {static_cast<int64_t>(values.size())}, values),
      name);
}

/// Resize over random shapes: every mode, nearest_mode and coordinate
/// mode, scales up and down or sizes (opset 17); axes,
/// keep_aspect_ratio_policy and half_pixel_symmetric (opset 19). (Resize-10
/// has no case: the autodiff pass takes opset 13 and newer.)
void addResizeCases(std::vector<GradientCase> &cases) {
  cases.push_back(
      {"Resize",
       [](CaseBuilder &b) {
         static const char *const modes[] = {"nearest", "linear", "cubic"};
         static const char *const coordinates[] = {
             "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
             "tf_crop_and_resize"};
         static const char *const nearestModes[] = {
             "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
         static const float scaleChoices[] = {0.5f, 0.75f, 1.5f, 2.0f, 2.5f};
         std::string mode = modes[b.pick(0, 2)];
         std::string coordinate = coordinates[b.pick(0, 4)];
         std::vector<int64_t> shape = {b.pick(1, 2), b.pick(1, 2), b.pick(2, 4),
                                       b.pick(2, 4)};
         Value *x = b.param(shape);
         std::vector<NamedAttribute> attributes = {
             {"mode", Attribute::getString(mode)},
             {"coordinate_transformation_mode",
              Attribute::getString(coordinate)},
             {"nearest_mode", Attribute::getString(nearestModes[b.pick(0, 3)])},
             floatAttr("cubic_coeff_a", b.pick(0, 1) ? -0.75f : -0.5f),
             intAttr("exclude_outside", b.pick(0, 1)),
             floatAttr("extrapolation_value", 0.25f)};
         Value *roi =
             coordinate == "tf_crop_and_resize"
                 ? f32Constant(b, {0, 0, 0.1f, 0.2f, 1, 1, 0.9f, 1.1f}, "roi")
                 : nullptr;
         if (b.pick(0, 1))
           return b.op("Resize",
                       {x, roi,
                        f32Constant(b,
                                    {1, 1, scaleChoices[b.pick(0, 4)],
                                     scaleChoices[b.pick(0, 4)]},
                                    "scales")},
                       attributes);
         return b.op(
             "Resize",
             {x, roi, nullptr,
              b.int64s({shape[0], shape[1], b.pick(1, 7), b.pick(1, 7)})},
             attributes);
       },
       24});
  cases.push_back(
      {"Resize",
       [](CaseBuilder &b) {
         b.module.opsetImports[""] = 19;
         static const char *const policies[] = {"stretch", "not_larger",
                                                "not_smaller"};
         static const char *const modes[] = {"nearest", "linear", "cubic"};
         std::vector<int64_t> shape = {b.pick(1, 2), b.pick(2, 4),
                                       b.pick(2, 4)};
         Value *x = b.param(shape);
         std::vector<NamedAttribute> attributes = {
             {"mode", Attribute::getString(modes[b.pick(0, 2)])},
             {"coordinate_transformation_mode",
              Attribute::getString(b.pick(0, 1) ? "half_pixel_symmetric"
                                                : "half_pixel")},
             intsAttr("axes", {2, 1})};
         if (b.pick(0, 1))
           return b.op(
               "Resize",
               {x, nullptr,
                f32Constant(b, {b.pick(0, 1) ? 1.7f : 0.6f, 1.3f}, "scales")},
               attributes);
         attributes.push_back({"keep_aspect_ratio_policy",
                               Attribute::getString(policies[b.pick(0, 2)])});
         return b.op(
             "Resize",
             {x, nullptr, nullptr, b.int64s({b.pick(1, 6), b.pick(1, 6)})},
             attributes);
       },
       12});
}

std::vector<GradientCase> allCases() {
  std::vector<GradientCase> cases;
  // Elementwise math.
  for (const char *op :
       {"Identity", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Sin",
        "Cos", "Atan", "Asinh", "Sinh", "Cosh", "Abs"})
    cases.push_back(unary(op, -1.5, 1.5));
  cases.push_back(unary("Log", 0.5, 2.0));
  cases.push_back(unary("Sqrt", 0.5, 2.0));
  cases.push_back(unary("Reciprocal", 0.5, 2.0));
  cases.push_back(unary("Tan", -1.0, 1.0));
  cases.push_back(unary("Asin", -0.8, 0.8));
  cases.push_back(unary("Acos", -0.8, 0.8));
  cases.push_back(unary("Atanh", -0.8, 0.8));
  cases.push_back(unary("Acosh", 1.2, 2.0));
  cases.push_back(unary("Gelu", -1.5, 1.5, "com.microsoft"));
  cases.push_back(unary("FastGelu", -1.5, 1.5, "com.microsoft"));
  cases.push_back({"Cast",
                   [](CaseBuilder &b) {
                     // To the parameter's own type.
                     return b.op("Cast", {b.param(b.shape(2))},
                                 attrs({intAttr("to", b.stashType())}));
                   },
                   1});
  cases.push_back(binary("Add"));
  cases.push_back(binary("Sub"));
  cases.push_back(binary("Mul"));
  cases.push_back(binary("Div", -1.0, 1.0, 0.5, 2.0));
  cases.push_back(binary("Pow", 0.5, 2.0, -1.0, 2.0));
  cases.push_back(binary("Max"));
  cases.push_back(binary("Min"));
  cases.push_back({"Sum", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(3);
                     return b.op("Sum",
                                 {b.param(full), b.param(broadcastOf(b, full)),
                                  b.param(full)});
                   }});
  cases.push_back({"Mean", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(2);
                     return b.op("Mean", {b.param(full), b.param(full)});
                   }});
  cases.push_back({"Where", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(3);
                     Value *cond = b.mask(full);
                     return b.op("Where", {cond, b.param(full),
                                           b.param(broadcastOf(b, full))});
                   }});
  // Products.
  cases.push_back(
      {"Gemm",
       [](CaseBuilder &b) {
         int64_t m = b.pick(1, 4), k = b.pick(1, 4), n = b.pick(1, 4);
         bool transA = b.pick(0, 1), transB = b.pick(0, 1);
         Value *a = b.param(transA ? std::vector<int64_t>{k, m}
                                   : std::vector<int64_t>{m, k});
         Value *bm = b.param(transB ? std::vector<int64_t>{n, k}
                                    : std::vector<int64_t>{k, n});
         std::vector<Value *> operands = {a, bm};
         int64_t biasKind = b.pick(0, 2);
         if (biasKind == 1)
           operands.push_back(b.param({n}));
         else if (biasKind == 2)
           operands.push_back(b.param({m, n}));
         return b.op(
             "Gemm", operands,
             attrs({intAttr("transA", transA), intAttr("transB", transB),
                    floatAttr("alpha", 0.5f + b.pick(0, 2)),
                    floatAttr("beta", 0.5f + b.pick(0, 2))}));
       },
       6});
  cases.push_back(
      {"MatMul",
       [](CaseBuilder &b) {
         int64_t batch = b.pick(1, 3), m = b.pick(1, 4), k = b.pick(1, 4),
                 n = b.pick(1, 4);
         int64_t kind = b.pick(0, 2);
         if (kind == 0) // a linear layer: [batch, m, k] x [k, n]
           return b.op("MatMul", {b.param({batch, m, k}), b.param({k, n})});
         if (kind == 1) // attention: batched on both sides
           return b.op("MatMul",
                       {b.param({batch, 2, m, k}), b.param({batch, 2, k, n})});
         // broadcast batch on the left operand
         return b.op("MatMul", {b.param({1, m, k}), b.param({batch, k, n})});
       },
       6});
  // Reductions.
  for (const char *op : {"ReduceSum", "ReduceMean"})
    cases.push_back(
        {op,
         [op = std::string(op)](CaseBuilder &b) {
           std::vector<int64_t> shape = b.shape(3);
           std::vector<int64_t> axes;
           for (int64_t axis = 0; axis != 3; ++axis)
             if (b.pick(0, 1))
               axes.push_back(axis - 3 * b.pick(0, 1));
           int64_t keepdims = b.pick(0, 1);
           Value *x = b.param(shape);
           if (axes.empty())
             return b.op(op, {x}, attrs({intAttr("keepdims", keepdims)}));
           if (op == "ReduceSum")
             return b.op(op, {x, b.int64s(axes)},
                         attrs({intAttr("keepdims", keepdims)}));
           return b.op(
               op, {x},
               attrs({intsAttr("axes", axes), intAttr("keepdims", keepdims)}));
         },
         5});
  // Layers.
  for (const char *op : {"Softmax", "LogSoftmax"})
    cases.push_back({op,
                     [op = std::string(op)](CaseBuilder &b) {
                       std::vector<int64_t> shape = b.shape(3);
                       return b.op(op, {b.param(shape, -2, 2)},
                                   attrs({intAttr("axis", b.pick(-3, 2))}));
                     },
                     4});
  cases.push_back(
      {"LayerNormalization", [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(3);
         shape.back() = b.pick(2, 5);
         int64_t n = shape.back();
         // The saved statistics in the parameters' type
         // (stash_type 1 would keep them in float32).
         return b.op("LayerNormalization",
                     {b.param(shape, -2, 2), b.param({n}), b.param({n})},
                     attrs({intAttr("axis", -1), floatAttr("epsilon", 1e-5f),
                            intAttr("stash_type", b.stashType())}));
       }});
  cases.push_back(
      {"SimplifiedLayerNormalization", [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(3);
         shape.back() = b.pick(2, 5);
         int64_t n = shape.back();
         // The saved statistics in the parameters' type
         // (stash_type 1 would keep them in float32).
         return b.op("SimplifiedLayerNormalization",
                     {b.param(shape, -2, 2), b.param({n})},
                     attrs({intAttr("axis", -1), floatAttr("epsilon", 1e-5f),
                            intAttr("stash_type", b.stashType())}));
       }});
  cases.push_back(
      {"RMSNormalization",
       [](CaseBuilder &b) {
         b.module.opsetImports[""] = 23; // RMSNormalization is opset 23
         std::vector<int64_t> shape = b.shape(3);
         shape.back() = b.pick(2, 5);
         // Over the last axis, or the last two with a full or a broadcast
         // ([last]) scale; the statistic recomputed in the parameters'
         // type (stash_type).
         int64_t variant = b.pick(0, 2);
         int64_t axis = variant == 0 ? -1 : -2;
         std::vector<int64_t> scaleShape =
             variant == 1 ? std::vector<int64_t>{shape[1], shape[2]}
                          : std::vector<int64_t>{shape[2]};
         return b.op("RMSNormalization",
                     {b.param(shape, -2, 2), b.param(scaleShape, 0.5, 1.5)},
                     attrs({intAttr("axis", axis), floatAttr("epsilon", 1e-5f),
                            intAttr("stash_type", b.stashType())}));
       },
       4});
  auto batchNorm = [](bool training) {
    return [training](CaseBuilder &b) {
      int64_t c = b.pick(1, 3);
      std::vector<int64_t> shape = {b.pick(2, 3), c, b.pick(1, 3),
                                    b.pick(1, 3)};
      Value *x = b.param(shape, -2, 2);
      Value *scale = b.param({c}, 0.5, 1.5);
      Value *bias = b.param({c});
      Value *mean = b.param({c}, -0.5, 0.5);
      Value *var = b.param({c}, 0.5, 2.0);
      return b.op("BatchNormalization", {x, scale, bias, mean, var},
                  attrs({floatAttr("epsilon", 1e-5f),
                         intAttr("training_mode", training)}));
    };
  };
  // Training mode: rewritten to BatchNormInternal (batch statistics).
  cases.push_back({"BatchNormInternal", batchNorm(true), 3});
  // Inference mode (train-mode off): the running statistics.
  cases.push_back({"BatchNormalization", batchNorm(false), 3, false});
  cases.push_back({"InstanceNormalization",
                   [](CaseBuilder &b) {
                     int64_t c = b.pick(1, 3);
                     std::vector<int64_t> shape = {b.pick(1, 2), c,
                                                   b.pick(2, 3), b.pick(1, 3)};
                     return b.op("InstanceNormalization",
                                 {b.param(shape, -2, 2), b.param({c}, 0.5, 1.5),
                                  b.param({c})},
                                 attrs({floatAttr("epsilon", 1e-5f)}));
                   },
                   4});
  cases.push_back(
      {"Dropout", [](CaseBuilder &b) {
         Value *x = b.param(b.shape(3));
         return b.op("Dropout", {x, b.scalarF32(0.3f), b.scalarBool(true)});
       }});
  cases.push_back({"SoftmaxCrossEntropyLoss",
                   [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 5);
                     Value *scores = b.param({n, c}, -2, 2);
                     Value *labels = b.indices({n}, c);
                     bool sum = b.pick(0, 1);
                     return b.op("SoftmaxCrossEntropyLoss", {scores, labels},
                                 {{"reduction", Attribute::getString(
                                                    sum ? "sum" : "mean")}});
                   },
                   4});
  cases.push_back({"BitmaskDropout", [](CaseBuilder &b) {
                     Value *x = b.param(b.shape(3));
                     return b.op("BitmaskDropout",
                                 {x, b.scalarF32(0.3f), b.scalarBool(true)}, {},
                                 1, "com.microsoft");
                   }});
  cases.push_back({"BiasDropout", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("BiasDropout",
                                 {b.param(shape), b.param({shape.back()}),
                                  b.param(shape), b.scalarF32(0.3f),
                                  b.scalarBool(true)},
                                 {}, 1, "com.microsoft");
                   }});
  cases.push_back(
      {"SoftmaxCrossEntropyLossInternal",
       [](CaseBuilder &b) {
         int64_t n = b.pick(1, 4), c = b.pick(2, 5);
         return b.op("SoftmaxCrossEntropyLossInternal",
                     {b.param({n, c}, -2, 2), b.indices({n}, c)},
                     {{"reduction",
                       Attribute::getString(b.pick(0, 1) ? "sum" : "mean")}},
                     1, "com.microsoft");
       },
       4});
  cases.push_back({"SoftmaxCrossEntropy",
                   [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 5);
                     // Probability labels: a constant one-hot table.
                     std::vector<double> labels(n * c, 0.0);
                     for (int64_t row = 0; row != n; ++row)
                       labels[row * c + b.pick(0, c - 1)] = 1.0;
                     Value *probabilities = b.graph.addInitializer(
                         floatTensor(b.floatType, {n, c}, labels),
                         "probabilities");
                     return b.op("SoftmaxCrossEntropy",
                                 {b.param({n, c}, -2, 2), probabilities}, {}, 1,
                                 "com.microsoft");
                   },
                   4});
  cases.push_back({"Conv", [](CaseBuilder &b) {
                     int64_t c = b.pick(1, 3), f = b.pick(1, 3),
                             k = b.pick(1, 3);
                     int64_t size = b.pick(k, 5);
                     Value *x = b.param({2, c, size, size});
                     Value *w = b.param({f, c, k, k});
                     int64_t pad = b.pick(0, 1);
                     return b.op("Conv", {x, w, b.param({f})},
                                 attrs({intsAttr("kernel_shape", {k, k}),
                                        intsAttr("pads", {pad, pad, pad, pad}),
                                        intsAttr("strides", {1, 1})}));
                   }});
  cases.push_back({"MaxPool",
                   [](CaseBuilder &b) {
                     Value *x = b.paramDistinct({1, 2, 4, 4});
                     return b.op("MaxPool", {x},
                                 attrs({intsAttr("kernel_shape", {2, 2}),
                                        intsAttr("strides", {2, 2})}));
                   },
                   2});
  cases.push_back({"AveragePool",
                   [](CaseBuilder &b) {
                     Value *x = b.param({1, 2, 4, 4});
                     return b.op("AveragePool", {x},
                                 attrs({intsAttr("kernel_shape", {2, 2}),
                                        intsAttr("strides", {2, 2})}));
                   },
                   2});
  cases.push_back({"GlobalAveragePool",
                   [](CaseBuilder &b) {
                     return b.op("GlobalAveragePool", {b.param({2, 3, 3, 2})});
                   },
                   2});
  addResizeCases(cases);
  // Data movement.
  cases.push_back({"Reshape", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("Reshape", {b.param(shape), b.int64s({-1})});
                   }});
  cases.push_back({"Flatten", [](CaseBuilder &b) {
                     return b.op("Flatten", {b.param(b.shape(3))},
                                 attrs({intAttr("axis", b.pick(0, 3))}));
                   }});
  cases.push_back({"Squeeze", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     shape.insert(shape.begin() + 1, 1);
                     return b.op("Squeeze", {b.param(shape), b.int64s({1})});
                   }});
  cases.push_back({"Unsqueeze", [](CaseBuilder &b) {
                     return b.op("Unsqueeze", {b.param(b.shape(2)),
                                               b.int64s({b.pick(0, 2)})});
                   }});
  cases.push_back({"Transpose",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> perm = {0, 1, 2};
                     std::shuffle(perm.begin(), perm.end(), b.rng);
                     return b.op("Transpose", {b.param(b.shape(3))},
                                 attrs({intsAttr("perm", perm)}));
                   },
                   4});
  cases.push_back(
      {"Expand",
       [](CaseBuilder &b) {
         std::vector<int64_t> full = b.shape(3);
         return b.op("Expand", {b.param(broadcastOf(b, full)), b.int64s(full)});
       },
       4});
  cases.push_back({"Slice",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 5);
                     int64_t axis = b.pick(0, 1);
                     int64_t start = b.pick(0, shape[axis] - 1);
                     return b.op("Slice",
                                 {b.param(shape), b.int64s({start}),
                                  b.int64s({shape[axis]}), b.int64s({axis})});
                   },
                   4});
  cases.push_back({"Gather",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 5);
                     int64_t axis = b.pick(0, 1);
                     // Repeated indices: GatherGrad must add, not overwrite.
                     Value *indices = b.indices({b.pick(1, 6)}, shape[axis]);
                     return b.op("Gather", {b.param(shape), indices},
                                 attrs({intAttr("axis", axis)}));
                   },
                   4});
  cases.push_back({"Concat", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     std::vector<int64_t> other = shape;
                     other[1] = b.pick(1, 3);
                     return b.op("Concat", {b.param(shape), b.param(other)},
                                 attrs({intAttr("axis", 1)}));
                   }});
  cases.push_back({"Split", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     shape[1] = b.pick(2, 5);
                     int64_t first = b.pick(1, shape[1] - 1);
                     Value *x = b.param(shape);
                     Value *head =
                         b.op("Split", {x, b.int64s({first, shape[1] - first})},
                              attrs({intAttr("axis", 1)}), 2);
                     // Only the first piece reaches the loss: the second's
                     // gradient is zeros.
                     return head;
                   }});
  // Activations (kinks avoided by the sampled values).
  auto activation = [&](llvm::StringRef op, std::vector<NamedAttribute> opAttrs,
                        double lo, double hi, std::vector<double> kinks,
                        llvm::StringRef domain = "") {
    std::string type = op.str(), opDomain = domain.str();
    cases.push_back({type, [=](CaseBuilder &b) {
                       Value *x = b.paramAvoiding(b.shape(b.pick(1, 3)), lo, hi,
                                                  kinks);
                       return b.op(type, {x}, opAttrs, 1, opDomain);
                     }});
  };
  activation("LeakyRelu", attrs({floatAttr("alpha", 0.1f)}), -1.5, 1.5, {0});
  activation("Elu", attrs({floatAttr("alpha", 0.8f)}), -1.5, 1.5, {0});
  activation("Celu", attrs({floatAttr("alpha", 0.7f)}), -1.5, 1.5, {0});
  activation("Selu", {}, -1.5, 1.5, {0});
  activation("ThresholdedRelu", attrs({floatAttr("alpha", 0.5f)}), -1.5, 1.5,
             {0.5});
  activation("HardSigmoid", {}, -3.5, 3.5, {-2.5, 2.5});
  activation("HardSwish", {}, -4.0, 4.0, {-3.0, 3.0});
  activation("Softplus", {}, -2.0, 2.0, {});
  activation("Softsign", {}, -2.0, 2.0, {});
  cases.push_back({"Mish", [](CaseBuilder &b) {
                     b.module.opsetImports[""] = 18; // Mish is opset 18
                     return b.op("Mish", {b.param(b.shape(2), -2.0, 2.0)});
                   }});
  activation("QuickGelu", attrs({floatAttr("alpha", 1.702f)}), -2.0, 2.0, {},
             "com.microsoft");
  for (const char *approximate : {"none", "tanh"})
    cases.push_back(
        {std::string("Gelu"),
         [approximate](CaseBuilder &b) {
           b.module.opsetImports[""] = 20; // ONNX Gelu is opset 20
           return b.op("Gelu", {b.param(b.shape(2), -2.0, 2.0)},
                       {{"approximate", Attribute::getString(approximate)}});
         },
         2});
  for (const char *op : {"NegativeLogLikelihoodLossInternal",
                         "NegativeLogLikelihoodLossInternal2"})
    cases.push_back(
        {op,
         [op = std::string(op)](CaseBuilder &b) {
           int64_t n = b.pick(1, 4), c = b.pick(2, 4);
           return b.op(op, {b.param({n, c}), b.indices({n}, c)},
                       {{"reduction",
                         Attribute::getString(b.pick(0, 1) ? "sum" : "mean")}},
                       1, "com.microsoft");
         },
         3});
  cases.push_back(
      {"Clip", [](CaseBuilder &b) {
         Value *x = b.paramAvoiding(b.shape(2), -1.5, 1.5, {-0.5, 0.5});
         return b.op("Clip", {x, b.scalarFloat(-0.5), b.scalarFloat(0.5)});
       }});
  cases.push_back(
      {"PRelu", [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(3);
         Value *x = b.paramAvoiding(shape, -1.5, 1.5, {0});
         return b.op("PRelu", {x, b.param({shape.back()}, 0.1, 0.5)});
       }});
  cases.push_back({"BiasGelu", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op(
                         "BiasGelu",
                         {b.param(shape, -2, 2), b.param({shape.back()})}, {},
                         1, "com.microsoft");
                   }});
  cases.push_back(
      {"CastLike",
       [](CaseBuilder &b) {
         return b.op("CastLike", {b.param(b.shape(2)), b.scalarFloat(0)});
       },
       1});
  // More reductions (axes as the attribute, opset 17).
  auto reduction = [&](llvm::StringRef op, double lo, double hi,
                       std::vector<double> kinks) {
    std::string type = op.str();
    cases.push_back(
        {type,
         [=](CaseBuilder &b) {
           std::vector<int64_t> shape = b.shape(3);
           std::vector<int64_t> axes;
           for (int64_t axis = 0; axis != 3; ++axis)
             if (b.pick(0, 1))
               axes.push_back(axis);
           std::vector<NamedAttribute> opAttrs = {
               intAttr("keepdims", b.pick(0, 1))};
           if (!axes.empty())
             opAttrs.push_back(intsAttr("axes", axes));
           bool extreme = type == "ReduceMax" || type == "ReduceMin";
           return b.op(type,
                       {extreme ? b.paramDistinct(shape, lo, hi)
                                : b.paramAvoiding(shape, lo, hi, kinks)},
                       opAttrs);
         },
         4});
  };
  reduction("ReduceSumSquare", -1.0, 1.0, {});
  reduction("ReduceL1", -1.0, 1.0, {0});
  reduction("ReduceL2", -1.0, 1.0, {});
  reduction("ReduceLogSum", 0.5, 2.0, {});
  reduction("ReduceLogSumExp", -1.0, 1.0, {});
  reduction("ReduceMax", -1.0, 1.0, {});
  reduction("ReduceMin", -1.0, 1.0, {});
  reduction("ReduceProd", 0.5, 1.5, {});
  cases.push_back(
      {"GlobalMaxPool",
       [](CaseBuilder &b) {
         return b.op("GlobalMaxPool", {b.paramDistinct({2, 3, 3, 2})});
       },
       2});
  // More data movement.
  cases.push_back({"Trilu",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("Trilu",
                                 {b.param(shape), b.int64s({b.pick(-1, 1)})},
                                 attrs({intAttr("upper", b.pick(0, 1))}));
                   },
                   4});
  cases.push_back(
      {"Tile",
       [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(2);
         return b.op("Tile",
                     {b.param(shape), b.int64s({b.pick(1, 3), b.pick(1, 3)})});
       },
       4});
  cases.push_back(
      {"Pad",
       [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(2);
         return b.op("Pad",
                     {b.param(shape), b.int64s({b.pick(0, 2), b.pick(0, 2),
                                                b.pick(0, 2), b.pick(0, 2)})});
       },
       4});
  cases.push_back({"GatherElements",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 4);
                     int64_t axis = b.pick(0, 1);
                     std::vector<int64_t> indexShape = b.shape(2, 4);
                     indexShape[1 - axis] = shape[1 - axis];
                     Value *indices = b.indices(indexShape, shape[axis]);
                     return b.op("GatherElements", {b.param(shape), indices},
                                 attrs({intAttr("axis", axis)}));
                   },
                   4});
  cases.push_back({"GatherND",
                   [](CaseBuilder &b) {
                     int64_t n = b.pick(2, 4);
                     std::vector<int64_t> shape = {n, n, b.pick(1, 3)};
                     Value *indices = b.indices({b.pick(1, 4), 2}, n);
                     return b.op("GatherND", {b.param(shape), indices});
                   },
                   4});
  cases.push_back({"ConcatTraining", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     std::vector<int64_t> other = shape;
                     other[1] = b.pick(1, 3);
                     return b.op(
                         "ConcatTraining", {b.param(shape), b.param(other)},
                         attrs({intAttr("axis", 1)}), 1, "com.microsoft");
                   }});
  cases.push_back(
      {"SplitTraining", [](CaseBuilder &b) {
         std::vector<int64_t> shape = b.shape(2);
         shape[0] = b.pick(2, 5);
         int64_t first = b.pick(1, shape[0] - 1);
         Value *x = b.param(shape);
         Value *head =
             b.op("SplitTraining", {x, b.int64s({first, shape[0] - first})},
                  attrs({intAttr("axis", 0)}), 2, "com.microsoft");
         Value *tail = b.lastNode()->getResult(1);
         // Both pieces reach the loss, the second through Exp.
         Value *expTail = b.op("Exp", {tail});
         return b.op("Concat", {expTail, head}, attrs({intAttr("axis", 0)}));
       }});
  // Scatter, einsum, NLL, FusedMatMul, Scale, Mod.
  cases.push_back(
      {"ScatterElements",
       [](CaseBuilder &b) {
         std::vector<int64_t> shape = {b.pick(2, 4), b.pick(2, 4)};
         // Distinct rows per column: a permutation prefix.
         int64_t rows = b.pick(1, shape[0]);
         std::vector<int64_t> order(shape[0]);
         std::iota(order.begin(), order.end(), 0);
         std::shuffle(order.begin(), order.end(), b.rng);
         std::vector<int64_t> values;
         for (int64_t r = 0; r != rows; ++r)
           for (int64_t c = 0; c != shape[1]; ++c)
             values.push_back(order[r]);
         Value *indices =
             b.graph.addInitializer(TensorData::fromValues<int64_t>(
                                        DType::I64, {rows, shape[1]}, values),
                                    "scatter_indices");
         return b.op("ScatterElements",
                     {b.param(shape), indices, b.param({rows, shape[1]})},
                     attrs({intAttr("axis", 0)}));
       },
       4});
  cases.push_back(
      {"ScatterND",
       [](CaseBuilder &b) {
         int64_t n = b.pick(2, 4), width = b.pick(1, 3);
         std::vector<int64_t> order(n);
         std::iota(order.begin(), order.end(), 0);
         std::shuffle(order.begin(), order.end(), b.rng);
         int64_t count = b.pick(1, n);
         order.resize(count);
         Value *indices = b.graph.addInitializer(
             TensorData::fromValues<int64_t>(DType::I64, {count, 1}, order),
             "scatter_indices");
         return b.op("ScatterND",
                     {b.param({n, width}), indices, b.param({count, width})});
       },
       4});
  cases.push_back(
      {"Einsum",
       [](CaseBuilder &b) {
         int64_t i = b.pick(1, 3), j = b.pick(1, 3), k = b.pick(1, 3);
         if (b.pick(0, 1))
           return b.op("Einsum", {b.param({i, j}), b.param({j, k})},
                       {{"equation", Attribute::getString("ij,jk->ik")}});
         return b.op("Einsum", {b.param({2, i, j}), b.param({2, k, j})},
                     {{"equation", Attribute::getString("bij,bkj->bik")}});
       },
       4});
  cases.push_back(
      {"NegativeLogLikelihoodLoss",
       [](CaseBuilder &b) {
         int64_t n = b.pick(1, 4), c = b.pick(2, 4);
         const char *reductions[] = {"mean", "sum", "none"};
         return b.op(
             "NegativeLogLikelihoodLoss", {b.param({n, c}), b.indices({n}, c)},
             {{"reduction", Attribute::getString(reductions[b.pick(0, 2)])}});
       },
       4});
  cases.push_back({"FusedMatMul",
                   [](CaseBuilder &b) {
                     int64_t m = b.pick(1, 3), k = b.pick(1, 3),
                             n = b.pick(1, 3);
                     bool transA = b.pick(0, 1), transB = b.pick(0, 1);
                     Value *a = b.param(transA ? std::vector<int64_t>{2, k, m}
                                               : std::vector<int64_t>{2, m, k});
                     Value *bm = b.param(transB ? std::vector<int64_t>{n, k}
                                                : std::vector<int64_t>{k, n});
                     return b.op("FusedMatMul", {a, bm},
                                 attrs({intAttr("transA", transA),
                                        intAttr("transB", transB),
                                        floatAttr("alpha", 0.5f)}),
                                 1, "com.microsoft");
                   },
                   6});
  cases.push_back({"Scale",
                   [](CaseBuilder &b) {
                     return b.op("Scale",
                                 {b.param(b.shape(2)), b.scalarFloat(2.5)},
                                 attrs({intAttr("scale_down", b.pick(0, 1))}),
                                 1, "com.microsoft");
                   },
                   2});
  cases.push_back({"Mod",
                   [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     // Quotients kept away from integers (where Mod jumps).
                     // a / d in [1.14, 1.9]: trunc(a / d) = 1, so dB = -dY.
                     Value *a = b.param(shape, 1.2, 1.9);
                     Value *d = b.param(shape, 1.0, 1.05);
                     return b.op("Mod", {a, d}, attrs({intAttr("fmod", 1)}));
                   },
                   2});
  // A small composite: shared values, broadcasting, several rules.
  cases.push_back(
      {"attention-block",
       [](CaseBuilder &b) {
         int64_t s = b.pick(2, 4), d = b.pick(2, 4);
         Value *x = b.param({1, s, d});
         Value *wq = b.param({d, d});
         Value *wk = b.param({d, d});
         Value *q = b.op("MatMul", {x, wq});
         Value *k = b.op("MatMul", {x, wk});
         Value *kt =
             b.op("Transpose", {k}, attrs({intsAttr("perm", {0, 2, 1})}));
         Value *scores = b.op("MatMul", {q, kt});
         Value *probs = b.op("Softmax", {scores}, attrs({intAttr("axis", -1)}));
         return b.op("MatMul", {probs, x});
       },
       4});
  return cases;
}

/// Checks every case of allCases() with parameters of \p dtype, and that
/// every differentiable op of the rule table has a case.
void checkEveryRule(DType dtype) {
  unsigned seed = 1;
  std::set<std::string> covered;
  unsigned cases = 0, trials = 0, parameters = 0;
  worstError = 0;
  for (const GradientCase &gradientCase : allCases()) {
    unsigned checked = 0;
    for (unsigned trial = 0; trial != gradientCase.trials; ++trial)
      checked += checkTrial(gradientCase, seed += 7, dtype);
    EXPECT_GT(checked, 0u) << gradientCase.name << ": nothing was checked";
    covered.insert(gradientCase.name);
    ++cases;
    trials += gradientCase.trials;
    parameters += checked;
  }
  std::printf("%s: %u cases, %u random trials, %u parameter gradients "
              "checked; worst error %.3g of max |gradient| + 1\n",
              dtype == DType::F64 ? "float64" : "float32", cases, trials,
              parameters, worstError);
  for (const std::string &op :
       GradientRuleTable::instance().differentiableOps()) {
    llvm::StringRef name = op;
    name.consume_front("com.microsoft.");
    EXPECT_TRUE(covered.count(name.str())) << "no gradient check for " << op;
  }
}

// The check proper: float64 graphs, tight tolerance (kFloat64).
TEST(GradientCheckTest, EveryRuleMatchesFiniteDifferences) {
  checkEveryRule(DType::F64);
}

// The same cases in float32, the type models train in: the float32 kernels
// (vector paths included) behind every rule, at kFloat32's tolerance.
TEST(GradientCheckTest, EveryRuleMatchesFiniteDifferencesInFloat32) {
  checkEveryRule(DType::F32);
}

/// True for the ops that carry a training step rather than compute a
/// forward value: gradients, accumulation, optimizers, loss scaling, and
/// the data-parallel collectives (gmopt domain), which the data-parallel
/// pass places after autodiff.
bool isTrainingSupportOp(const OpSchema &schema) {
  if (schema.domain == "gmopt")
    return true;
  llvm::StringRef name = schema.name;
  if (name.contains("Grad") || name.ends_with("Optimizer") ||
      name.ends_with("OptimizerV2"))
    return true;
  return llvm::is_contained(
      std::initializer_list<llvm::StringRef>{
          "InPlaceAccumulator", "InPlaceAccumulatorV2", "ZeroGradient",
          "IsAllFinite", "IsFinite", "MixedPrecisionScale", "YieldOp",
          "PassThrough", "BroadcastGradientArgs", "ReduceSumTraining"},
      name);
}

TEST(GradientCheckTest, EveryForwardRegistryOpHasARule) {
  std::set<std::string> missing;
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    if (isTrainingSupportOp(*schema))
      continue;
    if (!GradientRuleTable::instance().lookup(
            OpName{schema->domain, schema->name}))
      missing.insert((schema->domain.empty() ? "" : schema->domain + ".") +
                     schema->name);
  }
  std::string list;
  for (const std::string &name : missing)
    list += " " + name;
  EXPECT_TRUE(missing.empty())
      << "forward ops without a gradient rule:" << list;
}

} // namespace
