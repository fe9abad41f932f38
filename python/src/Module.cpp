//===- Module.cpp - The gmopt._core extension module ------------*- C++ -*-===//
//
// Defines the extension module the gmopt Python package imports: the error
// type and the helpers; each area binds itself from its own file
// (TrainingSessionBindings.cpp, OnnxBindings.cpp, CompilerBindings.cpp).
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"
#include "python/src/Errors.h"
#include "python/src/NumpyTensor.h"

#include "tools/driver/TestDataSet.h"

namespace py = pybind11;
using namespace gmopt;
using namespace gmopt::python;

PYBIND11_MODULE(_core, m) {
  m.doc() = "gmopt's C++ libraries for the gmopt Python package";
  py::register_exception<GmoptError>(m, "Error", PyExc_RuntimeError);

  m.def(
      "read_tensor_file",
      [](const std::string &path) {
        NamedTensor tensor = unwrap(readTensorFile(path));
        return py::make_tuple(tensor.name, arrayFromTensorData(tensor.data));
      },
      py::arg("path"),
      "Reads one serialized onnx.TensorProto (an ONNX test-data `input_K.pb`): "
      "returns (name, array).");

  bindTrainingSession(m);
  bindOnnx(m);
  bindCompiler(m);
  bindTorchSupport(m);
}
