//===- CudnnGeometryTest.cpp - The CUDA CNN path's host logic vs the CPU --===//
//
// Host tests (no GPU, every build) of what the CUDA backend's CNN entries
// derive on the host: the window parameters resolved from a node's ONNX
// attributes (pads split, auto_pad SAME_UPPER / SAME_LOWER / VALID,
// strides, dilations, groups, ceil_mode, count_include_pad,
// storage_order; 1-D as 2-D), the per-element pooling arithmetic the CUDA
// kernels run (PoolMath.h), and the CUDA workspace model's convolution and
// batch-norm bounds. Pools must agree with the CPU kernels bit for bit; a
// direct convolution over the parameters handed to cuDNN (begin pads,
// strides, dilations, groups, the graph's output extents) must reproduce
// the CPU backend's im2col convolution. Asymmetric pads are run as a
// convolution of the explicitly padded input with zero pads (and ConvGrad's
// padded dX cropped): through the pad / crop index maps (ConvPadMath.h)
// the CPU kernels must give what the node with its own pads gives, and the
// workspace model must reserve the padded buffers (and a 16-bit
// MaxPoolGrad's fp32 accumulator). The pools in f16 / bf16 storage must
// match the CPU backend's staged kernels bit for bit. Where the CUDA
// backend is built, its kernel check must accept these nodes (16-bit
// storage, asymmetric pads) and refuse, naming the node, what the kernels
// cannot run.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudnnGeometry.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/PoolMath.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace gmopt;
using namespace gmopt::cpu::testing;

namespace {

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

uint32_t bitsOf(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

NamedAttribute ints(const char *name, std::vector<int64_t> values) {
  return {name, Attribute::getInts(std::move(values))};
}
NamedAttribute integer(const char *name, int64_t value) {
  return {name, Attribute::getInt(value)};
}
NamedAttribute text(const char *name, const char *value) {
  return {name, Attribute::getString(value)};
}

/// A module holding nodes built on fresh f32 inputs.
struct NodeFactory {
  Module module;
  NodeFactory() {
    module.opsetImports[""] = 17;
    module.opsetImports[std::string(kMsDomain)] = 1;
  }
  /// (domain, op) on inputs of \p inputTypes with \p resultTypes (an
  /// Undefined type drops that result).
  Node *make(llvm::StringRef domain, llvm::StringRef op,
             std::vector<TensorType> inputTypes,
             std::vector<TensorType> resultTypes,
             std::vector<NamedAttribute> attrs) {
    Graph &graph = module.getGraph();
    std::vector<Value *> operands;
    for (const TensorType &type : inputTypes)
      operands.push_back(
          graph.addInput(type, "in" + std::to_string(inputIndex++)));
    Builder builder(graph);
    Node *node = builder.create(OpName{domain.str(), op.str()}, operands,
                                resultTypes, attrs, op.str());
    for (unsigned i = 0; i < resultTypes.size(); ++i)
      if (resultTypes[i].getDType() == DType::Undefined)
        graph.dropResult(node, i);
    return node;
  }
  unsigned inputIndex = 0;
};

TensorType f32(std::vector<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

/// One pooling window configuration.
struct PoolCase {
  const char *what;
  std::vector<int64_t> in, out;
  std::vector<NamedAttribute> attrs;
};

std::vector<PoolCase> poolCases() {
  return {
      {"2x2 stride 2",
       {2, 3, 8, 8},
       {2, 3, 4, 4},
       {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})}},
      {"3x3 stride 2 pads 1",
       {2, 2, 8, 8},
       {2, 2, 4, 4},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
        ints("pads", {1, 1, 1, 1})}},
      {"asymmetric pads",
       {1, 2, 7, 6},
       {1, 2, 7, 3},
       {ints("kernel_shape", {3, 2}), ints("strides", {1, 2}),
        ints("pads", {2, 0, 0, 1})}},
      {"ceil_mode",
       {2, 2, 8, 8},
       {2, 2, 4, 4},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
        integer("ceil_mode", 1)}},
      {"dilations",
       {1, 3, 7, 7},
       {1, 3, 5, 5},
       {ints("kernel_shape", {2, 2}), ints("dilations", {2, 2})}},
      {"SAME_UPPER",
       {1, 2, 5, 5},
       {1, 2, 5, 5},
       {ints("kernel_shape", {2, 2}), text("auto_pad", "SAME_UPPER")}},
      {"SAME_LOWER stride 2",
       {1, 2, 7, 7},
       {1, 2, 4, 4},
       {ints("kernel_shape", {2, 2}), ints("strides", {2, 2}),
        text("auto_pad", "SAME_LOWER")}},
      {"VALID",
       {1, 2, 6, 6},
       {1, 2, 4, 4},
       {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}),
        text("auto_pad", "VALID")}},
      {"1-D",
       {2, 3, 10},
       {2, 3, 5},
       {ints("kernel_shape", {3}), ints("strides", {2}), ints("pads", {1, 0})}},
      {"count_include_pad, storage_order",
       {1, 2, 6, 5},
       {1, 2, 3, 3},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}),
        ints("pads", {1, 1, 1, 1}), integer("count_include_pad", 1),
        integer("storage_order", 1)}},
  };
}

} // namespace

