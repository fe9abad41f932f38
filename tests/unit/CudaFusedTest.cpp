//===- CudaFusedTest.cpp - Fused attention and cross entropy on CUDA ------===//
//
// Parity of the CUDA kernels of gmopt's fused ops (backend/cuda/
// CudaFusedDispatch.cpp, AttentionKernels.cu, CrossEntropyKernels.cu)
// against the CPU kernels (backend/cpu/AttentionKernels.cpp,
// CrossEntropyKernels.cpp), in f32, f16 and bf16, eagerly and planned (the
// planned run's scratch is the CUDA workspace model's, so a rule that sized
// it too small fails there):
//  - FusedAttention and FusedAttentionGrad: several key tiles and a query
//    count that is no multiple of the row block, causal with sq != sk,
//    grouped-query heads with an additive mask broadcast over the batch,
//    a boolean mask of either polarity with a finite fill and K given
//    transposed, and dropout from a training flag read on the device,
//    whose masks the CUDA kernels must draw bit for bit as the CPU's
//    (a different draw moves O far beyond the tolerance);
//  - FusedLinearCrossEntropy and its gradient: one vocabulary block and
//    several (the last one narrow), W as [V, D] and [D, V], mean, sum and
//    none, ignore_index rows, int64 and int32 labels.
// The gradients take the CPU forward's O and log-sum-exp, as a training
// step does. On the host, the kernels' score math (AttentionMath.h) is
// checked against AttentionSpec and its dropout decisions against the
// unfused Dropout's mask of the same stream, bit for bit. Without a GPU the
// CUDA half skips ("no CUDA device"); the CPU half (each module verifies and
// runs on the CPU backend to finite results, the CUDA kernel table accepts it
// and a CUDA plan is made) runs in every build with the CUDA backend.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cuda/AttentionMath.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaKernelTable.h"
#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/ops/AttentionSpec.h"
#include "ir/ops/CrossEntropySpec.h"

#include "tests/unit/OpParityHarness.h"
#include "tests/unit/OpTestHelpers.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace gmopt;
using test::CaseMaker;
using test::floatAttr;
using test::intAttr;
using test::OpCase;

