#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine, self-contained (bash, python3's
# standard library; PyTorch only if installed), meant to finish in under 8
# minutes:
#   1. the device (nvidia-smi) and the CUDA unit tests, where a build tree
#      with them is present (gmopt-cuda-tests from the bundle, or the build's per-file tests);
#   2. for the GPT-2-small and ResNet-50 bench models at real batch sizes
#      (and the CNN testdata graphs cnn, cnn_bn, resnet_tiny):
#      the eager baseline's peak (the original fp32 graph, stream-ordered
#      allocation from a dedicated pool), the optimized peak (default
#      pipeline; with selective recompute; with recompute and bf16 amp),
#      the reduction, median step times, the optimized-vs-baseline gradient
#      agreement, and CUDA-vs-CPU agreement of the first loss at a small
#      batch; a configuration the CUDA kernels cannot run yet shows why;
#   3. where PyTorch with CUDA is installed, the same models in PyTorch
#      eager and with torch.utils.checkpoint + autocast(bf16):
#      max_memory_allocated, max_memory_reserved, median step time.
# Every figure printed is measured in this run; nothing is estimated.
#
# Usage: scripts/gpu-check.sh [--tools DIR] [--tests DIR] [--models DIR]
#                             [--out DIR] [--backend cuda|cpu] [--quick]
#   --tools   folder with gmopt-run (default: build/tools, else
#             dist/gmopt-bundle/bin from scripts/bundle.sh)
#   --tests   folder with the unit test binaries (default: build/tests,
#             else dist/gmopt-bundle/tests from bundle.sh --with-tests)
#   --models  bench models (default: bench/models; make them once, where
#             PyTorch and ONNX Runtime training are installed, with
#             `python bench/models/build.py gpt2_small resnet50` and copy
#             the folders: graphs only, no weights; a training_model.onnx.gz
#             is unpacked into --out)
#   --out     reports and logs (default: gpu-check-out)
#   --backend cpu checks the script's plumbing on a machine without a GPU
#             (tiny batches; the figures are then CPU figures and are
#             labelled so)
#   --quick   one configuration per model
# PYTHON names the interpreter with PyTorch (default: python3).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=""
tests=""
models="$root/bench/models"
out="gpu-check-out"
backend=cuda
quick=0
while (($#)); do
  case "$1" in
  --tools) tools=$2; shift 2 ;;
  --tests) tests=$2; shift 2 ;;
  --models) models=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --backend) backend=$2; shift 2 ;;
  --quick) quick=1; shift ;;
  *) echo "gpu-check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
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
mkdir -p "$out"
start=$(date +%s)
failures=0

echo "== device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
else
  echo "nvidia-smi not found"
fi

echo "== CUDA unit tests"
# The bundle's one executable of every CUDA test, or a build tree's
# per-file executables.
if [[ -x "$tests/gmopt-cuda-tests" ]]; then
  cuda_tests=(gmopt-cuda-tests)
else
  cuda_tests=(CudaDeviceTest CudaElementwiseMathTest CudaIndexingTest CudnnGeometryTest
    CudaCnnParityTest CudaIndexTest CudaTrainingTest CudaScalingTest CudaLossTest
    CudaReduceTest CudaShapeTest CudaResizeTest CudaMeasurementTest CudaCoverageTest
    NcclCollectivesTest CudaAmpCoverageTest CudaCnnAmpParityTest
    CudaCoreOpsParityTest CudaMovementParityTest CudaGraphParityTest)
fi
for test in "${cuda_tests[@]}"; do
  if [[ -x "$tests/$test" ]]; then
    # The test binaries read testdata/ from this checkout; a bundled test
    # finds its libraries through the launcher's path.
    if GMOPT_SOURCE_DIR="$root" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib" \
      timeout 300 "$tests/$test" >"$out/$test.log" 2>&1; then
      echo "$test: passed ($(grep -c '^\[       OK \]' "$out/$test.log") passed, $(grep -c '^\[  SKIPPED \].*ms)$' "$out/$test.log") skipped)"
    else
      echo "$test: FAILED (see $out/$test.log)"
      failures=$((failures + 1))
    fi
  else
    echo "$test: not present in $tests (skipped)"
  fi
