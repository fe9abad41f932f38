#!/usr/bin/env bash
# Makes a relocatable, stripped gmopt bundle for another x86-64 Linux:
#
#   gmopt-bundle/
#     bin/gmopt-run, bin/gmopt-compile, bin/gmopt-opt   launchers (sh)
#     tests/gmopt-cuda-tests                            its launcher (--with-tests)
#     libexec/gmopt-*                                   the stripped programs, RUNPATH $ORIGIN/../lib
#     libexec/cuda-library-path.sh                      the launchers' CUDA library search
#     lib/                                              the non-system shared libraries they need
#
# and gmopt-bundle.tar.xz next to it, which must stay within 40 MiB (the
# script fails otherwise). xz, not gzip: the tools and OpenBLAS pack to
# about half of gzip's size (22.0 MB against 39.4 MB with --with-tests on
# 2026-12-05), which matters where the GPU machine receives 64 MiB in all,
# working tree included. Unpack with `tar -xJf gmopt-bundle.tar.xz`, or
# `python3 -m tarfile -e gmopt-bundle.tar.xz` where there is no xz.
# XZ_OPT overrides the compression settings (default -6 -T0). The CUDA runtime (libcudart, under 1 MiB) is
# bundled; cuBLASLt (over 500 MiB) and cuDNN are not: the target needs the
# CUDA 13 libraries, which the launchers find in the usual places
# (/usr/local/cuda*/lib64 and lib, $CUDA_HOME, $CUDNN_ROOT/lib, the system
# library path) or in an installed Python nvidia-* package's lib folder
# (nvidia-cublas, nvidia-cudnn-cu13): scripts/cuda-library-path.sh, one
# search shared by the tools' and the tests' launchers and gpu-check.sh.
# With the libraries but no GPU or no driver, gmopt runs on the CPU ("no
# CUDA device (...)").
#
# Usage: scripts/bundle.sh [--with-tests] [BUILD_DIR] [OUT_DIR]
#   --with-tests  also the CUDA unit tests (the one executable
#                 gmopt-cuda-tests, `ninja -C build gmopt-cuda-tests`,
#                 stripped into libexec/, its launcher in tests/), which
#                 scripts/gpu-check.sh runs; they read testdata/ from
#                 $GMOPT_SOURCE_DIR
#   BUILD_DIR     a configured and built gmopt tree (default: build)
#   OUT_DIR       where gmopt-bundle/ and gmopt-bundle.tar.xz go (default: dist)
set -euo pipefail

with_tests=0
if [[ ${1:-} == --with-tests ]]; then
  with_tests=1
  shift
fi
build_dir=${1:-build}
out_dir=${2:-dist}
limit_bytes=$((40 * 1024 * 1024))
tools=(gmopt-run gmopt-compile gmopt-opt)
# Every CUDA unit test in one executable (tests/CMakeLists.txt), so the
# library's kernels travel once.
tests=(gmopt-cuda-tests)

for tool in "${tools[@]}"; do
  if [[ ! -x "$build_dir/tools/$tool" ]]; then
    echo "bundle.sh: error: $build_dir/tools/$tool is missing; build it first" \
      "(ninja -C $build_dir ${tools[*]})" >&2
    exit 1
  fi
done
for program in ldd strip patchelf tar xz; do
  if ! command -v "$program" >/dev/null; then
    echo "bundle.sh: error: '$program' is needed (apt-get install patchelf binutils xz-utils)" >&2
    exit 1
  fi
done

bundle="$out_dir/gmopt-bundle"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/libexec" "$bundle/lib"

# Libraries every x86-64 Linux has (glibc and the dynamic loader) and the
# CUDA/driver libraries, found on the target instead.
is_left_to_the_target() {
  case "$(basename "$1")" in
  linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | \
    libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.*)
    return 0 ;;
  libcuda.so.* | libcublas.so.* | libcublasLt.so.* | \
    libcudnn*.so.* | libnccl.so.* | libnvrtc*.so.*)
    return 0 ;;
  esac
  return 1
}

