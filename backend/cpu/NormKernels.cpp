//===- NormKernels.cpp - Batch and layer normalization with gradients -----===//
//
// BatchNormalization (inference, and training with running statistics
// updated by momentum plus the saved mean / inverse std outputs ONNX Runtime
// uses), com.microsoft BatchNormInternal, BatchNormalizationGrad,
// InstanceNormalization;
// LayerNormalization with its Mean and InvStdDev outputs, com.microsoft
// SimplifiedLayerNormalization and ai.onnx RMSNormalization (RMS norm, one
// kernel; rows as ir/ops/NormRows.h splits them), LayerNormalizationGrad,
// SimplifiedLayerNormalizationGrad and InvertibleLayerNormalizationGrad.
// Statistics accumulate in double. Batch-norm work is split by channel and
// layer-norm work by row; the scale/bias gradients of layer norm sum over
// rows in fixed blocks of rows whose partial sums are combined in block
// order, so no result depends on the thread count. Each kernel runs in
// float32 (vector rows) or, for float64 tensors, in float64 (plain loops);
// a float64 layer norm may keep its saved statistics in float32 (ONNX's
// default stash_type).
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "backend/cpu/RowKernels.h"
#include "backend/cpu/Simd.h"
#include "ir/ops/NormRows.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// A normalization node decoded once: its `epsilon`; for batch norm its
/// `momentum` and `training_mode` (absent: the op and its outputs decide);
/// for the row norms and their gradients its `axis` (norm::getNormAxisAttr).
struct NormState {
  double epsilon = 1e-5;
  double momentum = 0.9;
  std::optional<bool> trainingMode;
  int64_t axisAttr = -1;
};

/// Decodes any normalization node of this file: what its kernel reads at
/// launch and its workspace function at plan time.
NormState decodeNorm(const Node &node) {
  NormState state;
  state.epsilon = node.getFloatAttr("epsilon", 1e-5f);
  state.momentum = node.getFloatAttr("momentum", 0.9f);
  if (node.hasAttr("training_mode"))
    state.trainingMode = node.getIntAttr("training_mode", 0) != 0;
  state.axisAttr = norm::getNormAxisAttr(node);
  return state;
}

/// Prepares a batch or instance normalization.
llvm::Expected<std::unique_ptr<KernelState>> prepareNorm(const Node &node) {
  return makeKernelState(decodeNorm(node));
}

/// Prepares a row normalization or its gradient, whose X is operand
/// \p XOperand: an axis out of range for X's rank fails here.
template <unsigned XOperand>
llvm::Expected<std::unique_ptr<KernelState>> prepareRowNorm(const Node &node) {
  NormState state = decodeNorm(node);
  if (std::optional<unsigned> rank = operandRank(node, XOperand))
    if (llvm::Error err = norm::getNormAxis(state.axisAttr, *rank).takeError())
      return prepareError(node, llvm::toString(std::move(err)));
  return makeKernelState(state);
}

/// Errors unless \p stat (when present), a saved mean or inverse standard
/// deviation, is float32 or \p dtype: ONNX's LayerNormalization keeps its
/// statistics in float32 (stash_type) whatever X is, as ONNX Runtime's CPU
/// kernels do for a float64 X.
llvm::Error checkStatistic(const KernelCall &call, DType dtype,
                           const TensorView *stat) {
  if (!stat || stat->getDType() == DType::F32)
    return llvm::Error::success();
  return checkDType(call, *stat, dtype, "saved statistic");
}

/// Element \p i of the saved statistic \p stat (see checkStatistic).
double statisticAt(const TensorView &stat, int64_t i) {
  return stat.getDType() == DType::F64 ? stat.getDataAs<double>()[i]
                                       : stat.getDataAs<float>()[i];
}

/// Stores \p value as element \p i of the saved statistic \p stat.
void storeStatistic(TensorView &stat, int64_t i, double value) {
  if (stat.getDType() == DType::F64)
    stat.getDataAs<double>()[i] = value;
  else
    stat.getDataAs<float>()[i] = static_cast<float>(value);
}

/// Errors unless every present view has element type \p dtype.
llvm::Error checkAll(const KernelCall &call, DType dtype,
                     std::initializer_list<const TensorView *> views) {
  for (const TensorView *view : views)
    if (view)
      if (llvm::Error err = checkDType(call, *view, dtype, "operand"))
        return err;
  return llvm::Error::success();
}

// Row helpers: Simd.h's and RowKernels.h's vector kernels in float32 (so
// float32 results are theirs), plain loops in float64.

