//===- ConvKernels.cpp - Convolution and its gradient ---------------------===//
//
// Conv (1-D and 2-D, with pads, strides, dilations, groups and auto_pad)
// lowered per image and group to im2col + GEMM (SGEMM; DGEMM in float64):
// the [Cg*kH*kW, outH*outW] column matrix of the image times the group's
// [Mg, Cg*kH*kW] filters. A 1x1, stride-1, unpadded convolution multiplies
// the image directly.
// com.microsoft ConvGrad computes dB by summation, dW = sum over images of
// dY x cols^T, and dX = col2im(W^T x dY). Images are processed in order so
// the accumulated dW does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Blas.h"
#include "backend/cpu/ConvGeometry.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/Simd.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// Shapes of one convolution.
struct ConvShape {
  WindowGeometry window;
  int64_t groups = 1;
  int64_t outChannels = 0;
  /// Input and output channels per group.
  int64_t groupIn = 0, groupOut = 0;
  /// Rows of the column matrix: groupIn * kernelH * kernelW.
  int64_t colRows = 0;
  bool direct = false;
};

/// A Conv or ConvGrad node decoded once: its window and `group`.
struct ConvState {
  WindowState window;
  int64_t groups = 1;
};

/// Decodes a convolution node: what its kernel reads at launch and its
/// workspace function at plan time. An unknown auto_pad or a group below 1
/// fails here.
llvm::Expected<ConvState> decodeConv(const Node &node) {
  auto window = decodeWindow(node);
  if (!window)
    return window.takeError();
  // A convolution's output extent is the floor one (no ceil_mode).
  window->ceilMode = false;
  ConvState state{std::move(*window), node.getIntAttr("group", 1)};
  if (state.groups < 1)
    return prepareError(node, "group " + llvm::Twine(state.groups) +
                                  " does not divide the channel counts");
  return state;
}

llvm::Expected<std::unique_ptr<KernelState>> prepareConv(const Node &node) {
  auto state = decodeConv(node);
  if (!state)
    return state.takeError();
  return makeKernelState(std::move(*state));
}

llvm::Expected<ConvShape> resolveConv(const KernelCall &call,
                                      const TensorView &x, const TensorView &w,
                                      llvm::ArrayRef<int64_t> yShape) {
  if (x.getRank() < 3)
    return call.error("X must have rank >= 3");
  if (w.getRank() != x.getRank())
    return call.error("W must have X's rank");
  llvm::ArrayRef<int64_t> kernel = w.getShape().drop_front(2);
  const auto &state = call.getState<ConvState>();
  const std::vector<int64_t> &kernelAttr = state.window.kernelShape;
  if (!kernelAttr.empty() && llvm::ArrayRef<int64_t>(kernelAttr) != kernel)
    return call.error("kernel_shape disagrees with W's shape");
  auto window = resolveWindow(call, state.window, x.getShape(), kernel, yShape);
  if (!window)
    return window.takeError();
  ConvShape s;
  s.window = *window;
  s.groups = state.groups;
  s.outChannels = w.getDim(0);
  if (s.groups < 1 || x.getDim(1) % s.groups || s.outChannels % s.groups)
    return call.error("group " + llvm::Twine(s.groups) +
                      " does not divide the channel counts");
  s.groupIn = x.getDim(1) / s.groups;
  s.groupOut = s.outChannels / s.groups;
  if (w.getDim(1) != s.groupIn)
    return call.error("W has " + llvm::Twine(w.getDim(1)) +
                      " input channels per group, X has " +
                      llvm::Twine(s.groupIn));
  if (yShape[1] != s.outChannels)
    return call.error("output channels differ from W's filter count");
  const WindowGeometry &g = s.window;
  s.colRows = s.groupIn * g.kernelSize();
  s.direct = g.kernelSize() == 1 && g.strideH == 1 && g.strideW == 1 &&
             g.padTop == 0 && g.padLeft == 0 && g.padBottom == 0 &&
             g.padRight == 0;
  if (!fitsBlasInt(s.groupOut, g.outSize(), s.colRows))
    return call.error("convolution extents exceed 32-bit BLAS limits");
  return s;
}

/// Range of output columns ow whose input column ow*stride + offset lies in
/// [0, inW).
inline void validRange(int64_t offset, int64_t stride, int64_t inExtent,
                       int64_t outExtent, int64_t &begin, int64_t &end) {
  // ow >= ceil(-offset / stride), ow*stride + offset < inExtent.
  begin = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  end = inExtent - offset <= 0 ? 0 : (inExtent - offset + stride - 1) / stride;
  begin = std::min(begin, outExtent);
  end = std::clamp(end, begin, outExtent);
}

