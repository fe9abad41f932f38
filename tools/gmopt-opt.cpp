//===- gmopt-opt.cpp - Run gmopt passes on a module -----------------------===//
//
// The gmopt-opt executable; all of its logic lives in the gmopt_driver
// library (tools/driver/OptMain.cpp).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"

int main(int argc, char **argv) { return gmopt::gmoptOptMain(argc, argv); }