/// sum(x[0, n)) in double.
double rowSum(const float *x, int64_t n) { return sumF32(x, n); }
double rowSum(const double *x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += x[i];
  return sum;
}
/// sum((x[i] - center)^2) over [0, n).
double rowSquaredDeviation(const float *x, int64_t n, double center) {
  return sumSquaredDeviationF32(x, n, center);
}
double rowSquaredDeviation(const double *x, int64_t n, double center) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += (x[i] - center) * (x[i] - center);
  return sum;
}
/// y[i] = x[i] * scale + shift over [0, n).
void rowScaleShift(const float *x, float *y, int64_t n, float scale,
                   float shift) {
  scaleShiftF32(x, y, n, scale, shift);
}
void rowScaleShift(const double *x, double *y, int64_t n, double scale,
                   double shift) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * scale + shift;
}
/// sum(g[i]) and sum(g[i] * (x[i] - center)) over [0, n).
SumAndDot rowSumAndCenteredDot(const float *g, const float *x, int64_t n,
                               double center) {
  return sumWithCenteredProductF32(g, x, n, center);
}
SumAndDot rowSumAndCenteredDot(const double *g, const double *x, int64_t n,
                               double center) {
  SumAndDot sums;
  for (int64_t i = 0; i < n; ++i) {
    sums.sum += g[i];
    sums.dot += g[i] * (x[i] - center);
  }
  return sums;
}
/// Layer norm of one row (see layerNormRowF32).
void layerNormRow(const float *x, const float *scale, const float *bias,
                  float *y, int64_t cols, double epsilon, bool rms, float &mean,
                  float &inv) {
  layerNormRowF32(x, scale, bias, y, cols, epsilon, rms, mean, inv);
}
void layerNormRow(const double *x, const double *scale, const double *bias,
                  double *y, int64_t cols, double epsilon, bool rms,
                  double &mean, double &inv) {
  double sum = 0, squares = 0;
  if (!rms)
    for (int64_t j = 0; j < cols; ++j)
      sum += x[j];
  mean = !rms && cols ? sum / cols : 0;
  for (int64_t j = 0; j < cols; ++j)
    squares += (x[j] - mean) * (x[j] - mean);
  inv = 1.0 / std::sqrt((cols ? squares / cols : 0) + epsilon);
  for (int64_t j = 0; j < cols; ++j) {
    double v = (x[j] - mean) * inv * scale[j];
    y[j] = bias ? v + bias[j] : v;
  }
}

/// Errors unless \p view is a [C] vector.
llvm::Error checkChannelVector(const KernelCall &call, const TensorView *view,
                               int64_t channels, llvm::StringRef what) {
  if (view && view->getNumElements() != channels)
    return call.error(what + " must have " + llvm::Twine(channels) +
                      " elements (one per channel), not " +
                      llvm::Twine(view->getNumElements()));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Batch normalization
//===----------------------------------------------------------------------===//

/// BatchNormalization(X, scale, B, mean, var) -> (Y, running_mean?,
/// running_var?, saved_mean?, saved_inv_std?).
template <bool Internal, typename T>
llvm::Error batchNormKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &scale = *call.in(1), &bias = *call.in(2);
  const TensorView &inMean = *call.in(3), &inVar = *call.in(4);
  TensorView &y = *call.out(0);
  if (x.getRank() < 2)
    return call.error("X must have rank >= 2");
  if (llvm::Error err =
          checkAll(call, dtypeOf<T>(),
                   {&x, &scale, &bias, &inMean, &inVar, &y, call.out(1),
                    call.out(2), call.out(3), call.out(4)}))
    return err;
  if (llvm::Error err = checkSameShape(call, x, y, "X and Y"))
    return err;
  int64_t n = x.getDim(0), channels = x.getDim(1);
  int64_t spatial = product(x.getShape().drop_front(2));
  for (auto [view, what] :
       {std::pair{&scale, "scale"}, std::pair{&bias, "B"},
        std::pair{&inMean, "input_mean"}, std::pair{&inVar, "input_var"}})
    if (llvm::Error err = checkChannelVector(call, view, channels, what))
      return err;
  for (unsigned i = 1; i < 5; ++i)
    if (llvm::Error err = checkChannelVector(call, call.out(i), channels,
                                             "statistics output"))
      return err;
  const auto &state = call.getState<NormState>();
  bool training =
      state.trainingMode.value_or(Internal || call.out(1) != nullptr);
  double epsilon = state.epsilon, momentum = state.momentum;
  const T *px = x.getDataAs<T>();
  const T *ps = scale.getDataAs<T>(), *pb = bias.getDataAs<T>();
  const T *pm = inMean.getDataAs<T>(), *pv = inVar.getDataAs<T>();
  T *py = y.getDataAs<T>();
  auto outData = [&](unsigned i) {
    return call.out(i) ? call.out(i)->getDataAs<T>() : nullptr;
  };
  T *runningMean = outData(1), *runningVar = outData(2);
  T *savedMean = outData(3), *savedInvStd = outData(4);
  int64_t count = n * spatial;
  parallelFor(
      call.getNumThreads(), channels, grainFor(4 * count),
      [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          double mean, var;
          if (training) {
            double sum = 0;
            for (int64_t b = 0; b < n; ++b)
              sum += rowSum(px + (b * channels + c) * spatial, spatial);
            mean = count ? sum / count : 0;
            double squares = 0;
            for (int64_t b = 0; b < n; ++b)
              squares += rowSquaredDeviation(px + (b * channels + c) * spatial,
                                             spatial, mean);
            var = count ? squares / count : 0;
          } else {
            mean = pm[c];
            var = pv[c];
          }
          double invStd = 1.0 / std::sqrt(var + epsilon);
          T a = static_cast<T>(ps[c] * invStd);
          T shift = static_cast<T>(pb[c] - mean * ps[c] * invStd);
          for (int64_t b = 0; b < n; ++b)
            rowScaleShift(px + (b * channels + c) * spatial,
                          py + (b * channels + c) * spatial, spatial, a, shift);
          if (runningMean)
            runningMean[c] = static_cast<T>(
                training ? pm[c] * momentum + mean * (1 - momentum) : pm[c]);
          if (runningVar)
            runningVar[c] = static_cast<T>(
                training ? pv[c] * momentum + var * (1 - momentum) : pv[c]);
          if (savedMean)
            savedMean[c] = static_cast<T>(mean);
          if (savedInvStd)
            savedInvStd[c] = static_cast<T>(invStd);
        }
      });
  return llvm::Error::success();
}

