//===- CudnnGeometry.h - Conv/pool windows from a node's attributes -*- C++
//-*-===//
//
// Host code of every build (no CUDA, no cuDNN): what the CUDA backend's
// convolution, pooling and batch-norm entries derive from a node's static
// shapes and ONNX attributes before they describe it to cuDNN or to the
// pooling kernels - the pads split (explicit begin/end, VALID, SAME_UPPER /
// SAME_LOWER with the odd pixel at the end / the beginning), strides,
// dilations, groups, the output extents (ceil_mode for pools), and
// count_include_pad / storage_order. A 1-D op becomes a 2-D one of height
// 1, which is how it is handed to cuDNN (4-D NCHW descriptors). The window
// rules are backend/WindowGeometry.h's, which the CPU kernels resolve
// through too. Also the CUDA workspace model's slices for the CNN nodes
// (a convolution's cuDNN scratch and explicitly padded input, batch norm's
// statistics, a 16-bit MaxPoolGrad's or GatherGrad's fp32 accumulator),
// computed from shapes alone so a plan made without a GPU reserves them.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDNNGEOMETRY_H
#define GMOPT_BACKEND_CUDA_CUDNNGEOMETRY_H

#include "backend/cuda/ConvPadMath.h"
#include "backend/cuda/PoolMath.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace gmopt {

class Node;

namespace cuda {

/// The most scratch the CUDA workspace model reserves for one convolution
/// node (Conv or ConvGrad), whatever its shapes: cuDNN then picks the
/// fastest algorithm that fits the node's slice.
constexpr uint64_t kCudnnConvWorkspaceCapBytes = uint64_t(64) << 20;
/// The least it reserves for one, so small convolutions may still use the
/// algorithms that need a little scratch (Winograd, FFT tiles).
constexpr uint64_t kCudnnConvWorkspaceFloorBytes = uint64_t(4) << 20;

/// One convolution (Conv, or the convolution a ConvGrad differentiates).
struct ConvParams {
  /// The window over X (channels: X's channels).
  WindowParams window;
  /// ONNX spatial dims (1 or 2).
  unsigned spatialDims = 2;
  int64_t outChannels = 0;
  int64_t groups = 1;
  /// Input channels per group (W's second dim).
  int64_t groupIn = 0;
  /// Whether the pads are the same at both ends of each axis (what a cuDNN
  /// convolution descriptor can express).
  bool symmetricPads() const {
    return window.padTop == window.padBottom &&
           window.padLeft == window.padRight;
  }
};

/// Resolves the window of \p node over \p inputShape ([N, C, spatial...],
/// one or two spatial dims) with spatial kernel \p kernel, checking the
/// spatial extents of \p outputShape (with \p ceilMode the rounded-up
/// extent is allowed). Errors name the node.
llvm::Expected<WindowParams>
resolveWindowParams(const Node &node, llvm::ArrayRef<int64_t> inputShape,
                    llvm::ArrayRef<int64_t> kernel,
                    llvm::ArrayRef<int64_t> outputShape, bool ceilMode);

/// The convolution of a Conv node (X, W, B?) -> Y or a ConvGrad node
/// (dY, X, W) -> (dX?, dW?, dB?), from its static shapes and attributes.
llvm::Expected<ConvParams> resolveConvParams(const Node &node);

/// The pooling window of MaxPool / AveragePool (X -> Y) or AveragePoolGrad
/// (dY -> dX, the window over dX), with ceil_mode, count_include_pad and
/// storage_order.
llvm::Expected<WindowParams> resolvePoolParams(const Node &node);

/// How a Conv or ConvGrad node uses its planned workspace slice. cuDNN's
/// convolution descriptors take symmetric pads only, so a node whose pads
/// differ at the two ends of an axis has its input padded explicitly: X is
/// copied, surrounded by zeros, into the slice's padded-X region and cuDNN
/// convolves that with zero pads (the same window positions, the same
/// products, the padding's zeros read from memory instead of skipped);
/// ConvGrad's dX is computed for the padded input into the padded-dX region
/// and cropped into dX. cuDNN's scratch follows the padded regions.
struct ConvWorkspaceLayout {
  /// True when the pads are asymmetric and the padded regions are used.
  bool explicitPadding = false;
  /// The padded planes (explicitPadding only).
  ConvPadGeometry pad;
  /// The convolution cuDNN is asked for: the node's own, or with
  /// explicitPadding the one over the padded input with zero pads.
  ConvParams cudnn;
  /// The padded X (Conv; ConvGrad with dW), aligned; 0 bytes when unused.
  uint64_t paddedXOffset = 0, paddedXBytes = 0;
  /// The padded dX (ConvGrad with dX), aligned; 0 bytes when unused.
  uint64_t paddedDxOffset = 0, paddedDxBytes = 0;
  /// cuDNN's algorithm scratch: the whole batch's im2col bytes (X's
  /// channels times the kernel window per output position, per image), the
  /// bound on what cuDNN's GEMM-based algorithms need, raised to
  /// kCudnnConvWorkspaceFloorBytes and capped at
  /// kCudnnConvWorkspaceCapBytes.
  uint64_t scratchOffset = 0, scratchBytes = 0;
  /// The slice's bytes.
  uint64_t totalBytes() const { return scratchOffset + scratchBytes; }
};

/// The workspace layout of Conv / ConvGrad \p node with convolution \p p.
ConvWorkspaceLayout getConvWorkspaceLayout(const Node &node,
                                           const ConvParams &p);

/// The CUDA workspace model's scratch bound for a Conv or ConvGrad node:
/// its ConvWorkspaceLayout's total bytes (cuDNN's scratch bound, plus the
/// padded input and its gradient where the pads are asymmetric); 0 for a
/// node whose shapes are not static or do not resolve (its kernel check
/// fails anyway).
uint64_t getCudnnConvWorkspaceBytes(const Node &node);

/// True for the ops getCudnnConvWorkspaceBytes sizes (Conv, ConvGrad).
bool isCudnnConvNode(const Node &node);

/// True for BatchNormalization, BatchNormInternal and
/// BatchNormalizationGrad.
bool isCudnnBatchNormNode(const Node &node);

/// Whether a BatchNormalization / BatchNormInternal node normalizes with
/// the batch's statistics: its training_mode attribute, else (as the CPU
/// kernel decides) BatchNormInternal or a running_mean output.
bool isBatchNormTraining(const Node &node);

/// The CUDA workspace model's scratch for a batch-norm node: cuDNN writes
/// two per-channel fp32 vectors the node may not output (the batch mean
/// and inverse std of a training forward pass; dScale and dBias of the
/// gradient), so a node that lacks one of them reserves 2 * C floats for
/// both (rounded to the buffer alignment); 0 when it outputs them all, as
/// ONNX Runtime's training graphs do (cuDNN's batch-norm calls take no
/// other scratch).
uint64_t getCudnnBatchNormWorkspaceBytes(const Node &node);

/// The CUDA workspace model's scratch for the 16-bit scatter-adds: a
/// MaxPoolGrad (ONNX domain) or GatherGrad (com.microsoft) node with an f16
/// / bf16 dX gets one fp32 accumulator per dX element (the scatter sums in
/// fp32 and rounds once, as the CPU backend's staged kernel does),
/// aligned; 0 for every other node, an fp32 dX included (it is scattered
/// into directly).
uint64_t getScatterAccumulatorBytes(const Node &node);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDNNGEOMETRY_H
