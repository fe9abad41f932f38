//===- ShapeInference.cpp - Shared helpers for op type inference ----------===//
//
// Implements the dimension arithmetic, broadcasting, axis handling and
// window (convolution/pooling) size computations shared by every op family.
// Symbolic dimensions survive wherever the result is provably the same
// symbol; anything that cannot be computed becomes an unknown dimension
// rather than a guess.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ShapeInference.h"
#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>

using namespace gmopt;
using namespace gmopt::ops;

std::optional<int64_t> ops::checkedAdd(int64_t a, int64_t b) {
  int64_t result;
  if (llvm::AddOverflow(a, b, result))
    return std::nullopt;
  return result;
}

std::optional<int64_t> ops::checkedMul(int64_t a, int64_t b) {
  int64_t result;
  if (llvm::MulOverflow(a, b, result))
    return std::nullopt;
  return result;
}

Dim ops::multiplyDims(llvm::ArrayRef<Dim> dims) {
  int64_t product = 1;
  const Dim *symbolic = nullptr;
  unsigned numNonStatic = 0;
  for (const Dim &dim : dims) {
    if (dim.isStatic()) {
      std::optional<int64_t> next = checkedMul(product, dim.getExtent());
      if (!next)
        return Dim::unknown();
      product = *next;
      continue;
    }
    ++numNonStatic;
    if (dim.isSymbolic())
      symbolic = &dim;
  }
  if (numNonStatic == 0)
    return Dim::fixed(product);
  // A zero-sized factor makes the product zero whatever the symbols are.
  if (product == 0)
    return Dim::fixed(0);
  if (numNonStatic == 1 && symbolic && product == 1)
    return *symbolic;
  return Dim::unknown();
}

Dim ops::addDims(llvm::ArrayRef<Dim> dims) {
  int64_t sum = 0;
  const Dim *symbolic = nullptr;
  unsigned numNonStatic = 0;
  for (const Dim &dim : dims) {
    if (dim.isStatic()) {
      std::optional<int64_t> next = checkedAdd(sum, dim.getExtent());
      if (!next)
        return Dim::unknown();
      sum = *next;
      continue;
    }
    ++numNonStatic;
    if (dim.isSymbolic())
      symbolic = &dim;
  }
  if (numNonStatic == 0)
    return Dim::fixed(sum);
  if (numNonStatic == 1 && symbolic && sum == 0)
    return *symbolic;
  return Dim::unknown();
}

std::optional<Dim> ops::unifyDims(const Dim &a, const Dim &b) {
  if (a.isStatic() && b.isStatic())
    return a.getExtent() == b.getExtent() ? std::optional<Dim>(a)
                                          : std::nullopt;
  if (a.isStatic())
    return a;
  if (b.isStatic())
    return b;
  if (a.isSymbolic())
    return a;
  return b;
}

std::optional<Dim> ops::broadcastDims(const Dim &a, const Dim &b) {
  if (a.isStatic() && b.isStatic()) {
    if (a.getExtent() == b.getExtent() || b.getExtent() == 1)
      return a;
    if (a.getExtent() == 1)
      return b;
    return std::nullopt;
  }
  // One side static: 1 broadcasts to the other side; any other extent is
  // the result (the other side must be equal or 1).
  if (a.isStatic())
    return a.getExtent() == 1 ? b : a;
  if (b.isStatic())
    return b.getExtent() == 1 ? a : b;
  if (a.isSymbolic() && b.isSymbolic() && a.getSymbol() == b.getSymbol())
    return a;
  return Dim::unknown();
}

std::optional<DimVector> ops::broadcastShapes(llvm::ArrayRef<Dim> a,
                                              llvm::ArrayRef<Dim> b) {
  size_t rank = std::max(a.size(), b.size());
  DimVector result(rank);
  for (size_t i = 0; i != rank; ++i) {
    // Align from the right; missing leading dims behave as 1.
    const Dim one = Dim::fixed(1);
    const Dim &da = i + a.size() >= rank ? a[i + a.size() - rank] : one;
    const Dim &db = i + b.size() >= rank ? b[i + b.size() - rank] : one;
    std::optional<Dim> dim = broadcastDims(da, db);
    if (!dim)
      return std::nullopt;
    result[i] = *dim;
  }
  return result;
}

