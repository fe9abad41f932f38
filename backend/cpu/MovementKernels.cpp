//===- MovementKernels.cpp - Data movement: transpose, concat, slice... ---===//
//
// Kernels that move elements without computing on them, for every element
// type: Transpose, Concat and com.microsoft ConcatTraining, Split and
// SplitTraining, Slice (attribute form of opset 1 and input form of opset
// 10+, negative steps included) and com.microsoft SliceGrad, Pad, Expand,
// Tile, Trilu and OneHot. Contiguous runs are copied with memcpy.
//
//===----------------------------------------------------------------------===//

#include "backend/WindowMath.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/ShapeEval.h"
#include "ir/ops/SliceSpec.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// A node's one axis attribute (Concat, Split, OneHot), decoded at prepare.
struct AxisState {
  int64_t axis = 0;
};

/// An integer-list attribute (Transpose's perm, Split's split), decoded at
/// prepare; `given` tells an absent list from an empty one.
struct IntsState {
  int64_t axis = 0;
  std::vector<int64_t> values;
  bool given = false;
};

llvm::Expected<std::unique_ptr<KernelState>>
prepareTranspose(const Node &node) {
  return makeKernelState(
      IntsState{0, node.getIntsAttr("perm", {}), node.hasAttr("perm")});
}

/// Transpose(data) with `perm` (default: reversed dimensions).
llvm::Error transposeKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  unsigned rank = in.getRank();
  const std::vector<int64_t> &permAttr = call.getState<IntsState>().values;
  llvm::SmallVector<unsigned, 6> perm;
  if (permAttr.empty()) {
    for (unsigned d = 0; d < rank; ++d)
      perm.push_back(rank - 1 - d);
  } else {
    if (permAttr.size() != rank)
      return call.error("perm has " + llvm::Twine(permAttr.size()) +
                        " entries for rank " + llvm::Twine(rank));
    llvm::SmallVector<bool, 6> seen(rank, false);
    for (int64_t p : permAttr) {
      auto axis = normalizeAxis(call, p, rank, "perm entry");
      if (!axis)
        return axis.takeError();
      if (seen[*axis])
        return call.error("perm is not a permutation");
      seen[*axis] = true;
      perm.push_back(*axis);
    }
  }
  llvm::SmallVector<int64_t, 6> outShape;
  for (unsigned p : perm)
    outShape.push_back(in.getDim(p));
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  if (dtypeSize(in.getDType()) == 0 || in.getDType() == DType::U4 ||
      in.getDType() == DType::I4)
    return unsupportedType(call, in.getDType());
  transposeInto(in, out, perm, call.getNumThreads());
  return llvm::Error::success();
}

/// Copies blocks between a tensor cut along `axis` and its pieces: with
/// \p gather the pieces are read into \p whole (Concat), else written from
/// it (Split).
void copyAlongAxis(const TensorView &whole,
                   llvm::ArrayRef<const TensorView *> pieces, unsigned axis,
                   bool gather, unsigned threads) {
  size_t elementSize = whole.getElementSize();
  int64_t outer = product(whole.getShape().take_front(axis));
  int64_t wholeRow = product(whole.getShape().drop_front(axis)) * elementSize;
  char *base = static_cast<char *>(whole.getData());
  parallelFor(
      threads, outer, grainFor(wholeRow / 4 + 1), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          int64_t offset = 0;
          for (const TensorView *piece : pieces) {
            int64_t row =
                product(piece->getShape().drop_front(axis)) * elementSize;
            char *wholePtr = base + o * wholeRow + offset;
            char *piecePtr = static_cast<char *>(piece->getData()) + o * row;
            if (row) {
              if (gather)
                std::memcpy(wholePtr, piecePtr, row);
              else
                std::memcpy(piecePtr, wholePtr, row);
            }
            offset += row;
          }
        }
      });
}

llvm::Expected<std::unique_ptr<KernelState>> prepareConcat(const Node &node) {
  if (!node.hasAttr("axis"))
    return prepareError(node, "missing attribute 'axis'");
  return makeKernelState(AxisState{node.getIntAttr("axis", 0)});
}

