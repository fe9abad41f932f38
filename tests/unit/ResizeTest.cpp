//===- ResizeTest.cpp - Resize: schema, CPU kernel, ResizeGrad ------------===//
//
// The CPU Resize kernel against ONNX's reference implementation on the
// committed cases of Inputs/resize/resize_cases.json (every mode,
// nearest_mode and coordinate mode, axes, keep_aspect_ratio_policy,
// tf_crop_and_resize, opsets 10-19, f32 and f64; made by
// make_resize_cases.py), shape inference on the same cases, ResizeGrad as
// the exact adjoint of Resize (<Resize(x), dy> = <x, ResizeGrad(dy)>),
// f16/bf16 storage, and the errors: antialias, values an opset does not
// define, and output shapes that cannot be known at compile time.
//
//===----------------------------------------------------------------------===//

#include "OpTestHelpers.h"
#include "TestPaths.h"

#include "backend/cpu/testing/KernelTestHarness.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

/// One case of resize_cases.json.
struct ReferenceCase {
  std::string name;
  int64_t opset = 13;
  DType dtype = DType::F32;
  std::vector<NamedAttribute> attrs;
  std::vector<int64_t> xShape, yShape, sizes;
  std::vector<double> x, y, roi, scales;
  bool hasRoi = false, hasScales = false, hasSizes = false;
};

std::vector<double> doubles(const llvm::json::Value *value) {
  std::vector<double> result;
  if (const llvm::json::Array *array = value ? value->getAsArray() : nullptr)
    for (const llvm::json::Value &element : *array)
      result.push_back(element.getAsNumber().value_or(NAN));
  return result;
}

std::vector<int64_t> ints(const llvm::json::Value *value) {
  std::vector<int64_t> result;
  if (const llvm::json::Array *array = value ? value->getAsArray() : nullptr)
    for (const llvm::json::Value &element : *array)
      result.push_back(element.getAsInteger().value_or(-1));
  return result;
}

std::vector<ReferenceCase> loadCases() {
  std::string path =
      testSourceDir() + "/tests/unit/Inputs/resize/resize_cases.json";
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(bool(buffer)) << path;
  if (!buffer)
    return {};
  auto parsed = llvm::json::parse((*buffer)->getBuffer());
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (!parsed)
    return {};
  std::vector<ReferenceCase> cases;
  for (const llvm::json::Value &entry :
       *parsed->getAsObject()->getArray("cases")) {
    const llvm::json::Object &object = *entry.getAsObject();
    ReferenceCase c;
    c.name = object.getString("name")->str();
    c.opset = *object.getInteger("opset");
    c.dtype = *object.getString("dtype") == "float64" ? DType::F64 : DType::F32;
    for (const auto &[key, value] : *object.getObject("attrs")) {
      std::string name = key.str();
      if (auto text = value.getAsString())
        c.attrs.push_back(stringAttr(name, text->str()));
      else if (value.getAsArray())
        c.attrs.push_back(intsAttr(name, ints(&value)));
      else if (name == "cubic_coeff_a" || name == "extrapolation_value")
        c.attrs.push_back(floatAttr(name, float(*value.getAsNumber())));
      else
        c.attrs.push_back(intAttr(name, *value.getAsInteger()));
    }
    c.xShape = ints(object.get("x_shape"));
    c.yShape = ints(object.get("y_shape"));
    c.x = doubles(object.get("x"));
    c.y = doubles(object.get("y"));
    c.hasRoi = object.get("roi")->kind() != llvm::json::Value::Null;
    c.hasScales = object.get("scales")->kind() != llvm::json::Value::Null;
    c.hasSizes = object.get("sizes")->kind() != llvm::json::Value::Null;
    c.roi = doubles(object.get("roi"));
    c.scales = doubles(object.get("scales"));
    c.sizes = ints(object.get("sizes"));
    cases.push_back(std::move(c));
  }
  return cases;
}

HostTensor floatTensor(DType dtype, std::vector<int64_t> shape,
                       const std::vector<double> &values) {
  if (dtype == DType::F64)
    return HostTensor::f64(std::move(shape), values);
  return HostTensor::f32(std::move(shape),
                         std::vector<float>(values.begin(), values.end()));
}