std::string ops::shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i != shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string ops::shapeString(llvm::ArrayRef<Dim> dims) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '[';
  llvm::interleave(
      dims, os,
      [&](const Dim &dim) {
        if (dim.isStatic())
          os << dim.getExtent();
        else if (dim.isSymbolic())
          os << dim.getSymbol();
        else
          os << '?';
      },
      ",");
  os << ']';
  return os.str();
}

TensorType ops::makeType(DType dtype, const std::optional<DimVector> &dims) {
  if (!dims)
    return TensorType::unranked(dtype);
  return TensorType(dtype, *dims);
}

llvm::Expected<unsigned> ops::normalizeAxis(const InferenceContext &ctx,
                                            int64_t axis, int64_t rank,
                                            llvm::StringRef what) {
  if (std::optional<unsigned> normalized = normalizeAxis(axis, rank))
    return *normalized;
  return ctx.error(axisOutOfRange(what, axis, rank));
}

llvm::Error ops::checkSoftmaxAxis(const InferenceContext &ctx,
                                  const TensorType &input) {
  if (!input.hasRank())
    return llvm::Error::success();
  if (auto axis = getSoftmaxAxis(ctx.getNode(), input.getRank()); !axis)
    return ctx.error(llvm::toString(axis.takeError()));
  return llvm::Error::success();
}

llvm::Expected<llvm::SmallVector<unsigned, 4>>
ops::normalizeAxes(const InferenceContext &ctx, llvm::ArrayRef<int64_t> axes,
                   int64_t rank, llvm::StringRef what) {
  auto normalized = normalizeAxisList(axes, rank, what);
  if (!normalized)
    return ctx.error(llvm::toString(normalized.takeError()));
  return llvm::SmallVector<unsigned, 4>(normalized->begin(), normalized->end());
}

llvm::Expected<DType> ops::checkSameDType(const InferenceContext &ctx,
                                          llvm::ArrayRef<unsigned> indices) {
  DType reference = DType::Undefined;
  unsigned referenceIndex = 0;
  for (unsigned index : indices) {
    if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
      continue;
    DType dtype = ctx.getInputType(index).getDType();
    if (dtype == DType::Undefined)
      continue;
    if (reference == DType::Undefined) {
      reference = dtype;
      referenceIndex = index;
      continue;
    }
    if (dtype != reference)
      return ctx.error(llvm::formatv("input {0} has dtype {1} but input {2} "
                                     "has {3}",
                                     index, dtypeName(dtype), referenceIndex,
                                     dtypeName(reference)));
  }
  return reference;
}

llvm::Error ops::checkDTypeIn(const InferenceContext &ctx, unsigned index,
                              llvm::ArrayRef<DType> allowed,
                              llvm::StringRef role) {
  if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
    return llvm::Error::success();
  DType dtype = ctx.getInputType(index).getDType();
  if (dtype == DType::Undefined || llvm::is_contained(allowed, dtype))
    return llvm::Error::success();
  std::string names;
  for (DType candidate : allowed) {
    if (!names.empty())
      names += ", ";
    names += dtypeName(candidate).str();
  }
  return ctx.error(llvm::formatv("input {0} ({1}) has dtype {2}, expected "
                                 "one of {3}",
                                 index, role, dtypeName(dtype), names));
}

llvm::ArrayRef<DType> ops::indexDTypes() {
  static const DType types[] = {DType::I32, DType::I64};
  return types;
}

llvm::Expected<std::optional<DimVector>>
ops::broadcastInputs(const InferenceContext &ctx,
                     llvm::ArrayRef<unsigned> indices) {
  std::optional<DimVector> result;
  bool first = true;
  for (unsigned index : indices) {
    if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
      continue;
    const TensorType &type = ctx.getInputType(index);
    if (!type.hasRank())
      return std::optional<DimVector>();
    if (first) {
      result = DimVector(type.getDims().begin(), type.getDims().end());
      first = false;
      continue;
    }
    std::optional<DimVector> merged = broadcastShapes(*result, type.getDims());
    if (!merged)
      return ctx.error(llvm::formatv(
          "incompatible broadcast: shapes {0} and {1} (input {2})",
          shapeString(*result), shapeString(type.getDims()), index));
    result = std::move(merged);
  }
  return result;
}

