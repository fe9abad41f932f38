//===- ShapeKernels.cpp - Shapes, constants and view-like ops -------------===//
//
// Ops that compute shapes or constants (Shape, Size, Constant,
// ConstantOfShape, Range, NonZero, com.microsoft BroadcastGradientArgs) and
// the view ops that only relabel a buffer (Identity, Reshape, Squeeze,
// Unsqueeze, Flatten): when the executor gives them distinct input and
// output buffers they copy the bytes; when it aliases them there is nothing
// to do. Every kernel checks the preallocated output against what it
// computes.
//
//===----------------------------------------------------------------------===//

#include "backend/RangeMath.h"
#include "backend/cpu/KernelPrepare.h"
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ShapeEval.h"

#include <cmath>
#include <cstring>

using namespace gmopt;
using namespace gmopt::cpu;

namespace {

/// Writes \p values into the i64 output \p index, checking its size.
llvm::Error writeInt64s(const KernelCall &call, unsigned index,
                        llvm::ArrayRef<int64_t> values) {
  TensorView *out = call.out(index);
  if (!out)
    return llvm::Error::success();
  if (llvm::Error err = checkDType(call, *out, DType::I64, "output"))
    return err;
  if (out->getNumElements() != static_cast<int64_t>(values.size()))
    return call.error("output " + llvm::Twine(index) + " has " +
                      llvm::Twine(out->getNumElements()) +
                      " elements but the kernel computes " +
                      llvm::Twine(values.size()));
  if (!values.empty())
    std::memcpy(out->getData(), values.data(), values.size() * sizeof(int64_t));
  return llvm::Error::success();
}

/// Shape's opset-15 start/end slice (ops::getShapeSlice) of its input's
/// rank, decoded at prepare.
struct ShapeState {
  ops::ShapeSlice slice;
  int64_t rank = 0;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareShape(const Node &node) {
  std::optional<unsigned> rank = operandRank(node, 0);
  if (!rank)
    return prepareError(node, "the input's rank must be known");
  return makeKernelState(ShapeState{ops::getShapeSlice(node, *rank), *rank});
}

llvm::Error shapeKernel(KernelCall &call) {
  llvm::ArrayRef<int64_t> dims = call.in(0)->getShape();
  const auto &state = call.getState<ShapeState>();
  if (state.rank != static_cast<int64_t>(dims.size()))
    return call.error("the input has rank " + llvm::Twine(dims.size()) +
                      ", not the rank " + llvm::Twine(state.rank) +
                      " it was prepared for");
  return writeInt64s(call, 0,
                     dims.slice(state.slice.start, state.slice.size()));
}

llvm::Error sizeKernel(KernelCall &call) {
  TensorView &out = *call.out(0);
  if (out.getNumElements() != 1)
    return call.error("output must have one element");
  return writeInt64s(call, 0, {call.in(0)->getNumElements()});
}

/// Copies the bytes of \p data (a constant) into \p out, checking type and
/// size.
llvm::Error copyConstant(const KernelCall &call, const TensorData &data,
                         const TensorView &out) {
  // An external value (a Constant's, left unread at import) is mapped now;
  // the error names its file.
  if (llvm::Error err = data.load())
    return call.error(llvm::toString(std::move(err)));
  if (data.getType().getDType() != out.getDType())
    return call.error("constant of type " +
                      dtypeName(data.getType().getDType()) +
                      " for an output of type " + dtypeName(out.getDType()));
  if (data.getBytes().size() != out.getSizeInBytes())
    return call.error("constant has " + llvm::Twine(data.getBytes().size()) +
                      " bytes, the output " +
                      llvm::Twine(out.getSizeInBytes()));
  if (!data.getBytes().empty())
    std::memcpy(out.getData(), data.getBytes().data(), data.getBytes().size());
  return llvm::Error::success();
}

/// What a Constant holds: its `value` tensor, or the values of one of
/// value_float(s) / value_int(s).
struct ConstantState {
  const TensorData *tensor = nullptr;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  DType type = DType::F32;
};

/// Constant with one of value, value_float(s), value_int(s).
llvm::Expected<std::unique_ptr<KernelState>> prepareConstant(const Node &node) {
  ConstantState state;
  if (const Attribute *value = node.getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor)
      return prepareError(node, "attribute 'value' must be a tensor");
    state.tensor = &value->getTensor();
  } else if (const Attribute *value = node.getAttr("value_float")) {
    state.floats = {value->getFloat()};
  } else if (const Attribute *value = node.getAttr("value_floats")) {
    state.floats = value->getFloats();
  } else if (const Attribute *value = node.getAttr("value_int")) {
    state.ints = {value->getInt()};
    state.type = DType::I64;
  } else if (const Attribute *value = node.getAttr("value_ints")) {
    state.ints = value->getInts();
    state.type = DType::I64;
  } else {
    return prepareError(node, "no supported value attribute (string and sparse "
                              "constants are not supported)");
  }
  return makeKernelState(std::move(state));
}

llvm::Error constantKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  const auto &state = call.getState<ConstantState>();
  if (state.tensor)
    return copyConstant(call, *state.tensor, out);
  auto fill = [&](const auto &values) -> llvm::Error {
    using T = typename std::decay_t<decltype(values)>::value_type;
    if (out.getDType() != state.type ||
        out.getNumElements() != static_cast<int64_t>(values.size()))
      return call.error("output type disagrees with the constant attribute");
    std::memcpy(out.getData(), values.data(), values.size() * sizeof(T));
    return llvm::Error::success();
  };
  if (state.type == DType::I64)
    return fill(state.ints);
  return fill(state.floats);
}

