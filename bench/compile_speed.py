#!/usr/bin/env python3
"""Compile speed of gmopt-compile's default pipeline against graph size, on real training graphs.

The graphs are deep narrow GPTs from ONNX Runtime's generator (bench/models/build.py --deep N:
GPT-2 blocks at d_model 64, about 109 training-graph nodes per layer: 9 layers give ~1k nodes, 92
~10k, 917 ~100k), compiled at batch 2 x seq 64 with the default pipeline. Per graph: the import,
each pass, the verifier after the rewriting passes (not after the planner), the plan
(plan-buffers), their sum (the default pipeline from ONNX bytes to a plan) and the tool's whole
run, in CPU seconds (gmopt-compile --time-compile; the compiler is single-threaded, so on an idle
machine these are its wall times), the fastest of
--repeat runs. The tool's second import of the same bytes (the unoptimized copy it stores in the
.gm container for gmopt-run --baseline) has its own column and counts in the tool's run, not in
the pipeline. The last column compares the growth of the pipeline time with n log n between
consecutive sizes: time ratio / (n2 log n2 / n1 log n1); at most about 1 means no worse than n log n.

    python3 bench/compile_speed.py --build build --layers 9 92 917
"""

import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_table  # noqa: E402

ROOT = compile_table.ROOT
PIPELINE_KINDS = ("import", "pass", "verify", "plan")
# gmopt-compile's copy of the input for the .gm container: an import phase of the tool, not of the
# pipeline that turns the ONNX bytes into a plan.
CONTAINER_COPY = "import original (for the container and baseline)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory with tools/gmopt-compile")
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models"))
    parser.add_argument("--layers", type=int, nargs="+", default=[9, 92, 917],
                        help="deep_gpt_N models to time (built with bench/models/build.py --deep N)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per graph; the fastest is shown (default 3)")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tools", "gmopt-compile")
    if not os.access(tool, os.X_OK):
        sys.exit(f"no {tool}: build gmopt first")
    flags = compile_table.dim_flags(("batch", "seq", "batch_x_seq"), "2x64")

    rows, passes = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for layers in args.layers:
            model_dir = os.path.join(args.models_dir, f"deep_gpt_{layers}")
            if not os.path.isdir(model_dir):
                sys.exit(f"{model_dir} missing: bench/models/build.py --deep {layers}")
            compile_table.check_graphs_only(model_dir)
            best = None
            for _ in range(args.repeat):
                _, report, rss = compile_table.run_compile(tool, model_dir, flags, [], tmp)
                timing = report["compile_timing"]
                pipeline = sum(p["cpu_seconds"] for p in timing["phases"]
                               if p["kind"] in PIPELINE_KINDS and p["name"] != CONTAINER_COPY)
                # The optimizer merge is part of the import.
                if best is None or pipeline < best[0]:
                    best = (pipeline, report, rss)
            pipeline, report, rss = best
            phases = report["compile_timing"]["phases"]
            if passes is None:
                passes = [p["name"] for p in phases if p["kind"] in ("pass", "plan")]
            per_phase = {}
            for p in phases:
                per_phase[p["name"]] = per_phase.get(p["name"], 0.0) + p["cpu_seconds"]
            rows.append(dict(layers=layers, nodes=report["imported_nodes"], pipeline=pipeline,
                             total=report["compile_timing"]["total_cpu_seconds"],
                             wall=report["compile_timing"]["total_seconds"], rss=rss,
                             import_s=per_phase["import"] + per_phase.get("merge optimizer", 0.0),
                             copy=per_phase.get(CONTAINER_COPY, 0.0),
                             verify=per_phase.get("(verifier)", 0.0),
                             passes={name: per_phase.get(name, 0.0) for name in passes}))

    header = (["layers", "nodes", "import"] + passes +
              ["verifier", "pipeline", "copy for .gm", "tool CPU", "tool wall", "RSS MiB", "growth / n log n"])
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---:"] * len(header)) + "|")
    previous = None
    for row in rows:
        growth = ""
        if previous:
            n1, n2 = previous["nodes"], row["nodes"]
            growth = f"{(row['pipeline'] / previous['pipeline']) / ((n2 * math.log(n2)) / (n1 * math.log(n1))):.2f}"
        cells = ([row["layers"], row["nodes"], f"{row['import_s']:.3f}"] +
                 [f"{row['passes'][name]:.3f}" for name in passes] +
                 [f"{row['verify']:.3f}", f"{row['pipeline']:.3f}", f"{row['copy']:.3f}", f"{row['total']:.3f}", f"{row['wall']:.3f}",
                  f"{row['rss'] / 2**20:.0f}", growth])
        print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
        previous = row


if __name__ == "__main__":
    main()
