//===- CudnnGeometry.cpp - Conv/pool windows from a node's attributes -----===//
//
// ONNX's window rules for the CUDA backend, on the host and in every build:
// explicit pads (begin..., end...), VALID (none), SAME_UPPER / SAME_LOWER
// (pad so the output is ceil(input / stride), the odd pixel at the end /
// the beginning), output extents floor((in + pads - window) / stride) + 1,
// or the rounded-up extent with ceil_mode. The same rules as the CPU
// backend's ConvGeometry.cpp, which the unit tests compare against. Also
// the CUDA workspace model's bound for convolution nodes.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudnnGeometry.h"

#include "backend/Memory.h"
#include "ir/IR.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <string>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

llvm::Error geometryError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "CUDA kernel for '" + node.getOp().str() +
                                     "': " + message + " (node " +
                                     node.describe() + ")");
}

llvm::SmallVector<int64_t, 4> staticShape(const Value *value) {
  llvm::SmallVector<int64_t, 4> shape;
  if (value && value->getType().hasStaticShape())
    shape = value->getType().getStaticShape();
  return shape;
}

bool isOnnxOrMs(const Node &node) {
  llvm::StringRef domain = node.getDomain();
  return domain.empty() || domain == "ai.onnx" || domain == kMsDomain;
}

} // namespace

llvm::Expected<WindowParams>
cuda::resolveWindowParams(const Node &node, llvm::ArrayRef<int64_t> inputShape,
                          llvm::ArrayRef<int64_t> kernel,
                          llvm::ArrayRef<int64_t> outputShape, bool ceilMode) {
  unsigned rank = inputShape.size();
  if (rank != 3 && rank != 4)
    return geometryError(node, "only 1-D and 2-D windows are supported "
                               "(input rank " +
                                   llvm::Twine(rank) + ")");
  unsigned spatial = rank - 2;
  if (kernel.size() != spatial)
    return geometryError(node, "kernel_shape has " +
                                   llvm::Twine(kernel.size()) + " dims for " +
                                   llvm::Twine(spatial) + " spatial dims");
  if (outputShape.size() != rank)
    return geometryError(node, "output rank differs from the input's");
  auto attr = [&](llvm::StringRef name, int64_t fallback, size_t count) {
    std::vector<int64_t> values = node.getIntsAttr(name, {});
    if (values.empty())
      values.assign(count, fallback);
    return values;
  };
  std::vector<int64_t> strides = attr("strides", 1, spatial);
  std::vector<int64_t> dilations = attr("dilations", 1, spatial);
  std::vector<int64_t> pads = attr("pads", 0, 2 * spatial);
  if (strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial)
    return geometryError(node,
                         "strides, dilations or pads have the wrong length");
  for (unsigned d = 0; d < spatial; ++d)
    if (strides[d] < 1 || dilations[d] < 1 || kernel[d] < 1 || pads[d] < 0 ||
        pads[d + spatial] < 0)
      return geometryError(node, "kernel, strides and dilations must be "
                                 "positive, pads non-negative");
  std::string autoPad = node.getStringAttr("auto_pad", "NOTSET").str();
  llvm::SmallVector<int64_t, 2> outExtents;
  for (unsigned d = 0; d < spatial; ++d) {
    int64_t in = inputShape[2 + d];
    int64_t window = (kernel[d] - 1) * dilations[d] + 1;
    if (autoPad == "VALID") {
      pads[d] = pads[d + spatial] = 0;
    } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t out = (in + strides[d] - 1) / strides[d];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * strides[d] + window - in);
      int64_t small = total / 2;
      pads[d] = autoPad == "SAME_UPPER" ? small : total - small;
      pads[d + spatial] = total - pads[d];
    } else if (autoPad != "NOTSET") {
      return geometryError(node, "unknown auto_pad '" + autoPad + "'");
    }
    int64_t span = in + pads[d] + pads[d + spatial] - window;
    if (span < 0)
      return geometryError(node, "the window is larger than the padded input");
    int64_t floorOut = span / strides[d] + 1;
    int64_t ceilOut = (span + strides[d] - 1) / strides[d] + 1;
    int64_t actual = outputShape[2 + d];
    bool ok = ceilMode ? (actual == floorOut || actual == ceilOut)
                       : actual == floorOut;
    if (!ok)
      return geometryError(
          node, "output extent " + llvm::Twine(actual) + " of spatial dim " +
                    llvm::Twine(d) + " disagrees with the computed " +
                    llvm::Twine(ceilMode ? ceilOut : floorOut));
    outExtents.push_back(actual);
  }
  if (outputShape[0] != inputShape[0])
    return geometryError(node, "output batch differs from the input's");
  WindowParams g;
  g.batch = inputShape[0];
  g.channels = inputShape[1];
  unsigned w = spatial - 1;
  g.inW = inputShape[2 + w];
  g.outW = outExtents[w];
  g.kernelW = kernel[w];
  g.strideW = strides[w];
  g.dilationW = dilations[w];
  g.padLeft = pads[w];
  g.padRight = pads[w + spatial];
  if (spatial == 2) {
    g.inH = inputShape[2];
    g.outH = outExtents[0];
    g.kernelH = kernel[0];
    g.strideH = strides[0];
    g.dilationH = dilations[0];
    g.padTop = pads[0];
    g.padBottom = pads[spatial];
  }
  return g;
}

