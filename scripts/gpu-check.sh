#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine, self-contained (bash, python3's
# standard library; PyTorch only if installed), within a total time budget
# (default 450 s, so that it ends in under 8 minutes):
#   1. the device (nvidia-smi) and the CUDA unit tests, where a build tree
#      or bundle has them (gmopt-cuda-tests, else the build's per-file
#      tests); the test CudaDeviceTest.BenchGraphsHaveCudaKernels reads the
#      bench graphs this script resolved ($GMOPT_BENCH_MODELS);
#   2. for the GPT-2-small and ResNet-50 bench models at real batch sizes
#      (then the CNN testdata graphs cnn, cnn_bn, resnet_tiny), each
#      model's baseline once (the original fp32 graph, eager, stream-ordered
#      allocation from a dedicated pool; run beside the default pipeline)
#      and the optimized runs (default pipeline; selective recompute;
#      recompute + bf16 amp): the planned and counted peaks next to the
#      device's own figures (baseline: the pool's used and reserved
#      high-water marks; optimized: arena + persistent + workspace; both
#      cross-checked against the fall in cudaMemGetInfo's free bytes), the
#      reductions, median step times, the default pipeline's gradient
#      agreement with the baseline, and per pipeline the gradients' agreement
#      with the CPU at a small batch;
#   3. where PyTorch with CUDA is installed, the same models in PyTorch
#      eager and with torch.utils.checkpoint + autocast(bf16):
#      max_memory_allocated, max_memory_reserved, median step time.
# Every figure printed is measured in this run; nothing is estimated.
#
# Gradients against the CPU: gmopt-run has no gradient dump, but one SGD
# step of learning rate L = 2^30 from the same seeded weights leaves
# p - L*g, in which p is negligible (|p| / (L |g|) < 1e-6 for any gradient
# above 1e-3 |p|): the CPU backend runs the pipeline's graph at the small
# batch and saves its parameters (--save-weights), and the checked backend
# runs the same graph with --loss-reference pointing at them (the loss and
# every parameter after the step, per tensor max|got - ref| / max|ref|,
# i.e. the gradients' relative difference). Tolerance per dtype: fp32
# pipelines --fp32-rtol (default 1e-3; the default pipeline's gradients
# against the baseline too), bf16 amp --amp-rtol (default 1e-1).
#
# Fails (exit 1, with a list of what failed at the end) when a unit test
# fails; a bench model is missing (unless --skip-missing-models); a run
# fails, times out or names an op without a CUDA kernel ("no CUDA kernel
# for 'OP'"); a run's device figures disagree with its accounting
# (device_memory.agrees false); a gradient difference exceeds its
# tolerance; a PyTorch measurement fails; or a row is left out because the
# budget ran out (unless --quick or --allow-partial).
#
# Usage: scripts/gpu-check.sh [--tools DIR] [--tests DIR] [--models DIR]
#          [--out DIR] [--scratch DIR] [--backend cuda|cpu] [--budget S]
#          [--quick] [--allow-partial] [--skip-missing-models]
#          [--fp32-rtol X] [--amp-rtol X] [--tests-timeout S]
#   --tools   folder with gmopt-run (default: build/tools, else
#             dist/gmopt-bundle/bin from scripts/bundle.sh)
#   --tests   folder with the unit test binaries (default: build/tests,
#             else dist/gmopt-bundle/tests from bundle.sh --with-tests)
#   --models  bench models, <name>/training_model.onnx or .onnx.gz
#             (default: bench/models; scripts/gpu-payload.sh puts gzipped
#             graphs in .gpu/models; graphs only, no weights)
#   --out     reports, logs and summary.txt (default: gpu-check-out)
#   --scratch unpacked graphs and the CPU references (GPT-2's is 0.5 GB
#             per pipeline; default: a temporary folder, removed at the end)
#   --backend cpu checks the script's plumbing on a machine without a GPU
#             (tiny batches; the "device" runs are then CPU runs, labelled
#             so, and have no device figures)
#   --budget  total seconds (default 450), checked before every run; a run
#             is also cut at what is left
#   --quick   the default pipeline only; rows left out for time do not fail
#   --allow-partial        rows left out for time do not fail
#   --skip-missing-models  a missing bench model is reported, not a failure
# PYTHON names the interpreter with PyTorch (default: python3).
# GPU_CHECK_INJECT_GRAD_MISMATCH=1 (for testing the script only) makes the
# CPU references with another seed, so every gradient check must fail.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=""
tests=""
models="$root/bench/models"
out="gpu-check-out"
scratch=""
backend=cuda
budget=450
quick=0
allow_partial=0
skip_missing=0
fp32_rtol=1e-3
amp_rtol=1e-1
tests_timeout=180
usage_error() { echo "gpu-check.sh: $1 (see the usage at the top of the script)" >&2; exit 2; }
while (($#)); do
  case "$1" in
  --tools | --tests | --models | --out | --scratch | --backend | --budget | \
    --fp32-rtol | --amp-rtol | --tests-timeout)
    (($# >= 2)) || usage_error "$1 needs a value"
    case "$1" in
    --tools) tools=$2 ;;
    --tests) tests=$2 ;;
    --models) models=$2 ;;
    --out) out=$2 ;;
    --scratch) scratch=$2 ;;
    --backend) backend=$2 ;;
    --budget) budget=$2 ;;
    --fp32-rtol) fp32_rtol=$2 ;;
    --amp-rtol) amp_rtol=$2 ;;
    --tests-timeout) tests_timeout=$2 ;;
    esac
    shift 2 ;;
  --quick) quick=1; shift ;;
  --allow-partial) allow_partial=1; shift ;;
  --skip-missing-models) skip_missing=1; shift ;;
  *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $backend == cuda || $backend == cpu ]] || usage_error "--backend is cuda or cpu"