TEST(CudnnGeometryTest, PoolWindowsMatchTheCpuRules) {
  // The pads split: SAME_UPPER puts the odd pixel at the end, SAME_LOWER
  // at the beginning; VALID drops the pads; 1-D is height 1.
  NodeFactory f;
  auto resolve = [&](std::vector<int64_t> in, std::vector<int64_t> out,
                     std::vector<NamedAttribute> attrs) {
    Node *node = f.make("", "AveragePool", {f32(in)}, {f32(out)}, attrs);
    auto window = cuda::resolvePoolParams(*node);
    EXPECT_TRUE(bool(window)) << llvm::toString(window.takeError());
    return window ? *window : cuda::WindowParams();
  };
  cuda::WindowParams upper =
      resolve({1, 1, 5, 5}, {1, 1, 5, 5},
              {ints("kernel_shape", {2, 2}), text("auto_pad", "SAME_UPPER")});
  EXPECT_EQ(upper.padTop, 0);
  EXPECT_EQ(upper.padBottom, 1);
  EXPECT_EQ(upper.padLeft, 0);
  EXPECT_EQ(upper.padRight, 1);
  cuda::WindowParams lower =
      resolve({1, 1, 5, 5}, {1, 1, 5, 5},
              {ints("kernel_shape", {2, 2}), text("auto_pad", "SAME_LOWER")});
  EXPECT_EQ(lower.padTop, 1);
  EXPECT_EQ(lower.padBottom, 0);
  cuda::WindowParams valid =
      resolve({1, 1, 6, 6}, {1, 1, 4, 4},
              {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}),
               text("auto_pad", "VALID")});
  EXPECT_EQ(valid.padTop + valid.padBottom + valid.padLeft + valid.padRight, 0);
  cuda::WindowParams oneD =
      resolve({2, 3, 10}, {2, 3, 5},
              {ints("kernel_shape", {3}), ints("strides", {2}),
               ints("pads", {1, 0}), integer("count_include_pad", 1)});
  EXPECT_EQ(oneD.inH, 1);
  EXPECT_EQ(oneD.outH, 1);
  EXPECT_EQ(oneD.kernelH, 1);
  EXPECT_EQ(oneD.inW, 10);
  EXPECT_EQ(oneD.outW, 5);
  EXPECT_EQ(oneD.padLeft, 1);
  EXPECT_EQ(oneD.padRight, 0);
  EXPECT_TRUE(oneD.includePad);
  // A wrong output extent is an error naming the node, as on the CPU.
  Node *bad = f.make("", "MaxPool", {f32({1, 1, 8, 8})}, {f32({1, 1, 5, 5})},
                     {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})});
  auto error = cuda::resolvePoolParams(*bad);
  ASSERT_FALSE(bool(error));
  std::string message = llvm::toString(error.takeError());
  EXPECT_NE(message.find("disagrees with the computed 4"), std::string::npos)
      << message;
  EXPECT_NE(message.find("MaxPool"), std::string::npos) << message;
  // ceil_mode allows the rounded-up extent only with the attribute.
  Node *ceil = f.make("", "MaxPool", {f32({1, 1, 8, 8})}, {f32({1, 1, 4, 4})},
                      {ints("kernel_shape", {3, 3}), ints("strides", {2, 2})});
  EXPECT_FALSE(bool(cuda::resolvePoolParams(*ceil)));
  llvm::consumeError(cuda::resolvePoolParams(*ceil).takeError());
}

