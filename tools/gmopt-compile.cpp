//===- gmopt-compile.cpp - Compile an ONNX training graph -----------------===//
//
// The gmopt-compile executable; all of its logic lives in the gmopt_driver
// library (tools/driver/CompileMain.cpp).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"

int main(int argc, char **argv) { return gmopt::gmoptCompileMain(argc, argv); }
