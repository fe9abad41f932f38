//===- CrossEntropyKernels.cpp - Fused linear cross entropy on the CPU ----===//
//
// gmopt.FusedLinearCrossEntropy and its gradient (CrossEntropySpec.h,
// docs/fused-cross-entropy.md). Both walk the vocabulary in blocks of
// kVocabBlock columns and hold one [N, block] tile of logits in the node's
// planned scratch, never the [N, V] logits:
//
//  - forward: per block, tile = h W_b^T (one GEMM per chunk of rows), then
//    an online log-sum-exp per row (running maximum and rescaled sum) and
//    the label's logit when it falls in the block; lse = max + log(sum);
//  - backward: per block, recompute the tile, turn it into the logits'
//    gradient (softmax - onehot(label)) * dloss-factor in place, then
//    dh += G_b W_b (rows in parallel) and dW_b = G_b^T h (the block's
//    vocabulary rows in parallel, each a full sum over the tokens).
//
// Arithmetic is in T (fp32 for fp32 and staged fp16/bf16, f64 for f64);
// the loss is summed in double. Each thread takes one contiguous share of
// the rows (of dW's rows) per block, so a block costs one large GEMM per
// thread; every element is one full dot product whatever the split.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Blas.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/Simd.h"
#include "ir/Collectives.h"
#include "ir/ops/CrossEntropySpec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace gmopt;
using namespace gmopt::cpu;
using namespace gmopt::crossentropy;
using gmopt::ops::LossReduction;

namespace {

/// Token rows per task are a multiple of this.
constexpr int64_t kRowGrain = 64;
/// Vocabulary rows (or hidden rows for W [D, V]) of dW per task are a
/// multiple of this.
constexpr int64_t kWeightGrain = 16;

/// Items per task: \p total split evenly over the threads, rounded up to a
/// multiple of \p multiple, so that each thread runs one large GEMM per
/// block instead of many small ones that re-read the block's weights.
int64_t taskGrain(int64_t total, unsigned threads, int64_t multiple) {
  int64_t workers = std::max(1u, threads);
  int64_t perThread = (total + workers - 1) / workers;
  return std::max<int64_t>(multiple,
                           (perThread + multiple - 1) / multiple * multiple);
}

/// The largest of row[0, n), n >= 1.
template <typename T> T rowMaximum(const T *row, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return maxF32(row, n);
  } else {
    T best = row[0];
    for (int64_t c = 1; c < n; ++c)
      best = row[c] > best ? row[c] : best;
    return best;
  }
}

/// The sum of e^(row[c] - shift) over [0, n); with \p out, also writes each
/// term there (\p out may be \p row). Four-lane SIMD exp for fp32, as the
/// unfused loss kernels compute it.
template <typename T>
T sumExpShifted(const T *row, T *out, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) {
    return expShiftedF32(row, out, n, shift);
  } else {
    T sum = 0;
    for (int64_t c = 0; c < n; ++c) {
      T term = std::exp(row[c] - shift);
      if (out)
        out[c] = term;
      sum += term;
    }
    return sum;
  }
}

/// Decodes a fused cross-entropy node's attributes once; an unknown
/// reduction fails here.
llvm::Expected<std::unique_ptr<KernelState>>
prepareCrossEntropy(const Node &node) {
  auto attrs = CrossEntropyAttrs::fromNode(node);
  if (!attrs)
    return prepareError(node, llvm::toString(attrs.takeError()));
  return makeKernelState(std::move(*attrs));
}

/// The node's spec: its prepared attributes over its tensors' shapes.
llvm::Expected<CrossEntropySpec> decodeSpec(const KernelCall &call,
                                            unsigned first) {
  for (unsigned i = first; i != first + 3; ++i)
    if (!call.in(i))
      return call.error("h, W and labels are required");
  auto spec = CrossEntropySpec::get(
      call.getState<CrossEntropyAttrs>(), call.in(first)->getShape(),
      call.in(first + 1)->getShape(), call.in(first + 2)->getShape());
  if (!spec)
    return call.error(llvm::toString(spec.takeError()));
  return spec;
}

/// The labels as int64, checked against the vocabulary (ignore_index
/// excepted), and the number of rows that take part.
struct Labels {
  std::vector<int64_t> values;
  int64_t counted = 0;
};

