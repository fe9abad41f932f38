"""Helpers the compile-time bench tables share (recompute_table.py, amp_table.py, ...)."""

import json
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The reference batch's dimension bindings of each testdata graph (tests/unit/TestdataTraining.h).
TESTDATA_DIMS = {
    "mlp": ["batch=8"], "cnn": ["batch=8"], "resnet_tiny": ["batch=4"], "regression_frozen": ["batch=8"],
    "cnn_bn": ["batch=4"], "gpt_tiny": ["batch=4", "batch_x_seq=256"],
    "gpt_tiny_untied": ["batch=4", "batch_x_seq=256"], "bert_tiny": ["batch=4", "batch_x_seq=64"],
    "llama_tiny": ["batch=4", "batch_x_seq=64"]}


def size(nbytes):
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def dims_for(shape):
    """--dim flags for BATCHxSEQ (token models) or BATCH (image models)."""
    if "x" in shape:
        batch, seq = (int(v) for v in shape.split("x"))
        return ["--dim", f"batch={batch}", "--dim", f"seq={seq}", "--dim", f"batch_x_seq={batch * seq}"]
    return ["--dim", f"batch={int(shape)}"]


def compile_report(tool, model, shape, pipeline, tmp):
    """gmopt-compile MODEL/training_model.onnx with PIPELINE: ((report json, seconds), None) or
    (None, the last line of its error)."""
    report = os.path.join(tmp, "report.json")
    cmd = [tool, os.path.join(model, "training_model.onnx"), *dims_for(shape),
           "--passes=" + pipeline, "--report-json", report, "-o", os.path.join(tmp, "out.gm")]
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        return None, (result.stderr.strip().splitlines() or ["failed"])[-1]
    with open(report) as f:
        doc = json.load(f)
    os.remove(report)
    return (doc, seconds), None