/// batchNormKernel in float64 when its first operand is float64, else in
/// float32.
template <bool Internal> llvm::Error batchNormKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return batchNormKernelTyped<Internal, double>(call);
  return batchNormKernelTyped<Internal, float>(call);
}

/// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) ->
/// (dX, dScale, dBias).
template <typename T> llvm::Error batchNormGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0), &x = *call.in(1), &scale = *call.in(2);
  const TensorView &mean = *call.in(3), &invStd = *call.in(4);
  TensorView &dX = *call.out(0);
  TensorView *dScale = call.out(1), *dBias = call.out(2);
  if (x.getRank() < 2)
    return call.error("X must have rank >= 2");
  if (llvm::Error err =
          checkAll(call, dtypeOf<T>(),
                   {&dY, &x, &scale, &mean, &invStd, &dX, dScale, dBias}))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, x, "dY and X"))
    return err;
  if (llvm::Error err = checkSameShape(call, dX, x, "dX and X"))
    return err;
  int64_t n = x.getDim(0), channels = x.getDim(1);
  int64_t spatial = product(x.getShape().drop_front(2));
  for (auto [view, what] :
       {std::pair{&scale, "scale"}, std::pair{&mean, "saved_mean"},
        std::pair{&invStd, "saved_inv_std"}})
    if (llvm::Error err = checkChannelVector(call, view, channels, what))
      return err;
  if (llvm::Error err = checkChannelVector(call, dScale, channels, "dScale"))
    return err;
  if (llvm::Error err = checkChannelVector(call, dBias, channels, "dBias"))
    return err;
  const T *g = dY.getDataAs<T>(), *px = x.getDataAs<T>();
  const T *ps = scale.getDataAs<T>(), *pm = mean.getDataAs<T>();
  const T *pi = invStd.getDataAs<T>();
  T *out = dX.getDataAs<T>();
  double count = static_cast<double>(n * spatial);
  parallelFor(call.getNumThreads(), channels, grainFor(6 * n * spatial),
              [&](int64_t lo, int64_t hi) {
                for (int64_t c = lo; c < hi; ++c) {
                  double sumDy = 0, sumDyCentered = 0;
                  double mu = pm[c], inv = pi[c];
                  for (int64_t b = 0; b < n; ++b) {
                    SumAndDot sums = rowSumAndCenteredDot(
                        g + (b * channels + c) * spatial,
                        px + (b * channels + c) * spatial, spatial, mu);
                    sumDy += sums.sum;
                    sumDyCentered += sums.dot;
                  }
                  double sumDyXhat = sumDyCentered * inv;
                  if (dBias)
                    dBias->getDataAs<T>()[c] = static_cast<T>(sumDy);
                  if (dScale)
                    dScale->getDataAs<T>()[c] = static_cast<T>(sumDyXhat);
                  double factor = count ? ps[c] * inv / count : 0;
                  for (int64_t b = 0; b < n; ++b) {
                    const T *gp = g + (b * channels + c) * spatial;
                    const T *xp = px + (b * channels + c) * spatial;
                    T *op = out + (b * channels + c) * spatial;
                    int64_t i = 0;
                    if constexpr (std::is_same_v<T, float>) {
                      // Two lanes of the scalar loop's double arithmetic.
                      const F64x2 muV = {mu, mu}, invV = {inv, inv};
                      const F64x2 factorV = {factor, factor};
                      const F64x2 countV = {count, count};
                      const F64x2 sumDyV = {sumDy, sumDy};
                      const F64x2 sumDyXhatV = {sumDyXhat, sumDyXhat};
                      for (; i + 2 <= spatial; i += 2) {
                        F64x2 xhat = (loadF32x2AsF64(xp + i) - muV) * invV;
                        storeF64x2AsF32(
                            op + i, factorV * (loadF32x2AsF64(gp + i) * countV -
                                               sumDyV - xhat * sumDyXhatV));
                      }
                    }
                    for (; i < spatial; ++i) {
                      double xhat = (xp[i] - mu) * inv;
                      op[i] = static_cast<T>(
                          factor * (gp[i] * count - sumDy - xhat * sumDyXhat));
                    }
                  }
                }
              });
  return llvm::Error::success();
}

/// batchNormGradKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error batchNormGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return batchNormGradKernelTyped<double>(call);
  return batchNormGradKernelTyped<float>(call);
}

/// InstanceNormalization(input, scale, B): each (image, channel) plane
/// normalized by its own mean and variance.
template <typename T> llvm::Error instanceNormKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &scale = *call.in(1), &bias = *call.in(2);
  TensorView &y = *call.out(0);
  if (x.getRank() < 3)
    return call.error("input must have rank >= 3");
  if (llvm::Error err = checkAll(call, dtypeOf<T>(), {&x, &scale, &bias, &y}))
    return err;
  if (llvm::Error err = checkSameShape(call, x, y, "input and output"))
    return err;
  int64_t channels = x.getDim(1);
  for (auto [view, what] : {std::pair{&scale, "scale"}, std::pair{&bias, "B"}})
    if (llvm::Error err = checkChannelVector(call, view, channels, what))
      return err;
  double epsilon = call.getState<NormState>().epsilon;
  int64_t planes = x.getDim(0) * channels;
  int64_t size = product(x.getShape().drop_front(2));
  const T *px = x.getDataAs<T>(), *ps = scale.getDataAs<T>(),
          *pb = bias.getDataAs<T>();
  T *py = y.getDataAs<T>();
  parallelFor(call.getNumThreads(), planes, grainFor(4 * size),
              [&](int64_t lo, int64_t hi) {
                for (int64_t p = lo; p < hi; ++p) {
                  const T *plane = px + p * size;
                  double sum = 0, squares = 0;
                  for (int64_t i = 0; i < size; ++i)
                    sum += plane[i];
                  double mean = size ? sum / size : 0;
                  for (int64_t i = 0; i < size; ++i)
                    squares += (plane[i] - mean) * (plane[i] - mean);
                  double inv =
                      1.0 / std::sqrt((size ? squares / size : 0) + epsilon);
                  int64_t c = p % channels;
                  T a = static_cast<T>(ps[c] * inv);
                  T shift = static_cast<T>(pb[c] - mean * ps[c] * inv);
                  for (int64_t i = 0; i < size; ++i)
                    py[p * size + i] = plane[i] * a + shift;
                }
              });
  return llvm::Error::success();
}

/// instanceNormKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error instanceNormKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return instanceNormKernelTyped<double>(call);
  return instanceNormKernelTyped<float>(call);
}

//===----------------------------------------------------------------------===//
// Layer normalization
//===----------------------------------------------------------------------===//

/// X's rows and columns (ir/ops/NormRows.h) by the prepared axis, errors
/// naming the node.
llvm::Expected<norm::NormRows> kernelNormRows(const KernelCall &call,
                                              llvm::ArrayRef<int64_t> shape) {
  auto rows = norm::getNormRows(call.getState<NormState>().axisAttr, shape);
  if (!rows)
    return call.error(llvm::toString(rows.takeError()));
  return *rows;
}

