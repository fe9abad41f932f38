//===- CudaMeasurementTest.cpp - The CUDA measurement, without a GPU ------===//
//
// The host-side parts of the CUDA backend's measurement, run with made-up
// figures on any machine: the step-time median after warm-up, the tolerance
// and the agreement check between cudaMemGetInfo's free-memory delta and the
// accounted bytes (planned: arena + persistent + workspace; eager: the
// pool's reserved high-water mark), the report line, the extra JSON keys of
// a CUDA run next to the CPU report's keys, and the out-of-memory messages
// (planned bytes vs free, an allocation failing inside a run) that name the
// options that would fit.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaMeasurement.h"

#include "tools/driver/RunReport.h"
#include "tools/driver/Runtime.h"

#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;

/// A planned run that took \p accounted bytes by its accounting while the
/// device's free memory fell by \p delta over \p blocks cudaMalloc blocks.
CudaMemoryMeasurement planned(uint64_t accounted, uint64_t delta,
                              uint64_t blocks = 10) {
  CudaMemoryMeasurement m;
  m.countedPeakBytes = accounted;
  m.deviceAllocations = blocks;
  m.freeBeforeBytes = 40000 * MiB;
  m.lowestFreeBytes = m.freeBeforeBytes - delta;
  m.deviceUsedBytes = 80000 * MiB - m.lowestFreeBytes;
  m.stepsMeasured = 3;
  return m;
}

/// An eager run whose pool reserved \p reserved bytes (used \p used at its
/// high) for a counted peak of \p counted, the free memory falling by \p
/// delta.
CudaMemoryMeasurement eager(uint64_t counted, uint64_t used, uint64_t reserved,
                            uint64_t delta) {
  CudaMemoryMeasurement m;
  m.eager = true;
  m.countedPeakBytes = counted;
  m.poolUsedHighBytes = used;
  m.poolReservedHighBytes = reserved;
  m.freeBeforeBytes = 40000 * MiB;
  m.lowestFreeBytes = m.freeBeforeBytes - delta;
  m.stepsMeasured = 2;
  return m;
}

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

} // namespace

TEST(CudaMeasurementTest, MedianSkipsTheWarmUpMicroStep) {
  EXPECT_EQ(warmupMicroSteps(0), 0u);
  EXPECT_EQ(warmupMicroSteps(1), 0u);
  EXPECT_EQ(warmupMicroSteps(2), 1u);
  EXPECT_EQ(warmupMicroSteps(10), 1u);
  // A slow first step (lazy loading) must not move the median.
  EXPECT_DOUBLE_EQ(medianAfterWarmup({500.0, 10.0, 12.0, 11.0}, 1), 11.0);
  EXPECT_DOUBLE_EQ(medianAfterWarmup({500.0, 10.0, 12.0}, 1), 11.0);
  EXPECT_DOUBLE_EQ(medianAfterWarmup({500.0, 10.0, 12.0}, 0), 12.0);
  // One step: nothing to skip; no steps: 0.
  EXPECT_DOUBLE_EQ(medianAfterWarmup({7.0}, 1), 7.0);
  EXPECT_DOUBLE_EQ(medianAfterWarmup({}, 1), 0.0);

  TrainingResult result;
  result.microStepMilliseconds = {900.0, 20.0, 30.0, 25.0};
  EXPECT_EQ(result.getWarmupMicroSteps(), 1u);
  EXPECT_DOUBLE_EQ(result.medianStepMilliseconds(), 25.0);
}

TEST(CudaMeasurementTest, ToleranceIsTheRuntimeSlackPlusAGranulePerBlock) {
  EXPECT_EQ(getDeviceMemoryToleranceBytes(planned(0, 0, 0)),
            kCudaRuntimeSlackBytes);
  EXPECT_EQ(getDeviceMemoryToleranceBytes(planned(0, 0, 7)),
            kCudaRuntimeSlackBytes + 7 * kCudaAllocationGranuleBytes);
}

