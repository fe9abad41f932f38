//===- ConvKernels.cpp - Convolution and its gradient ---------------------===//
//
// Conv (1-D and 2-D, with pads, strides, dilations, groups and auto_pad)
// lowered per image and group to im2col + SGEMM: the [Cg*kH*kW, outH*outW]
// column matrix of the image times the group's [Mg, Cg*kH*kW] filters. A
// 1x1, stride-1, unpadded convolution multiplies the image directly.
// com.microsoft ConvGrad computes dB by summation, dW = sum over images of
// dY x cols^T, and dX = col2im(W^T x dY). Images are processed in order so
// the accumulated dW does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/Blas.h"
#include "backend/cpu/ConvGeometry.h"
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

llvm::Expected<ConvShape> resolveConv(const KernelCall &call,
                                      const TensorView &x, const TensorView &w,
                                      llvm::ArrayRef<int64_t> yShape) {
  if (x.getRank() < 3)
    return call.error("X must have rank >= 3");
  if (w.getRank() != x.getRank())
    return call.error("W must have X's rank");
  llvm::ArrayRef<int64_t> kernel = w.getShape().drop_front(2);
  std::vector<int64_t> kernelAttr = call.getInts("kernel_shape");
  if (!kernelAttr.empty() && llvm::ArrayRef<int64_t>(kernelAttr) != kernel)
    return call.error("kernel_shape disagrees with W's shape");
  auto window = resolveWindow(call, x.getShape(), kernel, yShape, false);
  if (!window)
    return window.takeError();
  ConvShape s;
  s.window = *window;
  s.groups = call.getInt("group", 1);
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

/// cols[(c*kH + ki)*kW + kj][oh*outW + ow] = image[c][ih][iw] (0 outside).
void im2col(const float *image, const WindowGeometry &g, int64_t channels,
            float *cols, unsigned threads) {
  int64_t rows = channels * g.kernelSize();
  int64_t outSize = g.outSize();
  parallelFor(threads, rows, grainFor(outSize), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      int64_t c = row / g.kernelSize();
      int64_t ki = (row / g.kernelW) % g.kernelH, kj = row % g.kernelW;
      const float *plane = image + c * g.inSize();
      float *out = cols + row * outSize;
      int64_t colOffset = kj * g.dilationW - g.padLeft;
      int64_t owBegin, owEnd;
      validRange(colOffset, g.strideW, g.inW, g.outW, owBegin, owEnd);
      for (int64_t oh = 0; oh < g.outH; ++oh) {
        int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
        float *dst = out + oh * g.outW;
        if (ih < 0 || ih >= g.inH) {
          std::fill(dst, dst + g.outW, 0.0f);
          continue;
        }
        // Index arithmetic stays non-negative: colOffset may be negative.
        const float *src =
            plane + ih * g.inW + (owBegin * g.strideW + colOffset);
        std::fill(dst, dst + owBegin, 0.0f);
        if (g.strideW == 1) {
          std::memcpy(dst + owBegin, src, (owEnd - owBegin) * sizeof(float));
        } else {
          for (int64_t ow = owBegin; ow < owEnd; ++ow)
            dst[ow] = src[(ow - owBegin) * g.strideW];
        }
        std::fill(dst + owEnd, dst + g.outW, 0.0f);
      }
    }
  });
}

/// The adjoint of im2col: image[c][ih][iw] += cols[...]. Parallel over
/// channels (each channel's rows are added in a fixed order).
void col2im(const float *cols, const WindowGeometry &g, int64_t channels,
            float *image, unsigned threads) {
  int64_t outSize = g.outSize();
  parallelFor(
      threads, channels, grainFor(g.kernelSize() * outSize),
      [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          float *plane = image + c * g.inSize();
          for (int64_t k = 0; k < g.kernelSize(); ++k) {
            int64_t ki = k / g.kernelW, kj = k % g.kernelW;
            const float *src = cols + (c * g.kernelSize() + k) * outSize;
            int64_t colOffset = kj * g.dilationW - g.padLeft;
            int64_t owBegin, owEnd;
            validRange(colOffset, g.strideW, g.inW, g.outW, owBegin, owEnd);
            for (int64_t oh = 0; oh < g.outH; ++oh) {
              int64_t ih = oh * g.strideH - g.padTop + ki * g.dilationH;
              if (ih < 0 || ih >= g.inH)
                continue;
              float *dst =
                  plane + ih * g.inW + (owBegin * g.strideW + colOffset);
              const float *row = src + oh * g.outW;
              if (g.strideW == 1) {
                addToF32(row + owBegin, dst, owEnd - owBegin);
                continue;
              }
              for (int64_t ow = owBegin; ow < owEnd; ++ow)
                dst[(ow - owBegin) * g.strideW] += row[ow];
            }
          }
        }
      });
}

llvm::Error checkF32(const KernelCall &call,
                     std::initializer_list<const TensorView *> views) {
  for (const TensorView *view : views)
    if (view)
      if (llvm::Error err = checkDType(call, *view, DType::F32, "operand"))
        return err;
  return llvm::Error::success();
}

