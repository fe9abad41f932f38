"""One training script, two runtimes: ONNX Runtime 1.19.2's training API and
gmopt.training.api, on the same artifacts, compared loss by loss.

The script below (``train``) is written for ``onnxruntime.training.api``: a
CheckpointState, a Module with its eval model, an Optimizer, and per step
``lazy_reset_grad``, a training step and ``optimizer.step()`` (with
``--scheduler W,T`` a LinearLRScheduler too). It runs twice, unchanged but for
the module it is handed: in ONNX Runtime (testdata/.venv's Python, which has
onnxruntime-training 1.19.2; Debian's Python 3.11 has no such wheel) and in
gmopt (this interpreter). The two exchange the batch and the losses as .npy
files in a temporary folder. Prints both loss columns per model and the
largest difference (target: at most 1e-5 relative).

    PYTHONPATH=python:build/python /usr/bin/python3 bench/ort_training_api.py
    ... --models gpt_tiny bert_tiny cnn_bn --steps 20 --threads 1 --scheduler 5,20
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORT_PYTHON = os.path.join(ROOT, "testdata", ".venv", "bin", "python")


def train(api, artifacts, batch, steps, scheduler, threads, module_kwargs=None):
    """The user's training loop, written against onnxruntime.training.api
    (``api`` is that module or gmopt.training.api). Returns the losses and
    the seconds per step (after the first)."""
    state = api.CheckpointState.load_checkpoint(os.path.join(artifacts, "checkpoint"))
    module = api.Module(os.path.join(artifacts, "training_model.onnx"), state,
                        os.path.join(artifacts, "eval_model.onnx"), device="cpu",
                        **(module_kwargs or {}))
    optimizer = api.Optimizer(os.path.join(artifacts, "optimizer_model.onnx"), module)
    lr_scheduler = None
    if scheduler:
        warmup, total = scheduler
        lr_scheduler = api.LinearLRScheduler(optimizer, warmup, total, optimizer.get_learning_rate())
    inputs = [batch[name] for name in module.input_names()]
    module.train()
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        module.lazy_reset_grad()
        losses.append(float(module(*inputs)))
        optimizer.step()
        if lr_scheduler is not None:
            lr_scheduler.step()
        times.append(time.perf_counter() - start)
    module.eval()
    eval_loss = float(module(*inputs))
    return np.array(losses + [eval_loss]), float(np.median(times[1:])) if steps > 1 else times[0]


def ort_worker(folder, models, steps, scheduler, threads):
    """The ONNX Runtime side (run under testdata/.venv/bin/python)."""
    import onnxruntime
    from onnxruntime.training import api
    onnxruntime.set_default_logger_severity(3)
    kwargs = {}
    if threads:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        kwargs["session_options"] = options
    timing = {}
    for model in models:
        batch = dict(np.load(os.path.join(folder, f"{model}.batch.npz")))
        losses, seconds = train(api, os.path.join(ROOT, "testdata", model), batch, steps, scheduler,
                                threads, kwargs)
        np.save(os.path.join(folder, f"{model}.ort.npy"), losses)
        timing[model] = seconds
    with open(os.path.join(folder, "ort_timing.json"), "w") as f:
        json.dump({"version": onnxruntime.__version__, "seconds_per_step": timing}, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["gpt_tiny", "bert_tiny", "cnn_bn"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of both runtimes (0: all)")
    parser.add_argument("--scheduler", help="WARMUP,TOTAL: add a LinearLRScheduler (ONNX Runtime's argument order)")
    parser.add_argument("--ort-python", default=ORT_PYTHON, help="a Python with onnxruntime-training 1.19.2")
    parser.add_argument("--ort-worker", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scheduler = tuple(int(v) for v in args.scheduler.split(",")) if args.scheduler else None

    if args.ort_worker:
        ort_worker(args.ort_worker, args.models, args.steps, scheduler, args.threads)
        return 0

    if not os.path.exists(args.ort_python):
        print(f"ort_training_api: {args.ort_python} not found (scripts/testdata-env.sh makes it)", file=sys.stderr)
        return 1
    gmopt = importlib.import_module("gmopt")
    gmopt_api = importlib.import_module("gmopt.training.api")
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            batch = gmopt.read_test_data_set(os.path.join(ROOT, "testdata", model, "test_data_set_0"))
            np.savez(os.path.join(folder, f"{model}.batch.npz"), **batch)
        command = [args.ort_python, os.path.abspath(__file__), "--ort-worker", folder, "--models", *args.models,
                   "--steps", str(args.steps), "--threads", str(args.threads)]
        if args.scheduler:
            command += ["--scheduler", args.scheduler]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        with open(os.path.join(folder, "ort_timing.json")) as f:
            ort_timing = json.load(f)
        worst = 0.0
        print(f"onnxruntime-training {ort_timing['version']} vs gmopt.training.api, {args.steps} AdamW steps, "
              f"threads {args.threads}" + (f", LinearLRScheduler{scheduler}" if scheduler else ""))
        for model in args.models:
            batch = dict(np.load(os.path.join(folder, f"{model}.batch.npz")))
            ours, seconds = train(gmopt_api, os.path.join(ROOT, "testdata", model), batch, args.steps, scheduler,
                                  args.threads, {"threads": args.threads})
            theirs = np.load(os.path.join(folder, f"{model}.ort.npy"))
            print(f"\n{model}\n  step  onnxruntime      gmopt            |diff|     rel")
            for step, (a, b) in enumerate(zip(theirs, ours)):
                label = "eval" if step == args.steps else f"{step:4d}"
                rel = abs(a - b) / max(abs(a), 1e-30)
                worst = max(worst, rel)
                print(f"  {label}  {a:.9f}  {b:.9f}  {abs(a - b):.3e}  {rel:.2e}")
            diff = np.abs(theirs - ours)
            print(f"  max |diff| {diff.max():.3e}, max relative {np.max(diff / np.abs(theirs)):.3e}; "
                  f"median step: onnxruntime {ort_timing['seconds_per_step'][model] * 1e3:.1f} ms, "
                  f"gmopt {seconds * 1e3:.1f} ms")
        verdict = "within" if worst <= 1e-5 else "BEYOND"
        print(f"\nlargest relative loss difference over all models: {worst:.3e} ({verdict} 1e-5)")
        return 0 if worst <= 1e-5 else 2


if __name__ == "__main__":
    sys.exit(main())