/// dst[i] += src[i] over [0, n): Simd.h's float32 kernel, a loop for
/// float64.
void addTo(const float *src, float *dst, int64_t n) { addToF32(src, dst, n); }
void addTo(const double *src, double *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] += src[i];
}

/// cols[(c*kH + ki)*kW + kj][oh*outW + ow] = image[c][ih][iw] (0 outside).
template <typename T>
void im2col(const T *image, const WindowGeometry &g, int64_t channels, T *cols,
            unsigned threads) {
  int64_t rows = channels * g.kernelSize();
  int64_t outSize = g.outSize();
  parallelFor(threads, rows, grainFor(outSize), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      int64_t c = row / g.kernelSize();
      int64_t ki = (row / g.kernelW) % g.kernelH, kj = row % g.kernelW;
      const T *plane = image + c * g.inSize();
      T *out = cols + row * outSize;
      int64_t colOffset = kj * g.dilationW - g.padLeft;
      int64_t owBegin, owEnd;
      validRange(colOffset, g.strideW, g.inW, g.outW, owBegin, owEnd);
      for (int64_t oh = 0; oh < g.outH; ++oh) {
        int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
        T *dst = out + oh * g.outW;
        if (ih < 0 || ih >= g.inH) {
          std::fill(dst, dst + g.outW, T(0));
          continue;
        }
        // Index arithmetic stays non-negative: colOffset may be negative.
        const T *src = plane + ih * g.inW + (owBegin * g.strideW + colOffset);
        std::fill(dst, dst + owBegin, T(0));
        if (g.strideW == 1) {
          std::memcpy(dst + owBegin, src, (owEnd - owBegin) * sizeof(T));
        } else {
          for (int64_t ow = owBegin; ow < owEnd; ++ow)
            dst[ow] = src[(ow - owBegin) * g.strideW];
        }
        std::fill(dst + owEnd, dst + g.outW, T(0));
      }
    }
  });
}

/// The adjoint of im2col: image[c][ih][iw] += cols[...]. Parallel over
/// channels (each channel's rows are added in a fixed order).
template <typename T>
void col2im(const T *cols, const WindowGeometry &g, int64_t channels, T *image,
            unsigned threads) {
  int64_t outSize = g.outSize();
  parallelFor(
      threads, channels, grainFor(g.kernelSize() * outSize),
      [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          T *plane = image + c * g.inSize();
          for (int64_t k = 0; k < g.kernelSize(); ++k) {
            int64_t ki = k / g.kernelW, kj = k % g.kernelW;
            const T *src = cols + (c * g.kernelSize() + k) * outSize;
            int64_t colOffset = kj * g.dilationW - g.padLeft;
            int64_t owBegin, owEnd;
            validRange(colOffset, g.strideW, g.inW, g.outW, owBegin, owEnd);
            for (int64_t oh = 0; oh < g.outH; ++oh) {
              int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
              if (ih < 0 || ih >= g.inH)
                continue;
              T *dst = plane + ih * g.inW + (owBegin * g.strideW + colOffset);
              const T *row = src + oh * g.outW;
              if (g.strideW == 1) {
                addTo(row + owBegin, dst, owEnd - owBegin);
                continue;
              }
              for (int64_t ow = owBegin; ow < owEnd; ++ow)
                dst[(ow - owBegin) * g.strideW] += row[ow];
            }
          }
        }
      });
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

/// Conv(X, W, B?) -> Y.
template <typename T> llvm::Error convKernelTyped(KernelCall &call) {
  const TensorView &x = *call.in(0), &w = *call.in(1);
  const TensorView *b = call.in(2);
  const TensorView &y = *call.out(0);
  if (llvm::Error err = checkAll(call, dtypeOf<T>(), {&x, &w, b, &y}))
    return err;
  auto shape = resolveConv(call, x, w, y.getShape());
  if (!shape)
    return shape.takeError();
  if (b && b->getNumElements() != shape->outChannels)
    return call.error("B must have one element per output channel");
  unsigned threads = call.getNumThreads();
  const WindowGeometry &g = shape->window;
  std::optional<TensorBuffer> cols;
  if (!shape->direct) {
    auto buffer = call.getContext().allocateScratch(
        dtypeOf<T>(), {shape->colRows, g.outSize()});
    if (!buffer)
      return buffer.takeError();
    cols.emplace(std::move(*buffer));
  }
  const T *px = x.getDataAs<T>(), *pw = w.getDataAs<T>();
  T *py = y.getDataAs<T>();
  int64_t inChannels = x.getDim(1);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t group = 0; group < shape->groups; ++group) {
      const T *image =
          px + (n * inChannels + group * shape->groupIn) * g.inSize();
      const T *matrix = image;
      if (cols) {
        im2col(image, g, shape->groupIn, cols->getView().getDataAs<T>(),
               call.getNumThreads());
        matrix = cols->getView().getDataAs<T>();
      }
      T *out =
          py + (n * shape->outChannels + group * shape->groupOut) * g.outSize();
      gemm<T>(threads, false, false, shape->groupOut, g.outSize(),
              shape->colRows, T(1),
              pw + group * shape->groupOut * shape->colRows, shape->colRows,
              matrix, g.outSize(), T(0), out, g.outSize());
    }
    if (b) {
      const T *pb = b->getDataAs<T>();
      T *image = py + n * shape->outChannels * g.outSize();
      for (int64_t m = 0; m < shape->outChannels; ++m)
        for (int64_t i = 0; i < g.outSize(); ++i)
          image[m * g.outSize() + i] += pb[m];
    }
  }
  return llvm::Error::success();
}