/// Conv(X, W, B?) -> Y.
llvm::Error convKernel(KernelCall &call) {
  const TensorView &x = *call.in(0), &w = *call.in(1);
  const TensorView *b = call.in(2);
  const TensorView &y = *call.out(0);
  if (llvm::Error err = checkF32(call, {&x, &w, b, &y}))
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
        DType::F32, {shape->colRows, g.outSize()});
    if (!buffer)
      return buffer.takeError();
    cols.emplace(std::move(*buffer));
  }
  const float *px = x.getDataAs<float>(), *pw = w.getDataAs<float>();
  float *py = y.getDataAs<float>();
  int64_t inChannels = x.getDim(1);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t group = 0; group < shape->groups; ++group) {
      const float *image =
          px + (n * inChannels + group * shape->groupIn) * g.inSize();
      const float *matrix = image;
      if (cols) {
        im2col(image, g, shape->groupIn, cols->getView().getDataAs<float>(),
               call.getNumThreads());
        matrix = cols->getView().getDataAs<float>();
      }
      float *out =
          py + (n * shape->outChannels + group * shape->groupOut) * g.outSize();
      gemm<float>(threads, false, false, shape->groupOut, g.outSize(),
                  shape->colRows, 1.0f,
                  pw + group * shape->groupOut * shape->colRows, shape->colRows,
                  matrix, g.outSize(), 0.0f, out, g.outSize());
    }
    if (b) {
      const float *pb = b->getDataAs<float>();
      float *image = py + n * shape->outChannels * g.outSize();
      for (int64_t m = 0; m < shape->outChannels; ++m)
        for (int64_t i = 0; i < g.outSize(); ++i)
          image[m * g.outSize() + i] += pb[m];
    }
  }
  return llvm::Error::success();
}

/// ConvGrad(dY, X, W) -> (dX?, dW?, dB?).
llvm::Error convGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &x = *call.in(1), &w = *call.in(2);
  TensorView *dX = call.out(0), *dW = call.out(1), *dB = call.out(2);
  if (llvm::Error err = checkF32(call, {&dY, &x, &w, dX, dW, dB}))
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
  const float *pdy = dY.getDataAs<float>(), *px = x.getDataAs<float>();
  const float *pw = w.getDataAs<float>();
  unsigned threads = call.getNumThreads();
  if (dB) {
    float *pdb = dB->getDataAs<float>();
    parallelFor(threads, shape->outChannels, grainFor(g.batch * outSize),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t m = lo; m < hi; ++m) {
                    double sum = 0;
                    for (int64_t n = 0; n < g.batch; ++n) {
                      const float *plane =
                          pdy + (n * shape->outChannels + m) * outSize;
                      for (int64_t i = 0; i < outSize; ++i)
                        sum += plane[i];
                    }
                    pdb[m] = static_cast<float>(sum);
                  }
                });
  }
  if (!dX && !dW)
    return llvm::Error::success();
  std::optional<TensorBuffer> cols;
  if (!shape->direct) {
    auto buffer = call.getContext().allocateScratch(DType::F32,
                                                    {shape->colRows, outSize});
    if (!buffer)
      return buffer.takeError();
    cols.emplace(std::move(*buffer));
  }
  float *colData = cols ? cols->getView().getDataAs<float>() : nullptr;
  if (dX)
    zeroFill(*dX, threads);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t group = 0; group < shape->groups; ++group) {
      const float *grad =
          pdy + (n * shape->outChannels + group * shape->groupOut) * outSize;
      const float *filters = pw + group * shape->groupOut * shape->colRows;
      int64_t imageOffset =
          (n * inChannels + group * shape->groupIn) * g.inSize();
      if (dW) {
        const float *matrix = px + imageOffset;
        if (!shape->direct) {
          im2col(px + imageOffset, g, shape->groupIn, colData, threads);
          matrix = colData;
        }
        // dW_g (+)= dY_g [Mg, out] x cols^T [out, K].
        gemm<float>(
            threads, false, true, shape->groupOut, shape->colRows, outSize,
            1.0f, grad, outSize, matrix, outSize, n == 0 ? 0.0f : 1.0f,
            dW->getDataAs<float>() + group * shape->groupOut * shape->colRows,
            shape->colRows);
      }
      if (dX) {
        float *image = dX->getDataAs<float>() + imageOffset;
        if (shape->direct) {
          // dX_g += W_g^T [K, Mg] x dY_g [Mg, out] straight into the image.
          gemm<float>(threads, true, false, shape->colRows, outSize,
                      shape->groupOut, 1.0f, filters, shape->colRows, grad,
                      outSize, 1.0f, image, outSize);
        } else {
          gemm<float>(threads, true, false, shape->colRows, outSize,
                      shape->groupOut, 1.0f, filters, shape->colRows, grad,
                      outSize, 0.0f, colData, outSize);
          col2im(colData, g, shape->groupIn, image, threads);
        }
      }
    }
  }
  if (dW && g.batch == 0)
    std::memset(dW->getData(), 0, dW->getSizeInBytes());
  return llvm::Error::success();
}

} // namespace

void cpu::registerConvKernels(KernelTable &table) {
  table.add("", "Conv", convKernel, 2);
  table.add(kMsDomain, "ConvGrad", convGradKernel, 3, 0);
  // Older ONNX Runtime releases registered ConvGrad in the ONNX domain.
  table.add("", "ConvGrad", convGradKernel, 3, 0);
}
