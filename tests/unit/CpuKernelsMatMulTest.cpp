//===- CpuKernelsMatMulTest.cpp - MatMul, Gemm, FusedMatMul, Einsum -------===//
//
// Matrix products against naive triple loops: MatMul with 1-D operands and
// broadcast batches (including the folded-batch path), integer MatMul,
// Gemm with transposes, alpha, beta and a broadcast C, FusedMatMul with
// transA/transB/alpha/transBatch, and Einsum equations (contractions,
// batches, implicit output, ellipsis broadcasting, reductions, transposes,
// three operands) against a generic reference; the GEMM block plan (small
// products whole, deep products in few wide blocks).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Blas.h"
#include "backend/cpu/testing/KernelTestHarness.h"

#include "gtest/gtest.h"

#include <cmath>
#include <map>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::cpu::testing;

namespace {

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Naive batched matmul with numpy broadcasting of ranks >= 2.
std::vector<double> naiveMatMul(const std::vector<float> &a,
                                std::vector<int64_t> aShape,
                                const std::vector<float> &b,
                                std::vector<int64_t> bShape,
                                std::vector<int64_t> &outShape) {
  bool aVector = aShape.size() == 1, bVector = bShape.size() == 1;
  if (aVector)
    aShape.insert(aShape.begin(), 1);
  if (bVector)
    bShape.push_back(1);
  int64_t m = aShape[aShape.size() - 2], k = aShape.back(), n = bShape.back();
  size_t batchRank = std::max(aShape.size(), bShape.size()) - 2;
  std::vector<int64_t> batch(batchRank, 1);
  auto dimOf = [&](const std::vector<int64_t> &s, size_t d) -> int64_t {
    size_t offset = batchRank - (s.size() - 2);
    return d < offset ? 1 : s[d - offset];
  };
  for (size_t d = 0; d < batchRank; ++d)
    batch[d] = std::max(dimOf(aShape, d), dimOf(bShape, d));
  int64_t batchCount = count(batch);
  std::vector<double> out(batchCount * m * n);
  for (int64_t t = 0; t < batchCount; ++t) {
    int64_t rest = t, aIndex = 0, bIndex = 0, aStride = 1, bStride = 1;
    for (int d = batchRank - 1; d >= 0; --d) {
      int64_t coord = rest % batch[d];
      rest /= batch[d];
      int64_t da = dimOf(aShape, d), db = dimOf(bShape, d);
      aIndex += (da == 1 ? 0 : coord) * aStride;
      bIndex += (db == 1 ? 0 : coord) * bStride;
      aStride *= da;
      bStride *= db;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += static_cast<double>(a[(aIndex * m + i) * k + p]) *
                 b[(bIndex * k + p) * n + j];
        out[(t * m + i) * n + j] = sum;
      }
  }
  outShape = batch;
  if (!aVector)
    outShape.push_back(m);
  if (!bVector)
    outShape.push_back(n);
  return out;
}

TEST(CpuMatMulTest, MatchesNaiveWithBroadcastAndVectors) {
  struct Case {
    std::vector<int64_t> a, b;
  } cases[] = {{{3, 4}, {4, 5}},
               {{2, 3, 4}, {4, 5}},
               {{2, 3, 4}, {2, 4, 5}},
               {{2, 1, 3, 4}, {5, 4, 2}},
               {{4}, {4, 5}},
               {{2, 3, 4}, {4}},
               {{4}, {4}},
               {{1, 3, 4}, {6, 4, 2}},
               {{3, 0}, {0, 2}}};
  unsigned seed = 1;
  for (const Case &c : cases) {
    std::vector<float> a = randomFloats(count(c.a), ++seed),
                       b = randomFloats(count(c.b), ++seed);
    std::vector<int64_t> outShape;
    std::vector<double> want = naiveMatMul(a, c.a, b, c.b, outShape);
    KernelRunner runner;
    HostTensor ha = HostTensor::f32(c.a, a), hb = HostTensor::f32(c.b, b);
    auto result = runner.run("", "MatMul", {&ha, &hb}, {f32Type(outShape)});
    ASSERT_TRUE(static_cast<bool>(result))
        << llvm::toString(result.takeError());
    std::vector<float> got = (*result)[0].floats();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
    // f64 runs through dgemm.
    std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    HostTensor da = HostTensor::f64(c.a, ad), db = HostTensor::f64(c.b, bd);
    auto doubles = runner.run("", "MatMul", {&da, &db},
                              {TensorType::get(DType::F64, outShape)});
    ASSERT_TRUE(static_cast<bool>(doubles));
    std::vector<double> gotD = (*doubles)[0].values<double>();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(gotD[i], want[i], 1e-12 * (1 + std::fabs(want[i])));
  }
}

TEST(CpuMatMulTest, IntegerMatMulAndShapeErrors) {
  KernelRunner runner;
  HostTensor a = HostTensor::i64({2, 2}, {1, 2, 3, 4});
  HostTensor b = HostTensor::i64({2, 1}, {5, 6});
  auto result =
      runner.run("", "MatMul", {&a, &b}, {TensorType::get(DType::I64, {2, 1})});
  ASSERT_TRUE(static_cast<bool>(result));
  EXPECT_EQ((*result)[0].values<int64_t>(), (std::vector<int64_t>{17, 39}));
  HostTensor x = HostTensor::f32({2, 3}, std::vector<float>(6, 1));
  HostTensor y = HostTensor::f32({2, 3}, std::vector<float>(6, 1));
  auto bad = runner.run("", "MatMul", {&x, &y}, {f32Type({2, 3})});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("inner dimensions differ"),
            std::string::npos);
}

