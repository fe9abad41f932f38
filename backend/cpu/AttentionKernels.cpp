//===- AttentionKernels.cpp - Fused scaled-dot-product attention ----------===//
//
// gmopt.FusedAttention and gmopt.FusedAttentionGrad on the CPU
// (docs/fused-attention.md), FlashAttention-2 style: the forward pass walks
// each block of query rows over the key blocks with an online softmax and
// keeps only the row's log-sum-exp; the backward pass recomputes each
// probability tile from it, with D_i = dO_i . O_i standing in for the
// softmax gradient's row sum. Tiles are multiplied by single-threaded BLAS
// (gemmBlock) and accumulate in fp32 (f64 for f64 tensors); tasks (query
// blocks forward, key/value heads backward, so no two tasks write one dK or
// dV) run on the ThreadPool, and a task's result never depends on the
// thread count. Dropout draws element (n, i, j) of the scores as element
// (n * sq + i) * sk + j of the node's Philox stream, exactly as the
// unfused Dropout of the [.., H, sq, sk] probabilities does
// (DropoutKernels.cpp), so the masks are bit-identical.
//
//===----------------------------------------------------------------------===//

#include "backend/Philox.h"
#include "backend/cpu/Blas.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Simd.h"
#include "ir/Collectives.h"
#include "ir/ops/AttentionSpec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::attention;

namespace {

/// Query rows and key columns of one tile.
constexpr int64_t kBlockRows = 64;
constexpr int64_t kBlockCols = 128;
/// At most this many tasks run at once, each with its own scratch slot, so
/// the planned workspace does not depend on the thread count.
constexpr int64_t kMaxSlots = 16;

/// The attention dropout of one node: whether it drops, its ratio, the
/// factor of kept elements and the node's Philox stream.
struct AttentionDropout {
  bool active = false;
  float ratio = 0;
  float scale = 1;
  PhiloxStreamKey stream{};
};

/// A fused attention node decoded once: its attributes and its Philox
/// stream (nullopt when the node has none; only a dropping launch needs
/// one).
struct AttentionState {
  AttentionAttrs attrs;
  std::optional<uint64_t> streamId;
};

/// Decodes a FusedAttention or FusedAttentionGrad node. With static Q, K, V
/// (and mask) shapes, a spec they and the attributes do not make (a head
/// size K does not share, a mask that does not broadcast...) fails here.
llvm::Expected<std::unique_ptr<KernelState>>
prepareAttention(const Node &node) {
  AttentionState state{AttentionAttrs::fromNode(node), node.getStreamId()};
  bool grad = node.getOpType() == kFusedAttentionGradOp;
  unsigned first = grad ? kGradQ : kQ, maskIndex = grad ? kGradMask : kMask;
  bool allStatic = true;
  for (unsigned i : {first, first + 1, first + 2, maskIndex})
    if (i < node.getNumOperands())
      if (const Value *operand = node.getOperand(i))
        allStatic &= operand->getType().hasStaticShape();
  if (allStatic)
    if (llvm::Error err = AttentionSpec::get(node).takeError())
      return prepareError(node, llvm::toString(std::move(err)));
  return makeKernelState(std::move(state));
}

llvm::Expected<AttentionDropout> getDropout(const KernelCall &call,
                                            unsigned ratioInput,
                                            unsigned trainingInput,
                                            const AttentionSpec &spec) {
  AttentionDropout dropout;
  // As Dropout: ratio 0.5 and no training when the operands are absent.
  float ratio = 0.5f;
  bool training = false;
  if (const TensorView *view = call.in(ratioInput)) {
    auto value = readScalar(call, *view, "ratio");
    if (!value)
      return value.takeError();
    ratio = static_cast<float>(*value);
  }
  if (const TensorView *view = call.in(trainingInput)) {
    auto value = readScalar(call, *view, "training_mode");
    if (!value)
      return value.takeError();
    training = *value != 0;
  }
  if (!(ratio >= 0 && ratio < 1))
    return call.error("ratio " + std::to_string(ratio) + " is outside [0, 1)");
  if (!training || ratio == 0)
    return dropout;
  uint64_t scores = static_cast<uint64_t>(spec.batch) * spec.seqQ * spec.seqK;
  if (scores > kPhiloxMaxElements)
    return call.error("the scores have more than 2^34 elements, more than "
                      "one Philox stream");
  std::optional<uint64_t> streamId = call.getState<AttentionState>().streamId;
  if (!streamId)
    return getRandomStreamId(call.getNode()).takeError();
  dropout.active = true;
  dropout.ratio = ratio;
  dropout.scale = 1.0f / (1.0f - ratio);
  dropout.stream = makePhiloxStreamKey(call.getContext().getSeed(), *streamId,
                                       call.getContext().getStep());
  return dropout;
}

/// Writes into \p factors[c] the dropout factor (0 or 1 / (1 - ratio)) of
/// the elements [first, first + count) of the stream.
template <typename T>
void dropoutFactors(const AttentionDropout &dropout, uint64_t first,
                    int64_t count, T *factors) {
  T kept = static_cast<T>(dropout.scale);
  int64_t c = 0;
  while (c < count) {
    uint64_t index = first + c;
    PhiloxWords block =
        philoxBlock(dropout.stream, static_cast<uint32_t>(index / 4));
    for (unsigned lane = index % 4; lane < 4 && c < count; ++lane, ++c)
      factors[c] = dropoutKeeps(block.w[lane], dropout.ratio) ? kept : T(0);
  }
}

/// The largest of row[0, n) (-inf for an empty row).
template <typename T> T rowMaximum(const T *row, int64_t n) {
  if (n == 0)
    return -std::numeric_limits<T>::infinity();
  if constexpr (std::is_same_v<T, float>) {
    return maxF32(row, n);
  } else {
    T best = row[0];
    for (int64_t c = 1; c < n; ++c)
      best = row[c] > best ? row[c] : best;
    return best;
  }
}

/// row[c] = e^(row[c] - shift) over [0, n); returns their sum (four-lane
/// SIMD exp for fp32, as the Softmax kernel computes it).
template <typename T> T expInPlace(T *row, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) {
    return expShiftedF32(row, row, n, shift);
  } else {
    T sum = 0;
    for (int64_t c = 0; c < n; ++c)
      sum += row[c] = std::exp(row[c] - shift);
    return sum;
  }
}