namespace {

using Shape = std::vector<int64_t>;

/// The static shape of \p tensor.
Shape shapeOf(const TensorData &tensor) {
  llvm::SmallVector<int64_t, 4> dims = tensor.getType().getStaticShape();
  return Shape(dims.begin(), dims.end());
}

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

/// One attention case: the forward's operands and attributes.
struct AttentionInputs {
  std::string what;
  std::vector<TensorData> operands;
  std::vector<NamedAttribute> attrs;
  /// Operands from this index on are constants (ratio, training flag).
  unsigned firstConstant = ~0u;
};

std::vector<AttentionInputs> attentionInputs(CaseMaker &m) {
  std::vector<AttentionInputs> cases;
  // Several key tiles (70 keys), 41 query rows (no multiple of 8).
  cases.push_back(
      {"plain [2,3,41,16] x 70 keys",
       {m.rnd({2, 3, 41, 16}), m.rnd({2, 3, 70, 16}), m.rnd({2, 3, 70, 24})},
       {}});
  // Causal with more keys than queries (the last query sees every key).
  cases.push_back(
      {"causal sq 40 sk 70 head 64",
       {m.rnd({1, 2, 40, 64}), m.rnd({1, 2, 70, 64}), m.rnd({1, 2, 70, 64})},
       {intAttr("causal", 1), floatAttr("scale", 0.2f)}});
  // Grouped-query: 4 query heads over 2 key/value heads, an additive mask
  // broadcast over batch and heads.
  cases.push_back({"GQA 4/2 heads, additive [1,1,9,33] mask",
                   {m.rnd({2, 4, 9, 32}), m.rnd({2, 2, 33, 32}),
                    m.rnd({2, 2, 33, 32}), m.rnd({1, 1, 9, 33}, -2, 0)},
                   {}});
  {
    // A boolean mask whose true elements are masked, with a finite fill,
    // and K given as [B, H, d, sk]; one row masked on every key.
    std::vector<uint8_t> masked(2 * 12 * 45);
    for (size_t i = 0; i < masked.size(); ++i)
      masked[i] = (i * 7) % 5 == 0 || (i >= 45 * 3 && i < 45 * 4);
    cases.push_back(
        {"bool mask, true masks, fill -1e4, K transposed, head 128",
         {m.rnd({2, 1, 12, 128}), m.rnd({2, 1, 128, 45}),
          m.rnd({2, 1, 45, 128}), test::bools({2, 1, 12, 45}, masked)},
         {intAttr("k_transposed", 1), intAttr("mask_true_keeps", 0),
          floatAttr("masked_value", -1e4f)}});
  }
  // Dropout, the ratio and the training flag constants, with causality.
  cases.push_back(
      {"dropout 0.3 causal [1,2,37,32] x 37",
       {m.rnd({1, 2, 37, 32}), m.rnd({1, 2, 37, 32}), m.rnd({1, 2, 37, 32}),
        TensorData(), test::floats({}, {0.3f}), test::bools({}, {1})},
       {intAttr("causal", 1)},
       4});
  return cases;
}

/// The forward case of \p in.
OpCase attentionForward(CaseMaker &m, const AttentionInputs &in) {
  OpCase c = m.make("FusedAttention " + in.what, kGmoptDomain,
                    kFusedAttentionOp, in.operands, in.attrs, 2);
  for (unsigned i = in.firstConstant; i < in.operands.size(); ++i)
    c.constantOperands.push_back(i);
  // Long fp32 sums in another order (and f16's exp of larger scores).
  c.toleranceScale = 4;
  return c;
}

/// The gradient case of \p in, given the CPU forward's O and LSE.
OpCase attentionGrad(CaseMaker &m, const AttentionInputs &in,
                     const std::vector<TensorData> &forward) {
  const TensorData &o = forward[0];
  std::vector<TensorData> operands = {m.rnd(shapeOf(o))};
  for (unsigned i = 0; i < 3; ++i)
    operands.push_back(in.operands[i]);
  operands.push_back(o);
  operands.push_back(forward[1]);
  for (unsigned i = 3; i < in.operands.size(); ++i)
    operands.push_back(in.operands[i]);
  OpCase c = m.make("FusedAttentionGrad " + in.what, kGmoptDomain,
                    kFusedAttentionGradOp, operands, in.attrs, 3);
  if (in.firstConstant != ~0u)
    for (unsigned i = in.firstConstant + 3; i < operands.size(); ++i)
      c.constantOperands.push_back(i);
  c.toleranceScale = 8;
  return c;
}

/// One cross-entropy case: h, W, labels and attributes.
struct CrossEntropyInputs {
  std::string what;
  TensorData h, w, labels;
  std::vector<NamedAttribute> attrs;
  bool noReduction = false;
};

std::vector<CrossEntropyInputs> crossEntropyInputs(CaseMaker &m) {
  std::vector<CrossEntropyInputs> cases;
  cases.push_back({"[6,16] x W[50,16] mean",
                   m.rnd({6, 16}),
                   m.rnd({50, 16}),
                   test::int64s({6}, {0, 49, 7, 7, 31, 2}),
                   {}});
  {
    // Three vocabulary blocks (512, 512, 76), two ignored rows, sum.
    std::vector<int64_t> labels;
    for (int64_t r = 0; r < 10; ++r)
      labels.push_back(r == 3 || r == 8 ? -100 : (r * 389) % 1100);
    cases.push_back({"[2,5,24] x W[1100,24] ignore -100 sum",
                     m.rnd({2, 5, 24}),
                     m.rnd({1100, 24}),
                     test::int64s({2, 5}, labels),
                     {intAttr("ignore_index", -100),
                      {"reduction", Attribute::getString("sum")}}});
  }
  {
    // W as [D, V], int32 labels, no reduction.
    std::vector<int32_t> labels = {0, 699, 512, 511, 300, 13, 650};
    cases.push_back(
        {"[7,24] x W[24,700] trans_w 0 none int32",
         m.rnd({7, 24}),
         m.rnd({24, 700}),
         TensorData::fromValues<int32_t>(DType::I32, {7}, labels),
         {intAttr("trans_w", 0), {"reduction", Attribute::getString("none")}},
         true});
  }
  return cases;
}

OpCase crossEntropyForward(CaseMaker &m, const CrossEntropyInputs &in) {
  OpCase c =
      m.make("FusedLinearCrossEntropy " + in.what, kGmoptDomain,
             kFusedLinearCrossEntropyOp, {in.h, in.w, in.labels}, in.attrs, 2);
  c.toleranceScale = 4;
  return c;
}

OpCase crossEntropyGrad(CaseMaker &m, const CrossEntropyInputs &in,
                        const std::vector<TensorData> &forward) {
  TensorData dLoss = m.rnd(shapeOf(forward[0]), 0.5f, 1.5f);
  OpCase c = m.make("FusedLinearCrossEntropyGrad " + in.what, kGmoptDomain,
                    kFusedLinearCrossEntropyGradOp,
                    {dLoss, in.h, in.w, in.labels, forward[1]}, in.attrs, 2);
  c.toleranceScale = 8;
  return c;
}

/// Every forward case and, from the CPU forward's results, its gradient.
std::vector<OpCase> fusedCases(DType dtype) {
  CaseMaker m(dtype, 3600 + 100 * static_cast<unsigned>(dtype));
  std::vector<OpCase> cases;
  auto addWithGrad = [&](OpCase forward, auto makeGrad) {
    auto cpu = test::runOpCase(forward, /*onCuda=*/false);
    if (!cpu) {
      ADD_FAILURE() << forward.what << ": " << llvm::toString(cpu.takeError());
      return;
    }
    cases.push_back(forward);
    cases.push_back(makeGrad(*cpu));
  };
  for (const AttentionInputs &in : attentionInputs(m))
    addWithGrad(attentionForward(m, in),
                [&](const std::vector<TensorData> &cpu) {
                  return attentionGrad(m, in, cpu);
                });
  for (const CrossEntropyInputs &in : crossEntropyInputs(m))
    addWithGrad(crossEntropyForward(m, in),
                [&](const std::vector<TensorData> &cpu) {
                  return crossEntropyGrad(m, in, cpu);
                });
  return cases;
}

TEST(CudaFusedTest, CasesRunOnTheCpuBackendAndPassTheCudaChecks) {
  for (DType dtype : kFloatTypes)
    for (const OpCase &c : fusedCases(dtype)) {
      SCOPED_TRACE(c.what);
      test::checkCpuHalf(c);
      test::expectCudaAccepts(c);
    }
}

TEST(CudaFusedTest, TheFusedOpsDecodeAtPrepareWithTheirScratch) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  for (llvm::StringRef op :
       {kFusedAttentionOp, kFusedAttentionGradOp, kFusedLinearCrossEntropyOp,
        kFusedLinearCrossEntropyGradOp})
    EXPECT_TRUE(cuda::isCudaKernelDecodedAtPrepare(kGmoptDomain, op))
        << op.str();
  for (const OpCase &c : fusedCases(DType::F16)) {
    SCOPED_TRACE(c.what);
    std::unique_ptr<Module> module = test::buildOpModule(c);
    const Node &node = *module->getGraph().getNodes().begin();
    auto prepared = cuda::prepareCudaKernelOnHost(node);
    ASSERT_TRUE(bool(prepared)) << llvm::toString(prepared.takeError());
    EXPECT_TRUE(prepared->decodedAtPrepare);
    // The gradients and the cross entropy take planned scratch: the
    // attention gradient one float per query row, the cross entropy at
    // least its [N, block] fp32 tile.
    bool forwardAttention = c.op == kFusedAttentionOp;
    EXPECT_EQ(prepared->scratchBytes == 0, forwardAttention);
    if (c.op == kFusedLinearCrossEntropyOp) {
      auto spec = crossentropy::CrossEntropySpec::get(node);
      ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
      EXPECT_GE(prepared->scratchBytes,
                static_cast<uint64_t>(spec->tileElements()) * sizeof(float));
    }
  }
}

