//===- PoolKernels.cpp - Max/average pooling and their gradients ----------===//
//
// MaxPool (with the optional Indices output: flattened positions in the
// input tensor, row-major or column-major per storage_order), AveragePool
// (count_include_pad), GlobalAveragePool and GlobalMaxPool, and ONNX
// Runtime's MaxPoolGrad (scatter-add of dY at the saved indices) and
// AveragePoolGrad. Work is split over (image, channel) planes. Each kernel
// runs in float32, or in float64 for float64 tensors.
//
//===----------------------------------------------------------------------===//

#include "backend/WindowMath.h"
#include "backend/cpu/ConvGeometry.h"
#include "backend/cpu/KernelPrepare.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// A MaxPool, AveragePool or AveragePoolGrad node decoded once: its window,
/// MaxPool's `storage_order` and the average pools' `count_include_pad`.
struct PoolState {
  WindowState window;
  bool columnMajor = false;
  bool includePad = false;
};

/// Decodes a windowed pool; a missing kernel_shape or an unknown auto_pad
/// fails here.
llvm::Expected<std::unique_ptr<KernelState>> preparePool(const Node &node) {
  auto window = decodeWindow(node);
  if (!window)
    return window.takeError();
  if (window->kernelShape.empty())
    return prepareError(node, "missing attribute 'kernel_shape'");
  PoolState state;
  state.window = std::move(*window);
  state.columnMajor = node.getIntAttr("storage_order", 0) != 0;
  state.includePad = node.getIntAttr("count_include_pad", 0) != 0;
  return makeKernelState(std::move(state));
}

llvm::Expected<WindowGeometry> resolvePool(const KernelCall &call,
                                           llvm::ArrayRef<int64_t> inShape,
                                           llvm::ArrayRef<int64_t> outShape) {
  if (outShape.size() == inShape.size() && outShape.size() >= 2 &&
      outShape[1] != inShape[1])
    return call.error("output channels differ from the input's");
  const WindowState &window = call.getState<PoolState>().window;
  return resolveWindow(call, window, inShape, window.kernelShape, outShape);
}

/// MaxPool(X) -> (Y, Indices?).
template <typename T> llvm::Error maxPoolKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &y = *call.out(0);
  TensorView *indices = call.out(1);
  if (llvm::Error err = checkDType(call, x, dtypeOf<T>(), "X"))
    return err;
  if (indices) {
    if (llvm::Error err = checkDType(call, *indices, DType::I64, "Indices"))
      return err;
    if (llvm::Error err = checkSameShape(call, y, *indices, "Y and Indices"))
      return err;
  }
  auto window = resolvePool(call, x.getShape(), y.getShape());
  if (!window)
    return window.takeError();
  const WindowGeometry g = *window;
  bool columnMajor = call.getState<PoolState>().columnMajor;
  const T *px = x.getDataAs<T>();
  T *py = y.getDataAs<T>();
  int64_t *pi = indices ? indices->getDataAs<int64_t>() : nullptr;
  int64_t planes = g.batch * g.channels;
  parallelFor(
      call.getNumThreads(), planes, grainFor(g.outSize() * g.kernelSize()),
      [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          const T *plane = px + p * g.inSize();
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              T best;
              int64_t within;
              maxPoolWindow(
                  g, oh, ow, columnMajor,
                  [plane](int64_t i) { return plane[i]; }, best, within);
              int64_t o = p * g.outSize() + oh * g.outW + ow;
              py[o] = best;
              if (pi)
                pi[o] = p * g.inSize() + within;
            }
        }
      });
  return llvm::Error::success();
}

/// maxPoolKernel in float64 when its first operand is float64, else in float32.
llvm::Error maxPoolKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return maxPoolKernelTyped<double>(call);
  return maxPoolKernelTyped<float>(call);
}

/// AveragePool(X) -> Y.
template <typename T> llvm::Error averagePoolKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &y = *call.out(0);
  if (llvm::Error err = checkDType(call, x, dtypeOf<T>(), "X"))
    return err;
  auto window = resolvePool(call, x.getShape(), y.getShape());
  if (!window)
    return window.takeError();
  const WindowGeometry g = *window;
  bool includePad = call.getState<PoolState>().includePad;
  const T *px = x.getDataAs<T>();
  T *py = y.getDataAs<T>();
  parallelFor(
      call.getNumThreads(), g.batch * g.channels,
      grainFor(g.outSize() * g.kernelSize()), [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          const T *plane = px + p * g.inSize();
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              py[p * g.outSize() + oh * g.outW + ow] =
                  averagePoolWindow<T>(g, oh, ow, includePad,
                                       [plane](int64_t i) { return plane[i]; });
            }
        }
      });
  return llvm::Error::success();
}

/// averagePoolKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error averagePoolKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return averagePoolKernelTyped<double>(call);
  return averagePoolKernelTyped<float>(call);
}

