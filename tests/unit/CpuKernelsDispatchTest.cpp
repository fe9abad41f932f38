//===- CpuKernelsDispatchTest.cpp - CPU kernel dispatch and storage -------===//
//
// The kernel table (every required op has a kernel; a missing one is a clear
// error naming the node), required-operand checks, the f16/bf16 conversions
// of Half.h (exhaustive f16 round trip, round-to-nearest-even including
// subnormals, infinities and NaNs), f16/bf16 tensors staged through fp32
// kernels with the staging copies counted as temporaries, the Philox
// known-answer vectors, and results that do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cpu/Half.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/testing/KernelTestHarness.h"
#include "ir/Collectives.h"
#include "ir/MemorySpaces.h"
#include "ir/OpRegistry.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

TEST(CpuKernelTableTest, EveryRegisteredOpHasAKernel) {
  // The op registry is the source of truth for what gmopt supports, so the
  // kernel table is checked against it rather than against a second list.
  // The exceptions: YieldOp only means something inside ONNX Runtime's
  // ORTModule, where it hands control back to PyTorch, and the copy ops
  // (ir/MemorySpaces.h) are run by the plan interpreter itself.
  unsigned checked = 0;
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    if ((schema->domain == kMsDomain && schema->name == "YieldOp") ||
        isCopyOp(schema->domain, schema->name))
      continue;
    EXPECT_TRUE(hasCpuKernel(schema->domain, schema->name))
        << OpName{schema->domain, schema->name}.str();
    ++checked;
  }
  EXPECT_GT(checked, 150u);
  EXPECT_FALSE(hasCpuKernel("", "ReluGrad"));
  std::vector<std::string> listed = listCpuKernels();
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));
  EXPECT_NE(
      std::find(listed.begin(), listed.end(), "com.microsoft.FusedMatMul"),
      listed.end());
  EXPECT_NE(std::find(listed.begin(), listed.end(), "MatMul"), listed.end());
}

