//===- ScatterMath.h - How a scatter combines, on both backends -*- C++ -*-===//
//
// The combination of an update with its target under a scatter reduction
// (ir/ops/ScatterReduction.h), written once as a GMOPT_HD function for the
// CPU ScatterElements / ScatterND kernels (backend/cpu/GatherKernels.cpp)
// and the CUDA ones (backend/cuda/IndexMath.h, IndexKernels.cu).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_SCATTERMATH_H
#define GMOPT_BACKEND_SCATTERMATH_H

#include "backend/HostDevice.h"
#include "ir/ops/ScatterReduction.h"

namespace gmopt {

/// \p update combined with \p target under \p reduction, in T's own
/// arithmetic (None: the update replaces the target; Max and Min keep the
/// target on ties and where a comparison with NaN fails).
template <typename T>
GMOPT_HD T combineScatter(ops::ScatterReduction reduction, T target, T update) {
  switch (reduction) {
  case ops::ScatterReduction::Add:
    return static_cast<T>(target + update);
  case ops::ScatterReduction::Mul:
    return static_cast<T>(target * update);
  case ops::ScatterReduction::Max:
    return target < update ? update : target;
  case ops::ScatterReduction::Min:
    return update < target ? update : target;
  case ops::ScatterReduction::None:
    break;
  }
  return update;
}

} // namespace gmopt

#endif // GMOPT_BACKEND_SCATTERMATH_H