std::vector<float> transpose2D(const std::vector<float> &m, int64_t rows,
                               int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      t[j * rows + i] = m[i * cols + j];
  return t;
}

TEST(CpuMatMulTest, GemmTransposesAlphaBetaAndBroadcastC) {
  int64_t m = 3, k = 4, n = 5;
  std::vector<float> a = randomFloats(m * k, 10), b = randomFloats(k * n, 11);
  std::vector<int64_t> unusedShape;
  std::vector<double> product = naiveMatMul(a, {m, k}, b, {k, n}, unusedShape);
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (int cKind = 0; cKind < 4; ++cKind) {
        KernelRunner runner;
        HostTensor ha = transA ? HostTensor::f32({k, m}, transpose2D(a, m, k))
                               : HostTensor::f32({m, k}, a);
        HostTensor hb = transB ? HostTensor::f32({n, k}, transpose2D(b, k, n))
                               : HostTensor::f32({k, n}, b);
        std::vector<int64_t> cShapes[] = {{}, {n}, {m, 1}, {m, n}};
        std::vector<float> c = randomFloats(count(cShapes[cKind]), 12 + cKind);
        HostTensor hc = HostTensor::f32(cShapes[cKind], c);
        float alpha = 0.5f, beta = 2.0f;
        auto result =
            runner.run("", "Gemm", {&ha, &hb, &hc}, {f32Type({m, n})},
                       {intAttr("transA", transA), intAttr("transB", transB),
                        floatAttr("alpha", alpha), floatAttr("beta", beta)});
        ASSERT_TRUE(static_cast<bool>(result))
            << llvm::toString(result.takeError());
        std::vector<float> got = (*result)[0].floats();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float cv = cKind == 0   ? c[0]
                       : cKind == 1 ? c[j]
                       : cKind == 2 ? c[i]
                                    : c[i * n + j];
            EXPECT_NEAR(got[i * n + j], alpha * product[i * n + j] + beta * cv,
                        1e-5);
          }
      }
  // Without C.
  KernelRunner runner;
  HostTensor ha = HostTensor::f32({m, k}, a), hb = HostTensor::f32({k, n}, b);
  auto noC = runner.run("", "Gemm", {&ha, &hb}, {f32Type({m, n})});
  ASSERT_TRUE(static_cast<bool>(noC));
  for (int64_t i = 0; i < m * n; ++i)
    EXPECT_NEAR((*noC)[0].floats()[i], product[i], 1e-5);
}

