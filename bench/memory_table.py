#!/usr/bin/env python3
"""Memory figures of every bundled training graph, planned and measured.

For each testdata graph: gmopt-compile with the default pipeline (or
--passes) writes a .gm and its plan report; gmopt-run trains one step from
the plan and runs the original graph eagerly (--baseline). Prints LOAD,
arena, arena/LOAD, the planned peak against the eager estimate of the
original graph, and the measured peaks (planned mode vs eager), which must
agree with the plan.

    python3 bench/memory_table.py --build build
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

# name, batch (ONNX Runtime's reference batch), sequence length of the token graphs
# (batch_x_seq = batch * seq; unused by the others)
MODELS = [
    ("mlp", 8, 1),
    ("cnn", 8, 1),
    ("resnet_tiny", 4, 1),
    ("gpt_tiny", 4, 64),
    ("gpt_tiny_untied", 4, 64),
    ("gpt_tiny_dropout", 4, 64),
    ("gpt_opset14", 4, 16),
    ("gpt_opset20", 4, 16),
    ("regression_frozen", 8, 1),
    ("bert_tiny", 4, 16),
    ("llama_tiny", 4, 16),
    ("cnn_bn", 4, 1),  # static batch: the bindings are unused
]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(root, "build"),
                        help="build directory with tools/gmopt-compile and gmopt-run")
    parser.add_argument("--passes", help="pipeline (default: gmopt-compile's)")
    parser.add_argument("--models", nargs="*", help="subset of the graphs")
    args = parser.parse_args()
    compile_tool = os.path.join(args.build, "tools", "gmopt-compile")
    run_tool = os.path.join(args.build, "tools", "gmopt-run")
    header = ("model", "LOAD", "arena", "x LOAD", "planned", "eager est.",
              "planned/eager", "measured", "meas. eager", "meas./eager")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch, seq in MODELS:
            if args.models and name not in args.models:
                continue
            model_dir = os.path.join(root, "testdata", name)
            data = os.path.join(model_dir, "test_data_set_0")
            if name == "gpt_tiny_dropout":
                data = os.path.join(root, "testdata", "gpt_tiny", "test_data_set_0")
            gm = os.path.join(tmp, name + ".gm")
            plan_json = os.path.join(tmp, name + ".plan.json")
            run_json = os.path.join(tmp, name + ".run.json")
            cmd = [compile_tool, os.path.join(model_dir, "training_model.onnx"),
                   "--dim", f"batch={batch}", "--dim", f"batch_x_seq={batch * seq}",
                   "--optimizer", "sgd", "-o", gm, "--report-json", plan_json]
            # The whole step (SGD in the graph, as gmopt-run adds it to a
            # .gm without one), so the plan is the one the run executes.
            if args.passes is not None:
                cmd.append("--passes=" + args.passes)
            run(cmd)
            run([run_tool, gm, "--backend=cpu", "--threads", "1", "--steps", "1",
                 "--inputs", data, "--baseline", "--report-json", run_json])
            with open(plan_json) as f:
                plan = json.load(f)
            with open(run_json) as f:
                report = json.load(f)
            planned = plan["arena_bytes"] + plan["persistent_bytes"]
            eager = plan["eager_baseline_bytes"]
            measured = report["optimized"]["peak_bytes"]
            measured_eager = report["baseline"]["peak_bytes"]
            row = (name, plan["lower_bound_bytes"], plan["arena_bytes"],
                   f"{plan['arena_bytes'] / plan['lower_bound_bytes']:.4f}",
                   planned, eager, f"{100.0 * planned / eager:.1f}%",
                   measured, measured_eager,
                   f"{100.0 * measured / measured_eager:.1f}%")
            print("| " + " | ".join(str(v) for v in row) + " |")


if __name__ == "__main__":
    main()