/// ConstantOfShape's fill element: attribute `value`'s bytes, or an f32 0.
struct FillState {
  std::vector<uint8_t> element;
  DType type = DType::F32;
  bool given = false;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareFill(const Node &node) {
  FillState state;
  state.element.assign(sizeof(float), 0);
  if (const Attribute *value = node.getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor ||
        value->getTensor().getNumElements() != 1)
      return prepareError(node,
                          "attribute 'value' must be a one-element tensor");
    const TensorData &data = value->getTensor();
    if (llvm::Error err = data.load())
      return prepareError(node, llvm::toString(std::move(err)));
    state.type = data.getType().getDType();
    state.element.assign(data.getBytes().begin(), data.getBytes().end());
    state.given = true;
  }
  return makeKernelState(std::move(state));
}

/// ConstantOfShape(shape) filled with attribute `value` (default f32 0).
llvm::Error constantOfShapeKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  auto dims = readInts(call, *call.in(0), "shape");
  if (!dims)
    return dims.takeError();
  if (out.getShape() != llvm::ArrayRef<int64_t>(*dims))
    return call.error("output shape " + shapeString(out.getShape()) +
                      " differs from the shape input " + shapeString(*dims));
  const auto &state = call.getState<FillState>();
  if (state.type != out.getDType())
    return call.error(
        state.given ? "attribute 'value' has another element type than the "
                      "output"
                    : "without 'value' the output must be f32");
  size_t size = state.element.size();
  char *data = static_cast<char *>(out.getData());
  for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
    std::memcpy(data + i * size, state.element.data(), size);
  return llvm::Error::success();
}

/// Identity, Squeeze, Unsqueeze, Flatten: same bytes, new shape.
llvm::Error viewKernel(KernelCall &call) {
  const TensorView &in = *call.in(0), &out = *call.out(0);
  if (in.getDType() != out.getDType())
    return call.error("output element type differs from the input's");
  if (in.getNumElements() != out.getNumElements())
    return call.error("output " + shapeString(out.getShape()) + " and input " +
                      shapeString(in.getShape()) + " differ in size");
  copyElements(in, out);
  return llvm::Error::success();
}

/// Reshape's allowzero, decoded at prepare.
struct ReshapeState {
  bool allowZero = false;
};

llvm::Expected<std::unique_ptr<KernelState>> prepareReshape(const Node &node) {
  return makeKernelState(ReshapeState{ops::reshapeAllowsZero(node)});
}

/// Reshape(data, shape): checks the output against the shape the
/// evaluator (ops::reshapeTarget) makes of the input and the shape operand.
llvm::Error reshapeKernel(KernelCall &call) {
  if (llvm::Error err = viewKernel(call))
    return err;
  auto dims = readInts(call, *call.in(1), "shape");
  if (!dims)
    return dims.takeError();
  llvm::ArrayRef<int64_t> out = call.out(0)->getShape();
  auto target = ops::reshapeTarget(call.in(0)->getShape(), *dims,
                                   call.getState<ReshapeState>().allowZero);
  if (!target)
    return call.error(llvm::toString(target.takeError()));
  if (llvm::ArrayRef<int64_t>(*target) != out)
    return call.error("output shape " + shapeString(out) +
                      " does not satisfy the requested shape " +
                      shapeString(*dims));
  return llvm::Error::success();
}

