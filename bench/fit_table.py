#!/usr/bin/env python3
"""gmopt-compile --memory-limit over a sweep of limits, and --max-batch at device sizes.

For one model and batch, compiles with --memory-limit at falling fractions of the unrewritten
step's planned peak (fp32 only, then with --allow-amp), down to the first limit nothing reaches,
and tabulates each choice: amp, accumulation K, recompute, planned peak, predicted extra FLOPs
and predicted step time. Checks what issue 15 asks: every choice fits its limit, fp32 only
unless amp is allowed, and reports whether the predicted step time and the extra FLOPs grow
monotonically as the limit falls. Then --max-batch=batch at each --device-gib size, with the
answer B checked by the compiler's own probes of B (fits) and B + 1 (does not).

    python3 bench/fit_table.py --build build --model /work/models/gpt2_small --shape 8x1024 \\
        --cost-model cuda --amp bf16 --max-batch-gib 8,16,24
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import dims_for, size  # noqa: E402


def compile_fit(tool, model, shape, flags, tmp):
    report = os.path.join(tmp, "fit.json")
    cmd = [tool, os.path.join(model, "training_model.onnx"), *dims_for(shape), "--optimizer", "adamw",
           "-o", os.path.join(tmp, "out.gm"), "--report-json", report, *flags]
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        return None, (result.stderr.strip().splitlines() or ["failed"])[-1], seconds
    with open(report) as f:
        doc = json.load(f)
    return doc, None, seconds


def sweep(args, tmp, amp, accumulate=True, objective="time"):
    flags = ["--cost-model", args.cost_model, f"--fit-objective={objective}"] + (["--allow-amp", amp] if amp else [])
    if not accumulate:
        flags.append("--allow-accumulate=false")
    rows, problems = [], []
    for percent in args.percents:
        doc, error, seconds = compile_fit(args.tool, args.model, args.shape,
                                          flags + [f"--memory-limit={percent}%"], tmp)
        if doc is None:
            rows.append((percent, None, error, seconds))
            break
        fit = doc["memory_fit"]
        chosen = fit["candidates"][fit["chosen"]]
        if chosen["planned_peak_bytes"] > fit["limit_bytes"] or doc["planned_bytes"] > fit["limit_bytes"]:
            problems.append(f"{percent}%: the choice does not fit")
        if not amp and chosen["amp"] != "fp32":
            problems.append(f"{percent}%: amp chosen without --allow-amp")
        if not amp and any(c["amp"] != "fp32" for c in fit["candidates"]):
            problems.append(f"{percent}%: amp weighed without --allow-amp")
        rows.append((percent, fit, chosen, seconds))
    return rows, problems


def monotone(values):
    return all(b >= a for a, b in zip(values, values[1:]))


def print_sweep(title, rows, problems):
    print(f"\n### {title}\n")
    print("| limit | limit bytes | choice (amp, K, recompute) | planned peak | extra GFLOP | predicted ms "
          "| candidates | compile s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    seconds, extras = [], []
    for percent, fit, chosen, compile_s in rows:
        if fit is None:
            print(f"| {percent}% | | nothing fits: {chosen} | | | | | {compile_s:.1f} |")
            continue
        seconds.append(chosen["predicted_seconds"])
        extras.append(chosen["extra_flops"])
        print(f"| {percent}% | {fit['limit_bytes']:,} | {chosen['amp']}, K={chosen['accumulate']}, "
              f"{chosen['recompute']} | {size(chosen['planned_peak_bytes'])} | "
              f"{chosen['extra_flops'] / 1e9:.1f} | {chosen['predicted_seconds'] * 1e3:.1f} | "
              f"{len(fit['candidates'])} | {compile_s:.1f} |")
    print(f"\nevery choice fits and is fp32 unless amp is allowed: {'yes' if not problems else 'NO: ' + '; '.join(problems)}")
    print(f"predicted step time non-decreasing as the limit falls: {'yes' if monotone(seconds) else 'no'}")
    print(f"predicted extra FLOPs non-decreasing as the limit falls: {'yes' if monotone(extras) else 'no'}")
    return not problems


def max_batch(args, tmp):
    print("\n### --max-batch=batch\n")
    print("| limit | B | B fits (planned peak) | B+1 smallest reachable peak | choice at B | dominant | compile s |")
    print("|---:|---:|---:|---:|---|---|---:|")
    ok = True
    for gib in args.max_batch_gib:
        flags = ["--cost-model", args.cost_model, f"--memory-limit={gib}GiB", "--max-batch=batch"]
        if args.amp_max_batch:
            flags += ["--allow-amp", args.amp_max_batch]
        doc, error, seconds = compile_fit(args.tool, args.model, args.shape, flags, tmp)
        if doc is None:
            print(f"| {gib} GiB | | {error} | | | | {seconds:.1f} |")
            ok = False
            continue
        answer = doc["max_batch"]
        value = answer["value"]
        probes = {p["value"]: p for p in answer["probes"]}
        both = probes.get(value, {}).get("fits") and value + 1 in probes and not probes[value + 1]["fits"]
        ok = ok and bool(both)
        fit = answer["fit"]
        chosen = fit["candidates"][fit["chosen"]]
        print(f"| {gib} GiB | {value} | {size(probes[value]['peak_bytes'])} | "
              f"{size(answer['next_smallest_peak_bytes'])} | {chosen['amp']}, {chosen['recompute']} | "
              f"{answer['dominant']} | {seconds:.1f} |")
    print(f"\nB fits and B+1 does not, both compiled: {'yes' if ok else 'NO'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", required=True, help="a directory with training_model.onnx")
    parser.add_argument("--shape", required=True, help="BATCHxSEQ or BATCH")
    parser.add_argument("--cost-model", default="cuda")
    parser.add_argument("--amp", default="bf16", help="the --allow-amp sweep's type ('' to skip)")
    parser.add_argument("--percents", default="100,90,80,70,60,50,45,40,35,30,25,20,15,10,5")
    parser.add_argument("--max-batch-gib", default="8,16,24")
    parser.add_argument("--amp-max-batch", default="", help="--allow-amp for the max-batch runs")
    args = parser.parse_args()
    args.tool = os.path.join(args.build, "tools", "gmopt-compile")
    args.percents = [int(p) for p in args.percents.split(",")]
    args.max_batch_gib = [int(g) for g in args.max_batch_gib.split(",") if g]
    print(f"model {args.model}, shape {args.shape}, cost model {args.cost_model}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        rows, problems = sweep(args, tmp, None, accumulate=False)
        ok &= print_sweep("fp32, recompute only (--allow-accumulate=false)", rows, problems)
        rows, problems = sweep(args, tmp, None)
        ok &= print_sweep("fp32, recompute and accumulation (no --allow-amp)", rows, problems)
        rows, problems = sweep(args, tmp, None, objective="flops")
        ok &= print_sweep("fp32, recompute and accumulation, --fit-objective=flops", rows, problems)
        if args.amp:
            rows, problems = sweep(args, tmp, args.amp)
            ok &= print_sweep(f"--allow-amp={args.amp}", rows, problems)
        if args.max_batch_gib:
            ok &= max_batch(args, tmp)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
