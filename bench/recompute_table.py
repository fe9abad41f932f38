#!/usr/bin/env python3
"""What each recompute mode saves and costs, per model, from compile-time plans.

For each model and shape, compiles the training graph with the default pipeline and with
recompute{mode=M} before the schedule, for every mode M, and tabulates from gmopt-compile's
--report-json: the saved-activation bytes (forward values the backward pass reads) before and
after and the cut, the recomputed FLOPs as a share of the step's, the planned peak (arena plus
persistent bytes) and its ratio to the unrewritten plan, and the compile time. Planned equals
measured on the CPU backend, so these are the figures a run would show; production shapes need
no weights (bench/models/build.py writes graphs only).

    python3 bench/recompute_table.py --build build --models /work/models/gpt2_small:8x1024
    python3 bench/recompute_table.py --build build --models testdata/gpt_tiny:4x64 --modes selective,full

MODEL is a directory holding training_model.onnx, with BATCHxSEQ (token models: batch, seq,
batch_x_seq bound) or BATCH (image models: batch). Modes may carry options:
`budget:memory-limit=40%` becomes recompute{mode=budget,memory-limit=40%}.
"""

import argparse
import os
import sys
import tempfile

from bench_support import ROOT, compile_report, size


def pipeline_for(mode):
    if mode == "none":
        return "canonicalize,fold-transpose,fold-scale,schedule,plan-buffers"
    name, _, options = mode.partition(":")
    inner = f"mode={name}" + (f",{options}" if options else "")
    return "canonicalize,fold-transpose,fold-scale,recompute{" + inner + "},schedule,plan-buffers"


def compile_one(tool, model, shape, mode, tmp):
    return compile_report(tool, model, shape, pipeline_for(mode), tmp)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", nargs="+", required=True, metavar="DIR:SHAPE")
    parser.add_argument("--modes", default="selective,sqrt,full")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tools", "gmopt-compile")
    print("| model | shape | mode | saved activations (before -> after) | cut | recompute FLOPs | "
          "planned peak | vs none | compile s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.models:
            model, _, shape = spec.rpartition(":")
            name = os.path.basename(os.path.normpath(model))
            base, err = compile_one(tool, model, shape, "none", tmp)
            if base is None:
                sys.exit(f"{name}: {err}")
            base_peak = base[0]["planned_bytes"]
            print(f"| {name} | {shape} | none | | | | {size(base_peak)} | 1.000 | {base[1]:.1f} |")
            for mode in args.modes.split(","):
                got, err = compile_one(tool, model, shape, mode, tmp)
                if got is None:
                    print(f"| {name} | {shape} | {mode} | {err} | | | | | |")
                    continue
                doc, seconds = got
                stats = doc.get("pass_statistics", {}).get("recompute", {})
                before, after = stats.get("saved-bytes-before", 0), stats.get("saved-bytes-after", 0)
                cut = 1 - after / before if before else 0
                flops = stats.get("recompute-flops", 0) / max(1, stats.get("step-flops", 1))
                peak = doc["planned_bytes"]
                print(f"| {name} | {shape} | {mode} | {size(before)} -> {size(after)} | {cut:.1%} | "
                      f"{flops:.2%} | {size(peak)} | {peak / base_peak:.3f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
