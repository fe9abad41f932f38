"""Builds gmopt's extension module with the repository's CMake for
`pip install ./python` (see pyproject.toml).

The extension is the CMake target gmopt_python of the repository one folder
up; this build configures that repository (tests and benchmarks off) in a
build folder of its own and copies the module into the wheel. Environment:

* GMOPT_BUILD_DIR: a CMake build folder to use (an existing one is reused
  as configured; default: build/cmake under this folder);
* GMOPT_BUILD_JOBS: parallel build jobs (default: the CPU count);
* CMAKE_BUILD_TYPE: default Release.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class CMakeExtension(Extension):
    """An extension built by a CMake target rather than by setuptools."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    """Configures the repository, builds each extension's target, and copies
    the module it produced to where setuptools packs it."""

    def build_extension(self, ext):
        build_dir = os.environ.get("GMOPT_BUILD_DIR") or os.path.join(HERE, "build", "cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            os.makedirs(build_dir, exist_ok=True)
            configure = [
                "cmake", "-S", REPO, "-B", build_dir,
                f"-DCMAKE_BUILD_TYPE={os.environ.get('CMAKE_BUILD_TYPE', 'Release')}",
                f"-DGMOPT_PYTHON_EXECUTABLE={sys.executable}",
                "-DGMOPT_BUILD_TESTS=OFF", "-DGMOPT_BUILD_BENCH=OFF",
            ]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            subprocess.run(configure, check=True)
        jobs = os.environ.get("GMOPT_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", ext.target, "-j", jobs], check=True)
        built = glob.glob(os.path.join(build_dir, "python", "gmopt", "_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"{build_dir}: expected one gmopt/_core*.so after the build, found {built}; "
                               "is pybind11-dev installed (CMake skips the Python package without it)?")
        destination = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copyfile(built[0], destination)


setup(ext_modules=[CMakeExtension("gmopt._core", "gmopt_python")], cmdclass={"build_ext": CMakeBuild})
