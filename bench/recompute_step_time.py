#!/usr/bin/env python3
"""Step time and memory of the recompute modes on the CPU backend, side by side.

Compiles one testdata training graph at a batch where activations dominate, once per pipeline
(no recompute, recompute{mode=selective}, recompute{mode=full}, ...), and trains each with gmopt-run
for a few steps on one thread. The modes run interleaved, round after round, so machine noise
falls on all of them alike. Reported per mode: the planned peak, the measured peak of the
activations category, and the processor time of a micro-step (median over the steps after the
first, then min-max over the rounds), with its ratio to the unrewritten step in the same round.

    python3 bench/recompute_step_time.py --build build --model gpt_tiny --batch 32 --rounds 5

Processor time (not wall time) is the figure to read on a shared machine. Issue 12's bounds:
selective <= 1.05x, full <= 1.35x the unrewritten step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = "canonicalize,fold-transpose,fold-scale,{recompute}schedule,plan-buffers"
MODES = {
    "none": "",
    "selective": "recompute{mode=selective},",
    "selective-no-core": "recompute{mode=selective,attention-core=false},",
    "sqrt": "recompute{mode=sqrt},",
    "full": "recompute{mode=full},",
}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + result.stderr)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="gmopt build tree")
    parser.add_argument("--model", default="gpt_tiny", help="testdata model (a token graph)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64, help="the model's sequence length")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="none,selective,full", help="comma-separated: " + ",".join(MODES) + "; or ';'-separated with NAME=recompute{...} entries")
    args = parser.parse_args()
    modes = []
    for spec in args.modes.split(";" if ";" in args.modes else ","):
        # NAME=PASS{OPTIONS} measures a tuning of one's own, e.g.
        # 'none;wide=recompute{mode=selective,written-bytes-per-byte=64}'.
        name, eq, fragment = spec.partition("=")
        if eq:
            MODES[name] = fragment + ","
        elif name not in MODES:
            sys.exit(f"unknown mode '{name}' (known: {', '.join(MODES)}; or NAME=recompute{{...}})")
        modes.append(name)
    if "none" not in modes:
        modes.insert(0, "none")
    compile_tool = os.path.join(args.build, "tools", "gmopt-compile")
    run_tool = os.path.join(args.build, "tools", "gmopt-run")
    model = os.path.join(ROOT, "testdata", args.model, "training_model.onnx")
    dims = ["--dim", f"batch={args.batch}", "--dim", f"batch_x_seq={args.batch * args.seq}"]

    with tempfile.TemporaryDirectory() as tmp:
        compiled = {}
        for mode in modes:
            out = os.path.join(tmp, mode + ".gm")
            run([compile_tool, model, *dims, "--passes=" + BASE.format(recompute=MODES[mode]), "-o", out])
            compiled[mode] = out
        cpu = {mode: [] for mode in modes}
        ratio = {mode: [] for mode in modes}
        memory = {}
        for _ in range(args.rounds):
            medians = {}
            for mode in modes:
                report = os.path.join(tmp, mode + ".json")
                run([run_tool, compiled[mode], "--steps", str(args.steps), "--threads", "1",
                     "--report-json", report])
                with open(report) as f:
                    doc = json.load(f)
                steps = doc["optimized"]["micro_step_cpu_ms"][1:]
                medians[mode] = statistics.median(steps)
                memory[mode] = (doc["plan"]["planned_bytes"], doc["optimized"]["by_category"]["activations"],
                                doc["losses"])
            for mode in modes:
                cpu[mode].append(medians[mode])
                ratio[mode].append(medians[mode] / medians["none"])

    print(f"{args.model} batch {args.batch} x seq {args.seq}, {args.steps} steps x {args.rounds} rounds, 1 thread")
    print("| mode | planned peak (MiB) | activations measured (MiB) | step CPU ms (min-max) | ratio to none (min-max) "
          "| ratio (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in modes:
        planned, activations, _ = memory[mode]
        print(f"| {mode} | {planned / 2**20:.1f} | {activations / 2**20:.1f} | "
              f"{min(cpu[mode]):.1f}-{max(cpu[mode]):.1f} | {min(ratio[mode]):.3f}-{max(ratio[mode]):.3f} "
              f"| {statistics.median(ratio[mode]):.3f} |")
    losses = {mode: memory[mode][2] for mode in modes}
    same = all(losses[mode] == losses["none"] for mode in modes)
    print("losses identical across modes:", "yes" if same else "NO")


if __name__ == "__main__":
    main()