TEST(CpuKernelTableTest, MissingKernelIsAnErrorNamingTheNode) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2}, {1, 2});
  auto result =
      runner.run("com.foo", "Bar", {&x}, {f32Type({2})}, {}, "my_node");
  ASSERT_FALSE(static_cast<bool>(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_EQ(message.rfind("no CPU kernel for 'com.foo.Bar' (node my_node): "
                          "the op is not registered",
                          0),
            0u)
      << message;
}

TEST(CpuKernelTableTest, PreparingFindsTheKernelBySchemaAndChecksArity) {
  // A prepared entry is the table's, whatever the node.
  auto module = std::make_unique<Module>();
  Graph &graph = module->getGraph();
  Value *x = graph.addInput(f32Type({2}), "x");
  Builder builder(graph);
  Node *relu =
      builder.create(OpName{"", "Relu"}, {x}, {f32Type({2})}, {}, "relu0");
  Node *other = builder.create(OpName{"", "Relu"}, {x}, {f32Type({2})});
  auto kernel = prepareCpuKernel(*relu);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  auto same = prepareCpuKernel(*other);
  ASSERT_TRUE(bool(same)) << llvm::toString(same.takeError());
  EXPECT_EQ(kernel->info, same->info);
  // The arity comes from Relu's schema: one input, one output.
  relu->setOperands({x, x});
  auto twoInputs = prepareCpuKernel(*relu);
  ASSERT_FALSE(bool(twoInputs));
  EXPECT_EQ(llvm::toString(twoInputs.takeError()),
            "Relu: its schema takes 1 input, the node has 2 (node relu0)");
}

TEST(CpuKernelTableTest, RequiredResultsComeFromTheSchema) {
  // No entry repeats its op's arity: Relu's one result is required because
  // its schema counts one; ConvGrad's entry lets any gradient be absent.
  auto module = std::make_unique<Module>();
  Graph &graph = module->getGraph();
  Value *x = graph.addInput(f32Type({1, 1, 3, 3}), "x");
  Value *w = graph.addInput(f32Type({1, 1, 2, 2}), "w");
  Value *dy = graph.addInput(f32Type({1, 1, 2, 2}), "dy");
  Builder builder(graph);
  Node *relu = builder.create(OpName{"", "Relu"}, {x}, {f32Type({1, 1, 3, 3})},
                              {}, "relu0");
  graph.dropResult(relu, 0);
  auto noResult = prepareCpuKernel(*relu);
  ASSERT_FALSE(bool(noResult));
  EXPECT_EQ(llvm::toString(noResult.takeError()),
            "Relu: required output 0 is missing (node relu0)");
  Node *grad = builder.create(
      OpName{kMsDomain.str(), "ConvGrad"}, {dy, x, w},
      {f32Type({1, 1, 3, 3}), f32Type({1, 1, 2, 2}), f32Type({1})}, {},
      "grad0");
  graph.dropResult(grad, 0);
  graph.dropResult(grad, 2);
  auto onlyWeights = prepareCpuKernel(*grad);
  EXPECT_TRUE(bool(onlyWeights)) << llvm::toString(onlyWeights.takeError());
}

TEST(CpuKernelTableTest, MissingRequiredInputIsAnError) {
  KernelRunner runner;
  HostTensor x = HostTensor::f32({2}, {1, 2});
  auto result =
      runner.run("", "Add", {&x, nullptr}, {f32Type({2})}, {}, "add0");
  ASSERT_FALSE(static_cast<bool>(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_NE(message.find("required input 1 is missing"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(node add0)"), std::string::npos) << message;
}

TEST(CpuKernelTableTest, WrongOutputShapeIsAnError) {
  KernelRunner runner;
  HostTensor a = HostTensor::f32({2, 3}, std::vector<float>(6, 1));
  HostTensor b = HostTensor::f32({3}, {1, 2, 3});
  auto result = runner.run("", "Add", {&a, &b}, {f32Type({3, 2})});
  ASSERT_FALSE(static_cast<bool>(result));
  EXPECT_NE(llvm::toString(result.takeError()).find("broadcast to [2,3]"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Half.h
//===----------------------------------------------------------------------===//

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    uint16_t half = static_cast<uint16_t>(bits);
    float value = halfToFloat(half);
    uint16_t back = floatToHalf(value);
    bool isNaN = (half & 0x7c00) == 0x7c00 && (half & 0x3ff);
    if (isNaN) {
      EXPECT_TRUE(std::isnan(value));
      EXPECT_EQ(back & 0x7e00, 0x7e00) << bits; // Still a (quiet) NaN.
      EXPECT_EQ(back & 0x8000, half & 0x8000);
    } else {
      EXPECT_EQ(back, half) << bits;
    }
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // Smallest subnormal.
  EXPECT_EQ(halfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0x0400), std::ldexp(1.0f, -14)); // Smallest normal.
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): even is 1.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up.
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above halfway rounds up.
  EXPECT_EQ(floatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  // Overflow: 65519 rounds to 65504, 65520 (halfway to 2^16) rounds to inf.
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  // Subnormals: 2^-25 is halfway between 0 and 2^-24 -> 0 (even);
  // 3 * 2^-25 is halfway between 2^-24 (odd) and 2^-23 -> 2^-23.
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  // The largest subnormal plus half an ulp rounds (to even) into the normals.
  EXPECT_EQ(floatToHalf(std::ldexp(1023.5f, -24)), 0x0400);
  EXPECT_EQ(floatToHalf(-std::ldexp(5.0f, -24)), 0x8005);
}

TEST(HalfTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(floatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1.
  EXPECT_EQ(floatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(floatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBFloat16(std::numeric_limits<float>::max()),
            0x7f80); // Rounds up.
  uint16_t nan = floatToBFloat16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(nan)));
  // A NaN whose payload sits only in the low bits must stay a NaN.
  EXPECT_TRUE(
      std::isnan(bfloat16ToFloat(floatToBFloat16(floatFromBits(0x7f800001u)))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float value = bfloat16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(floatToBFloat16(value), bits);
    }
  }
}

//===----------------------------------------------------------------------===//
// f16/bf16 staging
//===----------------------------------------------------------------------===//

TEST(HalfStorageTest, F16TensorsComputeInFloatAndRoundOnStore) {
  KernelRunner runner;
  runner.setPlannedWorkspace(false);
  std::vector<float> a = randomFloats(64, 1, -4, 4),
                     b = randomFloats(64, 2, -4, 4);
  HostTensor ha = HostTensor::f16({8, 8}, a), hb = HostTensor::f16({8, 8}, b);
  auto result =
      runner.run("", "Mul", {&ha, &hb}, {TensorType::get(DType::F16, {8, 8})});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::vector<uint16_t> got = (*result)[0].values<uint16_t>();
  std::vector<float> wa = ha.floats(), wb = hb.floats();
  for (size_t i = 0; i < 64; ++i)
    EXPECT_EQ(got[i], floatToHalf(wa[i] * wb[i])) << i;
  // The fp32 staging copies were counted as temporaries and released.
  MemoryReport report = runner.getAllocator().getReport();
  EXPECT_EQ(report.atPeak(MemoryCategory::Temporaries), 3 * 256u);
  EXPECT_EQ(report.currentBytes, 0u);

  // Planned: the workspace model declares the three copies and they come
  // from the slice, so nothing is allocated.
  KernelRunner planned;
  auto again =
      planned.run("", "Mul", {&ha, &hb}, {TensorType::get(DType::F16, {8, 8})});
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_EQ((*again)[0].bytes, (*result)[0].bytes);
  EXPECT_EQ(planned.getAllocator().getReport().peakBytes, 0u);
}

TEST(HalfStorageTest, BulkStagingConversionsMatchTheScalarOnes) {
  // Every f16 bit pattern widened and narrowed by the staging path (Clip
  // without bounds is the identity on the staged fp32 values).
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = static_cast<uint16_t>(i);
  HostTensor halves = HostTensor::of(DType::F16, {256, 256}, all);
  KernelRunner runner;
  auto roundTrip = runner.run("", "Clip", {&halves},
                              {TensorType::get(DType::F16, {256, 256})});
  ASSERT_TRUE(static_cast<bool>(roundTrip));
  std::vector<uint16_t> got = (*roundTrip)[0].values<uint16_t>();
  for (uint32_t i = 0; i < 65536; ++i)
    EXPECT_EQ(got[i], floatToHalf(halfToFloat(static_cast<uint16_t>(i)))) << i;
  // fp32 values narrowed on store: halfway cases, subnormals, overflow.
  std::vector<float> values = randomFloats(4096, 9, -70000.0f, 70000.0f);
  for (int e = -27; e < 17; ++e)
    for (float m : {1.0f, 1.5f, 1.0009765625f, 1.00048828125f, 1.99951171875f})
      for (float sign : {1.0f, -1.0f})
        values.push_back(sign * std::ldexp(m, e));
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(std::nanf(""));
  int64_t n = values.size();
  HostTensor x = HostTensor::f32({n}, values);
  HostTensor zero = HostTensor::f16({1}, {0.0f});
  auto narrowed =
      runner.run("", "Add", {&x, &zero}, {TensorType::get(DType::F16, {n})});
  ASSERT_TRUE(static_cast<bool>(narrowed));
  std::vector<uint16_t> bits = (*narrowed)[0].values<uint16_t>();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(bits[i], floatToHalf(values[i] + 0.0f)) << values[i];
  auto narrowedBF16 =
      runner.run("", "Add", {&x, &zero}, {TensorType::get(DType::BF16, {n})});
  ASSERT_TRUE(static_cast<bool>(narrowedBF16));
  bits = (*narrowedBF16)[0].values<uint16_t>();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(bits[i], floatToBFloat16(values[i] + 0.0f)) << values[i];
}

TEST(HalfStorageTest, BF16SoftmaxMatchesRoundedFloatSoftmax) {
  KernelRunner runner;
  std::vector<float> x = randomFloats(2 * 16, 3, -3, 3);
  HostTensor hx = HostTensor::bf16({2, 16}, x);
  HostTensor fx = HostTensor::f32({2, 16}, hx.floats());
  auto half =
      runner.run("", "Softmax", {&hx}, {TensorType::get(DType::BF16, {2, 16})});
  auto full = runner.run("", "Softmax", {&fx}, {f32Type({2, 16})});
  ASSERT_TRUE(half && full);
  std::vector<uint16_t> got = (*half)[0].values<uint16_t>();
  std::vector<float> want = (*full)[0].floats();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], floatToBFloat16(want[i])) << i;
}

TEST(HalfStorageTest, SoftmaxFamilyStagesSlicesOfRows) {
  // 8192 rows of 512 (axis -1) or 128 rows of 256 x 128 (axis 2): over
  // kStagedSliceElements per tensor, so 16-bit staging runs a slice of rows
  // at a time. Rows are independent, so the results are bit for bit those
  // of the fp32 kernel on the widened inputs, rounded; the planned
  // workspace (which the harness enforces) is a slice per tensor, not a
  // whole fp32 copy; and dX may overwrite dY in place.
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (const Case &c :
       {Case{{4, 8, 256, 512}, -1}, Case{{2, 64, 256, 128}, 2}}) {
    int64_t n = 1;
    for (int64_t extent : c.shape)
      n *= extent;
    std::vector<float> y = randomFloats(n, 11, 0, 1),
                       dy = randomFloats(n, 12, -1, 1);
    HostTensor hy = HostTensor::bf16(c.shape, y),
               hdy = HostTensor::bf16(c.shape, dy);
    HostTensor fy = HostTensor::f32(c.shape, hy.floats()),
               fdy = HostTensor::f32(c.shape, hdy.floats());
    std::vector<NamedAttribute> axis = {intAttr("axis", c.axis)};
    KernelRunner runner;
    auto full = runner.run(kMsDomain, "SoftmaxGrad_13", {&fdy, &fy},
                           {f32Type(c.shape)}, axis);
    ASSERT_TRUE(static_cast<bool>(full)) << llvm::toString(full.takeError());
    std::vector<float> want = (*full)[0].floats();
    for (bool inPlace : {false, true}) {
      KernelRunner planned;
      if (inPlace)
        planned.setInPlace(0, 0);
      auto half = planned.run(kMsDomain, "SoftmaxGrad_13", {&hdy, &hy},
                              {TensorType::get(DType::BF16, c.shape)}, axis);
      ASSERT_TRUE(static_cast<bool>(half)) << llvm::toString(half.takeError());
      std::vector<uint16_t> got = (*half)[0].values<uint16_t>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], floatToBFloat16(want[i]))
            << "axis " << c.axis << " in place " << inPlace << " element " << i;
    }
    // Softmax itself, through the same slicing.
    auto forward = runner.run("", "Softmax", {&fdy}, {f32Type(c.shape)}, axis);
    KernelRunner planned;
    auto halfForward = planned.run(
        "", "Softmax", {&hdy}, {TensorType::get(DType::BF16, c.shape)}, axis);
    ASSERT_TRUE(forward && halfForward);
    std::vector<float> probabilities = (*forward)[0].floats();
    std::vector<uint16_t> halfProbabilities =
        (*halfForward)[0].values<uint16_t>();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(halfProbabilities[i], floatToBFloat16(probabilities[i])) << i;
  }
  // Eager, the staging is allocated and counted: one slice per distinct
  // 16-bit tensor (dY, Y, dX), not a whole fp32 copy of each.
  std::vector<int64_t> shape = {4, 8, 256, 512};
  std::vector<float> values = randomFloats(4 * 8 * 256 * 512, 13, 0, 1);
  HostTensor hx = HostTensor::bf16(shape, values);
  KernelRunner eager;
  eager.setPlannedWorkspace(false);
  auto grad = eager.run(kMsDomain, "SoftmaxGrad_13", {&hx, &hx},
                        {TensorType::get(DType::BF16, shape)});
  ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
  MemoryReport report = eager.getAllocator().getReport();
  // dY and Y are one buffer here: widened once.
  EXPECT_EQ(report.atPeak(MemoryCategory::Temporaries),
            2 * scratchBytes(DType::F32, kStagedSliceElements));
}

TEST(HalfStorageTest, MixedHalfAndIntegerOperands) {
  // Gather is a byte mover: f16 data stays bit-exact, indices stay int64.
  KernelRunner runner;
  HostTensor table =
      HostTensor::f16({3, 2}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  HostTensor idx = HostTensor::i64({2}, {2, 0});
  auto result = runner.run("", "Gather", {&table, &idx},
                           {TensorType::get(DType::F16, {2, 2})});
  ASSERT_TRUE(static_cast<bool>(result));
  std::vector<uint16_t> bits = table.values<uint16_t>(),
                        got = (*result)[0].values<uint16_t>();
  EXPECT_EQ(got, (std::vector<uint16_t>{bits[4], bits[5], bits[0], bits[1]}));
  // A float kernel with an integer operand: GatherGrad on f16 dY.
  HostTensor shape = HostTensor::i64({2}, {3, 2});
  HostTensor dY = HostTensor::f16({2, 2}, {1, 2, 3, 4});
  auto grad = runner.run(kMsDomain, "GatherGrad", {&shape, &idx, &dY},
                         {TensorType::get(DType::F16, {3, 2})});
  ASSERT_TRUE(static_cast<bool>(grad)) << llvm::toString(grad.takeError());
  EXPECT_EQ((*grad)[0].floats(), (std::vector<float>{3, 4, 0, 0, 1, 2}));
}

//===----------------------------------------------------------------------===//
// Thread independence
//===----------------------------------------------------------------------===//

// Philox4x32-10 against Random123 is tests/unit/PhiloxTest.cpp.

/// Runs a node with 1 and with 2 threads and expects identical bytes.
void expectThreadIndependent(llvm::StringRef domain, llvm::StringRef op,
                             std::vector<HostTensor *> inputs,
                             std::vector<TensorType> types,
                             std::vector<NamedAttribute> attrs = {}) {
  KernelRunner one, two;
  one.getContext().setNumThreads(1);
  two.getContext().setNumThreads(2);
  auto a = one.run(domain, op, inputs, types, attrs);
  auto b = two.run(domain, op, inputs, types, attrs);
  ASSERT_TRUE(a && b);
  for (size_t i = 0; i < a->size(); ++i)
    EXPECT_EQ((*a)[i].bytes, (*b)[i].bytes) << op.str() << " output " << i;
}

TEST(DeterminismTest, ResultsDoNotDependOnThreadCount) {
  HostTensor big = HostTensor::f32({256, 1024}, randomFloats(256 * 1024, 7));
  HostTensor axes0 = HostTensor::i64({1}, {0});
  HostTensor axes1 = HostTensor::i64({1}, {1});
  expectThreadIndependent("", "ReduceSum", {&big, &axes0},
                          {f32Type({1, 1024})});
  expectThreadIndependent("", "ReduceSum", {&big, &axes1}, {f32Type({256, 1})});
  expectThreadIndependent("", "ReduceSum", {&big}, {f32Type({1, 1})});
  expectThreadIndependent("", "Softmax", {&big}, {f32Type({256, 1024})});
  HostTensor scale = HostTensor::f32({1024}, randomFloats(1024, 8));
  HostTensor mean = HostTensor::f32({256, 1}, randomFloats(256, 9));
  HostTensor inv = HostTensor::f32({256, 1}, randomFloats(256, 10, 0.5f, 2.0f));
  HostTensor dY = HostTensor::f32({256, 1024}, randomFloats(256 * 1024, 11));
  expectThreadIndependent(
      kMsDomain, "LayerNormalizationGrad", {&dY, &big, &scale, &mean, &inv},
      {f32Type({256, 1024}), f32Type({1024}), f32Type({1024})});
  HostTensor idx = HostTensor::i64({512}, std::vector<int64_t>(512, 3));
  HostTensor table = HostTensor::i64({2}, {16, 1024});
  HostTensor rows = HostTensor::f32({512, 1024}, randomFloats(512 * 1024, 12));
  expectThreadIndependent(kMsDomain, "GatherGrad", {&table, &idx, &rows},
                          {f32Type({16, 1024})});
  // GEMM: OpenBLAS's own threading can split K for tall-skinny products;
  // the backend's blocking must not.
  HostTensor a = HostTensor::f32({784, 64}, randomFloats(784 * 64, 13));
  HostTensor b = HostTensor::f32({784, 128}, randomFloats(784 * 128, 14));
  expectThreadIndependent("", "Gemm", {&a, &b}, {f32Type({64, 128})},
                          {intAttr("transA", 1)});
  HostTensor tall = HostTensor::f32({32, 3000}, randomFloats(32 * 3000, 15));
  HostTensor wide = HostTensor::f32({3000, 100}, randomFloats(3000 * 100, 16));
  expectThreadIndependent("", "MatMul", {&tall, &wide}, {f32Type({32, 100})});
  HostTensor image =
      HostTensor::f32({4, 8, 20, 20}, randomFloats(4 * 8 * 400, 17));
  HostTensor filters =
      HostTensor::f32({16, 8, 3, 3}, randomFloats(16 * 72, 18));
  HostTensor dYConv =
      HostTensor::f32({4, 16, 18, 18}, randomFloats(4 * 16 * 324, 19));
  expectThreadIndependent(
      kMsDomain, "ConvGrad", {&dYConv, &image, &filters},
      {f32Type({4, 8, 20, 20}), f32Type({16, 8, 3, 3}), f32Type({16})});
  HostTensor ratio = HostTensor::f32({}, {0.3f});
  HostTensor training = HostTensor::boolean({}, {1});
  expectThreadIndependent(
      "", "Dropout", {&big, &ratio, &training},
      {f32Type({256, 1024}), TensorType::get(DType::Bool, {256, 1024})});
}

/// The error prepareCpuKernel gives node "node0" of \p op over graph inputs
/// of \p operandTypes, or "prepared" when it prepares: a node whose
/// attributes its kernel refuses fails at prepare, before any launch.
std::string prepareOutcome(const OpName &op,
                           llvm::ArrayRef<TensorType> operandTypes,
                           llvm::ArrayRef<TensorType> resultTypes,
                           llvm::ArrayRef<NamedAttribute> attrs) {
  auto module = std::make_unique<Module>();
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (const TensorType &type : operandTypes)
    operands.push_back(
        graph.addInput(type, "in" + std::to_string(operands.size())));
  Builder builder(graph);
  Node *node = builder.create(op, operands, resultTypes, attrs, "node0");
  auto kernel = prepareCpuKernel(*node);
  if (kernel)
    return "prepared";
  return llvm::toString(kernel.takeError());
}

TEST(CpuKernelPrepareTest, SoftmaxRefusesItsAxisAtPrepare) {
  EXPECT_EQ(prepareOutcome({"", "Softmax"}, {f32Type({2, 3})},
                           {f32Type({2, 3})}, {intAttr("axis", 2)}),
            "Softmax: axis 2 is out of range for rank 2 (node node0)");
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "SoftmaxGrad_13"},
                           {f32Type({2, 3}), f32Type({2, 3})},
                           {f32Type({2, 3})}, {intAttr("axis", -3)}),
            "com.microsoft.SoftmaxGrad_13: axis -3 is out of range for rank 2 "
            "(node node0)");
  EXPECT_EQ(prepareOutcome({"", "Softmax"}, {f32Type({2, 3})},
                           {f32Type({2, 3})}, {intAttr("axis", -2)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, LossesRefuseTheirReductionAtPrepare) {
  TensorType scores = f32Type({4, 3});
  TensorType labels = TensorType::get(DType::I64, {4});
  EXPECT_EQ(prepareOutcome({"", "SoftmaxCrossEntropyLoss"}, {scores, labels},
                           {f32Type({})}, {stringAttr("reduction", "max")}),
            "SoftmaxCrossEntropyLoss: reduction must be none, sum or mean, "
            "got 'max' (node node0)");
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "SoftmaxCrossEntropyLossGrad"},
                           {f32Type({}), scores, labels}, {scores},
                           {stringAttr("reduction", "avg")}),
            "com.microsoft.SoftmaxCrossEntropyLossGrad: reduction must be "
            "none, sum or "
            "mean, got 'avg' (node node0)");
  EXPECT_EQ(prepareOutcome({"", "NegativeLogLikelihoodLoss"}, {scores, labels},
                           {f32Type({4})}, {stringAttr("reduction", "none")}),
            "prepared");
}

