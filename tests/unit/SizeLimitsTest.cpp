//===- SizeLimitsTest.cpp - Unit tests of the tensor size limits ----------===//
//
// gmopt bounds every tensor to kMaxTensorBytes (2^50 bytes) and every plan's
// sum of sizes to kMaxTotalBytes (2^62), so that no size computation on a
// user-controlled shape overflows. These tests feed each entry point a
// shape past the limits (a type, an ONNX model with static or bound
// dimensions, the text form, a dimension binding, a plan whose kernel
// workspace is too large, a tensor the system cannot allocate) and expect
// one clean error naming the value, never a wrapped size; and they check
// that the saturating size helpers of the IR and the CPU kernels never wrap.
//
//===----------------------------------------------------------------------===//

#include "OnnxTestModels.h"

#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/Attribute.h"
#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/SizeLimits.h"
#include "ir/Types.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "passes/planning/Liveness.h"
#include "passes/planning/PlanBuffers.h"
#include "tools/driver/RunSession.h"
#include "tools/driver/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "tests/unit/TestPaths.h"
#include "gtest/gtest.h"

#include <fstream>

using namespace gmopt;

namespace {

constexpr int64_t k2Pow62 = int64_t(1) << 62;

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("<success>");
}

template <typename T> std::string errorText(llvm::Expected<T> &value) {
  return value ? std::string("<success>") : llvm::toString(value.takeError());
}

