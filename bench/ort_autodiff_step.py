#!/usr/bin/env python3
"""ONNX Runtime trains the training graphs gmopt's autodiff builds, with ONNX Runtime's own losses.

For each testdata model, gmopt-compile --train builds the training step from the forward
export (ONNX Runtime's eval_model.onnx: weights as inputs, loss included) and writes it as
ONNX; onnxruntime-training 1.19.2's training API then trains it for N AdamW steps from the
model's own checkpoint and optimizer graph, beside the training_model.onnx ONNX Runtime's
artifact generator made, on the same batch. The losses must agree (relative 1e-5; ONNX
Runtime's graph optimizations are off for both, so their kernels see the graphs as written).
Not part of CI (needs onnxruntime-training from PyPI):

    testdata/.venv/bin/python bench/ort_autodiff_step.py --build build --steps 5
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

from bench_support import ROOT

TESTDATA = os.path.join(ROOT, "testdata")
# model, dimension bindings, extra --train flags
MODELS = [
    ("mlp", ["batch=8"], []),
    ("cnn", ["batch=8"], []),
    ("resnet_tiny", ["batch=4"], []),
    ("gpt_tiny", ["batch=4", "batch_x_seq=256"], []),
    ("gpt_opset14", ["batch=4", "batch_x_seq=64"], []),
    ("bert_tiny", ["batch=4", "batch_x_seq=64"], []),
    ("llama_tiny", ["batch=4", "batch_x_seq=64"], ["--frozen=cos,sin"]),
    ("regression_frozen", ["batch=8"], ["--frozen=fc1.weight,fc1.bias"]),
]
# Not here: Resize models (tests/lit/autodiff/Inputs/unet_resize). Their training graphs hold
# com.microsoft ResizeGrad, which onnxruntime-training 1.19.2 implements on CUDA only (4-D,
# linear): its CPU session refuses them ("Could not find an implementation for ResizeGrad(1)").


def feeds_of(model):
    import onnx
    from onnx import numpy_helper
    feeds = {}
    for path in glob.glob(os.path.join(TESTDATA, model, "test_data_set_0", "input_*.pb")):
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        feeds[tensor.name] = numpy_helper.to_array(tensor)
    return feeds


def train(training_model, model, feeds, steps, lr):
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    state = CheckpointState.load_checkpoint(os.path.join(TESTDATA, model, "checkpoint"))
    module = Module(training_model, state, None, device="cpu", session_options=so)
    optimizer = Optimizer(os.path.join(TESTDATA, model, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(lr)
    module.train()
    losses = []
    for _ in range(steps):
        module.lazy_reset_grad()
        out = module(*[feeds[name] for name in module.input_names()])
        losses.append(float(np.asarray(out[0] if isinstance(out, (list, tuple)) else out)))
        optimizer.step()
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--models", default="", help="comma-separated subset")
    args = parser.parse_args()
    wanted = set(filter(None, args.models.split(",")))
    worst_all = 0.0
    print("| model | step losses, ORT's training_model.onnx | gmopt --train, trained by ORT | largest relative difference |")
    print("|---|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, dims, flags in MODELS:
            if wanted and model not in wanted:
                continue
            emitted = os.path.join(tmp, model + ".onnx")
            cmd = [os.path.join(args.build, "tools", "gmopt-compile"),
                   os.path.join(TESTDATA, model, "eval_model.onnx"), "--train", *flags,
                   "--passes=canonicalize", "-o", emitted]
            for dim in dims:
                cmd += ["--dim", dim]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{model}: {done.stderr.strip()}")
            feeds = feeds_of(model)
            reference = train(os.path.join(TESTDATA, model, "training_model.onnx"), model, feeds,
                              args.steps, args.lr)
            ours = train(emitted, model, feeds, args.steps, args.lr)
            worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(reference, ours))
            worst_all = max(worst_all, worst)
            print(f"| {model} | {' '.join(f'{x:.6f}' for x in reference)} | "
                  f"{' '.join(f'{x:.6f}' for x in ours)} | {worst:.1e} |")
    print(f"largest relative loss difference over all models: {worst_all:.2e}")
    sys.exit(0 if worst_all <= 1e-5 else 1)


if __name__ == "__main__":
    main()