/// GlobalAveragePool / GlobalMaxPool: one value per (image, channel).
template <bool Max, typename T>
llvm::Error globalPoolKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &y = *call.out(0);
  if (llvm::Error err = checkDType(call, x, dtypeOf<T>(), "X"))
    return err;
  if (x.getRank() < 3)
    return call.error("X must have rank >= 3");
  llvm::SmallVector<int64_t, 6> outShape(x.getShape().take_front(2));
  outShape.append(x.getRank() - 2, 1);
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  int64_t planes = x.getDim(0) * x.getDim(1);
  int64_t size = product(x.getShape().drop_front(2));
  const T *px = x.getDataAs<T>();
  T *py = y.getDataAs<T>();
  parallelFor(call.getNumThreads(), planes, grainFor(size),
              [&](int64_t lo, int64_t hi) {
                for (int64_t p = lo; p < hi; ++p) {
                  const T *plane = px + p * size;
                  if constexpr (Max) {
                    T best = -std::numeric_limits<T>::infinity();
                    for (int64_t i = 0; i < size; ++i)
                      if (!std::isnan(best) &&
                          (std::isnan(plane[i]) || plane[i] > best))
                        best = plane[i];
                    py[p] = best;
                  } else {
                    double sum = 0;
                    for (int64_t i = 0; i < size; ++i)
                      sum += plane[i];
                    py[p] = size ? static_cast<T>(sum / size) : T(0);
                  }
                }
              });
  return llvm::Error::success();
}

/// globalPoolKernel in float64 when its first operand is float64, else in
/// float32.
template <bool Max> llvm::Error globalPoolKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return globalPoolKernelTyped<Max, double>(call);
  return globalPoolKernelTyped<Max, float>(call);
}

/// MaxPoolGrad(dY, Indices) -> dX: dX[Indices[i]] += dY[i].
template <typename T> llvm::Error maxPoolGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0), &indices = *call.in(1);
  TensorView &dX = *call.out(0);
  if (llvm::Error err = checkDType(call, dY, dtypeOf<T>(), "dY"))
    return err;
  if (llvm::Error err = checkDType(call, indices, DType::I64, "Indices"))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, indices, "dY and Indices"))
    return err;
  const T *g = dY.getDataAs<T>();
  const int64_t *pi = indices.getDataAs<int64_t>();
  T *out = dX.getDataAs<T>();
  int64_t size = dX.getNumElements();
  zeroFill(dX, call.getNumThreads());
  for (int64_t i = 0, e = dY.getNumElements(); i < e; ++i) {
    if (pi[i] < 0 || pi[i] >= size)
      return call.error("index " + llvm::Twine(pi[i]) + " is outside dX");
    out[pi[i]] += g[i];
  }
  return llvm::Error::success();
}

/// maxPoolGradKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error maxPoolGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return maxPoolGradKernelTyped<double>(call);
  return maxPoolGradKernelTyped<float>(call);
}

/// AveragePoolGrad(dY) -> dX: each dY spreads evenly over its window.
template <typename T> llvm::Error averagePoolGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0);
  TensorView &dX = *call.out(0);
  if (llvm::Error err = checkDType(call, dY, dtypeOf<T>(), "dY"))
    return err;
  auto window = resolvePool(call, dX.getShape(), dY.getShape());
  if (!window)
    return window.takeError();
  const WindowGeometry g = *window;
  bool includePad = call.getState<PoolState>().includePad;
  const T *pg = dY.getDataAs<T>();
  T *px = dX.getDataAs<T>();
  zeroFill(dX, call.getNumThreads());
  parallelFor(
      call.getNumThreads(), g.batch * g.channels,
      grainFor(g.outSize() * g.kernelSize()), [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          T *plane = px + p * g.inSize();
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              int64_t count = averagePoolCount(g, oh, ow, includePad);
              if (!count)
                continue;
              T share = pg[p * g.outSize() + oh * g.outW + ow] / count;
              forEachWindowInput(g, oh, ow, [&](int64_t ih, int64_t iw) {
                plane[ih * g.inW + iw] += share;
              });
            }
        }
      });
  return llvm::Error::success();
}

/// averagePoolGradKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error averagePoolGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return averagePoolGradKernelTyped<double>(call);
  return averagePoolGradKernelTyped<float>(call);
}

} // namespace

void cpu::registerPoolKernels(KernelTable &table) {
  table.add("", "MaxPool", maxPoolKernel);
  table.add("", "AveragePool", averagePoolKernel);
  table.add("", "GlobalAveragePool", globalPoolKernel<false>);
  table.add("", "GlobalMaxPool", globalPoolKernel<true>);
  table.add("", "MaxPoolGrad", maxPoolGradKernel);
  table.add("", "AveragePoolGrad", averagePoolGradKernel);
  for (const char *op : {"MaxPool", "AveragePool", "AveragePoolGrad"})
    table.setPrepare("", op, preparePool);
}
