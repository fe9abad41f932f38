//===- ReduceAxes.cpp - What a reduction reduces --------------------------===//
//
// ReduceSpec's decoding and its resolution into ReduceAxes.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ReduceAxes.h"
#include "ir/IR.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ShapeValue.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace gmopt;
using namespace gmopt::ops;

StaticShape ReduceAxes::keptShape(llvm::ArrayRef<int64_t> input) const {
  StaticShape out(input.begin(), input.end());
  for (size_t d = 0; d != out.size(); ++d)
    if (reduced[d])
      out[d] = 1;
  return out;
}

int64_t ReduceAxes::reducedCount(llvm::ArrayRef<int64_t> input) const {
  int64_t count = 1;
  for (size_t d = 0; d != input.size(); ++d)
    if (reduced[d])
      count *= input[d];
  return count;
}

llvm::Expected<ReduceAxes>
ReduceSpec::resolve(int64_t rank, llvm::ArrayRef<int64_t> operandAxes) const {
  llvm::ArrayRef<int64_t> values =
      axesFromOperand ? operandAxes : llvm::ArrayRef<int64_t>(attrAxes);
  auto normalized = normalizeAxisList(values, rank);
  if (!normalized)
    return normalized.takeError();
  ReduceAxes result;
  result.keepDims = keepDims;
  result.reduced.assign(rank, values.empty() && !noopWithEmptyAxes);
  for (unsigned axis : *normalized)
    result.reduced[axis] = true;
  for (unsigned d = 0; d != rank; ++d)
    if (result.reduced[d])
      result.axes.push_back(d);
  return result;
}

llvm::Expected<ReduceAxes> ArgReduceSpec::resolve(int64_t rank) const {
  auto normalized = checkAxis(axis, std::max<int64_t>(rank, 1));
  if (!normalized)
    return normalized.takeError();
  ReduceAxes result;
  result.keepDims = keepDims;
  result.reduced.assign(rank, false);
  if (rank) {
    result.reduced[*normalized] = true;
    result.axes.push_back(*normalized);
  }
  return result;
}

ArgReduceSpec ops::getArgReduceSpec(const Node &node) {
  ArgReduceSpec spec;
  spec.axis = node.getIntAttr("axis", 0);
  spec.keepDims = node.getIntAttr("keepdims", 1) != 0;
  spec.selectLastIndex = node.getIntAttr("select_last_index", 0) != 0;
  return spec;
}

ReduceSpec ops::getReduceSpec(const Node &node) {
  ReduceSpec spec;
  spec.keepDims = node.getIntAttr("keepdims", 1) != 0;
  spec.noopWithEmptyAxes = node.getIntAttr("noop_with_empty_axes", 0) != 0;
  spec.axesFromOperand = node.getNumOperands() > 1 && node.getOperand(1);
  spec.attrAxes = node.getIntsAttr("axes", {});
  return spec;
}

std::optional<std::vector<int64_t>>
ops::getStaticReduceAxes(const Node &node, const ReduceSpec &spec) {
  if (!spec.axesFromOperand)
    return spec.attrAxes;
  return getIntValues(*node.getOperand(1));
}

llvm::Expected<std::optional<ReduceAxes>>
ops::resolveStaticReduceAxes(const Node &node, const ReduceSpec &spec,
                             int64_t rank) {
  std::optional<std::vector<int64_t>> values = getStaticReduceAxes(node, spec);
  if (!values)
    return std::optional<ReduceAxes>();
  auto axes = spec.resolve(rank, *values);
  if (!axes)
    return axes.takeError();
  return std::optional<ReduceAxes>(std::move(*axes));
}
