//===- CudaPadTest.cpp - Pad's reflect, edge and wrap on CUDA -------------===//
//
// The CUDA Pad kernel finds each output element's source with PadMath.h's
// `__host__ __device__` arithmetic over the PadIndexing the host builds
// (backend/cuda/IndexingPlan.h). These host tests run that arithmetic
// element by element against the CPU backend's Pad kernel, for every mode
// the schema accepts at opset 19 (constant, reflect, edge, wrap), random
// shapes of rank 0-4 and random pads, negative (cropping) ones and ones
// longer than the dimension included; and check that the plan refuses what
// the CPU kernel refuses (padding an empty dimension in a non-constant
// mode).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/IndexingPlan.h"

#include "gtest/gtest.h"

#include <random>
#include <string>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu::testing;
using cuda::PadMode;

namespace {

const char *modeName(PadMode mode) {
  switch (mode) {
  case PadMode::Reflect:
    return "reflect";
  case PadMode::Edge:
    return "edge";
  case PadMode::Wrap:
    return "wrap";
  default:
    return "constant";
  }
}

std::string listText(const std::vector<int64_t> &values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? "," : "") + std::to_string(values[i]);
  return text + "]";
}

/// Runs Pad on the CPU kernel and compares every output element with the
/// element PadMath.h picks; \p pads as ONNX orders them (all leading, then
/// all trailing).
void expectPadIsTheCpuKernel(const std::vector<int64_t> &shape,
                             const std::vector<int64_t> &pads, PadMode mode) {
  SCOPED_TRACE(std::string(modeName(mode)) + " " + listText(shape) + " pads " +
               listText(pads));
  size_t rank = shape.size();
  std::vector<int64_t> out(rank), begin(rank);
  int64_t inElements = 1, outElements = 1;
  bool refused = false;
  for (size_t d = 0; d < rank; ++d) {
    begin[d] = pads[d];
    out[d] = shape[d] + pads[d] + pads[d + rank];
    ASSERT_GE(out[d], 0) << "the test made a negative extent";
    refused |= mode != PadMode::Constant && shape[d] == 0 && out[d] > 0;
    inElements *= shape[d];
    outElements *= out[d];
  }
  // Distinct values so that a wrong source shows.
  std::vector<float> values(inElements);
  for (int64_t i = 0; i < inElements; ++i)
    values[i] = 0.5f + static_cast<float>(i);
  HostTensor data = HostTensor::of<float>(DType::F32, shape, values);
  HostTensor padTensor = HostTensor::of<int64_t>(
      DType::I64, {static_cast<int64_t>(pads.size())}, pads);
  KernelRunner runner;
  runner.setOpset("", 19);
  auto result = runner.run("", "Pad", {&data, &padTensor},
                           {TensorType::get(DType::F32, out)},
                           {stringAttr("mode", modeName(mode))});
  cuda::PadIndexing ix;
  bool planned = cuda::padIndexing(shape, out, begin, mode, ix);
  EXPECT_EQ(planned, !refused);
  if (refused) {
    EXPECT_FALSE(bool(result)) << "the CPU kernel padded an empty dimension";
    if (!result)
      llvm::consumeError(result.takeError());
    return;
  }
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  ASSERT_TRUE(planned);
  std::vector<float> expected = (*result)[0].values<float>();
  ASSERT_EQ(static_cast<int64_t>(expected.size()), outElements);
  for (int64_t i = 0; i < outElements; ++i) {
    int64_t source = cuda::padSourceOffset(ix, i);
    ASSERT_GE(source, mode == PadMode::Constant ? -1 : 0) << "element " << i;
    ASSERT_LT(source, inElements) << "element " << i;
    float value = source < 0 ? 0.0f : values[source];
    EXPECT_EQ(value, expected[i]) << "element " << i;
  }
}

TEST(CudaPadTest, NamedCases) {
  for (PadMode mode :
       {PadMode::Constant, PadMode::Reflect, PadMode::Edge, PadMode::Wrap}) {
    expectPadIsTheCpuKernel({5}, {2, 3}, mode);
    expectPadIsTheCpuKernel({3, 4}, {1, 2, 2, 1}, mode);
    // Pads longer than the dimension reflect and wrap more than once.
    expectPadIsTheCpuKernel({3}, {7, 8}, mode);
    expectPadIsTheCpuKernel({1, 3}, {2, 0, 3, 1}, mode);
    // Negative pads crop; a dimension may crop on one side and pad on the
    // other.
    expectPadIsTheCpuKernel({6, 5}, {-2, 3, 4, -4}, mode);
    expectPadIsTheCpuKernel({2, 3, 4}, {0, 0, 0, 0, 0, 0}, mode);
    expectPadIsTheCpuKernel({}, {}, mode);
    // An empty dimension: constant pads it, the others are refused.
    expectPadIsTheCpuKernel({0, 3}, {1, 1, 0, 0}, mode);
    expectPadIsTheCpuKernel({0, 3}, {0, 1, 0, 0}, mode);
  }
}

TEST(CudaPadTest, RandomShapesAndPadsAreTheCpuKernel) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> rankOf(0, 4), extentOf(1, 5), modeOf(0, 3);
  for (int trial = 0; trial < 400; ++trial) {
    int rank = rankOf(rng);
    std::vector<int64_t> shape(rank), pads(2 * rank);
    for (int64_t &d : shape)
      d = extentOf(rng);
    for (int d = 0; d < rank; ++d) {
      // Leading and trailing pads from -extent to 2 * extent + 1, the sum
      // keeping the extent non-negative.
      std::uniform_int_distribution<int64_t> padOf(-shape[d], 2 * shape[d] + 1);
      pads[d] = padOf(rng);
      pads[d + rank] = std::max(padOf(rng), -shape[d] - pads[d]);
    }
    expectPadIsTheCpuKernel(shape, pads, static_cast<PadMode>(modeOf(rng)));
    if (HasFatalFailure() || HasNonfatalFailure())
      return;
  }
}

} // namespace
