#!/usr/bin/env python3
"""Time one training step of every testdata graph: ONNX Runtime vs gmopt-run.

For each testdata/<model>/training_model.onnx with reference data, the same
step (forward + backward + gradient accumulation, no optimizer) is timed
twice in one process run:

* ONNX Runtime: a plain InferenceSession on the CPU execution provider with
  intra_op_num_threads=THREADS and sequential execution, fed the
  test_data_set_0 inputs (zeros for the accumulation buffers that are not
  stored); WARMUP untimed runs, then STEPS timed session.run calls.
* gmopt: `gmopt-run MODEL --inputs test_data_set_0 --backend=cpu
  --threads THREADS --optimizer=none --steps WARMUP+STEPS --report-json F
  [--passes PIPELINE]`, whose per-step times come from the executor's own
  clock (runStep only, like session.run); the first WARMUP steps are dropped.

Rounds alternate the two so background load hits both alike. The table shows
the median step time of each and the ratio gmopt / ORT (< 1: gmopt faster).

Run with the testdata virtual environment (it has onnxruntime-training):

    testdata/.venv/bin/python bench/ort_compare.py --gmopt-run build/tools/gmopt-run

Not a test: numbers depend on the machine and its load.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "testdata")
MODELS = ["mlp", "cnn", "resnet_tiny", "gpt_tiny", "gpt_tiny_untied",
          "gpt_opset14", "gpt_opset20", "regression_frozen"]


def ort_feeds(model_dir):
    """Every graph input of the training graph, from test_data_set_0."""
    data_dir = os.path.join(model_dir, "test_data_set_0")
    with open(os.path.join(data_dir, "manifest.json")) as f:
        manifest = json.load(f)
    feeds = {}
    for entry in manifest["inputs"]:
        if entry["file"] is None:
            dtype = np.dtype(entry["dtype"])
            feeds[entry["name"]] = np.zeros(entry["shape"], dtype=dtype)
            continue
        tensor = onnx.TensorProto()
        with open(os.path.join(data_dir, entry["file"]), "rb") as f:
            tensor.ParseFromString(f.read())
        feeds[entry["name"]] = onnx.numpy_helper.to_array(tensor)
    return feeds


def time_ort(model_path, feeds, threads, warmup, steps, spinning):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model_path, options,
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = {name: feeds[name] for name in names}
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        session.run(None, feeds)
        elapsed = (time.perf_counter() - start) * 1e3
        if step >= warmup:
            times.append(elapsed)
    return times


def time_gmopt(gmopt_run, model_dir, threads, warmup, steps, extra_env, passes):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        command = [gmopt_run, os.path.join(model_dir, "training_model.onnx"),
                   "--inputs", os.path.join(model_dir, "test_data_set_0"),
                   "--backend=cpu", "--threads", str(threads),
                   "--optimizer=none", "--steps", str(warmup + steps),
                   "--report-json", report]
        if passes:
            command.append("--passes=" + passes)
        env = dict(os.environ, **extra_env)
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            message = (result.stderr.strip().splitlines() or ["?"])[-1]
            return None, message
        with open(report) as f:
            times = json.load(f)["optimized"]["micro_step_ms"]
        return times[warmup:], None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gmopt-run", default=os.path.join(ROOT, "build", "tools", "gmopt-run"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--passes", default="",
                        help="gmopt-run --passes (default: gmopt-run's, "
                             "which is gmopt-compile's default pipeline; e.g. "
                             "canonicalize for the graph as imported)")
    parser.add_argument("--no-spinning", action="store_true",
                        help="ORT: session.intra_op.allow_spinning=0; gmopt: "
                             "OMP_WAIT_POLICY=passive (fairer on a loaded machine)")
    args = parser.parse_args()
    if not os.access(args.gmopt_run, os.X_OK):
        sys.exit(f"ort_compare.py: error: {args.gmopt_run}: not an executable "
                 "(build gmopt-run or pass --gmopt-run)")
    extra_env = {"OMP_WAIT_POLICY": "passive"} if args.no_spinning else {}

    print(f"onnxruntime {ort.__version__}, threads {args.threads}, "
          f"{args.rounds} rounds x {args.steps} steps (+{args.warmup} warm-up), "
          f"spinning {'off' if args.no_spinning else 'on (defaults)'}, "
          f"gmopt passes {args.passes or 'default'}, "
          f"load average {os.getloadavg()[0]:.1f}")
    header = f"{'model':<20}{'ORT ms':>10}{'gmopt ms':>10}{'gmopt/ORT':>11}"
    print(header)
    print("-" * len(header))
    for name in args.models:
        model_dir = os.path.join(TESTDATA, name)
        model_path = os.path.join(model_dir, "training_model.onnx")
        feeds = ort_feeds(model_dir)
        ort_times, gmopt_times, failure = [], [], None
        for _ in range(args.rounds):
            ort_times += time_ort(model_path, feeds, args.threads, args.warmup,
                                  args.steps, not args.no_spinning)
            times, failure = time_gmopt(args.gmopt_run, model_dir, args.threads,
                                        args.warmup, args.steps, extra_env,
                                        args.passes)
            if failure:
                break
            gmopt_times += times
        ort_ms = statistics.median(ort_times)
        if failure:
            print(f"{name:<20}{ort_ms:>10.3f}{'-':>10}{'-':>11}  gmopt-run failed: {failure}")
            continue
        gmopt_ms = statistics.median(gmopt_times)
        print(f"{name:<20}{ort_ms:>10.3f}{gmopt_ms:>10.3f}{gmopt_ms / ort_ms:>11.2f}")


if __name__ == "__main__":
    main()
