//===- SoftmaxKernels.cpp - Softmax, LogSoftmax and their gradients -------===//
//
// Softmax and LogSoftmax (forward) and com.microsoft SoftmaxGrad,
// SoftmaxGrad_13, LogSoftmaxGrad and LogSoftmaxGrad_13. Two axis
// conventions exist (read once, by ops::getSoftmaxAxes): before opset 13 (and
// in the grads without _13) the input is coerced to 2-D at `axis` (default 1)
// and normalized over the flattened tail; from opset 13 (and in the _13 grads)
// normalization runs along the single dimension `axis` (default -1). Both
// reduce to a [outer, axisDim, inner] view; inner == 1 (the common last-axis
// case) runs over contiguous rows, in parallel over rows. float32 rows take
// vector code; float64 (the gradient checker's type) takes plain loops.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"
#include "ir/ops/Axes.h"

#include <cmath>
#include <type_traits>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// A softmax-family node decoded once: its axis convention and `axis`
/// (ops::isCoercedSoftmax, ops::getSoftmaxAxisAttr).
struct SoftmaxState {
  bool coerced2D = false;
  int64_t axisAttr = -1;
};

/// Decodes a softmax-family node: what its kernel reads at launch and its
/// staging rows at prepare.
SoftmaxState decodeSoftmax(const Node &node) {
  return SoftmaxState{ops::isCoercedSoftmax(node),
                      ops::getSoftmaxAxisAttr(node)};
}

/// Prepares a softmax-family node; an axis out of range for X's rank fails
/// here, before the first step.
llvm::Expected<std::unique_ptr<KernelState>> prepareSoftmax(const Node &node) {
  SoftmaxState state = decodeSoftmax(node);
  if (std::optional<unsigned> rank = operandRank(node, 0); rank && *rank > 0)
    if (llvm::Error err = ops::checkAxis(state.axisAttr, *rank).takeError())
      return prepareError(node, llvm::toString(std::move(err)));
  return makeKernelState(state);
}

/// The [outer, axisDim, inner] view of a softmax-like node's input of
/// \p shape (a staged slice of rows included), from its prepared state.
llvm::Expected<ops::SoftmaxAxes>
getSoftmaxShape(const KernelCall &call, llvm::ArrayRef<int64_t> shape) {
  const auto &state = call.getState<SoftmaxState>();
  auto axes = ops::getSoftmaxAxes(state.coerced2D, state.axisAttr, shape);
  if (!axes)
    return call.error(llvm::toString(axes.takeError()));
  return axes;
}

/// Softmax (or LogSoftmax) of one contiguous row. \p y may be \p x
/// (TraitRowwise): every element is read before it is written.
template <typename T, bool Log> void softmaxRow(const T *x, T *y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    softmaxRowF32(x, y, n, Log);
  } else {
    T maxValue = x[0];
    for (int64_t i = 1; i < n; ++i)
      maxValue = x[i] > maxValue ? x[i] : maxValue;
    T sum = 0;
    if constexpr (Log) {
      for (int64_t i = 0; i < n; ++i)
        sum += std::exp(x[i] - maxValue);
      T shift = maxValue + std::log(sum);
      for (int64_t i = 0; i < n; ++i)
        y[i] = x[i] - shift;
    } else {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = std::exp(x[i] - maxValue);
        sum += y[i];
      }
      T scale = T(1) / sum;
      for (int64_t i = 0; i < n; ++i)
        y[i] *= scale;
    }
  }
}

/// Softmax (or LogSoftmax) of one strided column of an [axisDim, inner] block.
template <typename T, bool Log>
void softmaxColumn(const T *x, T *y, int64_t n, int64_t stride) {
  T maxValue = x[0];
  for (int64_t i = 1; i < n; ++i)
    maxValue = x[i * stride] > maxValue ? x[i * stride] : maxValue;
  T sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(x[i * stride] - maxValue);
  if constexpr (Log) {
    T shift = maxValue + std::log(sum);
    for (int64_t i = 0; i < n; ++i)
      y[i * stride] = x[i * stride] - shift;
  } else {
    T scale = T(1) / sum;
    for (int64_t i = 0; i < n; ++i)
      y[i * stride] = std::exp(x[i * stride] - maxValue) * scale;
  }
}

template <bool Log> llvm::Error softmaxKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  auto shape = getSoftmaxShape(call, in.getShape());
  if (!shape)
    return shape.takeError();
  if (in.getNumElements() == 0)
    return llvm::Error::success();
  return dispatchFloat(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *x = in.getDataAs<T>();
    T *y = out.getDataAs<T>();
    int64_t n = shape->axisDim, inner = shape->inner;
    int64_t lines = shape->outer * inner;
    parallelFor(call.getNumThreads(), lines, grainFor(8 * n),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t line = lo; line < hi; ++line) {
                    if (inner == 1) {
                      softmaxRow<T, Log>(x + line * n, y + line * n, n);
                    } else {
                      int64_t o = line / inner, j = line % inner;
                      int64_t base = o * n * inner + j;
                      softmaxColumn<T, Log>(x + base, y + base, n, inner);
                    }
                  }
                });
    return llvm::Error::success();
  });
}

