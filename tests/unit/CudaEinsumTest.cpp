//===- CudaEinsumTest.cpp - Einsum's CUDA plan, on the host ---------------===//
//
// EinsumPlan (backend/cuda/EinsumPlan.cpp) without a GPU: its loops, run on
// the host, give the CPU kernel's results within a stated fp32 / fp64
// tolerance, its GEMM forms equal the CPU kernel's, and it refuses what the
// CPU kernel refuses. The device's Einsum is checked with the other shape
// ops in CudaShapeTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/testing/KernelTestHarness.h"
#include "backend/cuda/EinsumPlan.h"
#include "ir/Module.h"
#include "tests/unit/TestSupport.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace gmopt;
using namespace gmopt::cpu::testing;

namespace {

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

struct EinsumCase {
  const char *equation;
  std::vector<std::vector<int64_t>> shapes;
};

std::vector<EinsumCase> einsumCases() {
  return {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ij,jk", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"ij->ji", {{3, 7}}},
      {"ij->", {{3, 7}}},
      {"ij", {{3, 7}}},
      {"i,i->", {{9}, {9}}},
      {"i,j->ij", {{3}, {4}}},
      {"abc,cd,de->abe", {{2, 3, 4}, {4, 3}, {3, 5}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"...ij,jk", {{2, 3, 4}, {4, 6}}},
      {"aB,Bc->ca", {{3, 4}, {4, 2}}},
      {"ab, bc -> ac", {{2, 3}, {3, 2}}},
      {"i...,i...->...", {{4, 2, 3}, {4, 1, 3}}},
      {"ijk,k->", {{2, 3, 4}, {4}}},
  };
}

template <typename T>
HostTensor randomOperand(DType dtype, const std::vector<int64_t> &shape,
                         unsigned seed) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> values = randomFloats(n, seed, -2.0f, 2.0f);
  return HostTensor::of<T>(dtype, shape,
                           std::vector<T>(values.begin(), values.end()));
}

template <typename T>
void expectEinsumIsTheCpuKernel(DType dtype, const EinsumCase &c,
                                double tolerance) {
  SCOPED_TRACE(std::string(c.equation) + " in " + dtypeName(dtype).str());
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
  std::vector<HostTensor> operands;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    shapes.emplace_back(c.shapes[i].begin(), c.shapes[i].end());
    operands.push_back(randomOperand<T>(dtype, c.shapes[i], 11 + i));
  }
  auto plan = cuda::planEinsum(c.equation, shapes);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  std::vector<HostTensor *> inputs;
  for (HostTensor &operand : operands)
    inputs.push_back(&operand);
  KernelRunner runner;
  auto y =
      runner.run("", "Einsum", inputs, {TensorType::get(dtype, plan->outShape)},
                 {stringAttr("equation", c.equation)});
  ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
  std::vector<T> expected = (*y)[0].values<T>();
  ASSERT_EQ(static_cast<int64_t>(expected.size()), plan->geometry.outElements);
  std::vector<const T *> data;
  std::vector<std::vector<T>> magnitudes;
  for (const HostTensor &operand : operands) {
    magnitudes.push_back(operand.values<T>());
    for (T &v : magnitudes.back())
      v = std::abs(v);
  }
  std::vector<const T *> absData;
  for (size_t i = 0; i < operands.size(); ++i) {
    data.push_back(reinterpret_cast<const T *>(operands[i].bytes.data()));
    absData.push_back(magnitudes[i].data());
  }
  for (int64_t e = 0; e < plan->geometry.outElements; ++e) {
    T value = cuda::einsumElement<T>(plan->geometry, data.data(), e);
    // Rounding grows with the sum of the terms' magnitudes.
    T scale = cuda::einsumElement<T>(plan->geometry, absData.data(), e);
    EXPECT_NEAR(value, expected[e], tolerance * (scale + 1)) << "element " << e;
  }
}

TEST(CudaShapeTest, EinsumIsTheCpuKernel) {
  for (const EinsumCase &c : einsumCases()) {
    expectEinsumIsTheCpuKernel<float>(DType::F32, c, 2e-6);
    expectEinsumIsTheCpuKernel<double>(DType::F64, c, 1e-14);
  }
}

/// Y = op(A) op(B) per batch on the host, in double, as cuBLASLt computes
/// it from the GEMM form's parameters over the operands' bytes.
std::vector<double> gemmOnTheHost(const cuda::EinsumGemm &g, const float *a,
                                  const float *b) {
  std::vector<double> y(g.batch * g.m * g.n, 0.0);
  for (int64_t t = 0; t < g.batch; ++t)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          double x = a[t * g.m * g.k + (g.transA ? p * g.m + i : i * g.k + p)];
          double z = b[t * g.k * g.n + (g.transB ? j * g.k + p : p * g.n + j)];
          sum += x * z;
        }
        y[(t * g.m + i) * g.n + j] = sum;
      }
  return y;
}

