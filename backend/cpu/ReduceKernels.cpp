//===- ReduceKernels.cpp - Reductions and arg-reductions ------------------===//
//
// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, com.microsoft
// ReduceSumTraining, ArgMax and ArgMin.
// Axes come from the second operand when present (ReduceSum >= 13, opset 18
// for the others, ReduceSumTraining) and from the `axes` attribute
// otherwise; keepdims and noop_with_empty_axes follow ONNX.
//
// The input is collapsed into alternating kept/reduced groups of
// dimensions. A trailing reduced group reduces contiguous rows (eight
// interleaved accumulators, combined in a fixed order); [kept, reduced,
// kept] accumulates whole rows into the output; anything else is first
// transposed so the reduced dimensions come last. Every output element is
// computed by one thread in a fixed order, so results do not depend on the
// thread count.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ReduceAxes.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

template <typename T> T wrappingAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) +
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a + b;
}

template <typename T> T wrappingMul(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) *
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a * b;
}

/// A reduction: map each element (pre), combine, and finalize with the
/// number of reduced elements.
struct SumReduce {
  template <typename T> static T init() { return T(0); }
  template <typename T> static T pre(T x) { return x; }
  template <typename T> static T combine(T a, T b) { return wrappingAdd(a, b); }
  template <typename T> static T finalize(T acc, int64_t) { return acc; }
};
/// The mean of no elements is NaN for floats (as numpy and PyTorch give:
/// a mean-reduced loss over an empty batch must not read as 0) and 0 for
/// integers, which have no NaN.
struct MeanReduce : SumReduce {
  template <typename T> static T finalize(T acc, int64_t count) {
    if (count)
      return static_cast<T>(acc / static_cast<T>(count));
    if constexpr (std::numeric_limits<T>::has_quiet_NaN)
      return std::numeric_limits<T>::quiet_NaN();
    return acc;
  }
};
struct SumSquareReduce : SumReduce {
  template <typename T> static T pre(T x) { return wrappingMul(x, x); }
};
struct L1Reduce : SumReduce {
  template <typename T> static T pre(T x) {
    return x < T(0) ? static_cast<T>(T(0) - x) : x;
  }
};
struct L2Reduce : SumSquareReduce {
  template <typename T> static T finalize(T acc, int64_t) {
    return static_cast<T>(std::sqrt(static_cast<double>(acc)));
  }
};
struct ProdReduce {
  template <typename T> static T init() { return T(1); }
  template <typename T> static T pre(T x) { return x; }
  template <typename T> static T combine(T a, T b) { return wrappingMul(a, b); }
  template <typename T> static T finalize(T acc, int64_t) { return acc; }
};
struct MaxReduce {
  template <typename T> static T init() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  template <typename T> static T pre(T x) { return x; }
  template <typename T> static T combine(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<T>::quiet_NaN();
    return a < b ? b : a;
  }
  template <typename T> static T finalize(T acc, int64_t) { return acc; }
};
struct MinReduce : MaxReduce {
  template <typename T> static T init() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  template <typename T> static T combine(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<T>::quiet_NaN();
    return b < a ? b : a;
  }
};

struct LogSumReduce : SumReduce {
  template <typename T> static T finalize(T acc, int64_t) {
    return static_cast<T>(std::log(static_cast<double>(acc)));
  }
};
/// log(sum(exp(x))) accumulated as a running log-sum-exp, which never
/// overflows: combine(a, b) = max + log1p(exp(min - max)).
struct LogSumExpReduce {
  template <typename T> static T init() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  template <typename T> static T pre(T x) { return x; }
  template <typename T> static T combine(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<T>::quiet_NaN();
      T hi = a < b ? b : a, lo = a < b ? a : b;
      if (std::isinf(lo) && lo < T(0))
        return hi;
      return hi + std::log1p(std::exp(lo - hi));
    } else {
      double hi = std::max<double>(a, b), lo = std::min<double>(a, b);
      return static_cast<T>(hi + std::log1p(std::exp(lo - hi)));
    }
  }
  template <typename T> static T finalize(T acc, int64_t) { return acc; }
};

