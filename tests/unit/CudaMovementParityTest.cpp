//===- CudaMovementParityTest.cpp - Data movement on CUDA vs the CPU ------===//
//
// Per-op parity of the CUDA backend's data-movement entries
// (CudaMovementDispatch.cpp) against the CPU backend: Transpose, Concat,
// Slice (negative starts and steps, axes), Split (even and given sizes),
// Pad (constant mode, a constant value; reflect with axes, edge and wrap
// with long and negative pads), Tile, Expand, Where
// (broadcasting condition), Reshape (0 and -1 in the shape), Squeeze,
// Unsqueeze, Flatten and Identity. Each case is a one-node module on fresh
// random inputs (seeds in the case's name) with the shape, index and pad
// operands constant, as the CUDA kernels need them; in f32, f16, bf16 and
// int64 storage. Moving elements computes nothing, so the results must be
// equal bit for bit, eagerly and planned. Without a GPU the CUDA half
// skips with the probe's reason; the CPU half (the module verifies, the
// CPU backend runs it to finite results, the CUDA kernel table accepts it
// and a CUDA plan is made) runs in every build.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"

#include "tests/unit/OpParityHarness.h"
#include "tests/unit/OpTestHelpers.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace gmopt;
using test::Agreement;
using test::bools;
using test::CaseMaker;
using test::floats;
using test::int64s;
using test::intAttr;
using test::intsAttr;
using test::OpCase;
using test::shapeText;
using test::stringAttr;

namespace {

using Shape = std::vector<int64_t>;

/// The storage types the movement kernels are checked in (they move bytes
/// of any width).
const DType kMovedTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I64};

/// Random tensor of \p shape in \p m's storage type (int64 values in
/// [-1000, 1000) when that is I64).
TensorData data(CaseMaker &m, Shape shape) {
  if (m.dtype != DType::I64)
    return m.rnd(shape);
  TensorData drawn = m.f32(shape, -1000, 1000);
  std::vector<int64_t> values;
  for (uint64_t i = 0; i < drawn.getNumElements(); ++i)
    values.push_back(static_cast<int64_t>(drawn.getFloatElement(i)));
  return int64s(shape, values);
}

/// A case whose operands from \p firstConstant on are constants.
OpCase withConstants(OpCase c, unsigned firstConstant) {
  for (unsigned i = firstConstant; i < c.inputs.size(); ++i)
    c.constantOperands.push_back(i);
  c.agreement = Agreement::Exact;
  return c;
}