TEST(CpuMatMulTest, FusedMatMulTransposesAndScales) {
  int64_t batch = 2, m = 3, k = 4, n = 5;
  std::vector<float> a = randomFloats(batch * m * k, 20),
                     b = randomFloats(batch * k * n, 21);
  std::vector<int64_t> outShape;
  std::vector<double> want =
      naiveMatMul(a, {batch, m, k}, b, {batch, k, n}, outShape);
  // Store A as [batch, k, m] and B as [batch, n, k].
  std::vector<float> at, bt;
  for (int64_t t = 0; t < batch; ++t) {
    auto ta = transpose2D(
        std::vector<float>(a.begin() + t * m * k, a.begin() + (t + 1) * m * k),
        m, k);
    auto tb = transpose2D(
        std::vector<float>(b.begin() + t * k * n, b.begin() + (t + 1) * k * n),
        k, n);
    at.insert(at.end(), ta.begin(), ta.end());
    bt.insert(bt.end(), tb.begin(), tb.end());
  }
  KernelRunner runner;
  HostTensor ha = HostTensor::f32({batch, k, m}, at),
             hb = HostTensor::f32({batch, n, k}, bt);
  auto result = runner.run(
      kMsDomain, "FusedMatMul", {&ha, &hb}, {f32Type({batch, m, n})},
      {intAttr("transA", 1), intAttr("transB", 1), floatAttr("alpha", -2.0f)});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR((*result)[0].floats()[i], -2 * want[i], 1e-5);
  // transBatchA: A stored [m, batch, k] (dimension 0 moves before the last).
  std::vector<float> batchFirst(batch * m * k);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        batchFirst[(i * batch + t) * k + p] = a[(t * m + i) * k + p];
  HostTensor hab = HostTensor::f32({m, batch, k}, batchFirst),
             hbn = HostTensor::f32({batch, k, n}, b);
  auto transBatch =
      runner.run(kMsDomain, "FusedMatMul", {&hab, &hbn},
                 {f32Type({batch, m, n})}, {intAttr("transBatchA", 1)});
  ASSERT_TRUE(static_cast<bool>(transBatch))
      << llvm::toString(transBatch.takeError());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR((*transBatch)[0].floats()[i], want[i], 1e-5);
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// Generic einsum over explicit, ellipsis-free equations: loops over every
/// assignment of every label.
std::vector<double> naiveEinsum(const std::string &equation,
                                const std::vector<std::vector<float>> &operands,
                                const std::vector<std::vector<int64_t>> &shapes,
                                std::vector<int64_t> &outShape) {
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow), rhs = equation.substr(arrow + 2);
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  std::map<char, int64_t> sizes;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t d = 0; d < terms[t].size(); ++d)
      sizes[terms[t][d]] = shapes[t][d];
  std::vector<char> labels;
  for (auto &entry : sizes)
    labels.push_back(entry.first);
  outShape.clear();
  for (char c : rhs)
    outShape.push_back(sizes[c]);
  std::vector<double> out(count(outShape), 0);
  std::map<char, int64_t> value;
  int64_t total = 1;
  for (char c : labels)
    total *= sizes[c];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (char c : labels) {
      value[c] = rest % sizes[c];
      rest /= sizes[c];
    }
    double term = 1;
    for (size_t t = 0; t < terms.size(); ++t) {
      int64_t index = 0;
      for (size_t d = 0; d < terms[t].size(); ++d)
        index = index * shapes[t][d] + value[terms[t][d]];
      term *= operands[t][index];
    }
    int64_t outIndex = 0;
    for (size_t d = 0; d < rhs.size(); ++d)
      outIndex = outIndex * outShape[d] + value[rhs[d]];
    out[outIndex] += term;
  }
  return out;
}

