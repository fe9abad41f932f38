//===- RangeMath.h - Range's length and elements, both backends -*- C++ -*-===//
//
// ONNX Range(start, limit, delta) as GMOPT_HD functions, written once for
// the CPU kernel (backend/cpu/ShapeKernels.cpp) and the CUDA one
// (backend/cuda/ShapeMath.h, ShapeKernels.cu): the element count
// ceil((limit - start) / delta) in double, at least 0, and each element.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_RANGEMATH_H
#define GMOPT_BACKEND_RANGEMATH_H

#include "backend/HostDevice.h"
#include "backend/UnfusedMath.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gmopt {

/// The number of elements of Range(start, limit, delta): ceil((limit -
/// start) / delta) in double, at least 0.
template <typename T> GMOPT_HD int64_t rangeCount(T start, T limit, T delta) {
  double steps =
      ceil((static_cast<double>(limit) - static_cast<double>(start)) /
           static_cast<double>(delta));
  return steps > 0 ? static_cast<int64_t>(steps) : 0;
}

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
