"""`python3 -m gpucheck`: the GPU check (see gpucheck/__init__.py)."""
import importlib.util
import sys

if importlib.util.find_spec("numpy") is None:
    print(f"gpu-check.sh: error: {sys.executable} has no NumPy, which the gradient comparison "
          "needs (install python3-numpy, or name another interpreter in GPU_CHECK_PYTHON)",
          file=sys.stderr)
    sys.exit(1)

from gpucheck.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
