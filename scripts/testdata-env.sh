#!/usr/bin/env bash
# Creates testdata/.venv and installs the pinned Python packages used by
# testdata/generate.py (ONNX Runtime training artifact generator + torch exporter).
# Idempotent: re-running only installs what is missing. Not needed by CI.
#
#   bash scripts/testdata-env.sh && testdata/.venv/bin/python testdata/generate.py
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/testdata/.venv"
REQ="$ROOT/testdata/requirements.txt"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "testdata-env: creating $VENV with $($PY --version 2>&1)"
  "$PY" -m venv "$VENV"
fi

stamp="$VENV/.requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "testdata-env: requirements already installed"
  exit 0
fi

"$VENV/bin/python" -m pip install --quiet -r "$REQ"
"$VENV/bin/python" -m pip check || true
echo "$want" > "$stamp"
echo "testdata-env: done"
"$VENV/bin/python" -m pip freeze | grep -Ei '^(onnx|onnxruntime-training|numpy|protobuf|torch)=='