[[ $budget =~ ^[0-9]+$ && $tests_timeout =~ ^[0-9]+$ ]] ||
  usage_error "--budget and --tests-timeout take whole seconds"
start=$(date +%s)
deadline=$((start + budget))
if [[ -z "$tools" ]]; then
  if [[ -x "$root/build/tools/gmopt-run" ]]; then
    tools="$root/build/tools"
  else
    tools="$root/dist/gmopt-bundle/bin"
  fi
fi
if [[ -z "$tests" ]]; then
  if [[ -x "$root/build/tests/gmopt-cuda-tests" || -x "$root/build/tests/CudaDeviceTest" ]]; then
    tests="$root/build/tests"
  else
    tests="$root/dist/gmopt-bundle/tests"
  fi
fi
run="$tools/gmopt-run"
if [[ ! -x "$run" ]]; then
  echo "gpu-check.sh: error: no gmopt-run in $tools (build it, or pass --tools)" >&2
  exit 1
fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
if [[ -z "$scratch" ]]; then
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 1
  trap 'rm -rf "$scratch"' EXIT
else
  mkdir -p "$scratch" || exit 1
  scratch=$(cd "$scratch" && pwd)
fi
rows="$out/rows.tsv"        # one line per gmopt run (see record below)
failures="$out/failures.txt" # one line per failure, the summary's list
: >"$rows"
: >"$failures"
fail() { echo "$1" >>"$failures"; }
remaining() { echo $((deadline - $(date +%s))); }
# The rows left out for lack of time fail the check, unless asked not to.
partial_ok=$((quick || allow_partial))

# A build tree's binaries find cuBLASLt and cuDNN (perhaps only in a pip
# nvidia-* package) through the bundle launchers' own search; PyTorch keeps
# the caller's library path.
caller_library_path=${LD_LIBRARY_PATH:-}
cuda_dirs=$(sh "$root/scripts/cuda-library-path.sh")
if [[ -n "$cuda_dirs" ]]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda_dirs"
fi

echo "== device"
gpu_present=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader &&
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu_present=1
else
  echo "nvidia-smi not found"
fi
echo "budget: ${budget} s; CUDA library folders: ${cuda_dirs:-none found}"

# label|graph folder|dims|small dims (the gradient check against the CPU)
if [[ $backend == cuda ]]; then
  steps=3
  configs=(
    "gpt2_small b8xs1024|gpt2_small|batch=8 seq=1024 batch_x_seq=8192|batch=1 seq=128 batch_x_seq=128"
    "resnet50 b64|resnet50|batch=64|batch=2"
    "cnn b256|testdata/cnn|batch=256|batch=8"
    "cnn_bn b256|testdata/cnn_bn|batch=256|batch=4"
    "resnet_tiny b128|testdata/resnet_tiny|batch=128|batch=4"
  )
else
  steps=2
  configs=(
    "gpt2_small b1xs32|gpt2_small|batch=1 seq=32 batch_x_seq=32|batch=1 seq=32 batch_x_seq=32"
    "resnet50 b2|resnet50|batch=2|batch=2"
    "cnn b8|testdata/cnn|batch=8|batch=8"
  )
