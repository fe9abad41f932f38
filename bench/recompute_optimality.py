#!/usr/bin/env python3
"""How close `recompute{mode=budget}` comes to the optimal recompute under a memory limit.

On small graphs (default: tests/lit/recompute/segments.gmir, bench/recompute/silu_blocks.gmir and
bench/recompute/attention_blocks.gmir;
--graph adds others, e.g. `--graph mlp=testdata/mlp/training_model.onnx:batch=8`) this solves exactly "the least recompute FLOPs whose planned peak fits the
limit" over the choice the pass makes - which saved activations to drop, each recomputed from what
is kept by the pass's own rewrite - by enumerating every subset S of the droppable saved
activations:

    gmopt-opt G --passes='PREFIX recompute{mode=explicit,drop="S"},schedule,plan-buffers' --pass-statistics

reading `recompute-flops` (recompute section) and the planned peak = `arena-bytes` +
`persistent-bytes` (plan-buffers section), the figure budget mode compares with its limit. PREFIX is
`canonicalize,fold-transpose,` for ONNX graphs (the default pipeline's head), nothing for text
graphs. The droppable saved activations are the forward values read by a later phase (parsed from
the printed graph) that explicit mode accepts alone; graphs with more than --max-saved of them
are skipped (2^N runs).

Then at five limits evenly spaced from the unrewritten peak down to the smallest peak any subset
reaches (limit_k = base - k/5 (base - smallest), k = 1..5) it runs
`recompute{mode=budget,memory-limit=limit_k},schedule,plan-buffers` and prints, per limit, the
optimal FLOPs, budget's FLOPs, their ratio, whether budget's planned peak met the limit, and
whether the set budget dropped is itself one of the enumerated points (explicit mode on budget's
dropped set gives the same FLOPs and peak).

    /work/main/testdata/.venv/bin/python bench/recompute_optimality.py --gmopt-opt build/tools/gmopt-opt
"""

import argparse
import concurrent.futures
import itertools
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DEFAULT_GRAPHS = [
    ("segments", "tests/lit/recompute/segments.gmir", {}),
    ("silu_blocks", "bench/recompute/silu_blocks.gmir", {}),
    ("attention_blocks", "bench/recompute/attention_blocks.gmir", {}),
]

VALUE = re.compile(r"%[^\s,()\[\]{}]+")


class Graph:
    def __init__(self, args, name, path, dims):
        self.args, self.name, self.path, self.dims = args, name, os.path.join(ROOT, path), dims
        self.prefix = "canonicalize,fold-transpose," if path.endswith(".onnx") else ""

    def run(self, passes, print_plan=False):
        cmd = [self.args.gmopt_opt, self.path, f"--passes={self.prefix}{passes}", "--pass-statistics",
               "-o", os.devnull]
        if self.dims:
            cmd.append("--dim=" + ",".join(f"{k}={v}" for k, v in self.dims.items()))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, proc.stderr.strip()
        return parse_statistics(proc.stderr), proc.stderr

    def saved_activations(self):
        """Forward results read by a node of a later phase, in graph order."""
        cmd = [self.args.gmopt_opt, self.path, f"--passes={self.prefix.rstrip(',') or 'schedule'}"]
        if self.dims:
            cmd.append("--dim=" + ",".join(f"{k}={v}" for k, v in self.dims.items()))
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        forward, saved = [], []
        for line in text.splitlines():
            if " = " not in line or not line.strip().startswith("%"):
                continue
            lhs, rhs = line.split(" = ", 1)
            if "constant " in rhs[:12]:
                continue
            results = VALUE.findall(lhs)
            operands = VALUE.findall(rhs.split(") :")[0] if ") :" in rhs else rhs)
            if " phase " in rhs:
                for v in operands:
                    if v in forward and v not in saved:
                        saved.append(v)
            else:
                forward.extend(results)
        return [v[1:] for v in saved]


def parse_statistics(stderr):
    """{section: {name: value}} from --pass-statistics."""
    stats, section = {}, None
    for line in stderr.splitlines():
        m = re.match(r"^\s+\(S\)\s+(\d+)\s+(\S+)", line)
        if m and section:
            stats[section][m.group(2)] = int(m.group(1))
        elif re.match(r"^[a-z][a-z-]*$", line.strip()) and not line.startswith(" "):
            section = line.strip()
            stats.setdefault(section, {})
    return stats


def point(stats):
    flops = stats.get("recompute", {}).get("recompute-flops", 0)
    plan = stats["plan-buffers"]
    return flops, plan["arena-bytes"] + plan["persistent-bytes"]