llvm::Expected<Labels> readLabels(const KernelCall &call,
                                  const TensorView &view,
                                  const CrossEntropySpec &spec) {
  Labels labels;
  labels.values.resize(spec.rows);
  llvm::Error err = dispatchIndex(
      call, view.getDType(),
      [&](auto tag) -> llvm::Error {
        using L = typename decltype(tag)::type;
        const L *data = view.getDataAs<L>();
        for (int64_t r = 0; r < spec.rows; ++r)
          labels.values[r] = static_cast<int64_t>(data[r]);
        return llvm::Error::success();
      },
      "labels");
  if (err)
    return err;
  for (int64_t label : labels.values) {
    if (spec.ignoreIndex && label == *spec.ignoreIndex)
      continue;
    if (label < 0 || label >= spec.vocab)
      return call.error("label " + std::to_string(label) +
                        " is outside the vocabulary [0, " +
                        std::to_string(spec.vocab) + ")");
    ++labels.counted;
  }
  return labels;
}

bool isIgnored(const CrossEntropySpec &spec, int64_t label) {
  return spec.ignoreIndex && label == *spec.ignoreIndex;
}

/// sub[rows lo..hi) = h[lo..hi) W_b for the vocabulary block [b0, b0+bc),
/// row-major with the tile's row stride blockColumns(): row r of a task
/// always lies in the task's own rows of the tile, whatever the block's
/// width (a task at the narrow last block never reaches another task's
/// rows at a full block).
template <typename T>
void blockLogits(const CrossEntropySpec &spec, const T *h, const T *w,
                 int64_t lo, int64_t hi, int64_t b0, int64_t bc, T *sub) {
  int64_t d = spec.hidden, stride = spec.blockColumns();
  if (spec.transW)
    gemmBlock<T>(false, true, hi - lo, bc, d, T(1), h + lo * d, d, w + b0 * d,
                 d, T(0), sub, stride);
  else
    gemmBlock<T>(false, false, hi - lo, bc, d, T(1), h + lo * d, d, w + b0,
                 spec.vocab, T(0), sub, stride);
}

template <typename T>
llvm::Error forwardTyped(KernelCall &call, const CrossEntropySpec &spec,
                         const Labels &labels) {
  const T *h = call.in(kH)->getDataAs<T>();
  const T *w = call.in(kW)->getDataAs<T>();
  TensorView &lossView = *call.out(0);
  float *lse = call.out(1)->getDataAs<float>();
  int64_t n = spec.rows, blockCols = spec.blockColumns();
  // [N, block] tile, then the running maximum, running sum and label logit.
  auto scratch =
      call.getContext().allocateScratch(dtypeOf<T>(), {n * (blockCols + 3)});
  if (!scratch)
    return scratch.takeError();
  T *tile = static_cast<T *>(scratch->getView().getData());
  T *rowMax = tile + n * blockCols, *rowSum = rowMax + n, *target = rowSum + n;
  int64_t rowGrain = taskGrain(n, call.getNumThreads(), kRowGrain);
  parallelFor(call.getNumThreads(), n, rowGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      rowMax[r] = -std::numeric_limits<T>::infinity();
      rowSum[r] = 0;
      target[r] = 0;
    }
    for (int64_t b0 = 0; b0 < spec.vocab; b0 += blockCols) {
      int64_t bc = std::min(blockCols, spec.vocab - b0);
      T *sub = tile + lo * blockCols;
      blockLogits(spec, h, w, lo, hi, b0, bc, sub);
      for (int64_t r = lo; r < hi; ++r) {
        const T *row = sub + (r - lo) * blockCols;
        T best = std::max(rowMax[r], rowMaximum(row, bc));
        // Rescale the running sum to the new maximum (none before block 0).
        T sum = rowMax[r] == -std::numeric_limits<T>::infinity()
                    ? T(0)
                    : rowSum[r] * std::exp(rowMax[r] - best);
        sum += sumExpShifted<T>(row, nullptr, bc, best);
        rowMax[r] = best;
        rowSum[r] = sum;
        int64_t label = labels.values[r];
        if (label >= b0 && label < b0 + bc)
          target[r] = row[label - b0];
      }
    }
    for (int64_t r = lo; r < hi; ++r)
      lse[r] = static_cast<float>(rowMax[r] + std::log(rowSum[r]));
  });
  auto store = [&](int64_t i, double value) {
    if (lossView.getDType() == DType::F64)
      lossView.getDataAs<double>()[i] = value;
    else
      lossView.getDataAs<float>()[i] = static_cast<float>(value);
  };
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    // The row's loss from the unrounded log-sum-exp.
    double loss = isIgnored(spec, labels.values[r])
                      ? 0.0
                      : static_cast<double>(rowMax[r]) +
                            std::log(static_cast<double>(rowSum[r])) -
                            static_cast<double>(target[r]);
    if (spec.reduction == LossReduction::None)
      store(r, loss);
    total += loss;
  }
  if (spec.reduction != LossReduction::None) {
    // A mean over no counted row is 0/0 = NaN, as the unfused loss.
    if (spec.reduction == LossReduction::Mean)
      total /= static_cast<double>(labels.counted);
    store(0, total);
  }
  return llvm::Error::success();
}

