//===- CudaMeasurement.cpp - The CUDA backend's memory figures ------------===//
//
// The host side of the CUDA backend's measurement (CudaMeasurement.h): the
// tolerance and the agreement check between the device's own figures and
// the interpreter's accounting, their report line and JSON keys, and the
// out-of-memory messages. Built in every configuration: none of it calls
// CUDA, so the unit tests run it with made-up figures on any machine.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaMeasurement.h"

#include "llvm/Support/FormatVariadic.h"

#include <system_error>

using namespace gmopt;

namespace {

/// \p bytes as "N bytes (X.XX GiB)".
std::string describeBytes(uint64_t bytes) {
  return llvm::formatv("{0} bytes ({1:F2} GiB)", bytes,
                       static_cast<double>(bytes) / (1024.0 * 1024 * 1024))
      .str();
}

/// |a - b|.
uint64_t distance(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

/// What would fit in \p freeBytes: a --memory-limit compile that leaves the
/// runtime's slack free, or the CPU backend.
std::string fittingOptions(uint64_t freeBytes) {
  uint64_t limit = freeBytes > kCudaRuntimeSlackBytes
                       ? freeBytes - kCudaRuntimeSlackBytes
                       : freeBytes;
  return llvm::formatv("compile with `gmopt-compile --memory-limit={0}` (the "
                       "free bytes less {1} MiB for the CUDA runtime) to plan "
                       "a step that fits, or run with --backend=cpu",
                       limit, kCudaRuntimeSlackBytes >> 20)
      .str();
}

} // namespace

uint64_t
gmopt::getDeviceMemoryToleranceBytes(const CudaMemoryMeasurement &measurement) {
  return kCudaRuntimeSlackBytes +
         measurement.deviceAllocations * kCudaAllocationGranuleBytes;
}

llvm::Error
gmopt::checkDeviceMemoryAgreement(const CudaMemoryMeasurement &measurement,
                                  llvm::StringRef what) {
  if (!measurement.stepsMeasured)
    return llvm::Error::success();
  uint64_t accounted = measurement.getAccountedBytes();
  uint64_t delta = measurement.getDeviceDeltaBytes();
  uint64_t tolerance = getDeviceMemoryToleranceBytes(measurement);
  if (distance(delta, accounted) > tolerance)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv(
            "device memory of {0} does not agree with its "
            "accounting: the free device memory fell by {1} bytes "
            "(cudaMemGetInfo: {2} free before, {3} at the lowest "
            "after a step) but the run accounts {4} bytes ({5}); "
            "the difference {6} bytes exceeds the tolerance of {7} "
            "bytes ({8} MiB for the CUDA runtime + {9} MiB per "
            "cudaMalloc block x {10}). Another process using the "
            "device changes these figures",
            what, delta, measurement.freeBeforeBytes,
            measurement.lowestFreeBytes, accounted,
            measurement.eager ? "the pool's reserved high-water mark"
                              : "arena + persistent + workspace",
            distance(delta, accounted), tolerance, kCudaRuntimeSlackBytes >> 20,
            kCudaAllocationGranuleBytes >> 20, measurement.deviceAllocations)
            .str());
  if (measurement.eager &&
      measurement.poolUsedHighBytes < measurement.countedPeakBytes)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("device memory of {0} does not agree with its "
                      "accounting: the memory pool's used high-water mark "
                      "(cudaMemPoolAttrUsedMemHigh) is {1} bytes, less than "
                      "the {2} bytes the run counted at its peak",
                      what, measurement.poolUsedHighBytes,
                      measurement.countedPeakBytes)
            .str());
  return llvm::Error::success();
}