/// The operand tensors of either op, typed.
template <typename T> struct AttentionTensors {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const T *floatMask = nullptr;
  const uint8_t *boolMask = nullptr;
};

/// Scores S = scale * Q_i K_j^T of rows [i0, i0 + rows) and columns
/// [j0, j0 + cols) of score matrix \p n, masked, into \p s (rows x cols).
template <typename T>
void computeScores(const AttentionSpec &spec, const AttentionTensors<T> &in,
                   int64_t n, int64_t i0, int64_t rows, int64_t j0,
                   int64_t cols, T *s) {
  int64_t d = spec.headDim, sk = spec.seqK;
  const T *q = in.q + (n * spec.seqQ + i0) * d;
  const T *kBase = in.k + spec.kvIndex(n) * sk * d;
  if (spec.attrs.kTransposed)
    gemmBlock<T>(false, false, rows, cols, d, static_cast<T>(spec.scale), q, d,
                 kBase + j0, sk, T(0), s, cols);
  else
    gemmBlock<T>(false, true, rows, cols, d, static_cast<T>(spec.scale), q, d,
                 kBase + j0 * d, d, T(0), s, cols);
  if (!spec.hasMask && !spec.attrs.causal)
    return;
  const int64_t rank = spec.maskStrides.size();
  int64_t rowStride = spec.hasMask ? spec.maskStrides[rank - 2] : 0;
  int64_t colStride = spec.hasMask ? spec.maskStrides[rank - 1] : 0;
  int64_t base = spec.hasMask ? spec.maskOffset(n) : 0;
  T masked = static_cast<T>(spec.attrs.maskedValue);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = i0 + r;
    T *row = s + r * cols;
    if (spec.hasMask) {
      int64_t offset = base + i * rowStride + j0 * colStride;
      if (in.boolMask) {
        for (int64_t c = 0; c < cols; ++c) {
          bool value = in.boolMask[offset + c * colStride] != 0;
          if (value != spec.attrs.maskTrueKeeps)
            row[c] = masked;
        }
      } else {
        for (int64_t c = 0; c < cols; ++c)
          row[c] += in.floatMask[offset + c * colStride];
      }
    }
    if (spec.attrs.causal)
      for (int64_t c = 0; c < cols; ++c)
        if (spec.causallyMasked(i, j0 + c))
          row[c] = -std::numeric_limits<T>::infinity();
  }
}

