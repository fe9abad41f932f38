#!/usr/bin/env python3
"""What mixed precision saves, per model, from compile-time plans.

For each model and shape, compiles the training graph with the default pipeline and with
amp{dtype=D} before the schedule (D = fp16, bf16; fp16 with dynamic loss scaling), and
tabulates from gmopt-compile's --report-json: the saved-activation bytes (forward values the
backward pass reads) before and after, the persistent bytes per category (parameters,
gradients, optimizer state stay fp32: master weights), the planned peak (arena plus
persistent) and its ratio to the fp32 plan, the nodes in low precision and the casts
inserted. Optionally composes amp with a recompute mode. Planned equals measured on the CPU
backend; production shapes need no weights (bench/models/build.py writes graphs only).

    python3 bench/amp_table.py --build build --models /work/models/gpt2_small:8x1024
    python3 bench/amp_table.py --build build --models testdata/gpt_tiny:4x64 testdata/mlp:8 \\
        --variants fp16,bf16,fp16+recompute{mode=selective}
"""

import argparse
import os
import sys
import tempfile

from bench_support import ROOT, compile_report, size

CATEGORIES = ["parameters", "gradients", "optimizer_state"]


PRE = []


def pipeline_for(variant):
    """none | fp16 | bf16, then any +PASS (e.g. fp16+pack-dropout-masks+recompute{mode=selective}).
    --pre passes (e.g. cse) run before amp in every variant, the fp32 one included."""
    dtype, _, extra = variant.partition("+")
    passes = ["canonicalize", "fold-transpose"] + PRE
    if dtype != "none":
        passes.append("amp{dtype=" + dtype + "}")
    passes += [p for p in extra.split("+") if p]
    passes += ["schedule", "plan-buffers"]
    return ",".join(passes)


def compile_one(tool, model, shape, variant, tmp):
    return compile_report(tool, model, shape, pipeline_for(variant), tmp)


def saved_bytes(doc, variant, fallback):
    """Saved activations before the first rewrite and after the last one of the variant's passes
    that report them (amp, recompute, pack-dropout-masks), in pipeline order."""
    all_stats = doc.get("pass_statistics", {})
    before = after = None
    for name in pass_names(variant):
        stats = all_stats.get(name, {})
        if before is None and "saved-bytes-before" in stats:
            before = stats["saved-bytes-before"]
        after = stats.get("saved-bytes-after", after)
    return (fallback if before is None else before), (fallback if after is None else after)


def pass_names(variant):
    """The rewriting passes of a variant, in pipeline order."""
    dtype, _, extra = variant.partition("+")
    names = ["amp"] if dtype in ("fp16", "bf16") else []
    return names + [p.split("{")[0] for p in extra.split("+") if p]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", nargs="+", required=True, metavar="DIR:SHAPE")
    parser.add_argument("--variants", default="fp16,bf16")
    parser.add_argument("--pre", default="", help="comma-separated passes run before amp in every "
                        "variant, the fp32 baseline included (e.g. cse)")
    args = parser.parse_args()
    PRE.extend(p for p in args.pre.split(",") if p)
    tool = os.path.join(args.build, "tools", "gmopt-compile")
    print("| model | shape | variant | saved activations (fp32 -> amp) | cut | params / grads / "
          "optimizer state | planned peak | vs fp32 | low nodes | casts | compile s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.models:
            model, _, shape = spec.rpartition(":")
            name = os.path.basename(os.path.normpath(model))
            base, err = compile_one(tool, model, shape, "none", tmp)
            if base is None:
                sys.exit(f"{name}: {err}")
            base_peak = base[0]["planned_bytes"]
            persistent = " / ".join(size(base[0]["persistent_by_category"][c]) for c in CATEGORIES)
            print(f"| {name} | {shape} | fp32 | | | {persistent} | {size(base_peak)} | 1.000 | | | "
                  f"{base[1]:.1f} |")
            for variant in args.variants.split(","):
                got, err = compile_one(tool, model, shape, variant, tmp)
                if got is None:
                    print(f"| {name} | {shape} | {variant} | {err} | | | | | | | |")
                    continue
                doc, seconds = got
                stats = doc.get("pass_statistics", {}).get("amp", {})
                before, after = saved_bytes(doc, variant, 0)
                cut = 1 - after / before if before else 0
                peak = doc["planned_bytes"]
                persistent = " / ".join(size(doc["persistent_by_category"][c]) for c in CATEGORIES)
                print(f"| {name} | {shape} | {variant} | {size(before)} -> {size(after)} | {cut:.1%} | "
                      f"{persistent} | {size(peak)} | {peak / base_peak:.3f} | "
                      f"{stats.get('low-precision-nodes', 0)} | {stats.get('casts-inserted', 0)} | "
                      f"{seconds:.1f} |")


if __name__ == "__main__":
    main()
