//===- Driver.h - Entry points of gmopt's command-line tools ----*- C++ -*-===//
//
// Each tool's main() only forwards to one of these functions, so the tools'
// logic is a library that tests and other front ends can link (the split
// of mlir-opt's main over MlirOptMain.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_DRIVER_H
#define GMOPT_TOOLS_DRIVER_DRIVER_H

namespace gmopt {

/// gmopt-opt: loads a module (text or ONNX), runs a pass pipeline, writes
/// the result. Returns the process exit status.
int gmoptOptMain(int argc, char **argv);

/// gmopt-compile: imports an ONNX training graph, runs the default (or a
/// given) pipeline and writes the rewritten model. Returns the exit status.
int gmoptCompileMain(int argc, char **argv);

/// gmopt-run: trains a `.gm` file or an ONNX training graph on a backend,
/// checks it against references and reports its memory. Returns the exit
/// status: 0, 1 for usage/input errors, 2 for numerical failures.
int gmoptRunMain(int argc, char **argv);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_DRIVER_H
