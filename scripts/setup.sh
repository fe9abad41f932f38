#!/usr/bin/env bash
# Installs every build and test dependency of gmopt on a fresh Debian 12 / Ubuntu machine.
# Idempotent: packages already present are left alone. CUDA is optional and not installed
# here; when /usr/local/cuda exists the CUDA backend is configured automatically.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config python3
  clang libclang-rt-dev lld clang-format-14
  libonnx-dev libprotobuf-dev protobuf-compiler
  llvm-19-dev llvm-19-tools libzstd-dev zlib1g-dev libedit-dev libxml2-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev
  libopenblas-dev
  openmpi-bin libopenmpi-dev
  patchelf binutils xz-utils
  python3-numpy python3-pytest python3-pyflakes
  pybind11-dev python3-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
