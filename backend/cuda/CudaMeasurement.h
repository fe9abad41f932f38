//===- CudaMeasurement.h - The CUDA backend's memory figures ----*- C++ -*-===//
//
// What the CUDA backend measures of the device, apart from the device: the
// figures a CUDA run reads (the eager baseline's dedicated memory pool's
// high-water marks, cudaMemGetInfo's free bytes before the executable
// allocated anything and after each step), the cross-check of those figures
// against the bytes the plan interpreter accounted (arena + persistent +
// workspace in planned mode, the pool's reserved bytes in eager mode) with
// its stated tolerance, the report line and JSON keys of those figures, and
// the messages for a plan that cannot fit the free device memory and for
// an allocation that fails during a run. Everything here is plain host
// code, built in every configuration and unit-tested with made-up figures;
// CudaRuntimeDevice.cpp fills the figures in on a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDAMEASUREMENT_H
#define GMOPT_BACKEND_CUDA_CUDAMEASUREMENT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>

namespace gmopt {

/// Device memory the CUDA runtime takes besides the executable's own blocks
/// between the first and the last cudaMemGetInfo of a run: the kernels'
/// code loaded lazily at their first launch (gmopt's and cuBLASLt's), the
/// stream, the cuBLASLt handle and an NCCL communicator's buffers. The
/// CUDA context itself exists before the first reading (cudaSetDevice
/// makes it) and is not in the difference.
constexpr uint64_t kCudaRuntimeSlackBytes = uint64_t(256) << 20;
/// The driver's allocation granularity: a cudaMalloc block can take up to
/// this much more than it asked for.
constexpr uint64_t kCudaAllocationGranuleBytes = uint64_t(2) << 20;

/// The CUDA device's own memory figures over the steps of an Executable
/// that prepareCudaExecutable made, to cross-check the interpreter's
/// counted MemoryReport with.
struct CudaMemoryMeasurement {
  /// Whether the executable runs in eager mode (the pool figures apply).
  bool eager = false;
  /// Eager mode: the high-water marks of the dedicated memory pool
  /// (cudaMemPoolAttrUsedMemHigh, cudaMemPoolAttrReservedMemHigh) since
  /// prepare or the last resetPeak, read after each step; 0 in planned
  /// mode, which has no pool.
  uint64_t poolUsedHighBytes = 0;
  uint64_t poolReservedHighBytes = 0;
  /// The most device memory in use (cudaMemGetInfo's total minus free: the
  /// whole device's, other processes' included) after a step.
  uint64_t deviceUsedBytes = 0;
  /// cudaMemGetInfo's free bytes before the executable allocated anything.
  uint64_t freeBeforeBytes = 0;
  /// The fewest free bytes cudaMemGetInfo reported after a step (0 before
  /// the first step).
  uint64_t lowestFreeBytes = 0;
  /// Steps measured.
  uint64_t stepsMeasured = 0;
  /// The bytes the interpreter counted at its peak (arena + persistent +
  /// workspace in planned mode; the eager blocks at their peak).
  uint64_t countedPeakBytes = 0;
  /// Planned mode: the cudaMalloc blocks made (each may be rounded up to
  /// kCudaAllocationGranuleBytes by the driver); 0 in eager mode.
  uint64_t deviceAllocations = 0;

  /// What the executable took from the device by its own accounting:
  /// planned mode, the counted peak (arena + persistent + workspace, all
  /// cudaMalloc'd before the first step); eager mode, the pool's reserved
  /// high-water mark.
  uint64_t getAccountedBytes() const {
    return eager ? poolReservedHighBytes : countedPeakBytes;
  }
  /// How much the device's free memory fell from before the executable
  /// allocated anything to the lowest reading after a step (0 when it did
  /// not fall, or before a step).
  uint64_t getDeviceDeltaBytes() const {
    return stepsMeasured && freeBeforeBytes > lowestFreeBytes
               ? freeBeforeBytes - lowestFreeBytes
               : 0;
  }
};

/// The difference between the device delta and the accounted bytes of \p
/// measurement that is still agreement: kCudaRuntimeSlackBytes plus one
/// kCudaAllocationGranuleBytes per cudaMalloc block.
uint64_t
getDeviceMemoryToleranceBytes(const CudaMemoryMeasurement &measurement);

/// Success when \p measurement's figures agree: the device's free memory
/// fell by the accounted bytes within getDeviceMemoryToleranceBytes (either
/// way), and in eager mode the pool's used high-water mark holds at least
/// the interpreter's counted peak. Otherwise an error naming the figures
/// and the tolerance (\p what names the run, e.g. "the baseline"). Nothing
/// to check (success) before a step was measured.
llvm::Error checkDeviceMemoryAgreement(const CudaMemoryMeasurement &measurement,
                                       llvm::StringRef what);

/// The JSON form, the extra keys of a CUDA run's report:
/// {"pool_used_high_bytes", "pool_reserved_high_bytes" (null in planned
/// mode), "free_before_bytes", "lowest_free_bytes", "device_delta_bytes",
/// "device_used_bytes", "accounted_bytes", "counted_peak_bytes",
/// "device_allocations", "tolerance_bytes", "agrees"}.
llvm::json::Object cudaMemoryJson(const CudaMemoryMeasurement &measurement);

/// One line naming \p measurement's figures, e.g. "device memory (cuda):
/// pool used high N bytes, pool reserved high M bytes, device used K bytes
/// after a step (cudaMemGetInfo); free memory fell by D bytes, accounted A
/// bytes (tolerance T bytes): agrees"; planned mode has no pool figures.
std::string
describeCudaMemoryMeasurement(const CudaMemoryMeasurement &measurement);

/// The error for \p plannedBytes that do not fit in \p freeBytes of device
/// memory with kCudaRuntimeSlackBytes to spare, naming both and the options
/// that would fit; success when they fit.
llvm::Error checkPlannedBytesFit(uint64_t plannedBytes, uint64_t freeBytes,
                                 llvm::StringRef deviceName);

/// The error for an allocation of \p requestedBytes that failed during a
/// run (\p failedCall: the CUDA call and its error name) while \p freeBytes
/// of \p totalBytes were free: the same advice as checkPlannedBytesFit.
llvm::Error outOfDeviceMemoryError(uint64_t requestedBytes, uint64_t freeBytes,
                                   uint64_t totalBytes,
                                   llvm::StringRef deviceName,
                                   llvm::StringRef failedCall);

} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDAMEASUREMENT_H
