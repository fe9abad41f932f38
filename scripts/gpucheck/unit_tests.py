"""The CUDA unit tests: finding the executables, and reading their logs.

A bundle (scripts/bundle.sh --with-tests) has one executable of every CUDA
test, gmopt-cuda-tests; a build tree has one per test file (Cuda*Test,
Cudnn*Test, Nccl*Test)."""
import glob
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import List

# The lines a device test prints when it skips for want of a device, of
# NCCL or of cuDNN: on a machine with a GPU each is the failure this check
# exists to catch (the 1-GPU NCCL smoke test, NcclGpuTest, among them).
DEVICE_SKIP = re.compile(
    r"^(needs a CUDA device|NCCL is not usable|gmopt was built without NCCL|"
    r"the CPU half passed; the CUDA half needs|cannot load (cuDNN|cuBLASLt)).*$")


def find_executables(tests_dir: str) -> List[str]:
    """The test executables' names in `tests_dir`, the bundle's launcher
    first if there."""
    bundle = os.path.join(tests_dir, "gmopt-cuda-tests")
    if os.access(bundle, os.X_OK):
        return ["gmopt-cuda-tests"]
    names = []
    for pattern in ("Cuda*Test", "Cudnn*Test", "Nccl*Test"):
        for path in sorted(glob.glob(os.path.join(tests_dir, pattern))):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                names.append(os.path.basename(path))
    return names


@dataclass
class GtestSummary:
    """What a GoogleTest log says: tests passed and skipped, the names of
    the failed ones, and the device skips (line -> count)."""

    passed: int
    skipped: int
    failed: List[str]
    device_skips: Counter

    def device_skip_text(self) -> str:
        return ";".join(f"{count} {line}" for line, count in sorted(self.device_skips.items()))


def read_gtest_log(text: str) -> GtestSummary:
    lines = text.splitlines()
    passed = sum(1 for line in lines if line.startswith("[       OK ]"))
    # "[  SKIPPED ] Suite.Name (0 ms)", not the summary's "[  SKIPPED ] 2 tests, listed below:".
    skipped = sum(1 for line in lines if line.startswith("[  SKIPPED ]") and line.endswith("ms)"))
    failed = [line.split()[3] for line in lines
              if line.startswith("[  FAILED  ]") and line.endswith("ms)") and len(line.split()) > 3]
    skips = Counter(m.group(0) for m in map(DEVICE_SKIP.match, lines) if m)
    return GtestSummary(passed, skipped, failed, skips)


def verdict(name: str, exit_status, summary: GtestSummary, limit: int, log: str,
            gpu_expected: bool):
    """(the line to print, the failure or None) for test executable `name`,
    which exited with `exit_status` ("timeout" when cut at `limit` s).
    With `gpu_expected` (a GPU machine, --backend cuda) a device skip fails."""
    if exit_status == "timeout":
        return (f"{name}: TIMED OUT after {limit} s (see {log})",
                f"unit tests {name}: timed out after {limit} s")
    if exit_status == 0 and gpu_expected and summary.device_skips:
        text = summary.device_skip_text()
        return (f"{name}: device tests SKIPPED on a GPU machine: {text}",
                f"unit tests {name}: device tests skipped although a GPU is present: {text}")
    if exit_status == 0:
        return f"{name}: passed ({summary.passed} passed, {summary.skipped} skipped)", None
    names = " ".join(summary.failed) or "no test named"
    return (f"{name}: FAILED, exit {exit_status} (see {log}): {names}",
            f"unit tests {name}: exit {exit_status}: {' '.join(summary.failed) or 'see ' + log}")