/// A per-column parameter (scale, bias) as a [cols] array: the tensor itself
/// when it has cols elements, else a broadcast copy into \p storage.
template <typename T>
llvm::Expected<const T *>
getColumnParameter(const KernelCall &call, const TensorView *param,
                   llvm::ArrayRef<int64_t> normalizedShape,
                   std::optional<TensorBuffer> &storage, llvm::StringRef what) {
  if (!param)
    return nullptr;
  if (param->getNumElements() == product(normalizedShape))
    return param->getDataAs<T>();
  llvm::SmallVector<int64_t, 6> merged;
  if (!broadcastShapes(param->getShape(), normalizedShape, merged) ||
      llvm::ArrayRef<int64_t>(merged) != normalizedShape)
    return call.error(what + " of shape " + shapeString(param->getShape()) +
                      " does not broadcast to the normalized shape " +
                      shapeString(normalizedShape));
  auto buffer =
      call.getContext().allocateScratch(dtypeOf<T>(), normalizedShape);
  if (!buffer)
    return buffer.takeError();
  broadcastCopy(*param, buffer->getView(), call.getNumThreads());
  storage.emplace(std::move(*buffer));
  return storage->getView().getDataAs<T>();
}

/// LayerNormalization(X, Scale, B?) -> (Y, Mean?, InvStdDev?), and
/// SimplifiedLayerNormalization(X, scale) -> (Y, inv_std_var?) or
/// RMSNormalization(X, scale) -> Y when Rms.
template <bool Rms, typename T>
llvm::Error layerNormKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0);
  TensorView &y = *call.out(0);
  TensorView *meanOut = Rms ? nullptr : call.out(1);
  TensorView *invOut = call.out(Rms ? 1 : 2);
  if (llvm::Error err =
          checkAll(call, dtypeOf<T>(), {&x, call.in(1), call.in(2), &y}))
    return err;
  for (const TensorView *stat : {meanOut, invOut})
    if (llvm::Error err = checkStatistic(call, dtypeOf<T>(), stat))
      return err;
  if (llvm::Error err = checkSameShape(call, x, y, "X and Y"))
    return err;
  auto shape = kernelNormRows(call, x.getShape());
  if (!shape)
    return shape.takeError();
  for (TensorView *stat : {meanOut, invOut})
    if (stat && stat->getNumElements() != shape->rows)
      return call.error("statistics outputs must have one element per row");
  // The normalized dimensions are [axis, rank).
  llvm::ArrayRef<int64_t> normalized = x.getShape().drop_front(shape->axis);
  std::optional<TensorBuffer> scaleStorage, biasStorage;
  auto scale = getColumnParameter<T>(call, call.in(1), normalized, scaleStorage,
                                     "scale");
  if (!scale)
    return scale.takeError();
  auto bias = getColumnParameter<T>(call, Rms ? nullptr : call.in(2),
                                    normalized, biasStorage, "bias");
  if (!bias)
    return bias.takeError();
  double epsilon = call.getState<NormState>().epsilon;
  int64_t cols = shape->cols;
  const T *px = x.getDataAs<T>();
  T *py = y.getDataAs<T>();
  const T *ps = *scale, *pb = *bias;
  parallelFor(call.getNumThreads(), shape->rows, grainFor(6 * cols),
              [&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                  const T *row = px + r * cols;
                  T *out = py + r * cols;
                  T m, s;
                  layerNormRow(row, ps, pb, out, cols, epsilon, Rms, m, s);
                  if (meanOut)
                    storeStatistic(*meanOut, r, m);
                  if (invOut)
                    storeStatistic(*invOut, r, s);
                }
              });
  return llvm::Error::success();
}

/// layerNormKernel in float64 when its first operand is float64, else in
/// float32.
template <bool Rms> llvm::Error layerNormKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return layerNormKernelTyped<Rms, double>(call);
  return layerNormKernelTyped<Rms, float>(call);
}

/// Rows per block of the fixed-order column reductions.
constexpr int64_t kRowBlock = 64;

