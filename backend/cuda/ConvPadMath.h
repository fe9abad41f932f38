//===- ConvPadMath.h - Explicit padding of a conv's input -------*- C++ -*-===//
//
// cuDNN's convolution descriptors take one pad per axis, applied at both
// ends, so a convolution whose pads differ at the two ends of an axis (ONNX
// pads begin != end, SAME_UPPER / SAME_LOWER with an even kernel) is run on
// an explicitly padded copy of X with zero pads: X is copied into the
// node's planned workspace surrounded by zeros, and ConvGrad's dX is
// computed for the padded input in the workspace and cropped. This header
// holds the geometry of the padded planes and the per-element index maps
// the pad and crop kernels (CnnKernels.cu) run, as __host__ __device__
// functions the host tests check.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CONVPADMATH_H
#define GMOPT_BACKEND_CUDA_CONVPADMATH_H

#include "backend/cuda/ElementwiseMath.h"

#include <cstdint>

namespace gmopt {
namespace cuda {

/// [planes, inH, inW] planes inside [planes, paddedH, paddedW] ones, with
/// padTop rows above and padLeft columns left of each (the rest of the
/// padded rows and columns below and right).
struct ConvPadGeometry {
  /// N * C.
  int64_t planes = 0;
  int64_t inH = 1, inW = 1;
  int64_t padTop = 0, padLeft = 0;
  int64_t paddedH = 1, paddedW = 1;
  GMOPT_HD int64_t elements() const { return planes * inH * inW; }
  GMOPT_HD int64_t paddedElements() const { return planes * paddedH * paddedW; }
};

/// The element of the unpadded tensor that element \p padded of the padded
/// one holds, or -1 where the padded one holds a zero of the padding.
GMOPT_HD int64_t padSourceIndex(const ConvPadGeometry &g, int64_t padded) {
  int64_t planeSize = g.paddedH * g.paddedW;
  int64_t plane = padded / planeSize, within = padded % planeSize;
  int64_t h = within / g.paddedW - g.padTop;
  int64_t w = within % g.paddedW - g.padLeft;
  if (h < 0 || h >= g.inH || w < 0 || w >= g.inW)
    return -1;
  return (plane * g.inH + h) * g.inW + w;
}

/// The element of the padded tensor that element \p index of the unpadded
/// one is cropped from.
GMOPT_HD int64_t cropSourceIndex(const ConvPadGeometry &g, int64_t index) {
  int64_t planeSize = g.inH * g.inW;
  int64_t plane = index / planeSize, within = index % planeSize;
  int64_t h = within / g.inW + g.padTop, w = within % g.inW + g.padLeft;
  return (plane * g.paddedH + h) * g.paddedW + w;
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CONVPADMATH_H
