//===- GatherKernels.cpp - Gathers, scatters and their gradients ----------===//
//
// Gather, GatherElements and GatherND (any element type, int32/int64
// indices, negative indices counted from the end, out-of-range indices an
// error), ScatterElements and ScatterND (with the opset-16 reductions), and
// com.microsoft GatherGrad / GatherElementsGrad / GatherNDGrad, which
// scatter-add dY into a zeroed dX. GatherGrad adds the rows of dY in index
// order: it splits work by outer slice or by column range, never by index,
// so repeated indices (an embedding's repeated tokens) accumulate in a fixed
// order.
//
//===----------------------------------------------------------------------===//

#include "backend/ScatterMath.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/Axes.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;
using gmopt::ops::ScatterReduction;

namespace {

/// Errors unless every index is in [-extent, extent).
template <typename I>
llvm::Error checkIndexRange(const KernelCall &call, const I *idx, int64_t count,
                            int64_t extent) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t index = static_cast<int64_t>(idx[i]);
    if (index < -extent || index >= extent)
      return call.error("index " + llvm::Twine(index) +
                        " is out of range for extent " + llvm::Twine(extent));
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
    if (llvm::Error err =
            checkIndexRange(call, idx, indices.getNumElements(), extent))
      return err;
    return fn(idx);
  });
}

/// What a gather or scatter node's attributes say, decoded at prepare: the
/// `axis` as written (normalized at launch against the tensor's rank),
/// GatherND's `batch_dims` and a scatter's `reduction`.
struct IndexingAttrs {
  int64_t axis = 0;
  int64_t batchDims = 0;
  ScatterReduction reduction = ScatterReduction::None;
};

/// The rank of \p value's static type, or nullopt when unranked.
std::optional<int64_t> staticRank(const Value *value) {
  if (!value || !value->getType().hasRank())
    return std::nullopt;
  return value->getType().getRank();
}

/// \p node's `axis` over the tensor \p indexed (its data or its dX), checked
/// against that tensor's static rank where it has one (rank 0 is left to the
/// kernel's own "rank >= 1" error).
llvm::Expected<IndexingAttrs> readAxisAttrs(const Node &node,
                                            const Value *indexed) {
  IndexingAttrs attrs;
  attrs.axis = node.getIntAttr("axis", 0);
  if (std::optional<int64_t> rank = staticRank(indexed); rank && *rank > 0)
    if (llvm::Error err = ops::checkAxis(attrs.axis, *rank).takeError())
      return prepareError(node, llvm::toString(std::move(err)));
  return attrs;
}

/// Gather and GatherElements index their data, operand 0.
llvm::Expected<std::unique_ptr<KernelState>> prepareDataAxis(const Node &node) {
  auto attrs = readAxisAttrs(node, node.getOperand(0));
  if (!attrs)
    return attrs.takeError();
  return makeKernelState(*attrs);
}

/// GatherGrad and GatherElementsGrad index their result dX.
llvm::Expected<std::unique_ptr<KernelState>> prepareGradAxis(const Node &node) {
  auto attrs = readAxisAttrs(node, node.getResult(0));
  if (!attrs)
    return attrs.takeError();
  return makeKernelState(*attrs);
}

