//===- DropoutDevice.h - A dropout launch's mode, on the device -*- C++ -*-===//
//
// Internal to backend/cuda's .cu files: the ratio and training mode of a
// dropout launch (DropoutParams), read on the device, so no launch waits
// for the host. The dropout kernels (DropoutKernels.cu) and the fused
// attention's (AttentionKernels.cu) read it the same way, and key their
// Philox streams alike (dropoutStreamKey).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_DROPOUTDEVICE_H
#define GMOPT_BACKEND_CUDA_DROPOUTDEVICE_H

#include "backend/Philox.h"
#include "backend/cuda/CudaKernels.h"

namespace gmopt {
namespace cuda {

/// The ratio and training mode of a dropout launch.
struct DeviceDropoutMode {
  float ratio;
  bool active;
};

/// \p p's mode: a constant ratio or the ratio operand (0.5 when neither),
/// active when training with a nonzero ratio.
__device__ __forceinline__ DeviceDropoutMode
readDropoutMode(const DropoutParams &p) {
  DeviceDropoutMode mode;
  mode.ratio = p.ratioValue >= 0 ? p.ratioValue : (p.ratio ? *p.ratio : 0.5f);
  bool training = !p.inference && (p.training ? *p.training != 0 : false);
  mode.active = training && mode.ratio > 0.0f;
  return mode;
}

/// The Philox stream \p p draws from: its seed and stream id at the run's
/// step (the device counter's in a captured CUDA graph).
__device__ __forceinline__ PhiloxStreamKey
dropoutStreamKey(const DropoutParams &p) {
  return makePhiloxStreamKey(p.seed, p.streamId, dropoutStep(p));
}

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_DROPOUTDEVICE_H