def explicit(graph, names):
    drop = " ".join(names)
    stats, err = graph.run(f'recompute{{mode=explicit,drop="{drop}"}},schedule,plan-buffers')
    if stats is None:
        return None, err
    return point(stats), None


def study(args, graph):
    saved = graph.saved_activations()
    droppable, refused = [], []
    for name in saved:
        res, err = explicit(graph, [name])
        (droppable if res else refused).append(name)
    print(f"\n## {graph.name} ({os.path.relpath(graph.path, ROOT)}): {len(saved)} saved activations, "
          f"{len(droppable)} droppable" + (f" (refused: {' '.join(refused)})" if refused else ""), flush=True)
    if len(droppable) > args.max_saved:
        print(f"skipped: more than --max-saved {args.max_saved} droppable", flush=True)
        return None
    subsets = [c for k in range(len(droppable) + 1) for c in itertools.combinations(droppable, k)]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda s: explicit(graph, s), subsets))
    points = {}
    for s, (res, err) in zip(subsets, results):
        if res is None:
            sys.exit(f"{graph.name}: explicit drop={' '.join(s)} failed: {err}")
        points[frozenset(s)] = res
    base = points[frozenset()][1]
    smallest = min(p for _, p in points.values())
    print(f"{len(subsets)} subsets; planned peak unrewritten {base:,} B, smallest reachable {smallest:,} B "
          f"({100 * smallest / base:.1f}%)", flush=True)
    rows = []
    for k in range(1, 6):
        limit = base - (k * (base - smallest)) // 5
        feasible = [(f, p, s) for s, (f, p) in points.items() if p <= limit]
        opt_f, opt_p, opt_s = min(feasible, key=lambda t: (t[0], t[1]))
        stats, text = graph.run(f"recompute{{mode=budget,memory-limit={limit},print-plan=true}},schedule,plan-buffers")
        row = dict(limit=limit, limit_pct=100 * limit / base, opt_flops=opt_f, opt_peak=opt_p,
                   opt_drop=sorted(opt_s))
        if stats is None:
            row.update(budget_flops=None, budget_peak=None, met=False, error=text.splitlines()[-1])
        else:
            bf, bp = point(stats)
            dropped = sorted({v for line in text.splitlines() if "provides" in line
                              for v in line.split("provides", 1)[1].split()})
            same = points.get(frozenset(dropped)) == (bf, bp) if set(dropped) <= set(droppable) else False
            row.update(budget_flops=bf, budget_peak=bp, met=bp <= limit, budget_drop=dropped,
                       budget_in_family=same)
        rows.append(row)
    step_flops = None
    stats, _ = graph.run("recompute{mode=full},schedule,plan-buffers")
    if stats:
        step_flops = stats["recompute"].get("step-flops")
    print(f"{'limit B':>10} {'limit':>7} {'opt FLOPs':>12} {'budget FLOPs':>13} {'ratio':>7} {'met':>4} "
          f"{'in family':>9}  optimal drop / budget drop", flush=True)
    for r in rows:
        bf = r["budget_flops"]
        if bf is None:
            ratio = "-"
        elif r["opt_flops"] == 0:
            ratio = "1.000" if bf == 0 else "inf"
        else:
            ratio = f"{bf / r['opt_flops']:.3f}"
        print(f"{r['limit']:>10,} {r['limit_pct']:>6.1f}% {r['opt_flops']:>12,} "
              f"{'-' if bf is None else format(bf, ','):>13} {ratio:>7} {'yes' if r['met'] else 'NO':>4} "
              f"{str(r.get('budget_in_family', '-')):>9}  {' '.join(r['opt_drop']) or '(none)'} / "
              f"{' '.join(r.get('budget_drop', [])) or r.get('error', '(none)')}", flush=True)
    return dict(graph=graph.name, saved=saved, droppable=droppable, base_peak=base, smallest_peak=smallest,
                step_flops=step_flops, rows=rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gmopt-opt", default=os.path.join(ROOT, "build", "tools", "gmopt-opt"))
    parser.add_argument("--graph", action="append", default=[],
                        help="NAME=PATH[:DIM=N,...] (default: the two small graphs above)")
    parser.add_argument("--max-saved", type=int, default=13)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    graphs = []
    for spec in args.graph:
        name, rest = spec.split("=", 1)
        path, _, dims = rest.partition(":")
        graphs.append((name, path, dict(d.split("=") for d in dims.split(",")) if dims else {}))
    results = [r for r in (study(args, Graph(args, *g)) for g in graphs or DEFAULT_GRAPHS) if r]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