/// One row of the standard (\p Rms false) or simplified layer-norm
/// gradient, two columns at a time: per element the scalar loop's
/// arithmetic (xhat = float(x - mu) * inv and b = dY * scale * inv in
/// double), with the row sums of b and b * xhat accumulated over fixed
/// lanes. Adds dY * xhat and dY to the column sums when they are given.
template <bool Rms>
void gradRow(const float *gr, const float *xr, const float *ps, float *dr,
             int64_t cols, float mu, float inv, float *scaleSums,
             float *biasSums) {
  const double invD = inv;
  const F64x2 invV = {invD, invD};
  const F32x2 muV = {mu, mu};
  auto load2 = [](const float *p) {
    F32x2 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  auto xhatAt = [&](int64_t j) {
    return __builtin_convertvector(load2(xr + j) - muV, F64x2) * invV;
  };
  auto bAt = [&](int64_t j) {
    return loadF32x2AsF64(gr + j) * loadF32x2AsF64(ps + j) * invV;
  };
  F64x2 sumB0 = {0, 0}, sumB1 = sumB0, sumBX0 = sumB0, sumBX1 = sumB0;
  int64_t j = 0;
  for (; j + 4 <= cols; j += 4) {
    F64x2 b0 = bAt(j), b1 = bAt(j + 2);
    sumB0 += b0;
    sumB1 += b1;
    sumBX0 += b0 * xhatAt(j);
    sumBX1 += b1 * xhatAt(j + 2);
  }
  F64x2 sumBV = sumB0 + sumB1, sumBXV = sumBX0 + sumBX1;
  double sumB = sumBV[0] + sumBV[1], sumBX = sumBXV[0] + sumBXV[1];
  for (; j < cols; ++j) {
    double xhat = (xr[j] - mu) * invD;
    double b = static_cast<double>(gr[j]) * ps[j] * inv;
    sumB += b;
    sumBX += b * xhat;
  }
  double meanB = Rms ? 0.0 : sumB / cols, meanBX = sumBX / cols;
  const F64x2 meanBV = {meanB, meanB}, meanBXV = {meanBX, meanBX};
  for (j = 0; j + 2 <= cols; j += 2) {
    F64x2 xhat = xhatAt(j);
    storeF64x2AsF32(dr + j, bAt(j) - meanBV - xhat * meanBXV);
    if (scaleSums) {
      F32x2 scaleTerm =
          __builtin_convertvector(loadF32x2AsF64(gr + j) * xhat, F32x2);
      F32x2 scaleAcc = load2(scaleSums + j) + scaleTerm;
      F32x2 biasAcc = load2(biasSums + j) + load2(gr + j);
      std::memcpy(scaleSums + j, &scaleAcc, sizeof(scaleAcc));
      std::memcpy(biasSums + j, &biasAcc, sizeof(biasAcc));
    }
  }
  for (; j < cols; ++j) {
    double xhat = (xr[j] - mu) * invD;
    double b = static_cast<double>(gr[j]) * ps[j] * inv;
    dr[j] = static_cast<float>(b - meanB - xhat * meanBX);
    if (scaleSums) {
      scaleSums[j] += static_cast<float>(gr[j] * xhat);
      biasSums[j] += gr[j];
    }
  }
}

/// The three layer-norm gradient ops ONNX Runtime emits.
enum class NormGrad {
  /// LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev).
  Standard,
  /// SimplifiedLayerNormalizationGrad(dY, X, scale, inv_std_var) (no mean).
  Simplified,
  /// InvertibleLayerNormalizationGrad(dY, Y, scale, bias, inv_std_var):
  /// the normalized input is recovered from the output as (Y - bias) / scale.
  Invertible,
};

/// Layer-norm gradients -> (dX, dScale?, dBias?). With xhat the normalized
/// input and b = dY * scale * inv_std: dX = b - mean(b) - xhat * mean(b *
/// xhat) (no mean(b) term for the simplified norm), dScale = sum(dY * xhat),
/// dBias = sum(dY).
template <NormGrad Mode, typename T>
llvm::Error layerNormGradKernelTyped(KernelCall &call) {
  constexpr bool Rms = Mode == NormGrad::Simplified;
  const TensorView &dY = *call.in(0), &x = *call.in(1), &scale = *call.in(2);
  const TensorView *mean = Mode == NormGrad::Standard ? call.in(3) : nullptr;
  const TensorView *bias = Mode == NormGrad::Invertible ? call.in(3) : nullptr;
  const TensorView *invStd = call.in(Rms ? 3 : 4);
  if (!invStd || (Mode == NormGrad::Standard && !mean) ||
      (Mode == NormGrad::Invertible && !bias))
    return call.error("missing saved statistics");
  TensorView &dX = *call.out(0);
  TensorView *dScale = call.out(1), *dBias = Rms ? nullptr : call.out(2);
  if (llvm::Error err = checkAll(call, dtypeOf<T>(),
                                 {&dY, &x, &scale, bias, &dX, dScale, dBias}))
    return err;
  for (const TensorView *stat : {mean, invStd})
    if (llvm::Error err = checkStatistic(call, dtypeOf<T>(), stat))
      return err;
  if (llvm::Error err = checkSameShape(call, dY, x, "dY and X"))
    return err;
  if (llvm::Error err = checkSameShape(call, dX, x, "dX and X"))
    return err;
  auto shape = kernelNormRows(call, x.getShape());
  if (!shape)
    return shape.takeError();
  int64_t rows = shape->rows, cols = shape->cols;
  if (scale.getNumElements() != cols ||
      (bias && bias->getNumElements() != cols))
    return call.error(
        "scale and bias must have one element per normalized column");
  if (invStd->getNumElements() != rows ||
      (mean && mean->getNumElements() != rows))
    return call.error("saved statistics must have one element per row");
  for (TensorView *grad : {dScale, dBias})
    if (grad && grad->getNumElements() != cols)
      return call.error("parameter gradients must have one element per column");
  const T *g = dY.getDataAs<T>(), *px = x.getDataAs<T>();
  const T *ps = scale.getDataAs<T>();
  const T *pb = bias ? bias->getDataAs<T>() : nullptr;
  if (Mode == NormGrad::Invertible)
    for (int64_t j = 0; j < cols; ++j)
      if (ps[j] == 0)
        return call.error("a zero scale makes the norm not invertible");
  T *out = dX.getDataAs<T>();
  // The normalized input of element j of a row.
  auto normalized = [&](const T *row, int64_t j, T mu, T inv) -> double {
    if constexpr (Mode == NormGrad::Invertible)
      return (static_cast<double>(row[j]) - pb[j]) / ps[j];
    else
      return (row[j] - mu) * static_cast<double>(inv);
  };
  // Partial column sums per fixed block of rows: [blocks][2][cols].
  int64_t blocks = numChunks(rows, kRowBlock);
  bool wantColumns = dScale || dBias;
  std::optional<TensorBuffer> partials;
  if (wantColumns && blocks) {
    auto buffer =
        call.getContext().allocateScratch(dtypeOf<T>(), {blocks, 2, cols});
    if (!buffer)
      return buffer.takeError();
    partials.emplace(std::move(*buffer));
    partials->zero();
  }
  T *partial = partials ? partials->getView().getDataAs<T>() : nullptr;
  parallelFor(call.getNumThreads(), blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t block = lo; block < hi; ++block) {
      T *scaleSums = partial ? partial + block * 2 * cols : nullptr;
      T *biasSums = partial ? scaleSums + cols : nullptr;
      for (int64_t r = block * kRowBlock, e = std::min(rows, r + kRowBlock);
           r < e; ++r) {
        const T *gr = g + r * cols, *xr = px + r * cols;
        T *dr = out + r * cols;
        T mu = mean ? static_cast<T>(statisticAt(*mean, r)) : T(0);
        T inv = static_cast<T>(statisticAt(*invStd, r));
        // float64 takes the plain loops below (normalized() serves every
        // mode).
        if constexpr (Mode != NormGrad::Invertible &&
                      std::is_same_v<T, float>) {
          gradRow<Rms>(gr, xr, ps, dr, cols, mu, inv, scaleSums, biasSums);
          continue;
        }
        // Row reductions of the input gradient.
        double sumB = 0, sumBX = 0;
        for (int64_t j = 0; j < cols; ++j) {
          double xhat = normalized(xr, j, mu, inv);
          double b = static_cast<double>(gr[j]) * ps[j] * inv;
          sumB += b;
          sumBX += b * xhat;
        }
        double meanB = Rms ? 0.0 : sumB / cols, meanBX = sumBX / cols;
        for (int64_t j = 0; j < cols; ++j) {
          double xhat = normalized(xr, j, mu, inv);
          double b = static_cast<double>(gr[j]) * ps[j] * inv;
          dr[j] = static_cast<T>(b - meanB - xhat * meanBX);
        }
        if (scaleSums)
          for (int64_t j = 0; j < cols; ++j) {
            scaleSums[j] += static_cast<T>(gr[j] * normalized(xr, j, mu, inv));
            biasSums[j] += gr[j];
          }
      }
    }
  });
  if (partial) {
    T *pScale = dScale ? dScale->getDataAs<T>() : nullptr;
    T *pBias = dBias ? dBias->getDataAs<T>() : nullptr;
    parallelFor(call.getNumThreads(), cols, grainFor(2 * blocks),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t j = lo; j < hi; ++j) {
                    double sumScale = 0, sumBias = 0;
                    for (int64_t block = 0; block < blocks; ++block) {
                      sumScale += partial[block * 2 * cols + j];
                      sumBias += partial[block * 2 * cols + cols + j];
                    }
                    if (pScale)
                      pScale[j] = static_cast<T>(sumScale);
                    if (pBias)
                      pBias[j] = static_cast<T>(sumBias);
                  }
                });
  } else {
    for (TensorView *grad : {dScale, dBias})
      if (grad)
        std::fill(grad->getDataAs<T>(), grad->getDataAs<T>() + cols, T(0));
  }
  return llvm::Error::success();
}

