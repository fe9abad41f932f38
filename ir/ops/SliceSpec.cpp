//===- SliceSpec.cpp - Where a Slice sits in its source -------------------===//
//
// resolveSlice of SliceSpec.h: the lists checked once, each named axis
// clamped by ops::sliceRange.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/SliceSpec.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ShapeInference.h"

using namespace gmopt;
using namespace gmopt::ops;

llvm::Expected<SliceSpec> ops::resolveSlice(llvm::ArrayRef<int64_t> inShape,
                                            llvm::ArrayRef<int64_t> starts,
                                            llvm::ArrayRef<int64_t> ends,
                                            llvm::ArrayRef<int64_t> axes,
                                            llvm::ArrayRef<int64_t> steps) {
  auto error = [](const char *message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  size_t count = starts.size();
  if (ends.size() != count || (!axes.empty() && axes.size() != count) ||
      (!steps.empty() && steps.size() != count))
    return error("starts, ends, axes and steps differ in length");
  int64_t rank = inShape.size();
  SliceSpec spec;
  spec.begin.assign(rank, 0);
  spec.step.assign(rank, 1);
  spec.shape.assign(inShape.begin(), inShape.end());
  llvm::SmallVector<bool, 6> seen(rank, false);
  for (size_t i = 0; i != count; ++i) {
    auto axis =
        checkAxis(axes.empty() ? int64_t(i) : axes[i], rank, "axes entry");
    if (!axis)
      return axis.takeError();
    if (seen[*axis])
      return error("repeated axis");
    seen[*axis] = true;
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0)
      return error("steps must not be zero");
    auto [first, taken] = sliceRange(inShape[*axis], starts[i], ends[i], step);
    spec.begin[*axis] = first;
    spec.step[*axis] = step;
    spec.shape[*axis] = taken;
  }
  return spec;
}
