"""Running gmopt-run within the budget, and the rows that record each run.

A row's kind: `run` (a measured run), `with-baseline` (a measured run that
also ran the baseline) or `grad` (the gradient check against the CPU). Its
status: `ok`; `error` (gmopt-run wrote its report, then exited with an
error: a device-memory disagreement or a numerical failure); `failed`;
`timeout`; or `left-out` (the budget had no time to start it)."""
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class RunOutcome:
    """How one command ended: `status` (an exit status, "timeout" or
    "left-out"), the time limit it had, and its log."""

    status: object
    limit: Optional[int]
    log: str


def run_logged(command: List[str], log: str, limit: Optional[int], env=None) -> RunOutcome:
    """Runs `command` with its output in `log`, cut after `limit` seconds;
    a `limit` of None (no time left) runs nothing: left-out."""
    if limit is None:
        with open(log, "w") as f:
            f.write("left out: the time budget ran out\n")
        return RunOutcome("left-out", None, log)
    with open(log, "w") as f:
        try:
            process = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, timeout=limit, env=env)
        except subprocess.TimeoutExpired:
            return RunOutcome("timeout", limit, log)
        except OSError as e:
            f.write(f"cannot run {command[0]}: {e}\n")
            return RunOutcome(127, limit, log)
    return RunOutcome(process.returncode, limit, log)


def status_word(outcome: RunOutcome, report: Optional[str]) -> str:
    """The row status of `outcome`, whose JSON report (if any) is `report`."""
    if outcome.status in ("timeout", "left-out"):
        return outcome.status
    if outcome.status == 0:
        return "ok"
    return "error" if report and os.path.isfile(report) else "failed"


def why(status: str, log: str, limit: Optional[int] = None) -> str:
    """Why a run did not give a report: the op without a CUDA kernel first,
    else the first line that says error, else the log's last line."""
    if status == "left-out":
        return "left out: the time budget ran out"
    if status == "timeout":
        return f"timed out after {limit if limit is not None else '?'} s"
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    ops = sorted(set(re.findall(r"no CUDA kernel for '([^']+)'", text)))
    if ops:
        return "no CUDA kernel for " + ", ".join(ops)
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    return (text.strip().splitlines() or ["no output"])[-1][:200]


@dataclass
class Row:
    """One gmopt run (or gradient check) of a model with a pipeline; `data`
    is its JSON report once read (a grad row: the comparison)."""

    kind: str
    label: str
    pipeline: str
    status: str
    report: str
    log: str
    limit: Optional[int] = None
    reason: str = ""
    data: dict = field(default_factory=dict)

    def tsv(self) -> str:
        """The row's line of rows.tsv."""
        return "\t".join([self.kind, self.label, self.pipeline, self.status,
                          self.report or "-", self.log]) + "\n"
