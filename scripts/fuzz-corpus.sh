#!/usr/bin/env bash
# Regenerates the seed corpora tests/fuzz/corpus/<target>/ of the five libFuzzer
# targets from testdata/ and the lit inputs (tests/lit), with the tools of a
# regular build tree. Usage: scripts/fuzz-corpus.sh [BUILD_DIR]  (default build/;
# it needs build/tools/gmopt-opt and gmopt-compile). Seeds:
#   onnx_import_fuzz  every testdata ONNX file, tests/lit/Inputs/onnx/*.onnx, and
#                     the ONNX export of every lit text-IR case that loads
#   text_parser_fuzz  every lit text-IR case (files split at `// -----`) and the
#                     text form of each testdata training graph
#   gm_loader_fuzz    each testdata training graph compiled to .gm (small dims)
#   pipeline_fuzz     the ONNX training graphs (one GPT), lit ONNX inputs and
#                     text-IR cases, behind the 9-byte header of
#                     tests/fuzz/FuzzInput.h
#   step_fuzz         the same, but only graphs small enough for a fast step
#                     (regression_frozen at batch 1, the lit text cases), once
#                     with the trivial plan and once after the pipeline
# Reproducers of fixed findings are committed next to the seeds as
# regress-<what> and kept by this script. The corpora are committed; run this
# after changing the formats, then commit. ctest replays every corpus
# (fuzz-corpus-<target>), scripts/test.sh fuzzes from it.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${1:-build}"
OPT="$BUILD/tools/gmopt-opt"
COMPILE="$BUILD/tools/gmopt-compile"
for tool in "$OPT" "$COMPILE"; do
  [ -x "$tool" ] || { echo "fuzz-corpus: $tool not built" >&2; exit 1; }
done

CORPUS=tests/fuzz/corpus
TARGETS=(onnx_import_fuzz text_parser_fuzz gm_loader_fuzz pipeline_fuzz step_fuzz)
# Reproducers of fixed findings (regress-*) are kept; the rest is rebuilt.
for target in "${TARGETS[@]}"; do
  mkdir -p "$CORPUS/$target"
  find "$CORPUS/$target" -type f ! -name 'regress-*' -delete
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# header SELECTOR EXTENTS...: the FuzzInput.h header (selector byte, then
# eight extents of the unbound symbols in name order; missing ones are 1).
header() {
  local selector="$1"; shift
  local extents=("$@") i
  printf "\\x$(printf %02x "$selector")"
  for i in 0 1 2 3 4 5 6 7; do
    printf "\\x$(printf %02x "${extents[$i]:-1}")"
  done
}
# seed TARGET NAME SELECTOR FILE EXTENTS...: FILE behind a header.
seed() {
  local target="$1" name="$2" selector="$3" file="$4"; shift 4
  { header "$selector" "$@"; cat "$file"; } > "$CORPUS/$target/$name"
}

# Text-IR cases of the lit tests, one file per `// -----` chunk.
mkdir -p "$scratch/gmir"
for file in $(find tests/lit -name '*.gmir' | sort); do
  base=$(echo "${file#tests/lit/}" | sed 's|/|-|g; s|\.gmir$||')
  awk -v out="$scratch/gmir/$base" '
    BEGIN { n = 0; f = out "-" n ".gmir" }
    /^\/\/ -----/ { n++; f = out "-" n ".gmir"; next }
    { print > f }' "$file"
done

# testdata: symbols are `batch` and (the GPTs) `batch_x_seq` = batch * 64.
for dir in testdata/*/; do
  model=$(basename "$dir")
  for kind in training eval optimizer; do
    cp "$dir/${kind}_model.onnx" "$CORPUS/onnx_import_fuzz/testdata-$model-$kind.onnx"
  done
  training="$dir/training_model.onnx"
  "$OPT" "$training" -o "$CORPUS/text_parser_fuzz/testdata-$model.gmir"
  dims=(--dim batch=2)
  case "$model" in gpt*) dims+=(--dim batch_x_seq=128) ;; esac
  "$COMPILE" "$training" "${dims[@]}" -o "$CORPUS/gm_loader_fuzz/testdata-$model.gm" >/dev/null
  # The GPTs' shape hints fix batch at 1.
  extents=(2)
  case "$model" in gpt*) extents=(1 64) ;; esac
  # One GPT only: the default pipeline takes seconds on one in the
  # sanitizer build, which would slow fuzzing down.
  case "$model" in gpt_tiny|gpt_tiny_untied) continue ;; esac
  seed pipeline_fuzz "onnx-testdata-$model" 0 "$training" "${extents[@]}"
  seed pipeline_fuzz "text-testdata-$model" 1 "$CORPUS/text_parser_fuzz/testdata-$model.gmir" "${extents[@]}"
done
for model in regression_frozen; do
  training="testdata/$model/training_model.onnx"
  seed step_fuzz "onnx-testdata-$model" 0 "$training" 1
  seed step_fuzz "onnx-testdata-$model-pipeline" 16 "$training" 1
  seed step_fuzz "text-testdata-$model" 1 "$CORPUS/text_parser_fuzz/testdata-$model.gmir" 1
done

for file in tests/lit/Inputs/onnx/*.onnx; do
  base=$(basename "$file" .onnx)
  cp "$file" "$CORPUS/onnx_import_fuzz/lit-$base.onnx"
  seed pipeline_fuzz "onnx-lit-$base" 0 "$file" 2
done

for file in "$scratch"/gmir/*.gmir; do
  base=$(basename "$file" .gmir)
  cp "$file" "$CORPUS/text_parser_fuzz/lit-$base.gmir"
  seed pipeline_fuzz "text-lit-$base" 1 "$file" 2
  seed step_fuzz "text-lit-$base" 1 "$file" 2
  seed step_fuzz "text-lit-$base-pipeline" 17 "$file" 2
  # Its ONNX form, where it has one (error cases and some IR-only
  # constructs do not export).
  if "$OPT" "$file" -o "$scratch/export.onnx" 2>/dev/null; then
    cp "$scratch/export.onnx" "$CORPUS/onnx_import_fuzz/lit-$base.onnx"
  fi
done

for target in "${TARGETS[@]}"; do
  echo "$target: $(ls "$CORPUS/$target" | wc -l) files, $(du -sh "$CORPUS/$target" | cut -f1)"
done