/// Reduces one contiguous row with eight interleaved accumulators.
template <typename Op, typename T> T reduceRow(const T *x, int64_t n) {
  constexpr int kLanes = 8;
  T lanes[kLanes];
  for (T &lane : lanes)
    lane = Op::template init<T>();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = Op::combine(lanes[l], Op::pre(x[i + l]));
  T acc = Op::template init<T>();
  for (T lane : lanes)
    acc = Op::combine(acc, lane);
  for (; i < n; ++i)
    acc = Op::combine(acc, Op::pre(x[i]));
  return Op::finalize(acc, n);
}

/// Dimensions of a reduction after dropping unit dims and merging
/// neighbours of the same kind.
struct ReduceGroups {
  llvm::SmallVector<int64_t, 6> extents;
  llvm::SmallVector<bool, 6> reduced;
};

ReduceGroups collapse(llvm::ArrayRef<int64_t> shape,
                      llvm::ArrayRef<bool> isReduced) {
  ReduceGroups groups;
  for (unsigned d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!groups.extents.empty() && groups.reduced.back() == isReduced[d]) {
      groups.extents.back() *= shape[d];
      continue;
    }
    groups.extents.push_back(shape[d]);
    groups.reduced.push_back(isReduced[d]);
  }
  return groups;
}

/// True when reduceInto takes its general path: a transposed copy of the
/// input with the reduced dimensions last.
bool needsTransposedCopy(llvm::ArrayRef<int64_t> shape,
                         llvm::ArrayRef<bool> isReduced) {
  int64_t total = product(shape), outCount = 1;
  for (unsigned d = 0; d < shape.size(); ++d)
    if (!isReduced[d])
      outCount *= shape[d];
  if (total == 0 || outCount == 0)
    return false;
  ReduceGroups groups = collapse(shape, isReduced);
  unsigned numGroups = groups.extents.size();
  if (numGroups == 0 || (numGroups == 1 && !groups.reduced[0]))
    return false;
  if (groups.reduced.back() && numGroups <= 2)
    return false;
  if (!groups.reduced.back() &&
      (numGroups == 2 || (numGroups == 3 && !groups.reduced[0])))
    return false;
  return true;
}

/// Reduces \p in over the dimensions flagged in \p isReduced into \p out
/// (which holds the kept elements in order).
template <typename Op, typename T>
llvm::Error reduceInto(const KernelCall &call, const TensorView &in,
                       llvm::ArrayRef<bool> isReduced, const TensorView &out) {
  const T *x = in.getDataAs<T>();
  T *y = out.getDataAs<T>();
  unsigned threads = call.getNumThreads();
  int64_t total = in.getNumElements();
  int64_t outCount = out.getNumElements();
  if (outCount == 0)
    return llvm::Error::success();
  int64_t count = outCount ? total / outCount : 0;
  if (total == 0) {
    for (int64_t i = 0; i < outCount; ++i)
      y[i] = Op::finalize(Op::template init<T>(), 0);
    return llvm::Error::success();
  }
  ReduceGroups groups = collapse(in.getShape(), isReduced);
  unsigned numGroups = groups.extents.size();
  if (numGroups == 0 || (numGroups == 1 && !groups.reduced[0])) {
    // Nothing with extent > 1 is reduced: map each element.
    parallelFor(threads, outCount, grainFor(2), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        y[i] =
            Op::finalize(Op::combine(Op::template init<T>(), Op::pre(x[i])), 1);
    });
    return llvm::Error::success();
  }
  if (groups.reduced.back() && (numGroups == 1 || numGroups == 2)) {
    // [K, R] or [R]: contiguous rows.
    int64_t width = groups.extents.back();
    parallelFor(threads, outCount, grainFor(width),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t r = lo; r < hi; ++r)
                    y[r] = reduceRow<Op>(x + r * width, width);
                });
    return llvm::Error::success();
  }
  if (!groups.reduced.back() &&
      (numGroups == 2 || (numGroups == 3 && !groups.reduced[0]))) {
    // [R, K] or [K1, R, K2]: accumulate rows of K2 into the output.
    int64_t outer = numGroups == 3 ? groups.extents[0] : 1;
    int64_t rows = groups.extents[numGroups - 2];
    int64_t width = groups.extents.back();
    int64_t grain = std::max<int64_t>(64, grainFor(rows));
    int64_t chunksPerOuter = numChunks(width, grain);
    parallelFor(
        threads, outer * chunksPerOuter, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t task = lo; task < hi; ++task) {
            int64_t o = task / chunksPerOuter;
            int64_t begin = (task % chunksPerOuter) * grain;
            int64_t end = std::min(width, begin + grain);
            const T *block = x + o * rows * width;
            T *acc = y + o * width;
            for (int64_t j = begin; j < end; ++j)
              acc[j] = Op::combine(Op::template init<T>(), Op::pre(block[j]));
            for (int64_t r = 1; r < rows; ++r) {
              const T *row = block + r * width;
              for (int64_t j = begin; j < end; ++j)
                acc[j] = Op::combine(acc[j], Op::pre(row[j]));
            }
            for (int64_t j = begin; j < end; ++j)
              acc[j] = Op::finalize(acc[j], rows);
          }
        });
    return llvm::Error::success();
  }
  // General: move the reduced dimensions last, then reduce rows.
  llvm::SmallVector<unsigned, 6> perm;
  llvm::SmallVector<int64_t, 6> permutedShape;
  for (unsigned pass = 0; pass < 2; ++pass)
    for (unsigned d = 0; d < in.getRank(); ++d)
      if (isReduced[d] == (pass == 1)) {
        perm.push_back(d);
        permutedShape.push_back(in.getDim(d));
      }
  assert(needsTransposedCopy(in.getShape(), isReduced) &&
         "reduceWorkspace must reserve the transposed copy");
  auto buffer = call.getContext().allocateScratch(in.getDType(), permutedShape);
  if (!buffer)
    return buffer.takeError();
  transposeInto(in, buffer->getView(), perm, threads);
  const T *px = buffer->getView().template getDataAs<T>();
  parallelFor(threads, outCount, grainFor(count), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      y[r] = reduceRow<Op>(px + r * count, count);
  });
  return llvm::Error::success();
}