done

# name|graph folder|dims|small dims for the CPU agreement check
if [[ $backend == cuda ]]; then
  configs=(
    "gpt2_small b8xs1024|gpt2_small|batch=8 seq=1024 batch_x_seq=8192|batch=1 seq=128 batch_x_seq=128"
    "resnet50 b64|resnet50|batch=64|batch=2"
    "cnn b256|testdata/cnn|batch=256|batch=8"
    "cnn_bn b256|testdata/cnn_bn|batch=256|batch=4"
    "resnet_tiny b128|testdata/resnet_tiny|batch=128|batch=4"
  )
else
  configs=(
    "gpt2_small b1xs64|gpt2_small|batch=1 seq=64 batch_x_seq=64|batch=1 seq=64 batch_x_seq=64"
    "resnet50 b2|resnet50|batch=2|batch=2"
    "cnn b8|testdata/cnn|batch=8|batch=8"
  )
fi
default_pipeline="canonicalize,fold-transpose,schedule,plan-buffers"
recompute_pipeline="canonicalize,fold-transpose,recompute{mode=selective},schedule,plan-buffers"
amp_pipeline="canonicalize,fold-transpose,recompute{mode=selective},amp{dtype=bf16},schedule,plan-buffers"
pipelines=("default|$default_pipeline" "recompute|$recompute_pipeline" "recompute+amp|$amp_pipeline")
((quick)) && pipelines=("default|$default_pipeline")

dim_flags() { for d in $1; do printf -- '--dim %s ' "$d"; done; }