bool contains(llvm::StringRef text, llvm::StringRef part) {
  return text.contains(part);
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

TEST(TensorSizeLimitTest, TypesBeyondTheLimitAreRefused) {
  // Exactly 2^50 bytes is allowed; one element type wider is not.
  EXPECT_TRUE(
      fitsSizeLimit(TensorType::get(DType::F32, {int64_t(1) << 46, 4})));
  EXPECT_FALSE(
      fitsSizeLimit(TensorType::get(DType::F64, {int64_t(1) << 46, 4})));
  // The issue's batch of 2^62 (and one that wraps to a small byte size).
  EXPECT_FALSE(fitsSizeLimit(TensorType::get(DType::F32, {k2Pow62, 784})));
  EXPECT_FALSE(
      fitsSizeLimit(TensorType::get(DType::F32, {2305843009213693960, 784})));
  // Zero extents do not make the other dimensions unbounded.
  EXPECT_FALSE(fitsSizeLimit(TensorType::get(DType::F32, {0, k2Pow62})));
  EXPECT_TRUE(fitsSizeLimit(TensorType::get(DType::F32, {0, 1024})));
  // Only the static part counts before binding.
  TensorType partial(DType::F32, {Dim::symbolic("batch"), Dim::fixed(k2Pow62)});
  EXPECT_FALSE(fitsSizeLimit(partial));
  TensorType symbolic(DType::F32, {Dim::symbolic("batch"), Dim::fixed(784)});
  EXPECT_TRUE(fitsSizeLimit(symbolic));
  EXPECT_TRUE(fitsSizeLimit(TensorType::unranked(DType::F32)));

  EXPECT_EQ(
      errorText(checkTensorSize(TensorType::get(DType::F32, {k2Pow62, 784}),
                                "graph input 'x'")),
      "graph input 'x' has type f32[4611686018427387904,784], larger "
      "than gmopt's limit of 2^50 bytes per tensor");
  EXPECT_EQ(errorText(checkTensorSize(symbolic, "x")), "<success>");
}

TEST(TensorSizeLimitTest, SizesSaturateInsteadOfWrapping) {
  // 2^62 * 784 * 4 wraps to 0 in 64 bits; the saturated size cannot pass
  // for a small one.
  TensorType huge = TensorType::get(DType::F32, {k2Pow62, 784});
  EXPECT_EQ(huge.getNumElements(), UINT64_MAX);
  EXPECT_EQ(huge.getSizeInBytes(), UINT64_MAX);
  EXPECT_EQ(dtypeStorageBytes(DType::F64, uint64_t(1) << 62), UINT64_MAX);
  EXPECT_EQ(TensorType::get(DType::F32, {3, 5}).getSizeInBytes(), 60u);
}

TEST(TensorSizeLimitTest, KernelSizeHelpersSaturate) {
  EXPECT_EQ(cpu::product({int64_t(1) << 40, int64_t(1) << 40}),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(cpu::product({int64_t(1) << 40, 0, int64_t(1) << 40}), 0);
  EXPECT_EQ(cpu::product({3, 4, 5}), 60);
  EXPECT_EQ(cpu::mulCount(k2Pow62, 4), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(cpu::scratchBytes(DType::F32, std::numeric_limits<int64_t>::max()),
            UINT64_MAX);
  EXPECT_EQ(cpu::scratchBytes(DType::F32, 10), kBufferAlignment);
  EXPECT_EQ(cpu::addScratch(UINT64_MAX, 256), UINT64_MAX);
}

//===----------------------------------------------------------------------===//
// Loaders and bindings
//===----------------------------------------------------------------------===//

TEST(TensorSizeLimitTest, OnnxStaticShapesBeyondTheLimit) {
  test::MlpOptions options;
  options.batch = test::DimSpec(k2Pow62);
  std::string bytes = test::makeOrtMlp(options).SerializeAsString();
  auto module = importOnnxBytes(bytes, "mlp.onnx");
  std::string message = errorText(module);
  EXPECT_TRUE(contains(message, "mlp.onnx: "));
  EXPECT_TRUE(contains(message, "has type f32[4611686018427387904,4], larger "
                                "than gmopt's limit of 2^50 bytes per tensor"))
      << message;
}

TEST(TensorSizeLimitTest, OnnxDimensionBindingsBeyondTheLimit) {
  std::string bytes = test::makeOrtMlp().SerializeAsString();
  OnnxImportOptions options;
  options.dimBindings = {{"batch", k2Pow62}};
  auto module = importOnnxBytes(bytes, "mlp.onnx", options);
  EXPECT_EQ(errorText(module),
            "mlp.onnx: dimension binding batch=4611686018427387904 is larger "
            "than any tensor gmopt accepts (at most 2^50 bytes)");

  // A binding that fits by itself but makes the input too large: the input
  // [2^48, 4] of f32 holds 2^52 bytes.
  options.dimBindings = {{"batch", int64_t(1) << 48}};
  module = importOnnxBytes(bytes, "mlp.onnx", options);
  std::string message = errorText(module);
  EXPECT_TRUE(contains(message, "'input' has type f32[281474976710656,4], "
                                "larger than gmopt's limit"))
      << message;

  // Inference that multiplies extents (here an outer product of two
  // vectors that each fit) is refused at the node that does it.
  test::ModelBuilder b;
  b.input("a", onnx::TensorProto::FLOAT, {int64_t(1) << 30, 1});
  b.input("b", onnx::TensorProto::FLOAT, {1, int64_t(1) << 30});
  b.node("MatMul", {"a", "b"}, {"c"}, "outer");
  b.output("c");
  module = importOnnxBytes(b.bytes(), "outer.onnx");
  message = errorText(module);
  EXPECT_TRUE(contains(message, "result 'c' has type f32[1073741824,"
                                "1073741824], larger than gmopt's limit"))
      << message;
  EXPECT_TRUE(contains(message, "outer")) << message;
}

TEST(TensorSizeLimitTest, TheMlpTestdataWithAStaticHugeBatch) {
  // testdata/mlp with every `batch` dimension made static 2^62: gmopt-run
  // used to crash on it with no flags at all.
  onnx::ModelProto model;
  {
    std::ifstream in(gmopt::testdataDir() + "/mlp/training_model.onnx",
                     std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
  }
  unsigned replaced = 0;
  auto makeStatic = [&](onnx::ValueInfoProto &info) {
    if (!info.type().has_tensor_type())
      return;
    for (auto &dim : *info.mutable_type()
                          ->mutable_tensor_type()
                          ->mutable_shape()
                          ->mutable_dim())
      if (dim.has_dim_param() && dim.dim_param() == "batch") {
        dim.set_dim_value(k2Pow62);
        ++replaced;
      }
  };
  onnx::GraphProto &graph = *model.mutable_graph();
  for (auto &info : *graph.mutable_input())
    makeStatic(info);
  for (auto &info : *graph.mutable_output())
    makeStatic(info);
  for (auto &info : *graph.mutable_value_info())
    makeStatic(info);
  ASSERT_GE(replaced, 2u);

  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("huge-mlp", "onnx", path));
  {
    std::ofstream out(path.str().str(), std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&out));
  }
  RunConfig config;
  config.modelPath = path.str().str();
  config.backend = BackendKind::Cpu;
  std::string out, notices;
  llvm::raw_string_ostream outStream(out), noticeStream(notices);
  llvm::Error err = runSession(config, outStream, noticeStream);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(bool(err));
  EXPECT_EQ(exitCodeFor(err), kInputErrorExitCode);
  std::string message = llvm::toString(std::move(err));
  EXPECT_TRUE(contains(message, "4611686018427387904")) << message;
  EXPECT_TRUE(contains(message, "larger than gmopt's limit of 2^50 bytes"))
      << message;
  EXPECT_FALSE(contains(message, "\n")) << message;
  EXPECT_TRUE(notices.empty()) << notices;
  EXPECT_TRUE(out.empty()) << out;
}

TEST(TensorSizeLimitTest, TextTypesBeyondTheLimitAndNegativeDims) {
  auto huge = parseModule(R"(module {
  graph @g(%x: f32[4611686018427387904,784]) {
    return %x
  }
})",
                          "huge.gmir");
  EXPECT_EQ(errorText(huge),
            "huge.gmir:2:16: type f32[4611686018427387904,784] is larger than "
            "gmopt's limit of 2^50 bytes per tensor");
  auto negative = parseModule(R"(module {
  graph @g(%x: f32[-3,4]) {
    return %x
  }
})",
                              "negative.gmir");
  EXPECT_EQ(errorText(negative), "negative.gmir:2:20: negative dimension -3");
}

