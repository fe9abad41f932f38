//===- Axes.cpp - What axis attributes mean -------------------------------===//
//
// The axis readings of Axes.h: range checks with one message, the softmax
// family's two conventions and Shape-15's slice.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/Axes.h"
#include "ir/IR.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>

using namespace gmopt;
using namespace gmopt::ops;

std::string ops::axisOutOfRange(llvm::StringRef what, int64_t axis,
                                int64_t rank) {
  return (what + " " + llvm::Twine(axis) + " is out of range for rank " +
          llvm::Twine(rank))
      .str();
}

llvm::Expected<unsigned> ops::checkAxis(int64_t axis, int64_t rank,
                                        llvm::StringRef what) {
  if (std::optional<unsigned> normalized = normalizeAxis(axis, rank))
    return *normalized;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 axisOutOfRange(what, axis, rank));
}

bool ops::isCoercedSoftmax(const Node &node) {
  if (node.getDomain() == kMsDomain)
    return !node.getOpType().ends_with("_13");
  int64_t version = node.getOpsetVersion();
  return version > 0 && version < 13;
}

int64_t ops::getSoftmaxAxisAttr(const Node &node) {
  return node.getIntAttr("axis", isCoercedSoftmax(node) ? 1 : -1);
}

llvm::Expected<unsigned> ops::getSoftmaxAxis(const Node &node, int64_t rank) {
  return checkAxis(getSoftmaxAxisAttr(node), rank);
}

llvm::Expected<SoftmaxAxes> ops::getSoftmaxAxes(const Node &node,
                                                llvm::ArrayRef<int64_t> shape) {
  return getSoftmaxAxes(isCoercedSoftmax(node), getSoftmaxAxisAttr(node),
                        shape);
}

llvm::Expected<SoftmaxAxes> ops::getSoftmaxAxes(bool coerced2D,
                                                int64_t axisAttr,
                                                llvm::ArrayRef<int64_t> shape) {
  SoftmaxAxes axes;
  axes.coerced2D = coerced2D;
  if (shape.empty())
    return axes;
  auto axis = checkAxis(axisAttr, shape.size());
  if (!axis)
    return axis.takeError();
  axes.axis = *axis;
  auto product = [](llvm::ArrayRef<int64_t> dims) {
    int64_t size = 1;
    for (int64_t dim : dims)
      size *= dim;
    return size;
  };
  axes.outer = product(shape.take_front(*axis));
  if (axes.coerced2D) {
    axes.axisDim = product(shape.drop_front(*axis));
  } else {
    axes.axisDim = shape[*axis];
    axes.inner = product(shape.drop_front(*axis + 1));
  }
  return axes;
}

ShapeSlice ops::getShapeSlice(const Node &node, int64_t rank) {
  auto clampIndex = [&](int64_t index) {
    return std::clamp<int64_t>(index < 0 ? index + rank : index, 0, rank);
  };
  ShapeSlice slice;
  slice.start = clampIndex(node.getIntAttr("start", 0));
  slice.end = clampIndex(node.getIntAttr("end", rank));
  return slice;
}
