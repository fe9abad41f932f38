//===- WindowGeometry.cpp - Window geometry of convolution and pooling ----===//
//
// ONNX's rules for output extents and padding (see WindowGeometry.h).
//
//===----------------------------------------------------------------------===//

#include "backend/WindowGeometry.h"

#include "ir/IR.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

llvm::Error windowError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

} // namespace

llvm::Expected<WindowAttributes> gmopt::getWindowAttributes(const Node &node) {
  WindowAttributes attrs;
  attrs.strides = node.getIntsAttr("strides", {});
  attrs.dilations = node.getIntsAttr("dilations", {});
  attrs.pads = node.getIntsAttr("pads", {});
  llvm::StringRef autoPad = node.getStringAttr("auto_pad", "NOTSET");
  if (autoPad == "VALID")
    attrs.autoPad = WindowAttributes::AutoPad::Valid;
  else if (autoPad == "SAME_UPPER")
    attrs.autoPad = WindowAttributes::AutoPad::SameUpper;
  else if (autoPad == "SAME_LOWER")
    attrs.autoPad = WindowAttributes::AutoPad::SameLower;
  else if (autoPad != "NOTSET")
    return windowError("unknown auto_pad '" + autoPad + "'");
  return attrs;
}

llvm::Expected<WindowGeometry> gmopt::resolveWindowGeometry(
    const Node &node, llvm::ArrayRef<int64_t> inputShape,
    llvm::ArrayRef<int64_t> kernel, llvm::ArrayRef<int64_t> outputShape,
    bool ceilMode) {
  auto attrs = getWindowAttributes(node);
  if (!attrs)
    return attrs.takeError();
  return resolveWindowGeometry(*attrs, inputShape, kernel, outputShape,
                               ceilMode);
}

llvm::Expected<WindowGeometry> gmopt::resolveWindowGeometry(
    const WindowAttributes &attrs, llvm::ArrayRef<int64_t> inputShape,
    llvm::ArrayRef<int64_t> kernel, llvm::ArrayRef<int64_t> outputShape,
    bool ceilMode) {
  unsigned rank = inputShape.size();
  if (rank != 3 && rank != 4)
    return windowError("only 1-D and 2-D windows are supported (input rank " +
                       llvm::Twine(rank) + ")");
  unsigned spatial = rank - 2;
  if (kernel.size() != spatial)
    return windowError("kernel_shape has " + llvm::Twine(kernel.size()) +
                       " dims for " + llvm::Twine(spatial) + " spatial dims");
  if (outputShape.size() != rank)
    return windowError("output rank differs from the input's");
  auto orDefault = [](const std::vector<int64_t> &values, int64_t fallback,
                      size_t count) {
    return values.empty() ? std::vector<int64_t>(count, fallback) : values;
  };
  std::vector<int64_t> strides = orDefault(attrs.strides, 1, spatial);
  std::vector<int64_t> dilations = orDefault(attrs.dilations, 1, spatial);
  std::vector<int64_t> pads = orDefault(attrs.pads, 0, 2 * spatial);
  if (strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial)
    return windowError("strides, dilations or pads have the wrong length");
  for (unsigned d = 0; d < spatial; ++d)
    if (strides[d] < 1 || dilations[d] < 1 || kernel[d] < 1 || pads[d] < 0 ||
        pads[d + spatial] < 0)
      return windowError("kernel, strides and dilations must be positive, pads "
                         "non-negative");
  using AutoPad = WindowAttributes::AutoPad;
  llvm::SmallVector<int64_t, 2> outExtents;
  for (unsigned d = 0; d < spatial; ++d) {
    int64_t in = inputShape[2 + d];
    int64_t window = (kernel[d] - 1) * dilations[d] + 1;
    if (attrs.autoPad == AutoPad::Valid) {
      pads[d] = pads[d + spatial] = 0;
    } else if (attrs.autoPad == AutoPad::SameUpper ||
               attrs.autoPad == AutoPad::SameLower) {
      int64_t out = (in + strides[d] - 1) / strides[d];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * strides[d] + window - in);
      int64_t small = total / 2;
      pads[d] = attrs.autoPad == AutoPad::SameUpper ? small : total - small;
      pads[d + spatial] = total - pads[d];
    }
    int64_t span = in + pads[d] + pads[d + spatial] - window;
    if (span < 0)
      return windowError("the window is larger than the padded input");
    int64_t floorOut = span / strides[d] + 1;
    int64_t ceilOut = (span + strides[d] - 1) / strides[d] + 1;
    int64_t actual = outputShape[2 + d];
    bool ok = ceilMode ? (actual == floorOut || actual == ceilOut)
                       : actual == floorOut;
    if (!ok)
      return windowError("output extent " + llvm::Twine(actual) +
                         " of spatial dim " + llvm::Twine(d) +
                         " disagrees with the computed " +
                         llvm::Twine(ceilMode ? ceilOut : floorOut));
    outExtents.push_back(actual);
  }
  if (outputShape[0] != inputShape[0])
    return windowError("output batch differs from the input's");
  WindowGeometry g;
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