fi
default_pipeline="canonicalize,fold-transpose,schedule,plan-buffers"
recompute_pipeline="canonicalize,fold-transpose,recompute{mode=selective},schedule,plan-buffers"
amp_pipeline="canonicalize,fold-transpose,recompute{mode=selective},amp{dtype=bf16},schedule,plan-buffers"
# name|pipeline|dtype (which gradient tolerance applies)
pipelines=("default|$default_pipeline|fp32" "recompute|$recompute_pipeline|fp32"
  "recompute+amp|$amp_pipeline|amp")
((quick)) && pipelines=("default|$default_pipeline|fp32")
# The SGD learning rate of the gradient check (see the top).
check_lr=1073741824

echo "== bench graphs"
# Every graph resolved to $scratch/models/<folder>/training_model.onnx (a
# link, or the .gz unpacked), where the unit tests find them too.
declare -A model_path
for config in "${configs[@]}"; do
  IFS='|' read -r label folder dims small <<<"$config"
  if [[ $folder == testdata/* ]]; then
    source_path="$root/$folder/training_model.onnx"
  else
    source_path="$models/$folder/training_model.onnx"
  fi
  resolved="$scratch/models/$folder/training_model.onnx"
  mkdir -p "$(dirname "$resolved")"
  if [[ -f "$source_path" ]]; then
    ln -sf "$(cd "$(dirname "$source_path")" && pwd)/training_model.onnx" "$resolved"
  elif [[ -f "$source_path.gz" ]]; then
    # Shipped compressed (GPT-2 small's graph is 50 MB, 0.2 MB gzipped).
    gunzip -c "$source_path.gz" >"$resolved" || rm -f "$resolved"
  fi
  if [[ -f "$resolved" ]]; then
    model_path[$folder]=$resolved
    echo "$folder: $source_path$([[ -f $source_path ]] || echo .gz)"
  elif ((skip_missing)); then
    echo "$folder: missing (${source_path}[.gz]): skipped (--skip-missing-models)"
  else
    echo "$folder: MISSING (${source_path}[.gz]; bench/models/build.py $folder)"
    fail "model $folder: missing ${source_path}[.gz] (make it with bench/models/build.py $folder, or pass --skip-missing-models)"
  fi
done

echo "== CUDA unit tests"
# The bundle's one executable of every CUDA test (its launcher), or a
# build tree's per-file executables.
if [[ -x "$tests/gmopt-cuda-tests" ]]; then
  cuda_tests=(gmopt-cuda-tests)
else
  cuda_tests=()
  for test in "$tests"/Cuda*Test "$tests"/Cudnn*Test "$tests"/Nccl*Test; do
    [[ -x $test ]] && cuda_tests+=("$(basename "$test")")
  done
fi
tests_found=0
for test in "${cuda_tests[@]}"; do
  [[ -x "$tests/$test" ]] || continue
  tests_found=1
  limit=$(($(remaining) < tests_timeout ? $(remaining) : tests_timeout))
  if ((limit < 10)); then
    echo "$test: left out (time budget)"
    ((partial_ok)) || fail "unit tests $test: left out, the time budget ran out"
    continue
  fi
  # The tests read testdata/ from this checkout, the bench graphs from
  # $scratch/models.
  GMOPT_SOURCE_DIR="$root" GMOPT_BENCH_MODELS="$scratch/models" \
    timeout "$limit" "$tests/$test" >"$out/$test.log" 2>&1
  status=$?
  passed=$(grep -c '^\[       OK \]' "$out/$test.log")
  skipped=$(grep -c '^\[  SKIPPED \].*ms)$' "$out/$test.log")
  # On a machine with a GPU no device test may skip: a skip for want of a
  # device, of NCCL or of cuDNN is the thing this check exists to catch
  # (the 1-GPU NCCL smoke test, NcclGpuTest, among them).
  device_skips=""
  if [[ $backend == cuda ]] && ((gpu_present)); then
    device_skips=$(grep -E '^(needs a CUDA device|NCCL is not usable|gmopt was built without NCCL|the CPU half passed; the CUDA half needs|cannot load (cuDNN|cuBLASLt))' \
      "$out/$test.log" | sort | uniq -c | sed 's/^ *//' | paste -sd';' -)
  fi
  if ((status == 0)) && [[ -n $device_skips ]]; then
    echo "$test: device tests SKIPPED on a GPU machine: $device_skips"
    fail "unit tests $test: device tests skipped although a GPU is present: $device_skips"
  elif ((status == 0)); then
    echo "$test: passed ($passed passed, $skipped skipped)"
  elif ((status == 124)); then
    echo "$test: TIMED OUT after $limit s (see $out/$test.log)"
    fail "unit tests $test: timed out after $limit s"
  else
    failed_names=$(grep '^\[  FAILED  \].*ms)$' "$out/$test.log" | awk '{ print $4 }' | paste -sd' ')
    echo "$test: FAILED, exit $status (see $out/$test.log): ${failed_names:-no test named}"
    fail "unit tests $test: exit $status: ${failed_names:-see $out/$test.log}"
  fi
done
((tests_found)) || echo "no CUDA unit tests in $tests (skipped)"

dim_flags() { for d in $1; do printf -- '--dim %s ' "$d"; done; }

# Runs gmopt-run with a time limit of what the budget leaves (at most $1
# seconds), its output in $out/$2.log; status 125 when the budget has not
# 20 s left to start it.
timed_run() {
  local cap=$1 tag=$2
  shift 2
  local left
  left=$(remaining)
  ((left >= 20)) || return 125
  local limit=$((left - 5 < cap ? left - 5 : cap))
  timeout "$limit" "$@" >"$out/$tag.log" 2>&1
  local status=$?
  ((status == 124)) && echo "$limit" >"$out/$tag.timeout"
  return $status
}

# record KIND LABEL PIPELINE STATUS REPORT LOG: one line of $rows.
#   KIND run (a measured run; with-baseline when it also ran the baseline)
#        or grad (the gradient check against the CPU)
#   STATUS ok, error (gmopt-run wrote its report, then exited with an
#        error: a device-memory disagreement), failed, timeout or left-out
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$rows"; }
# status_word EXIT REPORT
status_word() {
  case $1 in
  0) echo ok ;;
  124) echo timeout ;;
  125) echo left-out ;;
  *) if [[ -f $2 ]]; then echo error; else echo failed; fi ;;
  esac
}

