//===- OnnxBindings.cpp - Reading ONNX models from Python -------*- C++ -*-===//
//
// _core.inspect_onnx: imports an ONNX model with gmopt's importer (type
// inference and the verifier included) and describes its graph: inputs and
// outputs with their types, the initializers and the node count. Tests use
// it to check a model gmopt wrote (an inference export) without the onnx
// package; users, to see what a model takes before feeding it.
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"
#include "python/src/Errors.h"

#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "llvm/Support/raw_ostream.h"

#include <pybind11/stl.h>

namespace py = pybind11;
using namespace gmopt;
using namespace gmopt::python;

namespace {

/// `{"name": ..., "type": "f32[batch,64]"}` for \p value.
py::dict describeValue(const Value &value) {
  std::string type;
  llvm::raw_string_ostream os(type);
  value.getType().print(os);
  py::dict entry;
  entry["name"] = value.getName().str();
  entry["type"] = os.str();
  return entry;
}

} // namespace

void gmopt::python::bindOnnx(py::module_ &m) {
  m.def(
      "inspect_onnx",
      [](const std::string &path, std::map<std::string, int64_t> dims) {
        OnnxImportOptions options;
        options.dimBindings = std::move(dims);
        std::unique_ptr<Module> module;
        {
          py::gil_scoped_release release;
          module = unwrap(importOnnxFile(path, options));
        }
        const Graph &graph = module->getGraph();
        py::list inputs, outputs, initializers;
        for (const auto &input : graph.getInputs())
          inputs.append(describeValue(*input));
        for (Value *output : graph.getOutputs())
          outputs.append(describeValue(*output));
        for (const auto &initializer : graph.getInitializers())
          initializers.append(describeValue(*initializer));
        py::dict result;
        result["inputs"] = inputs;
        result["outputs"] = outputs;
        result["initializers"] = initializers;
        result["nodes"] = graph.getNumNodes();
        return result;
      },
      py::arg("path"), py::arg("dims") = std::map<std::string, int64_t>(),
      "Imports an ONNX model with gmopt's importer (types inferred, graph "
      "verified) and describes it: inputs, outputs, initializers (each a "
      "dict of name and type) and the node count.");
}