llvm::Expected<ConvParams> cuda::resolveConvParams(const Node &node) {
  bool grad = node.getOpType() == "ConvGrad";
  unsigned xIndex = grad ? 1 : 0, wIndex = grad ? 2 : 1;
  if (node.getNumOperands() <= wIndex || !node.getOperand(xIndex) ||
      !node.getOperand(wIndex) || (grad && !node.getOperand(0)) ||
      (!grad && (node.getNumResults() < 1 || !node.getResult(0))))
    return geometryError(node, "an operand or the result is missing");
  const Value *outValue = grad ? node.getOperand(0) : node.getResult(0);
  for (const Value *value :
       {static_cast<const Value *>(node.getOperand(xIndex)),
        static_cast<const Value *>(node.getOperand(wIndex)), outValue})
    if (!value->getType().hasStaticShape())
      return geometryError(node, "shapes must be static");
  auto x = staticShape(node.getOperand(xIndex));
  auto w = staticShape(node.getOperand(wIndex));
  auto y = staticShape(outValue);
  if (x.size() < 3)
    return geometryError(node, "X must have rank >= 3");
  if (w.size() != x.size())
    return geometryError(node, "W must have X's rank");
  llvm::ArrayRef<int64_t> kernel = llvm::ArrayRef<int64_t>(w).drop_front(2);
  std::vector<int64_t> kernelAttr = node.getIntsAttr("kernel_shape", {});
  if (!kernelAttr.empty() && llvm::ArrayRef<int64_t>(kernelAttr) != kernel)
    return geometryError(node, "kernel_shape disagrees with W's shape");
  auto window = resolveWindowParams(node, x, kernel, y, false);
  if (!window)
    return window.takeError();
  ConvParams p;
  p.window = *window;
  p.spatialDims = x.size() - 2;
  p.groups = node.getIntAttr("group", 1);
  p.outChannels = w[0];
  if (p.groups < 1 || x[1] % p.groups || p.outChannels % p.groups)
    return geometryError(node, "group " + llvm::Twine(p.groups) +
                                   " does not divide the channel counts");
  p.groupIn = x[1] / p.groups;
  if (w[1] != p.groupIn)
    return geometryError(node, "W has " + llvm::Twine(w[1]) +
                                   " input channels per group, X has " +
                                   llvm::Twine(p.groupIn));
  if (y[1] != p.outChannels)
    return geometryError(node, "output channels differ from W's filter count");
  return p;
}