echo "== gmopt on $backend"
ref_seed=0
[[ ${GPU_CHECK_INJECT_GRAD_MISMATCH:-0} == 1 ]] && ref_seed=1 &&
  echo "GPU_CHECK_INJECT_GRAD_MISMATCH=1: the CPU references use seed 1 (every gradient check must fail)"
for config in "${configs[@]}"; do
  IFS='|' read -r label folder dims small <<<"$config"
  model=${model_path[$folder]:-}
  [[ -n "$model" ]] || continue
  for entry in "${pipelines[@]}"; do
    IFS='|' read -r pname pipeline dtype <<<"$entry"
    tag="${folder//\//_}_${pname//+/_}"
    # The model's baseline once, beside the default pipeline.
    kind=run
    baseline_flag=()
    if [[ $pname == default ]]; then
      kind=with-baseline
      baseline_flag=(--baseline)
    fi
    echo "$label $pname: $((budget - $(remaining))) s into the budget"
    rm -f "$out/$tag.json" "$out/${tag}_grad.json" "$out/$tag"*.timeout
    # shellcheck disable=SC2046
    timed_run 200 "$tag" "$run" "$model" $(dim_flags "$dims") --backend="$backend" \
      --optimizer=none --steps "$steps" "${baseline_flag[@]}" --passes="$pipeline" \
      --quiet --report-json "$out/$tag.json"
    record "$kind" "$label" "$pname" "$(status_word $? "$out/$tag.json")" "$out/$tag.json" "$out/$tag.log"

    # The gradients against the CPU's at the small batch: the CPU's
    # parameters after one SGD step, then the checked run against them.
    ref="$scratch/ref/$tag"
    rm -rf "$ref"
    mkdir -p "$ref"
    rtol=$fp32_rtol
    [[ $dtype == amp ]] && rtol=$amp_rtol
    # shellcheck disable=SC2046
    timed_run 150 "${tag}_cpu_reference" "$run" "$model" $(dim_flags "$small") \
      --backend=cpu --passes="$pipeline" --optimizer=sgd --lr="$check_lr" --steps 1 \
      --seed "$ref_seed" --quiet --save-weights "$ref/parameters.pbseq" \
      --report-json "$ref/cpu.json"
    status=$?
    if ((status == 0)); then
      # The reference file for --loss-reference: the loss, and every
      # parameter as its own TensorProto file (sliced out of the .pbseq).
      python3 - "$ref" "$check_lr" >>"$out/${tag}_cpu_reference.log" 2>&1 <<'PY'
import json, os, sys
ref, lr = sys.argv[1], float(sys.argv[2])

def varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i