/// FusedLinearCrossEntropy(h, W, labels) -> (loss, lse).
llvm::Error fusedLinearCrossEntropyKernel(KernelCall &call) {
  auto spec = decodeSpec(call, kH);
  if (!spec)
    return spec.takeError();
  auto labels = readLabels(call, *call.in(kLabels), *spec);
  if (!labels)
    return labels.takeError();
  int64_t lossElements =
      spec->reduction == LossReduction::None ? spec->rows : 1;
  if (call.out(0)->getNumElements() != lossElements ||
      call.out(1)->getNumElements() != spec->rows ||
      call.out(1)->getDType() != DType::F32)
    return call.error("the loss or the log-sum-exp has the wrong size");
  return dispatchFloat(
      call, call.in(kH)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        if (call.in(kW)->getDType() != dtypeOf<T>() ||
            call.out(0)->getDType() != dtypeOf<T>())
          return call.error("h, W and the loss must have one element type");
        return forwardTyped<T>(call, *spec, *labels);
      });
}

template <typename T>
llvm::Error backwardTyped(KernelCall &call, const CrossEntropySpec &spec,
                          const Labels &labels) {
  const T *dLoss = call.in(kGradDLoss)->getDataAs<T>();
  const T *h = call.in(kGradH)->getDataAs<T>();
  const T *w = call.in(kGradW)->getDataAs<T>();
  const float *lse = call.in(kGradLse)->getDataAs<float>();
  T *dh = call.out(0)->getDataAs<T>();
  T *dw = call.out(1)->getDataAs<T>();
  int64_t n = spec.rows, d = spec.hidden, v = spec.vocab;
  int64_t blockCols = spec.blockColumns();
  // [N, block] tile, then each row's factor d loss / d loss_row.
  auto scratch =
      call.getContext().allocateScratch(dtypeOf<T>(), {n * (blockCols + 1)});
  if (!scratch)
    return scratch.takeError();
  T *tile = static_cast<T *>(scratch->getView().getData());
  T *factor = tile + n * blockCols;
  double meanScale = spec.reduction == LossReduction::Mean
                         ? 1.0 / static_cast<double>(labels.counted)
                         : 1.0;
  for (int64_t r = 0; r < n; ++r)
    factor[r] = isIgnored(spec, labels.values[r])
                    ? T(0)
                    : static_cast<T>(spec.reduction == LossReduction::None
                                         ? static_cast<double>(dLoss[r])
                                         : dLoss[0] * meanScale);
  if (n == 0) {
    std::fill(dw, dw + v * d, T(0));
    return llvm::Error::success();
  }
  int64_t rowGrain = taskGrain(n, call.getNumThreads(), kRowGrain);
  for (int64_t b0 = 0; b0 < v; b0 += blockCols) {
    int64_t bc = std::min(blockCols, v - b0);
    int64_t weightGrain =
        taskGrain(spec.transW ? bc : d, call.getNumThreads(), kWeightGrain);
    T beta = b0 == 0 ? T(0) : T(1);
    // G_b for every row, and its share of dh.
    parallelFor(call.getNumThreads(), n, rowGrain, [&](int64_t lo, int64_t hi) {
      T *sub = tile + lo * blockCols;
      blockLogits(spec, h, w, lo, hi, b0, bc, sub);
      for (int64_t r = lo; r < hi; ++r) {
        T *row = sub + (r - lo) * blockCols;
        T f = factor[r], shift = static_cast<T>(lse[r]);
        int64_t label = labels.values[r];
        if (f == T(0)) {
          std::fill(row, row + bc, T(0));
          continue;
        }
        // (softmax - onehot(label)) * f.
        sumExpShifted<T>(row, row, bc, shift);
        for (int64_t c = 0; c < bc; ++c)
          row[c] *= f;
        if (label >= b0 && label < b0 + bc)
          row[label - b0] -= f;
      }
      if (spec.transW)
        gemmBlock<T>(false, false, hi - lo, d, bc, T(1), sub, blockCols,
                     w + b0 * d, d, beta, dh + lo * d, d);
      else
        gemmBlock<T>(false, true, hi - lo, d, bc, T(1), sub, blockCols, w + b0,
                     v, beta, dh + lo * d, d);
    });
    // dW's block: a sum over all rows of G_b against h.
    if (spec.transW)
      parallelFor(call.getNumThreads(), bc, weightGrain,
                  [&](int64_t lo, int64_t hi) {
                    gemmBlock<T>(true, false, hi - lo, d, n, T(1), tile + lo,
                                 blockCols, h, d, T(0), dw + (b0 + lo) * d, d);
                  });
    else
      parallelFor(call.getNumThreads(), d, weightGrain,
                  [&](int64_t lo, int64_t hi) {
                    gemmBlock<T>(true, false, hi - lo, bc, n, T(1), h + lo, d,
                                 tile, blockCols, T(0), dw + lo * v + b0, v);
                  });
  }
  return llvm::Error::success();
}

