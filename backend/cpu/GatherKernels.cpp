//===- GatherKernels.cpp - Gather, GatherElements and their gradients -----===//
//
// Gather and GatherElements (any element type, int32/int64 indices,
// negative indices counted from the end, out-of-range indices an error) and
// com.microsoft GatherGrad / GatherElementsGrad, which scatter-add dY into a
// zeroed dX. GatherGrad adds the rows of dY in index order: it splits work by
// outer slice or by column range, never by index, so repeated indices (an
// embedding's repeated tokens) accumulate in a fixed order.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/KernelSupport.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// Errors unless every index is in [-extent, extent).
template <typename I>
llvm::Error checkIndexRange(const KernelCall &call, const I *idx, int64_t count,
                            int64_t extent) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t index = static_cast<int64_t>(idx[i]);
    if (index < -extent || index >= extent)
      return call.error("index " + llvm::Twine(index) + " is out of range for extent " +
                        llvm::Twine(extent));
  }
  return llvm::Error::success();
}

/// A checked index with negative values counted from the end.
inline int64_t wrapIndex(int64_t index, int64_t extent) {
  return index < 0 ? index + extent : index;
}

/// Calls fn(idx) with the typed (int32 or int64) data of \p indices after
/// checking every index against \p extent.
template <typename Fn>
llvm::Error withIndices(const KernelCall &call, const TensorView &indices,
                        int64_t extent, Fn &&fn) {
  return dispatchIndex(call, indices.getDType(), [&](auto tag) -> llvm::Error {
    using I = typename decltype(tag)::type;
    const I *idx = indices.getDataAs<I>();
    if (llvm::Error err = checkIndexRange(call, idx, indices.getNumElements(), extent))
      return err;
    return fn(idx);
  });
}

/// Gather(data, indices) along `axis`.
llvm::Error gatherKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1);
  const TensorView &out = *call.out(0);
  if (data.getRank() == 0)
    return call.error("data must have rank >= 1");
  auto axis = normalizeAxis(call, call.getInt("axis", 0), data.getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t, 8> outShape(data.getShape().take_front(*axis));
  outShape.append(indices.getShape().begin(), indices.getShape().end());
  outShape.append(data.getShape().begin() + *axis + 1, data.getShape().end());
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (out.getDType() != data.getDType())
    return call.error("output element type differs from data's");
  int64_t extent = data.getDim(*axis);
  size_t elementSize = data.getElementSize();
  int64_t outer = product(data.getShape().take_front(*axis));
  int64_t count = indices.getNumElements();
  int64_t innerBytes = product(data.getShape().drop_front(*axis + 1)) * elementSize;
  const char *src = static_cast<const char *>(data.getData());
  char *dst = static_cast<char *>(out.getData());
  return withIndices(call, indices, extent, [&](auto *idx) -> llvm::Error {
    parallelFor(call.getNumThreads(), outer * count, grainFor(innerBytes / 4 + 1),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t t = lo; t < hi; ++t) {
                    int64_t o = t / count, i = t % count;
                    int64_t index = wrapIndex(static_cast<int64_t>(idx[i]), extent);
                    if (innerBytes)
                      std::memcpy(dst + t * innerBytes,
                                  src + (o * extent + index) * innerBytes, innerBytes);
                  }
                });
    return llvm::Error::success();
  });
}

/// Visits every position of \p indices as (linear position, offset in a
/// tensor of \p dataShape with the axis coordinate replaced by the index).
template <typename I, typename Fn>
void forEachElementIndex(llvm::ArrayRef<int64_t> indexShape,
                         llvm::ArrayRef<int64_t> dataShape, unsigned axis,
                         const I *idx, const Fn &fn) {
  unsigned rank = indexShape.size();
  llvm::SmallVector<int64_t, 6> strides = contiguousStrides(dataShape);
  llvm::SmallVector<int64_t, 6> coord(rank, 0);
  int64_t extent = dataShape[axis];
  int64_t base = 0; // Offset of coord with the axis coordinate at 0.
  for (int64_t i = 0, e = product(indexShape); i < e; ++i) {
    fn(i, base + wrapIndex(static_cast<int64_t>(idx[i]), extent) * strides[axis]);
    for (int d = rank - 1; d >= 0; --d) {
      if (d != static_cast<int>(axis))
        base += strides[d];
      if (++coord[d] < indexShape[d])
        break;
      if (d != static_cast<int>(axis))
        base -= strides[d] * indexShape[d];
      coord[d] = 0;
    }
  }
}

/// Checks GatherElements' indices against data: same rank, and no larger
/// than data outside the axis.
llvm::Error checkElementIndices(const KernelCall &call, llvm::ArrayRef<int64_t> dataShape,
                                llvm::ArrayRef<int64_t> indexShape, unsigned axis) {
  if (dataShape.size() != indexShape.size())
    return call.error("indices must have data's rank");
  for (unsigned d = 0; d < dataShape.size(); ++d)
    if (d != axis && indexShape[d] > dataShape[d])
      return call.error("indices " + shapeString(indexShape) + " exceed data " +
                        shapeString(dataShape) + " outside the axis");
  return llvm::Error::success();
}