def header(proto):
    """name, dims and data_type of one serialized onnx.TensorProto."""
    i, name, dims, dtype = 0, "", [], 0
    while i < len(proto):
        key, i = varint(proto, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(proto, i)
            if field == 1:
                dims.append(value)
            elif field == 2:
                dtype = value
        elif wire == 2:
            size, i = varint(proto, i)
            if field == 8:
                name = bytes(proto[i:i + size]).decode()
            elif field == 1:  # packed dims
                j = i
                while j < i + size:
                    dim, j = varint(proto, j)
                    dims.append(dim)
            i += size
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return name, dims, dtype

data = memoryview(open(os.path.join(ref, "parameters.pbseq"), "rb").read())
count, i = varint(data, 0)
params = []
for k in range(count):
    size, i = varint(data, i)
    proto = data[i:i + size]
    i += size
    name, dims, dtype = header(proto)
    if dtype not in (1, 10, 11, 16):  # float, float16, double, bfloat16
        continue
    file = f"parameter_{k}.pb"
    with open(os.path.join(ref, file), "wb") as f:
        f.write(proto)
    params.append({"name": name, "file": file, "shape": dims, "stride": 1})
os.remove(os.path.join(ref, "parameters.pbseq"))
loss = json.load(open(os.path.join(ref, "cpu.json")))["losses"][0]
json.dump({"learning_rate": lr, "optimizer": "SGD", "losses": [loss],
           "final_parameters": {"directory": ".", "params": params}},
          open(os.path.join(ref, "reference.json"), "w"), indent=1)
print(f"reference: loss {loss}, {len(params)} of {count} tensors")
PY
      status=$?
      ((status == 0)) || status=1
    fi
    if ((status != 0)); then
      # The reference failed: the check is not run; say why.
      record grad "$label" "$pname" "$(status_word $status -)" "-" "$out/${tag}_cpu_reference.log"
      continue
    fi
    # shellcheck disable=SC2046
    timed_run 150 "${tag}_grad" "$run" "$model" $(dim_flags "$small") \
      --backend="$backend" --passes="$pipeline" --loss-reference "$ref/reference.json" \
      --rtol "$rtol" --atol 0 --quiet --report-json "$out/${tag}_grad.json"
    status=$?
    # Exit 2 is a numerical failure, reported from the JSON.
    if ((status == 2)) && [[ -f "$out/${tag}_grad.json" ]]; then
      status=0
    fi
    record grad "$label" "$pname" "$(status_word $status "$out/${tag}_grad.json")" "$out/${tag}_grad.json" "$out/${tag}_grad.log"
    rm -rf "$ref"
  done
done

python3 - "$rows" "$backend" "$fp32_rtol" "$amp_rtol" "$partial_ok" "$failures" <<'PY'
import json, os, re, sys
rows_path, backend, fp32_rtol, amp_rtol, partial_ok, failures_path = sys.argv[1:]
fp32_rtol, amp_rtol, partial_ok = float(fp32_rtol), float(amp_rtol), partial_ok == "1"
failures = open(failures_path, "a")
def fail(message):
    failures.write(message + "\n")

def mib(b):
    return "-" if b is None else f"{b / 2**20:.1f}"

def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"

def sci(x):
    return "-" if x is None else f"{x:.1e}"

def why(status, log):
    """Why a run did not give a report: the op without a kernel first."""
    if status == "left-out":
        return "left out: the time budget ran out"
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    if status == "timeout":
        limit = open(log[:-4] + ".timeout").read().strip() if os.path.exists(log[:-4] + ".timeout") else "?"
        return f"timed out after {limit} s"
    ops = sorted(set(re.findall(r"no CUDA kernel for '([^']+)'", text)))
    if ops:
        return "no CUDA kernel for " + ", ".join(ops)
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    return (text.strip().splitlines() or ["no output"])[-1][:200]

runs, grads, order = {}, {}, []
for line in open(rows_path):
    kind, label, pname, status, report, log = line.rstrip("\n").split("\t")
    entry = dict(kind=kind, status=status, report=report, log=log)
    if status in ("ok", "error"):
        try:
            entry["json"] = json.load(open(report))
        except (OSError, ValueError) as e:
            entry["status"], entry["why"] = "failed", f"no readable report ({e})"
    if status != "ok" and "why" not in entry:
        entry["why"] = why(status, log)
    if entry["status"] == "error":
        # The run finished and reported: its figures are shown, its error
        # (the device memory's disagreement) fails the check.
        fail(f"{label} {pname} {'gradient check' if kind == 'grad' else 'run'}: {entry['why']}")
        entry["status"] = "ok"
    if entry["status"] != "ok":
        what = "gradient check" if kind == "grad" else "run"
        if entry["status"] == "left-out":
            if not partial_ok:
                fail(f"{label} {pname} {what}: {entry['why']}")
        else:
            fail(f"{label} {pname} {what}: {entry['why']}")
    (grads if kind == "grad" else runs)[(label, pname)] = entry
    if label not in order:
        order.append(label)

device = backend == "cuda"
print(f"\nmemory, measured by gmopt on the {backend} backend in this run (MiB)")
print("  planned: the plan's bytes (arena + persistent + workspace); counted: the interpreter's")
print("  peak; device: the baseline's pool used high-water mark (cudaMemPoolAttrUsedMemHigh),")
print("  the optimized run's arena + persistent + workspace; reserved: the baseline pool's")
print("  reserved high-water mark; memGetInfo: the fall in cudaMemGetInfo's free bytes,")
print("  which must agree with the run's accounting (reserved, or arena + persistent +")
print("  workspace) within the stated tolerance; reductions against the baseline"
      + ("" if device else "; the CPU backend has no device figures"))
header = (f"{'model':18} {'run':14} {'planned':>8} {'counted':>8} {'device':>8} {'reserved':>8} "
          f"{'memGetInfo':>10} {'agrees':>6} {'red.count':>9} {'red.device':>10}")
print(header)
def device_memory(run_json, key):
    return (run_json or {}).get("device_memory") or {}

for label in order:
    baseline = None
    for (l, pname), entry in runs.items():
        if l == label and entry["kind"] == "with-baseline" and entry["status"] == "ok":
            baseline = entry["json"].get("baseline")
    if baseline:
        dm = baseline.get("device_memory") or {}
        agrees = dm.get("agrees")
        print(f"{label:18} {'baseline':14} {'-':>8} {mib(baseline.get('peak_bytes')):>8} "
              f"{mib(dm.get('pool_used_high_bytes')):>8} {mib(dm.get('pool_reserved_high_bytes')):>8} "
              f"{mib(dm.get('device_delta_bytes')):>10} {('-' if agrees is None else 'yes' if agrees else 'NO'):>6}")
        if agrees is False:
            fail(f"{label} baseline: device memory disagrees with the accounting "
                 f"(cudaMemGetInfo fall {dm.get('device_delta_bytes')} B, accounted "
                 f"{dm.get('accounted_bytes')} B, tolerance {dm.get('tolerance_bytes')} B)")
    for (l, pname), entry in runs.items():
        if l != label:
            continue
        if entry["status"] != "ok":
            print(f"{label:18} {pname:14} {entry['status'].upper()}: {entry['why']}")
            continue
        r = entry["json"]
        opt = r["optimized"]
        dm = opt.get("device_memory") or {}
        agrees = dm.get("agrees")
        base_dm = (baseline or {}).get("device_memory") or {}
        red_count = None
        if baseline and baseline.get("peak_bytes"):
            red_count = 1 - opt["peak_bytes"] / baseline["peak_bytes"]
        red_device = None
        if dm.get("accounted_bytes") and base_dm.get("accounted_bytes"):
            red_device = 1 - dm["accounted_bytes"] / base_dm["accounted_bytes"]
        print(f"{label:18} {pname:14} {mib(r['plan'].get('planned_bytes')):>8} {mib(opt.get('peak_bytes')):>8} "
              f"{mib(dm.get('accounted_bytes')):>8} {'':>8} {mib(dm.get('device_delta_bytes')):>10} "
              f"{('-' if agrees is None else 'yes' if agrees else 'NO'):>6} {pct(red_count):>9} {pct(red_device):>10}")
        if agrees is False:
            fail(f"{label} {pname}: device memory disagrees with the accounting "
                 f"(cudaMemGetInfo fall {dm.get('device_delta_bytes')} B, accounted "
                 f"{dm.get('accounted_bytes')} B, tolerance {dm.get('tolerance_bytes')} B)")

print(f"\nstep times and gradients (fp32 tolerance {fp32_rtol:g}, bf16 amp {amp_rtol:g};"
      " gradient differences: max over tensors of max|d| / max|reference|)")
print(f"{'model':18} {'run':14} {'base ms':>8} {'opt ms':>8} {'grad vs base':>12} "
      f"{'grad vs CPU':>11} {'loss vs CPU':>11}  verdict")
for label in order:
    for (l, pname), entry in runs.items():
        if l != label:
            continue
        rtol = amp_rtol if "amp" in pname else fp32_rtol
        base_ms = opt_ms = vs_base = None
        if entry["status"] == "ok":
            r = entry["json"]
            opt_ms = r["optimized"].get("step_ms")
            if r.get("baseline"):
                base_ms = r["baseline"].get("step_ms")
                vs_base = r.get("max_grad_rel_diff")
                if vs_base is None or vs_base > rtol:
                    fail(f"{label} {pname}: gradients differ from the baseline's by "
                         f"{sci(vs_base)} (tolerance {rtol:g})")
        grad = grads.get((label, pname))
        vs_cpu = loss_cpu = None
        verdict = "ok"
        if grad is None:
            verdict = "no gradient check"
        elif grad["status"] != "ok":
            verdict = f"gradient check: {grad['why']}"
        else:
            check = grad["json"].get("sgd_reference") or {}
            tensors = check.get("tensors") or []
            params = [t for t in tensors if t["name"].startswith("final ")]
            losses = [t for t in tensors if t["name"].startswith("loss")]
            def worst(ts):
                values = [t.get("max_rel_error") for t in ts]
                return None if not values else (float("inf") if None in values else max(values))
            vs_cpu, loss_cpu = worst(params), worst(losses)
            bad = [t["name"][len("final "):] for t in params if not t.get("ok")]
            if grad["json"].get("skipped_updates"):
                # (an amp step skipped for a loss-scale overflow leaves the
                # parameters as they were: nothing was compared)
                verdict = "GRADIENTS not compared: the step was skipped (loss-scale overflow)"
                fail(f"{label} {pname}: gradient check inconclusive, the amp step was skipped "
                     "(loss-scale overflow)")
            elif not params or vs_cpu is None or vs_cpu > rtol or bad or not check.get("passed"):
                worst_name = max(params, key=lambda t: t.get("max_rel_error") or float("inf"))["name"][6:] if params else "-"
                verdict = (f"GRADIENTS beyond {rtol:g}: {len(bad)} of {len(params)} tensors"
                           f" (worst {worst_name})")
                fail(f"{label} {pname}: gradients on {backend} differ from the CPU's by "
                     f"{sci(vs_cpu)} > {rtol:g} ({len(bad)} of {len(params)} tensors, worst {worst_name}; loss {sci(loss_cpu)})")
        if entry["status"] != "ok":
            verdict = f"run: {entry['why']}" + ("" if verdict == "ok" else f"; {verdict}")
        fmt = lambda x: "-" if x is None else f"{x:.2f}"
        print(f"{label:18} {pname:14} {fmt(base_ms):>8} {fmt(opt_ms):>8} {sci(vs_base):>12} "
              f"{sci(vs_cpu):>11} {sci(loss_cpu):>11}  {verdict}")
PY
report_status=$?
((report_status == 0)) || fail "the report script failed (exit $report_status)"

echo
echo "== PyTorch on the same models"
# Cut at what the budget leaves: a measurement cannot be interrupted from
# inside, so a cut process leaves its remaining rows out.
torch_limit=$(($(remaining) - 2))
((torch_limit > 0)) || torch_limit=1
LD_LIBRARY_PATH=$caller_library_path timeout "$torch_limit" "${PYTHON:-python3}" -u - \
  "$root" "$backend" "$quick" "$deadline" "$failures" "$partial_ok" <<'PY'
import sys, time
root, backend, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
deadline, failures_path, partial_ok = float(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
def fail(message):
    with open(failures_path, "a") as f:
        f.write(message + "\n")
try:
    import torch
except ImportError:
    print("PyTorch is not installed: no PyTorch column")
    sys.exit(0)
if backend == "cuda" and not torch.cuda.is_available():
    print("PyTorch has no CUDA device: no PyTorch column")
    sys.exit(0)
import importlib.util, os, types
from unittest import mock
# bench/models/build.py (the modules the ONNX graphs were exported from)
# imports onnx and ONNX Runtime training at the top, only to export: stand
# them in where they are not installed.
for name in ["onnx", "onnx.numpy_helper", "onnxruntime", "onnxruntime.training",
             "onnxruntime.training.api", "onnxruntime.training.artifacts",
             "onnxruntime.training.onnxblock", "onnxruntime.training.onnxblock._graph_utils"]:
    try:
        importlib.import_module(name)
    except Exception:
        sys.modules[name] = mock.MagicMock()
sys.path.insert(0, os.path.join(root, "testdata"))
spec = importlib.util.spec_from_file_location("bench_build", os.path.join(root, "bench", "models", "build.py"))
build = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(build)
except Exception as e:  # noqa: BLE001
    print(f"cannot load bench/models/build.py's modules: {e}")
    fail(f"pytorch: cannot load bench/models/build.py's modules: {e}")
    sys.exit(0)
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
device = torch.device(backend)
big = backend == "cuda"

def gpt():
    size = dict(build.GPT2_SMALL)
    model = build.gpt2_small(size).to(device)
    b, s = (8, 1024) if big else (1, 32)
    ids = torch.randint(0, size["vocab"], (b, s), device=device)
    return model, ids, ids.reshape(-1), "gpt2_small", f"b{b}xs{s}"

def resnet():
    model = build.ResNet50().to(device)
    b = 64 if big else 2
    x = torch.randn(b, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (b,), device=device)
    return model, x, y, "resnet50", f"b{b}"

def step(model, x, y, ckpt, amp):
    blocks = getattr(model, "h", None)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        if ckpt and blocks is not None:
            # GPTTiny.forward with each block checkpointed.
            B, T = x.size()
            pos = torch.arange(0, T, dtype=torch.long, device=x.device)
            h = model.drop(model.wte(x) + model.wpe(pos))
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False)
            logits = F.linear(model.ln_f(h), model.wte.weight).view(-1, model.vocab)
        elif ckpt:
            # ResNet50.forward with each bottleneck checkpointed.
            h = F.max_pool2d(F.relu(model.bn1(model.conv1(x))), 3, stride=2, padding=1)
            for block in model.stages:
                h = checkpoint(block, h, use_reentrant=False)
            logits = model.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))
        else:
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()