std::vector<double> asDoubles(const HostTensor &tensor) {
  if (tensor.dtype == DType::F64)
    return tensor.values<double>();
  std::vector<float> values = tensor.floats();
  return std::vector<double>(values.begin(), values.end());
}

/// The Resize operands of \p c (opset 10: X, scales).
struct CaseTensors {
  HostTensor x, roi, scales, sizes;
  std::vector<HostTensor *> operands;
};

std::unique_ptr<CaseTensors> tensorsOf(const ReferenceCase &c) {
  auto t = std::make_unique<CaseTensors>();
  t->x = floatTensor(c.dtype, c.xShape, c.x);
  t->roi = HostTensor::f32({int64_t(c.roi.size())},
                           std::vector<float>(c.roi.begin(), c.roi.end()));
  t->scales =
      HostTensor::f32({int64_t(c.scales.size())},
                      std::vector<float>(c.scales.begin(), c.scales.end()));
  t->sizes = HostTensor::i64({int64_t(c.sizes.size())}, c.sizes);
  t->operands.push_back(&t->x);
  if (c.opset < 11) {
    t->operands.push_back(&t->scales);
    return t;
  }
  t->operands.push_back(c.hasRoi ? &t->roi : nullptr);
  t->operands.push_back(c.hasScales ? &t->scales : nullptr);
  if (c.hasSizes)
    t->operands.push_back(&t->sizes);
  return t;
}

TEST(ResizeTest, KernelMatchesOnnxReference) {
  std::vector<ReferenceCase> cases = loadCases();
  ASSERT_GE(cases.size(), 60u);
  double worst = 0;
  for (const ReferenceCase &c : cases) {
    SCOPED_TRACE(c.name);
    KernelRunner runner;
    runner.setOpset("", c.opset);
    auto tensors = tensorsOf(c);
    auto result = runner.run("", "Resize", tensors->operands,
                             {TensorType::get(c.dtype, c.yShape)}, c.attrs);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    std::vector<double> y = asDoubles((*result)[0]);
    ASSERT_EQ(y.size(), c.y.size());
    double tolerance = c.dtype == DType::F64 ? 1e-12 : 2e-6;
    for (size_t i = 0; i != y.size(); ++i) {
      double error = std::fabs(y[i] - c.y[i]) / (1 + std::fabs(c.y[i]));
      worst = std::max(worst, error);
      EXPECT_LE(error, tolerance)
          << "element " << i << ": " << y[i] << " vs reference " << c.y[i];
    }
  }
  std::printf("%zu reference cases; worst error %.3g\n", cases.size(), worst);
}

/// Shape inference from constant scales/sizes gives the reference's shape.
TEST(ResizeTest, InferenceMatchesOnnxReference) {
  for (const ReferenceCase &c : loadCases()) {
    SCOPED_TRACE(c.name);
    Module module;
    module.opsetImports[""] = c.opset;
    Graph &graph = module.getGraph();
    std::vector<Value *> operands = {
        graph.addInput(TensorType::get(c.dtype, c.xShape), "x")};
    auto constant = [&](TensorData data, const char *name) {
      return graph.addInitializer(std::move(data), name);
    };
    auto f32s = [](const std::vector<double> &values) {
      std::vector<float> narrow(values.begin(), values.end());
      return TensorData::fromValues<float>(DType::F32, {int64_t(narrow.size())},
                                           narrow);
    };
    if (c.opset < 11) {
      operands.push_back(constant(f32s(c.scales), "scales"));
    } else {
      operands.push_back(c.hasRoi ? constant(f32s(c.roi), "roi") : nullptr);
      operands.push_back(c.hasScales ? constant(f32s(c.scales), "scales")
                                     : nullptr);
      if (c.hasSizes)
        operands.push_back(
            constant(TensorData::fromValues<int64_t>(
                         DType::I64, {int64_t(c.sizes.size())}, c.sizes),
                     "sizes"));
    }
    Builder builder(graph);
    auto node = builder.createInferred(OpName{"", "Resize"}, operands, 1,
                                       c.attrs, "resize");
    ASSERT_TRUE(bool(node)) << llvm::toString(node.takeError());
    EXPECT_EQ((*node)->getResult(0)->getType(),
              TensorType::get(c.dtype, c.yShape));
  }
}