llvm::json::Object
gmopt::cudaMemoryJson(const CudaMemoryMeasurement &measurement) {
  auto bytes = [](uint64_t value) {
    return llvm::json::Value(static_cast<int64_t>(value));
  };
  auto poolBytes = [&](uint64_t value) {
    return measurement.eager ? bytes(value) : llvm::json::Value(nullptr);
  };
  llvm::Error agreement = checkDeviceMemoryAgreement(measurement, "the run");
  bool agrees = !agreement;
  llvm::consumeError(std::move(agreement));
  return llvm::json::Object{
      {"pool_used_high_bytes", poolBytes(measurement.poolUsedHighBytes)},
      {"pool_reserved_high_bytes",
       poolBytes(measurement.poolReservedHighBytes)},
      {"free_before_bytes", bytes(measurement.freeBeforeBytes)},
      {"lowest_free_bytes", bytes(measurement.lowestFreeBytes)},
      {"device_delta_bytes", bytes(measurement.getDeviceDeltaBytes())},
      {"device_used_bytes", bytes(measurement.deviceUsedBytes)},
      {"accounted_bytes", bytes(measurement.getAccountedBytes())},
      {"counted_peak_bytes", bytes(measurement.countedPeakBytes)},
      {"device_allocations", bytes(measurement.deviceAllocations)},
      {"tolerance_bytes", bytes(getDeviceMemoryToleranceBytes(measurement))},
      {"agrees", agrees}};
}

std::string
gmopt::describeCudaMemoryMeasurement(const CudaMemoryMeasurement &measurement) {
  std::string line = "device memory (cuda): ";
  if (measurement.eager)
    line += llvm::formatv("pool used high {0} bytes, pool reserved high {1} "
                          "bytes, ",
                          measurement.poolUsedHighBytes,
                          measurement.poolReservedHighBytes)
                .str();
  line += llvm::formatv("device used {0} bytes after a step (cudaMemGetInfo)",
                        measurement.deviceUsedBytes)
              .str();
  if (!measurement.stepsMeasured)
    return line;
  llvm::Error agreement = checkDeviceMemoryAgreement(measurement, "the run");
  bool agrees = !agreement;
  llvm::consumeError(std::move(agreement));
  line += llvm::formatv("; free memory fell by {0} bytes, accounted {1} bytes "
                        "(tolerance {2} bytes): {3}",
                        measurement.getDeviceDeltaBytes(),
                        measurement.getAccountedBytes(),
                        getDeviceMemoryToleranceBytes(measurement),
                        agrees ? "agrees" : "MISMATCH")
              .str();
  return line;
}

llvm::Error gmopt::checkPlannedBytesFit(uint64_t plannedBytes,
                                        uint64_t freeBytes,
                                        llvm::StringRef deviceName) {
  // The runtime's own share (lazily loaded kernels, cuBLASLt, NCCL) comes
  // on top during the first step: leave room for it now rather than fail
  // inside a step.
  if (plannedBytes <= freeBytes &&
      freeBytes - plannedBytes >= kCudaRuntimeSlackBytes)
    return llvm::Error::success();
  return llvm::createStringError(
      std::make_error_code(std::errc::not_enough_memory),
      "the planned step needs " + describeBytes(plannedBytes) + " + " +
          llvm::Twine(kCudaRuntimeSlackBytes >> 20) +
          " MiB for the CUDA runtime but " + deviceName + " has " +
          describeBytes(freeBytes) +
          " free (nothing was run): " + fittingOptions(freeBytes));
}

llvm::Error gmopt::outOfDeviceMemoryError(uint64_t requestedBytes,
                                          uint64_t freeBytes,
                                          uint64_t totalBytes,
                                          llvm::StringRef deviceName,
                                          llvm::StringRef failedCall) {
  return llvm::createStringError(
      std::make_error_code(std::errc::not_enough_memory),
      "out of device memory on " + deviceName + ": allocating " +
          describeBytes(requestedBytes) + " failed (" + failedCall + ") with " +
          describeBytes(freeBytes) + " of " + describeBytes(totalBytes) +
          " free: " + fittingOptions(freeBytes));
}