TEST(CudnnGeometryTest, PoolArithmeticIsBitIdenticalToTheCpuKernels) {
  unsigned seed = 1;
  for (const PoolCase &c : poolCases()) {
    SCOPED_TRACE(c.what);
    int64_t inCount = count(c.in), outCount = count(c.out);
    std::vector<float> xs = randomFloats(inCount, seed++);
    xs[3] = NAN; // The first NaN of a window wins, on both.
    HostTensor x = HostTensor::f32(c.in, xs);
    std::vector<float> dys = randomFloats(outCount, seed++);
    HostTensor dy = HostTensor::f32(c.out, dys);
    KernelRunner runner;
    auto maxPool =
        runner.run("", "MaxPool", {&x},
                   {f32(c.out), TensorType::get(DType::I64, c.out)}, c.attrs);
    ASSERT_TRUE(bool(maxPool)) << llvm::toString(maxPool.takeError());
    auto avgPool = runner.run("", "AveragePool", {&x}, {f32(c.out)}, c.attrs);
    ASSERT_TRUE(bool(avgPool)) << llvm::toString(avgPool.takeError());
    auto avgGrad =
        runner.run("", "AveragePoolGrad", {&dy}, {f32(c.in)}, c.attrs);
    ASSERT_TRUE(bool(avgGrad)) << llvm::toString(avgGrad.takeError());

    NodeFactory f;
    Node *maxNode =
        f.make("", "MaxPool", {f32(c.in)},
               {f32(c.out), TensorType::get(DType::I64, c.out)}, c.attrs);
    Node *avgNode =
        f.make("", "AveragePool", {f32(c.in)}, {f32(c.out)}, c.attrs);
    Node *gradNode =
        f.make("", "AveragePoolGrad", {f32(c.out)}, {f32(c.in)}, c.attrs);
    auto gMax = cuda::resolvePoolParams(*maxNode);
    auto gAvg = cuda::resolvePoolParams(*avgNode);
    auto gGrad = cuda::resolvePoolParams(*gradNode);
    ASSERT_TRUE(bool(gMax) && bool(gAvg) && bool(gGrad));
    std::vector<float> cpuMax = (*maxPool)[0].floats();
    std::vector<int64_t> cpuIndices = (*maxPool)[1].values<int64_t>();
    std::vector<float> cpuAvg = (*avgPool)[0].floats();
    std::vector<float> cpuGrad = (*avgGrad)[0].floats();
    for (int64_t o = 0; o < outCount; ++o) {
      int64_t p = o / gMax->outSize(), within = o % gMax->outSize();
      int64_t oh = within / gMax->outW, ow = within % gMax->outW;
      float best;
      int64_t position;
      cuda::maxPoolElement(xs.data() + p * gMax->inSize(), *gMax, oh, ow, best,
                           position);
      EXPECT_EQ(bitsOf(best), bitsOf(cpuMax[o])) << "MaxPool output " << o;
      EXPECT_EQ(p * gMax->inSize() + position, cpuIndices[o])
          << "Indices output " << o;
      float avg = cuda::averagePoolElement(xs.data() + p * gAvg->inSize(),
                                           *gAvg, oh, ow);
      EXPECT_EQ(bitsOf(avg), bitsOf(cpuAvg[o])) << "AveragePool output " << o;
    }
    for (int64_t i = 0; i < inCount; ++i) {
      int64_t p = i / gGrad->inSize(), within = i % gGrad->inSize();
      float grad = cuda::averagePoolGradElement(
          dys.data() + p * gGrad->outSize(), *gGrad, within / gGrad->inW,
          within % gGrad->inW);
      EXPECT_EQ(bitsOf(grad), bitsOf(cpuGrad[i])) << "AveragePoolGrad " << i;
    }
  }
}

TEST(CudnnGeometryTest, PoolArithmeticIn16BitStorageIsBitIdenticalToTheCpu) {
  // The CPU backend stages 16-bit pools as fp32 kernels on widened inputs
  // with rounded results; the CUDA kernels widen each element and round
  // each result: the same bits.
  unsigned seed = 50;
  for (DType dtype : {DType::F16, DType::BF16}) {
    bool isHalf = dtype == DType::F16;
    for (const PoolCase &c : poolCases()) {
      SCOPED_TRACE(std::string(c.what) + (isHalf ? " f16" : " bf16"));
      int64_t inCount = count(c.in), outCount = count(c.out);
      std::vector<float> xs = randomFloats(inCount, seed++);
      std::vector<float> dys = randomFloats(outCount, seed++);
      HostTensor x =
          isHalf ? HostTensor::f16(c.in, xs) : HostTensor::bf16(c.in, xs);
      HostTensor dy =
          isHalf ? HostTensor::f16(c.out, dys) : HostTensor::bf16(c.out, dys);
      TensorType outType = TensorType::get(dtype, c.out);
      TensorType inType = TensorType::get(dtype, c.in);
      KernelRunner runner;
      auto maxPool =
          runner.run("", "MaxPool", {&x},
                     {outType, TensorType::get(DType::I64, c.out)}, c.attrs);
      ASSERT_TRUE(bool(maxPool)) << llvm::toString(maxPool.takeError());
      auto avgPool = runner.run("", "AveragePool", {&x}, {outType}, c.attrs);
      ASSERT_TRUE(bool(avgPool)) << llvm::toString(avgPool.takeError());
      auto avgGrad =
          runner.run("", "AveragePoolGrad", {&dy}, {inType}, c.attrs);
      ASSERT_TRUE(bool(avgGrad)) << llvm::toString(avgGrad.takeError());

      NodeFactory f;
      Node *avgNode = f.make("", "AveragePool", {inType}, {outType}, c.attrs);
      Node *gradNode =
          f.make("", "AveragePoolGrad", {outType}, {inType}, c.attrs);
      auto g = cuda::resolvePoolParams(*avgNode);
      auto gGrad = cuda::resolvePoolParams(*gradNode);
      ASSERT_TRUE(bool(g) && bool(gGrad));
      // The device's view of the 16-bit bits.
      std::vector<uint16_t> xBits = x.values<uint16_t>();
      std::vector<uint16_t> dyBits = dy.values<uint16_t>();
      auto round = [&](float v) {
        return isHalf ? cuda::narrowToHalf(v) : cuda::narrowToBFloat16(v);
      };
      auto pool = [&](auto element, int64_t o, bool max, int64_t &position) {
        using T = decltype(element);
        const T *plane = reinterpret_cast<const T *>(xBits.data()) +
                         (o / g->outSize()) * g->inSize();
        int64_t within = o % g->outSize();
        int64_t oh = within / g->outW, ow = within % g->outW;
        if (!max)
          return cuda::averagePoolElement(plane, *g, oh, ow);
        float best;
        cuda::maxPoolElement(plane, *g, oh, ow, best, position);
        return best;
      };
      auto grad = [&](auto element, int64_t i) {
        using T = decltype(element);
        const T *plane = reinterpret_cast<const T *>(dyBits.data()) +
                         (i / gGrad->inSize()) * gGrad->outSize();
        int64_t within = i % gGrad->inSize();
        return cuda::averagePoolGradElement(plane, *gGrad, within / gGrad->inW,
                                            within % gGrad->inW);
      };
      std::vector<uint16_t> cpuMax = (*maxPool)[0].values<uint16_t>();
      std::vector<int64_t> cpuIndices = (*maxPool)[1].values<int64_t>();
      std::vector<uint16_t> cpuAvg = (*avgPool)[0].values<uint16_t>();
      std::vector<uint16_t> cpuGrad = (*avgGrad)[0].values<uint16_t>();
      for (int64_t o = 0; o < outCount; ++o) {
        int64_t position = 0, unused = 0;
        float best = isHalf ? pool(cuda::HalfBits{}, o, true, position)
                            : pool(cuda::BFloat16Bits{}, o, true, position);
        float avg = isHalf ? pool(cuda::HalfBits{}, o, false, unused)
                           : pool(cuda::BFloat16Bits{}, o, false, unused);
        EXPECT_EQ(round(best), cpuMax[o]) << "MaxPool output " << o;
        EXPECT_EQ((o / g->outSize()) * g->inSize() + position, cpuIndices[o])
            << "Indices output " << o;
        EXPECT_EQ(round(avg), cpuAvg[o]) << "AveragePool output " << o;
      }
      for (int64_t i = 0; i < inCount; ++i) {
        float share =
            isHalf ? grad(cuda::HalfBits{}, i) : grad(cuda::BFloat16Bits{}, i);
        EXPECT_EQ(round(share), cpuGrad[i]) << "AveragePoolGrad " << i;
      }
    }
  }
}