/// Gather(data, indices) along `axis`.
llvm::Error gatherKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1);
  const TensorView &out = *call.out(0);
  if (data.getRank() == 0)
    return call.error("data must have rank >= 1");
  auto axis =
      normalizeAxis(call, call.getState<IndexingAttrs>().axis, data.getRank());
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
  int64_t innerBytes =
      product(data.getShape().drop_front(*axis + 1)) * elementSize;
  const char *src = static_cast<const char *>(data.getData());
  char *dst = static_cast<char *>(out.getData());
  return withIndices(call, indices, extent, [&](auto *idx) -> llvm::Error {
    parallelFor(
        call.getNumThreads(), outer * count, grainFor(innerBytes / 4 + 1),
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
    fn(i,
       base + wrapIndex(static_cast<int64_t>(idx[i]), extent) * strides[axis]);
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
llvm::Error checkElementIndices(const KernelCall &call,
                                llvm::ArrayRef<int64_t> dataShape,
                                llvm::ArrayRef<int64_t> indexShape,
                                unsigned axis) {
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
  auto axis =
      normalizeAxis(call, call.getState<IndexingAttrs>().axis, data.getRank());
  if (!axis)
    return axis.takeError();
  if (llvm::Error err =
          checkElementIndices(call, data.getShape(), indices.getShape(), *axis))
    return err;
  if (llvm::Error err = checkOutputShape(call, 0, indices.getShape()))
    return err;
  if (out.getDType() != data.getDType())
    return call.error("output element type differs from data's");
  return dispatchStorage(call, data.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    const U *src = data.getDataAs<U>();
    U *dst = out.getDataAs<U>();
    return withIndices(
        call, indices, data.getDim(*axis), [&](auto *idx) -> llvm::Error {
          forEachElementIndex(
              indices.getShape(), data.getShape(), *axis, idx,
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
  auto axis =
      normalizeAxis(call, call.getState<IndexingAttrs>().axis, dX.getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t, 8> gatheredShape(dX.getShape().take_front(*axis));
  gatheredShape.append(indices.getShape().begin(), indices.getShape().end());
  gatheredShape.append(dX.getShape().begin() + *axis + 1, dX.getShape().end());
  if (dY.getShape() != llvm::ArrayRef<int64_t>(gatheredShape))
    return call.error("dY has shape " + shapeString(dY.getShape()) +
                      ", expected " + shapeString(gatheredShape));
  int64_t extent = dX.getDim(*axis);
  return dispatchFloat(call, dX.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (dY.getDType() != dX.getDType())
      return call.error("dY and dX must have one element type");
    const T *g = dY.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    zeroFill(dX, call.getNumThreads());
    int64_t outer = product(dX.getShape().take_front(*axis));
    int64_t count = indices.getNumElements();
    int64_t inner = product(dX.getShape().drop_front(*axis + 1));
    // Tasks: (outer slice, column chunk); each adds all indices in order.
    int64_t grain = std::max<int64_t>(256, grainFor(count));
    int64_t chunks = std::max<int64_t>(numChunks(inner, grain), 1);
    return withIndices(call, indices, extent, [&](auto *idx) -> llvm::Error {
      parallelFor(
          call.getNumThreads(), outer * chunks, 1, [&](int64_t lo, int64_t hi) {
            for (int64_t task = lo; task < hi; ++task) {
              int64_t o = task / chunks;
              int64_t begin = (task % chunks) * grain,
                      end = std::min(inner, begin + grain);
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
  auto axis =
      normalizeAxis(call, call.getState<IndexingAttrs>().axis, dX.getRank());
  if (!axis)
    return axis.takeError();
  if (llvm::Error err =
          checkElementIndices(call, dX.getShape(), indices.getShape(), *axis))
    return err;
  if (llvm::Error err = checkSameShape(call, dY, indices, "dY and indices"))
    return err;
  return dispatchFloat(call, dX.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (dY.getDType() != dX.getDType())
      return call.error("dY and dX must have one element type");
    const T *g = dY.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    zeroFill(dX, call.getNumThreads());
    return withIndices(
        call, indices, dX.getDim(*axis), [&](auto *idx) -> llvm::Error {
          forEachElementIndex(
              indices.getShape(), dX.getShape(), *axis, idx,
              [&](int64_t i, int64_t offset) { out[offset] += g[i]; });
          return llvm::Error::success();
        });
  });
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND, ScatterElements
//===----------------------------------------------------------------------===//

/// How GatherND / ScatterND / GatherNDGrad address `data` with `indices`.
struct NDIndexing {
  /// Batch count, index tuples per batch, tuple length.
  int64_t batches = 1, tuples = 0, depth = 0;
  /// Elements copied per tuple (the trailing data dimensions).
  int64_t block = 1;
  /// Elements per batch in data.
  int64_t batchSize = 1;
  /// The data extents the tuple entries index, and their strides (in
  /// blocks).
  llvm::SmallVector<int64_t, 6> extents, strides;
};

/// The message of \p batchDims that ranks \p dataRank and \p indexRank do
/// not fit, or nullopt when they do.
std::optional<std::string> batchDimsMisfit(int64_t batchDims, int64_t dataRank,
                                           int64_t indexRank) {
  if (indexRank >= 1 && batchDims >= 0 &&
      batchDims < std::min(dataRank, indexRank))
    return std::nullopt;
  return ("batch_dims " + llvm::Twine(batchDims) + " does not fit ranks " +
          llvm::Twine(dataRank) + " and " + llvm::Twine(indexRank))
      .str();
}

llvm::Expected<NDIndexing> resolveND(const KernelCall &call,
                                     llvm::ArrayRef<int64_t> data,
                                     llvm::ArrayRef<int64_t> indices,
                                     int64_t batchDims) {
  int64_t dataRank = data.size(), indexRank = indices.size();
  if (std::optional<std::string> misfit =
          batchDimsMisfit(batchDims, dataRank, indexRank))
    return call.error(*misfit);
  NDIndexing nd;
  nd.depth = indices.back();
  if (nd.depth < 1 || batchDims + nd.depth > dataRank)
    return call.error("index tuples of length " + llvm::Twine(nd.depth) +
                      " do not fit data of rank " + llvm::Twine(dataRank));
  if (data.take_front(batchDims) != indices.take_front(batchDims))
    return call.error("batch dimensions of data and indices differ");
  nd.batches = product(data.take_front(batchDims));
  nd.tuples = product(indices.slice(batchDims, indexRank - 1 - batchDims));
  nd.block = product(data.drop_front(batchDims + nd.depth));
  nd.batchSize = product(data.drop_front(batchDims));
  nd.extents.assign(data.begin() + batchDims,
                    data.begin() + batchDims + nd.depth);
  nd.strides.assign(nd.depth, 1);
  for (int64_t j = nd.depth - 2; j >= 0; --j)
    nd.strides[j] = nd.strides[j + 1] * nd.extents[j + 1];
  return nd;
}

/// The output shape of GatherND: indices[:-1] + data[batch_dims + depth:].
llvm::SmallVector<int64_t, 6> gatherNDShape(llvm::ArrayRef<int64_t> data,
                                            llvm::ArrayRef<int64_t> indices,
                                            const NDIndexing &nd,
                                            int64_t batchDims) {
  llvm::SmallVector<int64_t, 6> shape(indices.drop_back());
  shape.append(data.begin() + batchDims + nd.depth, data.end());
  return shape;
}

/// Calls fn(batch, tuple, dataBlockOffset) for every index tuple, after
/// checking every entry (negative entries count from the end).
template <typename Fn>
llvm::Error forEachTuple(const KernelCall &call, const TensorView &indices,
                         const NDIndexing &nd, const Fn &fn) {
  return dispatchIndex(call, indices.getDType(), [&](auto tag) -> llvm::Error {
    using I = typename decltype(tag)::type;
    const I *idx = indices.getDataAs<I>();
    for (int64_t b = 0; b < nd.batches; ++b)
      for (int64_t t = 0; t < nd.tuples; ++t) {
        const I *tuple = idx + (b * nd.tuples + t) * nd.depth;
        int64_t offset = 0;
        for (int64_t j = 0; j < nd.depth; ++j) {
          int64_t index = static_cast<int64_t>(tuple[j]);
          if (index < -nd.extents[j] || index >= nd.extents[j])
            return call.error("index " + llvm::Twine(index) +
                              " is out of range for extent " +
                              llvm::Twine(nd.extents[j]));
          offset += wrapIndex(index, nd.extents[j]) * nd.strides[j];
        }
        fn(b, t, b * nd.batchSize + offset * nd.block);
      }
    return llvm::Error::success();
  });
}

/// GatherND's and GatherNDGrad's `batch_dims`, checked against the static
/// ranks of the indexed tensor \p indexed (data or dX) and the indices.
llvm::Expected<std::unique_ptr<KernelState>>
readBatchDims(const Node &node, const Value *indexed) {
  IndexingAttrs attrs;
  attrs.batchDims = node.getIntAttr("batch_dims", 0);
  std::optional<int64_t> dataRank = staticRank(indexed),
                         indexRank = staticRank(node.getOperand(1));
  if (dataRank && indexRank)
    if (std::optional<std::string> misfit =
            batchDimsMisfit(attrs.batchDims, *dataRank, *indexRank))
      return prepareError(node, *misfit);
  return makeKernelState(attrs);
}

llvm::Expected<std::unique_ptr<KernelState>> prepareGatherND(const Node &node) {
  return readBatchDims(node, node.getOperand(0));
}

llvm::Expected<std::unique_ptr<KernelState>>
prepareGatherNDGrad(const Node &node) {
  return readBatchDims(node, node.getResult(0));
}

/// GatherND(data, indices) with batch_dims.
llvm::Error gatherNDKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1);
  const TensorView &out = *call.out(0);
  int64_t batchDims = call.getState<IndexingAttrs>().batchDims;
  auto nd = resolveND(call, data.getShape(), indices.getShape(), batchDims);
  if (!nd)
    return nd.takeError();
  if (llvm::Error err = checkOutputShape(
          call, 0,
          gatherNDShape(data.getShape(), indices.getShape(), *nd, batchDims)))
    return err;
  if (out.getDType() != data.getDType())
    return call.error("output element type differs from data's");
  size_t blockBytes = nd->block * data.getElementSize();
  const char *src = static_cast<const char *>(data.getData());
  char *dst = static_cast<char *>(out.getData());
  return forEachTuple(
      call, indices, *nd, [&](int64_t b, int64_t t, int64_t offset) {
        if (blockBytes)
          std::memcpy(dst + (b * nd->tuples + t) * blockBytes,
                      src + offset * data.getElementSize(), blockBytes);
      });
}

/// GatherNDGrad(shape, indices, update) -> dX: zeros plus every update
/// block added at its tuple's position, in tuple order.
llvm::Error gatherNDGradKernel(KernelCall &call) {
  const TensorView &indices = *call.in(1), &update = *call.in(2);
  TensorView &dX = *call.out(0);
  if (llvm::Error err = checkShapeOperand(call, *call.in(0), dX))
    return err;
  int64_t batchDims = call.getState<IndexingAttrs>().batchDims;
  auto nd = resolveND(call, dX.getShape(), indices.getShape(), batchDims);
  if (!nd)
    return nd.takeError();
  auto expected =
      gatherNDShape(dX.getShape(), indices.getShape(), *nd, batchDims);
  if (update.getShape() != llvm::ArrayRef<int64_t>(expected))
    return call.error("update has shape " + shapeString(update.getShape()) +
                      ", expected " + shapeString(expected));
  return dispatchFloat(call, dX.getDType(), [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (update.getDType() != dX.getDType())
      return call.error("update and dX must have one element type");
    const T *g = update.getDataAs<T>();
    T *out = dX.getDataAs<T>();
    zeroFill(dX, call.getNumThreads());
    int64_t block = nd->block;
    return forEachTuple(call, indices, *nd,
                        [&](int64_t b, int64_t t, int64_t offset) {
                          const T *from = g + (b * nd->tuples + t) * block;
                          for (int64_t j = 0; j < block; ++j)
                            out[offset + j] += from[j];
                        });
  });
}

/// A scatter's `reduction` (ops::getScatterReduction) into \p attrs.
llvm::Error readScatterReduction(const Node &node, IndexingAttrs &attrs) {
  auto reduction = ops::getScatterReduction(node);
  if (!reduction)
    return prepareError(node, llvm::toString(reduction.takeError()));
  attrs.reduction = *reduction;
  return llvm::Error::success();
}

/// ScatterElements: its `axis` over data and its `reduction`.
llvm::Expected<std::unique_ptr<KernelState>>
prepareScatterElements(const Node &node) {
  auto attrs = readAxisAttrs(node, node.getOperand(0));
  if (!attrs)
    return attrs.takeError();
  if (llvm::Error err = readScatterReduction(node, *attrs))
    return err;
  return makeKernelState(*attrs);
}

/// ScatterND: its `reduction`.
llvm::Expected<std::unique_ptr<KernelState>>
prepareScatterND(const Node &node) {
  IndexingAttrs attrs;
  if (llvm::Error err = readScatterReduction(node, attrs))
    return err;
  return makeKernelState(attrs);
}

/// Scatter kernels run on the output after copying data into it: without a
/// reduction any element type (bytes), with one the arithmetic types.
template <typename Fn>
llvm::Error dispatchScatter(const KernelCall &call, DType type,
                            ScatterReduction reduction, const Fn &fn) {
  if (reduction == ScatterReduction::None)
    return dispatchStorage(call, type, fn);
  return dispatchTypes<float, double, int64_t, int32_t>(call, type, fn);
}

/// ScatterElements(data, indices, updates) along `axis`.
llvm::Error scatterElementsKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1),
                   &updates = *call.in(2);
  const TensorView &out = *call.out(0);
  if (data.getRank() == 0)
    return call.error("data must have rank >= 1");
  auto axis =
      normalizeAxis(call, call.getState<IndexingAttrs>().axis, data.getRank());
  if (!axis)
    return axis.takeError();
  ScatterReduction reduction = call.getState<IndexingAttrs>().reduction;
  if (llvm::Error err =
          checkElementIndices(call, data.getShape(), indices.getShape(), *axis))
    return err;
  if (llvm::Error err =
          checkSameShape(call, indices, updates, "indices and updates"))
    return err;
  if (llvm::Error err = checkOutputShape(call, 0, data.getShape()))
    return err;
  if (out.getDType() != data.getDType() ||
      updates.getDType() != data.getDType())
    return call.error("data, updates and output must have one element type");
  copyElements(data, out);
  return dispatchScatter(
      call, data.getDType(), reduction, [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        const T *u = updates.getDataAs<T>();
        T *y = out.getDataAs<T>();
        return withIndices(
            call, indices, data.getDim(*axis), [&](auto *idx) -> llvm::Error {
              forEachElementIndex(indices.getShape(), data.getShape(), *axis,
                                  idx, [&](int64_t i, int64_t offset) {
                                    y[offset] = combineScatter(reduction,
                                                               y[offset], u[i]);
                                  });
              return llvm::Error::success();
            });
      });
}

/// ScatterND(data, indices, updates).
llvm::Error scatterNDKernel(KernelCall &call) {
  const TensorView &data = *call.in(0), &indices = *call.in(1),
                   &updates = *call.in(2);
  const TensorView &out = *call.out(0);
  ScatterReduction reduction = call.getState<IndexingAttrs>().reduction;
  auto nd = resolveND(call, data.getShape(), indices.getShape(), 0);
  if (!nd)
    return nd.takeError();
  auto expected = gatherNDShape(data.getShape(), indices.getShape(), *nd, 0);
  if (updates.getShape() != llvm::ArrayRef<int64_t>(expected))
    return call.error("updates have shape " + shapeString(updates.getShape()) +
                      ", expected " + shapeString(expected));
  if (llvm::Error err = checkOutputShape(call, 0, data.getShape()))
    return err;
  if (out.getDType() != data.getDType() ||
      updates.getDType() != data.getDType())
    return call.error("data, updates and output must have one element type");
  copyElements(data, out);
  return dispatchScatter(
      call, data.getDType(), reduction, [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        const T *u = updates.getDataAs<T>();
        T *y = out.getDataAs<T>();
        int64_t block = nd->block;
        return forEachTuple(
            call, indices, *nd, [&](int64_t, int64_t t, int64_t offset) {
              for (int64_t j = 0; j < block; ++j)
                y[offset + j] =
                    combineScatter(reduction, y[offset + j], u[t * block + j]);
            });
      });
}

} // namespace

void cpu::registerGatherKernels(KernelTable &table) {
  table.add("", "Gather", gatherKernel, KernelMode::Native);
  table.setPrepare("", "Gather", prepareDataAxis);
  table.add("", "GatherElements", gatherElementsKernel, KernelMode::Native);
  table.setPrepare("", "GatherElements", prepareDataAxis);
  table.add(kMsDomain, "GatherGrad", gatherGradKernel);
  table.setPrepare(kMsDomain, "GatherGrad", prepareGradAxis);
  table.add(kMsDomain, "GatherElementsGrad", gatherElementsGradKernel);
  table.setPrepare(kMsDomain, "GatherElementsGrad", prepareGradAxis);
  table.add("", "GatherND", gatherNDKernel, KernelMode::Native);
  table.setPrepare("", "GatherND", prepareGatherND);
  table.add(kMsDomain, "GatherNDGrad", gatherNDGradKernel);
  table.setPrepare(kMsDomain, "GatherNDGrad", prepareGatherNDGrad);
  table.add("", "ScatterElements", scatterElementsKernel, KernelMode::Native);
  table.setPrepare("", "ScatterElements", prepareScatterElements);
  table.add("", "ScatterND", scatterNDKernel, KernelMode::Native);
  table.setPrepare("", "ScatterND", prepareScatterND);
}
