//===- OptimizerStateMap.h - Moved to tools/runtime/ ------------*- C++ -*-===//
//
// The runtime layer moved into gmopt_runtime (tools/runtime/); this header
// keeps the old include path working.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_OPTIMIZERSTATEMAP_H
#define GMOPT_TOOLS_DRIVER_OPTIMIZERSTATEMAP_H

#include "tools/runtime/OptimizerStateMap.h"

#endif // GMOPT_TOOLS_DRIVER_OPTIMIZERSTATEMAP_H