/// convKernel in float64 when its first operand is float64, else in float32.
llvm::Error convKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return convKernelTyped<double>(call);
  return convKernelTyped<float>(call);
}

/// ConvGrad(dY, X, W) -> (dX?, dW?, dB?).
template <typename T> llvm::Error convGradKernelTyped(KernelCall &call) {
  const TensorView &dY = *call.in(0), &x = *call.in(1), &w = *call.in(2);
  TensorView *dX = call.out(0), *dW = call.out(1), *dB = call.out(2);
  if (llvm::Error err = checkAll(call, dtypeOf<T>(), {&dY, &x, &w, dX, dW, dB}))
    return err;
  auto shape = resolveConv(call, x, w, dY.getShape());
  if (!shape)
    return shape.takeError();
  if (dX)
    if (llvm::Error err = checkOutputShape(call, 0, x.getShape()))
      return err;
  if (dW)
    if (llvm::Error err = checkOutputShape(call, 1, w.getShape()))
      return err;
  if (dB && dB->getNumElements() != shape->outChannels)
    return call.error("dB must have one element per output channel");
  const WindowGeometry &g = shape->window;
  int64_t inChannels = x.getDim(1), outSize = g.outSize();
  const T *pdy = dY.getDataAs<T>(), *px = x.getDataAs<T>();
  const T *pw = w.getDataAs<T>();
  unsigned threads = call.getNumThreads();
  if (dB) {
    T *pdb = dB->getDataAs<T>();
    parallelFor(threads, shape->outChannels, grainFor(g.batch * outSize),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t m = lo; m < hi; ++m) {
                    double sum = 0;
                    for (int64_t n = 0; n < g.batch; ++n) {
                      const T *plane =
                          pdy + (n * shape->outChannels + m) * outSize;
                      for (int64_t i = 0; i < outSize; ++i)
                        sum += plane[i];
                    }
                    pdb[m] = static_cast<T>(sum);
                  }
                });
  }
  if (!dX && !dW)
    return llvm::Error::success();
  std::optional<TensorBuffer> cols;
  if (!shape->direct) {
    auto buffer = call.getContext().allocateScratch(dtypeOf<T>(),
                                                    {shape->colRows, outSize});
    if (!buffer)
      return buffer.takeError();
    cols.emplace(std::move(*buffer));
  }
  T *colData = cols ? cols->getView().getDataAs<T>() : nullptr;
  if (dX)
    zeroFill(*dX, threads);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t group = 0; group < shape->groups; ++group) {
      const T *grad =
          pdy + (n * shape->outChannels + group * shape->groupOut) * outSize;
      const T *filters = pw + group * shape->groupOut * shape->colRows;
      int64_t imageOffset =
          (n * inChannels + group * shape->groupIn) * g.inSize();
      if (dW) {
        const T *matrix = px + imageOffset;
        if (!shape->direct) {
          im2col(px + imageOffset, g, shape->groupIn, colData, threads);
          matrix = colData;
        }
        // dW_g (+)= dY_g [Mg, out] x cols^T [out, K].
        gemm<T>(threads, false, true, shape->groupOut, shape->colRows, outSize,
                T(1), grad, outSize, matrix, outSize, n == 0 ? T(0) : T(1),
                dW->getDataAs<T>() + group * shape->groupOut * shape->colRows,
                shape->colRows);
      }
      if (dX) {
        T *image = dX->getDataAs<T>() + imageOffset;
        if (shape->direct) {
          // dX_g += W_g^T [K, Mg] x dY_g [Mg, out] straight into the image.
          gemm<T>(threads, true, false, shape->colRows, outSize,
                  shape->groupOut, T(1), filters, shape->colRows, grad, outSize,
                  T(1), image, outSize);
        } else {
          gemm<T>(threads, true, false, shape->colRows, outSize,
                  shape->groupOut, T(1), filters, shape->colRows, grad, outSize,
                  T(0), colData, outSize);
          col2im(colData, g, shape->groupIn, image, threads);
        }
      }
    }
  }
  if (dW && g.batch == 0)
    std::memset(dW->getData(), 0, dW->getSizeInBytes());
  return llvm::Error::success();
}