/// The scratch of reduceKernel: the transposed copy, when the reduced
/// dimensions (from keepdims shapes, the axes attribute or a constant axes
/// operand) need it; the input's size when they are not known statically.
uint64_t reduceWorkspace(const Node &node) {
  const Value *input = node.getOperand(0);
  const Value *output = node.getResult(0);
  if (!input || !output)
    return 0;
  const TensorType &in = input->getType();
  auto shape = in.getStaticShape();
  unsigned rank = shape.size();
  // The kernel transposes the staged (fp32) copy of a 16-bit input.
  uint64_t copy = scratchBytes(stagedDType(in.getDType()), product(shape));
  ops::ReduceSpec spec = ops::getReduceSpec(node);
  auto outShape = output->getType().getStaticShape();
  if (spec.keepDims && outShape.size() == rank) {
    // Unit dimensions never matter (collapse drops them).
    llvm::SmallVector<bool, 6> isReduced(rank, false);
    for (unsigned d = 0; d < rank; ++d)
      isReduced[d] = shape[d] != outShape[d];
    return needsTransposedCopy(shape, isReduced) ? copy : 0;
  }
  auto axes = ops::resolveStaticReduceAxes(node, spec, rank);
  if (!axes) {
    llvm::consumeError(axes.takeError());
    return copy;
  }
  if (!*axes)
    return copy;
  return needsTransposedCopy(shape, (*axes)->reduced) ? copy : 0;
}

/// A reduction's spec, and its axes when they are static (attribute or
/// constant operand) for the input rank it was prepared for.
struct ReduceState {
  ops::ReduceSpec spec;
  std::optional<ops::ReduceAxes> axes;
  int64_t rank = -1;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareReduce(const Node &node) {
  ReduceState state;
  state.spec = ops::getReduceSpec(node);
  if (std::optional<unsigned> rank = operandRank(node, 0)) {
    state.rank = *rank;
    auto axes = ops::resolveStaticReduceAxes(node, state.spec, state.rank);
    if (!axes)
      return prepareError(node, llvm::toString(axes.takeError()));
    state.axes = std::move(*axes);
  }
  return makeKernelState(std::move(state));
}

/// Any reduction; \p axesInput is the operand that may carry the axes.
template <typename Op> llvm::Error reduceKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (out.getDType() != in.getDType())
    return call.error("output element type differs from the input's");
  unsigned rank = in.getRank();
  const auto &state = call.getState<ReduceState>();
  std::optional<ops::ReduceAxes> resolved;
  if (!state.axes || state.rank != static_cast<int64_t>(rank)) {
    // The axes operand is only known now (or the rank differs).
    llvm::SmallVector<int64_t, 6> values;
    if (state.spec.axesFromOperand) {
      auto read = readInts(call, *call.in(1), "axes");
      if (!read)
        return read.takeError();
      values = std::move(*read);
    }
    auto axes = state.spec.resolve(rank, values);
    if (!axes)
      return call.error(llvm::toString(axes.takeError()));
    resolved = std::move(*axes);
  }
  const ops::ReduceAxes &axes = resolved ? *resolved : *state.axes;
  llvm::ArrayRef<bool> isReduced = axes.reduced;
  ops::StaticShape outShape = axes.resultShape(in.getShape());
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  return dispatchTypes<float, double, int64_t, int32_t>(
      call, in.getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        return reduceInto<Op, T>(call, in, isReduced, out);
      });
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareArgReduce(const Node &node) {
  ops::ArgReduceSpec spec = ops::getArgReduceSpec(node);
  if (std::optional<unsigned> rank = operandRank(node, 0))
    if (auto axes = spec.resolve(*rank); !axes)
      return prepareError(node, llvm::toString(axes.takeError()));
  return makeKernelState(spec);
}

