#!/usr/bin/env bash
# The main job, end to end, on a fresh Debian 12 / Ubuntu machine: install the
# dependencies, build gmopt, and compile the bundled gpt_tiny training graph
# (made by ONNX Runtime's artifact generator) with the default pipeline.
# Usage: scripts/demo.sh [MODEL]   (MODEL: a folder of testdata/, default gpt_tiny)
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-gpt_tiny}"
BATCH=4
SEQ=64

bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

mkdir -p build/demo
input="testdata/$MODEL/training_model.onnx"
dims=(--dim "batch=$BATCH")
# The GPT graphs flatten (batch, seq) for the token-level loss.
[[ "$MODEL" == gpt_tiny* ]] && dims+=(--dim "batch_x_seq=$((BATCH * SEQ))")

echo "== gmopt-compile $input ${dims[*]}"
build/tools/gmopt-compile "$input" "${dims[@]}" -o "build/demo/$MODEL.out.onnx" \
  --pass-statistics --time-passes
echo "== wrote build/demo/$MODEL.out.onnx"