namespace {

/// One convolution configuration.
struct ConvCase {
  const char *what;
  std::vector<int64_t> x, w, y;
  std::vector<NamedAttribute> attrs;
  bool symmetric;
};

std::vector<ConvCase> convCases() {
  return {
      {"3x3 pads 1",
       {2, 3, 6, 6},
       {4, 3, 3, 3},
       {2, 4, 6, 6},
       {ints("pads", {1, 1, 1, 1})},
       true},
      {"stride 2, dilation 2",
       {1, 2, 9, 8},
       {3, 2, 3, 2},
       {1, 3, 4, 4},
       {ints("strides", {2, 2}), ints("dilations", {2, 2}),
        ints("pads", {1, 1, 1, 1})},
       true},
      {"groups 2",
       {2, 4, 5, 5},
       {6, 2, 3, 3},
       {2, 6, 3, 3},
       {integer("group", 2)},
       true},
      {"depthwise SAME_UPPER",
       {1, 3, 5, 5},
       {3, 1, 3, 3},
       {1, 3, 5, 5},
       {integer("group", 3), text("auto_pad", "SAME_UPPER")},
       true},
      {"SAME_LOWER even kernel",
       {1, 2, 5, 5},
       {2, 2, 2, 2},
       {1, 2, 5, 5},
       {text("auto_pad", "SAME_LOWER")},
       false},
      {"1-D",
       {2, 3, 11},
       {4, 3, 3},
       {2, 4, 6},
       {ints("strides", {2}), ints("pads", {1, 1})},
       true},
  };
}

/// The convolution cuDNN computes from \p p: cross-correlation with the
/// begin pads, strides, dilations and groups, over the graph's output
/// extents, plus the bias.
std::vector<float> directConv(const cuda::ConvParams &p,
                              const std::vector<float> &x,
                              const std::vector<float> &w,
                              const std::vector<float> &b) {
  const cuda::WindowParams &g = p.window;
  int64_t groupOut = p.outChannels / p.groups;
  std::vector<float> y(g.batch * p.outChannels * g.outSize());
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t m = 0; m < p.outChannels; ++m) {
      int64_t group = m / groupOut;
      for (int64_t oh = 0; oh < g.outH; ++oh)
        for (int64_t ow = 0; ow < g.outW; ++ow) {
          double sum = b.empty() ? 0 : b[m];
          for (int64_t c = 0; c < p.groupIn; ++c)
            for (int64_t ki = 0; ki < g.kernelH; ++ki) {
              int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
              if (ih < 0 || ih >= g.inH)
                continue;
              for (int64_t kj = 0; kj < g.kernelW; ++kj) {
                int64_t iw = ow * g.strideW - g.padLeft + kj * g.dilationW;
                if (iw < 0 || iw >= g.inW)
                  continue;
                int64_t channel = group * p.groupIn + c;
                sum +=
                    double(x[((n * g.channels + channel) * g.inH + ih) * g.inW +
                             iw]) *
                    w[((m * p.groupIn + c) * g.kernelH + ki) * g.kernelW + kj];
              }
            }
          y[((n * p.outChannels + m) * g.outH + oh) * g.outW + ow] =
              static_cast<float>(sum);
        }
    }
  return y;
}

} // namespace

