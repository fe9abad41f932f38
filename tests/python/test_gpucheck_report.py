"""gpucheck.report: rows in, tables, failures and summary out."""
import json
import os

from gpucheck import report
from gpucheck.gmopt import Row

RTOLS = {"default": 1e-3, "recompute": 1e-3, "recompute+amp": 1e-1}


def row(tmp_path, kind, label, pipeline, status, data=None, log_text=""):
    name = f"{label}_{pipeline}_{kind}".replace(" ", "_")
    report_path = str(tmp_path / f"{name}.json")
    if data is not None:
        with open(report_path, "w") as f:
            json.dump(data, f)
    log = str(tmp_path / f"{name}.log")
    with open(log, "w") as f:
        f.write(log_text)
    return Row(kind, label, pipeline, status, report_path, log, 60)


def measured(peak, baseline_peak=None, grad_diff=None, agrees=None):
    data = {"plan": {"planned_bytes": peak}, "optimized": {"peak_bytes": peak, "step_ms": 2.0}}
    if agrees is not None:
        data["optimized"]["device_memory"] = {"accounted_bytes": peak, "device_delta_bytes": peak,
                                              "agrees": agrees, "tolerance_bytes": 1}
    if baseline_peak is not None:
        data["baseline"] = {"peak_bytes": baseline_peak, "step_ms": 3.0}
        data["max_grad_rel_diff"] = grad_diff
    return data


def comparison(max_rel, ok, tensors=None, missing=()):
    return {"rtol": 1e-3, "ok": ok, "max_rel_diff": max_rel, "loss_rel_diff": 1e-7,
            "missing": list(missing), "extra": [],
            "tensors": tensors or [{"name": "w", "max_rel_diff": max_rel, "ok": ok, "problem": ""}]}


def settle(rows, partial_ok=False):
    failures = report.Failures()
    report.settle_rows(rows, partial_ok, failures)
    return failures


def test_a_clean_run_has_no_failures(tmp_path):
    rows = [row(tmp_path, "with-baseline", "cnn b8", "default", "ok", measured(100, 400, 1e-6)),
            row(tmp_path, "grad", "cnn b8", "default", "ok", comparison(2e-6, True))]
    failures = settle(rows)
    memory = report.memory_table(rows, "cpu", failures)
    steps = report.steps_table(rows, "cpu", RTOLS, failures)
    assert not failures
    assert any("cnn b8" in line and "75.0%" in line for line in memory)
    assert "the CPU backend has no device figures" in "\n".join(memory)
    line = next(line for line in steps if line.startswith("cnn b8"))
    assert line.endswith("ok") and "2.0e-06" in line


def test_gradients_beyond_tolerance_fail_naming_the_worst_tensor(tmp_path):
    tensors = [{"name": "fc.weight", "max_rel_diff": 0.5, "ok": False, "problem": ""},
               {"name": "fc.bias", "max_rel_diff": 1e-6, "ok": True, "problem": ""}]
    rows = [row(tmp_path, "run", "m", "recompute", "ok", measured(100)),
            row(tmp_path, "grad", "m", "recompute", "ok", comparison(0.5, False, tensors))]
    failures = settle(rows)
    steps = report.steps_table(rows, "cuda", RTOLS, failures)
    assert "GRADIENTS beyond 0.001: 1 of 2 tensors (worst fc.weight)" in "\n".join(steps)
    assert failures.items == ["m recompute: gradients on cuda differ from the CPU's by 5.0e-01 > "
                              "0.001 (1 of 2 tensors, worst fc.weight; loss 1.0e-07)"]


def test_amp_uses_its_own_tolerance(tmp_path):
    rows = [row(tmp_path, "run", "m", "recompute+amp", "ok", measured(100)),
            row(tmp_path, "grad", "m", "recompute+amp", "ok", comparison(0.05, True))]
    failures = settle(rows)
    report.steps_table(rows, "cuda", RTOLS, failures)
    assert not failures


def test_missing_tensors_fail_even_within_tolerance(tmp_path):
    rows = [row(tmp_path, "run", "m", "default", "ok", measured(100)),
            row(tmp_path, "grad", "m", "default", "ok", comparison(0.0, False, missing=["w2"]))]
    failures = settle(rows)
    report.steps_table(rows, "cuda", RTOLS, failures)
    assert len(failures) == 1 and "missing on cuda: w2" in failures.items[0]


def test_baseline_disagreement_and_device_memory_fail(tmp_path):
    rows = [row(tmp_path, "with-baseline", "m", "default", "ok", measured(100, 200, 0.1, agrees=False))]
    failures = settle(rows)
    memory = report.memory_table(rows, "cuda", failures)
    report.steps_table(rows, "cuda", RTOLS, failures)
    assert any(" NO " in line for line in memory)
    assert failures.items[0].startswith("m default: device memory disagrees with the accounting")
    assert failures.items[1] == "m default: gradients differ from the baseline's by 1.0e-01 (tolerance 0.001)"


def test_failed_runs_say_why_op_without_kernel_first(tmp_path):
    log = "gmopt-run: error: m.onnx: x\nno CUDA kernel for 'Einsum' (node n)\n"
    rows = [row(tmp_path, "run", "m", "default", "failed", log_text=log)]
    failures = settle(rows)
    assert failures.items == ["m default run: no CUDA kernel for Einsum"]
    memory = report.memory_table(rows, "cuda", failures)
    assert "m                  default        FAILED: no CUDA kernel for Einsum" in memory


def test_left_out_rows_fail_unless_partial_is_allowed(tmp_path):
    rows = [row(tmp_path, "run", "m", "default", "left-out")]
    assert settle(rows).items == ["m default run: left out: the time budget ran out"]
    rows = [row(tmp_path, "run", "m", "default", "left-out")]
    assert not settle(rows, partial_ok=True)


def test_a_run_that_reported_then_failed_shows_its_figures_and_fails(tmp_path):
    rows = [row(tmp_path, "run", "m", "default", "error", measured(100),
                log_text="gmopt-run: error: the run's device memory disagrees\n")]
    failures = settle(rows)
    assert rows[0].status == "ok"
    assert failures.items == ["m default run: gmopt-run: error: the run's device memory disagrees"]


def test_an_unreadable_report_fails(tmp_path):
    broken = row(tmp_path, "run", "m", "default", "ok")
    with open(broken.report, "w") as f:
        f.write("{")
    failures = settle([broken])
    assert broken.status == "failed" and "no readable report" in failures.items[0]


def test_summary_lists_failures_or_says_passed(tmp_path):
    failures = report.Failures(str(tmp_path / "failures.txt"))
    assert report.summary_lines(failures, 12.3, 450, "/o")[1] == "gpu-check.sh: passed in 12 s (budget 450 s)"
    failures.add("one")
    failures.add("two")
    lines = report.summary_lines(failures, 99, 450, "/o")
    assert lines[1:] == ["gpu-check.sh: FAILED (2 problems), 99 s of a 450 s budget:",
                         "  - one", "  - two", "reports and logs in /o"]
    with open(tmp_path / "failures.txt") as f:
        assert f.read() == "one\ntwo\n"
    assert os.path.exists(tmp_path / "failures.txt")
