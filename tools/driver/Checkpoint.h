//===- Checkpoint.h - Moved to tools/runtime/ -------------------*- C++ -*-===//
//
// The runtime layer moved into gmopt_runtime (tools/runtime/); this header
// keeps the old include path working.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_CHECKPOINT_H
#define GMOPT_TOOLS_DRIVER_CHECKPOINT_H

#include "tools/runtime/Checkpoint.h"

#endif // GMOPT_TOOLS_DRIVER_CHECKPOINT_H
