"""`gmopt-run --cuda-graph` against the same run uncaptured.

Per model and pipeline, the checked backend runs the small batch twice for
STEPS steps without updates (--optimizer=none, so every step computes from
the same parameters): once as usual, once with --cuda-graph (step 1 warms
up, step 2 is captured and launched, step 3 replays the graph). Both dump
the last step's gradients (`--dump-gradients`), which must agree within the
pipeline's tolerance: a replay that baked in the captured step's random
numbers, read a stale address or skipped a node shows here. The row also
keeps both runs' median step times.

On the CPU backend (the plumbing check) a CUDA graph cannot be made: the
--cuda-graph run must be refused with REFUSAL, and that refusal is the
row's pass.
"""
from typing import Dict, List, Optional

from gpucheck.gmopt import Row

# Warm-up, capture, replay.
STEPS = 3
# What gmopt-run says when --cuda-graph is asked of another backend.
REFUSAL = "--cuda-graph needs the CUDA backend"


def refused(log_text: str) -> bool:
    """True when a --cuda-graph run's log holds gmopt-run's refusal."""
    return any(REFUSAL in line and "error" in line for line in log_text.splitlines())


def step_ms(report: Optional[dict]) -> Optional[float]:
    """The median step time of a gmopt-run JSON report (None without one)."""
    if not report:
        return None
    return (report.get("optimized") or {}).get("step_ms")


def comparison_json(agreement: dict, off_report: Optional[dict], on_report: Optional[dict]) -> dict:
    """A graph row's report: the gradient agreement (gradients.DumpAgreement's
    JSON, the captured run against the uncaptured one) and both step times."""
    return dict(agreement, off_step_ms=step_ms(off_report), on_step_ms=step_ms(on_report))


def refusal_json(message: str) -> dict:
    """A graph row's report on a backend that refuses --cuda-graph."""
    return {"refused": message, "ok": True}


def graph_table(rows: List[Row], backend: str, rtols: Dict[str, float], failures) -> List[str]:
    """One line per graph row: the gradients of the replayed step against the
    uncaptured run's, and both step times; a disagreement or a failed run is
    added to `failures`."""
    lines = [f"--cuda-graph against the same run uncaptured ({STEPS} steps without updates, "
             "the last step's gradients)",
             f"{'model':18} {'run':14} {'off ms':>8} {'graph ms':>8} {'grad diff':>10}  verdict"]

    def ms(x):
        return "-" if x is None else f"{x:.2f}"

    for row in (r for r in rows if r.kind == "graph"):
        if row.status != "ok":
            lines.append(f"{row.label:18} {row.pipeline:14} {'-':>8} {'-':>8} {'-':>10}  "
                         f"{row.status.upper()}: {row.reason}")
            continue
        data = row.data
        if "refused" in data:
            lines.append(f"{row.label:18} {row.pipeline:14} {'-':>8} {'-':>8} {'-':>10}  "
                         f"refused on {backend}, as it must be")
            continue
        rtol = rtols[row.pipeline]
        diff = data.get("max_rel_diff")
        diff_text = "-" if diff is None else f"{diff:.1e}"
        if data.get("ok") and diff is not None and diff <= rtol:
            verdict = "ok"
        else:
            verdict = f"GRADIENTS beyond {rtol:g}"
            failures.add(f"{row.label} {row.pipeline}: --cuda-graph gradients differ from the "
                         f"uncaptured run's by {diff_text} (tolerance {rtol:g})")
        lines.append(f"{row.label:18} {row.pipeline:14} {ms(data.get('off_step_ms')):>8} "
                     f"{ms(data.get('on_step_ms')):>8} {diff_text:>10}  {verdict}")
    return lines