std::vector<OpCase> movementCases(DType dtype) {
  CaseMaker m(dtype, 800 + 1000 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  auto add = [&](OpCase c, unsigned firstConstant = ~0u) {
    cases.push_back(withConstants(std::move(c), firstConstant));
  };
  // Transpose.
  add(m.make("Transpose [2,3,5] perm 2,0,1", "", "Transpose",
             {data(m, {2, 3, 5})}, {intsAttr("perm", {2, 0, 1})}));
  add(m.make("Transpose [7,1023] default perm", "", "Transpose",
             {data(m, {7, 1023})}));
  add(m.make("Transpose [1] ", "", "Transpose", {data(m, {1})}));
  add(m.make("Transpose [2,1,3,4] perm 0,2,1,3", "", "Transpose",
             {data(m, {2, 1, 3, 4})}, {intsAttr("perm", {0, 2, 1, 3})}));
  // Concat.
  add(m.make("Concat axis 1 of three", "", "Concat",
             {data(m, {2, 3, 4}), data(m, {2, 1, 4}), data(m, {2, 5, 4})},
             {intAttr("axis", 1)}));
  add(m.make("Concat axis -1 [1023] [1]", "", "Concat",
             {data(m, {1023}), data(m, {1})}, {intAttr("axis", -1)}));
  add(m.make("Concat axis 0 with an empty input", "", "Concat",
             {data(m, {0, 3}), data(m, {7, 3})}, {intAttr("axis", 0)}));
  // Slice(data, starts, ends, axes?, steps?).
  add(m.make("Slice [5,7] axes 0,1", "", "Slice",
             {data(m, {5, 7}), int64s({2}, {1, 2}), int64s({2}, {4, 7}),
              int64s({2}, {0, 1})}),
      1);
  add(m.make("Slice negative step", "", "Slice",
             {data(m, {4, 9}), int64s({1}, {-1}), int64s({1}, {-10}),
              int64s({1}, {1}), int64s({1}, {-2})}),
      1);
  add(m.make("Slice [1023] step 3 ends past the end", "", "Slice",
             {data(m, {1023}), int64s({1}, {1}), int64s({1}, {5000}),
              int64s({1}, {0}), int64s({1}, {3})}),
      1);
  // Split.
  add(m.make("Split [6,5] axis 0 in three", "", "Split", {data(m, {6, 5})},
             {intAttr("axis", 0)}, 3));
  add(m.make("Split [2,7] axis 1 sizes 1,4,2", "", "Split",
             {data(m, {2, 7}), int64s({3}, {1, 4, 2})}, {intAttr("axis", 1)},
             3),
      1);
  // Pad(data, pads, constant_value?) in constant mode.
  add(m.make("Pad [3,4] pads 1,0,2,3", "", "Pad",
             {data(m, {3, 4}), int64s({4}, {1, 0, 2, 3})}),
      1);
  {
    TensorData value =
        dtype == DType::I64 ? int64s({}, {-7}) : m.rnd({}, 2.5f, 2.5f);
    add(m.make("Pad [7] pads 3,1 constant value", "", "Pad",
               {data(m, {7}), int64s({2}, {3, 1}), value}),
        1);
  }
  // Pad in reflect, edge and wrap modes (wrap needs opset 19; axes 18),
  // with pads longer than a dimension and negative (cropping) pads.
  add(m.make("Pad reflect [3,4] pads 2,1,1,3", "", "Pad",
             {data(m, {3, 4}), int64s({4}, {2, 1, 1, 3})},
             {stringAttr("mode", "reflect")}),
      1);
  add(m.make("Pad edge [7] pads 3,-2", "", "Pad",
             {data(m, {7}), int64s({2}, {3, -2})},
             {stringAttr("mode", "edge")}),
      1);
  {
    OpCase wrap = m.make("Pad wrap [2,3,4] pads 0,4,-1,1,2,5", "", "Pad",
                         {data(m, {2, 3, 4}), int64s({6}, {0, 4, -1, 1, 2, 5})},
                         {stringAttr("mode", "wrap")});
    wrap.onnxOpset = 19;
    add(wrap, 1);
    OpCase axes = m.make(
        "Pad reflect [4,5] axes -1 pads 7,2", "", "Pad",
        {data(m, {4, 5}), int64s({2}, {7, 2}), TensorData(), int64s({1}, {-1})},
        {stringAttr("mode", "reflect")});
    axes.onnxOpset = 18;
    add(axes, 1);
  }
  // Tile, Expand.
  add(m.make("Tile [2,3] repeats 3,2", "", "Tile",
             {data(m, {2, 3}), int64s({2}, {3, 2})}),
      1);
  add(m.make("Tile [1] repeats 1023", "", "Tile",
             {data(m, {1}), int64s({1}, {1023})}),
      1);
  add(m.make("Expand [3,1] to [2,3,4]", "", "Expand",
             {data(m, {3, 1}), int64s({3}, {2, 3, 4})}),
      1);
  add(m.make("Expand [1] to [1023]", "", "Expand",
             {data(m, {1}), int64s({1}, {1023})}),
      1);
  // Where(condition, X, Y), broadcasting.
  {
    std::vector<uint8_t> pick(12);
    for (size_t i = 0; i < pick.size(); ++i)
      pick[i] = (i * 5) % 3 != 0;
    add(m.make("Where [3,1,4] [2,1] [4]", "", "Where",
               {bools({3, 1, 4}, pick), data(m, {2, 1}), data(m, {4})}));
    std::vector<uint8_t> big(1023);
    for (size_t i = 0; i < big.size(); ++i)
      big[i] = (i * 7) % 5 < 2;
    add(m.make("Where [1023] [1] [1023]", "", "Where",
               {bools({1023}, big), data(m, {1}), data(m, {1023})}));
  }
  // Views: Reshape, Squeeze, Unsqueeze, Flatten, Identity.
  add(m.make("Reshape [2,3,4] to 0,-1", "", "Reshape",
             {data(m, {2, 3, 4}), int64s({2}, {0, -1})}),
      1);
  add(m.make("Reshape [1023] to 3,-1,31", "", "Reshape",
             {data(m, {1023}), int64s({3}, {3, -1, 31})}),
      1);
  add(m.make("Squeeze [1,7,1] axes 0,-1", "", "Squeeze",
             {data(m, {1, 7, 1}), int64s({2}, {0, -1})}),
      1);
  add(m.make("Squeeze [1] to a scalar", "", "Squeeze", {data(m, {1})}));
  add(m.make("Unsqueeze [7] axes 0,2", "", "Unsqueeze",
             {data(m, {7}), int64s({2}, {0, 2})}),
      1);
  add(m.make("Flatten [2,3,5] axis 2", "", "Flatten", {data(m, {2, 3, 5})},
             {intAttr("axis", 2)}));
  add(m.make("Identity [1023]", "", "Identity", {data(m, {1023})}));
  return cases;
}

} // namespace

TEST(CudaMovementParityTest, CasesRunOnTheCpuBackendAndPassTheCudaChecks) {
  // The harness and the cases, in every build: each module verifies, runs
  // on the CPU backend to finite results, and is accepted and planned by
  // the CUDA backend's prepare-time checks (which need no device).
  for (DType dtype : kMovedTypes)
    for (const OpCase &c : movementCases(dtype)) {
      SCOPED_TRACE(c.what);
      test::checkCpuHalf(c);
      test::expectCudaAccepts(c);
    }
}

TEST(CudaMovementParityTest, MovedElementsEqualTheCpuBackend) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kMovedTypes)
    test::expectCudaParity(movementCases(dtype),
                           {AllocationMode::Eager, AllocationMode::Planned});
}