/// FusedLinearCrossEntropyGrad(dloss, h, W, labels, lse) -> (dh, dW).
llvm::Error fusedLinearCrossEntropyGradKernel(KernelCall &call) {
  auto spec = decodeSpec(call, kGradH);
  if (!spec)
    return spec.takeError();
  auto labels = readLabels(call, *call.in(kGradLabels), *spec);
  if (!labels)
    return labels.takeError();
  const TensorView &lse = *call.in(kGradLse);
  if (lse.getDType() != DType::F32 || lse.getNumElements() != spec->rows)
    return call.error("the log-sum-exp must be f32 with one entry per row");
  int64_t lossElements =
      spec->reduction == LossReduction::None ? spec->rows : 1;
  if (call.in(kGradDLoss)->getNumElements() != lossElements)
    return call.error("dloss has shape " +
                      shapeString(call.in(kGradDLoss)->getShape()) +
                      ", which does not fit the reduction");
  if (call.out(0)->getNumElements() != call.in(kGradH)->getNumElements() ||
      call.out(1)->getNumElements() != call.in(kGradW)->getNumElements())
    return call.error("dh and dW must have the shapes of h and W");
  return dispatchFloat(
      call, call.in(kGradH)->getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        for (unsigned i : {kGradDLoss, kGradW})
          if (call.in(i)->getDType() != dtypeOf<T>())
            return call.error("dloss, h and W must have one element type");
        return backwardTyped<T>(call, *spec, *labels);
      });
}

/// The element type scratch is computed in: f64 for f64 tensors, fp32 for
/// the others (16-bit tensors are staged as fp32).
DType computeDType(const Value *h) {
  return h && h->getType().getDType() == DType::F64 ? DType::F64 : DType::F32;
}

template <unsigned First, int64_t RowExtras>
uint64_t crossEntropyWorkspace(const Node &node) {
  auto spec = CrossEntropySpec::get(node);
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  return scratchBytes(computeDType(node.getOperand(First)),
                      spec->rows * (spec->blockColumns() + RowExtras));
}

} // namespace

void cpu::registerCrossEntropyKernels(KernelTable &table) {
  table.add(kGmoptDomain, kFusedLinearCrossEntropyOp,
            fusedLinearCrossEntropyKernel);
  table.add(kGmoptDomain, kFusedLinearCrossEntropyGradOp,
            fusedLinearCrossEntropyGradKernel);
  table.setWorkspace(kGmoptDomain, kFusedLinearCrossEntropyOp,
                     crossEntropyWorkspace<kH, 3>);
  table.setWorkspace(kGmoptDomain, kFusedLinearCrossEntropyGradOp,
                     crossEntropyWorkspace<kGradH, 1>);
  table.setPrepare(kGmoptDomain, kFusedLinearCrossEntropyOp,
                   prepareCrossEntropy);
  table.setPrepare(kGmoptDomain, kFusedLinearCrossEntropyGradOp,
                   prepareCrossEntropy);
}