/// GatherElements(data, indices) along `axis`.
llvm::Error gatherElementsKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1);
  const TensorView &out = *call.out(0);
  if (data.getRank() == 0)
    return call.error("data must have rank >= 1");
  auto axis = normalizeAxis(call, call.getInt("axis", 0), data.getRank());
  if (!axis)
    return axis.takeError();
  if (llvm::Error err = checkElementIndices(call, data.getShape(), indices.getShape(), *axis))
    return err;
  if (llvm::Error err = checkOutputShape(call, 0, indices.getShape()))
    return err;
  if (out.getDType() != data.getDType())
    return call.error("output element type differs from data's");
  return dispatchStorage(call, data.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    const U *src = data.getDataAs<U>();
    U *dst = out.getDataAs<U>();
    return withIndices(call, indices, data.getDim(*axis), [&](auto *idx) -> llvm::Error {
      forEachElementIndex(indices.getShape(), data.getShape(), *axis, idx,
                          [&](int64_t i, int64_t offset) { dst[i] = src[offset]; });
      return llvm::Error::success();
    });
  });
}

/// Reads a "shape" operand and checks it against dX.
llvm::Error checkShapeOperand(const KernelCall &call, const TensorView &shape,
                              const TensorView &dX) {
  auto dims = readInts(call, shape, "shape");
  if (!dims)
    return dims.takeError();
  if (llvm::ArrayRef<int64_t>(*dims) != dX.getShape())
    return call.error("dX has shape " + shapeString(dX.getShape()) +
                      " but the shape operand says " + shapeString(*dims));
  return llvm::Error::success();
}

/// GatherGrad(shape, indices, dY) -> dX.
llvm::Error gatherGradKernel(KernelCall &call) {
  const TensorView &indices = *call.in(1), &dY = *call.in(2);
  TensorView &dX = *call.out(0);
  if (llvm::Error err = checkShapeOperand(call, *call.in(0), dX))
    return err;
  if (dX.getRank() == 0)
    return call.error("dX must have rank >= 1");
  auto axis = normalizeAxis(call, call.getInt("axis", 0), dX.getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t, 8> gatheredShape(dX.getShape().take_front(*axis));
  gatheredShape.append(indices.getShape().begin(), indices.getShape().end());
  gatheredShape.append(dX.getShape().begin() + *axis + 1, dX.getShape().end());
  if (dY.getShape() != llvm::ArrayRef<int64_t>(gatheredShape))
    return call.error("dY has shape " + shapeString(dY.getShape()) + ", expected " +
                      shapeString(gatheredShape));
  int64_t extent = dX.getDim(*axis);
  return dispatchFloat(call, dX.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (dY.getDType() != dX.getDType())
      return call.error("dY and dX must have one element type");
    const T *g = dY.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    std::fill(out, out + dX.getNumElements(), T(0));
    int64_t outer = product(dX.getShape().take_front(*axis));
    int64_t count = indices.getNumElements();
    int64_t inner = product(dX.getShape().drop_front(*axis + 1));
    // Tasks: (outer slice, column chunk); each adds all indices in order.
    int64_t grain = std::max<int64_t>(64, grainFor(count));
    int64_t chunks = std::max<int64_t>(numChunks(inner, grain), 1);
    return withIndices(call, indices, extent, [&](auto *idx) -> llvm::Error {
      parallelFor(call.getNumThreads(), outer * chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t task = lo; task < hi; ++task) {
          int64_t o = task / chunks;
          int64_t begin = (task % chunks) * grain, end = std::min(inner, begin + grain);
          for (int64_t i = 0; i < count; ++i) {
            int64_t index = wrapIndex(static_cast<int64_t>(idx[i]), extent);
            const T *from = g + (o * count + i) * inner;
            T *to = out + (o * extent + index) * inner;
            for (int64_t j = begin; j < end; ++j)
              to[j] += from[j];
          }
        }
      });
      return llvm::Error::success();
    });
  });
}

/// GatherElementsGrad(dY, shape, indices) -> dX.
llvm::Error gatherElementsGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0), &indices = *call.in(2);
  TensorView &dX = *call.out(0);
  if (llvm::Error err = checkShapeOperand(call, *call.in(1), dX))
    return err;
  if (dX.getRank() == 0)
    return call.error("dX must have rank >= 1");
  auto axis = normalizeAxis(call, call.getInt("axis", 0), dX.getRank());
  if (!axis)
    return axis.takeError();
  if (llvm::Error err = checkElementIndices(call, dX.getShape(), indices.getShape(), *axis))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, indices, "dY and indices"))
    return err;
  return dispatchFloat(call, dX.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (dY.getDType() != dX.getDType())
      return call.error("dY and dX must have one element type");
    const T *g = dY.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    std::fill(out, out + dX.getNumElements(), T(0));
    return withIndices(call, indices, dX.getDim(*axis), [&](auto *idx) -> llvm::Error {
      forEachElementIndex(indices.getShape(), dX.getShape(), *axis, idx,
                          [&](int64_t i, int64_t offset) { out[offset] += g[i]; });
      return llvm::Error::success();
    });
  });
}

} // namespace

void cpu::registerGatherKernels(KernelTable &table) {
  table.add("", "Gather", gatherKernel, 2, 1, KernelMode::Native);
  table.add("", "GatherElements", gatherElementsKernel, 2, 1, KernelMode::Native);
  table.add(kMsDomain, "GatherGrad", gatherGradKernel, 3);
  table.add(kMsDomain, "GatherElementsGrad", gatherElementsGradKernel, 3);
}
