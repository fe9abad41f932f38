#!/usr/bin/env python3
"""The step cost model (passes/planning/StepCost.h) against measured CPU step times.

For each testdata graph at its reference batch (and, with --scale, at larger batches), compiles
the default pipeline with gmopt-compile --report-json (which carries the predicted step time of
each cost-model preset) and trains the .gm with gmopt-run on the CPU backend. Reports the CPU
preset's predicted step time, the measured one (median over the steps after the first, min-max
over --rounds rounds), and their ratio. The memory-limit search ranks candidates by these
predictions, so what matters most is that the ratio is steady across graphs and shapes.

    python3 bench/cost_model.py --build build --rounds 3 --threads 0
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import ROOT, TESTDATA_DIMS  # noqa: E402

GRAPHS = ["mlp", "cnn", "resnet_tiny", "gpt_tiny", "bert_tiny", "llama_tiny"]
# Larger batches of the token models, where products dominate the step.
SCALED = {"gpt_tiny": ["batch=32", "batch_x_seq=2048"], "bert_tiny": ["batch=32", "batch_x_seq=512"],
          "llama_tiny": ["batch=32", "batch_x_seq=512"]}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + result.stderr)
    return result


def measure(args, tmp, name, dims):
    model = os.path.join(ROOT, "testdata", name, "training_model.onnx")
    gm, report = os.path.join(tmp, "m.gm"), os.path.join(tmp, "c.json")
    dim_flags = [f for d in dims for f in ("--dim", d)]
    run([args.compile, model, *dim_flags, "--optimizer", "adamw", "-o", gm, "--report-json", report])
    with open(report) as f:
        predicted = json.load(f)["predicted_step"]
    times = []
    for _ in range(args.rounds):
        out = os.path.join(tmp, "r.json")
        run([args.run, gm, "--backend=cpu", "--steps", str(args.steps), "--threads", str(args.threads),
             "--report-json", out])
        with open(out) as f:
            steps = json.load(f)["optimized"]["micro_step_ms"]
        times.append(statistics.median(steps[1:] if len(steps) > 1 else steps))
    return predicted, times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-scale", action="store_true", help="only the reference batches")
    args = parser.parse_args()
    args.compile = os.path.join(args.build, "tools", "gmopt-compile")
    args.run = os.path.join(args.build, "tools", "gmopt-run")
    cases = [(g, TESTDATA_DIMS[g]) for g in GRAPHS]
    if not args.no_scale:
        cases += [(g, d) for g, d in SCALED.items()]
    print(f"threads {args.threads or os.cpu_count()}, {args.rounds} rounds x {args.steps} steps\n")
    print("| graph | dims | kernels | GFLOP | predicted ms (cpu) | measured ms (min-max) | measured / predicted |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, dims in cases:
            predicted, times = measure(args, tmp, name, dims)
            cpu = predicted["cpu"]
            p = cpu["seconds"] * 1e3
            lo, hi = min(times), max(times)
            ratios.append((lo / p, hi / p))
            print(f"| {name} | {','.join(dims)} | {cpu['kernels']} | {cpu['flops'] / 1e9:.3f} | {p:.2f} | "
                  f"{lo:.2f}-{hi:.2f} | {lo / p:.2f}-{hi / p:.2f} |")
    print(f"\nmeasured / predicted over all graphs: {min(r[0] for r in ratios):.2f}-{max(r[1] for r in ratios):.2f}")


if __name__ == "__main__":
    main()
