#!/bin/sh
# Prints, colon-separated on one line, the folders that hold the CUDA 13
# libraries gmopt loads at run time and does not bundle (cuBLAS/cuBLASLt,
# cuDNN, NCCL; the runtime too where present): $CUDA_HOME's and
# $CUDNN_ROOT's lib folders when those are set, the toolkit's usual
# /usr/local/cuda* folders, and every installed Python nvidia-* package's
# lib folder (nvidia-cudnn-cu13, nvidia-cublas, nvidia-nccl-cu13: on a
# machine with PyTorch from pip, cuDNN may be there only). Only existing
# folders, each once, never an empty entry (which the loader would read as
# the current directory); nothing at all when none is found. The system's
# own folders (/lib64, /usr/lib/x86_64-linux-gnu) are left out: the loader
# searches them anyway, and on LD_LIBRARY_PATH they would go before the
# bundle's RUNPATH and shadow its libstdc++ and protobuf.
#
# One discovery for every consumer: bundle.sh copies this file into the
# bundle's libexec/, whose launchers (the tools' and gmopt-cuda-tests')
# prepend its output to LD_LIBRARY_PATH, and gpu-check.sh runs it for a
# build tree's binaries. $PYTHON names an interpreter to ask first (the
# one with PyTorch); python3 is asked too.
dirs=""
add() {
  [ -d "$1" ] || return 0
  case ":$dirs:" in
  *":$1:"*) return 0 ;;
  esac
  dirs="${dirs:+$dirs:}$1"
}
if [ -n "${CUDA_HOME:-}" ]; then
  add "$CUDA_HOME/lib64"
  add "$CUDA_HOME/lib"
  add "$CUDA_HOME/targets/x86_64-linux/lib"
fi
if [ -n "${CUDNN_ROOT:-}" ]; then
  add "$CUDNN_ROOT/lib64"
  add "$CUDNN_ROOT/lib"
fi
# (an unmatched cuda-13* glob stays literal and is not a folder)
for dir in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/lib \
  /usr/local/cuda-13*/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  add "$dir"
done
for python in ${PYTHON:-} python3; do
  command -v "$python" >/dev/null 2>&1 || continue
  python_dirs=$("$python" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
for root in roots:
    for pattern in ("lib", "lib64"):
        for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", pattern))):
            print(os.path.realpath(lib))
PY
  )
  # (a here-document, not a pipe: add() must change this shell's $dirs)
  while IFS= read -r dir; do
    [ -n "$dir" ] && add "$dir"
  done <<EOF
$python_dirs
EOF
done
if [ -n "$dirs" ]; then
  printf '%s\n' "$dirs"
fi
