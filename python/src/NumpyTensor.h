//===- NumpyTensor.h - NumPy arrays to and from gmopt tensors ---*- C++ -*-===//
//
// The one place where the Python package turns NumPy arrays into the
// runtime's HostTensors and back. Neither direction copies when the layout
// allows: a C-contiguous array of a supported dtype is borrowed in place (the
// tensor keeps the array alive), and a tensor handed to Python becomes an
// array over the tensor's own bytes (the array keeps the tensor's storage
// alive). bfloat16, which NumPy lacks, travels as uint16 arrays holding the
// raw bits; 8- and 4-bit float types have no NumPy form and are refused.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PYTHON_SRC_NUMPYTENSOR_H
#define GMOPT_PYTHON_SRC_NUMPYTENSOR_H

#include "ir/Attribute.h"
#include "tools/runtime/TrainingSession.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace gmopt::python {

/// The NumPy dtype that holds \p dtype's elements (uint16 for bf16); throws
/// ValueError for types NumPy cannot hold.
pybind11::dtype numpyDType(DType dtype);

/// gmopt's element type for the NumPy dtype \p dtype; throws TypeError naming
/// \p what for dtypes gmopt does not store.
DType gmoptDType(const pybind11::dtype &dtype, const std::string &what);

/// A tensor over \p array's elements, of the array's element type or of
/// \p asDType when given (bf16 reads a uint16 array as raw bits). A
/// C-contiguous array is borrowed, not copied; another one (or a Python
/// scalar or sequence, as numpy.asarray reads it) is converted once. Throws
/// TypeError naming \p what for an unsupported dtype.
HostTensor tensorFromArray(const pybind11::handle &array,
                           const std::string &what,
                           DType asDType = DType::Undefined);

/// tensorFromArray for each of \p arrays; \p what names the list.
std::vector<HostTensor> tensorsFromArrays(const pybind11::sequence &arrays,
                                          const std::string &what);

/// An array over \p tensor's bytes: no copy when the tensor owns its bytes
/// (the array holds the owner), a copy for a tensor without an owner. With
/// \p writable false the array is read-only.
pybind11::array arrayFromTensor(const HostTensor &tensor, bool writable = true);

/// An array over \p tensor's bytes (no copy; the array holds the storage).
pybind11::array arrayFromTensorData(const TensorData &tensor);

} // namespace gmopt::python

#endif // GMOPT_PYTHON_SRC_NUMPYTENSOR_H
