#!/usr/bin/env python3
"""Per-rank planned peak of data-parallel training at ZeRO stages 0, 1 and 2, without the machines.

`gmopt-compile --ranks N --zero S` places the data-parallel collectives for a world of N ranks and
plans ONE rank: the graph is the same on every rank, and the pass needs N only as a number (the
MPI world exists only at run time). This table compiles each bench model at 8, 64 and 1024 ranks
and each stage with the default pipeline and AdamW in the graph, and prints the per-rank planned
peak (arena + persistent) with the persistent bytes by category from --report-json.

Models: GPT-2 small and ResNet-50 from bench/models/build.py (`--models DIR`, default
/work/models; skipped when absent), and the 7B-width Llama decoder (d_model 4096, 32 heads, FFN
11008, vocabulary 32000, sequence 2048) built by tests/lit/autodiff/Inputs/llama_forward.py at 1 and
2 layers with --train (no weights): the table shows the 2-layer graph, and the per-layer
difference (2 layers minus 1) scaled to 32 layers gives the full 7B estimate, stated as such.

    python3 bench/zero_table.py --build build [--models /work/models] [--ranks 8,64,1024]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30

MODELS = {
    "gpt2_small": ["--dim", "batch=8", "--dim", "seq=1024", "--dim", "batch_x_seq=8192"],
    "resnet50": ["--dim", "batch=32"],
}
LLAMA_TRAIN = ["--train", "--loss=cross-entropy:logits", "--frozen=cos,sin", "--optimizer=adamw"]


def compile_json(tool, model_args, ranks, stage, tmp):
    report = os.path.join(tmp, "report.json")
    cmd = [tool, *model_args, "--report-json", report, "-o", os.path.join(tmp, "out.gm")]
    if ranks > 1:
        cmd += ["--ranks", str(ranks), "--zero", str(stage)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("%s failed: %s" % (" ".join(cmd), result.stderr.strip()[-400:]))
    with open(report) as f:
        return json.load(f)


def gib(nbytes):
    return "%.2f" % (nbytes / GIB)


def row(name, ranks, stage, doc):
    cat = doc["persistent_by_category"]
    return "| %s | %d | %d | %s | %s | %s | %s | %s |" % (
        name, ranks, stage, gib(doc["planned_bytes"]), gib(cat["parameters"]),
        gib(cat["gradients"]), gib(cat["optimizer_state"]), gib(doc["arena_bytes"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", default="/work/models")
    parser.add_argument("--ranks", default="8,64,1024")
    args = parser.parse_args()
    compile_tool = os.path.join(args.build, "tools", "gmopt-compile")
    opt_tool = os.path.join(args.build, "tools", "gmopt-opt")
    ranks_list = [int(r) for r in args.ranks.split(",")]
    print("| model | ranks | ZeRO | per-rank planned peak GiB | parameters | gradients | "
          "optimizer state | arena |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        inputs = []
        for name, dims in MODELS.items():
            folder = os.path.join(args.models, name)
            if not os.path.exists(os.path.join(folder, "training_model.onnx")):
                print("(%s skipped: no %s)" % (name, folder), file=sys.stderr)
                continue
            inputs.append((name, [os.path.join(folder, "training_model.onnx"), "--optimizer-model",
                                  os.path.join(folder, "optimizer_model.onnx"), *dims]))
        llama = {}
        for layers in (1, 2):
            gmir = os.path.join(tmp, "llama%d.gmir" % layers)
            onnx = os.path.join(tmp, "llama%d.onnx" % layers)
            with open(gmir, "w") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "tests", "lit", "autodiff",
                                                             "Inputs", "llama_forward.py"),
                                "--layers", str(layers)], stdout=f, check=True)
            subprocess.run([opt_tool, gmir, "-o", onnx], check=True)
            llama[layers] = [onnx, *LLAMA_TRAIN]
        inputs.append(("llama7b (2 layers)", llama[2]))
        per_layer = {}
        for name, model_args in inputs:
            for ranks in ranks_list:
                for stage in (0, 1, 2):
                    doc = compile_json(compile_tool, model_args, ranks, stage, tmp)
                    assert doc["ranks"] == ranks and doc["zero_stage"] == stage, doc["ranks"]
                    print(row(name, ranks, stage, doc), flush=True)
                    if name.startswith("llama"):
                        one = compile_json(compile_tool, llama[1], ranks, stage, tmp)
                        per_layer[(ranks, stage)] = (one["planned_bytes"], doc["planned_bytes"])
        print()
        print("7B-width decoder at 32 layers, estimated as the 2-layer plan plus 30 x (2 layers - "
              "1 layer) per rank:")
        print()
        print("| ranks | ZeRO | one layer GiB | estimated 32-layer per-rank peak GiB |")
        print("|---:|---:|---:|---:|")
        for (ranks, stage), (one, two) in sorted(per_layer.items()):
            print("| %d | %d | %s | %s |" % (ranks, stage, gib(two - one), gib(two + 30 * (two - one))))


if __name__ == "__main__":
    main()