TEST(CpuKernelPrepareTest, RowNormsRefuseTheirAxisAtPrepare) {
  EXPECT_EQ(prepareOutcome({"", "LayerNormalization"},
                           {f32Type({2, 3}), f32Type({3}), f32Type({3})},
                           {f32Type({2, 3})}, {intAttr("axis", 2)}),
            "LayerNormalization: axis 2 is out of range for rank 2 (node "
            "node0)");
  // The gradients' X is operand 1.
  EXPECT_EQ(
      prepareOutcome(
          {kMsDomain.str(), "SimplifiedLayerNormalizationGrad"},
          {f32Type({2, 3}), f32Type({2, 3}), f32Type({3}), f32Type({2, 1})},
          {f32Type({2, 3}), f32Type({3})}, {intAttr("axis", -3)}),
      "com.microsoft.SimplifiedLayerNormalizationGrad: axis -3 is out of range "
      "for "
      "rank 2 (node node0)");
  EXPECT_EQ(prepareOutcome({"", "RMSNormalization"},
                           {f32Type({2, 3}), f32Type({3})}, {f32Type({2, 3})},
                           {intAttr("axis", -1)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, EinsumRefusesItsEquationAtPrepare) {
  EXPECT_EQ(prepareOutcome({"", "Einsum"}, {f32Type({2, 3}), f32Type({3, 4})},
                           {f32Type({2, 4})}, {}),
            "Einsum: missing equation (node node0)");
  EXPECT_EQ(prepareOutcome({"", "Einsum"}, {f32Type({2, 3}), f32Type({3, 4})},
                           {f32Type({2, 4})},
                           {stringAttr("equation", "ij,jk->ik")}),
            "prepared");
}

TEST(CpuKernelPrepareTest, ProductsRefuseTheirTypesAtPrepare) {
  TensorType f64 = TensorType::get(DType::F64, {3, 4});
  EXPECT_EQ(prepareOutcome({"", "Einsum"}, {f32Type({2, 3}), f64},
                           {f32Type({2, 4})},
                           {stringAttr("equation", "ij,jk->ik")}),
            "Einsum: operands must have one element type (node node0)");
  TensorType i8 = TensorType::get(DType::I8, {2, 2});
  EXPECT_EQ(prepareOutcome({"", "MatMul"}, {i8, i8}, {i8}, {}),
            "MatMul: unsupported element type i8 of input (node node0)");
  EXPECT_EQ(prepareOutcome({"", "Gemm"}, {f32Type({2, 2}), f32Type({2, 2})},
                           {TensorType::get(DType::F64, {2, 2})}, {}),
            "Gemm: A, B, C and Y must have one element type (node node0)");
  // f16 operands of an Einsum are staged as float32, like float32 ones.
  EXPECT_EQ(
      prepareOutcome({"", "Einsum"},
                     {f32Type({2, 3}), TensorType::get(DType::F16, {3, 4})},
                     {f32Type({2, 4})}, {stringAttr("equation", "ij,jk->ik")}),
      "prepared");
}

TEST(CpuKernelPrepareTest, ConvolutionsAndPoolsRefuseTheirWindowAtPrepare) {
  TensorType x = f32Type({1, 2, 5, 5}), w = f32Type({4, 2, 3, 3});
  EXPECT_EQ(prepareOutcome({"", "Conv"}, {x, w}, {f32Type({1, 4, 3, 3})},
                           {stringAttr("auto_pad", "SAME")}),
            "Conv: unknown auto_pad 'SAME' (node node0)");
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "ConvGrad"},
                           {f32Type({1, 4, 3, 3}), x, w}, {x, w, f32Type({4})},
                           {intAttr("group", 0)}),
            "com.microsoft.ConvGrad: group 0 does not divide the channel "
            "counts (node "
            "node0)");
  EXPECT_EQ(prepareOutcome({"", "MaxPool"}, {x}, {f32Type({1, 2, 4, 4})}, {}),
            "MaxPool: missing attribute 'kernel_shape' (node node0)");
  EXPECT_EQ(prepareOutcome({"", "AveragePool"}, {x}, {f32Type({1, 2, 4, 4})},
                           {intsAttr("kernel_shape", {2, 2}),
                            stringAttr("auto_pad", "same_upper")}),
            "AveragePool: unknown auto_pad 'same_upper' (node node0)");
  EXPECT_EQ(prepareOutcome({"", "Conv"}, {x, w}, {f32Type({1, 4, 5, 5})},
                           {stringAttr("auto_pad", "SAME_UPPER")}),
            "prepared");
}

