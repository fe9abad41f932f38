#!/usr/bin/env bash
# Fails when CI must run the data-parallel tests but cannot. Without an MPI
# build (CMake's GMOPT_HAVE_MPI, set when find_package(MPI) succeeds) or
# without mpirun on PATH, lit lacks its `mpi` feature (tests/lit/lit.cfg.py)
# and marks every `REQUIRES: mpi` test UNSUPPORTED, so the suite would pass
# without them. Usage: scripts/require-mpi.sh BUILD_DIR. Exits 0 when CI is
# not `true` (a developer machine may lack MPI), or when BUILD_DIR's cache
# says GMOPT_HAVE_MPI=ON and mpirun is found; otherwise prints why and how
# to fix it, and exits 1.
set -euo pipefail
build="${1:?usage: require-mpi.sh BUILD_DIR}"
[ "${CI:-}" = true ] || exit 0
cache="$build/CMakeCache.txt"
if [ ! -f "$cache" ]; then
  echo "require-mpi.sh: error: CI=true and $cache is missing: configure $build first" >&2
  exit 1
fi
have_mpi=$(sed -n 's/^GMOPT_HAVE_MPI:[A-Z]*=//p' "$cache")
if [ "$have_mpi" != ON ]; then
  echo "require-mpi.sh: error: CI=true but $build was configured without MPI" \
       "(GMOPT_HAVE_MPI=${have_mpi:-unset}): the data-parallel tests would be UNSUPPORTED;" \
       "install Open MPI (scripts/setup.sh: libopenmpi-dev openmpi-bin) and configure again" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "require-mpi.sh: error: CI=true and $build has MPI, but mpirun is not on PATH:" \
       "the data-parallel tests would be UNSUPPORTED; install openmpi-bin" >&2
  exit 1
fi
echo "require-mpi.sh: MPI build and mpirun found: the data-parallel tests run"
