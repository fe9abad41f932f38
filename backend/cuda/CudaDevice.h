//===- CudaDevice.h - Finding a usable CUDA device --------------*- C++ -*-===//
//
// The CUDA backend's first duty is to know whether it can run at all. On a
// machine with the toolkit but no GPU (or no driver), cudaGetDeviceCount
// fails (error 35, "CUDA driver version is insufficient", or 100, "no
// CUDA-capable device") and gmopt must say "no CUDA device" and fall back to
// the CPU, never crash. The runtime is linked dynamically (cudart) and the
// driver library is never linked, so binaries start without a driver.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDADEVICE_H
#define GMOPT_BACKEND_CUDA_CUDADEVICE_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace gmopt {

/// What gmopt needs to know about the device it would run on.
struct CudaDeviceInfo {
  /// Device ordinal.
  int ordinal = 0;
  /// Marketing name, e.g. "NVIDIA H200".
  std::string name;
  /// Compute capability major.minor.
  int computeMajor = 0;
  int computeMinor = 0;
  /// Total global memory in bytes.
  uint64_t totalMemoryBytes = 0;
};

/// True when gmopt was built with the CUDA toolkit.
bool isCudaBackendBuilt();

/// Finds the first usable CUDA device. Fails with a message that starts with
/// "no CUDA device" when there is none (or no driver), and with "the CUDA
/// backend is not built" when gmopt was built without the toolkit.
llvm::Expected<CudaDeviceInfo> probeCudaDevice();

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDADEVICE_H
