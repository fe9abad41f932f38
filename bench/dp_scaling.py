#!/usr/bin/env python3
"""Data-parallel CPU scaling: samples/s of one rank against two at the same global batch.

Compiles one testdata training graph twice - at the global batch for one process, and at half
of it with `--ranks 2` - and trains each with gmopt-run on one thread per rank (`--threads 1`),
interleaved round after round so machine noise falls on both alike. Two ranks run under
`mpirun -np 2` (`--launcher mpi`, the default) or torchrun-style over gmopt's TCP world
(`--launcher tcp`: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A run's figure is the global
batch over the median wall time of rank 0's steps after the first (a data-parallel step includes
its gradient all-reduce; rank 0's step waits for the slower rank). Beside each run: the machine's
1-minute load average before it and how busy all of its cores were during it (from /proc/stat),
since on a shared machine other work takes cores too - and each rank's processor time per step
(the report's micro_step_cpu_ms, median after the first), which waiting for a core does not
inflate: on an idle machine with a core per rank the two-rank step would take about the larger
rank's processor time plus the all-reduce. Every run's planned bytes must equal its measured
peak on every rank (the report's plan.planned_bytes and optimized.peak_bytes), or the script fails.

    python3 bench/dp_scaling.py --build build --model gpt_tiny --global-batch 16 --steps 8 --rounds 3

`--overlap on|both` compiles the two-rank model with `gmopt-compile --overlap` (each bucket's
all-reduce split into a start and a wait that let it run during the rest of the backward pass);
`both` measures the blocking and the overlapped model in the same rounds. Overlap needs several
buckets (`--bucket-bytes`, e.g. 1MiB for gpt_tiny) to have anything to overlap.
"""

import argparse
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step (\d+): loss \S+ \(([0-9.]+) ms", re.M)


def run(cmd, env=None):
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + result.stdout[-2000:] + result.stderr[-2000:])
    return result