TEST(CudnnGeometryTest, ConvParamsDescribeTheCpuConvolution) {
  unsigned seed = 100;
  for (const ConvCase &c : convCases()) {
    SCOPED_TRACE(c.what);
    std::vector<float> xs = randomFloats(count(c.x), seed++);
    std::vector<float> ws = randomFloats(count(c.w), seed++);
    std::vector<float> bs = randomFloats(c.w[0], seed++);
    HostTensor x = HostTensor::f32(c.x, xs), w = HostTensor::f32(c.w, ws),
               b = HostTensor::f32({c.w[0]}, bs);
    KernelRunner runner;
    auto cpu = runner.run("", "Conv", {&x, &w, &b}, {f32(c.y)}, c.attrs);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());

    NodeFactory f;
    Node *conv = f.make("", "Conv", {f32(c.x), f32(c.w), f32({c.w[0]})},
                        {f32(c.y)}, c.attrs);
    Node *grad = f.make(kMsDomain, "ConvGrad", {f32(c.y), f32(c.x), f32(c.w)},
                        {f32(c.x), f32(c.w), f32({c.w[0]})}, c.attrs);
    auto params = cuda::resolveConvParams(*conv);
    ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
    auto gradParams = cuda::resolveConvParams(*grad);
    ASSERT_TRUE(bool(gradParams)) << llvm::toString(gradParams.takeError());
    EXPECT_EQ(params->symmetricPads(), c.symmetric);
    EXPECT_EQ(params->spatialDims, c.x.size() - 2);
    // ConvGrad differentiates the same convolution.
    const cuda::WindowParams &a = params->window, &g = gradParams->window;
    EXPECT_EQ(
        std::vector<int64_t>({a.inH, a.inW, a.outH, a.outW, a.padTop, a.padLeft,
                              a.padBottom, a.padRight, a.strideH, a.strideW,
                              a.dilationH, a.dilationW}),
        std::vector<int64_t>({g.inH, g.inW, g.outH, g.outW, g.padTop, g.padLeft,
                              g.padBottom, g.padRight, g.strideH, g.strideW,
                              g.dilationH, g.dilationW}));
    EXPECT_EQ(params->groups, gradParams->groups);
    std::vector<float> expected = (*cpu)[0].floats();
    std::vector<float> actual = directConv(*params, xs, ws, bs);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(actual[i], expected[i], 1e-4 + 1e-5 * std::fabs(expected[i]))
          << "element " << i;
  }
}

