#!/usr/bin/env python3
"""Does mixed precision train like fp32? Losses over N AdamW steps, side by side.

For each testdata model, runs gmopt-run for --steps AdamW steps (the model's
test_data_set_0 batch every step, ONNX Runtime's optimizer_model.onnx hyper-parameters when
the model has one, else --optimizer=adamw) with the default pipeline (fp32) and with
amp{dtype=fp16} and amp{dtype=bf16} inserted before the schedule, and prints the final loss
of each, its relative difference from fp32's, the minimum loss on the way, and the updates
the loss scaler skipped. The issue's bar: the final loss within 2% of fp32's.

    python3 bench/amp_convergence.py --build build --models mlp gpt_tiny --steps 200
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_support import ROOT, TESTDATA_DIMS as DIMS


def pipeline(variant):
    passes = ["canonicalize", "fold-transpose"]
    if variant != "fp32":
        passes.append("amp{dtype=" + variant + "}")
    return ",".join(passes + ["schedule", "plan-buffers"])


def run(build, model, variant, steps, lr, threads, tmp):
    model_dir = os.path.join(ROOT, "testdata", model)
    out = os.path.join(tmp, f"{model}-{variant}.gm")
    compile_cmd = [os.path.join(build, "tools", "gmopt-compile"),
                   os.path.join(model_dir, "training_model.onnx"), "-o", out,
                   "--passes=" + pipeline(variant)]
    for dim in DIMS.get(model, []):
        compile_cmd += ["--dim", dim]
    optimizer = os.path.join(model_dir, "optimizer_model.onnx")
    compile_cmd += (["--optimizer-model", optimizer] if os.path.exists(optimizer)
                    else ["--optimizer=adamw"])
    subprocess.run(compile_cmd, check=True, capture_output=True, text=True)
    report = os.path.join(tmp, f"{model}-{variant}.json")
    run_cmd = [os.path.join(build, "tools", "gmopt-run"), out, "--backend=cpu",
               "--threads", str(threads), "--steps", str(steps), "--lr", str(lr),
               "--inputs", os.path.join(model_dir, "test_data_set_0"), "--report-json", report]
    result = subprocess.run(run_cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{model} {variant}: {result.stderr.strip()}")
    with open(report) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", nargs="+", default=["mlp", "gpt_tiny"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.steps} AdamW steps, lr {args.lr}")
    print("| model | variant | first loss | final loss | vs fp32 | min loss | skipped updates |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            reference = None
            for variant in ["fp32", "fp16", "bf16"]:
                doc = run(args.build, model, variant, args.steps, args.lr, args.threads, tmp)
                losses = [l for l in doc["losses"] if l is not None]
                final = doc["losses"][-1]
                if variant == "fp32":
                    reference = final
                diff = "" if variant == "fp32" or final is None else \
                    (f"{(final - reference) / abs(reference):+.2%}" if reference
                     else f"{final - reference:+.2e} (abs)")
                print(f"| {model} | {variant} | {doc['losses'][0]:.5f} | {final:.5f} | {diff} | "
                      f"{min(losses):.5f} | {doc.get('skipped_updates', 0)} |")


if __name__ == "__main__":
    main()