TEST(CpuKernelPrepareTest, FusedAttentionRefusesItsLayoutAtPrepare) {
  // k_transposed reads K [1, 2, 4, 8] as [.., d = 4, sk = 8]: not Q's head
  // size.
  TensorType qkv = f32Type({1, 2, 4, 8});
  EXPECT_EQ(
      prepareOutcome({"gmopt", "FusedAttention"}, {qkv, qkv, qkv}, {qkv},
                     {intAttr("k_transposed", 1)}),
      "gmopt.FusedAttention: K [1,2,4,8] does not have Q's head size 8 (node "
      "node0)");
  EXPECT_EQ(prepareOutcome({"gmopt", "FusedAttention"}, {qkv, qkv, qkv}, {qkv},
                           {intAttr("causal", 1)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, FusedCrossEntropyRefusesItsReductionAtPrepare) {
  EXPECT_EQ(
      prepareOutcome(
          {"gmopt", "FusedLinearCrossEntropy"},
          {f32Type({4, 8}), f32Type({16, 8}), TensorType::get(DType::I64, {4})},
          {f32Type({}), f32Type({4})}, {stringAttr("reduction", "max")}),
      "gmopt.FusedLinearCrossEntropy: reduction must be none, sum or mean, "
      "got 'max' (node node0)");
}

TEST(CpuKernelPrepareTest, ResizeRefusesItsModesAtPrepare) {
  std::string outcome =
      prepareOutcome({"", "Resize"}, {f32Type({1, 1, 2, 2}), f32Type({4})},
                     {f32Type({1, 1, 4, 4})}, {stringAttr("mode", "area")});
  EXPECT_EQ(outcome.rfind("Resize: mode 'area' is not defined at opset", 0), 0u)
      << outcome;
  EXPECT_NE(outcome.find("(node node0)"), std::string::npos) << outcome;
}

TEST(CpuKernelPrepareTest, ReduceWithABadAxisFailsAtPrepare) {
  // The reduction's axes (ops::ReduceAxes) are resolved once, at prepare.
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = 13;
  Graph &graph = module->getGraph();
  Value *x = graph.addInput(f32Type({2, 3}), "x");
  Builder builder(graph);
  Node *node = builder.create(OpName{"", "ReduceMean"}, {x}, {f32Type({2, 1})},
                              {intsAttr("axes", {2})}, "mean0");
  auto kernel = prepareCpuKernel(*node);
  ASSERT_FALSE(bool(kernel));
  EXPECT_NE(llvm::toString(kernel.takeError())
                .find("axes 2 is out of range for rank 2"),
            std::string::npos);
}

TEST(CpuKernelPrepareTest, UnaryRefusesItsAttributesAtPrepare) {
  TensorType x = f32Type({2});
  EXPECT_EQ(prepareOutcome({"", "Gelu"}, {x}, {x},
                           {stringAttr("approximate", "erf")}),
            "Gelu: unknown approximate mode 'erf' (node node0)");
  EXPECT_EQ(prepareOutcome({"", "Celu"}, {x}, {x}, {floatAttr("alpha", 0)}),
            "Celu: alpha must not be 0 (node node0)");
  // `to` = 7 is int64, the output is fp32.
  EXPECT_EQ(prepareOutcome({"", "Cast"}, {x}, {x}, {intAttr("to", 7)}),
            "Cast: attribute 'to' disagrees with the output type " +
                dtypeName(DType::F32).str() + " (node node0)");
  EXPECT_EQ(prepareOutcome({"", "Gelu"}, {x}, {x},
                           {stringAttr("approximate", "tanh")}),
            "prepared");
}

/// Runs \p node on \p inputs at \p step of seed 5: through \p kernel, or
/// with none through runCpuKernel, which prepares at every call.
std::vector<HostTensor> runNodeAt(const PreparedCpuKernel *kernel,
                                  const Node &node,
                                  std::vector<HostTensor *> inputs,
                                  uint64_t step) {
  CountingAllocator allocator;
  CpuKernelContext ctx(allocator);
  ctx.setSeed(5);
  ctx.setStep(step);
  std::vector<TensorView> inViews, outViews(node.getNumResults());
  for (HostTensor *input : inputs)
    inViews.push_back(input->view());
  std::vector<const TensorView *> in;
  for (const TensorView &view : inViews)
    in.push_back(&view);
  std::vector<HostTensor> results(node.getNumResults());
  std::vector<TensorView *> out;
  for (unsigned i = 0; i < results.size(); ++i) {
    const TensorType &type = node.getResult(i)->getType();
    auto shape = type.getStaticShape();
    results[i].dtype = type.getDType();
    results[i].shape.assign(shape.begin(), shape.end());
    results[i].bytes.assign(type.getSizeInBytes(), 0xA5);
    outViews[i] = results[i].view();
    out.push_back(&outViews[i]);
  }
  llvm::Error err = kernel ? runPreparedCpuKernel(*kernel, node, in, out, ctx)
                           : runCpuKernel(node, in, out, ctx);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  return results;
}

TEST(CpuKernelPrepareTest, LaunchesReadTheAttributesDecodedAtPrepare) {
  // An attribute changed after prepare does not reach the prepared kernel.
  auto module = std::make_unique<Module>();
  Graph &graph = module->getGraph();
  HostTensor data = HostTensor::f32({2}, {-2, 3});
  Value *x = graph.addInput(data.type(), "x");
  Builder builder(graph);
  Node *node = builder.create(OpName{"", "LeakyRelu"}, {x}, {f32Type({2})},
                              {floatAttr("alpha", 0.5f)}, "leaky0");
  auto kernel = prepareCpuKernel(*node);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  node->setAttr("alpha", Attribute::getFloat(0.25f));
  EXPECT_EQ(runNodeAt(&*kernel, *node, {&data}, 0)[0].floats(),
            (std::vector<float>{-1, 3}));
  EXPECT_EQ(runNodeAt(nullptr, *node, {&data}, 0)[0].floats(),
            (std::vector<float>{-0.5f, 3}));
}

TEST(CpuKernelPrepareTest, FloatModWithoutFmodFailsAtPrepare) {
  TensorType x = f32Type({2});
  EXPECT_EQ(prepareOutcome({"", "Mod"}, {x, x}, {x}, {intAttr("fmod", 0)}),
            "Mod: floating-point Mod requires fmod = 1 (node node0)");
  TensorType i = TensorType::get(DType::I64, {2});
  EXPECT_EQ(prepareOutcome({"", "Mod"}, {i, i}, {i}, {intAttr("fmod", 0)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, GathersAndScattersRefuseTheirAttributesAtPrepare) {
  TensorType data = f32Type({3, 4}), idx = TensorType::get(DType::I64, {2});
  EXPECT_EQ(prepareOutcome({"", "Gather"}, {data, idx}, {f32Type({3, 2})},
                           {intAttr("axis", 2)}),
            "Gather: axis 2 is out of range for rank 2 (node node0)");
  // GatherGrad's axis indexes its result dX.
  EXPECT_EQ(
      prepareOutcome({kMsDomain.str(), "GatherGrad"},
                     {TensorType::get(DType::I64, {2}), idx, f32Type({3, 2})},
                     {data}, {intAttr("axis", -3)}),
      "com.microsoft.GatherGrad: axis -3 is out of range for rank 2 (node "
      "node0)");
  TensorType tuples = TensorType::get(DType::I64, {3, 1});
  EXPECT_EQ(prepareOutcome({"", "GatherND"}, {data, tuples}, {f32Type({3})},
                           {intAttr("batch_dims", 2)}),
            "GatherND: batch_dims 2 does not fit ranks 2 and 2 (node node0)");
  TensorType idx2 = TensorType::get(DType::I64, {3, 4});
  EXPECT_EQ(prepareOutcome({"", "ScatterElements"}, {data, idx2, data}, {data},
                           {stringAttr("reduction", "mean")}),
            "ScatterElements: unknown reduction 'mean' (node node0)");
  EXPECT_EQ(prepareOutcome({"", "ScatterND"}, {data, tuples, data}, {data},
                           {stringAttr("reduction", "avg")}),
            "ScatterND: unknown reduction 'avg' (node node0)");
  EXPECT_EQ(
      prepareOutcome({"", "ScatterElements"}, {data, idx2, data}, {data},
                     {stringAttr("reduction", "max"), intAttr("axis", -1)}),
      "prepared");
}

TEST(CpuKernelPrepareTest, DropoutsRefuseTheirRatioAndNeedAStreamAtPrepare) {
  TensorType x = f32Type({8}), mask = TensorType::get(DType::Bool, {8});
  // The ratio attribute (before opset 12) applies without a ratio operand.
  EXPECT_EQ(prepareOutcome({"", "Dropout"}, {x}, {x, mask},
                           {floatAttr("ratio", 1.5f)}),
            "Dropout: ratio 1.500000 is outside [0, 1) (node node0)");
  EXPECT_EQ(
      prepareOutcome({kMsDomain.str(), "DropoutGrad"},
                     {x, mask, f32Type({}), TensorType::get(DType::Bool, {})},
                     {x}, {}),
      "prepared");
  // A node that may train draws from its stream: without one it fails.
  std::string noStream = prepareOutcome(
      {"", "Dropout"}, {x, f32Type({}), TensorType::get(DType::Bool, {})},
      {x, mask}, {});
  EXPECT_NE(noStream.find("has no stream id"), std::string::npos) << noStream;
}

TEST(CpuKernelPrepareTest, PreparedDropoutDrawsTheUnpreparedMasks) {
  // Prepared once, Dropout holds its stream id and reads the seed and step
  // at each launch: its output and mask are bit for bit those of the
  // unprepared path and of the Philox stream itself, step after step.
  auto module = std::make_unique<Module>();
  Graph &graph = module->getGraph();
  const int64_t n = 1001;
  HostTensor data = HostTensor::f32({n}, randomFloats(n, 21));
  HostTensor ratio = HostTensor::f32({}, {0.3f});
  HostTensor training = HostTensor::boolean({}, {1});
  Value *x = graph.addInput(data.type(), "x");
  Value *r = graph.addInput(ratio.type(), "ratio");
  Value *t = graph.addInput(training.type(), "training");
  Builder builder(graph);
  Node *node = builder.create(OpName{"", "Dropout"}, {x, r, t},
                              {f32Type({n}), TensorType::get(DType::Bool, {n})},
                              {}, "drop0");
  node->setStreamId(11);
  auto kernel = prepareCpuKernel(*node);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  std::vector<uint8_t> previousMask;
  for (uint64_t step : {3u, 4u}) {
    std::vector<HostTensor> prepared =
        runNodeAt(&*kernel, *node, {&data, &ratio, &training}, step);
    std::vector<HostTensor> unprepared =
        runNodeAt(nullptr, *node, {&data, &ratio, &training}, step);
    EXPECT_EQ(prepared[0].bytes, unprepared[0].bytes) << "step " << step;
    EXPECT_EQ(prepared[1].bytes, unprepared[1].bytes) << "step " << step;
    PhiloxStreamKey stream = makePhiloxStreamKey(5, 11, step);
    unsigned mismatches = 0, kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool keep = dropoutKeeps(
          philoxBlock(stream, static_cast<uint32_t>(i / 4)).w[i % 4], 0.3f);
      mismatches += prepared[1].bytes[i] != uint8_t(keep);
      kept += keep;
    }
    EXPECT_EQ(mismatches, 0u) << "step " << step;
    EXPECT_GT(kept, n / 2) << "step " << step;
    EXPECT_LT(kept, n) << "step " << step;
    EXPECT_NE(prepared[1].bytes, previousMask) << "step " << step;
    previousMask = prepared[1].bytes;
  }
}

TEST(CpuKernelPrepareTest, AdamWRefusesItsModeAtPrepare) {
  TensorType w = f32Type({4}), lr = f32Type({});
  TensorType step = TensorType::get(DType::I64, {});
  TensorType signal = TensorType::get(DType::Bool, {});
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "AdamWOptimizer"},
                           {lr, step, signal, w, w, w, w}, {step},
                           {intAttr("adam_mode", 2)}),
            "com.microsoft.AdamWOptimizer: adam_mode must be 0 (PyTorch) or "
            "1 (Hugging Face), got 2 (node node0)");
  // Two weights but one gradient: no AdamW groups.
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "AdamWOptimizer"},
                           {lr, step, signal, w, w, w}, {step}, {}),
            "com.microsoft.AdamWOptimizer: operands do not form the "
            "optimizer's groups (node node0)");
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "AdamWOptimizer"},
                           {lr, step, signal, w, w, w, w}, {step},
                           {intAttr("adam_mode", 1)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, IsAllFiniteRefusesBothModesAtPrepare) {
  TensorType x = f32Type({4}), flag = TensorType::get(DType::Bool, {});
  EXPECT_EQ(
      prepareOutcome({kMsDomain.str(), "IsAllFinite"}, {x}, {flag},
                     {intAttr("isinf_only", 1), intAttr("isnan_only", 1)}),
      "com.microsoft.IsAllFinite: isinf_only and isnan_only are "
      "exclusive (node node0)");
  EXPECT_EQ(prepareOutcome({kMsDomain.str(), "IsAllFinite"}, {x}, {flag},
                           {intAttr("isnan_only", 1)}),
            "prepared");
}

TEST(CpuKernelPrepareTest, CollectivesRefuseTheirReductionAtPrepare) {
  TensorType w = f32Type({4});
  for (llvm::StringRef op : {kAllReduceOp, kReduceScatterOp})
    EXPECT_EQ(
        prepareOutcome({kGmoptDomain.str(), op.str()}, {w},
                       {op == kAllReduceOp ? w : f32Type({2})},
                       {intAttr("ranks", 2), stringAttr("reduction", "max")}),
        "gmopt." + op.str() +
            ": reduction must be mean or sum, got 'max' (node node0)");
  EXPECT_EQ(
      prepareOutcome({kGmoptDomain.str(), kAllReduceOp.str()}, {w}, {w},
                     {intAttr("ranks", 2), stringAttr("reduction", "sum")}),
      "prepared");
}

} // namespace
