#!/usr/bin/env python3
"""gmopt as a memory pre-pass for ONNX Runtime: ORT's own peak memory training the original graph
and the graph rewritten by gmopt's `recompute` pass (modes selective and full).

A mid-size GPT (testdata/generate.py's GPTTiny at width 768; the size is set by --layers, --seq,
--vocab, --batch) is built with real, seeded weights through ONNX Runtime's real generate_artifacts
(CrossEntropyLoss, AdamW) into --models-dir (default /work/models/gpt_ort_mid; never committed).
Each mode's training graph is then

    gmopt-compile training_model.onnx --dim batch=B --passes='recompute{mode=M},schedule' -o M.onnx

(`schedule` orders the exported nodes; the recompute clones come just before their first backward
use). Every variant is trained by a fresh child process with ONNX Runtime 1.19.2's training API,
unchanged: CheckpointState (the model's own checkpoint) + Module(variant, state,
eval_model.onnx) + Optimizer(optimizer_model.onnx), --steps AdamW steps on the same seeded batches.
The child reports its losses and its peak resident set (getrusage ru_maxrss, which also counts
the loading of the model; the figure before the first step is reported too, and the table shows
the growth over it). ORT's CPU memory arena is off by default (--arena off), so a freed tensor goes
back to malloc and the resident set follows the live bytes; with the arena on, the BFC arena grows
in power-of-two extensions and keeps what it took, and the resident set says more about the
arena's growth pattern than about what is live (there the recomputed graphs measured higher). --repeats rounds
alternate the variants so background load hits all alike; the table shows each figure's range.

Rows: `original` (ORT's training_model.onnx as generated), `orig/ort-all` (the same under ORT's
default optimizations, ORT_ENABLE_ALL), `gmopt-schedule` (gmopt's ONNX export after `schedule`
alone: the effect of the node order and the exporter without recompute), then one row per mode.

ORT's graph optimizations would undo the rewrite (CommonSubexpressionElimination merges a clone
with the node it copies, since both read the same kept values) and its default node order places
a clone wherever its DFS first reaches it, so the children run with --ort-opt (default `disable`:
ORT_DISABLE_ALL) and --ort-order (default `priority`: ORT's PRIORITY_BASED order, which runs
nodes in the order of the graph among the ready ones, forward before backward). `--ort-opt all
--ort-order default` measures ORT's defaults. Both are the same for every variant but
`orig/ort-all`. Under ORT_ENABLE_EXTENDED and above, ORT 1.19.2's SkipLayerNormFusion also breaks a
selectively recomputed GPT: once the backward reads a recomputed residual sum, the forward
Add + LayerNormalization pair has one reader and is fused into SkipLayerNormalization, dropping
the mean and inverse-deviation outputs LayerNormalizationGrad still reads ("Missing Input"); up
to ORT_ENABLE_BASIC it trains, but CommonSubexpressionElimination merges clones back.

    /work/main/testdata/.venv/bin/python bench/ort_recompute_peak.py --gmopt-compile build/tools/gmopt-compile
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODES = ("selective", "full")


def build(args):
    """Writes the artifacts (with real weights in the checkpoint) into args.models_dir."""
    sys.path.insert(0, os.path.join(ROOT, "testdata"))
    import generate  # testdata/generate.py: GPT model, exporter settings, IR lowering
    import numpy as np
    import onnx
    import torch
    from onnxruntime.training import artifacts
    import onnxruntime.training.onnxblock._graph_utils as onnxblock_graph_utils

    size = dict(vocab=args.vocab, d=args.width, heads=args.heads, seq=args.seq, layers=args.layers,
                ff=4 * args.width)
    torch.manual_seed(args.seed)
    model = generate.GPTTiny(0.0, size)
    model.train()
    example = generate.token_batch(np.random.default_rng(0), 2, size)[:1]
    spec = dict(input_names=["input_ids"], output_names=["logits"],
                dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}})
    forward = generate.export_forward(model, example, spec)
    params = [name for name, _ in model.named_parameters()]
    inits = {i.name for i in forward.graph.initializer}
    missing = [p for p in params if p not in inits]
    if missing:
        raise RuntimeError(f"parameters not among the exported initializers: {missing}")
    os.makedirs(args.models_dir, exist_ok=True)
    onnxblock_graph_utils._GRAPH_TOKEN = 0
    artifacts.generate_artifacts(forward, requires_grad=params, loss=generate.LOSS_CE,
                                 optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=args.models_dir)
    for fn in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        generate.lower_ir_version(os.path.join(args.models_dir, fn))
    count = sum(p.numel() for p in model.parameters())
    with open(os.path.join(args.models_dir, "size.json"), "w") as f:
        json.dump(dict(size, parameters=count, seed=args.seed), f, indent=1)
    print(f"built {args.models_dir}: {count:,} parameters, {size}", flush=True)


def child(args):
    """Trains one variant with ORT's training API; prints one JSON line."""
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    rss_kib = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # noqa: E731 (KiB on Linux)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[args.ort_opt]
    so.enable_cpu_mem_arena = args.arena
    so.enable_mem_pattern = args.mem_pattern
    so.execution_order = {"default": ort.ExecutionOrder.DEFAULT,
                          "priority": ort.ExecutionOrder.PRIORITY_BASED}[args.ort_order]
    with open(os.path.join(args.models_dir, "size.json")) as f:
        size = json.load(f)
    state = CheckpointState.load_checkpoint(os.path.join(args.models_dir, "checkpoint"))
    module = Module(args.child, state, os.path.join(args.models_dir, "eval_model.onnx"),
                    device="cpu", session_options=so)
    optimizer = Optimizer(os.path.join(args.models_dir, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(1e-3)
    module.train()
    loaded = rss_kib()
    rng = np.random.default_rng(args.seed)
    losses, times = [], []
    for _ in range(args.steps):
        seq = rng.integers(0, size["vocab"], size=(args.batch, size["seq"] + 1), dtype=np.int64)
        ids, labels = seq[:, :-1].copy(), seq[:, 1:].reshape(-1).copy()
        start = time.perf_counter()
        loss = module(ids, labels)
        optimizer.step()
        module.lazy_reset_grad()
        times.append(time.perf_counter() - start)
        losses.append(float(np.asarray(loss)))
    print(json.dumps(dict(losses=losses, step_s=times, loaded_rss_mib=loaded / 1024,
                          peak_rss_mib=rss_kib() / 1024)), flush=True)


def recompute_statistics(stderr):
    """The recompute section of --pass-statistics: {name: value}."""
    stats, section = {}, None
    for line in stderr.splitlines():
        m = re.match(r"^\s+\(S\)\s+(\d+)\s+(\S+)", line)
        if m:
            if section == "recompute":
                stats[m.group(2)] = int(m.group(1))
        elif line.strip() and not line.startswith((" ", "=")):
            section = line.strip()
    return stats


def compile_variants(args, seq):
    """Returns {variant: (training graph path, ORT optimization level)}."""
    original = os.path.join(args.models_dir, "training_model.onnx")
    variants = {"original": (original, args.ort_opt)}
    if args.ort_default_row:
        variants["orig/ort-all"] = (original, "all")
    for mode in ["schedule"] + list(args.modes):
        out = os.path.join(args.work_dir, f"training_{mode}.onnx")
        passes = "schedule" if mode == "schedule" else f"recompute{{mode={mode}}},schedule"
        cmd = [args.gmopt_compile, original, f"--dim=batch={args.batch},batch_x_seq={args.batch * seq}",
               f"--passes={passes}", "--pass-statistics", "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gmopt-compile failed ({' '.join(cmd)}):\n{proc.stderr}")
        stats = recompute_statistics(proc.stderr)
        keys = ("activations-dropped", "saved-bytes-before", "saved-bytes-after", "recompute-flops",
                "step-flops")
        shown = ", ".join(f"{k} {stats[k]:,}" for k in keys if k in stats)
        print(f"compiled {mode}: {' '.join(cmd)}" + (f"\n  {shown}" if shown else ""), flush=True)
        variants["gmopt-" + mode if mode == "schedule" else mode] = (out, args.ort_opt)
    return variants


def run_child(args, path, ort_opt):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--models-dir", args.models_dir,
           "--batch", str(args.batch), "--steps", str(args.steps), "--seed", str(args.seed),
           "--threads", str(args.threads), "--ort-opt", ort_opt, "--ort-order", args.ort_order,
           "--arena", "on" if args.arena else "off", "--mem-pattern", "on" if args.mem_pattern else "off"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ONNX Runtime failed on {path}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt_range(values, spec="{:.0f}"):
    lo, hi = spec.format(min(values)), spec.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gmopt-compile", default=os.path.join(ROOT, "build", "tools", "gmopt-compile"))
    parser.add_argument("--models-dir", default="/work/models/gpt_ort_mid")
    parser.add_argument("--rebuild", action="store_true",
                        help="rebuild the model even if one of the requested size exists")
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--ort-opt", choices=("disable", "basic", "all"), default="disable")
    parser.add_argument("--ort-order", choices=("default", "priority"), default="priority")
    onoff = lambda v: v == "on"  # noqa: E731
    parser.add_argument("--arena", type=onoff, default=False, metavar="on|off",
                        help="ORT's CPU memory arena (default off: freed tensors go back to malloc)")
    parser.add_argument("--mem-pattern", type=onoff, default=True, metavar="on|off",
                        help="ORT's memory pattern (default on)")
    parser.add_argument("--only", nargs="+", help="run only these variants")
    parser.add_argument("--no-ort-default-row", dest="ort_default_row", action="store_false",
                        help="leave out the row of the original graph under ORT's default optimizations")
    parser.add_argument("--work-dir", help="where the rewritten graphs go (default: a temporary directory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    wanted = dict(vocab=args.vocab, d=args.width, heads=args.heads, seq=args.seq, layers=args.layers,
                  seed=args.seed)
    size_path = os.path.join(args.models_dir, "size.json")
    built = {}
    if os.path.exists(size_path) and os.path.exists(os.path.join(args.models_dir, "checkpoint")):
        with open(size_path) as f:
            built = json.load(f)
    if args.rebuild or any(built.get(k) != v for k, v in wanted.items()):
        build(args)
    with tempfile.TemporaryDirectory() as tmp:
        args.work_dir = args.work_dir or tmp
        os.makedirs(args.work_dir, exist_ok=True)
        with open(os.path.join(args.models_dir, "size.json")) as f:
            seq = json.load(f)["seq"]
        variants = compile_variants(args, seq)
        if args.only:
            variants = {v: p for v, p in variants.items() if v in args.only or v == "original"}
        results = {v: [] for v in variants}
        for r in range(args.repeats):
            for v, (path, ort_opt) in variants.items():
                res = run_child(args, path, ort_opt)
                results[v].append(res)
                print(f"round {r + 1} {v}: peak {res['peak_rss_mib']:.0f} MiB (loaded "
                      f"{res['loaded_rss_mib']:.0f}), losses {res['losses']}, step s "
                      f"{[round(t, 2) for t in res['step_s']]}", flush=True)

    with open(os.path.join(args.models_dir, "size.json")) as f:
        size = json.load(f)
    print(f"\nGPT {size['parameters']:,} parameters (width {size['d']}, {size['layers']} layers, "
          f"vocab {size['vocab']}), batch {args.batch} x seq {size['seq']}, {args.steps} AdamW steps, "
          f"{args.repeats} rounds, ORT optimizations {args.ort_opt}, order {args.ort_order}, "
          f"{args.threads} threads")
    base = results["original"]
    print(f"{'graph':<13} {'peak RSS MiB':>14} {'peak-loaded MiB':>16} {'ratio':>11} {'step s':>11}  losses "
          "(round 1; max |diff| vs original over all rounds)")
    for v, runs in results.items():
        peaks = [r["peak_rss_mib"] for r in runs]
        growth = [r["peak_rss_mib"] - r["loaded_rss_mib"] for r in runs]
        ratios = [r["peak_rss_mib"] / b["peak_rss_mib"] for r, b in zip(runs, base)]
        steps = [t for r in runs for t in r["step_s"]]
        diff = max(abs(a - b) for r, rb in zip(runs, base) for a, b in zip(r["losses"], rb["losses"]))
        losses = " ".join(f"{x:.7g}" for x in runs[0]["losses"])
        print(f"{v:<13} {fmt_range(peaks):>14} {fmt_range(growth):>16} {fmt_range(ratios, '{:.3f}'):>11} "
              f"{fmt_range(steps, '{:.1f}'):>11}  {losses} ({diff:.2g})")


if __name__ == "__main__":
    sys.exit(main())