echo "== gmopt on $backend"
rows="$out/rows.tsv"
: >"$rows"
for config in "${configs[@]}"; do
  IFS='|' read -r label folder dims small <<<"$config"
  model="$models/$folder/training_model.onnx"
  # The CNN testdata graphs (cuDNN convolution, batch norm, the pools).
  [[ $folder == testdata/* ]] && model="$root/$folder/training_model.onnx"
  if [[ ! -f "$model" && -f "$model.gz" ]]; then
    # Shipped compressed (GPT-2 small's graph is 50 MB, 0.2 MB gzipped).
    mkdir -p "$out/models/$folder"
    gunzip -c "$model.gz" >"$out/models/$folder/training_model.onnx"
    model="$out/models/$folder/training_model.onnx"
  fi
  if [[ ! -f "$model" ]]; then
    printf '%s\t-\tmissing\t%s\n' "$label" "no $model (bench/models/build.py $folder)" >>"$rows"
    continue
  fi
  for entry in "${pipelines[@]}"; do
    IFS='|' read -r pname pipeline <<<"$entry"
    tag="${folder//\//_}_${pname//+/_}"
    # shellcheck disable=SC2046
    timeout 150 "$run" "$model" $(dim_flags "$dims") --backend="$backend" \
      --optimizer=none --steps 3 --baseline --passes="$pipeline" \
      --report-json "$out/$tag.json" >"$out/$tag.log" 2>&1
    status=$?
    if ((status == 0)); then
      printf '%s\t%s\tok\t%s\n' "$label" "$pname" "$out/$tag.json" >>"$rows"
    else
      reason=$(grep -m1 'error' "$out/$tag.log" || tail -1 "$out/$tag.log")
      ((status == 124)) && reason="timed out after 150 s"
      printf '%s\t%s\tfailed\t%s\n' "$label" "$pname" "$reason" >>"$rows"
    fi
  done
  # CUDA against the CPU backend: the first loss at a small batch.
  if [[ $backend == cuda ]]; then
    # shellcheck disable=SC2046
    timeout 120 "$run" "$model" $(dim_flags "$small") --backend=cuda \
      --optimizer=none --steps 1 --report-json "$out/${folder//\//_}_small_cuda.json" \
      >"$out/${folder//\//_}_small_cuda.log" 2>&1 &&
      timeout 120 "$run" "$model" $(dim_flags "$small") --backend=cpu \
        --optimizer=none --steps 1 --report-json "$out/${folder//\//_}_small_cpu.json" \
        >"$out/${folder//\//_}_small_cpu.log" 2>&1
    printf '%s\tcpu-check\t%s\t%s|%s\n' "$label" "$?" \
      "$out/${folder//\//_}_small_cuda.json" "$out/${folder//\//_}_small_cpu.json" >>"$rows"
  fi
done

python3 - "$rows" "$backend" <<'PY'
import json, sys
rows, backend = sys.argv[1], sys.argv[2]
def mib(b):
    return "-" if b is None else f"{b / 2**20:.1f}"
print(f"\nfigures measured by gmopt on the {backend} backend in this run")
print(f"{'model':20} {'pipeline':14} {'baseline MiB':>12} {'optimized MiB':>13} "
      f"{'reduction':>9} {'base ms':>8} {'opt ms':>8} {'grad rel diff':>13}")
for line in open(rows):
    label, pname, status, detail = line.rstrip("\n").split("\t", 3)
    if pname == "cpu-check":
        cuda_path, cpu_path = detail.split("|")
        if status != "0":
            print(f"{label:20} {'cuda vs cpu':14} not run (see the *_small_*.log files)")
            continue
        a = json.load(open(cuda_path))["losses"][0]
        b = json.load(open(cpu_path))["losses"][0]
        rel = abs(a - b) / max(abs(b), 1e-30)
        print(f"{label:20} {'cuda vs cpu':14} first loss {a:.6f} (cuda) vs {b:.6f} (cpu): "
              f"relative difference {rel:.2e}")
        continue
    if status != "ok":
        print(f"{label:20} {pname:14} {status}: {detail}")
        continue
    r = json.load(open(detail))
    base, opt = r.get("baseline") or {}, r["optimized"]
    red = r.get("peak_reduction")
    diff = r.get("max_grad_rel_diff")
    print(f"{label:20} {pname:14} {mib(base.get('peak_bytes')):>12} {mib(opt.get('peak_bytes')):>13} "
          f"{'-' if red is None else f'{100 * red:.1f}%':>9} "
          f"{base.get('step_ms', 0):>8.2f} {opt.get('step_ms', 0):>8.2f} "
          f"{'-' if diff is None else f'{diff:.1e}':>13}")
PY

echo
echo "== PyTorch on the same models"
"${PYTHON:-python3}" - "$root" "$backend" "$quick" <<'PY'
import sys, time
root, backend, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
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
    sys.exit(0)
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
device = torch.device(backend)
big = backend == "cuda"

def gpt():
    size = dict(build.GPT2_SMALL)
    model = build.gpt2_small(size).to(device)
    b, s = (8, 1024) if big else (1, 64)
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
        for _ in range(3):
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

variants = [("eager", False, False)] + ([] if quick else [("ckpt+autocast", True, True)])
print(f"figures measured by PyTorch {torch.__version__} on {backend} in this run"
      + ("" if big else " (no CUDA: step times only)"))
print(f"{'model':20} {'variant':14} {'max_alloc MiB':>13} {'max_reserved MiB':>16} {'step ms':>8}")
for make in (gpt, resnet):
    for vname, ckpt, amp in variants:
        name, shape, alloc, reserved, ms = measure(make, ckpt, amp)
        label = f"{name} {shape}"
        if alloc is None:
            print(f"{label:20} {vname:14} failed: {ms}")
        else:
            print(f"{label:20} {vname:14} {alloc:>13.1f} {reserved:>16.1f} {ms:>8.2f}")
PY

elapsed=$(($(date +%s) - start))
echo
echo "gpu-check.sh: finished in ${elapsed} s; reports and logs in $out"
((failures == 0))
