//===- Bindings.h - The parts of the gmopt._core module ---------*- C++ -*-===//
//
// Each area of the extension binds its classes and functions into the module
// from its own file; Module.cpp calls them in order.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PYTHON_SRC_BINDINGS_H
#define GMOPT_PYTHON_SRC_BINDINGS_H

#include <pybind11/pybind11.h>

namespace gmopt::python {

/// gmopt_runtime's TrainingSession and its options
/// (TrainingSessionBindings.cpp).
void bindTrainingSession(pybind11::module_ &m);

/// compile_plan, the plan's figures and timeline (CompilerBindings.cpp).
void bindCompiler(pybind11::module_ &m);

/// inspect_onnx, gmopt's ONNX importer (OnnxBindings.cpp).
void bindOnnx(pybind11::module_ &m);

/// compile_forward, a forward model's training step for gmopt.torch
/// (TorchSupport.cpp).
void bindTorchSupport(pybind11::module_ &m);

} // namespace gmopt::python

#endif // GMOPT_PYTHON_SRC_BINDINGS_H
