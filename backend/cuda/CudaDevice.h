//===- CudaDevice.h - The CUDA backend's public face -----------*- C++ -*-===//
//
// The CUDA backend's first duty is to know whether it can run at all. On a
// machine with the toolkit but no GPU (or no driver), cudaGetDeviceCount
// fails (error 35, "CUDA driver version is insufficient", or 100, "no
// CUDA-capable device") and gmopt must say "no CUDA device" and fall back to
// the CPU, never crash. The runtime is linked dynamically (cudart) and the
// driver library is never linked, so binaries start without a driver.
//
// With a device, prepareCudaExecutable runs a module on the plan
// interpreter over the CUDA Device (CudaRuntimeDevice.cpp): one cudaMalloc
// per persistent value and one for the plan's arena, made before the first
// step after checking the planned bytes against the device's free memory;
// eager mode (the baseline) allocates stream-ordered from a dedicated
// memory pool. Everything here is declared in every build: without the
// toolkit the functions report that the backend is not built.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDADEVICE_H
#define GMOPT_BACKEND_CUDA_CUDADEVICE_H

#include "backend/cuda/CudaMeasurement.h"
#include "backend/cuda/NcclCollectives.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace gmopt {

class Executable;
class Module;
class Node;
struct ExecutorOptions;

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

/// True when the CUDA backend was built with cuDNN (its convolution and
/// batch-norm kernels); without, those nodes are refused with "built
/// without cuDNN".
bool isCudnnBuilt();

/// Finds the first usable CUDA device. Fails with a message that starts with
/// "no CUDA device" when there is none (or no driver), and with "the CUDA
/// backend is not built" when gmopt was built without the toolkit.
llvm::Expected<CudaDeviceInfo> probeCudaDevice();

/// The name of the CUDA kernels' workspace model, as plans record it
/// (`gmopt-compile --workspace=cuda`).
constexpr llvm::StringLiteral kCudaWorkspaceModelName = "cuda";
/// cuBLASLt scratch the CUDA workspace model reserves for each GEMM node.
constexpr uint64_t kCudaGemmWorkspaceBytes = uint64_t(4) << 20;

/// The CUDA backend's WorkspaceModel: the planned scratch bytes of \p
/// node's CUDA kernel (kCudaGemmWorkspaceBytes for MatMul, Gemm,
/// FusedMatMul and an Einsum that runs on cuBLASLt, cuda::isCublasEinsum;
/// for Conv and ConvGrad a bound from the shapes, the whole
/// batch's im2col bytes clamped to [4 MiB, 64 MiB], within which cuDNN
/// picks its fastest algorithm, plus the explicitly padded input (and its
/// gradient) of asymmetric pads (cuda::getCudnnConvWorkspaceBytes,
/// CudnnGeometry.h); batch norm's unreturned statistics; a 16-bit
/// MaxPoolGrad's or GatherGrad's fp32 accumulator; 0 for every other
/// kernel).
uint64_t getCudaKernelWorkspaceBytes(const Node &node);

/// True when the CUDA backend is built and has a kernel for (\p domain,
/// \p opType); a node may still be refused for its types (see
/// checkCudaNode).
bool hasCudaKernelFor(llvm::StringRef domain, llvm::StringRef opType);

/// Success when \p node can run on the CUDA kernels; else an error naming
/// the node and what is missing (no kernel for the op, an unsupported
/// element type or layout). Needs no device.
llvm::Error checkCudaNode(const Node &node);

/// Success when every node of \p module's graph can run on the CUDA
/// kernels; else the first refused node's checkCudaNode error (it names
/// the op and the node). Needs no device: `--backend=auto` uses it to fall
/// back to the CPU before preparing.
llvm::Error checkCudaModule(const Module &module);

/// Options of the CUDA device beyond ExecutorOptions.
struct CudaDeviceOptions {
  /// Let fp32 GEMMs use TF32 tensor cores (off: full fp32 products).
  bool allowTf32 = false;
  /// The data-parallel ranks (a single process by default): collectives
  /// run over an NCCL communicator made through it, and with several ranks
  /// each takes GPU localRank of its machine.
  CollectiveBootstrap bootstrap;
};

/// \p executable's CUDA memory figures when prepareCudaExecutable made it;
/// std::nullopt otherwise.
std::optional<CudaMemoryMeasurement>
getCudaMemoryMeasurement(const Executable &executable);

/// Prepares \p module to run on the first CUDA device (planned mode: its
/// plan must be made for the `cuda` or `none` workspace model). Fails
/// without a device, for a node without a CUDA kernel, and when the
/// planned bytes exceed the free device memory (checkPlannedBytesFit).
llvm::Expected<std::unique_ptr<Executable>>
prepareCudaExecutable(const Module &module, const ExecutorOptions &options,
                      const CudaDeviceOptions &cudaOptions = {});

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDADEVICE_H
