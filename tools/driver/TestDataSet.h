//===- TestDataSet.h - Moved to tools/runtime/ ------------------*- C++ -*-===//
//
// The runtime layer moved into gmopt_runtime (tools/runtime/); this header
// keeps the old include path working.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_TESTDATASET_H
#define GMOPT_TOOLS_DRIVER_TESTDATASET_H

#include "tools/runtime/TestDataSet.h"

#endif // GMOPT_TOOLS_DRIVER_TESTDATASET_H
