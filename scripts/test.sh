#!/usr/bin/env bash
# Runs every gmopt test: the regular build's ctest suite (GoogleTest units and
# lit/FileCheck golden tests), the same suite under ASan+UBSan, and each
# libFuzzer target briefly. Usage: scripts/test.sh [--quick]  (--quick: only the
# regular build). Build trees: build/, build-asan/ (clang: ASan+UBSan and the
# libFuzzer targets).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${JOBS:-$(nproc)}"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

configure_and_build() {  # dir, extra cmake args...
  local dir="$1"; shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

echo "== regular build + tests"
REGULAR_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
# CI builds from a clean clone with no ccache: there the regular tree keeps
# line tables only (-g1: function names and lines in backtraces, no local
# variables), about a quarter less compile time than -g. A local tree keeps
# its own flags, so its ccache entries stay valid.
if [ "${CI:-}" = true ]; then
  REGULAR_ARGS+=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
                 "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
fi
configure_and_build build "${REGULAR_ARGS[@]}"
# On CI the data-parallel tests must run, not turn UNSUPPORTED for want of
# MPI (the sanitized tree below leaves MPI out on purpose).
scripts/require-mpi.sh build
ctest --test-dir build --output-on-failure -j "$JOBS"

[ "$QUICK" = 1 ] && exit 0

echo "== ASan+UBSan build (clang, with the libFuzzer targets) + tests"
# One sanitized build serves both the ASan+UBSan suite and the fuzzers: the
# libraries carry libFuzzer's coverage instrumentation (harmless to the unit
# tests), so CI compiles the library twice, not three times. The CUDA
# sources and the benchmarks are compiled once, in the regular tree.
configure_and_build build-asan -DCMAKE_BUILD_TYPE=Debug -DGMOPT_SANITIZE=ON \
  -DGMOPT_FUZZ=ON -DGMOPT_ENABLE_CUDA=OFF -DGMOPT_BUILD_BENCH=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
# gmopt reports a failed allocation as an error (tests ask for more memory
# than any machine has), so ASan's allocator must return null, not abort.
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS"

echo "== fuzz targets (libFuzzer, from the sanitized build)"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
fuzz_pass=0
for src in tests/fuzz/*.cpp; do
  name=$(basename "$src" .cpp)
  corpus="tests/fuzz/corpus/$name"
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus/." "$work/"
  echo "-- $name (${FUZZ_SECONDS}s)"
  "build-asan/tests/$name" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 \
    -print_final_stats=0 "$work" 2>&1 | tail -n 3
  rm -rf "$work"
  fuzz_pass=$((fuzz_pass + 1))
done
echo "fuzz: $fuzz_pass passed, 0 failed"
