#!/usr/bin/env bash
# Prepares, on this machine, everything a GPU session needs to run
# scripts/gpu-check.sh there (a wrapper over the Python package
# scripts/gpucheck/, which travels with the tracked files; the GPU machine's
# python3 has the NumPy it needs), in the git-ignored folder .gpu/ (the one
# "carry" path):
#   .gpu/models/<name>/training_model.onnx.gz  GPT-2 small's and ResNet-50's
#       training graphs (bench/models/build.py with the testdata venv;
#       graphs only, no weights; gpu-check.sh --models unpacks the .gz)
#   .gpu/gmopt-bundle.tar.xz  scripts/bundle.sh --with-tests of a built tree
#       (the tools and gmopt-cuda-tests; cuBLASLt and cuDNN come from the
#       GPU machine, found by the launchers)
# then measures what would travel (tracked files + untracked files git does
# not ignore + shared/ where present + .gpu/) and fails past the 64 MiB a
# GPU machine receives, and prints the command to run there and the carry
# list.
#
# Usage: scripts/gpu-payload.sh [--build DIR] [--python PY] [--models DIR]
#   --build   the built tree to bundle (default: build); it needs
#             tools/gmopt-{run,compile,opt} and tests/gmopt-cuda-tests
#   --python  the interpreter with PyTorch and onnxruntime-training
#             (default: testdata/.venv/bin/python)
#   --models  take the graphs from DIR/<name>/training_model.onnx (made
#             before with bench/models/build.py --out DIR) instead of
#             building them
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
python="$root/testdata/.venv/bin/python"
models_from=""
while (($#)); do
  case "$1" in
  --build) build=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --models) models_from=$2; shift 2 ;;
  *) echo "gpu-payload.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
limit_bytes=$((64 * 1024 * 1024))
payload="$root/.gpu"
bench_models=(gpt2_small resnet50)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-payload.XXXXXX")
trap 'rm -rf "$work"' EXIT

if ! git -C "$root" check-ignore -q "$payload/"; then
  echo "gpu-payload.sh: error: .gpu/ is not git-ignored here (add /.gpu/ to .gitignore):" \
    "it would travel twice" >&2
  exit 1
fi
rm -rf "$payload"
mkdir -p "$payload/models"

echo "== bench graphs"
if [[ -z "$models_from" ]]; then
  if [[ ! -x "$python" ]]; then
    echo "gpu-payload.sh: error: no $python (scripts/testdata-env.sh makes the venv; or pass" \
      "--python, or --models with graphs built before)" >&2
    exit 1
  fi
  models_from="$work/models"
  "$python" "$root/bench/models/build.py" --out "$models_from" "${bench_models[@]}" \
    >"$work/build.log" 2>&1 || {
    tail -20 "$work/build.log" >&2
    echo "gpu-payload.sh: error: bench/models/build.py failed" >&2
    exit 1
  }
fi
for name in "${bench_models[@]}"; do
  graph="$models_from/$name/training_model.onnx"
  if [[ ! -f "$graph" ]]; then
    echo "gpu-payload.sh: error: no $graph" >&2
    exit 1
  fi
  mkdir -p "$payload/models/$name"
  gzip -9 -c "$graph" >"$payload/models/$name/training_model.onnx.gz"
  echo "$name: $(stat -c %s "$graph") bytes, $(stat -c %s "$payload/models/$name/training_model.onnx.gz") gzipped"
done

echo "== bundle"
bash "$root/scripts/bundle.sh" --with-tests "$build" "$work/bundle"
mv "$work/bundle/gmopt-bundle.tar.xz" "$payload/"

echo "== what travels (limit $limit_bytes bytes)"
# Sizes of the listed paths (regular files and links; a deleted tracked
# file is not there to travel).
sum_sizes() {
  local total=0 size
  while IFS= read -r -d '' path; do
    if [[ -L "$root/$path" || -f "$root/$path" ]]; then
      size=$(stat -c %s "$root/$path")
      total=$((total + size))
    fi
  done
  echo "$total"
}
tracked=$(git -C "$root" ls-files -z --cached | sum_sizes)
untracked=$(git -C "$root" ls-files -z --others --exclude-standard | sum_sizes)
shared=0
if [[ -d "$root/shared" ]]; then
  shared=$(du -sb "$root/shared" | awk '{ print $1 }')
fi
carried=$(du -sb "$payload" | awk '{ print $1 }')
total=$((tracked + untracked + shared + carried))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
printf '  %-34s %11d bytes (%s)\n' "tracked files" "$tracked" "$(mib "$tracked")" \
  "untracked, not ignored" "$untracked" "$(mib "$untracked")" \
  "shared/" "$shared" "$(mib "$shared")" \
  ".gpu/gmopt-bundle.tar.xz" "$(stat -c %s "$payload/gmopt-bundle.tar.xz")" \
  "$(mib "$(stat -c %s "$payload/gmopt-bundle.tar.xz")")" \
  ".gpu/models" "$(du -sb "$payload/models" | awk '{ print $1 }')" \
  "$(mib "$(du -sb "$payload/models" | awk '{ print $1 }')")" \
  "total" "$total" "$(mib "$total")"
if ((untracked > 1024 * 1024)); then
  echo "  (the untracked files over 1 MiB travel too; commit, ignore or remove them:)"
  git -C "$root" ls-files -z --others --exclude-standard |
    while IFS= read -r -d '' path; do
      [[ -f "$root/$path" ]] && stat -c '%s %n' "$root/$path"
    done | sort -rn | head -5 | sed 's/^/    /'
fi
if ((total > limit_bytes)); then
  echo "gpu-payload.sh: error: $total bytes would travel, over the $limit_bytes a GPU machine receives" >&2
  exit 1
fi

# The reports and logs are more files than a GPU machine sends back (8):
# they come back as one archive, with summary.txt beside it.
cat <<EOF

== on the GPU machine
carry: [".gpu"]
command (run from the repository root; gpu-check.sh's own budget is 450 s):
set -e; b=\$(mktemp -d); tar -C "\$b" -xJf .gpu/gmopt-bundle.tar.xz 2>/dev/null || python3 -m tarfile -e .gpu/gmopt-bundle.tar.xz "\$b"; s=0; timeout 560 scripts/gpu-check.sh --tools "\$b/gmopt-bundle/bin" --tests "\$b/gmopt-bundle/tests" --models .gpu/models --out "\$b/gpu-check" || s=\$?; cp "\$b/gpu-check/summary.txt" "\$OUT/" || true; tar -C "\$b" -czf "\$OUT/gpu-check.tar.gz" gpu-check; exit \$s
with timeout_s 590; \$OUT/summary.txt is the verdict and the list of failures, and
\$OUT/gpu-check.tar.gz holds every report and log (rows.tsv, failures.txt, the per-run
JSON reports, the gradient comparisons *_gradients.json).
EOF