/// layerNormGradKernel in float64 when its first operand is float64, else in
/// float32.
template <NormGrad Mode> llvm::Error layerNormGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return layerNormGradKernelTyped<Mode, double>(call);
  return layerNormGradKernelTyped<Mode, float>(call);
}

/// Rows and columns of a layer norm over \p value's static shape ({0, 0}
/// when the node's axis does not fit it: the kernel reports that).
norm::NormRows normRowsCols(const Node &node, const Value *value) {
  auto rows = norm::getNormRows(decodeNorm(node).axisAttr,
                                value->getType().getStaticShape());
  if (!rows) {
    llvm::consumeError(rows.takeError());
    return norm::NormRows{0, 0, 0};
  }
  return *rows;
}

/// Scratch of layerNormKernel: getColumnParameter's [cols] copy of each of
/// scale and bias that must be broadcast to the normalized shape.
uint64_t layerNormWorkspace(const Node &node) {
  int64_t cols = normRowsCols(node, node.getOperand(0)).cols;
  DType dtype = node.getOperand(0)->getType().getDType() == DType::F64
                    ? DType::F64
                    : DType::F32;
  uint64_t bytes = 0;
  for (unsigned index : {1u, 2u})
    if (index < node.getNumOperands())
      if (const Value *param = node.getOperand(index))
        if (int64_t(param->getType().getNumElements()) != cols)
          bytes = addScratch(bytes, scratchBytes(dtype, cols));
  return bytes;
}

