#!/usr/bin/env python3
"""Time one training step: ONNX Runtime vs gmopt-run, side by side.

For each model the same step (forward + backward + gradient accumulation, no
optimizer) is timed twice in one process run:

* ONNX Runtime: a plain InferenceSession on the CPU execution provider with
  intra_op_num_threads=THREADS and sequential execution; WARMUP untimed
  runs, then STEPS timed session.run calls (wall clock, and the process's
  processor time, time.process_time).
* gmopt: `gmopt-run MODEL --inputs DIR --backend=cpu --threads THREADS
  --optimizer=none --steps WARMUP+STEPS --report-json F [--dim ...]
  [--passes PIPELINE]`, whose per-step times come from the executor's own
  clock around runStep only, like session.run (`micro_step_ms`, and
  `micro_step_cpu_ms`, the process's processor time); the first WARMUP
  steps are dropped.

Models: every testdata/<model>/training_model.onnx with reference data, fed
its test_data_set_0 (zeros for the accumulation buffers, which are not
stored), and the production-shape graphs that bench/models/build.py writes
(--models-dir; skipped when absent): gpt2_small at batch 1 x seq 128,
resnet50 at batch 2 (and bert_base at batch 2 x seq 128 when named). Their
parameters are graph inputs and get random values (seeded), written once
as a test_data_set folder of input_K.pb tensors in a temporary directory
that both runtimes read: ORT gets the same arrays; token inputs and labels
are uniform in range; the accumulation buffers are zeros.

With --baseline-run B, a second gmopt-run (say one built from the commit
before a change) runs in every round right after the first: the extra
columns give its median processor time per step and gmopt/baseline, the
ratio of the medians, with [min, max] of the per-round ratios.

Rounds alternate the two so background load hits both alike. The table shows
each side's median step (wall clock, and processor time: on a machine whose
cores are shared, processor time leaves out the waits for a core; spinning
thread pools count as busy) and the ratio gmopt / ORT (< 1: gmopt faster).
--profile adds one profiled round per model: kernel time per op type,
gmopt-run --profile against ONNX Runtime's own profiler (enable_profiling,
the node kernel times summed by op type), in ms per step.

Run with the testdata virtual environment (it has onnxruntime-training):

    testdata/.venv/bin/python bench/ort_compare.py --gmopt-run build/tools/gmopt-run
    testdata/.venv/bin/python bench/ort_compare.py --models gpt2_small resnet50 --threads 1 --profile

Not a test: numbers depend on the machine and its load.
"""

import argparse
import glob
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
          "gpt_opset14", "gpt_opset20", "regression_frozen", "bert_tiny",
          "llama_tiny", "cnn_bn"]
# Production-shape graphs of bench/models/build.py: symbolic dims bound, and
# the upper bound of each integer data input (token ids, labels, masks).
BENCH = {
    "gpt2_small": dict(dims={"batch": 1, "seq": 128, "batch_x_seq": 128},
                       ints={"input_ids": 50257, "labels": 50257}),
    "resnet50": dict(dims={"batch": 2}, ints={"labels": 1000}),
    "bert_base": dict(dims={"batch": 2, "seq": 128},
                      ints={"input_ids": 30522, "attention_mask": 1, "labels": 2}),
}
DEFAULT_BENCH = ["gpt2_small", "resnet50"]


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


