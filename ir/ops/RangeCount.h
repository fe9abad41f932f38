//===- RangeCount.h - How many elements ONNX Range makes --------*- C++ -*-===//
//
// The one rule for the length of Range(start, limit, delta): the shape
// evaluator (ShapeEval.h), the shape folder and the CPU kernel call it on
// the host, and the CUDA Range kernel on the device (which reads the
// scalars where they live), so it is a GMOPT_HD function with no LLVM
// dependence. Floats follow ONNX: ceil((limit - start) / delta) in double,
// at least 0. Integers are counted exactly, without the rounding a double
// would add for extents beyond 2^53 and without overflow.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_RANGECOUNT_H
#define GMOPT_IR_OPS_RANGECOUNT_H

#include "backend/HostDevice.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gmopt {
namespace ops {

/// The number of elements of Range(\p start, \p limit, \p delta), at least
/// 0 and at most INT64_MAX; \p delta must not be zero.
template <typename T> GMOPT_HD int64_t rangeCount(T start, T limit, T delta) {
  if constexpr (std::is_integral_v<T>) {
    // The distance and the step as unsigned magnitudes: exact for any pair
    // of int64 values, where limit - start could overflow.
    bool up = delta > 0;
    if (up ? limit <= start : limit >= start)
      return 0;
    uint64_t distance =
        up ? static_cast<uint64_t>(limit) - static_cast<uint64_t>(start)
           : static_cast<uint64_t>(start) - static_cast<uint64_t>(limit);
    uint64_t step = up ? static_cast<uint64_t>(delta)
                       : static_cast<uint64_t>(-(delta + 1)) + 1;
    uint64_t count = distance / step + (distance % step != 0 ? 1 : 0);
    return count > static_cast<uint64_t>(INT64_MAX)
               ? INT64_MAX
               : static_cast<int64_t>(count);
  } else {
    double steps =
        ceil((static_cast<double>(limit) - static_cast<double>(start)) /
             static_cast<double>(delta));
    if (!(steps > 0))
      return 0;
    return steps >= 9223372036854775807.0 ? INT64_MAX
                                          : static_cast<int64_t>(steps);
  }
}

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_RANGECOUNT_H