TEST(CudnnGeometryTest, ExplicitPaddingReproducesTheAsymmetricConvolution) {
  // What the CUDA backend runs for asymmetric pads: X padded with the pad
  // kernel's index map, convolved with zero pads over the padded extents
  // (the ConvParams handed to cuDNN), and ConvGrad's padded dX cropped
  // with the crop kernel's map. On the CPU kernels that must give what the
  // node with its own pads gives: the im2col matrices hold the same
  // products, the padding's zeros read instead of skipped.
  struct Case {
    const char *what;
    std::vector<int64_t> x, w, y;
    std::vector<NamedAttribute> attrs;
  };
  std::vector<Case> cases = {
      {"SAME_UPPER even kernel",
       {2, 3, 7, 6},
       {4, 3, 2, 2},
       {2, 4, 7, 6},
       {text("auto_pad", "SAME_UPPER")}},
      {"SAME_LOWER stride 2",
       {1, 2, 8, 8},
       {3, 2, 3, 3},
       {1, 3, 4, 4},
       {text("auto_pad", "SAME_LOWER"), ints("strides", {2, 2})}},
      {"explicit pads, groups",
       {2, 4, 5, 6},
       {4, 2, 3, 2},
       {2, 4, 5, 6},
       {ints("pads", {2, 0, 0, 1}), integer("group", 2)}},
      {"1-D", {2, 3, 9}, {2, 3, 4}, {2, 2, 9}, {ints("pads", {2, 1})}},
  };
  unsigned seed = 300;
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    NodeFactory f;
    Node *conv = f.make("", "Conv", {f32(c.x), f32(c.w)}, {f32(c.y)}, c.attrs);
    auto params = cuda::resolveConvParams(*conv);
    ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
    ASSERT_FALSE(params->symmetricPads());
    cuda::ConvWorkspaceLayout layout =
        cuda::getConvWorkspaceLayout(*conv, *params);
    ASSERT_TRUE(layout.explicitPadding);
    const cuda::ConvPadGeometry &pad = layout.pad;
    const cuda::WindowParams &seen = layout.cudnn.window;
    // The padded shape, in the node's rank.
    std::vector<int64_t> paddedShape = {c.x[0], c.x[1]};
    if (c.x.size() == 4)
      paddedShape.push_back(pad.paddedH);
    paddedShape.push_back(pad.paddedW);
    std::vector<int64_t> zeroPads(2 * (c.x.size() - 2), 0);
    std::vector<NamedAttribute> seenAttrs = {
        ints("pads", zeroPads), integer("group", layout.cudnn.groups)};
    std::vector<int64_t> strides = {seen.strideH, seen.strideW};
    std::vector<int64_t> dilations = {seen.dilationH, seen.dilationW};
    if (c.x.size() == 3) {
      strides.erase(strides.begin());
      dilations.erase(dilations.begin());
    }
    seenAttrs.push_back(ints("strides", strides));
    seenAttrs.push_back(ints("dilations", dilations));

    std::vector<float> xs = randomFloats(count(c.x), seed++);
    std::vector<float> ws = randomFloats(count(c.w), seed++);
    std::vector<float> dys = randomFloats(count(c.y), seed++);
    std::vector<float> paddedXs(pad.paddedElements());
    for (int64_t i = 0; i < pad.paddedElements(); ++i) {
      int64_t source = cuda::padSourceIndex(pad, i);
      paddedXs[i] = source < 0 ? 0.0f : xs[source];
    }
    HostTensor x = HostTensor::f32(c.x, xs), w = HostTensor::f32(c.w, ws),
               dy = HostTensor::f32(c.y, dys),
               paddedX = HostTensor::f32(paddedShape, paddedXs);
    KernelRunner runner;
    auto own = runner.run("", "Conv", {&x, &w}, {f32(c.y)}, c.attrs);
    auto explicitly =
        runner.run("", "Conv", {&paddedX, &w}, {f32(c.y)}, seenAttrs);
    ASSERT_TRUE(bool(own)) << llvm::toString(own.takeError());
    ASSERT_TRUE(bool(explicitly)) << llvm::toString(explicitly.takeError());
    std::vector<float> expected = (*own)[0].floats(),
                       actual = (*explicitly)[0].floats();
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(bitsOf(actual[i]), bitsOf(expected[i])) << "Y " << i;

    auto ownGrad = runner.run(kMsDomain, "ConvGrad", {&dy, &x, &w},
                              {f32(c.x), f32(c.w), f32({c.w[0]})}, c.attrs);
    auto paddedGrad =
        runner.run(kMsDomain, "ConvGrad", {&dy, &paddedX, &w},
                   {f32(paddedShape), f32(c.w), f32({c.w[0]})}, seenAttrs);
    ASSERT_TRUE(bool(ownGrad)) << llvm::toString(ownGrad.takeError());
    ASSERT_TRUE(bool(paddedGrad)) << llvm::toString(paddedGrad.takeError());
    std::vector<float> dx = (*ownGrad)[0].floats(),
                       paddedDx = (*paddedGrad)[0].floats();
    ASSERT_EQ(static_cast<int64_t>(dx.size()), pad.elements());
    for (int64_t i = 0; i < pad.elements(); ++i) {
      float cropped = paddedDx[cuda::cropSourceIndex(pad, i)];
      EXPECT_NEAR(cropped, dx[i], 1e-6 + 1e-6 * std::fabs(dx[i])) << "dX " << i;
    }
    std::vector<float> dw = (*ownGrad)[1].floats(),
                       paddedDw = (*paddedGrad)[1].floats();
    ASSERT_EQ(dw.size(), paddedDw.size());
    for (size_t i = 0; i < dw.size(); ++i)
      EXPECT_NEAR(paddedDw[i], dw[i], 1e-6 + 1e-6 * std::fabs(dw[i]))
          << "dW " << i;
  }
}