def random_feeds(model_path, spec, data_dir, seed):
    """Seeded values of every graph input of a bench graph; all but the
    accumulation buffers (zeros, which gmopt-run makes itself) are also
    written to data_dir as input_K.pb, named by tensor name."""
    rng = np.random.default_rng(seed)
    graph = onnx.load(model_path, load_external_data=False).graph
    os.makedirs(data_dir, exist_ok=True)
    feeds = {}
    for index, value in enumerate(graph.input):
        tensor_type = value.type.tensor_type
        shape = []
        for dim in tensor_type.shape.dim:
            if dim.dim_param:
                if dim.dim_param not in spec["dims"]:
                    sys.exit(f"ort_compare.py: error: {model_path}: input '{value.name}' has "
                             f"dimension '{dim.dim_param}' that the bench spec does not bind")
                shape.append(spec["dims"][dim.dim_param])
            else:
                shape.append(dim.dim_value)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        name = value.name
        if name.endswith("accumulation.buffer"):
            feeds[name] = np.zeros(shape, dtype=dtype)
            continue
        if name == "lazy_reset_grad":
            array = np.ones(shape, dtype=dtype)
        elif dtype == np.bool_:
            array = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.integer):
            high = spec["ints"].get(name)
            if high is None:
                sys.exit(f"ort_compare.py: error: {model_path}: no value range for integer input '{name}'")
            array = np.ones(shape, dtype=dtype) if high == 1 else rng.integers(0, high, size=shape, dtype=dtype)
        elif len(shape) == 1 and name.endswith(".weight"):
            array = np.ones(shape, dtype=dtype)  # norm gains
        else:
            array = (0.02 * rng.standard_normal(shape)).astype(dtype)
        feeds[name] = array
        tensor = onnx.numpy_helper.from_array(array, name)
        with open(os.path.join(data_dir, f"input_{index}.pb"), "wb") as f:
            f.write(tensor.SerializeToString())
    return feeds


def ort_op_times(profile_path, warmup, steps):
    """ms per step of each op type in an ONNX Runtime profile of
    warmup + steps runs; the warm-up runs' node events are dropped."""
    with open(profile_path) as f:
        events = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    after = runs[warmup - 1][1] if warmup and len(runs) >= warmup else -1
    totals = {}
    for event in events:
        if (event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time")
                and event["ts"] > after):
            op = event.get("args", {}).get("op_name", "?")
            totals[op] = totals.get(op, 0.0) + event["dur"] / 1e3 / steps
    return totals


