#!/usr/bin/env python3
"""Per-rank planned peak of data-parallel training at ZeRO stages 0, 1 and 2, without the machines.

`gmopt-compile --ranks N --zero S` places the data-parallel collectives for a world of N ranks and
plans ONE rank: the graph is the same on every rank, and the pass needs N only as a number (the
MPI world exists only at run time). This table compiles each bench model at 8, 64 and 1024 ranks
and each stage with the default pipeline and AdamW in the graph, and prints the per-rank planned
peak (arena + persistent) with the persistent bytes by category from --report-json.

Models: GPT-2 small, BERT-base and ResNet-50 from bench/models/build.py (`--models DIR`, default
/work/models; each skipped when absent), and the full 7B Llama decoder (32 layers, d_model 4096,
32 heads, FFN 11008, vocabulary 32000, sequence 2048, batch 1) built by
tests/lit/autodiff/Inputs/llama_forward.py (`--llama-layers`, default 32) and compiled with
--train (no weights): the whole decoder is compiled and planned, no figure is extrapolated from
fewer layers (one compile takes seconds and a few hundred MB: only shapes are read).

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
    "bert_base": ["--dim", "batch=32", "--dim", "seq=512"],
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
    parser.add_argument("--llama-layers", type=int, default=32,
                        help="decoder layers of the 7B-width Llama (default 32, the whole 7B)")
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
        gmir = os.path.join(tmp, "llama.gmir")
        onnx = os.path.join(tmp, "llama.onnx")
        with open(gmir, "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "lit", "autodiff", "Inputs",
                                                         "llama_forward.py"),
                            "--layers", str(args.llama_layers)], stdout=f, check=True)
        subprocess.run([opt_tool, gmir, "-o", onnx], check=True)
        inputs.append(("llama7b (%d layers)" % args.llama_layers, [onnx, *LLAMA_TRAIN]))
        for name, model_args in inputs:
            for ranks in ranks_list:
                for stage in (0, 1, 2):
                    doc = compile_json(compile_tool, model_args, ranks, stage, tmp)
                    assert doc["ranks"] == ranks and doc["zero_stage"] == stage, doc["ranks"]
                    print(row(name, ranks, stage, doc), flush=True)


if __name__ == "__main__":
    main()