TEST(CudnnGeometryTest, WorkspaceModelBoundsConvolutionAndBatchNorm) {
  NodeFactory f;
  // im2col of the whole batch: 8 images x 16 channels x 3x3 x 32x32 fp32.
  Node *conv = f.make("", "Conv", {f32({8, 16, 32, 32}), f32({32, 16, 3, 3})},
                      {f32({8, 32, 32, 32})}, {ints("pads", {1, 1, 1, 1})});
  uint64_t im2col = uint64_t(8) * 16 * 9 * 32 * 32 * 4;
  ASSERT_GT(im2col, cuda::kCudnnConvWorkspaceFloorBytes);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*conv), alignBuffer(im2col));
  Node *grad =
      f.make(kMsDomain, "ConvGrad",
             {f32({8, 32, 32, 32}), f32({8, 16, 32, 32}), f32({32, 16, 3, 3})},
             {f32({8, 16, 32, 32}), f32({32, 16, 3, 3}), f32({32})},
             {ints("pads", {1, 1, 1, 1})});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*grad), alignBuffer(im2col));
  // A ResNet-sized layer is capped; a tiny one gets the floor.
  Node *big =
      f.make("", "Conv", {f32({64, 256, 56, 56}), f32({256, 256, 3, 3})},
             {f32({64, 256, 56, 56})}, {ints("pads", {1, 1, 1, 1})});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*big),
            cuda::kCudnnConvWorkspaceCapBytes);
  Node *tiny = f.make("", "Conv", {f32({1, 1, 4, 4}), f32({1, 1, 1, 1})},
                      {f32({1, 1, 4, 4})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*tiny),
            cuda::kCudnnConvWorkspaceFloorBytes);
  // Batch norm: nothing when the node outputs every statistic cuDNN
  // writes; 2 * C floats when it lacks one.
  std::vector<TensorType> bnInputs = {f32({4, 10, 5, 5}), f32({10}), f32({10}),
                                      f32({10}), f32({10})};
  Node *internal = f.make(
      kMsDomain, "BatchNormInternal", bnInputs,
      {f32({4, 10, 5, 5}), f32({10}), f32({10}), f32({10}), f32({10})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*internal), 0u);
  Node *training = f.make("", "BatchNormalization", bnInputs,
                          {f32({4, 10, 5, 5}), f32({10}), f32({10})},
                          {integer("training_mode", 1)});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*training), alignBuffer(2 * 10 * 4));
  Node *inference =
      f.make("", "BatchNormalization", bnInputs, {f32({4, 10, 5, 5})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*inference), 0u);
  Node *bnGrad = f.make(
      kMsDomain, "BatchNormalizationGrad",
      {f32({4, 10, 5, 5}), f32({4, 10, 5, 5}), f32({10}), f32({10}), f32({10})},
      {f32({4, 10, 5, 5}), f32({10}), f32({10})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*bnGrad), 0u);
  Node *bnGradNoScale = f.make(
      kMsDomain, "BatchNormalizationGrad",
      {f32({4, 10, 5, 5}), f32({4, 10, 5, 5}), f32({10}), f32({10}), f32({10})},
      {f32({4, 10, 5, 5}), TensorType(), f32({10})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*bnGradNoScale),
            alignBuffer(2 * 10 * 4));
  Node *relu = f.make("", "Relu", {f32({4})}, {f32({4})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*relu), 0u);

  if (!isCudaBackendBuilt() || !isCudnnBuilt())
    return;
  // The kernel check accepts these nodes and names what it refuses.
  for (const Node *node : {conv, grad, big, tiny, internal, training, inference,
                           bnGrad, bnGradNoScale})
    EXPECT_FALSE(bool(checkCudaNode(*node))) << node->describe();
  // Asymmetric pads (padded explicitly) and 16-bit storage are accepted.
  Node *asymmetric =
      f.make("", "Conv", {f32({1, 2, 5, 5}), f32({2, 2, 2, 2})},
             {f32({1, 2, 5, 5})}, {text("auto_pad", "SAME_UPPER")});
  EXPECT_FALSE(bool(checkCudaNode(*asymmetric)));
  Node *half = f.make("", "Conv",
                      {TensorType::get(DType::F16, {1, 1, 4, 4}),
                       TensorType::get(DType::F16, {1, 1, 1, 1})},
                      {TensorType::get(DType::F16, {1, 1, 4, 4})}, {});
  EXPECT_FALSE(bool(checkCudaNode(*half)));
  // Mixed storage, f64 and 16-bit batch-norm statistics are refused,
  // naming the node.
  auto refusal = [](const Node &node) {
    llvm::Error err = checkCudaNode(node);
    EXPECT_TRUE(bool(err)) << node.describe();
    std::string message = err ? llvm::toString(std::move(err)) : "";
    EXPECT_NE(message.find(node.describe()), std::string::npos) << message;
    return message;
  };
  Node *mixed =
      f.make("", "Conv",
             {TensorType::get(DType::F16, {1, 1, 4, 4}), f32({1, 1, 1, 1})},
             {TensorType::get(DType::F16, {1, 1, 4, 4})}, {});
  EXPECT_NE(refusal(*mixed).find("mix element types"), std::string::npos);
  Node *wide = f.make("", "Conv",
                      {TensorType::get(DType::F64, {1, 1, 4, 4}),
                       TensorType::get(DType::F64, {1, 1, 1, 1})},
                      {TensorType::get(DType::F64, {1, 1, 4, 4})}, {});
  EXPECT_NE(refusal(*wide).find("f64"), std::string::npos);
  TensorType halfX = TensorType::get(DType::F16, {4, 10, 5, 5});
  TensorType halfC = TensorType::get(DType::F16, {10});
  Node *halfStats = f.make("", "BatchNormalization",
                           {halfX, halfC, halfC, halfC, halfC}, {halfX}, {});
  EXPECT_NE(refusal(*halfStats).find("in f32"), std::string::npos);
  Node *halfData =
      f.make("", "BatchNormalization",
             {halfX, f32({10}), f32({10}), f32({10}), f32({10})}, {halfX}, {});
  EXPECT_FALSE(bool(checkCudaNode(*halfData)));
}

