//===- FitMemory.h - Moved to tools/compiler/ -------------------*- C++ -*-===//
//
// The compiler's configuration search and phase timer moved into
// gmopt_compiler (tools/compiler/); this header keeps the old include path
// working.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_FITMEMORY_H
#define GMOPT_TOOLS_DRIVER_FITMEMORY_H

#include "tools/compiler/FitMemory.h"

#endif // GMOPT_TOOLS_DRIVER_FITMEMORY_H
