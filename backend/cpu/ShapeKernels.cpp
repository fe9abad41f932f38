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
#include "backend/cpu/KernelSupport.h"
#include "ir/ops/Axes.h"

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

/// Shape(data) with the opset-15 start/end slice (ops::getShapeSlice).
llvm::Error shapeKernel(KernelCall &call) {
  llvm::ArrayRef<int64_t> dims = call.in(0)->getShape();
  ops::ShapeSlice slice = ops::getShapeSlice(call.getNode(), dims.size());
  return writeInt64s(call, 0, dims.slice(slice.start, slice.size()));
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

/// Constant with one of value, value_float(s), value_int(s).
llvm::Error constantKernel(KernelCall &call) {
  const TensorView &out = *call.out(0);
  const Node &node = call.getNode();
  if (const Attribute *value = node.getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor)
      return call.error("attribute 'value' must be a tensor");
    return copyConstant(call, value->getTensor(), out);
  }
  auto fill = [&](auto values, DType type) -> llvm::Error {
    using T = typename decltype(values)::value_type;
    if (out.getDType() != type ||
        out.getNumElements() != static_cast<int64_t>(values.size()))
      return call.error("output type disagrees with the constant attribute");
    std::memcpy(out.getData(), values.data(), values.size() * sizeof(T));
    return llvm::Error::success();
  };
  if (const Attribute *value = node.getAttr("value_float"))
    return fill(std::vector<float>{value->getFloat()}, DType::F32);
  if (const Attribute *value = node.getAttr("value_floats"))
    return fill(value->getFloats(), DType::F32);
  if (const Attribute *value = node.getAttr("value_int"))
    return fill(std::vector<int64_t>{value->getInt()}, DType::I64);
  if (const Attribute *value = node.getAttr("value_ints"))
    return fill(value->getInts(), DType::I64);
  return call.error("no supported value attribute (string and sparse constants "
                    "are not supported)");
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
  std::vector<uint8_t> element(dtypeSize(out.getDType()), 0);
  if (const Attribute *value = call.getNode().getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor ||
        value->getTensor().getNumElements() != 1)
      return call.error("attribute 'value' must be a one-element tensor");
    const TensorData &data = value->getTensor();
    if (data.getType().getDType() != out.getDType())
      return call.error(
          "attribute 'value' has another element type than the output");
    element.assign(data.getBytes().begin(), data.getBytes().end());
  } else if (out.getDType() != DType::F32) {
    return call.error("without 'value' the output must be f32");
  }
  size_t size = element.size();
  char *data = static_cast<char *>(out.getData());
  for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
    std::memcpy(data + i * size, element.data(), size);
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

/// Reshape(data, shape): checks the output against the shape operand.
llvm::Error reshapeKernel(KernelCall &call) {
  if (llvm::Error err = viewKernel(call))
    return err;
  auto dims = readInts(call, *call.in(1), "shape");
  if (!dims)
    return dims.takeError();
  llvm::ArrayRef<int64_t> in = call.in(0)->getShape(),
                          out = call.out(0)->getShape();
  bool allowZero = call.getInt("allowzero", 0) != 0;
  bool matches = dims->size() == out.size();
  for (size_t i = 0; matches && i < dims->size(); ++i) {
    int64_t d = (*dims)[i];
    if (d == -1)
      continue;
    if (d == 0 && !allowZero)
      matches = i < in.size() && out[i] == in[i];
    else
      matches = out[i] == d;
  }
  if (!matches)
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
        if (delta == T(0))
          return call.error("delta must not be zero");
        int64_t count = rangeCount(start, limit, delta);
        if (out.getNumElements() != count)
          return call.error("output has " + llvm::Twine(out.getNumElements()) +
                            " elements, the range has " + llvm::Twine(count));
        T *y = out.getDataAs<T>();
        for (int64_t i = 0; i < count; ++i)
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
  int64_t i = a->size() - 1, j = b->size() - 1;
  int64_t k = std::max(a->size(), b->size()) - 1;
  llvm::SmallVector<int64_t, 6> aAxes, bAxes;
  for (; i >= 0 && j >= 0; --i, --j, --k) {
    int64_t da = (*a)[i], db = (*b)[j];
    if (da == db)
      continue;
    if (da == 1)
      aAxes.push_back(k);
    else if (db == 1)
      bAxes.push_back(k);
    else
      return call.error("shapes " + shapeString(*a) + " and " +
                        shapeString(*b) + " do not broadcast");
  }
  for (; k >= 0; --k)
    (i < 0 ? aAxes : bAxes).push_back(k);
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
  table.add("", "Size", sizeKernel, native);
  table.add("", "Constant", constantKernel, native);
  table.add("", "ConstantOfShape", constantOfShapeKernel, native);
  table.add("", "Identity", viewKernel, native);
  table.add("", "Squeeze", viewKernel, native);
  table.add("", "Unsqueeze", viewKernel, native);
  table.add("", "Flatten", viewKernel, native);
  table.add("", "Reshape", reshapeKernel, native);
  table.add("", "Range", rangeKernel, native);
  table.add("", "NonZero", nonZeroKernel, native);
  table.add(kMsDomain, "BroadcastGradientArgs",
            KernelInfo{broadcastGradientArgsKernel, native, nullptr,
                       KernelResults::MayBeAbsent});
}