llvm::Expected<WindowParams> cuda::resolvePoolParams(const Node &node) {
  bool grad = node.getOpType() == "AveragePoolGrad";
  const Value *in =
      grad ? (node.getNumResults() ? node.getResult(0) : nullptr)
           : (node.getNumOperands() ? node.getOperand(0) : nullptr);
  const Value *out =
      grad ? (node.getNumOperands() ? node.getOperand(0) : nullptr)
           : (node.getNumResults() ? node.getResult(0) : nullptr);
  if (!in || !out)
    return geometryError(node, "an operand or the result is missing");
  if (!in->getType().hasStaticShape() || !out->getType().hasStaticShape())
    return geometryError(node, "shapes must be static");
  std::vector<int64_t> kernel = node.getIntsAttr("kernel_shape", {});
  if (kernel.empty())
    return geometryError(node, "missing attribute 'kernel_shape'");
  auto inShape = staticShape(in), outShape = staticShape(out);
  if (outShape.size() == inShape.size() && outShape.size() >= 2 &&
      outShape[1] != inShape[1])
    return geometryError(node, "output channels differ from the input's");
  auto window = resolveWindowParams(node, inShape, kernel, outShape,
                                    node.getIntAttr("ceil_mode", 0) != 0);
  if (!window)
    return window.takeError();
  window->includePad = node.getIntAttr("count_include_pad", 0) != 0;
  window->columnMajor = node.getIntAttr("storage_order", 0) != 0;
  return *window;
}

bool cuda::isCudnnConvNode(const Node &node) {
  return isOnnxOrMs(node) &&
         (node.getOpType() == "Conv" || node.getOpType() == "ConvGrad");
}

uint64_t cuda::getCudnnConvWorkspaceBytes(const Node &node) {
  if (!isCudnnConvNode(node))
    return 0;
  auto params = resolveConvParams(node);
  if (!params) {
    llvm::consumeError(params.takeError());
    return 0;
  }
  const WindowParams &g = params->window;
  bool grad = node.getOpType() == "ConvGrad";
  const Value *x = node.getOperand(grad ? 1 : 0);
  uint64_t elementBytes =
      x->getType().getNumElements()
          ? x->getType().getSizeInBytes() /
                static_cast<uint64_t>(x->getType().getNumElements())
          : 4;
  // In doubles first: a large model's im2col matrix overflows nothing here
  // before the cap applies.
  double im2col = static_cast<double>(g.batch) * g.channels * g.kernelH *
                  g.kernelW * g.outH * g.outW * elementBytes;
  double bounded = std::clamp(im2col, double(kCudnnConvWorkspaceFloorBytes),
                              double(kCudnnConvWorkspaceCapBytes));
  return alignBuffer(static_cast<uint64_t>(bounded));
}

bool cuda::isBatchNormTraining(const Node &node) {
  if (node.hasAttr("training_mode"))
    return node.getIntAttr("training_mode", 0) != 0;
  return node.getOpType() == "BatchNormInternal" ||
         (node.getNumResults() > 1 && node.getResult(1));
}

bool cuda::isCudnnBatchNormNode(const Node &node) {
  llvm::StringRef op = node.getOpType();
  return isOnnxOrMs(node) &&
         (op == "BatchNormalization" || op == "BatchNormInternal" ||
          op == "BatchNormalizationGrad");
}

uint64_t cuda::getCudnnBatchNormWorkspaceBytes(const Node &node) {
  if (!isCudnnBatchNormNode(node))
    return 0;
  bool grad = node.getOpType() == "BatchNormalizationGrad";
  unsigned xIndex = grad ? 1 : 0;
  const Value *x =
      xIndex < node.getNumOperands() ? node.getOperand(xIndex) : nullptr;
  if (!x || !x->getType().hasStaticShape() || x->getType().getRank() < 2)
    return 0;
  auto result = [&](unsigned i) {
    return i < node.getNumResults() ? node.getResult(i) : nullptr;
  };
  bool missing = grad ? (!result(1) || !result(2))
                      : isBatchNormTraining(node) && (!result(3) || !result(4));
  if (!missing)
    return 0;
  int64_t channels = x->getType().getStaticShape()[1];
  return alignBuffer(2 * static_cast<uint64_t>(channels) * sizeof(float));
}
