//===- NormRows.cpp - What a row normalization node means -----------------===//
//
// The kind and the row split of the layer and RMS normalizations and their
// gradients (see NormRows.h), read from a node and X's shape.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/NormRows.h"

#include "ir/IR.h"
#include "ir/ops/Axes.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;
using namespace gmopt::norm;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The product of \p dims, or nullopt when it overflows int64.
std::optional<int64_t> checkedProduct(llvm::ArrayRef<int64_t> dims) {
  int64_t result = 1;
  for (int64_t dim : dims)
    if (__builtin_mul_overflow(result, dim, &result))
      return std::nullopt;
  return result;
}

} // namespace

NormKind norm::getNormKind(const Node &node) {
  llvm::StringRef op = node.getOpType();
  return op == "RMSNormalization" || op.starts_with("SimplifiedLayerNorm")
             ? NormKind::Rms
             : NormKind::Layer;
}

int64_t norm::getNormAxisAttr(const Node &node) {
  return node.getIntAttr("axis", -1);
}

llvm::Expected<unsigned> norm::getNormAxis(const Node &node, int64_t rank) {
  return getNormAxis(getNormAxisAttr(node), rank);
}

llvm::Expected<unsigned> norm::getNormAxis(int64_t axisAttr, int64_t rank) {
  if (rank < 1)
    return fail("X must have rank >= 1 to be normalized, got a scalar");
  std::optional<unsigned> axis = ops::normalizeAxis(axisAttr, rank);
  if (!axis)
    return fail(ops::axisOutOfRange("axis", axisAttr, rank));
  return *axis;
}

llvm::Expected<NormRows> norm::getNormRows(const Node &node,
                                           llvm::ArrayRef<int64_t> shape) {
  return getNormRows(getNormAxisAttr(node), shape);
}

llvm::Expected<NormRows> norm::getNormRows(int64_t axisAttr,
                                           llvm::ArrayRef<int64_t> shape) {
  auto axis = getNormAxis(axisAttr, shape.size());
  if (!axis)
    return axis.takeError();
  std::optional<int64_t> rows = checkedProduct(shape.take_front(*axis));
  std::optional<int64_t> cols = checkedProduct(shape.drop_front(*axis));
  int64_t elements;
  if (!rows || !cols || __builtin_mul_overflow(*rows, *cols, &elements))
    return fail("the element count of X overflows int64");
  NormRows result;
  result.axis = *axis;
  result.rows = *rows;
  result.cols = *cols;
  return result;
}

std::optional<int64_t> norm::getParamPeriod(llvm::ArrayRef<int64_t> normalized,
                                            llvm::ArrayRef<int64_t> param) {
  while (!param.empty() && param.front() == 1)
    param = param.drop_front();
  if (param.size() > normalized.size() ||
      param != normalized.take_back(param.size()))
    return std::nullopt;
  return checkedProduct(param);
}