/// Scratch of layerNormGradKernel: the partial column sums
/// [blocks][2][cols], one block per kRowBlock rows, when dScale or dBias is
/// wanted.
uint64_t layerNormGradWorkspace(const Node &node) {
  norm::NormRows shape = normRowsCols(node, node.getOperand(1));
  int64_t rows = shape.rows, cols = shape.cols;
  bool wantColumns = false;
  for (unsigned i = 1; i < node.getNumResults(); ++i)
    wantColumns |= node.getResult(i) != nullptr;
  int64_t blocks = numChunks(rows, kRowBlock);
  if (!wantColumns || !blocks)
    return 0;
  DType dtype = node.getOperand(1)->getType().getDType() == DType::F64
                    ? DType::F64
                    : DType::F32;
  return scratchBytes(dtype, mulCount(blocks * 2, cols));
}

} // namespace

void cpu::registerNormKernels(KernelTable &table) {
  table.add("", "BatchNormalization", batchNormKernel<false>);
  table.add(kMsDomain, "BatchNormInternal", batchNormKernel<true>);
  table.add(kMsDomain, "BatchNormalizationGrad", batchNormGradKernel);
  table.add("", "InstanceNormalization", instanceNormKernel);
  table.add("", "LayerNormalization", layerNormKernel<false>);
  // ONNX Runtime registers SimplifiedLayerNormalization in the ONNX domain;
  // accept both spellings.
  table.add("", "SimplifiedLayerNormalization", layerNormKernel<true>);
  table.add(kMsDomain, "SimplifiedLayerNormalization", layerNormKernel<true>);
  // ONNX's RMS norm is SimplifiedLayerNormalization without inv_std_var.
  table.add("", "RMSNormalization", layerNormKernel<true>);
  table.add(kMsDomain, "LayerNormalizationGrad",
            layerNormGradKernel<NormGrad::Standard>);
  table.add(kMsDomain, "SimplifiedLayerNormalizationGrad",
            layerNormGradKernel<NormGrad::Simplified>);
  table.add(kMsDomain, "InvertibleLayerNormalizationGrad",
            layerNormGradKernel<NormGrad::Invertible>);
  table.setWorkspace("", "LayerNormalization", layerNormWorkspace);
  table.setWorkspace("", "SimplifiedLayerNormalization", layerNormWorkspace);
  table.setWorkspace(kMsDomain, "SimplifiedLayerNormalization",
                     layerNormWorkspace);
  table.setWorkspace("", "RMSNormalization", layerNormWorkspace);
  for (const char *op :
       {"LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad",
        "InvertibleLayerNormalizationGrad"})
    table.setWorkspace(kMsDomain, op, layerNormGradWorkspace);
  table.setPrepare("", "BatchNormalization", prepareNorm);
  table.setPrepare(kMsDomain, "BatchNormInternal", prepareNorm);
  table.setPrepare("", "InstanceNormalization", prepareNorm);
  for (const char *op : {"LayerNormalization", "SimplifiedLayerNormalization",
                         "RMSNormalization"})
    table.setPrepare("", op, prepareRowNorm<0>);
  table.setPrepare(kMsDomain, "SimplifiedLayerNormalization",
                   prepareRowNorm<0>);
  for (const char *op :
       {"LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad",
        "InvertibleLayerNormalizationGrad"})
    table.setPrepare(kMsDomain, op, prepareRowNorm<1>);
}
