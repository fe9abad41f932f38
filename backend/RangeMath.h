//===- RangeMath.h - Range's elements, both backends ------------*- C++ -*-===//
//
// ONNX Range(start, limit, delta)'s elements as a GMOPT_HD function,
// written once for the CPU kernel (backend/cpu/ShapeKernels.cpp) and the
// CUDA one (backend/cuda/ShapeMath.h, ShapeKernels.cu). The element count
// is the shape evaluator's ops::rangeCount (ir/ops/RangeCount.h).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_RANGEMATH_H
#define GMOPT_BACKEND_RANGEMATH_H

#include "backend/HostDevice.h"
#include "backend/UnfusedMath.h"
#include "ir/ops/RangeCount.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gmopt {

// Range's length is the shape evaluator's (ir/ops/RangeCount.h).
using ops::rangeCount;

/// Element \p i of the range, start + T(i) * delta: a product, then a
/// sum, never fused into an FMA on the device.
template <typename T> GMOPT_HD T rangeElement(T start, T delta, int64_t i) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return addUnfused(start, mulUnfused(static_cast<T>(i), delta));
  else
    return static_cast<T>(start + static_cast<T>(i) * delta);
}

} // namespace gmopt

#endif // GMOPT_BACKEND_RANGEMATH_H
