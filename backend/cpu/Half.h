//===- Half.h - 16-bit float conversions for the CPU kernels ----*- C++ -*-===//
//
// The CPU kernels' names for ir/Half.h's conversions and storage types.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_HALF_H
#define GMOPT_BACKEND_CPU_HALF_H

#include "ir/Half.h"

namespace gmopt {
namespace cpu {
using gmopt::BFloat16;
using gmopt::bfloat16ToFloat;
using gmopt::Float16;
using gmopt::floatBits;
using gmopt::floatFromBits;
using gmopt::floatToBFloat16;
using gmopt::floatToHalf;
using gmopt::halfToFloat;
} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_HALF_H