/// Concat(inputs...) and ConcatTraining (with per_input_length output).
template <bool Training> llvm::Error concatKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  unsigned rank = out.getRank();
  auto axis = normalizeAxis(call, call.getState<AxisState>().axis, rank);
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<const TensorView *, 8> pieces;
  llvm::SmallVector<int64_t, 8> lengths;
  int64_t total = 0;
  for (const TensorView *input : call.getInputs()) {
    if (!input)
      return call.error("inputs may not be absent");
    if (input->getDType() != out.getDType() || input->getRank() != rank)
      return call.error("inputs must match the output's element type and rank");
    for (unsigned d = 0; d < rank; ++d)
      if (d != *axis && input->getDim(d) != out.getDim(d))
        return call.error("input " + shapeString(input->getShape()) +
                          " does not fit output " +
                          shapeString(out.getShape()));
    total += input->getDim(*axis);
    lengths.push_back(input->getDim(*axis));
    pieces.push_back(input);
  }
  if (total != out.getDim(*axis))
    return call.error("inputs add up to " + llvm::Twine(total) +
                      " along the axis, the output has " +
                      llvm::Twine(out.getDim(*axis)));
  copyAlongAxis(out, pieces, *axis, /*gather=*/true, call.getNumThreads());
  if (Training && call.out(1)) {
    TensorView &lengthOut = *call.out(1);
    if (llvm::Error err =
            checkDType(call, lengthOut, DType::I64, "per_input_length"))
      return err;
    if (lengthOut.getNumElements() != static_cast<int64_t>(lengths.size()))
      return call.error("per_input_length must have one element per input");
    std::memcpy(lengthOut.getData(), lengths.data(),
                lengths.size() * sizeof(int64_t));
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<KernelState>> prepareSplit(const Node &node) {
  return makeKernelState(IntsState{node.getIntAttr("axis", 0),
                                   node.getIntsAttr("split", {}),
                                   node.hasAttr("split")});
}

/// Split(input, split?) and SplitTraining(input, split): the pieces are the
/// outputs; their extents along the axis must match `split` when given.
llvm::Error splitKernel(KernelCall &call) {
  const TensorView &in = *call.in(0);
  unsigned rank = in.getRank();
  const auto &state = call.getState<IntsState>();
  auto axis = normalizeAxis(call, state.axis, rank);
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t, 8> split;
  if (const TensorView *splitInput = call.in(1)) {
    auto values = readInts(call, *splitInput, "split");
    if (!values)
      return values.takeError();
    split = std::move(*values);
  } else if (state.given) {
    split.assign(state.values.begin(), state.values.end());
  }
  llvm::SmallVector<const TensorView *, 8> pieces;
  int64_t total = 0;
  for (unsigned i = 0; i < call.getNumOutputs(); ++i) {
    const TensorView *piece = call.out(i);
    if (!piece)
      return call.error("split outputs may not be absent");
    if (piece->getDType() != in.getDType() || piece->getRank() != rank)
      return call.error("outputs must match the input's element type and rank");
    for (unsigned d = 0; d < rank; ++d)
      if (d != *axis && piece->getDim(d) != in.getDim(d))
        return call.error("output " + shapeString(piece->getShape()) +
                          " does not fit input " + shapeString(in.getShape()));
    if (!split.empty() &&
        (i >= split.size() || split[i] != piece->getDim(*axis)))
      return call.error("output " + llvm::Twine(i) + " disagrees with 'split'");
    total += piece->getDim(*axis);
    pieces.push_back(piece);
  }
  if (!split.empty() && split.size() != pieces.size())
    return call.error("'split' has " + llvm::Twine(split.size()) +
                      " entries for " + llvm::Twine(pieces.size()) +
                      " outputs");
  if (total != in.getDim(*axis))
    return call.error("outputs add up to " + llvm::Twine(total) +
                      " along the axis, the input has " +
                      llvm::Twine(in.getDim(*axis)));
  copyAlongAxis(in, pieces, *axis, /*gather=*/false, call.getNumThreads());
  return llvm::Error::success();
}

/// Slice's opset-1 attributes (starts, ends, axes), decoded at prepare.
struct SliceAttrs {
  std::vector<int64_t> starts, ends, axes;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareSlice(const Node &node) {
  return makeKernelState(SliceAttrs{node.getIntsAttr("starts", {}),
                                    node.getIntsAttr("ends", {}),
                                    node.getIntsAttr("axes", {})});
}

/// Resolves Slice's starts/ends/axes/steps (operands \p firstOperand.. when
/// present, the opset-1 attributes otherwise) against \p inShape
/// (ops::resolveSlice).
llvm::Expected<ops::SliceSpec> resolveSlice(const KernelCall &call,
                                            llvm::ArrayRef<int64_t> inShape,
                                            unsigned firstOperand) {
  llvm::SmallVector<int64_t, 6> starts, ends, axes, steps;
  if (call.in(firstOperand)) {
    if (!call.in(firstOperand + 1))
      return call.error("missing ends");
    for (auto [index, values, what] :
         {std::tuple{firstOperand, &starts, "starts"},
          std::tuple{firstOperand + 1, &ends, "ends"},
          std::tuple{firstOperand + 2, &axes, "axes"},
          std::tuple{firstOperand + 3, &steps, "steps"}}) {
      if (!call.in(index))
        continue;
      auto read = readInts(call, *call.in(index), what);
      if (!read)
        return read.takeError();
      *values = std::move(*read);
    }
  } else {
    const auto &attrs = call.getState<SliceAttrs>();
    starts.assign(attrs.starts.begin(), attrs.starts.end());
    ends.assign(attrs.ends.begin(), attrs.ends.end());
    axes.assign(attrs.axes.begin(), attrs.axes.end());
  }
  auto spec = ops::resolveSlice(inShape, starts, ends, axes, steps);
  if (!spec)
    return call.error(llvm::toString(spec.takeError()));
  return std::move(*spec);
}

/// Copies between the contiguous tensor \p slice and its place in \p whole:
/// slice = whole[geometry] when \p gather, else whole[geometry] = slice.
void copySlice(const TensorView &whole, const TensorView &slice,
               const ops::SliceSpec &g, bool gather, unsigned threads) {
  unsigned rank = whole.getRank();
  if (slice.getNumElements() == 0)
    return;
  if (rank == 0) {
    if (gather)
      copyElements(whole, slice);
    else
      copyElements(slice, whole);
    return;
  }
  size_t elementSize = whole.getElementSize();
  llvm::SmallVector<int64_t, 6> strides = contiguousStrides(whole.getShape());
  int64_t inner = g.shape.back();
  int64_t innerStep = g.step.back();
  int64_t rows = slice.getNumElements() / inner;
  char *wholeBytes = static_cast<char *>(whole.getData());
  char *sliceBytes = static_cast<char *>(slice.getData());
  parallelFor(threads, rows, grainFor(inner), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      int64_t offset = g.begin[rank - 1], remaining = row;
      for (int d = rank - 2; d >= 0; --d) {
        int64_t index = remaining % g.shape[d];
        remaining /= g.shape[d];
        offset += (g.begin[d] + index * g.step[d]) * strides[d];
      }
      char *part = sliceBytes + row * inner * elementSize;
      for (int64_t j = 0; j < inner; ++j) {
        char *element = wholeBytes + (offset + j * innerStep) * elementSize;
        if (innerStep == 1) {
          // A contiguous row: one copy.
          if (gather)
            std::memcpy(part, element, inner * elementSize);
          else
            std::memcpy(element, part, inner * elementSize);
          break;
        }
        if (gather)
          std::memcpy(part + j * elementSize, element, elementSize);
        else
          std::memcpy(element, part + j * elementSize, elementSize);
      }
    }
  });
}

