//===- CudaDevice.cpp - Probing, workspace model, kernel check ------------===//
//
// The parts of the CUDA backend every build has: device probing through
// the CUDA runtime API (compiled only when the toolkit was found at
// configure time, GMOPT_HAVE_CUDA; otherwise it reports that the backend
// is not built), the CUDA workspace model, the whole-module kernel check,
// and the no-toolkit fallbacks of the functions CudaDispatch.cpp and
// CudaRuntimeDevice.cpp define in a CUDA build.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"

#include "backend/Executor.h"
#include "backend/cuda/CudaGraphCapture.h"
#include "backend/cuda/CudaKernelTable.h"
#include "backend/cuda/NcclCollectives.h"
#include "ir/IR.h"
#include "ir/Module.h"

#include "llvm/Support/FormatVariadic.h"

#include "backend/cuda/CudaLibraries.h"

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
  // Every GEMM runs on cuBLASLt, which is opened at run time: a device
  // without it is no device gmopt can use (cuDNN, needed by the CNN ops
  // only, is asked for by their kernel checks).
  if (llvm::Error err = cuda::loadCublasLt())
    return fail("no CUDA device usable (" + llvm::toString(std::move(err)) +
                "; put the folder that holds it on LD_LIBRARY_PATH)");
  CudaDeviceInfo info;
  info.ordinal = 0;
  info.name = properties.name;
  info.computeMajor = properties.major;
  info.computeMinor = properties.minor;
  info.totalMemoryBytes = properties.totalGlobalMem;
  return info;
#else
  return fail("the CUDA backend is not built: no CUDA toolkit at configure "
              "time");
#endif
}

uint64_t gmopt::getCudaKernelWorkspaceBytes(const Node &node) {
  // The kernel table's scratch column (CudaKernelTable.h), by op identity.
  cuda::ScratchFn rule =
      cuda::getKernelScratchRule(node.getDomain(), node.getOpType());
  return rule ? rule(node) : 0;
}

llvm::Error gmopt::checkCudaModule(const Module &module) {
  for (const Node &node : module.getGraph().getNodes())
    if (llvm::Error err = checkCudaNode(node))
      return err;
  return llvm::Error::success();
}

#ifndef GMOPT_HAVE_CUDA
namespace {
llvm::Error notBuilt() {
  return fail("the CUDA backend is not built: no CUDA toolkit at configure "
              "time");
}
} // namespace

std::string cuda::getCublasLtLibraryName() { return std::string(); }
std::string cuda::getCudnnLibraryName() { return std::string(); }
llvm::Error cuda::loadCublasLt() { return notBuilt(); }
llvm::Error cuda::loadCudnn() { return notBuilt(); }
llvm::Expected<size_t> cuda::getCublasLtVersion() { return notBuilt(); }
llvm::Expected<size_t> cuda::getCudnnVersion() { return notBuilt(); }

std::optional<CudaMemoryMeasurement>
gmopt::getCudaMemoryMeasurement(const Executable &) {
  return std::nullopt;
}

bool gmopt::isCudnnBuilt() { return false; }

bool gmopt::hasCudaKernelFor(llvm::StringRef, llvm::StringRef) { return false; }

llvm::Error gmopt::checkCudaNode(const Node &node) {
  return fail("no CUDA kernel for '" + node.getOp().str() +
              "': the CUDA backend is not built (node " + node.describe() +
              ")");
}

llvm::Expected<std::unique_ptr<Executable>>
gmopt::prepareCudaExecutable(const Module &module,
                             const ExecutorOptions &options,
                             const CudaDeviceOptions &) {
  // The same first reason as a CUDA build's.
  if (options.cudaGraph)
    if (llvm::Error err = checkCudaGraphCapturable(module, options, "cuda"))
      return err;
  return fail("the CUDA backend is not built: no CUDA toolkit at configure "
              "time");
}
#endif
