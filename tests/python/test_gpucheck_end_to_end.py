"""scripts/gpu-check.sh end to end on this machine: --backend cpu --quick
(the plumbing check) with the built gmopt-run ($GMOPT_TOOLS_DIR, default
build/tools) on testdata/cnn, the bench models absent. Without a GPU the
"device" runs are CPU runs; the gradient check compares two CPU dumps."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.environ.get("GMOPT_TOOLS_DIR", os.path.join(ROOT, "build", "tools"))


def gpu_check(tmp_path, *args, env=None, quick=True):
    for folder in ("models", "tests"):
        (tmp_path / folder).mkdir(exist_ok=True)
    environment = dict(os.environ, GPU_CHECK_PYTHON=sys.executable, PYTHON=sys.executable)
    environment.pop("GPU_CHECK_INJECT_GRAD_MISMATCH", None)
    environment.update(env or {})
    command = ["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), "--backend", "cpu",
               "--models", str(tmp_path / "models"), "--tests", str(tmp_path / "tests"),
               "--tools", TOOLS, "--out", str(tmp_path / "out"), "--budget", "240"] + (["--quick"] if quick else []) + list(args)
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)


def torch_importable():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


@pytest.fixture(scope="module", autouse=True)
def built_tools():
    assert os.access(os.path.join(TOOLS, "gmopt-run"), os.X_OK), \
        f"no gmopt-run in {TOOLS}: build it (gmopt-run target) or set GMOPT_TOOLS_DIR"


def test_cpu_plumbing_run_passes(tmp_path):
    result = gpu_check(tmp_path, "--skip-missing-models")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "gpt2_small: missing" in out and "skipped (--skip-missing-models)" in out
    assert "no CUDA unit tests in" in out
    steps = out[out.index("step times and gradients"):]
    row = next(line for line in steps.splitlines() if line.startswith("cnn b8             default"))
    assert row.endswith("  ok"), row
    if not torch_importable():
        assert "PyTorch: skipped: torch not installed" in out
    assert "gpu-check.sh: passed in" in out
    with open(tmp_path / "out" / "summary.txt") as f:
        assert "gpu-check.sh: passed in" in f.read()
    with open(tmp_path / "out" / "testdata_cnn_default_gradients.json") as f:
        comparison = json.load(f)
    assert comparison["ok"] and comparison["tensors"] and comparison["max_rel_diff"] <= 1e-3
    with open(tmp_path / "out" / "rows.tsv") as f:
        kinds = [line.split("\t")[0] for line in f]
    assert kinds == ["with-baseline", "grad", "graph"]
    # --cuda-graph is refused on the CPU, and that refusal is the row's pass.
    graphs = out[out.index("--cuda-graph against the same run uncaptured"):]
    row = next(line for line in graphs.splitlines() if line.startswith("cnn b8             default"))
    assert row.endswith("refused on cpu, as it must be"), row


def test_injected_gradient_mismatch_and_missing_models_fail(tmp_path):
    # Every pipeline (no --quick): default, recompute, recompute + bf16 amp.
    result = gpu_check(tmp_path, env={"GPU_CHECK_INJECT_GRAD_MISMATCH": "1"}, quick=False)
    assert result.returncode == 1, result.stdout + result.stderr
    with open(tmp_path / "out" / "failures.txt") as f:
        failures = f.read().splitlines()
    assert any(line.startswith("model gpt2_small: missing") for line in failures)
    assert any(line.startswith("model resnet50: missing") for line in failures)
    for pipeline in ("default", "recompute", "recompute+amp"):
        assert any(line.startswith(f"cnn b8 {pipeline}: gradients on cpu differ from the CPU's by")
                   for line in failures), failures
    assert "gpu-check.sh: FAILED (5 problems)" in result.stdout


def test_no_gmopt_run_is_an_error(tmp_path):
    result = gpu_check(tmp_path, "--tools", str(tmp_path))
    assert result.returncode == 1
    assert "gpu-check.sh: error: no gmopt-run in" in result.stderr


def test_usage_error_exits_2(tmp_path):
    result = gpu_check(tmp_path, "--budget", "soon")
    assert result.returncode == 2
    assert "gpu-check.sh: error: argument --budget" in result.stderr