/// Range(start, limit, delta).
llvm::Error rangeKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  for (unsigned i = 0; i < 3; ++i)
    if (call.in(i)->getDType() != out.getDType() ||
        call.in(i)->getNumElements() != 1)
      return call.error(
          "start, limit and delta must be scalars of the output type");
  return dispatchTypes<float, double, int64_t, int32_t, int16_t>(
      call, out.getDType(), [&](auto tag) -> llvm::Error {
        using T = typename decltype(tag)::type;
        T start = call.in(0)->getDataAs<T>()[0];
        T limit = call.in(1)->getDataAs<T>()[0];
        T delta = call.in(2)->getDataAs<T>()[0];
        auto count = ops::checkedRangeCount(start, limit, delta);
        if (!count)
          return call.error(llvm::toString(count.takeError()));
        if (out.getNumElements() != *count)
          return call.error("output has " + llvm::Twine(out.getNumElements()) +
                            " elements, the range has " + llvm::Twine(*count));
        T *y = out.getDataAs<T>();
        for (int64_t i = 0; i < *count; ++i)
          y[i] = rangeElement(start, delta, i);
        return llvm::Error::success();
      });
}

/// BroadcastGradientArgs(a_shape, b_shape) -> (a_axes?, b_axes?): the axes
/// each operand's gradient is summed over, from last to first.
llvm::Error broadcastGradientArgsKernel(KernelCall &call) {
  auto a = readInts(call, *call.in(0), "a_shape");
  if (!a)
    return a.takeError();
  auto b = readInts(call, *call.in(1), "b_shape");
  if (!b)
    return b.takeError();
  auto axes = ops::broadcastGradientArgs(*a, *b);
  if (!axes)
    return call.error(llvm::toString(axes.takeError()));
  const ops::StaticShape &aAxes = axes->a, &bAxes = axes->b;
  if (llvm::Error err = writeInt64s(call, 0, aAxes))
    return err;
  return writeInt64s(call, 1, bAxes);
}

/// NonZero(X) -> [rank, count] coordinates of the nonzero elements in
/// row-major order. The count depends on the data: the preallocated output
/// must already have it.
llvm::Error nonZeroKernel(KernelCall &call) {
  const TensorView &in = *call.in(0);
  TensorView &out = *call.out(0);
  if (llvm::Error err = checkDType(call, out, DType::I64, "output"))
    return err;
  unsigned rank = in.getRank();
  int64_t n = in.getNumElements();
  // Nonzero-ness from the bits: any bit set, ignoring the sign bit of
  // floats (-0.0 is zero; NaN is not).
  unsigned size = in.getElementSize();
  uint64_t mask = size >= 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * size)) - 1;
  if (isFloatingPoint(in.getDType()))
    mask &= ~(uint64_t(1) << (8 * size - 1));
  auto isNonZero = [&](int64_t i) -> bool {
    uint64_t bits = 0;
    std::memcpy(&bits, static_cast<const uint8_t *>(in.getData()) + i * size,
                size);
    return (bits & mask) != 0;
  };
  if (in.getDType() != DType::F32 && in.getDType() != DType::F64 &&
      in.getDType() != DType::F16 && in.getDType() != DType::BF16 &&
      !isInteger(in.getDType()) && in.getDType() != DType::Bool)
    return unsupportedType(call, in.getDType());
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    count += isNonZero(i);
  llvm::SmallVector<int64_t, 2> expected = {
      static_cast<int64_t>(std::max(rank, 1u)), count};
  if (out.getShape() != llvm::ArrayRef<int64_t>(expected))
    return call.error("the data has " + llvm::Twine(count) +
                      " nonzero elements; the output " +
                      shapeString(out.getShape()) + " should be " +
                      shapeString(expected));
  int64_t *coords = out.getDataAs<int64_t>();
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!isNonZero(i))
      continue;
    int64_t rest = i;
    for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
      coords[d * count + k] = rest % in.getDim(d);
      rest /= in.getDim(d);
    }
    if (rank == 0)
      coords[k] = 0;
    ++k;
  }
  return llvm::Error::success();
}

} // namespace

void cpu::registerShapeKernels(KernelTable &table) {
  auto native = KernelMode::Native;
  table.add("", "Shape", shapeKernel, native);
  table.setPrepare("", "Shape", prepareShape);
  table.add("", "Size", sizeKernel, native);
  table.add("", "Constant", constantKernel, native);
  table.setPrepare("", "Constant", prepareConstant);
  table.add("", "ConstantOfShape", constantOfShapeKernel, native);
  table.setPrepare("", "ConstantOfShape", prepareFill);
  table.add("", "Identity", viewKernel, native);
  table.add("", "Squeeze", viewKernel, native);
  table.add("", "Unsqueeze", viewKernel, native);
  table.add("", "Flatten", viewKernel, native);
  table.add("", "Reshape", reshapeKernel, native);
  table.setPrepare("", "Reshape", prepareReshape);
  table.add("", "Range", rangeKernel, native);
  table.add("", "NonZero", nonZeroKernel, native);
  table.add(kMsDomain, "BroadcastGradientArgs",
            KernelInfo{broadcastGradientArgsKernel, native, nullptr,
                       KernelResults::MayBeAbsent});
}
