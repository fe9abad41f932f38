"""Facts about the machine: the GPU as nvidia-smi sees it, and the folders
of cuBLASLt and cuDNN that the gmopt tools are run with."""
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import List


@dataclass
class DeviceFacts:
    """What `nvidia-smi` said: one line per GPU (name, memory, driver), and
    whether it lists a GPU at all."""

    lines: List[str]
    gpu_present: bool
    note: str = ""


def probe_nvidia_smi() -> DeviceFacts:
    if not shutil.which("nvidia-smi"):
        return DeviceFacts([], False, "nvidia-smi not found")
    try:
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60)
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return DeviceFacts([], False, f"nvidia-smi failed: {e}")
    lines = query.stdout.strip().splitlines() if query.returncode == 0 else []
    present = (query.returncode == 0
               and any(line.startswith("GPU ") for line in listing.stdout.splitlines()))
    note = "" if query.returncode == 0 else f"nvidia-smi exit {query.returncode}: {query.stderr.strip()}"
    return DeviceFacts(lines, present, note)


def cuda_library_dirs(root: str) -> str:
    """scripts/cuda-library-path.sh's folders (':'-separated; may be empty)."""
    try:
        result = subprocess.run(["sh", os.path.join(root, "scripts", "cuda-library-path.sh")],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def with_library_dirs(environ: dict, dirs: str) -> dict:
    """A copy of `environ` whose LD_LIBRARY_PATH ends with `dirs`: a build
    tree's binaries find cuBLASLt and cuDNN (perhaps only in a pip nvidia-*
    package) as the bundle's launchers do."""
    env = dict(environ)
    if dirs:
        current = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = f"{current}:{dirs}" if current else dirs
    return env
