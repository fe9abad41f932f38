//===- CudaResizeTest.cpp - Resize and ResizeGrad on CUDA -----------------===//
//
// Resize and com.microsoft ResizeGrad on CUDA (backend/cuda/
// CudaResizeDispatch.cpp, ResizePlan.cpp, ResizeKernels.cu). Without a GPU:
// ResizeMath.h's per-element functions, run on the host with the parameters
// ResizePlan.cpp resolves, give the CPU kernels' results bit for bit - f32,
// f16 and bf16 storage - on the committed reference cases of
// Inputs/resize/resize_cases.json (every mode, nearest_mode and coordinate
// mode, axes, keep_aspect_ratio_policy, tf_crop_and_resize, opsets 10-19)
// and on random configurations (reversed regions of interest, exclude_outside
// near the edges, large scales that the gradient's gather searches); the
// plan and the prepare-time checks refuse what the kernels cannot run. With
// a device: the CUDA kernels equal the CPU backend's (skipped here).
//
//===----------------------------------------------------------------------===//

#include "TestPaths.h"

#include "backend/Executor.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/ResizeMath.h"
#include "backend/cuda/ResizePlan.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "ir/serialization/Onnx.h"
#include "passes/PassManager.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;

namespace {

/// One Resize configuration: the node's opset and attributes, X's shape and
/// the constant operands (roi, scales, sizes; absent when not has*).
struct ResizeSpec {
  std::string name;
  int64_t opset = 13;
  std::vector<NamedAttribute> attrs;
  std::vector<int64_t> xShape;
  std::vector<float> roi, scales;
  std::vector<int64_t> sizes;
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

std::vector<float> narrow(const std::vector<double> &values) {
  return std::vector<float>(values.begin(), values.end());
}

/// The configurations of resize_cases.json (read as ResizeTest.cpp does).
std::vector<ResizeSpec> referenceSpecs() {
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
  std::vector<ResizeSpec> specs;
  for (const llvm::json::Value &entry :
       *parsed->getAsObject()->getArray("cases")) {
    const llvm::json::Object &object = *entry.getAsObject();
    ResizeSpec s;
    s.name = object.getString("name")->str();
    s.opset = *object.getInteger("opset");
    for (const auto &[key, value] : *object.getObject("attrs")) {
      std::string name = key.str();
      if (auto text = value.getAsString())
        s.attrs.push_back(stringAttr(name, text->str()));
      else if (value.getAsArray())
        s.attrs.push_back(intsAttr(name, ints(&value)));
      else if (name == "cubic_coeff_a" || name == "extrapolation_value")
        s.attrs.push_back(floatAttr(name, float(*value.getAsNumber())));
      else
        s.attrs.push_back(intAttr(name, *value.getAsInteger()));
    }
    s.xShape = ints(object.get("x_shape"));
    s.hasRoi = object.get("roi")->kind() != llvm::json::Value::Null;
    s.hasScales = object.get("scales")->kind() != llvm::json::Value::Null;
    s.hasSizes = object.get("sizes")->kind() != llvm::json::Value::Null;
    s.roi = narrow(doubles(object.get("roi")));
    s.scales = narrow(doubles(object.get("scales")));
    s.sizes = ints(object.get("sizes"));
    specs.push_back(std::move(s));
  }
  return specs;
}

/// Random configurations over every attribute the opsets define.
std::vector<ResizeSpec> randomSpecs(unsigned count, unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](auto &&choices) {
    return choices[std::uniform_int_distribution<size_t>(0, choices.size() -
                                                                1)(rng)];
  };
  auto chance = [&](double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng) < p;
  };
  const std::vector<int64_t> opsets = {10, 11, 13, 18, 19};
  const std::vector<float> scaleChoices = {0.3f, 0.5f, 0.6f, 0.75f, 1.0f, 1.0f,
                                           1.5f, 1.7f, 2.0f, 2.5f,  3.0f, 7.0f};
  std::vector<ResizeSpec> specs;
  for (unsigned n = 0; specs.size() < count; ++n) {
    ResizeSpec s;
    s.name = "random_" + std::to_string(n);
    s.opset = pick(opsets);
    int64_t rank = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    for (int64_t i = 0; i < rank; ++i)
      s.xShape.push_back(std::uniform_int_distribution<int64_t>(1, 6)(rng));
    std::vector<std::string> modes = {"nearest", "linear"};
    if (s.opset >= 11)
      modes.push_back("cubic");
    std::string mode = pick(modes);
    s.attrs.push_back(stringAttr("mode", mode));
    std::string coordinates = "asymmetric";
    if (s.opset >= 11) {
      std::vector<std::string> choices = {"half_pixel", "pytorch_half_pixel",
                                          "align_corners", "asymmetric",
                                          "tf_crop_and_resize"};
      if (s.opset == 11)
        choices.push_back("tf_half_pixel_for_nn");
      if (s.opset >= 19)
        choices.push_back("half_pixel_symmetric");
      coordinates = pick(choices);
      s.attrs.push_back(
          stringAttr("coordinate_transformation_mode", coordinates));
      s.attrs.push_back(stringAttr(
          "nearest_mode",
          pick(std::vector<std::string>{
              "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})));
      s.attrs.push_back(floatAttr(
          "cubic_coeff_a", pick(std::vector<float>{-0.75f, -0.5f, -0.6f})));
      s.attrs.push_back(intAttr("exclude_outside", chance(0.4) ? 1 : 0));
      s.attrs.push_back(floatAttr("extrapolation_value",
                                  pick(std::vector<float>{0.0f, -2.5f, 7.0f})));
    }
    // The resized axes: all, or (opset 18+) a permuted subset, sometimes
    // written from the end.
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
    if (s.opset >= 18 && chance(0.5)) {
      std::shuffle(axes.begin(), axes.end(), rng);
      axes.resize(std::uniform_int_distribution<size_t>(1, axes.size())(rng));
      std::vector<int64_t> written = axes;
      for (int64_t &axis : written)
        if (chance(0.3))
          axis -= rank;
      s.attrs.push_back(intsAttr("axes", written));
    }
    bool bySizes = s.opset >= 11 && chance(0.35);
    if (bySizes) {
      s.hasSizes = true;
      for (size_t i = 0; i < axes.size(); ++i)
        s.sizes.push_back(std::uniform_int_distribution<int64_t>(1, 9)(rng));
      if (s.opset >= 18 && axes.size() > 1 && chance(0.5))
        s.attrs.push_back(stringAttr(
            "keep_aspect_ratio_policy",
            pick(std::vector<std::string>{"not_larger", "not_smaller"})));
      // Opset 11 needs the (empty) scales operand before sizes.
      s.hasScales = true;
    } else {
      s.hasScales = true;
      for (int64_t axis : axes) {
        float scale = pick(scaleChoices);
        while (std::floor(double(scale) * double(s.xShape[axis])) < 1)
          scale = pick(scaleChoices);
        s.scales.push_back(scale);
      }
    }
    if (coordinates == "tf_crop_and_resize") {
      s.hasRoi = true;
      std::vector<float> starts, ends;
      for (size_t i = 0; i < axes.size(); ++i) {
        float start = std::uniform_real_distribution<float>(-0.3f, 0.7f)(rng);
        float end = std::uniform_real_distribution<float>(0.3f, 1.3f)(rng);
        if (chance(0.2))
          std::swap(start, end); // A reversed region.
        starts.push_back(start);
        ends.push_back(end);
      }
      s.roi = starts;
      s.roi.insert(s.roi.end(), ends.begin(), ends.end());
    } else if (s.opset >= 11 && chance(0.3)) {
      // A roi that coordinate modes other than tf_crop_and_resize ignore.
      s.hasRoi = true;
      s.roi.assign(2 * axes.size(), 0.25f);
    }
    // Keep the output small: the CPU kernel and the host loop are serial.
    double outElements = 1;
    for (size_t i = 0; i < s.xShape.size(); ++i) {
      auto at = std::find(axes.begin(), axes.end(), int64_t(i));
      size_t k = size_t(at - axes.begin());
      outElements *= at == axes.end() ? double(s.xShape[i])
                     : bySizes        ? double(s.sizes[k]) * 2
                                      : double(s.scales[k]) * s.xShape[i];
    }
    if (outElements > 3000)
      continue;
    specs.push_back(std::move(s));
  }
  return specs;
}

/// A TensorData of \p dtype and \p shape holding \p values (rounded to a
/// 16-bit type as HostTensor rounds them).
TensorData floatData(DType dtype, std::vector<int64_t> shape,
                     const std::vector<float> &values) {
  if (dtype == DType::F16) {
    std::vector<uint16_t> bits;
    for (float v : values)
      bits.push_back(floatToHalf(v));
    return TensorData::fromValues<uint16_t>(dtype, shape, bits);
  }
  if (dtype == DType::BF16) {
    std::vector<uint16_t> bits;
    for (float v : values)
      bits.push_back(floatToBFloat16(v));
    return TensorData::fromValues<uint16_t>(dtype, shape, bits);
  }
  return TensorData::fromValues<float>(DType::F32, shape, values);
}

HostTensor hostTensor(DType dtype, std::vector<int64_t> shape,
                      const std::vector<float> &values) {
  if (dtype == DType::F16)
    return HostTensor::f16(std::move(shape), values);
  if (dtype == DType::BF16)
    return HostTensor::bf16(std::move(shape), values);
  return HostTensor::f32(std::move(shape), values);
}

/// A one-node module: Resize(X, roi, scales, sizes) of \p spec (opset 10:
/// Resize(X, scales)), or (\p grad) ResizeGrad(dY, X, roi, scales) for the
/// forward's output shape; X (and dY) are graph inputs of \p dtype, the
/// rest initializers unless \p inputsAreConstant is false. Null when shape
/// inference refuses the configuration.
struct BuiltNode {
  std::unique_ptr<Module> module;
  Node *node = nullptr;
  std::vector<int64_t> yShape;
  std::string error;
};

BuiltNode buildNode(const ResizeSpec &s, DType dtype, bool grad,
                    bool inputsAreConstant = true) {
  BuiltNode built;
  built.module = std::make_unique<Module>();
  Module &module = *built.module;
  module.opsetImports[""] = s.opset;
  module.opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module.getGraph();
  auto operand = [&](TensorData data, const char *name) -> Value * {
    if (inputsAreConstant)
      return graph.addInitializer(std::move(data), name);
    return graph.addInput(data.getType(), name);
  };
  auto f32s = [](const std::vector<float> &values) {
    return TensorData::fromValues<float>(DType::F32, {int64_t(values.size())},
                                         values);
  };
  Value *x = graph.addInput(TensorType::get(dtype, s.xShape), "x");
  Value *roi = s.hasRoi ? operand(f32s(s.roi), "roi") : nullptr;
  Value *scales = s.hasScales ? operand(f32s(s.scales), "scales") : nullptr;
  Value *sizes =
      s.hasSizes ? operand(TensorData::fromValues<int64_t>(
                               DType::I64, {int64_t(s.sizes.size())}, s.sizes),
                           "sizes")
                 : nullptr;
  std::vector<Value *> operands = {x};
  if (s.opset < 11) {
    operands.push_back(scales);
  } else {
    operands.push_back(roi);
    operands.push_back(scales);
    if (sizes)
      operands.push_back(sizes);
  }
  Builder builder(graph);
  llvm::Expected<Node *> forward = nullptr;
  if (inputsAreConstant) {
    forward = builder.createInferred(OpName{"", "Resize"}, operands, 1, s.attrs,
                                     "fw");
  } else {
    // Shape inference cannot follow operands that are not constants: the
    // output type is the constant configuration's.
    BuiltNode constant = buildNode(s, dtype, /*grad=*/false);
    if (!constant.node) {
      built.error = constant.error;
      return built;
    }
    forward = builder.create(OpName{"", "Resize"}, operands,
                             {TensorType::get(dtype, constant.yShape)}, s.attrs,
                             "fw");
  }
  if (!forward) {
    built.error = llvm::toString(forward.takeError());
    return built;
  }
  if (!(*forward)->getResult(0)->getType().hasStaticShape()) {
    built.error = "no static output shape";
    return built;
  }
  auto yShape = (*forward)->getResult(0)->getType().getStaticShape();
  built.yShape.assign(yShape.begin(), yShape.end());
  if (!grad) {
    built.node = *forward;
    graph.addOutput(built.node->getResult(0));
    return built;
  }
  // ResizeGrad reads the forward's attributes; it takes scales, never
  // sizes (the scales are then the shapes' ratio).
  graph.eraseNode(*forward);
  Value *dY = graph.addInput(TensorType::get(dtype, built.yShape), "dy");
  std::vector<Value *> gradOperands = {dY, x, roi};
  if (s.hasScales && !s.scales.empty())
    gradOperands.push_back(scales);
  built.node =
      builder.create(OpName{std::string(kMsDomain), "ResizeGrad"}, gradOperands,
                     {TensorType::get(dtype, s.xShape)}, s.attrs, "bw");
  graph.addOutput(built.node->getResult(0));
  return built;
}

/// Random values in [-1, 1).
std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Stored elements as ResizeMath.h's element types.
template <typename T> std::vector<T> storedAs(const HostTensor &tensor) {
  std::vector<T> stored(tensor.bytes.size() / sizeof(T));
  std::memcpy(stored.data(), tensor.bytes.data(), tensor.bytes.size());
  return stored;
}

/// The storage bits of fp32 \p v in \p dtype.
uint32_t storedBits(DType dtype, float v) {
  if (dtype == DType::F16)
    return cuda::narrowToHalf(v);
  if (dtype == DType::BF16)
    return cuda::narrowToBFloat16(v);
  return cuda::bitsOfFloat(v);
}

/// The stored bits of element \p i of \p tensor (f32, f16 or bf16).
uint32_t bitsAt(const HostTensor &tensor, size_t i) {
  if (tensor.dtype == DType::F32)
    return tensor.values<uint32_t>()[i];
  return tensor.values<uint16_t>()[i];
}

/// ResizeMath.h over every element, on the host: Resize's output or
/// ResizeGrad's dX, as the stored bits of \p dtype.
std::vector<uint32_t> hostKernel(const cuda::ResizeParams &params, bool grad,
                                 const HostTensor &input, int64_t elements) {
  std::vector<uint32_t> bits;
  auto run = [&](const auto *data) {
    for (int64_t i = 0; i < elements; ++i) {
      float v = grad ? cuda::resizeGradElement(params, data, i)
                     : float(cuda::resizeElement(params, data, i));
      bits.push_back(storedBits(input.dtype, v));
    }
  };
  if (input.dtype == DType::F16)
    run(storedAs<cuda::HalfBits>(input).data());
  else if (input.dtype == DType::BF16)
    run(storedAs<cuda::BFloat16Bits>(input).data());
  else
    run(storedAs<float>(input).data());
  return bits;
}

/// Checks ResizeMath.h against the CPU kernel on \p s in \p dtype, forward
/// or gradient; false when the configuration is not one to check (shape
/// inference or, in agreement, both kernels refuse it).
bool matchesCpu(const ResizeSpec &s, DType dtype, bool grad, unsigned seed) {
  BuiltNode built = buildNode(s, dtype, grad);
  if (!built.node)
    return false;
  auto params = cuda::planResize(*built.node);
  int64_t inElements = elementsOf(s.xShape);
  int64_t outElements = elementsOf(built.yShape);
  HostTensor x =
      hostTensor(dtype, s.xShape, randomFloats(size_t(inElements), seed));
  HostTensor dY = hostTensor(dtype, built.yShape,
                             randomFloats(size_t(outElements), seed + 1));
  HostTensor roi = HostTensor::f32({int64_t(s.roi.size())}, s.roi);
  HostTensor scales = HostTensor::f32({int64_t(s.scales.size())}, s.scales);
  HostTensor sizes = HostTensor::i64({int64_t(s.sizes.size())}, s.sizes);
  KernelRunner runner;
  runner.setOpset("", s.opset);
  llvm::Expected<std::vector<HostTensor>> cpu = std::vector<HostTensor>();
  if (grad) {
    std::vector<HostTensor *> operands = {&dY, &x, s.hasRoi ? &roi : nullptr};
    if (s.hasScales && !s.scales.empty())
      operands.push_back(&scales);
    cpu = runner.run(kMsDomain, "ResizeGrad", operands,
                     {TensorType::get(dtype, s.xShape)}, s.attrs);
  } else {
    std::vector<HostTensor *> operands = {&x};
    if (s.opset < 11) {
      operands.push_back(&scales);
    } else {
      operands.push_back(s.hasRoi ? &roi : nullptr);
      operands.push_back(s.hasScales ? &scales : nullptr);
      if (s.hasSizes)
        operands.push_back(&sizes);
    }
    cpu = runner.run("", "Resize", operands,
                     {TensorType::get(dtype, built.yShape)}, s.attrs);
  }
  if (!params) {
    std::string planError = llvm::toString(params.takeError());
    EXPECT_FALSE(bool(cpu))
        << "the plan refuses what the CPU kernel runs: " << planError;
    if (!cpu)
      llvm::consumeError(cpu.takeError());
    return false;
  }
  if (!cpu) {
    ADD_FAILURE() << "the CPU kernel refuses what the plan accepts: "
                  << llvm::toString(cpu.takeError());
    return false;
  }
  const HostTensor &expected = (*cpu)[0];
  std::vector<uint32_t> got =
      hostKernel(*params, grad, grad ? dY : x, grad ? inElements : outElements);
  EXPECT_EQ(got.size() * (dtype == DType::F32 ? 4 : 2), expected.bytes.size());
  unsigned mismatches = 0;
  for (size_t i = 0; i < got.size() && i * 4 < expected.bytes.size(); ++i)
    if (got[i] != bitsAt(expected, i) && ++mismatches <= 3)
      ADD_FAILURE() << "element " << i << ": bits " << std::hex << got[i]
                    << " vs the CPU kernel's " << bitsAt(expected, i)
                    << std::dec;
  EXPECT_EQ(mismatches, 0u);
  return true;
}

const DType kStorages[] = {DType::F32, DType::F16, DType::BF16};

TEST(CudaResizeTest, ElementsAreTheCpuKernelsOnTheReferenceCases) {
  std::vector<ResizeSpec> specs = referenceSpecs();
  ASSERT_GE(specs.size(), 60u);
  unsigned forward = 0, backward = 0, seed = 1;
  for (const ResizeSpec &s : specs)
    for (DType dtype : kStorages) {
      SCOPED_TRACE(s.name + " " + dtypeName(dtype).str());
      forward += matchesCpu(s, dtype, /*grad=*/false, seed++);
      backward += matchesCpu(s, dtype, /*grad=*/true, seed++);
    }
  EXPECT_EQ(forward, 3 * specs.size());
  // ResizeGrad reads attributes at opset 19's rules: only opset 11's
  // tf_half_pixel_for_nn (none of the reference cases) would be refused.
  EXPECT_EQ(backward, 3 * specs.size());
}

TEST(CudaResizeTest, ElementsAreTheCpuKernelsOnRandomConfigurations) {
  std::vector<ResizeSpec> specs = randomSpecs(600, 11);
  unsigned forward = 0, backward = 0, seed = 100;
  for (const ResizeSpec &s : specs) {
    DType dtype = kStorages[seed % 3];
    SCOPED_TRACE(s.name + " " + dtypeName(dtype).str());
    forward += matchesCpu(s, dtype, /*grad=*/false, seed++);
    backward += matchesCpu(s, dtype, /*grad=*/true, seed++);
  }
  EXPECT_GE(forward, 500u);
  EXPECT_GE(backward, 400u);
}

/// A large upsampling, where each input element gathers from many output
/// coordinates, and a large downsampling, where most are read by none.
TEST(CudaResizeTest, GradientGathersAcrossLargeScales) {
  unsigned seed = 900;
  for (const char *mode : {"nearest", "linear", "cubic"})
    for (const char *coordinates :
         {"half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"})
      for (std::vector<float> scales :
           {std::vector<float>{1, 1, 13, 9.5f},
            std::vector<float>{1, 1, 0.07f, 0.13f}}) {
        ResizeSpec s;
        s.name = std::string(mode) + "_" + coordinates;
        s.attrs = {stringAttr("mode", mode),
                   stringAttr("coordinate_transformation_mode", coordinates),
                   intAttr("exclude_outside", seed % 2)};
        s.xShape = scales[2] > 1 ? std::vector<int64_t>{1, 2, 5, 4}
                                 : std::vector<int64_t>{1, 2, 60, 40};
        s.hasScales = true;
        s.scales = scales;
        if (std::string(coordinates) == "tf_crop_and_resize") {
          s.hasRoi = true;
          s.roi = {0, 0, 0.9f, -0.2f, 1, 1, 0.1f, 1.2f};
        }
        SCOPED_TRACE(s.name);
        EXPECT_TRUE(matchesCpu(s, DType::F32, /*grad=*/true, seed++));
        EXPECT_TRUE(matchesCpu(s, DType::F32, /*grad=*/false, seed++));
      }
}

/// The plan's error for \p node (empty when it accepts it).
std::string planRefusalOf(const Node &node) {
  auto params = cuda::planResize(node);
  return params ? std::string() : llvm::toString(params.takeError());
}

/// The plan's error for \p s (empty when it accepts it).
std::string planRefusal(const ResizeSpec &s, DType dtype, bool grad,
                        bool inputsAreConstant = true) {
  BuiltNode built = buildNode(s, dtype, grad, inputsAreConstant);
  if (!built.node)
    return "not built: " + built.error;
  auto params = cuda::planResize(*built.node);
  return params ? std::string() : llvm::toString(params.takeError());
}

ResizeSpec linearSpec() {
  ResizeSpec s;
  s.opset = 13;
  s.attrs = {stringAttr("mode", "linear")};
  s.xShape = {1, 1, 4, 4};
  s.hasScales = true;
  s.scales = {1, 1, 2, 0.5f};
  return s;
}

TEST(CudaResizeTest, PlanRefusesOperandsTheHostCannotRead) {
  ResizeSpec s = linearSpec();
  EXPECT_EQ(planRefusal(s, DType::F32, false), "");
  EXPECT_EQ(planRefusal(s, DType::F32, true), "");
  std::string refusal = planRefusal(s, DType::F32, false, false);
  EXPECT_NE(refusal.find("'scales' must be a constant"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("node"), std::string::npos) << refusal;
  refusal = planRefusal(s, DType::F32, true, false);
  EXPECT_NE(refusal.find("'scales' must be a constant"), std::string::npos)
      << refusal;

  ResizeSpec bySizes = linearSpec();
  bySizes.hasScales = false;
  bySizes.scales.clear();
  bySizes.hasSizes = true;
  bySizes.sizes = {1, 1, 8, 2};
  EXPECT_EQ(planRefusal(bySizes, DType::F32, false), "");
  refusal = planRefusal(bySizes, DType::F32, false, false);
  EXPECT_NE(refusal.find("'sizes' must be a constant"), std::string::npos)
      << refusal;

  // roi must be a constant for tf_crop_and_resize only.
  ResizeSpec withRoi = linearSpec();
  withRoi.hasRoi = true;
  withRoi.roi = {0, 0, 0.1f, 0.2f, 1, 1, 0.9f, 0.8f};
  Module module;
  module.opsetImports[""] = 13;
  Graph &graph = module.getGraph();
  Value *x = graph.addInput(TensorType::get(DType::F32, {1, 1, 4, 4}), "x");
  Value *roi = graph.addInput(TensorType::get(DType::F32, {8}), "roi");
  Value *scales = graph.addInitializer(
      TensorData::fromValues<float>(DType::F32, {4}, {1, 1, 2, 0.5f}),
      "scales");
  Builder builder(graph);
  Node *ignored = builder.create(OpName{"", "Resize"}, {x, roi, scales},
                                 {TensorType::get(DType::F32, {1, 1, 8, 2})},
                                 {stringAttr("mode", "linear")}, "ignored");
  EXPECT_EQ(planRefusalOf(*ignored), "");
  Node *crop = builder.create(
      OpName{"", "Resize"}, {x, roi, scales},
      {TensorType::get(DType::F32, {1, 1, 8, 2})},
      {stringAttr("mode", "linear"),
       stringAttr("coordinate_transformation_mode", "tf_crop_and_resize")},
      "crop");
  auto cropParams = cuda::planResize(*crop);
  ASSERT_FALSE(bool(cropParams));
  refusal = llvm::toString(cropParams.takeError());
  EXPECT_NE(refusal.find("'roi' must be a constant"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("crop"), std::string::npos) << refusal;
}

/// Scales computed as PyTorch exports them (a Concat of constants) and
/// sizes computed from a static shape are known at compile time: the plan
/// takes them, as shape inference does, and gets the constants' parameters.
TEST(CudaResizeTest, PlanTracesOperandsToConstants) {
  Module module;
  module.opsetImports[""] = 13;
  Graph &graph = module.getGraph();
  Value *x = graph.addInput(TensorType::get(DType::F32, {1, 2, 4, 4}), "x");
  auto f32s = [&](std::vector<float> values, const char *name) {
    return graph.addInitializer(
        TensorData::fromValues<float>(DType::F32, {int64_t(values.size())},
                                      values),
        name);
  };
  Builder builder(graph);
  Node *concat = builder.create(
      OpName{"", "Concat"}, {f32s({1, 1}, "ones"), f32s({2, 1.5f}, "up")},
      {TensorType::get(DType::F32, {4})}, {intAttr("axis", 0)}, "concat");
  Node *traced =
      builder.create(OpName{"", "Resize"}, {x, nullptr, concat->getResult(0)},
                     {TensorType::get(DType::F32, {1, 2, 8, 6})},
                     {stringAttr("mode", "linear")}, "traced");
  auto params = cuda::planResize(*traced);
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  EXPECT_EQ(params->axes[2].scale, 2.0);
  EXPECT_EQ(params->axes[3].scale, 1.5);
  EXPECT_EQ(params->axes[3].outLen, 6);
  EXPECT_EQ(params->planeRank, 2);

  // sizes = Shape(x) (static), as an exporter computes an output size.
  Node *shape = builder.create(OpName{"", "Shape"}, {x},
                               {TensorType::get(DType::I64, {4})}, {}, "shape");
  Node *bySizes = builder.create(OpName{"", "Resize"},
                                 {x, nullptr, nullptr, shape->getResult(0)},
                                 {TensorType::get(DType::F32, {1, 2, 4, 4})},
                                 {stringAttr("mode", "cubic")}, "sized");
  params = cuda::planResize(*bySizes);
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  EXPECT_EQ(params->axes[2].outLen, 4);
  EXPECT_EQ(params->axes[2].scale, 1.0);

  // A scale that only the running step knows is refused.
  Value *runtime = graph.addInput(TensorType::get(DType::F32, {2}), "s");
  Node *late = builder.create(
      OpName{"", "Concat"}, {f32s({1, 1}, "ones2"), runtime},
      {TensorType::get(DType::F32, {4})}, {intAttr("axis", 0)}, "late");
  Node *refused =
      builder.create(OpName{"", "Resize"}, {x, nullptr, late->getResult(0)},
                     {TensorType::get(DType::F32, {1, 2, 8, 6})},
                     {stringAttr("mode", "linear")}, "refused");
  params = cuda::planResize(*refused);
  ASSERT_FALSE(bool(params));
  std::string refusal = llvm::toString(params.takeError());
  EXPECT_NE(refusal.find("'scales' must be a constant"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("refused"), std::string::npos) << refusal;
}

/// The U-Net export of tests/lit/autodiff/resize.test (torch.onnx.export:
/// nearest and linear with Concat'ed constant scales, cubic with sizes from
/// a Shape->Slice->Concat subgraph), trained: every Resize and ResizeGrad
/// runs on the CUDA kernels.
TEST(CudaResizeTest, TrainedUNetExportRunsOnTheCudaKernels) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  OnnxImportOptions options;
  options.dimBindings = {{"batch", 2}};
  auto module =
      importOnnxFile(testSourceDir() + "/tests/lit/autodiff/Inputs/unet_resize/"
                                       "model.onnx",
                     options);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  PassManager passes;
  ASSERT_FALSE(bool(
      passes.addPipeline("canonicalize,autodiff{loss=\"mse:output,target\"}")));
  ASSERT_FALSE(bool(passes.run(**module)));
  unsigned resizes = 0, grads = 0;
  for (const Node &node : (*module)->getGraph().getNodes()) {
    if (node.getOpType() != "Resize" && node.getOpType() != "ResizeGrad")
      continue;
    (node.getOpType() == "Resize" ? resizes : grads) += 1;
    llvm::Error err = checkCudaNode(node);
    EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }
  EXPECT_EQ(resizes, 3u);
  EXPECT_EQ(grads, 3u);
}

TEST(CudaResizeTest, PlanRefusesWhatTheCpuKernelRefuses) {
  // antialias (opset 18) is refused by the shared attribute reading.
  BuiltNode built = buildNode(linearSpec(), DType::F32, false);
  ASSERT_TRUE(built.node) << built.error;
  built.node->setAttr("antialias", Attribute::getInt(1));
  built.module->opsetImports[""] = 18;
  auto params = cuda::planResize(*built.node);
  ASSERT_FALSE(bool(params));
  std::string refusal = llvm::toString(params.takeError());
  EXPECT_NE(refusal.find("antialias"), std::string::npos) << refusal;

  // More axes than the kernels index.
  ResizeSpec deep;
  deep.attrs = {stringAttr("mode", "nearest")};
  deep.xShape = std::vector<int64_t>(9, 1);
  deep.hasScales = true;
  deep.scales = std::vector<float>(9, 1.0f);
  refusal = planRefusal(deep, DType::F32, false);
  EXPECT_NE(refusal.find("at most 8 axes"), std::string::npos) << refusal;

  // An output shape that is not the geometry's.
  BuiltNode wrong = buildNode(linearSpec(), DType::F32, false);
  ASSERT_TRUE(wrong.node) << wrong.error;
  wrong.node->getResult(0)->setType(TensorType::get(DType::F32, {1, 1, 8, 3}));
  params = cuda::planResize(*wrong.node);
  ASSERT_FALSE(bool(params));
  refusal = llvm::toString(params.takeError());
  EXPECT_NE(refusal.find("output's shape"), std::string::npos) << refusal;
}

/// checkCudaNode's error for \p s (empty when it accepts it).
std::string checkRefusal(const ResizeSpec &s, DType dtype, bool grad,
                         bool inputsAreConstant = true) {
  BuiltNode built = buildNode(s, dtype, grad, inputsAreConstant);
  if (!built.node)
    return "not built: " + built.error;
  llvm::Error err = checkCudaNode(*built.node);
  return err ? llvm::toString(std::move(err)) : std::string();
}

TEST(CudaResizeTest, ChecksRefuseWhatTheKernelsCannotRun) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  ResizeSpec s = linearSpec();
  for (DType dtype : kStorages) {
    EXPECT_EQ(checkRefusal(s, dtype, false), "");
    EXPECT_EQ(checkRefusal(s, dtype, true), "");
  }
  std::string refusal = checkRefusal(s, DType::F64, false);
  EXPECT_NE(refusal.find("is not supported (f32, f16, bf16)"),
            std::string::npos)
      << refusal;
  refusal = checkRefusal(s, DType::F64, true);
  EXPECT_NE(refusal.find("is not supported (f32, f16, bf16)"),
            std::string::npos)
      << refusal;
  refusal = checkRefusal(s, DType::F32, false, /*inputsAreConstant=*/false);
  EXPECT_NE(refusal.find("must be a constant (an initializer"),
            std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("CUDA kernel for"), std::string::npos) << refusal;
  // X and Y of different storage.
  BuiltNode mixed = buildNode(s, DType::F32, false);
  ASSERT_TRUE(mixed.node) << mixed.error;
  mixed.node->getResult(0)->setType(TensorType::get(DType::F16, {1, 1, 8, 2}));
  llvm::Error err = checkCudaNode(*mixed.node);
  ASSERT_TRUE(bool(err));
  refusal = llvm::toString(std::move(err));
  EXPECT_NE(refusal.find("mix element types"), std::string::npos) << refusal;
}

TEST(CudaResizeTest, KernelsEqualTheCpuBackendOnTheDevice) {
  auto device = probeCudaDevice();
  if (!device)
    GTEST_SKIP() << "needs a CUDA device (no CUDA device): "
                 << llvm::toString(device.takeError());
  std::vector<ResizeSpec> specs = referenceSpecs();
  std::vector<ResizeSpec> random = randomSpecs(120, 23);
  specs.insert(specs.end(), random.begin(), random.end());
  unsigned compared = 0, seed = 5000;
  for (const ResizeSpec &s : specs)
    for (DType dtype : kStorages)
      for (bool grad : {false, true}) {
        SCOPED_TRACE(s.name + " " + dtypeName(dtype).str() +
                     (grad ? " ResizeGrad" : " Resize"));
        std::vector<TensorData> outputs[2];
        unsigned inputSeed = seed;
        seed += 4;
        bool ran = true;
        for (int onCuda = 0; onCuda < 2 && ran; ++onCuda) {
          inputSeed = seed - 4; // The same inputs on both backends.
          BuiltNode built = buildNode(s, dtype, grad);
          if (!built.node || !planRefusalOf(*built.node).empty()) {
            ran = false;
            break;
          }
          const Graph &graph = built.module->getGraph();
          ExecutorOptions options;
          options.mode = AllocationMode::Eager;
          options.threads = 1;
          auto exe = onCuda ? prepareCudaExecutable(*built.module, options)
                            : prepareCpuExecutable(*built.module, options);
          ASSERT_TRUE(bool(exe)) << llvm::toString(exe.takeError());
          for (const auto &input : graph.getInputs()) {
            const TensorType &type = input->getType();
            TensorData data =
                floatData(type.getDType(),
                          std::vector<int64_t>(type.getStaticShape().begin(),
                                               type.getStaticShape().end()),
                          randomFloats(type.getNumElements(), inputSeed++));
            ASSERT_FALSE(bool((*exe)->setInput(input.get(), data)));
          }
          ASSERT_FALSE(bool((*exe)->runStep(0)));
          for (const Value *out : graph.getOutputs()) {
            auto value = (*exe)->readValue(out);
            ASSERT_TRUE(bool(value)) << llvm::toString(value.takeError());
            outputs[onCuda].push_back(std::move(*value));
          }
        }
        if (!ran)
          continue;
        ASSERT_EQ(outputs[0].size(), outputs[1].size());
        for (size_t i = 0; i < outputs[0].size(); ++i)
          EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "output " << i;
        ++compared;
      }
  EXPECT_GE(compared, 600u);
}

} // namespace