/// Slice(data, starts, ends, axes?, steps?) or Slice(data) with attributes.
llvm::Error sliceKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  auto geometry = resolveSlice(call, in.getShape(), 1);
  if (!geometry)
    return geometry.takeError();
  if (llvm::Error err = checkOutputShape(call, 0, geometry->shape))
    return err;
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  copySlice(in, out, *geometry, /*gather=*/true, call.getNumThreads());
  return llvm::Error::success();
}

/// SliceGrad(dY, shape, starts, ends, axes?, steps?) -> dX: zeros with dY
/// at the sliced positions.
llvm::Error sliceGradKernel(KernelCall &call) {
  const TensorView &dY = *call.in(0);
  TensorView &dX = *call.out(0);
  auto dims = readInts(call, *call.in(1), "shape");
  if (!dims)
    return dims.takeError();
  if (llvm::ArrayRef<int64_t>(*dims) != dX.getShape())
    return call.error("dX has shape " + shapeString(dX.getShape()) +
                      " but the shape operand says " + shapeString(*dims));
  auto geometry = resolveSlice(call, dX.getShape(), 2);
  if (!geometry)
    return geometry.takeError();
  if (dY.getShape() != llvm::ArrayRef<int64_t>(geometry->shape))
    return call.error("dY has shape " + shapeString(dY.getShape()) +
                      " but the slice has shape " +
                      shapeString(geometry->shape));
  if (dY.getDType() != dX.getDType())
    return call.error("dY and dX must have one element type");
  zeroFill(dX, call.getNumThreads());
  copySlice(dX, dY, *geometry, /*gather=*/false, call.getNumThreads());
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<KernelState>> preparePad(const Node &node) {
  std::string modeName = node.getStringAttr("mode", "constant").str();
  std::optional<PadMode> mode = parsePadMode(modeName);
  if (!mode)
    return prepareError(node, "unknown mode '" + modeName + "'");
  return makeKernelState(*mode);
}

/// Pad(data, pads, constant_value?, axes?): constant, reflect, edge or wrap.
llvm::Error padKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  unsigned rank = in.getRank();
  PadMode mode = call.getState<PadMode>();
  auto padValues = readInts(call, *call.in(1), "pads");
  if (!padValues)
    return padValues.takeError();
  llvm::SmallVector<unsigned, 6> axes;
  if (const TensorView *axesInput = call.in(3)) {
    auto values = readInts(call, *axesInput, "axes");
    if (!values)
      return values.takeError();
    for (int64_t axis : *values) {
      auto normalized = normalizeAxis(call, axis, rank, "axes entry");
      if (!normalized)
        return normalized.takeError();
      axes.push_back(*normalized);
    }
  } else {
    for (unsigned d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (padValues->size() != 2 * axes.size())
    return call.error("pads must have two entries per padded axis");
  llvm::SmallVector<int64_t, 6> begin(rank, 0),
      outShape(in.getShape().begin(), in.getShape().end());
  for (unsigned i = 0; i < axes.size(); ++i) {
    int64_t before = (*padValues)[i], after = (*padValues)[i + axes.size()];
    begin[axes[i]] = before;
    outShape[axes[i]] += before + after;
    if (outShape[axes[i]] < 0)
      return call.error("pads remove more than the whole dimension");
    if (mode != PadMode::Constant && in.getDim(axes[i]) == 0 &&
        outShape[axes[i]] > 0)
      return call.error("cannot reflect, extend or wrap an empty dimension");
  }
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (out.getDType() != in.getDType())
    return call.error("output element type differs from the input's");
  if (out.getNumElements() == 0)
    return llvm::Error::success();
  if (rank == 0) {
    copyElements(in, out);
    return llvm::Error::success();
  }
  llvm::SmallVector<uint8_t, 8> fill(in.getElementSize(), 0);
  if (const TensorView *value = call.in(2)) {
    if (value->getDType() != in.getDType() || value->getNumElements() != 1)
      return call.error("constant_value must be a scalar of the data type");
    std::memcpy(fill.data(), value->getData(), fill.size());
  }
  return dispatchStorage(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    U constant;
    std::memcpy(&constant, fill.data(), sizeof(U));
    const U *src = in.getDataAs<U>();
    U *dst = out.getDataAs<U>();
    llvm::SmallVector<int64_t, 6> inStrides = contiguousStrides(in.getShape());
    int64_t inner = outShape.back(), innerIn = in.getShape().back();
    int64_t rows = out.getNumElements() / inner;
    parallelFor(call.getNumThreads(), rows, grainFor(inner),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t row = lo; row < hi; ++row) {
                    U *to = dst + row * inner;
                    // The source row of this output row, or none (constant
                    // padding).
                    int64_t remaining = row, offset = 0;
                    bool inside = true;
                    for (int d = rank - 2; d >= 0; --d) {
                      int64_t coord = remaining % outShape[d];
                      remaining /= outShape[d];
                      int64_t source = padSourceCoordinate(coord - begin[d],
                                                           in.getDim(d), mode);
                      if (source < 0)
                        inside = false;
                      else
                        offset += source * inStrides[d];
                    }
                    if (!inside) {
                      std::fill(to, to + inner, constant);
                      continue;
                    }
                    for (int64_t j = 0; j < inner; ++j) {
                      int64_t source = padSourceCoordinate(j - begin[rank - 1],
                                                           innerIn, mode);
                      to[j] = source < 0 ? constant : src[offset + source];
                    }
                  }
                });
    return llvm::Error::success();
  });
}

