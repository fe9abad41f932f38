//===- WindowGeometry.h - Convolution and pooling windows -------*- C++ -*-===//
//
// Backend-neutral: resolves the attributes convolutions and pools share
// (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode) for 1-D and
// 2-D windows into one 2-D geometry (a 1-D op is a 2-D op with height 1),
// checked against the output the caller preallocated. The CPU kernels and
// the CUDA backend (its cuDNN descriptors and pooling kernels, which read
// the struct on the device too) resolve windows through this one function,
// so the two backends cannot disagree on ONNX's padding rules.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_WINDOWGEOMETRY_H
#define GMOPT_BACKEND_WINDOWGEOMETRY_H

#include <cstdint>

// nvcc's translation units (the pooling kernels) see only the struct; the
// resolver, which needs LLVM, is host code.
#if !defined(__CUDACC__)
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <vector>
#endif

#if defined(__CUDACC__)
#define GMOPT_WINDOW_HD __host__ __device__
#else
#define GMOPT_WINDOW_HD
#endif

namespace gmopt {

class Node;

/// A 2-D sliding window over [N, C, H, W] with explicit (possibly
/// asymmetric) pads, as resolved from ONNX's attributes.
struct WindowGeometry {
  int64_t batch = 0, channels = 0;
  int64_t inH = 1, inW = 1, outH = 1, outW = 1;
  int64_t kernelH = 1, kernelW = 1;
  int64_t strideH = 1, strideW = 1;
  int64_t dilationH = 1, dilationW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;

  GMOPT_WINDOW_HD int64_t inSize() const { return inH * inW; }
  GMOPT_WINDOW_HD int64_t outSize() const { return outH * outW; }
  GMOPT_WINDOW_HD int64_t kernelSize() const { return kernelH * kernelW; }
  GMOPT_WINDOW_HD int64_t planes() const { return batch * channels; }
};

#if !defined(__CUDACC__)
/// ONNX's window attributes of a convolution or pool, decoded once from
/// its node; resolveWindowGeometry applies them to shapes.
struct WindowAttributes {
  /// `auto_pad`.
  enum class AutoPad { NotSet, Valid, SameUpper, SameLower };
  /// `strides`, `dilations` and `pads` as written (empty: the defaults).
  std::vector<int64_t> strides, dilations, pads;
  AutoPad autoPad = AutoPad::NotSet;
};

/// \p node's window attributes, or "unknown auto_pad 'X'" (a plain
/// message; callers add which op and node).
llvm::Expected<WindowAttributes> getWindowAttributes(const Node &node);

/// Resolves \p node's window over \p inputShape ([N, C, spatial...] with 1
/// or 2 spatial dims) with spatial kernel \p kernel, and checks the spatial
/// extents of \p outputShape: explicit pads (begin..., end...), VALID
/// (none), or SAME_UPPER / SAME_LOWER (pad so the output is
/// ceil(input / stride), the odd pixel at the end or the beginning); with
/// \p ceilMode the output may be the rounded-up size. The error's message
/// says what is wrong; callers add which op and node.
llvm::Expected<WindowGeometry>
resolveWindowGeometry(const Node &node, llvm::ArrayRef<int64_t> inputShape,
                      llvm::ArrayRef<int64_t> kernel,
                      llvm::ArrayRef<int64_t> outputShape, bool ceilMode);

/// resolveWindowGeometry of attributes decoded once (getWindowAttributes):
/// a pure function of them and the shapes.
llvm::Expected<WindowGeometry>
resolveWindowGeometry(const WindowAttributes &attrs,
                      llvm::ArrayRef<int64_t> inputShape,
                      llvm::ArrayRef<int64_t> kernel,
                      llvm::ArrayRef<int64_t> outputShape, bool ceilMode);
#endif

} // namespace gmopt

#endif // GMOPT_BACKEND_WINDOWGEOMETRY_H