TEST(CudnnGeometryTest, WorkspaceModelReservesPaddedInputsAndAccumulators) {
  NodeFactory f;
  // SAME_UPPER with an even kernel: pads {0, 0, 1, 1} (begin, end), so X
  // [2, 3, 7, 7] is padded to [2, 3, 8, 8] in the slice, before cuDNN's
  // scratch (here the floor: the im2col matrix is small).
  auto attrs = std::vector<NamedAttribute>{text("auto_pad", "SAME_UPPER")};
  uint64_t padded = alignBuffer(2 * 3 * 8 * 8 * 4);
  uint64_t scratch = cuda::kCudnnConvWorkspaceFloorBytes;
  Node *conv = f.make("", "Conv", {f32({2, 3, 7, 7}), f32({4, 3, 2, 2})},
                      {f32({2, 4, 7, 7})}, attrs);
  auto params = cuda::resolveConvParams(*conv);
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  cuda::ConvWorkspaceLayout layout =
      cuda::getConvWorkspaceLayout(*conv, *params);
  EXPECT_TRUE(layout.explicitPadding);
  EXPECT_EQ(layout.paddedXBytes, padded);
  EXPECT_EQ(layout.paddedDxBytes, 0u);
  EXPECT_EQ(layout.scratchOffset, padded);
  EXPECT_EQ(layout.scratchBytes, scratch);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*conv), padded + scratch);
  // cuDNN convolves the padded input with zero pads to the same output.
  const cuda::WindowParams &seen = layout.cudnn.window;
  EXPECT_EQ(
      std::vector<int64_t>({seen.inH, seen.inW, seen.padTop, seen.padBottom,
                            seen.padLeft, seen.padRight, seen.outH, seen.outW}),
      std::vector<int64_t>({8, 8, 0, 0, 0, 0, 7, 7}));
  EXPECT_TRUE(layout.cudnn.symmetricPads());
  EXPECT_EQ(
      std::vector<int64_t>({layout.pad.planes, layout.pad.inH, layout.pad.inW,
                            layout.pad.padTop, layout.pad.padLeft,
                            layout.pad.paddedH, layout.pad.paddedW}),
      std::vector<int64_t>({6, 7, 7, 0, 0, 8, 8}));
  // ConvGrad: padded X for dW and the padded dX it crops; either alone.
  std::vector<TensorType> gradInputs = {f32({2, 4, 7, 7}), f32({2, 3, 7, 7}),
                                        f32({4, 3, 2, 2})};
  Node *grad = f.make(kMsDomain, "ConvGrad", gradInputs,
                      {f32({2, 3, 7, 7}), f32({4, 3, 2, 2}), f32({4})}, attrs);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*grad), 2 * padded + scratch);
  Node *dxOnly = f.make(kMsDomain, "ConvGrad", gradInputs,
                        {f32({2, 3, 7, 7}), TensorType(), TensorType()}, attrs);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*dxOnly), padded + scratch);
  auto dxParams = cuda::resolveConvParams(*dxOnly);
  ASSERT_TRUE(bool(dxParams));
  EXPECT_EQ(cuda::getConvWorkspaceLayout(*dxOnly, *dxParams).paddedDxOffset,
            0u);
  Node *dwOnly = f.make(kMsDomain, "ConvGrad", gradInputs,
                        {TensorType(), f32({4, 3, 2, 2}), TensorType()}, attrs);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*dwOnly), padded + scratch);
  // 16-bit data pads 16-bit elements.
  TensorType halfX = TensorType::get(DType::F16, {2, 3, 7, 7});
  Node *halfConv =
      f.make("", "Conv", {halfX, TensorType::get(DType::F16, {4, 3, 2, 2})},
             {TensorType::get(DType::F16, {2, 4, 7, 7})}, attrs);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*halfConv),
            alignBuffer(2 * 3 * 8 * 8 * 2) + scratch);
  // Symmetric pads reserve cuDNN's scratch alone.
  Node *symmetric = f.make("", "Conv", {f32({2, 3, 7, 7}), f32({4, 3, 3, 3})},
                           {f32({2, 4, 7, 7})}, {ints("pads", {1, 1, 1, 1})});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*symmetric), scratch);

  // MaxPoolGrad: an fp32 accumulator per dX element for 16-bit dX.
  std::vector<NamedAttribute> pool = {ints("kernel_shape", {3, 3}),
                                      ints("strides", {2, 2})};
  for (DType dtype : {DType::F16, DType::BF16}) {
    Node *halfGrad = f.make("", "MaxPoolGrad",
                            {TensorType::get(dtype, {2, 3, 4, 4}),
                             TensorType::get(DType::I64, {2, 3, 4, 4})},
                            {TensorType::get(dtype, {2, 3, 9, 9})}, pool);
    EXPECT_EQ(getCudaKernelWorkspaceBytes(*halfGrad),
              alignBuffer(2 * 3 * 9 * 9 * 4));
  }
  Node *floatGrad =
      f.make("", "MaxPoolGrad",
             {f32({2, 3, 4, 4}), TensorType::get(DType::I64, {2, 3, 4, 4})},
             {f32({2, 3, 9, 9})}, pool);
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*floatGrad), 0u);
  // GatherGrad (an embedding's gradient) likewise.
  TensorType i64Shape = TensorType::get(DType::I64, {2});
  Node *halfGather = f.make(kMsDomain, "GatherGrad",
                            {i64Shape, TensorType::get(DType::I64, {5}),
                             TensorType::get(DType::BF16, {5, 16})},
                            {TensorType::get(DType::BF16, {100, 16})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*halfGather),
            alignBuffer(100 * 16 * 4));
  Node *floatGather =
      f.make(kMsDomain, "GatherGrad",
             {i64Shape, TensorType::get(DType::I64, {5}), f32({5, 16})},
             {f32({100, 16})}, {});
  EXPECT_EQ(getCudaKernelWorkspaceBytes(*floatGather), 0u);
}