/// The key columns [0, end) that rows [i0, i0 + rows) may see.
int64_t visibleColumns(const AttentionSpec &spec, int64_t i0, int64_t rows) {
  if (!spec.attrs.causal)
    return spec.seqK;
  int64_t last = i0 + rows - 1 + (spec.seqK - spec.seqQ);
  return std::clamp<int64_t>(last + 1, 0, spec.seqK);
}

template <typename T>
llvm::Expected<AttentionTensors<T>>
bindInputs(const KernelCall &call, const AttentionSpec &spec, unsigned first,
           unsigned maskIndex) {
  AttentionTensors<T> in;
  for (unsigned i = first; i != first + 3; ++i)
    if (call.in(i)->getDType() != dtypeOf<T>())
      return call.error("Q, K and V must have one element type");
  in.q = call.in(first)->getDataAs<T>();
  in.k = call.in(first + 1)->getDataAs<T>();
  in.v = call.in(first + 2)->getDataAs<T>();
  if (spec.hasMask) {
    const TensorView &mask = *call.in(maskIndex);
    if (spec.boolMask)
      in.boolMask = mask.getDataAs<uint8_t>();
    else if (mask.getDType() == dtypeOf<T>())
      in.floatMask = mask.getDataAs<T>();
    else
      return call.error("the mask must be bool or Q's element type");
  }
  return in;
}

llvm::Expected<AttentionSpec> decodeSpec(const KernelCall &call, unsigned first,
                                         unsigned maskIndex) {
  const TensorView *mask = call.in(maskIndex);
  auto spec = AttentionSpec::get(
      call.getState<AttentionState>().attrs, call.in(first)->getShape(),
      call.in(first + 1)->getShape(), call.in(first + 2)->getShape(),
      mask ? std::optional<llvm::ArrayRef<int64_t>>(mask->getShape())
           : std::nullopt,
      mask ? mask->getDType() : DType::Undefined);
  if (!spec)
    return call.error(llvm::toString(spec.takeError()));
  return spec;
}