TEST(CudaMeasurementTest, PlannedFiguresAgreeWithinTheTolerance) {
  // 1 GiB accounted; the device lost that plus the runtime's share.
  CudaMemoryMeasurement m = planned(1024 * MiB, 1024 * MiB + 120 * MiB);
  EXPECT_EQ(m.getAccountedBytes(), 1024 * MiB);
  EXPECT_EQ(m.getDeviceDeltaBytes(), 1144 * MiB);
  EXPECT_EQ(errorText(checkDeviceMemoryAgreement(m, "the run")), "");
  // Exactly at the tolerance still agrees; one byte beyond does not.
  uint64_t tolerance = getDeviceMemoryToleranceBytes(m);
  EXPECT_EQ(errorText(checkDeviceMemoryAgreement(
                planned(1024 * MiB, 1024 * MiB + tolerance), "the run")),
            "");
  std::string message = errorText(checkDeviceMemoryAgreement(
      planned(1024 * MiB, 1024 * MiB + tolerance + 1), "the run"));
  EXPECT_NE(message.find("device memory of the run does not agree"),
            std::string::npos)
      << message;
  EXPECT_NE(
      message.find("fell by " + std::to_string(1024 * MiB + tolerance + 1)),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("arena + persistent + workspace"), std::string::npos)
      << message;
  EXPECT_NE(message.find("tolerance of " + std::to_string(tolerance)),
            std::string::npos)
      << message;
}

TEST(CudaMeasurementTest, AccountingMoreThanTheDeviceGaveIsAMismatchToo) {
  // 4 GiB accounted but the free memory fell by only 1 GiB: bytes counted
  // that were never allocated.
  std::string message = errorText(
      checkDeviceMemoryAgreement(planned(4096 * MiB, 1024 * MiB), "the run"));
  EXPECT_NE(message.find("accounts " + std::to_string(4096 * MiB)),
            std::string::npos)
      << message;
}

TEST(CudaMeasurementTest, EagerAccountsThePoolsReservedBytes) {
  CudaMemoryMeasurement m =
      eager(900 * MiB, 910 * MiB, 1200 * MiB, 1200 * MiB + 40 * MiB);
  EXPECT_EQ(m.getAccountedBytes(), 1200 * MiB);
  EXPECT_EQ(errorText(checkDeviceMemoryAgreement(m, "the baseline")), "");
  // The pool reserved 1.2 GiB but the device lost 3 GiB.
  std::string message = errorText(checkDeviceMemoryAgreement(
      eager(900 * MiB, 910 * MiB, 1200 * MiB, 3072 * MiB), "the baseline"));
  EXPECT_NE(message.find("device memory of the baseline"), std::string::npos)
      << message;
  EXPECT_NE(message.find("the pool's reserved high-water mark"),
            std::string::npos)
      << message;
  // The pool used less than the interpreter counted: a counting bug.
  message = errorText(checkDeviceMemoryAgreement(
      eager(900 * MiB, 800 * MiB, 1200 * MiB, 1200 * MiB), "the baseline"));
  EXPECT_NE(message.find("cudaMemPoolAttrUsedMemHigh"), std::string::npos)
      << message;
}

TEST(CudaMeasurementTest, NothingToCheckBeforeAStep) {
  CudaMemoryMeasurement m = planned(4096 * MiB, 0);
  m.stepsMeasured = 0;
  m.lowestFreeBytes = 0;
  EXPECT_EQ(m.getDeviceDeltaBytes(), 0u);
  EXPECT_EQ(errorText(checkDeviceMemoryAgreement(m, "the run")), "");
}

TEST(CudaMeasurementTest, ReportLineNamesTheFiguresAndTheVerdict) {
  CudaMemoryMeasurement m = eager(1024, 1024, 2 * MiB, 2 * MiB);
  m.deviceUsedBytes = 3 * MiB;
  EXPECT_EQ(describeCudaMemoryMeasurement(m),
            "device memory (cuda): pool used high 1024 bytes, pool reserved "
            "high 2097152 bytes, device used 3145728 bytes after a step "
            "(cudaMemGetInfo); free memory fell by 2097152 bytes, accounted "
            "2097152 bytes (tolerance " +
                std::to_string(kCudaRuntimeSlackBytes) + " bytes): agrees");
  CudaMemoryMeasurement bad = planned(4096 * MiB, 10 * MiB, 0);
  std::string line = describeCudaMemoryMeasurement(bad);
  EXPECT_EQ(line.rfind("device memory (cuda): device used ", 0), 0u) << line;
  EXPECT_NE(line.find(": MISMATCH"), std::string::npos) << line;
}

