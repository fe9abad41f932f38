//===- CudnnGeometry.cpp - Conv/pool windows from a node's attributes -----===//
//
// What the CUDA backend's convolution, pooling and batch-norm entries
// derive from a node, on the host and in every build: the window through
// the backend-neutral resolveWindowGeometry (the CPU kernels' too), then
// cuDNN's and the pools' parameters. Also the CUDA workspace model's slices
// for the CNN nodes.
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
  return domain.empty() || domain == kMsDomain;
}

} // namespace

llvm::Expected<WindowParams>
cuda::resolveWindowParams(const Node &node, llvm::ArrayRef<int64_t> inputShape,
                          llvm::ArrayRef<int64_t> kernel,
                          llvm::ArrayRef<int64_t> outputShape, bool ceilMode) {
  auto window =
      resolveWindowGeometry(node, inputShape, kernel, outputShape, ceilMode);
  if (!window)
    return geometryError(node, llvm::toString(window.takeError()));
  WindowParams params;
  static_cast<WindowGeometry &>(params) = *window;
  return params;
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

ConvWorkspaceLayout cuda::getConvWorkspaceLayout(const Node &node,
                                                 const ConvParams &p) {
  const WindowParams &g = p.window;
  bool grad = node.getOpType() == "ConvGrad";
  const Value *x = node.getOperand(grad ? 1 : 0);
  uint64_t elementBytes =
      x->getType().getNumElements()
          ? x->getType().getSizeInBytes() /
                static_cast<uint64_t>(x->getType().getNumElements())
          : 4;
  ConvWorkspaceLayout layout;
  layout.cudnn = p;
  layout.explicitPadding = !p.symmetricPads();
  if (layout.explicitPadding) {
    ConvPadGeometry &pad = layout.pad;
    pad.planes = g.batch * g.channels;
    pad.inH = g.inH;
    pad.inW = g.inW;
    pad.padTop = g.padTop;
    pad.padLeft = g.padLeft;
    pad.paddedH = g.inH + g.padTop + g.padBottom;
    pad.paddedW = g.inW + g.padLeft + g.padRight;
    WindowParams &padded = layout.cudnn.window;
    padded.inH = pad.paddedH;
    padded.inW = pad.paddedW;
    padded.padTop = padded.padBottom = padded.padLeft = padded.padRight = 0;
    uint64_t paddedBytes =
        alignBuffer(static_cast<uint64_t>(pad.paddedElements()) * elementBytes);
    auto present = [&](unsigned i) {
      return i < node.getNumResults() && node.getResult(i);
    };
    if (!grad || present(1))
      layout.paddedXBytes = paddedBytes;
    if (grad && present(0))
      layout.paddedDxBytes = paddedBytes;
    layout.paddedDxOffset = layout.paddedXBytes;
  }
  layout.scratchOffset = layout.paddedXBytes + layout.paddedDxBytes;
  // In doubles first: a large model's im2col matrix overflows nothing here
  // before the cap applies.
  double im2col = static_cast<double>(g.batch) * g.channels * g.kernelH *
                  g.kernelW * g.outH * g.outW * elementBytes;
  double bounded = std::clamp(im2col, double(kCudnnConvWorkspaceFloorBytes),
                              double(kCudnnConvWorkspaceCapBytes));
  layout.scratchBytes = alignBuffer(static_cast<uint64_t>(bounded));
  return layout;
}

uint64_t cuda::getCudnnConvWorkspaceBytes(const Node &node) {
  if (!isCudnnConvNode(node))
    return 0;
  auto params = resolveConvParams(node);
  if (!params) {
    llvm::consumeError(params.takeError());
    return 0;
  }
  return getConvWorkspaceLayout(node, *params).totalBytes();
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

uint64_t cuda::getScatterAccumulatorBytes(const Node &node) {
  llvm::StringRef domain = node.getDomain(), op = node.getOpType();
  bool onnx = domain.empty();
  if (!(onnx && op == "MaxPoolGrad") &&
      !(domain == kMsDomain && op == "GatherGrad"))
    return 0;
  if (node.getNumResults() < 1 || !node.getResult(0))
    return 0;
  const TensorType &dx = node.getResult(0)->getType();
  if (!dx.hasStaticShape() ||
      (dx.getDType() != DType::F16 && dx.getDType() != DType::BF16))
    return 0;
  return alignBuffer(static_cast<uint64_t>(dx.getNumElements()) *
                     sizeof(float));
}