llvm::Expected<DimVector> ops::matmulShape(const InferenceContext &ctx,
                                           llvm::ArrayRef<Dim> a,
                                           llvm::ArrayRef<Dim> b) {
  if (a.empty() || b.empty())
    return ctx.error("matrix multiplication operands must have rank >= 1");
  DimVector lhs(a.begin(), a.end()), rhs(b.begin(), b.end());
  if (lhs.size() == 1)
    lhs.insert(lhs.begin(), Dim::fixed(1));
  if (rhs.size() == 1)
    rhs.push_back(Dim::fixed(1));
  const Dim &k1 = lhs.back();
  const Dim &k2 = rhs[rhs.size() - 2];
  if (!unifyDims(k1, k2))
    return ctx.error(
        llvm::formatv("contraction dimensions do not match: {0} x {1}",
                      shapeString(a), shapeString(b)));
  llvm::ArrayRef<Dim> lhsBatch = llvm::ArrayRef<Dim>(lhs).drop_back(2);
  llvm::ArrayRef<Dim> rhsBatch = llvm::ArrayRef<Dim>(rhs).drop_back(2);
  std::optional<DimVector> batch = broadcastShapes(lhsBatch, rhsBatch);
  if (!batch)
    return ctx.error(
        llvm::formatv("incompatible broadcast of batch dimensions: {0} x {1}",
                      shapeString(a), shapeString(b)));
  DimVector result = std::move(*batch);
  if (a.size() != 1)
    result.push_back(lhs[lhs.size() - 2]);
  if (b.size() != 1)
    result.push_back(rhs.back());
  return result;
}

llvm::Expected<WindowParams>
ops::readWindowParams(const InferenceContext &ctx, unsigned numSpatial,
                      llvm::ArrayRef<Dim> kernelFromWeights) {
  WindowParams params;
  std::vector<int64_t> kernel = ctx.getIntsAttr("kernel_shape");
  if (kernel.empty()) {
    if (kernelFromWeights.size() != numSpatial)
      return ctx.error("kernel_shape is required");
    for (const Dim &dim : kernelFromWeights) {
      if (!dim.isStatic())
        return ctx.error("kernel size must be static (set kernel_shape or "
                         "give the weights a static shape)");
      kernel.push_back(dim.getExtent());
    }
  }
  if (kernel.size() != numSpatial)
    return ctx.error(llvm::formatv("kernel_shape has {0} values but the input "
                                   "has {1} spatial dimensions",
                                   kernel.size(), numSpatial));
  params.kernel.assign(kernel.begin(), kernel.end());

  auto readPerAxis = [&](llvm::StringRef name, unsigned count, int64_t fallback,
                         int64_t minimum, auto &out) -> llvm::Error {
    std::vector<int64_t> values = ctx.getIntsAttr(name);
    if (values.empty())
      values.assign(count, fallback);
    if (values.size() != count)
      return ctx.error(llvm::formatv("{0} has {1} values, expected {2}", name,
                                     values.size(), count));
    for (int64_t value : values)
      if (value < minimum)
        return ctx.error(llvm::formatv("{0} value {1} must be >= {2}", name,
                                       value, minimum));
    out.assign(values.begin(), values.end());
    return llvm::Error::success();
  };
  for (int64_t k : params.kernel)
    if (k <= 0)
      return ctx.error(llvm::formatv("kernel_shape value {0} must be >= 1", k));
  if (auto err = readPerAxis("strides", numSpatial, 1, 1, params.strides))
    return err;
  if (auto err = readPerAxis("dilations", numSpatial, 1, 1, params.dilations))
    return err;
  if (auto err = readPerAxis("pads", 2 * numSpatial, 0, 0, params.pads))
    return err;
  params.autoPad = ctx.getStringAttr("auto_pad");
  if (params.autoPad.empty())
    params.autoPad = "NOTSET";
  if (params.autoPad != "NOTSET" && params.autoPad != "VALID" &&
      params.autoPad != "SAME_UPPER" && params.autoPad != "SAME_LOWER")
    return ctx.error("auto_pad must be NOTSET, VALID, SAME_UPPER or "
                     "SAME_LOWER, got '" +
                     params.autoPad + "'");
  params.ceilMode = ctx.getIntAttr("ceil_mode", 0) != 0;
  return params;
}

