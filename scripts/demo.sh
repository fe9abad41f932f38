#!/usr/bin/env bash
# The main job, end to end, on a fresh Debian 12 / Ubuntu machine: install the
# dependencies, build gmopt, compile the bundled gpt_tiny training graph (made
# by ONNX Runtime's artifact generator) with the default pipeline into a .gm
# container, then train it on the CPU backend (CUDA where a device works) with
# ONNX Runtime's reference batch, check the gradients against ONNX Runtime's,
# and print the memory report side by side with the original graph run eagerly.
# Usage: scripts/demo.sh [MODEL]   (MODEL: a folder of testdata/, default gpt_tiny)
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-gpt_tiny}"
BATCH=4
SEQ=64

bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what the demo runs: the two tools (and the libraries they link), not
# the tests and benchmarks scripts/test.sh builds.
cmake --build build -j "$(nproc)" --target gmopt-compile gmopt-run

mkdir -p build/demo
input="testdata/$MODEL/training_model.onnx"
dims=(--dim "batch=$BATCH")
# The GPT graphs flatten (batch, seq) for the token-level loss.
[[ "$MODEL" == gpt_tiny* ]] && dims+=(--dim "batch_x_seq=$((BATCH * SEQ))")

echo "== gmopt-compile $input ${dims[*]}"
build/tools/gmopt-compile "$input" "${dims[@]}" -o "build/demo/$MODEL.gm" --report

echo "== gmopt-run build/demo/$MODEL.gm --baseline"
run_args=(--baseline --steps 3 --report-json "build/demo/$MODEL.report.json")
if [ -d "testdata/$MODEL/test_data_set_0" ] && [ -n "$(ls testdata/$MODEL/test_data_set_0/output_*.pb 2>/dev/null)" ]; then
  run_args+=(--inputs "testdata/$MODEL/test_data_set_0" --check "testdata/$MODEL/test_data_set_0")
fi
build/tools/gmopt-run "build/demo/$MODEL.gm" "${run_args[@]}"
echo "== wrote build/demo/$MODEL.gm and build/demo/$MODEL.report.json"
echo "== next: train from code - examples/train_gpt.py (gmopt.training.api, ONNX Runtime's"
echo "   training API with the import changed) and examples/cpp/train_gpt.cpp; see the"
echo "   README's 'Train from code'"
