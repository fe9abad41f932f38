#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine: the device, the CUDA unit
# tests, the bench models' memory and step times with each pipeline against
# their baseline, every pipeline's gradients against the CPU's (both written
# by `gmopt-run --dump-gradients` and compared with NumPy), and PyTorch on
# the same models where it is installed, within a time budget (default
# 450 s). The check is the Python package scripts/gpucheck/ (what it checks
# and when it fails: scripts/gpucheck/__init__.py; its unit tests:
# tests/python/); this wrapper only runs it.
#
# Usage: scripts/gpu-check.sh [--tools DIR] [--tests DIR] [--models DIR]
#          [--out DIR] [--scratch DIR] [--backend cuda|cpu] [--budget S]
#          [--quick] [--allow-partial] [--skip-missing-models]
#          [--fp32-rtol X] [--amp-rtol X] [--tests-timeout S]
# (scripts/gpu-check.sh --help explains each; --backend cpu checks the
# plumbing on a machine without a GPU.) Exit status: 0 passed; 1 failed,
# with the list of failures at the end and in OUT/summary.txt; 2 usage.
# GPU_CHECK_PYTHON names the interpreter that runs the check (one with
# NumPy; default python3, or Debian's /usr/bin/python3 where only that has
# NumPy); PYTHON the one with PyTorch (default python3).
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
python=${GPU_CHECK_PYTHON:-python3}
if [[ -z ${GPU_CHECK_PYTHON:-} ]] && ! python3 -c 'import numpy' 2>/dev/null &&
  /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  python=/usr/bin/python3
fi
export PYTHONPATH="$scripts${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m gpucheck "$@"