std::optional<int64_t> ops::windowOutputSize(int64_t input, int64_t kernel,
                                             int64_t stride, int64_t dilation,
                                             int64_t padBegin, int64_t padEnd,
                                             llvm::StringRef autoPad,
                                             bool ceilMode) {
  // All operands are non-negative (readWindowParams checks); only the sums
  // and products of huge attribute values can overflow.
  std::optional<int64_t> spread = checkedMul(kernel - 1, dilation);
  if (!spread)
    return std::nullopt;
  int64_t effectiveKernel = *spread + 1;
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
    return input / stride + (input % stride != 0);
  if (autoPad == "VALID") {
    if (input < effectiveKernel)
      return std::nullopt;
    return (input - effectiveKernel) / stride + 1;
  }
  std::optional<int64_t> padded = checkedAdd(input, padBegin);
  if (padded)
    padded = checkedAdd(*padded, padEnd);
  if (!padded || *padded < effectiveKernel)
    return std::nullopt;
  int64_t span = *padded - effectiveKernel;
  if (!ceilMode)
    return span / stride + 1;
  int64_t output = span / stride + (span % stride != 0) + 1;
  // The last window must start inside the input or its begin padding.
  std::optional<int64_t> lastStart = checkedMul(output - 1, stride);
  if (!lastStart || *lastStart >= input + padBegin)
    --output;
  return output;
}

llvm::Expected<DimVector>
ops::windowOutputDims(const InferenceContext &ctx,
                      llvm::ArrayRef<Dim> inputSpatial,
                      const WindowParams &params) {
  unsigned numSpatial = inputSpatial.size();
  DimVector result;
  for (unsigned i = 0; i != numSpatial; ++i) {
    const Dim &dim = inputSpatial[i];
    if (!dim.isStatic()) {
      result.push_back(Dim::unknown());
      continue;
    }
    std::optional<int64_t> size = windowOutputSize(
        dim.getExtent(), params.kernel[i], params.strides[i],
        params.dilations[i], params.pads[i], params.pads[i + numSpatial],
        params.autoPad, params.ceilMode);
    if (!size || *size <= 0)
      return ctx.error(llvm::formatv(
          "window of size {0} (dilation {1}) does not fit spatial dimension "
          "{2} of extent {3} with pads {4}+{5}",
          params.kernel[i], params.dilations[i], i, dim.getExtent(),
          params.pads[i], params.pads[i + numSpatial]));
    result.push_back(Dim::fixed(*size));
  }
  return result;
}

std::pair<int64_t, int64_t> ops::sliceRange(int64_t dim, int64_t start,
                                            int64_t end, int64_t step) {
  assert(step != 0 && dim >= 0 && "slice of a negative extent or step 0");
  if (dim == 0)
    return {0, 0};
  // Adding a non-negative extent to a negative index cannot overflow.
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, end > start ? (end - start - 1) / step + 1 : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  uint64_t magnitude = static_cast<uint64_t>(-(step + 1)) + 1;
  int64_t count =
      start > end ? static_cast<int64_t>(
                        static_cast<uint64_t>(start - end - 1) / magnitude) +
                        1
                  : 0;
  return {start, count};
}

uint64_t ops::staticElements(const TensorType &type) {
  return type.hasStaticShape() ? type.getNumElements() : 0;
}

uint64_t ops::staticBytes(const TensorType &type) {
  if (!type.hasStaticShape() || type.getDType() == DType::Undefined)
    return 0;
  return type.getSizeInBytes();
}
