#!/usr/bin/env python3
"""ONNX Runtime trains gmopt's mixed-precision graph: one step through its training API.

For each testdata model: gmopt-compile writes the training graph rewritten by
amp{dtype=D} (fp16 with dynamic loss scaling by default) as ONNX; ONNX Runtime's training
API (onnxruntime-training 1.19.2) loads it unchanged with the model's own checkpoint, eval
model and optimizer model, runs one step on test_data_set_0 and one optimizer step. The
script prints the loss, amp.found_inf and the largest parameter change next to the same step
of the original (fp32) graph in ONNX Runtime: the step must run, be finite, and agree with
fp32 within the dtype's tolerance. Not part of CI (needs onnxruntime-training from PyPI):

    testdata/.venv/bin/python bench/ort_amp_step.py --build build --models mlp gpt_tiny

ONNX Runtime's CPU execution provider has fp16 kernels for the products (and inserts casts
around ops it lacks in fp16); it has no bf16 kernels, so bf16 graphs need its CUDA
provider and are refused here with ONNX Runtime's own message.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

from bench_support import ROOT, TESTDATA_DIMS as DIMS


def compile_amp(build, model, dtype, out):
    cmd = [os.path.join(build, "tools", "gmopt-compile"),
           os.path.join(ROOT, "testdata", model, "training_model.onnx"), "-o", out,
           "--passes=canonicalize,fold-transpose,amp{dtype=" + dtype + "},schedule"]
    for dim in DIMS.get(model, []):
        cmd += ["--dim", dim]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def one_step(training_model, model_dir, feeds):
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    so = ort.SessionOptions()
    so.log_severity_level = 3
    state = CheckpointState.load_checkpoint(os.path.join(model_dir, "checkpoint"))
    before = {name: np.array(p.data) for name, p in state.parameters}
    module = Module(training_model, state, os.path.join(model_dir, "eval_model.onnx"),
                    device="cpu", session_options=so)
    optimizer = Optimizer(os.path.join(model_dir, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(1e-3)
    module.train()
    names = module.input_names()
    outputs = module(*[feeds[name] for name in names])
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    optimizer.step()
    after = {name: np.array(p.data) for name, p in state.parameters}
    change = max(float(np.max(np.abs(after[n].astype(np.float64) - before[n]))) for n in before)
    return dict(zip(module.output_names(), outputs)), change, names


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models", nargs="+", default=["mlp", "gpt_tiny"])
    parser.add_argument("--dtype", default="fp16")
    args = parser.parse_args()
    import numpy as np
    import onnx
    from onnx import numpy_helper

    failures = 0
    print(f"| model | variant | ORT inputs | loss | found_inf | largest parameter change |")
    print("|---|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            model_dir = os.path.join(ROOT, "testdata", model)
            feeds = {}
            for path in glob.glob(os.path.join(model_dir, "test_data_set_0", "input_*.pb")):
                tensor = onnx.TensorProto()
                with open(path, "rb") as f:
                    tensor.ParseFromString(f.read())
                feeds[tensor.name] = numpy_helper.to_array(tensor)
            amp = os.path.join(tmp, f"{model}-{args.dtype}.onnx")
            compile_amp(args.build, model, args.dtype, amp)
            graph = onnx.load(amp).graph
            for init in graph.initializer:  # the loss-scale state's initial values
                if init.name.startswith("loss_scale"):
                    feeds[init.name] = numpy_helper.to_array(init)
            rows = {}
            for variant, path in [("fp32", os.path.join(model_dir, "training_model.onnx")),
                                  (args.dtype, amp)]:
                try:
                    outputs, change, names = one_step(path, model_dir, feeds)
                except Exception as err:  # ORT's message says what it lacks
                    print(f"| {model} | {variant} | | ORT failed: {' '.join(str(err).split())[-300:]} | | |")
                    failures += 1
                    continue
                loss = float(np.asarray(list(outputs.values())[0]))
                found = outputs.get("amp.found_inf")
                extra = [n for n in names if n.startswith("loss_scale")]
                rows[variant] = (loss, change)
                print(f"| {model} | {variant} | {len(names)} ({', '.join(extra) or 'no scaler state'}) | "
                      f"{loss:.6f} | {'' if found is None else bool(np.asarray(found))} | {change:.3g} |")
                if not np.isfinite(loss) or (found is not None and bool(np.asarray(found))):
                    failures += 1
            if len(rows) == 2:
                (l32, c32), (l16, c16) = rows["fp32"], rows[args.dtype]
                print(f"| {model} | difference | | {abs(l16 - l32) / abs(l32):.2e} (relative) | | "
                      f"{abs(c16 - c32) / max(c32, 1e-30):.2e} (relative) |")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