/// ResizeGrad is the adjoint of Resize: <Resize(x), dy> = <x, ResizeGrad(dy)>
/// for random x and dy, on every reference case ResizeGrad can express
/// directly (opset 11+, scales or stretched sizes).
TEST(ResizeTest, ResizeGradIsTheAdjoint) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  unsigned checked = 0;
  for (const ReferenceCase &c : loadCases()) {
    bool keepsAspect = false;
    for (const NamedAttribute &attr : c.attrs)
      keepsAspect |= attr.name == "keep_aspect_ratio_policy";
    if (c.opset < 11 || keepsAspect)
      continue;
    SCOPED_TRACE(c.name);
    KernelRunner runner;
    runner.setOpset("", c.opset);
    auto tensors = tensorsOf(c);
    std::vector<double> dyValues;
    for (size_t i = 0; i != c.y.size(); ++i)
      dyValues.push_back(uniform(rng));
    HostTensor dy = HostTensor::f64(c.yShape, dyValues);
    HostTensor x64 = HostTensor::f64(c.xShape, c.x);
    tensors->x = x64;
    auto forward = runner.run("", "Resize", tensors->operands,
                              {TensorType::get(DType::F64, c.yShape)}, c.attrs);
    ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
    std::vector<HostTensor *> gradOperands = {
        &dy, &x64, c.hasRoi ? &tensors->roi : nullptr};
    if (c.hasScales)
      gradOperands.push_back(&tensors->scales);
    auto backward =
        runner.run(kMsDomain, "ResizeGrad", gradOperands,
                   {TensorType::get(DType::F64, c.xShape)}, c.attrs);
    ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
    std::vector<double> y = (*forward)[0].values<double>();
    std::vector<double> dx = (*backward)[0].values<double>();
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i != y.size(); ++i) {
      lhs += y[i] * dyValues[i];
      scale += std::fabs(y[i] * dyValues[i]);
    }
    for (size_t i = 0; i != dx.size(); ++i)
      rhs += c.x[i] * dx[i];
    // tf_crop_and_resize's extrapolated elements are constants, not part
    // of the linear map: leave them out of <Resize(x), dy>.
    bool extrapolates = false;
    for (const NamedAttribute &attr : c.attrs)
      extrapolates |= attr.name == "coordinate_transformation_mode" &&
                      attr.value.getString() == "tf_crop_and_resize";
    if (extrapolates)
      continue;
    EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + scale));
    ++checked;
  }
  EXPECT_GE(checked, 50u);
}

/// f16 and bf16 tensors are stored as 16 bits and computed in fp32.
TEST(ResizeTest, HalfStorage) {
  std::vector<float> values = {0.5f, -1, 2, 0.25f, 1, -0.5f};
  HostTensor x32 = HostTensor::f32({1, 1, 2, 3}, values);
  HostTensor x16 = HostTensor::f16({1, 1, 2, 3}, values);
  HostTensor xb16 = HostTensor::bf16({1, 1, 2, 3}, values);
  HostTensor scales = HostTensor::f32({4}, {1, 1, 2, 2});
  std::vector<NamedAttribute> attrs = {stringAttr("mode", "linear")};
  KernelRunner runner;
  auto reference = runner.run("", "Resize", {&x32, nullptr, &scales},
                              {f32Type({1, 1, 4, 6})}, attrs);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  for (HostTensor *x : {&x16, &xb16}) {
    auto result = runner.run("", "Resize", {x, nullptr, &scales},
                             {TensorType::get(x->dtype, {1, 1, 4, 6})}, attrs);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    std::vector<float> got = (*result)[0].floats(),
                       want = (*reference)[0].floats();
    for (size_t i = 0; i != got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-2 * (1 + std::fabs(want[i])));
  }
}

class ResizeInferenceTest : public test::OpTest {};

using test::contains;
using test::onnxOp;