def time_ort(model_path, feeds, threads, warmup, steps, spinning, profile_dir=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(profile_dir, "ort")
        session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
        for _ in range(warmup + steps):
            session.run(None, feeds)
        return ort_op_times(session.end_profiling(), warmup, steps)
    session = ort.InferenceSession(model_path, options,
                                   providers=["CPUExecutionProvider"])
    feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
    for _ in range(warmup):
        session.run(None, feeds)
    wall, cpu = [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        session.run(None, feeds)
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return wall, cpu


def gmopt_command(gmopt_run, model_path, data_dir, threads, steps, report, dims, passes):
    command = [gmopt_run, model_path, "--inputs", data_dir,
               "--backend=cpu", "--threads", str(threads),
               "--optimizer=none", "--steps", str(steps),
               "--report-json", report]
    for name, value in dims.items():
        command += ["--dim", f"{name}={value}"]
    if passes:
        command.append("--passes=" + passes)
    return command


def time_gmopt(gmopt_run, model_path, data_dir, dims, threads, warmup, steps, extra_env, passes,
               profile=False):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        command = gmopt_command(gmopt_run, model_path, data_dir, threads, warmup + steps, report,
                                dims, passes)
        if profile:
            command.append("--profile")
        env = dict(os.environ, **extra_env)
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            message = (result.stderr.strip().splitlines() or ["?"])[-1]
            return None, message
        with open(report) as f:
            data = json.load(f)
        if profile:
            # --profile sums over every micro-step, warm-up included.
            total = warmup + steps
            return {entry["op"].split(".")[-1]: entry["ms"] / total
                    for entry in data.get("profile", [])}, None
        run = data["optimized"]
        return (run["micro_step_ms"][warmup:], run["micro_step_cpu_ms"][warmup:]), None


def print_profile(name, ort_ops, gmopt_ops, top):
    print(f"\n{name}: kernel ms per step by op type (gmopt-run --profile vs ORT enable_profiling)")
    print(f"{'op':<36}{'gmopt':>10}{'ORT':>10}{'gmopt-ORT':>11}")
    ops = sorted(set(ort_ops) | set(gmopt_ops),
                 key=lambda op: -max(ort_ops.get(op, 0), gmopt_ops.get(op, 0)))
    for op in ops[:top]:
        g, o = gmopt_ops.get(op, 0.0), ort_ops.get(op, 0.0)
        print(f"{op:<36}{g:>10.3f}{o:>10.3f}{g - o:>+11.3f}")
    g, o = sum(gmopt_ops.values()), sum(ort_ops.values())
    print(f"{'all kernels':<36}{g:>10.3f}{o:>10.3f}{g - o:>+11.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gmopt-run", default=os.path.join(ROOT, "build", "tools", "gmopt-run"))
    parser.add_argument("--baseline-run", default="",
                        help="a second gmopt-run (e.g. one built from an earlier commit) timed "
                             "in the same rounds, alternating; adds its step and the ratio "
                             "gmopt/baseline with its range over the rounds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round (testdata models)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per round (testdata models)")
    parser.add_argument("--big-steps", type=int, default=5,
                        help="timed steps per round of the production-shape models")
    parser.add_argument("--big-warmup", type=int, default=1,
                        help="untimed steps per round of the production-shape models")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*",
                        help=f"testdata models ({', '.join(MODELS)}) and bench models "
                             f"({', '.join(BENCH)}); default: the testdata ones and "
                             f"{', '.join(DEFAULT_BENCH)} where built")
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models"),
                        help="where bench/models/build.py wrote the production-shape graphs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bench models' random inputs")
    parser.add_argument("--passes", default="",
                        help="gmopt-run --passes (default: gmopt-run's, "
                             "which is gmopt-compile's default pipeline; e.g. "
                             "canonicalize for the graph as imported)")
    parser.add_argument("--no-spinning", action="store_true",
                        help="ORT: session.intra_op.allow_spinning=0; gmopt: "
                             "OMP_WAIT_POLICY=passive (fairer on a loaded machine)")
    parser.add_argument("--profile", action="store_true",
                        help="also one profiled round per model: kernel time per op type, side by side")
    parser.add_argument("--profile-top", type=int, default=15, help="op types shown per profile")
    args = parser.parse_args()
    if not os.access(args.gmopt_run, os.X_OK):
        sys.exit(f"ort_compare.py: error: {args.gmopt_run}: not an executable "
                 "(build gmopt-run or pass --gmopt-run)")
    if args.baseline_run and not os.access(args.baseline_run, os.X_OK):
        sys.exit(f"ort_compare.py: error: --baseline-run {args.baseline_run}: not an executable")
    extra_env = {"OMP_WAIT_POLICY": "passive"} if args.no_spinning else {}
    names = args.models
    if names is None:
        names = MODELS + [m for m in DEFAULT_BENCH
                          if os.path.exists(os.path.join(args.models_dir, m, "training_model.onnx"))]
    unknown = [n for n in names if n not in MODELS and n not in BENCH]
    if unknown:
        sys.exit(f"ort_compare.py: error: unknown models {unknown}")

    print(f"onnxruntime {ort.__version__}, threads {args.threads}, {args.rounds} rounds x "
          f"{args.steps} steps (+{args.warmup} warm-up; production-shape models {args.big_steps} "
          f"+{args.big_warmup}), spinning {'off' if args.no_spinning else 'on (defaults)'}, "
          f"gmopt passes {args.passes or 'default'}, load average {os.getloadavg()[0]:.1f}")
    header = (f"{'model':<20}{'ORT ms':>10}{'gmopt ms':>10}{'gmopt/ORT':>11}"
              f"{'ORT cpu':>10}{'gmopt cpu':>11}{'cpu ratio':>11}")
    if args.baseline_run:
        header += f"{'base cpu':>10}  {'gmopt/base cpu [range]':<24}"
    print(header)
    print("-" * len(header), flush=True)
    profiles = []
    with tempfile.TemporaryDirectory(prefix="ort_compare.") as tmp:
        for name in names:
            if name in BENCH:
                spec = BENCH[name]
                model_path = os.path.join(args.models_dir, name, "training_model.onnx")
                if not os.path.exists(model_path):
                    print(f"{name:<20}  not built: run bench/models/build.py {name}", flush=True)
                    continue
                data_dir = os.path.join(tmp, name, "test_data_set_0")
                feeds = random_feeds(model_path, spec, data_dir, args.seed)
                dims, warmup, steps = spec["dims"], args.big_warmup, args.big_steps
            else:
                model_dir = os.path.join(TESTDATA, name)
                model_path = os.path.join(model_dir, "training_model.onnx")
                data_dir = os.path.join(model_dir, "test_data_set_0")
                feeds = ort_feeds(model_dir)
                dims, warmup, steps = {}, args.warmup, args.steps
            ort_wall, ort_cpu, gm_wall, gm_cpu, failure = [], [], [], [], None
            base_cpu, round_ratios = [], []
            for _ in range(args.rounds):
                wall, cpu = time_ort(model_path, feeds, args.threads, warmup, steps,
                                     not args.no_spinning)
                ort_wall += wall
                ort_cpu += cpu
                times, failure = time_gmopt(args.gmopt_run, model_path, data_dir, dims, args.threads,
                                            warmup, steps, extra_env, args.passes)
                if failure:
                    break
                gm_wall += times[0]
                gm_cpu += times[1]
                if args.baseline_run:
                    base, failure = time_gmopt(args.baseline_run, model_path, data_dir, dims,
                                               args.threads, warmup, steps, extra_env, args.passes)
                    if failure:
                        failure = "baseline: " + failure
                        break
                    base_cpu += base[1]
                    round_ratios.append(statistics.median(times[1]) /
                                        statistics.median(base[1]))
            ort_ms, ort_cpu_ms = statistics.median(ort_wall), statistics.median(ort_cpu)
            if failure:
                print(f"{name:<20}{ort_ms:>10.3f}{'-':>10}{'-':>11}  gmopt-run failed: {failure}",
                      flush=True)
                continue
            gm_ms, gm_cpu_ms = statistics.median(gm_wall), statistics.median(gm_cpu)
            row = (f"{name:<20}{ort_ms:>10.3f}{gm_ms:>10.3f}{gm_ms / ort_ms:>11.2f}"
                   f"{ort_cpu_ms:>10.3f}{gm_cpu_ms:>11.3f}{gm_cpu_ms / ort_cpu_ms:>11.2f}")
            if args.baseline_run:
                base_ms = statistics.median(base_cpu)
                row += (f"{base_ms:>10.3f}  {gm_cpu_ms / base_ms:.3f} "
                        f"[{min(round_ratios):.3f}, {max(round_ratios):.3f}]")
            print(row, flush=True)
            if args.profile:
                profile_dir = os.path.join(tmp, name, "profile")
                os.makedirs(profile_dir, exist_ok=True)
                ort_ops = time_ort(model_path, feeds, args.threads, warmup, steps,
                                   not args.no_spinning, profile_dir)
                gmopt_ops, failure = time_gmopt(args.gmopt_run, model_path, data_dir, dims,
                                                args.threads, warmup, steps, extra_env, args.passes,
                                                profile=True)
                if not failure:
                    profiles.append((name, ort_ops, gmopt_ops))
            if name in BENCH:
                for path in glob.glob(os.path.join(tmp, name, "test_data_set_0", "*.pb")):
                    os.remove(path)
    for name, ort_ops, gmopt_ops in profiles:
        print_profile(name, ort_ops, gmopt_ops, args.profile_top)


if __name__ == "__main__":
    main()
