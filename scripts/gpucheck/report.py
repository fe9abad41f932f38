"""The check's tables, its failure list and its summary, from the rows.

Every function here is pure: rows (gpucheck.gmopt.Row, their JSON already
read) in, lines and failures out."""
import json
import math
from typing import Dict, List, Optional, Tuple

from gpucheck.gmopt import Row, why


class Failures:
    """The failure list, in the order found (one line each, the summary's
    list; also written to failures.txt as they come when given a path)."""

    def __init__(self, path: Optional[str] = None):
        self.items: List[str] = []
        self.path = path

    def add(self, message: str) -> None:
        self.items.append(message)
        if self.path:
            with open(self.path, "a") as f:
                f.write(message + "\n")

    def __bool__(self):
        return bool(self.items)

    def __len__(self):
        return len(self.items)


def mib(b) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def sci(x) -> str:
    return "-" if x is None else f"{x:.1e}"


def yes_no(agrees) -> str:
    return "-" if agrees is None else "yes" if agrees else "NO"


def what(row: Row) -> str:
    return {"grad": "gradient check", "graph": "--cuda-graph check"}.get(row.kind, "run")


def settle_rows(rows: List[Row], partial_ok: bool, failures: Failures) -> None:
    """Reads each finished row's JSON report (a measured run's gmopt-run
    report; a grad row's comparison) into row.data and records the
    failures: a run that failed, timed out or (unless `partial_ok`) was left
    out; a run that reported and then exited with an error (its figures are
    still shown)."""
    for row in rows:
        if row.status in ("ok", "error"):
            try:
                with open(row.report) as f:
                    row.data = json.load(f)
            except (OSError, ValueError, TypeError) as e:
                row.status, row.reason = "failed", f"no readable report ({e})"
        if row.status != "ok" and not row.reason:
            row.reason = why(row.status, row.log, row.limit)
        if row.status == "error":
            failures.add(f"{row.label} {row.pipeline} {what(row)}: {row.reason}")
            row.status = "ok"
        elif row.status == "left-out":
            if not partial_ok:
                failures.add(f"{row.label} {row.pipeline} {what(row)}: {row.reason}")
        elif row.status != "ok":
            failures.add(f"{row.label} {row.pipeline} {what(row)}: {row.reason}")


def labels_in_order(rows: List[Row]) -> List[str]:
    labels = []
    for row in rows:
        if row.label not in labels:
            labels.append(row.label)
    return labels


def disagreement(label: str, dm: dict) -> str:
    return (f"{label}: device memory disagrees with the accounting (cudaMemGetInfo fall "
            f"{dm.get('device_delta_bytes')} B, accounted {dm.get('accounted_bytes')} B, "
            f"tolerance {dm.get('tolerance_bytes')} B)")


def memory_table(rows: List[Row], backend: str, failures: Failures) -> List[str]:
    """The planned, counted and device peaks of every measured run, with the
    reductions against the model's baseline."""
    device = backend == "cuda"
    lines = [
        f"memory, measured by gmopt on the {backend} backend in this run (MiB)",
        "  planned: the plan's bytes (arena + persistent + workspace); counted: the interpreter's",
        "  peak; device: the baseline's pool used high-water mark (cudaMemPoolAttrUsedMemHigh),",
        "  the optimized run's arena + persistent + workspace; reserved: the baseline pool's",
        "  reserved high-water mark; memGetInfo: the fall in cudaMemGetInfo's free bytes,",
        "  which must agree with the run's accounting (reserved, or arena + persistent +",
        "  workspace) within the stated tolerance; reductions against the baseline"
        + ("" if device else "; the CPU backend has no device figures"),
        f"{'model':18} {'run':14} {'planned':>8} {'counted':>8} {'device':>8} {'reserved':>8} "
        f"{'memGetInfo':>10} {'agrees':>6} {'red.count':>9} {'red.device':>10}",
    ]
    runs = [row for row in rows if row.kind in ("run", "with-baseline")]
    for label in labels_in_order(runs):
        mine = [row for row in runs if row.label == label]
        baseline = None
        for row in mine:
            if row.kind == "with-baseline" and row.status == "ok":
                baseline = row.data.get("baseline")
        if baseline:
            dm = baseline.get("device_memory") or {}
            lines.append(f"{label:18} {'baseline':14} {'-':>8} {mib(baseline.get('peak_bytes')):>8} "
                         f"{mib(dm.get('pool_used_high_bytes')):>8} "
                         f"{mib(dm.get('pool_reserved_high_bytes')):>8} "
                         f"{mib(dm.get('device_delta_bytes')):>10} {yes_no(dm.get('agrees')):>6}")
            if dm.get("agrees") is False:
                failures.add(disagreement(f"{label} baseline", dm))
        for row in mine:
            if row.status != "ok":
                lines.append(f"{label:18} {row.pipeline:14} {row.status.upper()}: {row.reason}")
                continue
            opt = row.data.get("optimized") or {}
            dm = opt.get("device_memory") or {}
            base_dm = (baseline or {}).get("device_memory") or {}
            red_count = red_device = None
            if baseline and baseline.get("peak_bytes") and opt.get("peak_bytes") is not None:
                red_count = 1 - opt["peak_bytes"] / baseline["peak_bytes"]
            if dm.get("accounted_bytes") and base_dm.get("accounted_bytes"):
                red_device = 1 - dm["accounted_bytes"] / base_dm["accounted_bytes"]
            planned = (row.data.get("plan") or {}).get("planned_bytes")
            lines.append(f"{label:18} {row.pipeline:14} {mib(planned):>8} {mib(opt.get('peak_bytes')):>8} "
                         f"{mib(dm.get('accounted_bytes')):>8} {'':>8} "
                         f"{mib(dm.get('device_delta_bytes')):>10} {yes_no(dm.get('agrees')):>6} "
                         f"{pct(red_count):>9} {pct(red_device):>10}")
            if dm.get("agrees") is False:
                failures.add(disagreement(f"{label} {row.pipeline}", dm))
    return lines


