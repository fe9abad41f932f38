//===- gmopt-run.cpp - Train a compiled model -----------------------------===//
//
// The gmopt-run executable; all of its logic lives in the gmopt_driver
// library (tools/driver/RunMain.cpp and Runtime.h).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"

int main(int argc, char **argv) { return gmopt::gmoptRunMain(argc, argv); }