/// Expand(input, shape): numpy broadcast to the output.
llvm::Error expandKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  auto dims = readInts(call, *call.in(1), "shape");
  if (!dims)
    return dims.takeError();
  auto shape = ops::expandShape(in.getShape(), *dims);
  if (!shape)
    return call.error(llvm::toString(shape.takeError()));
  if (llvm::Error err = checkOutputShape(call, 0, *shape))
    return err;
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  broadcastCopy(in, out, call.getNumThreads());
  return llvm::Error::success();
}

/// Tile(input, repeats).
llvm::Error tileKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  unsigned rank = in.getRank();
  auto repeats = readInts(call, *call.in(1), "repeats");
  if (!repeats)
    return repeats.takeError();
  auto tiled = ops::tileShape(in.getShape(), *repeats);
  if (!tiled)
    return call.error(llvm::toString(tiled.takeError()));
  const ops::StaticShape &outShape = *tiled;
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  if (out.getNumElements() == 0)
    return llvm::Error::success();
  if (rank == 0) {
    copyElements(in, out);
    return llvm::Error::success();
  }
  size_t elementSize = in.getElementSize();
  int64_t inRow = in.getDim(rank - 1);
  int64_t outRow = outShape.back();
  int64_t rows = out.getNumElements() / outRow;
  const char *src = static_cast<const char *>(in.getData());
  char *dst = static_cast<char *>(out.getData());
  parallelFor(call.getNumThreads(), rows, grainFor(outRow),
              [&](int64_t lo, int64_t hi) {
                for (int64_t row = lo; row < hi; ++row) {
                  // Source row: each output index modulo the input extent.
                  int64_t remaining = row, srcRow = 0, stride = 1;
                  for (int d = rank - 2; d >= 0; --d) {
                    int64_t index = remaining % outShape[d];
                    remaining /= outShape[d];
                    srcRow += (index % in.getDim(d)) * stride;
                    stride *= in.getDim(d);
                  }
                  const char *from = src + srcRow * inRow * elementSize;
                  char *to = dst + row * outRow * elementSize;
                  for (int64_t r = 0; r < (*repeats)[rank - 1]; ++r)
                    std::memcpy(to + r * inRow * elementSize, from,
                                inRow * elementSize);
                }
              });
  return llvm::Error::success();
}