TEST(CpuGemmBlockingTest, DeepProductsGetFewWideBlocks) {
  // Small products stay one call.
  GemmBlocking small = planGemmBlocks(16, 64, 32);
  EXPECT_EQ(small.count, 1);
  EXPECT_EQ(small.size, 64);
  // A shallow product splits its longer extent into up to 16 blocks.
  GemmBlocking shallow = planGemmBlocks(128, 3072, 768);
  EXPECT_FALSE(shallow.splitRows);
  EXPECT_EQ(shallow.count, 16);
  GemmBlocking tall = planGemmBlocks(3072, 768, 128);
  EXPECT_TRUE(tall.splitRows);
  EXPECT_EQ(tall.count, 16);
  // Deep products (K well above 8x the split extent): two blocks, however
  // much work they carry (GPT-2's input gradients through the MLP and the
  // 50257-token head).
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{128, 768, 3072},
                         {128, 768, 50257},
                         {64, 576, 3136}}) {
    GemmBlocking deep = planGemmBlocks(m, n, k);
    EXPECT_FALSE(deep.splitRows);
    EXPECT_EQ(deep.count, 2) << m << "x" << n << "x" << k;
    EXPECT_GE(deep.size * deep.count, n);
  }
  // In between: blocks at least K/8 wide.
  GemmBlocking middle = planGemmBlocks(128, 768, 768);
  EXPECT_EQ(middle.count, 8);
  EXPECT_GE(middle.size * 8, 768);
}

TEST(CpuEinsumTest, EquationsMatchTheReference) {
  struct Case {
    std::string equation;
    std::vector<std::vector<int64_t>> shapes;
  } cases[] = {{"ij,jk->ik", {{3, 4}, {4, 5}}},
               {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
               {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
               {"ij,kj->ik", {{3, 4}, {5, 4}}},
               {"ij->ji", {{3, 4}}},
               {"ijk->i", {{2, 3, 4}}},
               {"ij,ij->i", {{3, 4}, {3, 4}}},
               {"i,j->ij", {{3}, {4}}},
               {"ia,ab,bj->ij", {{2, 3}, {3, 4}, {4, 5}}},
               {"abc,cd->bd", {{2, 3, 4}, {4, 5}}},
               {"ij,jk->", {{2, 3}, {3, 2}}}};
  unsigned seed = 40;
  for (const Case &c : cases) {
    std::vector<std::vector<float>> operands;
    std::vector<HostTensor> tensors;
    for (const auto &shape : c.shapes) {
      operands.push_back(randomFloats(count(shape), ++seed));
      tensors.push_back(HostTensor::f32(shape, operands.back()));
    }
    std::vector<int64_t> outShape;
    std::vector<double> want =
        naiveEinsum(c.equation, operands, c.shapes, outShape);
    std::vector<HostTensor *> inputs;
    for (HostTensor &t : tensors)
      inputs.push_back(&t);
    KernelRunner runner;
    auto result = runner.run("", "Einsum", inputs, {f32Type(outShape)},
                             {stringAttr("equation", c.equation)});
    ASSERT_TRUE(static_cast<bool>(result))
        << c.equation << ": " << llvm::toString(result.takeError());
    std::vector<float> got = (*result)[0].floats();
    ASSERT_EQ(got.size(), want.size()) << c.equation;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
          << c.equation;
  }
}

TEST(CpuEinsumTest, ImplicitOutputAndEllipsis) {
  KernelRunner runner;
  std::vector<float> a = randomFloats(2 * 3, 60), b = randomFloats(3 * 4, 61);
  HostTensor ha = HostTensor::f32({2, 3}, a), hb = HostTensor::f32({3, 4}, b);
  // Implicit: "ij,jk" keeps the labels used once, sorted: "ik".
  auto implicit = runner.run("", "Einsum", {&ha, &hb}, {f32Type({2, 4})},
                             {stringAttr("equation", "ij,jk")});
  ASSERT_TRUE(static_cast<bool>(implicit))
      << llvm::toString(implicit.takeError());
  std::vector<int64_t> shape;
  std::vector<double> want =
      naiveEinsum("ij,jk->ik", {a, b}, {{2, 3}, {3, 4}}, shape);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR((*implicit)[0].floats()[i], want[i], 1e-5);
  // "ba" implicitly means "ba->ab": a transpose.
  auto swapped = runner.run("", "Einsum", {&ha}, {f32Type({3, 2})},
                            {stringAttr("equation", "ba")});
  ASSERT_TRUE(static_cast<bool>(swapped));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ((*swapped)[0].floats()[j * 2 + i], a[i * 3 + j]);
  // Batched matmul with a broadcast ellipsis: [2,1,3,4] x [5,4,2].
  std::vector<float> x = randomFloats(2 * 1 * 3 * 4, 62),
                     y = randomFloats(5 * 4 * 2, 63);
  HostTensor hx = HostTensor::f32({2, 1, 3, 4}, x),
             hy = HostTensor::f32({5, 4, 2}, y);
  auto ellipsis = runner.run("", "Einsum", {&hx, &hy}, {f32Type({2, 5, 3, 2})},
                             {stringAttr("equation", "...ij,...jk->...ik")});
  ASSERT_TRUE(static_cast<bool>(ellipsis))
      << llvm::toString(ellipsis.takeError());
  std::vector<int64_t> outShape;
  std::vector<double> ref =
      naiveMatMul(x, {2, 1, 3, 4}, y, {5, 4, 2}, outShape);
  ASSERT_EQ(outShape, (std::vector<int64_t>{2, 5, 3, 2}));
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR((*ellipsis)[0].floats()[i], ref[i], 1e-5);
  // Diagonals are refused with an error, not a wrong answer.
  HostTensor square = HostTensor::f32({3, 3}, randomFloats(9, 64));
  auto diagonal = runner.run("", "Einsum", {&square}, {f32Type({3})},
                             {stringAttr("equation", "ii->i")});
  ASSERT_FALSE(static_cast<bool>(diagonal));
  EXPECT_NE(llvm::toString(diagonal.takeError()).find("diagonal"),
            std::string::npos);
}

} // namespace

//===----------------------------------------------------------------------===//
// 16-bit products in bounded fp32 blocks
//===----------------------------------------------------------------------===//

namespace {

/// bf16 or f16 bits of \p values, and the floats they hold.
HostTensor halfTensor(DType type, std::vector<int64_t> shape,
                      const std::vector<float> &values) {
  return type == DType::BF16 ? HostTensor::bf16(shape, values)
                             : HostTensor::f16(shape, values);
}

float halfBitsToFloat(DType type, uint16_t bits) {
  return type == DType::BF16 ? bfloat16ToFloat(bits) : halfToFloat(bits);
}

/// Expects the 16-bit result \p got within one unit in the last place of
/// the fp32 product \p want rounded to \p type (the blocks run the same
/// fp32 dot products as a whole-tensor product; BLAS may still order a
/// block's sums differently from the whole matrix's).
void expectWithinOneUlp(DType type, const std::vector<uint16_t> &got,
                        const std::vector<float> &want,
                        const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    float rounded =
        halfBitsToFloat(type, type == DType::BF16 ? floatToBFloat16(want[i])
                                                  : floatToHalf(want[i]));
    float ulp =
        std::ldexp(std::fabs(rounded) + 1e-30f, type == DType::BF16 ? -7 : -10);
    ASSERT_LE(std::fabs(halfBitsToFloat(type, got[i]) - rounded), ulp)
        << what << " element " << i;
  }
}

} // namespace