TEST(CudaShapeTest, EinsumGemmFormsAreTheCpuKernel) {
  struct Case {
    EinsumCase einsum;
    /// Whether the equation is one GEMM over the stored operands.
    bool gemm;
    bool transA = false, transB = false, swap = false;
  };
  std::vector<Case> cases = {
      {{"ij,jk->ik", {{3, 4}, {4, 5}}}, true},
      {{"ij,jk", {{3, 4}, {4, 5}}}, true},
      {{"ji,jk->ik", {{4, 3}, {4, 5}}}, true, true, false},
      {{"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}}, true},
      {{"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}}, true, false, true},
      {{"jk,ij->ik", {{4, 5}, {3, 4}}}, true, false, false, true},
      {{"aB,Bc->ca", {{3, 4}, {4, 2}}}, true, true, true, true},
      {{"i,i->", {{9}, {9}}}, true},
      {{"i,j->ij", {{3}, {4}}}, true},
      {{"abc,acd->abd", {{2, 3, 4}, {2, 4, 5}}}, true},
      {{"bij,bjk->bki", {{2, 3, 4}, {2, 4, 5}}}, true, true, true, true},
      // Not one GEMM: a permuted batch, a broadcast, a single-operand sum,
      // three operands, split groups.
      {{"bij,jbk->bik", {{2, 3, 4}, {4, 2, 5}}}, false},
      {{"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}}, false},
      {{"ijk,k->", {{2, 3, 4}, {4}}}, false},
      {{"abc,cd,de->abe", {{2, 3, 4}, {4, 3}, {3, 5}}}, false},
      {{"ij,jk->ki", {{3, 4}, {4, 3}}}, true, true, true, true},
      {{"ikj,jl->ilk", {{2, 3, 4}, {4, 5}}}, false},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.einsum.equation);
    llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
    std::vector<HostTensor> operands;
    for (size_t i = 0; i < c.einsum.shapes.size(); ++i) {
      shapes.emplace_back(c.einsum.shapes[i].begin(), c.einsum.shapes[i].end());
      operands.push_back(
          randomOperand<float>(DType::F32, c.einsum.shapes[i], 21 + i));
    }
    auto plan = cuda::planEinsum(c.einsum.equation, shapes);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    ASSERT_EQ(plan->gemm.has_value(), c.gemm);
    if (!c.gemm)
      continue;
    const cuda::EinsumGemm &g = *plan->gemm;
    EXPECT_EQ(g.transA, c.transA);
    EXPECT_EQ(g.transB, c.transB);
    EXPECT_EQ(g.swapOperands, c.swap);
    std::vector<HostTensor *> inputs;
    for (HostTensor &operand : operands)
      inputs.push_back(&operand);
    KernelRunner runner;
    auto y = runner.run("", "Einsum", inputs,
                        {TensorType::get(DType::F32, plan->outShape)},
                        {stringAttr("equation", c.einsum.equation)});
    ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
    std::vector<float> expected = (*y)[0].values<float>();
    const float *a =
        reinterpret_cast<const float *>(operands[g.swapOperands].bytes.data());
    const float *b =
        reinterpret_cast<const float *>(operands[!g.swapOperands].bytes.data());
    std::vector<double> product = gemmOnTheHost(g, a, b);
    ASSERT_EQ(product.size(), expected.size());
    for (size_t e = 0; e < product.size(); ++e)
      EXPECT_NEAR(product[e], expected[e], 1e-5 * (1 + std::abs(product[e])))
          << "element " << e;
  }
}

TEST(CudaShapeTest, EinsumPlanRefusesWhatTheCpuKernelRefuses) {
  struct Case {
    const char *equation;
    std::vector<std::vector<int64_t>> shapes;
    const char *message;
  };
  std::vector<Case> cases = {
      {"ii->i", {{3, 3}}, "diagonal"},
      {"ij,jk->ik", {{3, 4}, {5, 6}}, "extents disagree"},
      {"ij,jk->ik", {{3, 4}}, "names 2 operands"},
      {"ijk->i", {{3, 4}}, "does not match rank"},
      {"ij->iz", {{3, 4}}, "appears in no operand"},
      {"ij->ii", {{3, 4}}, "repeated"},
      {"i1->i", {{3, 4}}, "invalid character"},
      {"", {}, "missing equation"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.equation);
    llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
    std::vector<HostTensor> operands;
    for (const std::vector<int64_t> &shape : c.shapes) {
      shapes.emplace_back(shape.begin(), shape.end());
      operands.push_back(randomOperand<float>(DType::F32, shape, 3));
    }
    auto plan = cuda::planEinsum(c.equation, shapes);
    ASSERT_FALSE(bool(plan));
    std::string message = llvm::toString(plan.takeError());
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    std::vector<HostTensor *> inputs;
    for (HostTensor &operand : operands)
      inputs.push_back(&operand);
    KernelRunner runner;
    EXPECT_NE(test::errorOf(runner.run("", "Einsum", inputs,
                                       {TensorType::get(DType::F32, {3})},
                                       {stringAttr("equation", c.equation)})),
              "");
  }
  // Beyond the CUDA kernel's own limits.
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> nine(9, {2});
  auto many = cuda::planEinsum("a,a,a,a,a,a,a,a,a->a", nine);
  ASSERT_FALSE(bool(many));
  EXPECT_NE(llvm::toString(many.takeError()).find("more than 8 operands"),
            std::string::npos);
}

} // namespace