def measure(make, ckpt, amp):
    model, x, y, name, shape = make()
    model.train()
    try:
        step(model, x, y, ckpt, amp)  # warm-up
        times = []
        if big:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(3 if big else 1):
            for p in model.parameters():
                p.grad = None
            if big:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                step(model, x, y, ckpt, amp)
                e.record()
                torch.cuda.synchronize()
                times.append(s.elapsed_time(e))
            else:
                t = time.perf_counter()
                step(model, x, y, ckpt, amp)
                times.append(1e3 * (time.perf_counter() - t))
        times.sort()
        alloc = torch.cuda.max_memory_allocated() / 2**20 if big else float("nan")
        reserved = torch.cuda.max_memory_reserved() / 2**20 if big else float("nan")
        return name, shape, alloc, reserved, times[len(times) // 2]
    except Exception as e:  # noqa: BLE001 (out of memory included)
        return name, shape, None, None, str(e).splitlines()[0]
    finally:
        del model
        if big:
            torch.cuda.empty_cache()

# (bf16 autocast on the CPU takes a minute a step: the CPU plumbing run
# checkpoints without it)
variants = [("eager", False, False)] + ([] if quick else [("ckpt+autocast", True, True)] if big
                                        else [("ckpt", True, False)])
print(f"figures measured by PyTorch {torch.__version__} on {backend} in this run"
      + ("" if big else " (no CUDA: step times only)"))
print(f"{'model':20} {'variant':14} {'max_alloc MiB':>13} {'max_reserved MiB':>16} {'step ms':>8}")
for make in (gpt, resnet):
    for vname, ckpt, amp in variants:
        if deadline - time.time() < 20:
            name = {"gpt": "gpt2_small", "resnet": "resnet50"}[make.__name__]
            print(f"{name:20} {vname:14} left out: the time budget ran out")
            if not partial_ok:
                fail(f"pytorch {name} {vname}: left out, the time budget ran out")
            continue
        name, shape, alloc, reserved, ms = measure(make, ckpt, amp)
        label = f"{name} {shape}"
        if alloc is None:
            print(f"{label:20} {vname:14} FAILED: {ms}")
            fail(f"pytorch {label} {vname}: {ms}")
        else:
            print(f"{label:20} {vname:14} {alloc:>13.1f} {reserved:>16.1f} {ms:>8.2f}")
PY
torch_status=$?
if ((torch_status == 124)); then
  echo "PyTorch: cut after $torch_limit s, at the end of the time budget: the rows not shown were left out"
  ((partial_ok)) || fail "pytorch: cut after $torch_limit s at the end of the time budget (rows left out)"
elif ((torch_status != 0)); then
  fail "the PyTorch comparison ended with exit $torch_status"
fi

elapsed=$(($(date +%s) - start))
{
  echo
  if [[ -s $failures ]]; then
    echo "gpu-check.sh: FAILED ($(wc -l <"$failures") problems), ${elapsed} s of a ${budget} s budget:"
    sed 's/^/  - /' "$failures"
  else
    echo "gpu-check.sh: passed in ${elapsed} s (budget ${budget} s)"
  fi
  echo "reports and logs in $out"
} | tee "$out/summary.txt"
[[ ! -s $failures ]]