TEST(CpuMatMulTest, HalfProductsRunInBoundedBlocks) {
  // K = 2^18: op(B) panels of 8 columns and op(A) blocks of 8 rows (each
  // block at most 2^21 fp32 elements), so M = N = 20 takes three of each,
  // the last partial. Whole-tensor staging would reserve fp32 copies of A,
  // B and C (over 40 MB); the blocks need about 16 MiB.
  const int64_t m = 20, n = 20, k = int64_t(1) << 18;
  std::vector<float> a = randomFloats(m * k, 41, -1, 1),
                     b = randomFloats(k * n, 42, -1, 1);
  for (DType type : {DType::BF16, DType::F16}) {
    for (auto [transA, transB] :
         {std::pair<int, int>{0, 0}, {1, 0}, {0, 1}, {1, 1}}) {
      std::string what = std::string(type == DType::BF16 ? "bf16" : "f16") +
                         " transA=" + std::to_string(transA) +
                         " transB=" + std::to_string(transB);
      std::vector<int64_t> aShape =
          transA ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
      std::vector<int64_t> bShape =
          transB ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
      HostTensor ha = halfTensor(type, aShape, a),
                 hb = halfTensor(type, bShape, b);
      HostTensor fa = HostTensor::f32(aShape, ha.floats()),
                 fb = HostTensor::f32(bShape, hb.floats());
      std::vector<NamedAttribute> attrs = {intAttr("transA", transA),
                                           intAttr("transB", transB),
                                           floatAttr("alpha", 0.5f)};
      // Planned: the declared workspace serves every request.
      KernelRunner planned;
      auto half = planned.run(kMsDomain, "FusedMatMul", {&ha, &hb},
                              {TensorType::get(type, {m, n})}, attrs);
      ASSERT_TRUE(static_cast<bool>(half))
          << what << ": " << llvm::toString(half.takeError());
      EXPECT_EQ(planned.getAllocator().getReport().peakBytes, 0u) << what;
      KernelRunner runner;
      auto full = runner.run(kMsDomain, "FusedMatMul", {&fa, &fb},
                             {f32Type({m, n})}, attrs);
      ASSERT_TRUE(static_cast<bool>(full)) << what;
      expectWithinOneUlp(type, (*half)[0].values<uint16_t>(),
                         (*full)[0].floats(), what);
    }
  }
}