TEST(CudaFusedTest, OversizedHeadsAreRefusedAtPrepare) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP()
        << "this machine has no CUDA toolkit (the CUDA backend is not built)";
  CaseMaker m(DType::F32, 3599);
  OpCase c = m.make(
      "head 160", kGmoptDomain, kFusedAttentionOp,
      {m.rnd({1, 1, 4, 160}), m.rnd({1, 1, 4, 160}), m.rnd({1, 1, 4, 160})}, {},
      2);
  std::unique_ptr<Module> module = test::buildOpModule(c);
  auto prepared =
      cuda::prepareCudaKernelOnHost(*module->getGraph().getNodes().begin());
  ASSERT_FALSE(bool(prepared));
  std::string message = llvm::toString(prepared.takeError());
  EXPECT_NE(message.find("head sizes above 128"), std::string::npos) << message;
}

TEST(CudaFusedTest, AttentionDropoutDrawsTheUnfusedDropoutMask) {
  // The unfused graph drops the [2, 3, 5, 7] probabilities with Dropout;
  // the CUDA kernels' decision for score (n, i, j) of the same stream
  // (AttentionMath.h) must be that mask's element, bit for bit.
  std::vector<float> ones(2 * 3 * 5 * 7, 1.0f);
  OpCase dropout;
  dropout.what = "Dropout [2,3,5,7] ratio 0.3";
  dropout.op = "Dropout";
  dropout.inputs = {test::floats({2, 3, 5, 7}, ones), test::floats({}, {0.3f}),
                    test::bools({}, {1})};
  dropout.constantOperands = {1, 2};
  dropout.numResults = 2;
  auto cpu = test::runOpCase(dropout, /*onCuda=*/false);
  ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
  const TensorData &mask = (*cpu)[1];
  std::unique_ptr<Module> module = test::buildOpModule(dropout);
  std::optional<uint64_t> streamId =
      module->getGraph().getNodes().begin()->getStreamId();
  ASSERT_TRUE(streamId.has_value());
  // runBackendStep's run: seed 0, step 0.
  PhiloxStreamKey stream = makePhiloxStreamKey(0, *streamId, 0);
  cuda::AttentionGeometry g;
  g.batch = 6;
  g.heads = 3;
  g.kvHeads = 3;
  g.seqQ = 5;
  g.seqK = 7;
  int64_t kept = 0;
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        bool keeps = cuda::attentionDropoutKeeps(g, stream, 0.3f, n, i, j);
        kept += keeps;
        ASSERT_EQ(keeps, mask.getFloatElement((n * 5 + i) * 7 + j) != 0)
            << "score (" << n << ", " << i << ", " << j << ")";
      }
  // Both draws are random: some kept, some dropped.
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 6 * 5 * 7);
}