TEST(CudaMeasurementTest, JsonHasTheCudaFigures) {
  llvm::json::Object json = cudaMemoryJson(planned(1024 * MiB, 1100 * MiB, 4));
  for (const char *key :
       {"pool_used_high_bytes", "pool_reserved_high_bytes", "free_before_bytes",
        "lowest_free_bytes", "device_delta_bytes", "device_used_bytes",
        "accounted_bytes", "counted_peak_bytes", "device_allocations",
        "tolerance_bytes", "agrees"})
    EXPECT_TRUE(json.get(key)) << key;
  // No pool in planned mode.
  EXPECT_EQ(*json.get("pool_used_high_bytes"), llvm::json::Value(nullptr));
  EXPECT_EQ(json.getInteger("device_delta_bytes"),
            static_cast<int64_t>(1100 * MiB));
  EXPECT_EQ(json.getInteger("accounted_bytes"),
            static_cast<int64_t>(1024 * MiB));
  EXPECT_EQ(json.getInteger("device_allocations"), 4);
  EXPECT_EQ(json.getBoolean("agrees"), true);
  llvm::json::Object mismatch = cudaMemoryJson(planned(4096 * MiB, MiB));
  EXPECT_EQ(mismatch.getBoolean("agrees"), false);
  llvm::json::Object pool = cudaMemoryJson(eager(1, 2, 3, 3));
  EXPECT_EQ(pool.getInteger("pool_reserved_high_bytes"), 3);
}

TEST(CudaMeasurementTest, CudaReportHasTheCpuKeysAndItsOwn) {
  // The report of a CUDA run: the CPU report's keys, `backend: "cuda"`, the
  // device's name and the device figures of both runs.
  TrainingResult optimized;
  optimized.losses = {2.5};
  optimized.microStepMilliseconds = {50.0, 4.0, 6.0};
  optimized.memory.peakBytes = 1024 * MiB;
  optimized.cudaMemory = planned(1024 * MiB, 1100 * MiB);
  TrainingResult baseline = optimized;
  baseline.memory.peakBytes = 3000 * MiB;
  baseline.cudaMemory = eager(3000 * MiB, 3000 * MiB, 3100 * MiB, 3150 * MiB);
  RunSummary summary;
  summary.backend = "cuda";
  summary.device = "NVIDIA H200";
  summary.mode = "planned";
  summary.steps = 3;
  summary.optimizer = "none";
  summary.optimized = optimized;
  summary.baseline = baseline;
  llvm::json::Object json = runReportJson(summary);
  EXPECT_EQ(json.getString("backend"), "cuda");
  EXPECT_EQ(json.getString("device"), "NVIDIA H200");
  for (const char *key :
       {"mode", "steps", "accumulate", "optimizer", "pipeline", "losses",
        "optimized", "baseline", "peak_reduction", "max_grad_rel_diff", "plan",
        "check", "sgd_reference"})
    EXPECT_TRUE(json.get(key)) << key;
  for (const char *run : {"optimized", "baseline"}) {
    const llvm::json::Object *object = json.getObject(run);
    ASSERT_TRUE(object) << run;
    for (const char *key :
         {"peak_bytes", "by_category", "step_ms", "warmup_micro_steps",
          "first_step_ms", "micro_step_ms", "micro_step_cpu_ms", "arena_bytes",
          "unplanned_scratch_bytes", "device_memory"})
      EXPECT_TRUE(object->get(key)) << run << "." << key;
    EXPECT_EQ(object->getNumber("step_ms"), 5.0) << run;
    EXPECT_EQ(object->getInteger("warmup_micro_steps"), 1) << run;
    EXPECT_EQ(object->getNumber("first_step_ms"), 50.0) << run;
  }
  EXPECT_EQ(json.getObject("baseline")
                ->getObject("device_memory")
                ->getInteger("pool_reserved_high_bytes"),
            static_cast<int64_t>(3100 * MiB));

  // The CPU report has no device figures.
  summary.backend = "cpu";
  summary.device.clear();
  summary.optimized.cudaMemory.reset();
  summary.baseline.reset();
  llvm::json::Object cpu = runReportJson(summary);
  EXPECT_FALSE(cpu.get("device"));
  EXPECT_FALSE(cpu.getObject("optimized")->get("device_memory"));
  EXPECT_TRUE(cpu.getObject("optimized")->get("warmup_micro_steps"));
}