TEST_F(ResizeInferenceTest, SymbolicDimensions) {
  // A batch dimension with scale 1 stays symbolic.
  Value *x = input("f32[batch,3,4,4]");
  EXPECT_EQ(inferOnnx("Resize", {x, nullptr, f32s({1, 1, 2, 0.5f}, {4})},
                      {stringAttr("mode", "nearest")}),
            "f32[batch,3,8,2]");
  // Sizes traced through a shape computation keep their symbols.
  Value *shape = build1(onnxOp("Shape"), {x}, {intAttr("end", 2)});
  Value *sizes =
      build1(onnxOp("Concat"), {shape, i64s({6, 5})}, {intAttr("axis", 0)});
  EXPECT_EQ(inferOnnx("Resize", {x, nullptr, nullptr, sizes},
                      {stringAttr("mode", "linear")}),
            "f32[batch,3,6,5]");
  // torch's scale_factor export: scales = Concat(Constant, Constant).
  Value *scales =
      build1(onnxOp("Concat"), {f32s({1, 1}, {2}), f32s({2.5f, 0.5f}, {2})},
             {intAttr("axis", 0)});
  EXPECT_EQ(
      inferOnnx("Resize", {x, nullptr, scales}, {stringAttr("mode", "linear")}),
      "f32[batch,3,10,2]");
  // Resize-11's empty scales input (unset) next to sizes.
  EXPECT_EQ(inferOnnx("Resize", {x, f32s({}, {0}), f32s({}, {0}), sizes}),
            "f32[batch,3,6,5]");
}

TEST_F(ResizeInferenceTest, Errors) {
  Value *x = input("f32[1,3,4,4]");
  Value *scales = f32s({1, 1, 2, 2}, {4});
  Value *dynamicScales = input("f32[4]");
  EXPECT_PRED2(contains, inferOnnx("Resize", {x, nullptr, dynamicScales}),
               "the output shape cannot be known at compile time: 'scales' "
               "is not a constant");
  Value *dynamicSizes = input("i64[4]");
  EXPECT_PRED2(contains,
               inferOnnx("Resize", {x, nullptr, nullptr, dynamicSizes}),
               "the output shape cannot be known at compile time");
  EXPECT_PRED2(contains,
               inferOnnx("Resize", {x, nullptr, scales, i64s({1, 3, 8, 8})}),
               "only one of 'scales' and 'sizes'");
  EXPECT_PRED2(contains, inferOnnx("Resize", {x}),
               "one of 'scales' and 'sizes' must be given");
  EXPECT_PRED2(contains, inferOnnx("Resize", {x, nullptr, f32s({2, 2}, {2})}),
               "'scales' has 2 values for 4 resized axes");
  EXPECT_PRED2(contains,
               inferOnnx("Resize", {x, nullptr, scales},
                         {stringAttr("coordinate_transformation_mode",
                                     "half_pixel_symmetric")}),
               "'half_pixel_symmetric' is not defined at opset 17");
  module.opsetImports[""] = 18;
  EXPECT_PRED2(
      contains,
      inferOnnx("Resize", {x, nullptr, scales}, {intAttr("antialias", 1)}),
      "antialias=1 is not supported");
  EXPECT_PRED2(contains,
               inferOnnx("Resize", {x, nullptr, f32s({2}, {1})},
                         {intsAttr("axes", {4})}),
               "axes value 4 is out of range for rank 4");
  module.opsetImports[""] = 10;
  EXPECT_PRED2(contains,
               inferOnnx("Resize", {x, scales}, {stringAttr("mode", "cubic")}),
               "mode 'cubic' is not defined at opset 10");
  EXPECT_EQ(inferOnnx("Resize", {x, scales}), "f32[1,3,8,8]");
}

TEST(ResizeTest, KernelErrors) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({1, 1, 2, 2}, {1, 2, 3, 4});
  HostTensor scales = HostTensor::f32({4}, {1, 1, 2, 2});
  // The output the plan allocated disagrees with the scales.
  auto result =
      runner.run("", "Resize", {&x, nullptr, &scales}, {f32Type({1, 1, 3, 4})});
  ASSERT_FALSE(bool(result));
  EXPECT_PRED2(contains, llvm::toString(result.takeError()), "Resize");
  HostTensor bad = HostTensor::f32({4}, {1, 1, -2, 2});
  auto negative =
      runner.run("", "Resize", {&x, nullptr, &bad}, {f32Type({1, 1, 4, 4})});
  ASSERT_FALSE(bool(negative));
  EXPECT_PRED2(contains, llvm::toString(negative.takeError()),
               "is not positive");
}

} // namespace