/// Tasks cut into at most kMaxSlots chunks: the chunk size.
int64_t slotGrain(int64_t tasks) {
  int64_t slots = std::min<int64_t>(kMaxSlots, std::max<int64_t>(tasks, 1));
  return (tasks + slots - 1) / slots;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Scratch elements of one forward slot: a score tile, the output
/// accumulator and the running max and sum of each row.
int64_t forwardSlotElements(const AttentionSpec &spec) {
  int64_t rows = std::min(kBlockRows, spec.seqQ);
  int64_t cols = std::min(kBlockCols, spec.seqK);
  return rows * cols + rows * spec.valueDim + 2 * rows;
}

int64_t forwardTasks(const AttentionSpec &spec) {
  return spec.batch * ceilDiv(spec.seqQ, kBlockRows);
}

/// Scratch elements of one backward slot: the probability, gradient and
/// dropout-factor tiles and D of each query row.
int64_t backwardSlotElements(const AttentionSpec &spec) {
  int64_t rows = std::min(kBlockRows, spec.seqQ);
  int64_t cols = std::min(kBlockCols, spec.seqK);
  return 3 * rows * cols + spec.seqQ;
}

int64_t backwardTasks(const AttentionSpec &spec) {
  return spec.batch / (spec.heads / spec.kvHeads);
}

int64_t numSlots(int64_t tasks) { return numChunks(tasks, slotGrain(tasks)); }

template <typename T>
void forwardTask(const AttentionSpec &spec, const AttentionTensors<T> &in,
                 const AttentionDropout &dropout, int64_t task, T *slot, T *out,
                 float *lse) {
  int64_t rowBlocks = ceilDiv(spec.seqQ, kBlockRows);
  int64_t n = task / rowBlocks;
  int64_t i0 = (task % rowBlocks) * kBlockRows;
  int64_t rows = std::min(kBlockRows, spec.seqQ - i0);
  int64_t tileCols = std::min(kBlockCols, spec.seqK);
  int64_t dv = spec.valueDim, sk = spec.seqK;
  T *s = slot;
  T *acc = s + rows * tileCols;
  T *rowMax = acc + rows * dv;
  T *rowSum = rowMax + rows;
  const T inf = std::numeric_limits<T>::infinity();
  std::fill(acc, acc + rows * dv, T(0));
  std::fill(rowMax, rowMax + rows, -inf);
  std::fill(rowSum, rowSum + rows, T(0));
  const T *vBase = in.v + spec.kvIndex(n) * sk * dv;
  int64_t end = visibleColumns(spec, i0, rows);
  for (int64_t j0 = 0; j0 < end; j0 += kBlockCols) {
    int64_t cols = std::min(kBlockCols, end - j0);
    computeScores(spec, in, n, i0, rows, j0, cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      T *row = s + r * cols;
      T newMax = std::max(rowMax[r], rowMaximum(row, cols));
      // A row masked out so far (-inf everywhere) keeps exp() finite.
      T shift = newMax == -inf ? T(0) : newMax;
      T rescale = std::exp(rowMax[r] - shift);
      T sum = expInPlace(row, cols, shift);
      rowSum[r] = rowSum[r] * rescale + sum;
      rowMax[r] = newMax;
      T *accRow = acc + r * dv;
      for (int64_t e = 0; e < dv; ++e)
        accRow[e] *= rescale;
      if (dropout.active) {
        // The normalizer sums the undropped probabilities (the unfused
        // Softmax's); only the product with V sees the dropped ones.
        uint64_t first =
            (static_cast<uint64_t>(n) * spec.seqQ + (i0 + r)) * sk + j0;
        int64_t c = 0;
        while (c < cols) {
          uint64_t index = first + c;
          PhiloxWords block =
              philoxBlock(dropout.stream, static_cast<uint32_t>(index / 4));
          for (unsigned lane = index % 4; lane < 4 && c < cols; ++lane, ++c)
            row[c] = dropoutKeeps(block.w[lane], dropout.ratio)
                         ? row[c] * static_cast<T>(dropout.scale)
                         : T(0);
        }
      }
    }
    gemmBlock<T>(false, false, rows, dv, cols, T(1), s, cols, vBase + j0 * dv,
                 dv, T(1), acc, dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = i0 + r;
    T *outRow = out + (n * spec.seqQ + i) * dv;
    for (int64_t e = 0; e < dv; ++e)
      outRow[e] = acc[r * dv + e] / rowSum[r];
    T shift = rowMax[r] == -inf ? T(0) : rowMax[r];
    lse[n * spec.seqQ + i] = static_cast<float>(shift + std::log(rowSum[r]));
  }
}

/// FusedAttention(Q, K, V, mask?, ratio?, training_mode?) -> (O, LSE).
llvm::Error fusedAttentionKernel(KernelCall &call) {
  auto spec = decodeSpec(call, kQ, kMask);
  if (!spec)
    return spec.takeError();
  auto dropout = getDropout(call, kRatio, kTrainingMode, *spec);
  if (!dropout)
    return dropout.takeError();
  TensorView &out = *call.out(0);
  TensorView *lseView = call.out(1);
  if (lseView && (lseView->getDType() != DType::F32 ||
                  lseView->getNumElements() != spec->batch * spec->seqQ))
    return call.error("the log-sum-exp must be f32 with one entry per row");
  return dispatchFloat(
      call, call.in(kQ)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        auto in = bindInputs<T>(call, *spec, kQ, kMask);
        if (!in)
          return in.takeError();
        int64_t tasks = forwardTasks(*spec);
        int64_t grain = slotGrain(tasks);
        int64_t perSlot = forwardSlotElements(*spec);
        auto scratch = call.getContext().allocateScratch(
            dtypeOf<T>(), {numSlots(tasks) * perSlot});
        if (!scratch)
          return scratch.takeError();
        T *slots = static_cast<T *>(scratch->getView().getData());
        // Without a log-sum-exp result (an inference graph), rows go to a
        // throwaway per-task buffer: the slot's row-max entries suffice.
        std::vector<float> lseStorage;
        float *lse = lseView ? lseView->getDataAs<float>() : nullptr;
        if (!lse) {
          lseStorage.resize(spec->batch * spec->seqQ);
          lse = lseStorage.data();
        }
        T *o = out.getDataAs<T>();
        parallelFor(call.getNumThreads(), tasks, grain,
                    [&](int64_t lo, int64_t hi) {
                      T *slot = slots + (lo / grain) * perSlot;
                      for (int64_t task = lo; task < hi; ++task)
                        forwardTask(*spec, *in, *dropout, task, slot, o, lse);
                    });
        return llvm::Error::success();
      });
}

/// The gradient tensors of FusedAttentionGrad, typed.
template <typename T> struct AttentionGradients {
  const T *dO = nullptr, *o = nullptr;
  const float *lse = nullptr;
  T *dQ = nullptr, *dK = nullptr, *dV = nullptr;
};

template <typename T>
void backwardTask(const AttentionSpec &spec, const AttentionTensors<T> &in,
                  const AttentionGradients<T> &grad,
                  const AttentionDropout &dropout, int64_t task, T *slot) {
  int64_t group = spec.heads / spec.kvHeads;
  int64_t d = spec.headDim, dv = spec.valueDim, sq = spec.seqQ, sk = spec.seqK;
  int64_t tileRows = std::min(kBlockRows, sq);
  int64_t tileCols = std::min(kBlockCols, sk);
  T *p = slot;
  T *dp = p + tileRows * tileCols;
  T *factors = dp + tileRows * tileCols;
  T *rowDot = factors + tileRows * tileCols;
  const T inf = std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(spec.scale);
  // task = b * kvHeads + hk, read by query heads hk * group + [0, group).
  int64_t b = task / spec.kvHeads, hk = task % spec.kvHeads;
  T *dK = grad.dK + task * sk * d;
  T *dV = grad.dV + task * sk * dv;
  const T *vBase = in.v + task * sk * dv;
  const T *kBase = in.k + task * sk * d;
  std::fill(dK, dK + sk * d, T(0));
  std::fill(dV, dV + sk * dv, T(0));
  for (int64_t g = 0; g < group; ++g) {
    int64_t n = b * spec.heads + hk * group + g;
    T *dQ = grad.dQ + n * sq * d;
    std::fill(dQ, dQ + sq * d, T(0));
    const T *dO = grad.dO + n * sq * dv;
    const T *o = grad.o + n * sq * dv;
    const float *lse = grad.lse + n * sq;
    for (int64_t i = 0; i < sq; ++i) {
      T dot = 0;
      for (int64_t e = 0; e < dv; ++e)
        dot += dO[i * dv + e] * o[i * dv + e];
      rowDot[i] = dot;
    }
    for (int64_t i0 = 0; i0 < sq; i0 += kBlockRows) {
      int64_t rows = std::min(kBlockRows, sq - i0);
      int64_t end = visibleColumns(spec, i0, rows);
      const T *q = in.q + (n * sq + i0) * d;
      const T *dOBlock = dO + i0 * dv;
      for (int64_t j0 = 0; j0 < end; j0 += kBlockCols) {
        int64_t cols = std::min(kBlockCols, end - j0);
        computeScores(spec, in, n, i0, rows, j0, cols, p);
        for (int64_t r = 0; r < rows; ++r) {
          T rowLse = static_cast<T>(lse[i0 + r]);
          T shift = rowLse == -inf ? T(0) : rowLse;
          expInPlace(p + r * cols, cols, shift);
          if (dropout.active)
            dropoutFactors(dropout,
                           (static_cast<uint64_t>(n) * sq + i0 + r) * sk + j0,
                           cols, factors + r * cols);
        }
        // dV_j += Pd^T dO_i with Pd the dropped probabilities.
        const T *dropped = p;
        if (dropout.active) {
          for (int64_t e = 0; e < rows * cols; ++e)
            dp[e] = p[e] * factors[e];
          dropped = dp;
        }
        gemmBlock<T>(true, false, cols, dv, rows, T(1), dropped, cols, dOBlock,
                     dv, T(1), dV + j0 * dv, dv);
        // dPd = dO_i V_j^T; dP = dPd * factors; dS = P (dP - D_i).
        gemmBlock<T>(false, true, rows, cols, dv, T(1), dOBlock, dv,
                     vBase + j0 * dv, dv, T(0), dp, cols);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            int64_t e = r * cols + c;
            T gradient = dropout.active ? dp[e] * factors[e] : dp[e];
            p[e] = p[e] * (gradient - rowDot[i0 + r]);
          }
        // dQ_i += scale dS K_j; dK_j += scale dS^T Q_i (in K's layout).
        if (spec.attrs.kTransposed) {
          gemmBlock<T>(false, true, rows, d, cols, scale, p, cols, kBase + j0,
                       sk, T(1), dQ + i0 * d, d);
          gemmBlock<T>(true, false, d, cols, rows, scale, q, d, p, cols, T(1),
                       dK + j0, sk);
        } else {
          gemmBlock<T>(false, false, rows, d, cols, scale, p, cols,
                       kBase + j0 * d, d, T(1), dQ + i0 * d, d);
          gemmBlock<T>(true, false, cols, d, rows, scale, p, cols, q, d, T(1),
                       dK + j0 * d, d);
        }
      }
    }
  }
}