/// Trilu's `upper`, decoded at prepare.
struct TriluState {
  bool upper = true;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareTrilu(const Node &node) {
  return makeKernelState(TriluState{node.getIntAttr("upper", 1) != 0});
}

/// Trilu(input, k?): keeps the upper (or lower) triangle of the last two
/// dimensions, shifted by k diagonals.
llvm::Error triluKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (in.getRank() < 2)
    return call.error("input must have rank >= 2");
  if (llvm::Error err = checkSameShape(call, in, out, "input and output"))
    return err;
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  int64_t k = 0;
  if (const TensorView *kInput = call.in(1)) {
    auto value = readScalar(call, *kInput, "k");
    if (!value)
      return value.takeError();
    k = static_cast<int64_t>(*value);
  }
  bool upper = call.getState<TriluState>().upper;
  int64_t rows = in.getDim(in.getRank() - 2),
          cols = in.getDim(in.getRank() - 1);
  int64_t matrices = rows * cols != 0 ? in.getNumElements() / (rows * cols) : 0;
  return dispatchStorage(call, in.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    const U *x = in.getDataAs<U>();
    U *y = out.getDataAs<U>();
    parallelFor(call.getNumThreads(), matrices * rows, grainFor(cols),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t line = lo; line < hi; ++line) {
                    int64_t i = line % rows;
                    for (int64_t j = 0; j < cols; ++j) {
                      bool keep = upper ? j - i >= k : j - i <= k;
                      y[line * cols + j] = keep ? x[line * cols + j] : U(0);
                    }
                  }
                });
    return llvm::Error::success();
  });
}