# Copies every resolved dependency of $1 that is not left to the target,
# once.
bundle_libraries() {
  while read -r path; do
    [[ -n "$path" && -f "$path" ]] || continue
    is_left_to_the_target "$path" && continue
    name=$(basename "$path")
    [[ -e "$bundle/lib/$name" ]] && continue
    cp -L "$path" "$bundle/lib/$name"
    strip --strip-unneeded "$bundle/lib/$name" 2>/dev/null || true
  done < <(ldd "$1" | awk '/=> \// { print $3 }')
}

for tool in "${tools[@]}"; do
  strip --strip-unneeded -o "$bundle/libexec/$tool" "$build_dir/tools/$tool"
  bundle_libraries "$build_dir/tools/$tool"
done
if ((with_tests)); then
  mkdir -p "$bundle/tests"
  for test in "${tests[@]}"; do
    if [[ ! -x "$build_dir/tests/$test" ]]; then
      echo "bundle.sh: error: $build_dir/tests/$test is missing; build it" \
        "first (ninja -C $build_dir $test)" >&2
      exit 1
    fi
    strip --strip-unneeded -o "$bundle/libexec/$test" "$build_dir/tests/$test"
    bundle_libraries "$build_dir/tests/$test"
    patchelf --set-rpath '$ORIGIN/../lib' "$bundle/libexec/$test"
  done
fi
# The bundled libraries find each other (libopenblas -> libgfortran).
for lib in "$bundle"/lib/*; do
  patchelf --set-rpath '$ORIGIN' "$lib"
done
# One launcher for every program: it prepends the CUDA libraries' folders
# that scripts/cuda-library-path.sh finds (the usual places, $CUDA_HOME,
# $CUDNN_ROOT, any Python nvidia-* package's lib folder) to the library
# path and runs the program of its name from libexec/. Without CUDA
# libraries the tools run on the CPU.
write_launcher() {
  cat >"$1" <<'LAUNCHER'
#!/bin/sh
# gmopt bundle launcher (scripts/bundle.sh): runs libexec/<this name> with
# the CUDA libraries' folders (libexec/cuda-library-path.sh) after the
# caller's LD_LIBRARY_PATH.
here=$(cd "$(dirname "$0")/.." && pwd)
extra=$(sh "$here/libexec/cuda-library-path.sh")
if [ -n "$extra" ]; then
  LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$extra"
  export LD_LIBRARY_PATH
fi
exec "$here/libexec/$(basename "$0")" "$@"
LAUNCHER
  chmod +x "$1"
}
cp "$(dirname "$0")/cuda-library-path.sh" "$bundle/libexec/cuda-library-path.sh"
for tool in "${tools[@]}"; do
  patchelf --set-rpath '$ORIGIN/../lib' "$bundle/libexec/$tool"
  write_launcher "$bundle/bin/$tool"
done
if ((with_tests)); then
  for test in "${tests[@]}"; do
    write_launcher "$bundle/tests/$test"
  done
fi

# Every bundled ELF must resolve with the bundle alone plus the target's
# system and CUDA libraries: check here that nothing is "not found" apart
# from the CUDA libraries left to the target.
missing=$(for f in "$bundle"/libexec/* "$bundle"/lib/*; do
  # (an if, not &&: a file that is no ELF, the library-path script, must
  # not end the loop with a failure that set -e turns into a silent exit)
  if [[ -f "$f" && $(head -c 4 "$f") == $'\x7fELF' ]]; then ldd "$f"; fi
done |
  awk '/not found/ { print $1 }' | sort -u |
  while read -r name; do is_left_to_the_target "$name" || echo "$name"; done)
if [[ -n "$missing" ]]; then
  echo "bundle.sh: error: unresolved libraries: $missing" >&2
  exit 1
fi

archive="$out_dir/gmopt-bundle.tar.xz"
rm -f "$out_dir/gmopt-bundle.tar.gz" # (the former format: not left to mislead)
XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$out_dir" -cJf "$archive" gmopt-bundle
unpacked=$(du -sb "$bundle" | awk '{ print $1 }')
packed=$(stat -c %s "$archive")
echo "bundle.sh: $bundle: $unpacked bytes unpacked; $archive: $packed bytes"
echo "bundle.sh: bundled libraries: $(cd "$bundle/lib" && echo *)"
if ((packed > limit_bytes)); then
  echo "bundle.sh: error: the archive is larger than 40 MiB ($packed bytes)" >&2
  exit 1
fi