TEST(CudaMeasurementTest, BaselineTableShowsTheDeviceFigures) {
  TrainingResult optimized;
  optimized.microStepMilliseconds = {50.0, 4.0};
  optimized.memory.peakBytes = 100 * MiB;
  optimized.cudaMemory = planned(100 * MiB, 150 * MiB);
  TrainingResult baseline = optimized;
  baseline.memory.peakBytes = 300 * MiB;
  baseline.cudaMemory = eager(300 * MiB, 300 * MiB, 320 * MiB, 330 * MiB);
  std::string text;
  llvm::raw_string_ostream os(text);
  printBaselineTable(os, optimized, baseline);
  EXPECT_NE(text.find("device accounted"), std::string::npos) << text;
  EXPECT_NE(text.find("320.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("device delta"), std::string::npos) << text;
  EXPECT_NE(text.find("330.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("after 1 warm-up micro-step (optimized), 1 (baseline)"),
            std::string::npos)
      << text;
  // Without CUDA figures (the CPU) no device rows.
  optimized.cudaMemory.reset();
  std::string cpuText;
  llvm::raw_string_ostream cpuOs(cpuText);
  printBaselineTable(cpuOs, optimized, baseline);
  EXPECT_EQ(cpuText.find("device delta"), std::string::npos) << cpuText;
}

TEST(CudaMeasurementTest, PlannedBytesBeyondFreeNameTheFittingOptions) {
  uint64_t free = 8192 * MiB;
  // Fits with the runtime's slack to spare, not one byte more.
  EXPECT_EQ(errorText(checkPlannedBytesFit(free - kCudaRuntimeSlackBytes, free,
                                           "GPU")),
            "");
  EXPECT_NE(errorText(checkPlannedBytesFit(free - kCudaRuntimeSlackBytes + 1,
                                           free, "GPU")),
            "");
  llvm::Error err = checkPlannedBytesFit(free + 1, free, "NVIDIA H200");
  ASSERT_TRUE(bool(err));
  bool outOfMemory = false;
  std::string message;
  llvm::handleAllErrors(std::move(err), [&](const llvm::ErrorInfoBase &info) {
    outOfMemory = info.convertToErrorCode() == std::errc::not_enough_memory;
    message = info.message();
  });
  EXPECT_TRUE(outOfMemory);
  EXPECT_NE(message.find("needs " + std::to_string(free + 1) + " bytes"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("MiB for the CUDA runtime"), std::string::npos)
      << message;
  EXPECT_NE(message.find("NVIDIA H200 has " + std::to_string(free) + " bytes"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("nothing was run"), std::string::npos) << message;
  EXPECT_NE(message.find("gmopt-compile --memory-limit=" +
                         std::to_string(free - kCudaRuntimeSlackBytes) + "`"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("--backend=cpu"), std::string::npos) << message;
  // Less free than the runtime's slack: the limit is the free bytes.
  message = errorText(checkPlannedBytesFit(MiB, MiB / 2, "GPU"));
  EXPECT_NE(message.find("--memory-limit=" + std::to_string(MiB / 2) + "`"),
            std::string::npos)
      << message;
}

TEST(CudaMeasurementTest, AllocationFailureInARunIsReportedTheSameWay) {
  uint64_t free = 1024 * MiB;
  std::string message = errorText(outOfDeviceMemoryError(
      2048 * MiB, free, 80000 * MiB, "NVIDIA H200",
      "cudaMallocFromPoolAsync: cudaErrorMemoryAllocation"));
  EXPECT_EQ(message.rfind("out of device memory on NVIDIA H200: allocating " +
                              std::to_string(2048 * MiB) + " bytes",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("cudaMallocFromPoolAsync: cudaErrorMemoryAllocation"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(std::to_string(free) + " bytes (1.00 GiB) of "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("gmopt-compile --memory-limit=" +
                         std::to_string(free - kCudaRuntimeSlackBytes) + "`"),
            std::string::npos)
      << message;
}