TEST(TensorSizeLimitTest, TheVerifierRefusesOversizedValues) {
  // A type built in memory (as a pass could) that no loader would accept.
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  Value *x =
      graph.addInput(TensorType::get(DType::F32, {int64_t(1) << 30, 4}), "x");
  Builder builder(graph);
  Node *tile = builder.create(
      {"", "Relu"}, {x},
      {TensorType::get(DType::F32, {int64_t(1) << 30, int64_t(1) << 30})}, {},
      "grow");
  graph.addOutput(tile->getResult(0));
  VerifyOptions options;
  options.checkTypes = false;
  std::string message = errorText(verifyModule(module, options));
  EXPECT_TRUE(contains(message, "has type f32[1073741824,1073741824], larger "
                                "than gmopt's limit of 2^50 bytes per tensor"))
      << message;
  EXPECT_TRUE(contains(message, "(node grow)")) << message;

  // The planners refuse it by themselves too (they may run unverified).
  auto trivial = makeTrivialPlan(module);
  EXPECT_TRUE(contains(errorText(trivial), "larger than gmopt's limit"));
  auto liveness = Liveness::compute(module);
  EXPECT_TRUE(contains(errorText(liveness), "cannot plan memory: "));
}

//===----------------------------------------------------------------------===//
// Plans and workspaces
//===----------------------------------------------------------------------===//

/// A convolution whose tensors all fit the limit but whose im2col matrix
/// (C*kH*kW = 2^46 rows by 8193^2 output pixels) does not fit 64 bits.
constexpr llvm::StringLiteral kHugeConv =
    R"(module attributes {opsets = {"" = 17}} {
  graph @conv(%x: f32[1,1048576,16384,16384], %w: f32[1,1048576,8192,8192]) {
    %y = Conv(%x, %w) : f32[1,1,8193,8193] name "/huge"
    return %y
  }
})";

