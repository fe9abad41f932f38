#!/usr/bin/env python3
"""ONNX Runtime trains gmopt's weight-tied graph: gpt_tiny_untied after tie-weights follows gpt_tiny.

gpt_tiny_untied is gpt_tiny exported with torch's constant folding, which stored the LM head as a
transposed copy of the token embedding (PyTorch issue 108342): ONNX Runtime trains two weights
that drift apart. gmopt-compile ties them (tie-weights, values from the model's own ORT
checkpoint through --weights) and writes the rewritten graph as ONNX; this script makes the
matching checkpoint (the original one without the copy, onnxblock.save_checkpoint) and trains
N AdamW steps in onnxruntime-training 1.19.2's training API, beside gpt_tiny's and
gpt_tiny_untied's own artifacts on the same batch. The tied losses must equal gpt_tiny's.
Not part of CI (needs onnxruntime-training from PyPI):

    testdata/.venv/bin/python bench/ort_tied_step.py --build build --steps 5
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

from bench_support import ROOT

TESTDATA = os.path.join(ROOT, "testdata")


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


def train(training_model, checkpoint, eval_model, optimizer_model, feeds, steps, lr):
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    state = CheckpointState.load_checkpoint(checkpoint)
    module = Module(training_model, state, eval_model, device="cpu", session_options=so)
    optimizer = Optimizer(optimizer_model, module)
    optimizer.set_learning_rate(lr)
    module.train()
    losses = []
    for _ in range(steps):
        module.lazy_reset_grad()
        out = module(*[feeds[name] for name in module.input_names()])
        losses.append(float(np.asarray(out[0] if isinstance(out, (list, tuple)) else out)))
        optimizer.step()
    return losses, len(module.input_names())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnxruntime.training import onnxblock
    from onnxruntime.training.api import CheckpointState

    untied = os.path.join(TESTDATA, "gpt_tiny_untied")
    tiny = os.path.join(TESTDATA, "gpt_tiny")
    with tempfile.TemporaryDirectory() as tmp:
        tied = os.path.join(tmp, "tied.onnx")
        cmd = [os.path.join(args.build, "tools", "gmopt-compile"),
               os.path.join(untied, "training_model.onnx"), "-o", tied,
               "--weights", os.path.join(untied, "checkpoint"), "--dim", "batch=4",
               "--dim", "batch_x_seq=256", "--pass-statistics",
               "--passes=canonicalize,tie-weights{print-plan=true},fold-transpose,schedule"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr)
        for line in done.stderr.splitlines():
            if line.startswith("tie-weights: tied") or "bytes-removed" in line:
                print(line.strip())
        inputs = {i.name for i in onnx.load(tied).graph.input}
        state = CheckpointState.load_checkpoint(os.path.join(untied, "checkpoint"))
        trainable, frozen, dropped = [], [], []
        for name, param in state.parameters:
            if name not in inputs:
                dropped.append(name)
                continue
            tensor = numpy_helper.from_array(np.array(param.data), name)
            (trainable if param.requires_grad else frozen).append(tensor)
        checkpoint = os.path.join(tmp, "tied_checkpoint")
        onnxblock.save_checkpoint((trainable, frozen), checkpoint)
        runs = [
            ("gpt_tiny (tied in torch)", train(os.path.join(tiny, "training_model.onnx"),
                                               os.path.join(tiny, "checkpoint"),
                                               os.path.join(tiny, "eval_model.onnx"),
                                               os.path.join(tiny, "optimizer_model.onnx"),
                                               feeds_of("gpt_tiny"), args.steps, args.lr)),
            ("gpt_tiny_untied", train(os.path.join(untied, "training_model.onnx"),
                                      os.path.join(untied, "checkpoint"),
                                      os.path.join(untied, "eval_model.onnx"),
                                      os.path.join(untied, "optimizer_model.onnx"),
                                      feeds_of("gpt_tiny_untied"), args.steps, args.lr)),
            ("gpt_tiny_untied + tie-weights", train(tied, checkpoint, None,
                                                    os.path.join(untied, "optimizer_model.onnx"),
                                                    feeds_of("gpt_tiny_untied"), args.steps,
                                                    args.lr)),
        ]
    print(f"checkpoint without: {', '.join(dropped)}")
    print("| graph | ORT inputs | " + " | ".join(f"loss {k}" for k in range(args.steps)) + " |")
    print("|---|---:|" + "---:|" * args.steps)
    for name, (losses, count) in runs:
        print(f"| {name} | {count} | " + " | ".join(f"{x:.6f}" for x in losses) + " |")
    reference, tied_losses = runs[0][1][0], runs[2][1][0]
    worst = max(abs(a - b) / abs(a) for a, b in zip(reference, tied_losses))
    print(f"tied vs gpt_tiny: largest relative loss difference {worst:.2e}")
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    main()