TEST(CpuMatMulTest, HalfBatchedProductsAndGemmMatchFloat) {
  KernelRunner runner;
  // A batch broadcast against a shared B (folded into one product) and
  // against a per-batch B.
  std::vector<float> a = randomFloats(2 * 3 * 5 * 7, 43, -2, 2),
                     b = randomFloats(3 * 7 * 4, 44, -2, 2),
                     c = randomFloats(4, 45, -2, 2);
  for (std::vector<int64_t> bShape :
       {std::vector<int64_t>{7, 4}, std::vector<int64_t>{3, 7, 4}}) {
    int64_t bElements = 1;
    for (int64_t extent : bShape)
      bElements *= extent;
    std::vector<float> bValues(b.begin(), b.begin() + bElements);
    HostTensor ha = HostTensor::bf16({2, 3, 5, 7}, a),
               hb = HostTensor::bf16(bShape, bValues);
    HostTensor fa = HostTensor::f32({2, 3, 5, 7}, ha.floats()),
               fb = HostTensor::f32(bShape, hb.floats());
    auto half = runner.run("", "MatMul", {&ha, &hb},
                           {TensorType::get(DType::BF16, {2, 3, 5, 4})});
    auto full = runner.run("", "MatMul", {&fa, &fb}, {f32Type({2, 3, 5, 4})});
    ASSERT_TRUE(half && full);
    expectWithinOneUlp(DType::BF16, (*half)[0].values<uint16_t>(),
                       (*full)[0].floats(),
                       "MatMul B rank " + std::to_string(bShape.size()));
  }
  // Gemm with a broadcast C and beta: C is read back into each block.
  HostTensor ha = HostTensor::f16(
                 {7, 5}, std::vector<float>(a.begin(), a.begin() + 35)),
             hb = HostTensor::f16(
                 {7, 4}, std::vector<float>(b.begin(), b.begin() + 28)),
             hc = HostTensor::f16({4}, c);
  HostTensor fa = HostTensor::f32({7, 5}, ha.floats()),
             fb = HostTensor::f32({7, 4}, hb.floats()),
             fc = HostTensor::f32({4}, hc.floats());
  std::vector<NamedAttribute> attrs = {
      intAttr("transA", 1), floatAttr("alpha", 1.5f), floatAttr("beta", -0.5f)};
  auto half = runner.run("", "Gemm", {&ha, &hb, &hc},
                         {TensorType::get(DType::F16, {5, 4})}, attrs);
  ASSERT_TRUE(static_cast<bool>(half)) << llvm::toString(half.takeError());
  auto full = runner.run("", "Gemm", {&fa, &fb, &fc}, {f32Type({5, 4})}, attrs);
  ASSERT_TRUE(static_cast<bool>(full)) << llvm::toString(full.takeError());
  expectWithinOneUlp(DType::F16, (*half)[0].values<uint16_t>(),
                     (*full)[0].floats(), "Gemm");
}