/// FusedAttentionGrad(dO, Q, K, V, O, LSE, mask?, ratio?, training_mode?)
/// -> (dQ, dK, dV).
llvm::Error fusedAttentionGradKernel(KernelCall &call) {
  auto spec = decodeSpec(call, kGradQ, kGradMask);
  if (!spec)
    return spec.takeError();
  auto dropout = getDropout(call, kGradRatio, kGradTrainingMode, *spec);
  if (!dropout)
    return dropout.takeError();
  const TensorView &lse = *call.in(kGradLse);
  if (lse.getDType() != DType::F32 ||
      lse.getNumElements() != spec->batch * spec->seqQ)
    return call.error("the log-sum-exp must be f32 with one entry per row");
  int64_t outputElements = spec->batch * spec->seqQ * spec->valueDim;
  if (call.in(kGradDO)->getNumElements() != outputElements ||
      call.in(kGradO)->getNumElements() != outputElements)
    return call.error("dO and O must have the attention output's shape");
  return dispatchFloat(
      call, call.in(kGradQ)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        auto in = bindInputs<T>(call, *spec, kGradQ, kGradMask);
        if (!in)
          return in.takeError();
        if (call.in(kGradDO)->getDType() != dtypeOf<T>() ||
            call.in(kGradO)->getDType() != dtypeOf<T>())
          return call.error("dO and O must have Q's element type");
        AttentionGradients<T> grad;
        grad.dO = call.in(kGradDO)->getDataAs<T>();
        grad.o = call.in(kGradO)->getDataAs<T>();
        grad.lse = lse.getDataAs<float>();
        grad.dQ = call.out(0)->getDataAs<T>();
        grad.dK = call.out(1)->getDataAs<T>();
        grad.dV = call.out(2)->getDataAs<T>();
        int64_t tasks = backwardTasks(*spec);
        int64_t grain = slotGrain(tasks);
        int64_t perSlot = backwardSlotElements(*spec);
        auto scratch = call.getContext().allocateScratch(
            dtypeOf<T>(), {numSlots(tasks) * perSlot});
        if (!scratch)
          return scratch.takeError();
        T *slots = static_cast<T *>(scratch->getView().getData());
        parallelFor(call.getNumThreads(), tasks, grain,
                    [&](int64_t lo, int64_t hi) {
                      T *slot = slots + (lo / grain) * perSlot;
                      for (int64_t task = lo; task < hi; ++task)
                        backwardTask(*spec, *in, grad, *dropout, task, slot);
                    });
        return llvm::Error::success();
      });
}

