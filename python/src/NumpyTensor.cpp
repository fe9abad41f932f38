//===- NumpyTensor.cpp - NumPy arrays to and from gmopt tensors -----------===//
//
// Implements the conversions of NumpyTensor.h. The array side uses the
// buffer's dtype number and item size, never a format string, so float16
// (format "e") and bool are recognised the same way on every NumPy.
//
//===----------------------------------------------------------------------===//

#include "python/src/NumpyTensor.h"
#include "python/src/Errors.h"

#include "ir/Types.h"

#include <memory>

namespace py = pybind11;

namespace gmopt::python {

py::dtype numpyDType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return py::dtype("float32");
  case DType::F64:
    return py::dtype("float64");
  case DType::F16:
    return py::dtype("float16");
  case DType::BF16:
  case DType::U16:
    return py::dtype("uint16");
  case DType::I8:
    return py::dtype("int8");
  case DType::U8:
    return py::dtype("uint8");
  case DType::I16:
    return py::dtype("int16");
  case DType::I32:
    return py::dtype("int32");
  case DType::U32:
    return py::dtype("uint32");
  case DType::I64:
    return py::dtype("int64");
  case DType::U64:
    return py::dtype("uint64");
  case DType::Bool:
    return py::dtype("bool");
  case DType::C64:
    return py::dtype("complex64");
  case DType::C128:
    return py::dtype("complex128");
  default:
    throw py::value_error("gmopt: tensors of type " + dtypeName(dtype).str() +
                          " have no NumPy form");
  }
}

DType gmoptDType(const py::dtype &dtype, const std::string &what) {
  char kind = dtype.kind();
  size_t size = static_cast<size_t>(dtype.itemsize());
  if (kind == 'f' && size == 4)
    return DType::F32;
  if (kind == 'f' && size == 8)
    return DType::F64;
  if (kind == 'f' && size == 2)
    return DType::F16;
  if (kind == 'b' && size == 1)
    return DType::Bool;
  if (kind == 'i') {
    switch (size) {
    case 1:
      return DType::I8;
    case 2:
      return DType::I16;
    case 4:
      return DType::I32;
    case 8:
      return DType::I64;
    }
  }
  if (kind == 'u') {
    switch (size) {
    case 1:
      return DType::U8;
    case 2:
      return DType::U16;
    case 4:
      return DType::U32;
    case 8:
      return DType::U64;
    }
  }
  if (kind == 'c' && size == 8)
    return DType::C64;
  if (kind == 'c' && size == 16)
    return DType::C128;
  throw py::type_error(
      what + ": NumPy dtype " +
      py::str(static_cast<const py::handle &>(dtype)).cast<std::string>() +
      " is not a tensor type gmopt stores");
}

namespace {

/// Keeps a NumPy array alive for a tensor that borrows its buffer. The
/// reference is dropped under the GIL, whichever thread drops the tensor.
struct ArrayOwner {
  explicit ArrayOwner(py::array array) : array(std::move(array)) {}
  ~ArrayOwner() {
    py::gil_scoped_acquire gil;
    array = py::array();
  }
  py::array array;
};

/// Throws GmoptError for a failed Expected, else returns its value.
HostTensor unwrapTensor(llvm::Expected<HostTensor> tensor,
                        const std::string &what) {
  if (!tensor)
    throw GmoptError(what + ": " + llvm::toString(tensor.takeError()));
  return std::move(*tensor);
}

/// An array of \p dtype and \p shape over \p data, kept alive by \p base.
py::array makeArray(DType dtype, llvm::ArrayRef<int64_t> shape,
                    const void *data, py::handle base) {
  std::vector<py::ssize_t> extents(shape.begin(), shape.end());
  return py::array(numpyDType(dtype), extents, {}, data, base);
}

} // namespace

HostTensor tensorFromArray(const py::handle &object, const std::string &what,
                           DType asDType) {
  // A contiguous array passes through untouched; anything else is converted
  // (copied) once, as numpy.ascontiguousarray would.
  py::array array = py::array::ensure(object, py::array::c_style);
  if (!array)
    throw py::type_error(what + ": expected a numpy.ndarray, got " +
                         py::str(object.get_type()).cast<std::string>());
  DType dtype = gmoptDType(array.dtype(), what);
  if (asDType == DType::BF16) {
    if (dtype != DType::U16)
      throw py::type_error(what +
                           ": bfloat16 tensors are passed as uint16 arrays "
                           "of their bits, got " +
                           dtypeName(dtype).str());
    dtype = DType::BF16;
  } else if (asDType != DType::Undefined && asDType != dtype) {
    throw py::type_error(what + ": expected " + dtypeName(asDType).str() +
                         " elements, got " + dtypeName(dtype).str());
  }
  std::vector<int64_t> shape;
  for (py::ssize_t i = 0; i < array.ndim(); ++i)
    shape.push_back(static_cast<int64_t>(array.shape(i)));
  void *data = const_cast<void *>(array.data());
  size_t size = static_cast<size_t>(array.nbytes());
  auto owner = std::make_shared<ArrayOwner>(std::move(array));
  return unwrapTensor(HostTensor::borrow(dtype, shape, data, size, owner),
                      what);
}

std::vector<HostTensor> tensorsFromArrays(const py::sequence &arrays,
                                          const std::string &what) {
  std::vector<HostTensor> tensors;
  tensors.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i)
    tensors.push_back(
        tensorFromArray(arrays[i], what + " " + std::to_string(i)));
  return tensors;
}

py::array arrayFromTensor(const HostTensor &tensor, bool writable) {
  HostTensor owned = tensor.getOwner() ? tensor : tensor.clone();
  // The capsule holds the storage's owner; the array views the bytes.
  auto *keeper = new std::shared_ptr<void>(owned.getOwner());
  py::capsule base(
      keeper, [](void *p) { delete static_cast<std::shared_ptr<void> *>(p); });
  py::array array =
      makeArray(owned.getDType(), owned.getShape(), owned.data(), base);
  if (!writable)
    array.attr("setflags")(py::arg("write") = false);
  return array;
}

py::array arrayFromTensorData(const TensorData &tensor) {
  const TensorType &type = tensor.getType();
  llvm::ArrayRef<uint8_t> bytes = tensor.getBytes();
  if (!type.hasStaticShape() || bytes.size() != tensor.getSizeInBytes())
    throw GmoptError("tensor contents are not available");
  auto *keeper = new TensorData(tensor);
  py::capsule base(keeper,
                   [](void *p) { delete static_cast<TensorData *>(p); });
  llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
  return makeArray(type.getDType(), shape, bytes.data(), base);
}

} // namespace gmopt::python