llvm::Expected<std::unique_ptr<KernelState>> prepareOneHot(const Node &node) {
  return makeKernelState(AxisState{node.getIntAttr("axis", -1)});
}

/// OneHot(indices, depth, values[off, on]).
llvm::Error oneHotKernel(KernelCall &call) {
  const TensorView &indices = *call.in(0), &values = *call.in(2);
  const TensorView &out = *call.out(0);
  auto depthValue = readScalar(call, *call.in(1), "depth");
  if (!depthValue)
    return depthValue.takeError();
  int64_t depth = static_cast<int64_t>(*depthValue);
  if (depth < 1)
    return call.error("depth must be positive");
  if (values.getNumElements() != 2 || values.getDType() != out.getDType())
    return call.error("values must hold [off, on] of the output type");
  unsigned outRank = indices.getRank() + 1;
  auto axis = normalizeAxis(call, call.getState<AxisState>().axis, outRank);
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t, 6> outShape(indices.getShape().begin(),
                                         indices.getShape().end());
  outShape.insert(outShape.begin() + *axis, depth);
  if (llvm::Error err = checkOutputShape(call, 0, outShape))
    return err;
  int64_t outer = product(indices.getShape().take_front(*axis));
  int64_t inner = product(indices.getShape().drop_front(*axis));
  return dispatchStorage(call, out.getDType(), [&](auto tag) -> llvm::Error {
    using U = typename decltype(tag)::type;
    U off = values.getDataAs<U>()[0], on = values.getDataAs<U>()[1];
    U *y = out.getDataAs<U>();
    std::fill(y, y + out.getNumElements(), off);
    // Indices may have any numeric type; floats truncate.
    return dispatchTypes<int64_t, int32_t, int16_t, int8_t, uint8_t, uint16_t,
                         uint32_t, uint64_t, float, double>(
        call, indices.getDType(),
        [&](auto indexTag) -> llvm::Error {
          using I = typename decltype(indexTag)::type;
          const I *idx = indices.getDataAs<I>();
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = 0; j < inner; ++j) {
              int64_t index = convertElement<int64_t>(idx[o * inner + j]);
              if (index < 0)
                index += depth;
              if (index >= 0 && index < depth)
                y[(o * depth + index) * inner + j] = on;
            }
          return llvm::Error::success();
        },
        "indices");
  });
}

} // namespace

void cpu::registerMovementKernels(KernelTable &table) {
  auto native = KernelMode::Native;
  table.add("", "Transpose", transposeKernel, native);
  table.add("", "Concat", concatKernel<false>, native);
  table.add(kMsDomain, "ConcatTraining", concatKernel<true>, native);
  table.add("", "Split", splitKernel, native);
  table.add(kMsDomain, "SplitTraining", splitKernel, native);
  table.add("", "Slice", sliceKernel, native);
  table.add(kMsDomain, "SliceGrad", sliceGradKernel, native);
  table.add("", "Expand", expandKernel, native);
  table.add("", "Pad", padKernel, native);
  table.add("", "Tile", tileKernel, native);
  table.add("", "Trilu", triluKernel, native);
  table.add("", "OneHot", oneHotKernel, native);
  table.setPrepare("", "Transpose", prepareTranspose);
  table.setPrepare("", "Concat", prepareConcat);
  table.setPrepare(kMsDomain, "ConcatTraining", prepareConcat);
  table.setPrepare("", "Split", prepareSplit);
  table.setPrepare(kMsDomain, "SplitTraining", prepareSplit);
  table.setPrepare("", "Slice", prepareSlice);
  table.setPrepare(kMsDomain, "SliceGrad", prepareSlice);
  table.setPrepare("", "Pad", preparePad);
  table.setPrepare("", "Trilu", prepareTrilu);
  table.setPrepare("", "OneHot", prepareOneHot);
}