/// ArgMax / ArgMin along one axis.
template <bool IsMax> llvm::Error argReduceKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (llvm::Error err = checkDType(call, out, DType::I64, "output"))
    return err;
  const auto &spec = call.getState<ops::ArgReduceSpec>();
  unsigned rank = in.getRank();
  auto reduced = spec.resolve(rank);
  if (!reduced)
    return call.error(llvm::toString(reduced.takeError()));
  bool selectLast = spec.selectLastIndex;
  if (llvm::Error err =
          checkOutputShape(call, 0, reduced->resultShape(in.getShape())))
    return err;
  unsigned axis = rank ? reduced->axes.front() : 0;
  int64_t outer = rank ? product(in.getShape().take_front(axis)) : 1;
  int64_t n = rank ? in.getDim(axis) : 1;
  int64_t inner = rank ? product(in.getShape().drop_front(axis + 1)) : 1;
  if (n == 0 && out.getNumElements())
    return call.error("cannot take an arg-reduction over an empty axis");
  return dispatchArithmetic(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const T *x = in.getDataAs<T>();
    int64_t *y = out.getDataAs<int64_t>();
    parallelFor(call.getNumThreads(), outer * inner, grainFor(n),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t line = lo; line < hi; ++line) {
                    int64_t o = line / inner, j = line % inner;
                    const T *base = x + o * n * inner + j;
                    int64_t best = 0;
                    for (int64_t i = 1; i < n; ++i) {
                      T v = base[i * inner], b = base[best * inner];
                      bool better = IsMax ? (v > b || (selectLast && v == b))
                                          : (v < b || (selectLast && v == b));
                      if (better)
                        best = i;
                    }
                    y[line] = best;
                  }
                });
    return llvm::Error::success();
  });
}

} // namespace

void cpu::registerReduceKernels(KernelTable &table) {
  table.add("", "ReduceSum", reduceKernel<SumReduce>);
  table.add("", "ReduceMean", reduceKernel<MeanReduce>);
  table.add("", "ReduceMax", reduceKernel<MaxReduce>);
  table.add("", "ReduceMin", reduceKernel<MinReduce>);
  table.add("", "ReduceProd", reduceKernel<ProdReduce>);
  table.add("", "ReduceSumSquare", reduceKernel<SumSquareReduce>);
  table.add("", "ReduceL1", reduceKernel<L1Reduce>);
  table.add("", "ReduceL2", reduceKernel<L2Reduce>);
  table.add("", "ReduceLogSum", reduceKernel<LogSumReduce>);
  table.add("", "ReduceLogSumExp", reduceKernel<LogSumExpReduce>);
  table.add(kMsDomain, "ReduceSumTraining", reduceKernel<SumReduce>);
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                         "ReduceProd", "ReduceSumSquare", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}) {
    table.setWorkspace("", op, reduceWorkspace);
    table.setPrepare("", op, prepareReduce);
  }
  table.setWorkspace(kMsDomain, "ReduceSumTraining", reduceWorkspace);
  table.setPrepare(kMsDomain, "ReduceSumTraining", prepareReduce);
  table.add("", "ArgMax", argReduceKernel<true>);
  table.add("", "ArgMin", argReduceKernel<false>);
  table.setPrepare("", "ArgMax", prepareArgReduce);
  table.setPrepare("", "ArgMin", prepareArgReduce);
}