/// The element type scratch is computed in: f64 for f64 tensors, fp32 for
/// the others (16-bit tensors are staged as fp32).
DType computeDType(const Value *q) {
  return q && q->getType().getDType() == DType::F64 ? DType::F64 : DType::F32;
}

uint64_t fusedAttentionWorkspace(const Node &node) {
  auto spec = AttentionSpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  return scratchBytes(
      computeDType(node.getOperand(kQ)),
      mulCount(numSlots(forwardTasks(*spec)), forwardSlotElements(*spec)));
}

uint64_t fusedAttentionGradWorkspace(const Node &node) {
  auto spec = AttentionSpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  return scratchBytes(
      computeDType(node.getOperand(kGradQ)),
      mulCount(numSlots(backwardTasks(*spec)), backwardSlotElements(*spec)));
}

} // namespace

void cpu::registerAttentionKernels(KernelTable &table) {
  table.add(kGmoptDomain, kFusedAttentionOp, fusedAttentionKernel);
  table.add(kGmoptDomain, kFusedAttentionGradOp, fusedAttentionGradKernel);
  table.setWorkspace(kGmoptDomain, kFusedAttentionOp, fusedAttentionWorkspace);
  table.setWorkspace(kGmoptDomain, kFusedAttentionGradOp,
                     fusedAttentionGradWorkspace);
  table.setPrepare(kGmoptDomain, kFusedAttentionOp, prepareAttention);
  table.setPrepare(kGmoptDomain, kFusedAttentionGradOp, prepareAttention);
}