TEST(TensorSizeLimitTest, AnOverflowingWorkspaceIsRefused) {
  auto module = parseModule(kHugeConv, "conv.gmir");
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  ASSERT_EQ(errorText(verifyModule(**module)), "<success>");
  const Node &conv = *(*module)->getGraph().begin();
  // The estimate saturates instead of wrapping (it was a signed overflow).
  EXPECT_EQ(cpu::getCpuKernelWorkspaceBytes(conv), UINT64_MAX);

  auto trivial = makeTrivialPlan(**module, cpu::getCpuKernelWorkspaceBytes);
  EXPECT_EQ(errorText(trivial),
            "the kernel workspace of node /huge (18446744073709551615 bytes) "
            "is larger than gmopt's limit of 2^50 bytes");
  auto planned = computeBufferPlan(**module, PlanBuffersPass::Options(),
                                   nullptr, cpu::getCpuKernelWorkspaceBytes);
  EXPECT_EQ(errorText(planned),
            "the kernel workspace of node /huge (18446744073709551615 bytes) "
            "is larger than gmopt's limit of 2^50 bytes");
  // Without the workspace model the same graph plans fine.
  auto plain = computeBufferPlan(**module, PlanBuffersPass::Options());
  EXPECT_EQ(errorText(plain), "<success>");
}

TEST(TensorSizeLimitTest, PlansOfMoreThanTheTotalLimitAreRefused) {
  // 8192 inputs of 2^50 bytes each add up to 2^63.
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  TensorType big = TensorType::get(DType::U8, {int64_t(1) << 50});
  for (int i = 0; i != 8192; ++i)
    graph.addOutput(graph.addInput(big, "x" + std::to_string(i)));
  EXPECT_EQ(errorText(verifyModule(module)), "<success>");
  EXPECT_EQ(errorText(makeTrivialPlan(module).takeError()),
            "cannot plan memory: the graph's values add up to more than 2^62 "
            "bytes");
  EXPECT_EQ(errorText(Liveness::compute(module).takeError()),
            "cannot plan memory: the graph's values add up to more than 2^62 "
            "bytes");
}

//===----------------------------------------------------------------------===//
// Allocation
//===----------------------------------------------------------------------===//

TEST(TensorAllocationTest, FailuresAreErrorsNotAborts) {
  auto small = allocateTensorData(TensorType::get(DType::F32, {2}),
                                  [](llvm::MutableArrayRef<uint8_t> b) {
                                    ASSERT_EQ(b.size(), 8u);
                                    std::memset(b.data(), 0, b.size());
                                  });
  ASSERT_TRUE(bool(small)) << llvm::toString(small.takeError());
  EXPECT_EQ(small->getFloatElement(1), 0.0);

  // 2^50 bytes is within the size limit but beyond any address space.
  bool filled = false;
  auto huge = allocateTensorData(
      TensorType::get(DType::U8, {int64_t(1) << 50}),
      [&](llvm::MutableArrayRef<uint8_t>) { filled = true; });
  EXPECT_EQ(errorText(huge),
            "out of memory allocating 1125899906842624 bytes for "
            "u8[1125899906842624]");
  EXPECT_FALSE(filled);
  auto tooLarge = allocateTensorData(
      TensorType::get(DType::U8, {int64_t(1) << 51}),
      [&](llvm::MutableArrayRef<uint8_t>) { filled = true; });
  EXPECT_TRUE(contains(errorText(tooLarge), "larger than gmopt's limit"));
  EXPECT_FALSE(filled);
}

TEST(TensorAllocationTest, SyntheticInputsThatCannotBeAllocated) {
  // A data input of 2^48 bytes: fits the limit, not the machine.
  Module module;
  module.opsetImports[""] = 17;
  Graph &graph = module.getGraph();
  Value *x =
      graph.addInput(TensorType::get(DType::F32, {int64_t(1) << 46}), "x");
  Builder builder(graph);
  Node *relu = builder.create({"", "Relu"}, {x}, {x->getType()}, {}, "relu");
  graph.addOutput(relu->getResult(0));
  auto bound = bindInputs(module, InputSources());
  EXPECT_EQ(errorText(bound), "input 'x': out of memory allocating "
                              "281474976710656 bytes for f32[70368744177664]");
}

} // namespace