def cpu_times():
    """(busy, total) jiffies over all cores."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measured(launch, reports):
    """Runs `launch()` (returns rank 0's log; each rank writes its JSON report to reports[rank])
    and returns (median step ms, load, busy %, max over ranks of the median processor ms)."""
    load = os.getloadavg()[0]
    busy0, total0 = cpu_times()
    log = launch()
    busy1, total1 = cpu_times()
    steps = [float(ms) for step, ms in STEP.findall(log) if int(step) > 1]
    if not steps:
        sys.exit("no step lines in:\n" + log)
    busy = 100.0 * (busy1 - busy0) / max(1, total1 - total0)
    cpu = []
    for rank, path in enumerate(reports):
        with open(path) as f:
            report = json.load(f)
        planned, peak = report["plan"]["planned_bytes"], report["optimized"]["peak_bytes"]
        if planned != peak:
            sys.exit("rank %d: planned %d bytes but measured %d" % (rank, planned, peak))
        cpu.append(statistics.median(report["optimized"]["micro_step_cpu_ms"][1:]))
    return statistics.median(steps), load, busy, max(cpu), planned


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--model", default="gpt_tiny")
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--launcher", choices=["mpi", "tcp"], default="mpi")
    parser.add_argument("--overlap", choices=["off", "on", "both"], default="off",
                        help="two ranks with blocking all-reduces (off), split ones overlapping the "
                             "backward pass (on: gmopt-compile --overlap), or a row of each (both)")
    parser.add_argument("--bucket-bytes", default=None,
                        help="gmopt-compile --bucket-bytes for the two-rank model (default 25MiB)")
    parser.add_argument("--per-sample-dim", action="append", default=None, metavar="NAME=K",
                        help="a symbolic dimension bound to K times the batch (default for the "
                             "gpt models: batch_x_seq=64)")
    args = parser.parse_args()
    if args.per_sample_dim is None:
        args.per_sample_dim = ["batch_x_seq=64"] if args.model.startswith("gpt") else []

    def dims(batch):
        bound = ["--dim", "batch=%d" % batch]
        for spec in args.per_sample_dim:
            name, k = spec.split("=")
            bound += ["--dim", "%s=%d" % (name, batch * int(k))]
        return bound

    if args.global_batch % 2:
        sys.exit("--global-batch must be even")
    tools = os.path.join(args.build, "tools")
    compile_tool, run_tool = os.path.join(tools, "gmopt-compile"), os.path.join(tools, "gmopt-run")
    model = os.path.join(ROOT, "testdata", args.model, "training_model.onnx")
    common = ["--backend=cpu", "--threads", "1", "--steps", str(args.steps), "--optimizer=sgd",
              "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        single = os.path.join(tmp, "single.gm")
        run([compile_tool, model] + dims(args.global_batch) + ["-o", single])
        buckets = ["--bucket-bytes", args.bucket_bytes] if args.bucket_bytes else []
        variants = {"off": [("2 ranks", [])], "on": [("2 ranks, overlap", ["--overlap"])],
                    "both": [("2 ranks", []), ("2 ranks, overlap", ["--overlap"])]}[args.overlap]
        compiled = {}
        for index, (name, flags) in enumerate(variants):
            compiled[name] = os.path.join(tmp, "dp%d.gm" % index)
            run([compile_tool, model] + dims(args.global_batch // 2) + ["--ranks", "2"] +
                buckets + flags + ["-o", compiled[name]])

        report = os.path.join(tmp, "report.%d.json")

        def one_rank():
            return run([run_tool, single] + common + ["--report-json", report % 0]).stdout

        def two_ranks(dp):
            if args.launcher == "mpi":
                mpirun = ["mpirun", "--oversubscribe", "-np", "2"]
                if os.geteuid() == 0:
                    mpirun.insert(1, "--allow-run-as-root")
                line = " ".join([run_tool, dp] + common +
                                ["--report-json", report.replace("%d", "$OMPI_COMM_WORLD_RANK")])
                return run(mpirun + ["sh", "-c", line]).stdout
            port = str(free_port())
            procs = []
            secret = secrets.token_hex(32)  # the TCP world admits only ranks that hold it
            for rank in (0, 1):
                env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GMOPT_WORLD_SECRET=secret)
                procs.append(subprocess.Popen([run_tool, dp] + common +
                                              ["--report-json", report % rank], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            outputs = [p.communicate() for p in procs]
            for p, (out, err) in zip(procs, outputs):
                if p.returncode != 0:
                    sys.exit("a rank failed:\n" + out[-2000:] + err[-2000:])
            return outputs[0][0]

        rows = {"1 rank": []}
        rows.update((name, []) for name, _ in variants)
        for _ in range(args.rounds):
            rows["1 rank"].append(measured(one_rank, [report % 0]))
            for name, _ in variants:
                rows[name].append(measured(lambda: two_ranks(compiled[name]),
                                           [report % 0, report % 1]))

    print("%s, global batch %d, %d steps (median of steps 2..%d), --threads 1 per rank, "
          "%d rounds, 2 ranks via %s, buckets %s, %d cores on this machine" %
          (args.model, args.global_batch, args.steps, args.steps, args.rounds, args.launcher,
           args.bucket_bytes or "25MiB", os.cpu_count()))
    print("| ranks | step wall ms (min-max over rounds) | samples/s (median round) | "
          "processor ms/step, slowest rank | planned = measured bytes/rank | load avg before | "
          "cores busy during |")
    print("|---|---|---|---|---|---|---|")
    medians, cpu = {}, {}
    for name, results in rows.items():
        ms = [r[0] for r in results]
        medians[name] = statistics.median(ms)
        cpu[name] = statistics.median(r[3] for r in results)
        print("| %s | %.1f (%.1f-%.1f) | %.1f | %.1f | %d | %s | %s |" %
              (name, medians[name], min(ms), max(ms), 1000.0 * args.global_batch / medians[name],
               cpu[name], results[0][4], "/".join("%.1f" % r[1] for r in results),
               "/".join("%.0f%%" % r[2] for r in results)))
    for name, _ in variants:
        print("speed-up 1 rank -> %s: %.2fx wall; %.2fx in processor time per step of the "
              "slowest rank" % (name, medians["1 rank"] / medians[name],
                                cpu["1 rank"] / cpu[name]))


if __name__ == "__main__":
    main()
