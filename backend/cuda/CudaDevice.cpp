//===- CudaDevice.cpp - Finding a usable CUDA device ----------------------===//
//
// Device probing through the CUDA runtime API. Compiled only when the CUDA
// toolkit was found at configure time (GMOPT_HAVE_CUDA); otherwise the
// fallback below reports that the backend is not
// built.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "llvm/Support/FormatVariadic.h"

#ifdef GMOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace gmopt;

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

bool gmopt::isCudaBackendBuilt() {
#ifdef GMOPT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

llvm::Expected<CudaDeviceInfo> gmopt::probeCudaDevice() {
#ifdef GMOPT_HAVE_CUDA
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // Clear the sticky error so later runtime calls are not poisoned.
    (void)cudaGetLastError();
    return fail(llvm::formatv("no CUDA device (cudaGetDeviceCount: error {0}, "
                              "{1})",
                              static_cast<int>(status),
                              cudaGetErrorString(status)));
  }
  if (count == 0)
    return fail("no CUDA device (the driver reports none)");
  cudaDeviceProp properties;
  status = cudaGetDeviceProperties(&properties, 0);
  if (status != cudaSuccess)
    return fail(llvm::formatv("no CUDA device (cudaGetDeviceProperties: {0})",
                              cudaGetErrorString(status)));
  CudaDeviceInfo info;
  info.ordinal = 0;
  info.name = properties.name;
  info.computeMajor = properties.major;
  info.computeMinor = properties.minor;
  info.totalMemoryBytes = properties.totalGlobalMem;
  return info;
#else
  return fail("the CUDA backend is not built (no CUDA toolkit at configure "
              "time)");
#endif
}
