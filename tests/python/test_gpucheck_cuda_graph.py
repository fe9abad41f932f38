"""gpucheck.cuda_graph: the --cuda-graph rows' refusal test, report and table."""
import json

from gpucheck import cuda_graph, report
from gpucheck.gmopt import Row

RTOLS = {"default": 1e-3, "recompute+amp": 1e-1}


def graph_row(tmp_path, pipeline, status, data=None, reason=""):
    path = str(tmp_path / f"{pipeline}.json")
    if data is not None:
        with open(path, "w") as f:
            json.dump(data, f)
    log = str(tmp_path / f"{pipeline}.log")
    with open(log, "w") as f:
        f.write("gmopt-run: error: something\n")
    return Row("graph", "cnn b8", pipeline, status, path, log, 60, reason)


def agreement(max_rel, ok):
    return {"rtol": 1e-3, "ok": ok, "max_rel_diff": max_rel, "loss_rel_diff": 0.0,
            "missing": [], "extra": [],
            "tensors": [{"name": "w", "max_rel_diff": max_rel, "ok": ok, "problem": ""}]}


def settled(rows):
    failures = report.Failures()
    report.settle_rows(rows, False, failures)
    return failures


def test_refusal_is_recognised_only_as_an_error_line():
    line = ("gmopt-run: error: model.gm: --cuda-graph needs the CUDA backend; this run uses "
            "the cpu backend")
    assert cuda_graph.refused("gmopt-run: training ...\n" + line + "\n")
    assert not cuda_graph.refused("gmopt-run: error: --dump-gradients writes the gradients of "
                                  "one step; this run has 3 steps (use --steps 1)\n")
    # The option's help text names the backend too, but is no refusal.
    assert not cuda_graph.refused("  --cuda-graph needs the CUDA backend (see --help)\n")


def test_comparison_keeps_both_step_times():
    data = cuda_graph.comparison_json(agreement(1e-6, True), {"optimized": {"step_ms": 5.0}},
                                      {"optimized": {"step_ms": 3.5}})
    assert data["off_step_ms"] == 5.0 and data["on_step_ms"] == 3.5 and data["ok"]
    assert cuda_graph.comparison_json(agreement(0.0, True), None, {})["on_step_ms"] is None


def test_table_passes_agreeing_and_refused_rows(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rows = [graph_row(tmp_path / "a", "default", "ok",
                      cuda_graph.comparison_json(agreement(2e-7, True),
                                                 {"optimized": {"step_ms": 5.0}},
                                                 {"optimized": {"step_ms": 3.5}})),
            graph_row(tmp_path / "b", "recompute+amp", "ok",
                      cuda_graph.refusal_json(cuda_graph.REFUSAL))]
    failures = settled(rows)
    lines = cuda_graph.graph_table(rows, "cuda", RTOLS, failures)
    assert not failures, failures.items
    assert lines[2].startswith("cnn b8             default")
    assert "5.00" in lines[2] and "3.50" in lines[2] and lines[2].endswith("  ok")
    assert lines[3].endswith("refused on cuda, as it must be")


def test_table_fails_a_disagreement_and_a_failed_run(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rows = [graph_row(tmp_path / "a", "default", "ok",
                      cuda_graph.comparison_json(agreement(0.5, False), None, None)),
            graph_row(tmp_path / "b", "recompute+amp", "failed", None,
                      "--cuda-graph: capturing the step failed")]
    failures = settled(rows)
    lines = cuda_graph.graph_table(rows, "cuda", RTOLS, failures)
    assert "GRADIENTS beyond 0.001" in lines[2]
    assert "FAILED: --cuda-graph: capturing the step failed" in lines[3]
    assert failures.items == [
        "cnn b8 recompute+amp --cuda-graph check: --cuda-graph: capturing the step failed",
        "cnn b8 default: --cuda-graph gradients differ from the uncaptured run's by 5.0e-01 "
        "(tolerance 0.001)"]


def test_graph_rows_stay_out_of_the_memory_and_step_tables(tmp_path):
    rows = [graph_row(tmp_path, "default", "ok", cuda_graph.refusal_json(cuda_graph.REFUSAL))]
    failures = settled(rows)
    memory = report.memory_table(rows, "cpu", failures)
    steps = report.steps_table(rows, "cpu", {"default": 1e-3}, failures)
    assert not any(line.startswith("cnn b8") for line in memory + steps)
    assert not failures