TEST(CudaFusedTest, AttentionScoreMathIsTheSpecs) {
  // Grouped-query heads and a mask broadcast over heads: the kernels'
  // matrix, mask and causal arithmetic against AttentionSpec's.
  CaseMaker m(DType::F32, 3700);
  OpCase c = m.make("GQA causal mask", kGmoptDomain, kFusedAttentionOp,
                    {m.rnd({2, 4, 6, 8}), m.rnd({2, 2, 9, 8}),
                     m.rnd({2, 2, 9, 8}), m.rnd({2, 1, 6, 9})},
                    {intAttr("causal", 1)}, 2);
  std::unique_ptr<Module> module = test::buildOpModule(c);
  auto spec =
      attention::AttentionSpec::get(*module->getGraph().getNodes().begin());
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  cuda::AttentionGeometry g;
  g.batch = spec->batch;
  g.heads = spec->heads;
  g.kvHeads = spec->kvHeads;
  g.seqQ = spec->seqQ;
  g.seqK = spec->seqK;
  g.causal = true;
  g.mask = cuda::AttentionMaskKind::Additive;
  g.batchRank = static_cast<int32_t>(spec->batchShape.size());
  for (int32_t i = 0; i < g.batchRank; ++i) {
    g.batchShape[i] = spec->batchShape[i];
    g.maskBatchStrides[i] = spec->maskStrides[i];
  }
  for (int64_t n = 0; n < spec->batch; ++n) {
    EXPECT_EQ(cuda::attentionKvIndex(g, n), spec->kvIndex(n)) << n;
    EXPECT_EQ(cuda::attentionMaskBase(g, n), spec->maskOffset(n)) << n;
  }
  for (int64_t i = 0; i < spec->seqQ; ++i)
    for (int64_t j = 0; j < spec->seqK; ++j) {
      float score = cuda::attentionMaskScore(g, 1.0f, false, 0.5f, i, j);
      if (spec->causallyMasked(i, j))
        EXPECT_EQ(score, -INFINITY) << i << ", " << j;
      else
        EXPECT_EQ(score, 1.5f) << i << ", " << j;
    }
  // A row block sees the keys its last row sees.
  for (int64_t i0 = 0; i0 < spec->seqQ; ++i0) {
    int64_t end = cuda::attentionVisibleEnd(g, i0, 1);
    for (int64_t j = 0; j < spec->seqK; ++j)
      EXPECT_EQ(j < end, !spec->causallyMasked(i0, j)) << i0 << ", " << j;
  }
}

TEST(CudaFusedTest, FusedOpsMatchTheCpuKernels) {
  GMOPT_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : kFloatTypes)
    test::expectCudaParity(fusedCases(dtype),
                           {AllocationMode::Eager, AllocationMode::Planned});
}

} // namespace