/// convGradKernel in float64 when its first operand is float64, else in
/// float32.
llvm::Error convGradKernel(KernelCall &call) {
  if (call.in(0) && call.in(0)->getDType() == DType::F64)
    return convGradKernelTyped<double>(call);
  return convGradKernelTyped<float>(call);
}

/// Static shape of \p value (empty when absent).
llvm::SmallVector<int64_t, 6> staticShapeOf(const Value *value) {
  llvm::SmallVector<int64_t, 6> shape;
  if (value) {
    auto dims = value->getType().getStaticShape();
    shape.assign(dims.begin(), dims.end());
  }
  return shape;
}

/// Conv(X, W, B?) -> Y and ConvGrad(dY, X, W) -> (dX?, dW?, dB?): one
/// im2col matrix of (C/group * kernel) rows by output pixels, except for a
/// 1x1, stride-1, unpadded convolution, which multiplies the image directly.
/// ConvGrad needs it only when it computes dX or dW. The node's window is
/// the one prepare decodes (decodeConv); 0 when it does not decode.
template <bool Grad> uint64_t convWorkspace(const Node &node) {
  const Value *w = node.getNumOperands() > (Grad ? 2u : 1u)
                       ? node.getOperand(Grad ? 2 : 1)
                       : nullptr;
  const Value *spatialSource = Grad ? node.getOperand(0) : node.getResult(0);
  llvm::SmallVector<int64_t, 6> wShape = staticShapeOf(w),
                                outShape = staticShapeOf(spatialSource);
  if (wShape.size() < 3 || outShape.size() != wShape.size())
    return 0;
  if (Grad && !node.getResult(0) &&
      !(node.getNumResults() > 1 && node.getResult(1)))
    return 0;
  auto state = decodeConv(node);
  if (!state) {
    llvm::consumeError(state.takeError());
    return 0;
  }
  const WindowAttributes &attrs = state->window.attrs;
  int64_t kernelSize = product(llvm::ArrayRef<int64_t>(wShape).drop_front(2));
  bool unitStrides =
      llvm::all_of(attrs.strides, [](int64_t s) { return s == 1; });
  bool unpadded = llvm::all_of(attrs.pads, [](int64_t p) { return p == 0; });
  bool direct = kernelSize == 1 && unitStrides && unpadded &&
                (attrs.autoPad == WindowAttributes::AutoPad::NotSet ||
                 attrs.autoPad == WindowAttributes::AutoPad::Valid);
  if (direct)
    return 0;
  // Rows and columns each come from one verified tensor; their product
  // may exceed any tensor, so it saturates (and the planner refuses it).
  int64_t colRows = mulCount(wShape[1], kernelSize);
  // A float64 convolution's columns are float64 (every other type is
  // computed in float32).
  DType dtype = w->getType().getDType() == DType::F64 ? DType::F64 : DType::F32;
  return scratchBytes(
      dtype,
      mulCount(colRows,
               product(llvm::ArrayRef<int64_t>(outShape).drop_front(2))));
}

} // namespace

void cpu::registerConvKernels(KernelTable &table) {
  table.add("", "Conv", convKernel);
  table.add(kMsDomain, "ConvGrad",
            KernelInfo{convGradKernel, KernelMode::StageHalfAsFloat, nullptr,
                       KernelResults::MayBeAbsent});
  // Older ONNX Runtime releases registered ConvGrad in the ONNX domain.
  table.add("", "ConvGrad",
            KernelInfo{convGradKernel, KernelMode::StageHalfAsFloat, nullptr,
                       KernelResults::MayBeAbsent});
  table.setWorkspace("", "Conv", convWorkspace<false>);
  table.setWorkspace(kMsDomain, "ConvGrad", convWorkspace<true>);
  table.setWorkspace("", "ConvGrad", convWorkspace<true>);
  for (auto [domain, op] :
       {std::pair<llvm::StringRef, llvm::StringRef>{"", "Conv"},
        {kMsDomain, "ConvGrad"},
        {"", "ConvGrad"}})
    table.setPrepare(domain, op, prepareConv);
}