/// softmaxGradLine of a contiguous float32 row, four lanes at a time.
template <bool Log>
void softmaxGradRowF32(const float *dY, const float *y, float *dX, int64_t n) {
  // Four lanes; dX may be dY or Y (TraitRowwise): the sum reads the whole
  // row first, then each group is read before it is written.
  F32x4 acc = splatF32x4(0.0f);
  int64_t i = 0;
  for (; i + kF32Lanes <= n; i += kF32Lanes)
    acc += Log ? loadF32x4(dY + i) : loadF32x4(dY + i) * loadF32x4(y + i);
  float sum = ((acc[0] + acc[1]) + acc[2]) + acc[3];
  for (; i < n; ++i)
    sum += Log ? dY[i] : dY[i] * y[i];
  const F32x4 s = splatF32x4(sum);
  for (i = 0; i + kF32Lanes <= n; i += kF32Lanes) {
    F32x4 g = loadF32x4(dY + i), v = loadF32x4(y + i);
    storeF32x4(dX + i, Log ? g - expF32x4(v) * s : v * (g - s));
  }
  for (; i < n; ++i)
    dX[i] = Log ? dY[i] - expF32x4(splatF32x4(y[i]))[0] * sum
                : y[i] * (dY[i] - sum);
}

/// SoftmaxGrad: dX = Y * (dY - sum(dY * Y)); LogSoftmaxGrad: dX = dY -
/// exp(Y) * sum(dY), where Y is the forward op's output. float64 takes
/// the plain loop (the vector path is float32's alone).
template <bool Log, typename T>
void softmaxGradLine(const T *dY, const T *y, T *dX, int64_t n,
                     int64_t stride) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      softmaxGradRowF32<Log>(dY, y, dX, n);
      return;
    }
  }
  T sum = 0;
  if constexpr (Log) {
    for (int64_t i = 0; i < n; ++i)
      sum += dY[i * stride];
    for (int64_t i = 0; i < n; ++i)
      dX[i * stride] = dY[i * stride] - std::exp(y[i * stride]) * sum;
  } else {
    for (int64_t i = 0; i < n; ++i)
      sum += dY[i * stride] * y[i * stride];
    for (int64_t i = 0; i < n; ++i)
      dX[i * stride] = y[i * stride] * (dY[i * stride] - sum);
  }
}

template <bool Log> llvm::Error softmaxGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &y = *call.in(1), &dX = *call.out(0);
  if (llvm::Error err = checkSameShape(call, dY, y, "dY and Y"))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, dX, "dY and dX"))
    return err;
  DType dtype = dY.getDType() == DType::F64 ? DType::F64 : DType::F32;
  for (const TensorView *t : {&dY, &y, static_cast<const TensorView *>(&dX)})
    if (llvm::Error err = checkDType(call, *t, dtype, "operand"))
      return err;
  auto shape = getSoftmaxShape(call, dY.getShape());
  if (!shape)
    return shape.takeError();
  return dispatchFloat(call, dtype, [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *g = dY.getDataAs<T>(), *yv = y.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    int64_t n = shape->axisDim, inner = shape->inner;
    int64_t lines = shape->outer * inner;
    if (dY.getNumElements() == 0)
      return llvm::Error::success();
    parallelFor(call.getNumThreads(), lines, grainFor(4 * n),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t line = lo; line < hi; ++line) {
                    int64_t base =
                        inner == 1 ? line * n
                                   : (line / inner) * n * inner + line % inner;
                    softmaxGradLine<Log, T>(g + base, yv + base, out + base, n,
                                            inner);
                  }
                });
    return llvm::Error::success();
  });
}

/// The rows a softmax-family node normalizes independently: the
/// dimensions before its axis (its 16-bit staging slices them).
unsigned softmaxRowDims(const Node &node) {
  std::optional<unsigned> rank = operandRank(node, 0);
  if (!rank)
    return 0;
  llvm::Expected<unsigned> axis =
      ops::checkAxis(decodeSoftmax(node).axisAttr, *rank);
  if (!axis) {
    // The kernel reports a bad axis; staging it whole changes nothing.
    llvm::consumeError(axis.takeError());
    return 0;
  }
  return *axis;
}

} // namespace

void cpu::registerSoftmaxKernels(KernelTable &table) {
  table.add("", "Softmax", softmaxKernel<false>);
  table.add("", "LogSoftmax", softmaxKernel<true>);
  table.add(kMsDomain, "SoftmaxGrad", softmaxGradKernel<false>);
  table.add(kMsDomain, "SoftmaxGrad_13", softmaxGradKernel<false>);
  table.add(kMsDomain, "LogSoftmaxGrad", softmaxGradKernel<true>);
  table.add(kMsDomain, "LogSoftmaxGrad_13", softmaxGradKernel<true>);
  for (auto [domain, op] :
       {std::pair<llvm::StringRef, llvm::StringRef>{"", "Softmax"},
        {"", "LogSoftmax"},
        {kMsDomain, "SoftmaxGrad"},
        {kMsDomain, "SoftmaxGrad_13"},
        {kMsDomain, "LogSoftmaxGrad"},
        {kMsDomain, "LogSoftmaxGrad_13"}}) {
    table.setRowDims(domain, op, softmaxRowDims);
    table.setPrepare(domain, op, prepareSoftmax);
  }
}