def gradient_verdict(grad: Optional[Row], backend: str, rtol: float,
                     failures: Failures) -> Tuple[Optional[float], Optional[float], str]:
    """(max relative gradient difference, loss difference, verdict) of a
    model and pipeline's gradient check against the CPU."""
    if grad is None:
        return None, None, "no gradient check"
    if grad.status != "ok":
        return None, None, f"gradient check: {grad.reason}"
    comparison = grad.data
    vs_cpu, loss_cpu = comparison.get("max_rel_diff"), comparison.get("loss_rel_diff")
    tensors = comparison.get("tensors") or []
    if comparison.get("ok") and vs_cpu is not None and vs_cpu <= rtol:
        return vs_cpu, loss_cpu, "ok"
    bad = [t for t in tensors if not t.get("ok")]
    worst = max(bad or tensors, key=lambda t: math.inf if t.get("max_rel_diff") is None
                else t["max_rel_diff"], default=None)
    worst_name = worst["name"] if worst else "-"
    problem = f", {worst['problem']}" if worst and worst.get("problem") else ""
    missing = comparison.get("missing") or []
    extra = comparison.get("extra") or []
    listed = ""
    if missing:
        listed += f"; missing on {backend}: {', '.join(missing[:3])}"
    if extra:
        listed += f"; not in the CPU's: {', '.join(extra[:3])}"
    failures.add(f"{grad.label} {grad.pipeline}: gradients on {backend} differ from the CPU's by "
                 f"{sci(vs_cpu)} > {rtol:g} ({len(bad)} of {len(tensors)} tensors, worst "
                 f"{worst_name}{problem}; loss {sci(loss_cpu)}{listed})")
    return vs_cpu, loss_cpu, (f"GRADIENTS beyond {rtol:g}: {len(bad)} of {len(tensors)} tensors "
                              f"(worst {worst_name}){listed}")


def steps_table(rows: List[Row], backend: str, rtols: Dict[str, float],
                failures: Failures) -> List[str]:
    """Step times, the default pipeline's gradients against the baseline,
    and every pipeline's gradients against the CPU. `rtols` maps a pipeline
    name to its gradient tolerance."""
    fp32, amp = rtols.get("default"), rtols.get("recompute+amp")
    lines = [
        f"step times and gradients (fp32 tolerance {fp32:g}"
        + (f", bf16 amp {amp:g}" if amp is not None else "")
        + "; gradient differences: max over tensors of max|d| / max|reference|)",
        f"{'model':18} {'run':14} {'base ms':>8} {'opt ms':>8} {'grad vs base':>12} "
        f"{'grad vs CPU':>11} {'loss vs CPU':>11}  verdict",
    ]
    grads = {(row.label, row.pipeline): row for row in rows if row.kind == "grad"}
    runs = [row for row in rows if row.kind in ("run", "with-baseline")]
    for label in labels_in_order(runs):
        for row in (r for r in runs if r.label == label):
            rtol = rtols[row.pipeline]
            base_ms = opt_ms = vs_base = None
            if row.status == "ok":
                opt_ms = (row.data.get("optimized") or {}).get("step_ms")
                if row.data.get("baseline"):
                    base_ms = row.data["baseline"].get("step_ms")
                    vs_base = row.data.get("max_grad_rel_diff")
                    if vs_base is None or vs_base > rtol:
                        failures.add(f"{label} {row.pipeline}: gradients differ from the baseline's "
                                     f"by {sci(vs_base)} (tolerance {rtol:g})")
            vs_cpu, loss_cpu, verdict = gradient_verdict(grads.get((label, row.pipeline)), backend,
                                                         rtol, failures)
            if row.status != "ok":
                verdict = f"run: {row.reason}" + ("" if verdict == "ok" else f"; {verdict}")

            def ms(x):
                return "-" if x is None else f"{x:.2f}"
            lines.append(f"{label:18} {row.pipeline:14} {ms(base_ms):>8} {ms(opt_ms):>8} "
                         f"{sci(vs_base):>12} {sci(vs_cpu):>11} {sci(loss_cpu):>11}  {verdict}")
    return lines


def summary_lines(failures: Failures, elapsed: float, budget: int, out: str) -> List[str]:
    """The summary: passed, or the list of what failed."""
    lines = [""]
    if failures:
        lines.append(f"gpu-check.sh: FAILED ({len(failures)} problems), {elapsed:.0f} s of a "
                     f"{budget} s budget:")
        lines += [f"  - {item}" for item in failures.items]
    else:
        lines.append(f"gpu-check.sh: passed in {elapsed:.0f} s (budget {budget} s)")
    lines.append(f"reports and logs in {out}")
    return lines
