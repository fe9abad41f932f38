#!/usr/bin/env python3
"""Compiles the production-shape bench models with gmopt-compile and tabulates time and memory.

For each model of bench/models/ (built by bench/models/build.py: graphs only, the weights are graph
inputs and no weight file exists) and each batch x seq: gmopt-compile with the default pipeline (or
--passes), --time-compile and --report-json. The script first checks that the model folder holds
nothing but the ONNX graphs (no checkpoint, no external data). Prints one markdown table:

* nodes: of the imported training graph (training_model.onnx; with --optimizer-model the AdamW
  node of optimizer_model.onnx is merged in first);
* compile time in CPU seconds (gmopt-compile --time-compile; single-threaded, so on an idle
  machine the wall time; on a busy one the wall time also counts waiting for a core): import
  (reading and importing the ONNX file, then merging optimizer_model.onnx's AdamW), passes (every pass that does not write the plan),
  verify (the verifier after each pass), plan (the pass that writes the plan: plan-buffers), and
  the tool's whole run in CPU and wall seconds (also the second import the .gm container keeps for
  --baseline, the eager baseline and writing the .gm); the tool's peak RSS;
* bytes per category: parameters, gradients (accumulation buffers), optimizer state (persistent,
  from the plan), and the arena (activations, temporaries and kernel workspace, reused);
* the eager baseline of the imported graph (each tensor allocated at its definition, freed after
  its last use: what an eager framework allocates) and the planned peak (arena + persistent).

    python3 bench/compile_table.py --build build
    python3 bench/compile_table.py --build build-release --models gpt2_small --configs 8x1024
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# model folder under bench/models, symbolic dims of its graph, default batch x seq configurations
MODELS = {
    "gpt2_small": dict(dims=("batch", "seq", "batch_x_seq"), configs=["1x128", "8x1024"]),
    "bert_base": dict(dims=("batch", "seq"), configs=["8x128", "32x512"]),
    "resnet50": dict(dims=("batch",), configs=["2", "32"]),
    "llama7b": dict(dims=("batch", "seq", "batch_x_seq"), configs=["1x2048"]),
}
GRAPH_FILES = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"}


def dim_flags(dims, config):
    parts = [int(p) for p in config.split("x")]
    batch, seq = parts[0], parts[1] if len(parts) > 1 else None
    values = {"batch": batch, "seq": seq, "batch_x_seq": batch * seq if seq else None}
    flags = []
    for name in dims:
        if values.get(name) is None:
            sys.exit(f"configuration {config} gives no value for dimension {name}")
        flags.append(f"--dim={name}={values[name]}")
    return flags


def check_graphs_only(model_dir):
    """The point of the table: gmopt compiles these with no weights present."""
    extra = sorted(set(os.listdir(model_dir)) - GRAPH_FILES)
    if extra:
        sys.exit(f"{model_dir} holds more than the graphs ({extra}); rebuild it with bench/models/build.py")


def run_compile(tool, model_dir, flags, extra_args, tmp):
    """gmopt-compile once; returns (command, report JSON, peak RSS in bytes)."""
    report_path = os.path.join(tmp, "report.json")
    cmd = [tool, os.path.join(model_dir, "training_model.onnx"), "-o", os.path.join(tmp, "out.gm"),
           f"--optimizer-model={os.path.join(model_dir, 'optimizer_model.onnx')}", "--time-compile", f"--report-json={report_path}", *flags, *extra_args]
    with open(os.path.join(tmp, "stderr.txt"), "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        # wait4 gives this child's own peak RSS (RUSAGE_CHILDREN would give the largest so far).
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            sys.exit(f"failed ({code}): {' '.join(cmd)}\n{err.read()}")
    with open(report_path) as f:
        report = json.load(f)
    return cmd, report, usage.ru_maxrss * 1024


def cpu_seconds(report, kind):
    return report["compile_timing"]["cpu_seconds_by_kind"][kind]


def phase_cpu_seconds(report, name):
    return sum(p["cpu_seconds"] for p in report["compile_timing"]["phases"] if p["name"] == name)


def gib(value):
    return f"{value / 2**30:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory with tools/gmopt-compile")
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models"),
                        help="where bench/models/build.py wrote the models")
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), help="subset of the models")
    parser.add_argument("--configs", nargs="*", help="batch x seq configurations (e.g. 8x1024, or 32 for "
                        "ResNet-50) instead of each model's defaults")
    parser.add_argument("--passes", help="pipeline (default: gmopt-compile's default)")
    parser.add_argument("--repeat", type=int, default=1, help="compile each N times, report the fastest (default 1)")
    parser.add_argument("--json", help="also write every run's report here")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tools", "gmopt-compile")
    if not os.access(tool, os.X_OK):
        sys.exit(f"no {tool}: build gmopt first")
    extra = [f"--passes={args.passes}"] if args.passes else []

    header = ("model", "batch x seq", "nodes", "import s", "passes s", "verify s", "plan s", "tool CPU s",
              "tool wall s",
              "RSS GiB", "params GiB", "grads GiB", "opt. state GiB", "arena GiB", "eager baseline GiB",
              "planned peak GiB", "planned/eager")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            if args.models and name not in args.models:
                continue
            model_dir = os.path.join(args.models_dir, name)
            if not os.path.isdir(model_dir):
                print(f"| {name} | (not built: bench/models/build.py {name}) |", flush=True)
                continue
            check_graphs_only(model_dir)
            for config in args.configs or model["configs"]:
                flags = dim_flags(model["dims"], config)
                best = None
                for _ in range(args.repeat):
                    cmd, report, rss = run_compile(tool, model_dir, flags, extra, tmp)
                    total = report["compile_timing"]["total_cpu_seconds"]
                    if best is None or total < best[1]["compile_timing"]["total_cpu_seconds"]:
                        best = (cmd, report, rss)
                cmd, report, rss = best
                cat = report["persistent_by_category"]
                timing = report["compile_timing"]
                row = (name, config, report["imported_nodes"],
                       f"{phase_cpu_seconds(report, 'import') + phase_cpu_seconds(report, 'merge optimizer'):.3f}",
                       f"{cpu_seconds(report, 'pass'):.3f}", f"{cpu_seconds(report, 'verify'):.3f}",
                       f"{cpu_seconds(report, 'plan'):.3f}", f"{timing['total_cpu_seconds']:.3f}",
                       f"{timing['total_seconds']:.3f}",
                       gib(rss), gib(cat["parameters"]), gib(cat["gradients"]), gib(cat["optimizer_state"]),
                       gib(report["arena_bytes"]), gib(report["eager_baseline_bytes"]), gib(report["planned_bytes"]),
                       f"{report['planned_bytes'] / report['eager_baseline_bytes']:.2f}")
                print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
                results.append(dict(model=name, config=config, command=cmd, peak_rss_bytes=rss, report=report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
