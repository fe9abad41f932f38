//===- ConvGeometry.h - Convolution and pooling windows ---------*- C++ -*-===//
//
// Internal to the CPU backend. Resolves the attributes convolutions and
// pools share (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
// for 1-D and 2-D windows into one 2-D geometry (a 1-D op is a 2-D op with
// height 1), checked against the output the caller preallocated.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_CONVGEOMETRY_H
#define GMOPT_BACKEND_CPU_CONVGEOMETRY_H

#include "backend/cpu/KernelSupport.h"

namespace gmopt {
namespace cpu {

/// A 2-D sliding window over [N, C, H, W].
struct WindowGeometry {
  int64_t batch = 0, channels = 0;
  int64_t inH = 1, inW = 1, outH = 1, outW = 1;
  int64_t kernelH = 1, kernelW = 1;
  int64_t strideH = 1, strideW = 1;
  int64_t dilationH = 1, dilationW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;

  int64_t inSize() const { return inH * inW; }
  int64_t outSize() const { return outH * outW; }
  int64_t kernelSize() const { return kernelH * kernelW; }
};

/// Resolves the window of an op over \p inputShape ([N, C, spatial...] with
/// 1 or 2 spatial dims) with spatial kernel \p kernel, and checks the
/// spatial extents of \p outputShape. With \p ceilMode the output may be
/// the rounded-up size.
llvm::Expected<WindowGeometry>
resolveWindow(const KernelCall &call, llvm::ArrayRef<int64_t> inputShape,
              llvm::ArrayRef<int64_t> kernel,
              llvm::ArrayRef<int64_t> outputShape, bool ceilMode);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_CONVGEOMETRY_H
