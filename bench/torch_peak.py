#!/usr/bin/env python3
"""PyTorch eager's measured CPU peak for one training step, beside gmopt's.

For each model, the same training step (forward, cross-entropy or MSE loss,
backward; no optimizer; fp32; the same batch shape) is measured twice:

* PyTorch eager, on the CPU: the PyTorch module that the ONNX graph was
  exported from (testdata/generate.py, bench/models/build.py), randomly
  initialized, in train mode. One untimed warm-up step, then one step under
  torch.profiler.profile(profile_memory=True). The profiler records every
  allocation and free of PyTorch's CPU allocator (c10's
  reportMemoryUsage: pointer, bytes, time); they are replayed into a
  live-bytes curve that starts from the tensors alive before the step
  (parameters, their .grad, inputs, buffers). The peak of that curve is
  PyTorch's peak; its bytes at the peak are split into gmopt's categories:
  parameters, gradients (.grad, and each parameter's new gradient until
  AccumulateGrad has added it in), data inputs and buffers, activations
  (allocated in the forward pass and still alive when backward starts: what
  autograd saved, plus the loss and logits) and temporaries (everything
  else: forward values freed before backward, backward intermediates).
  `--grads buffers` (default) keeps .grad allocated across steps
  (zero_grad(set_to_none=False)), which is what ONNX Runtime's training graph
  does with its gradient accumulation buffers; `--grads none` sets them to
  None before the step (PyTorch's optimizer.zero_grad() default), so .grad
  is created during backward.
* gmopt: `gmopt-run MODEL --backend=cpu --threads 1 --optimizer=none
  --steps 1 --baseline --report-json F` on the ONNX Runtime training graph
  (the default pipeline): the eager baseline (the original graph, each tensor
  allocated at its definition and freed after its last use; measured by the
  CPU backend's counting allocator) and the planned peak (arena + persistent
  bytes, measured). gmopt rounds every buffer up to 256 bytes; PyTorch's
  figures are the bytes the allocator was asked for.

Not seen by either: allocations outside the tensor allocators (OpenBLAS and
oneDNN internal buffers, the Python heap).

    testdata/.venv/bin/python bench/torch_peak.py --build build
    testdata/.venv/bin/python bench/torch_peak.py --build build --models gpt2_small resnet50

The production-shape models (gpt2_small, bert_base, resnet50) need their
training graphs built first by bench/models/build.py (--models-dir).
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "testdata"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._C._profiler import _EventType  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import generate  # noqa: E402  (testdata/generate.py: the testdata models)

CATEGORIES = ["parameters", "gradients", "inputs", "activations", "temporaries"]


def load_build_script(path):
    """bench/models/build.py as a module (its model classes), or None."""
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("bench_models_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def testdata_inputs(name, count):
    """The first `count` inputs (the data inputs) of testdata/<name>/test_data_set_0."""
    data_dir = os.path.join(ROOT, "testdata", name, "test_data_set_0")
    arrays = []
    for k in range(count):
        tensor = onnx.TensorProto()
        with open(os.path.join(data_dir, f"input_{k}.pb"), "rb") as f:
            tensor.ParseFromString(f.read())
        arrays.append(onnx.numpy_helper.to_array(tensor))
    return arrays


def tokens(rng, batch, seq, vocab):
    ids = rng.integers(0, vocab, size=(batch, seq + 1), dtype=np.int64)
    return ids[:, :seq].copy(), ids[:, 1:].reshape(-1).copy()


def model_specs(build):
    """name -> dict(make, data (numpy arrays: model inputs then target), loss, dims, onnx path, batch)."""
    rng = np.random.default_rng(7)
    specs = {}
    makers = {s["name"]: s["make"] for s in generate.SPECS}
    # name, loss, symbolic dims of the graph, data inputs (the model's and the target)
    testdata = [("mlp", "ce", {"batch": 8}, 2),
                ("cnn", "ce", {"batch": 8}, 2),
                ("resnet_tiny", "ce", {"batch": 4}, 2),
                ("cnn_bn", "ce", {}, 2),
                ("gpt_tiny", "ce", {"batch": 4, "batch_x_seq": 256}, 2),
                ("bert_tiny", "ce", {"batch": 4}, 3),
                ("llama_tiny", "ce", {"batch": 4, "batch_x_seq": 64}, 2),
                ("regression_frozen", "mse", {"batch": 8}, 2)]
    frozen = {s["name"]: s.get("frozen", []) for s in generate.SPECS}
    for name, loss, dims, count in testdata:
        if name not in makers:
            continue
        make = makers[name]
        specs[name] = dict(make=make, loss=loss, dims=dims,
                           data=lambda name=name, count=count: testdata_inputs(name, count),
                           frozen=frozen.get(name, []),
                           onnx=os.path.join(ROOT, "testdata", name, "training_model.onnx"),
                           gmopt_inputs=os.path.join(ROOT, "testdata", name, "test_data_set_0"),
                           shape=", ".join(f"{k}={v}" for k, v in dims.items()) or "fixed")
    if build is None:
        return specs

    def gpt2_data():
        return list(tokens(rng, 1, 128, build.GPT2_SMALL["vocab"]))

    def bert_data():
        ids, _ = tokens(rng, 2, 128, 30522)
        return [ids, np.ones_like(ids), rng.integers(0, 2, size=(2,), dtype=np.int64)]

    def resnet_data():
        return [rng.standard_normal((2, 3, 224, 224)).astype(np.float32),
                rng.integers(0, 1000, size=(2,), dtype=np.int64)]

    bench = [("gpt2_small", lambda: build.gpt2_small(build.GPT2_SMALL), gpt2_data,
              {"batch": 1, "seq": 128, "batch_x_seq": 128}),
             ("bert_base", build.BertBase, bert_data, {"batch": 2, "seq": 128}),
             ("resnet50", build.ResNet50, resnet_data, {"batch": 2})]
    for name, make, data, dims in bench:
        specs[name] = dict(make=make, loss="ce", dims=dims, data=data, onnx=None, gmopt_inputs=None,
                           shape=", ".join(f"{k}={v}" for k, v in dims.items()))
    return specs


def storage_key(tensor):
    return tensor.untyped_storage().data_ptr()


def storage_bytes(tensor):
    return tensor.untyped_storage().nbytes()


def walk(nodes, allocations, ranges):
    for node in nodes:
        if node.typed[0] == _EventType.Allocation:
            fields = node.typed[1]
            if fields.device.type == "cpu":
                allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size))
        elif node.name in ("torch_peak::forward", "torch_peak::backward"):
            ranges[node.name] = node.start_time_ns
        elif node.name == "torch::autograd::AccumulateGrad":
            ranges.setdefault("accumulate", []).append((node.start_time_ns, node.end_time_ns))
        walk(node.children, allocations, ranges)


def torch_step(model, loss_kind, inputs, target):
    with record_function("torch_peak::forward"):
        out = model(*inputs)
        loss = F.cross_entropy(out, target) if loss_kind == "ce" else F.mse_loss(out, target)
    with record_function("torch_peak::backward"):
        loss.backward()
    return loss


def measure_torch(spec, grads_mode):
    """PyTorch's peak bytes of one step and its split by category at the peak."""
    torch.manual_seed(0)
    model = spec["make"]()
    model.train()
    for name, p in model.named_parameters():
        p.requires_grad_(name not in spec.get("frozen", []))
    arrays = spec["data"]()
    inputs = [torch.from_numpy(np.array(a)) for a in arrays[:-1]]
    target = torch.from_numpy(np.array(arrays[-1]))
    torch_step(model, spec["loss"], inputs, target)  # warm-up (lazy initializations)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if grads_mode == "buffers":
            p.grad.zero_()
        else:
            p.grad = None
    # What is alive before the step, by storage (tied weights share one).
    before = {}
    for p in model.parameters():
        before[storage_key(p)] = ("parameters", storage_bytes(p))
        if p.grad is not None:
            before[storage_key(p.grad)] = ("gradients", storage_bytes(p.grad))
    for t in list(model.buffers()) + inputs + [target]:
        before.setdefault(storage_key(t), ("inputs", storage_bytes(t)))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = torch_step(model, spec["loss"], inputs, target)
    grad_keys = {storage_key(p.grad) for p in params if p.grad is not None}
    allocations, ranges = [], {}
    walk(prof.profiler.kineto_results.experimental_event_tree(), allocations, ranges)
    allocations.sort(key=lambda a: a[0])
    backward_start = ranges["torch_peak::backward"]

    # Replay: live intervals of every allocation made during the step.
    live = {}  # ptr -> (alloc time, bytes)
    intervals = []  # (alloc time, free time or None, bytes, ptr)
    freed_before = 0  # frees of tensors allocated before the step
    for t, ptr, size in allocations:
        if size > 0:
            live[ptr] = (t, size)
        elif ptr in live:
            start, nbytes = live.pop(ptr)
            intervals.append((start, t, nbytes, ptr))
        else:
            freed_before += -size
    for ptr, (start, nbytes) in live.items():
        intervals.append((start, None, nbytes, ptr))
    base = sum(nbytes for _, nbytes in before.values())
    current, peak, peak_time = base, base, None
    for t, ptr, size in allocations:
        current += size
        if current > peak:
            peak, peak_time = current, t
    accumulate = ranges.get("accumulate", [])

    def accumulated(end):
        """Freed by AccumulateGrad: a parameter's gradient, added into .grad."""
        return end is not None and any(a <= end <= b for a, b in accumulate)

    split = dict.fromkeys(CATEGORIES, 0)
    for category, nbytes in before.values():
        split[category] += nbytes
    if peak_time is not None:
        for start, end, nbytes, ptr in intervals:
            if start > peak_time or (end is not None and end <= peak_time):
                continue
            if (grads_mode == "none" and end is None and ptr in grad_keys) or accumulated(end):
                split["gradients"] += nbytes
            elif start < backward_start and (end is None or end >= backward_start):
                split["activations"] += nbytes
            else:
                split["temporaries"] += nbytes
        # Pre-step tensors freed before the peak (none in a training step).
        split["inputs"] -= min(freed_before, split["inputs"])
    assert peak == sum(split.values()) or freed_before, (peak, split)
    del loss
    return dict(peak=peak, split=split, params=sum(p.numel() for p in model.parameters()))


def measure_gmopt(spec, gmopt_run, model_path):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        command = [gmopt_run, model_path, "--backend=cpu", "--threads", "1", "--optimizer=none",
                   "--steps", "1", "--baseline", "--report-json", report]
        for name, value in spec["dims"].items():
            command += ["--dim", f"{name}={value}"]
        if spec["gmopt_inputs"]:
            command += ["--inputs", spec["gmopt_inputs"]]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            message = (result.stderr.strip().splitlines() or ["?"])[-1]
            return None, message
        with open(report) as f:
            data = json.load(f)
    return dict(baseline=data["baseline"]["peak_bytes"], baseline_split=data["baseline"]["by_category"],
                planned=data["optimized"]["peak_bytes"]), None


def mib(n):
    return f"{n / 2**20:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="build directory with tools/gmopt-run (default: build)")
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models"),
                        help="where bench/models/build.py wrote gpt2_small, bert_base, resnet50")
    parser.add_argument("--build-script", default=os.path.join(ROOT, "bench", "models", "build.py"),
                        help="the script whose PyTorch modules the production-shape graphs were "
                             "exported from (default: bench/models/build.py)")
    parser.add_argument("--models", nargs="*", help="subset (default: every model whose graph exists)")
    parser.add_argument("--grads", choices=["buffers", "none"], default="buffers",
                        help="PyTorch's .grad before the step: kept and zeroed (buffers, like the "
                             "training graph's accumulation buffers) or set to None")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--categories", action="store_true",
                        help="also print each peak split by category (MiB)")
    args = parser.parse_args()
    gmopt_run = os.path.join(args.build, "tools", "gmopt-run")
    if not os.access(gmopt_run, os.X_OK):
        sys.exit(f"torch_peak.py: error: {gmopt_run}: not an executable (build gmopt-run or pass --build)")
    torch.set_num_threads(args.threads)
    specs = model_specs(load_build_script(args.build_script))
    names = args.models or list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        sys.exit(f"torch_peak.py: error: unknown models {unknown} (known: {', '.join(specs)}; "
                 "the production ones need bench/models/build.py)")
    print(f"torch {torch.__version__}, fp32, CPU, .grad {args.grads}; bytes in MiB")
    header = ("model", "shape", "params", "PyTorch peak", "gmopt eager", "eager/PyTorch", "gmopt planned",
              "planned/PyTorch")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
    details = []
    for name in names:
        spec = specs[name]
        model_path = spec["onnx"] or os.path.join(args.models_dir, name, "training_model.onnx")
        if not os.path.exists(model_path):
            if args.models:
                sys.exit(f"torch_peak.py: error: {model_path}: not found (run bench/models/build.py {name})")
            continue
        measured = measure_torch(spec, args.grads)
        gm, failure = measure_gmopt(spec, gmopt_run, model_path)
        row = [name, spec["shape"], f"{measured['params']:,}", mib(measured["peak"])]
        if failure:
            row += ["-", "-", "-", f"gmopt-run failed: {failure}"]
        else:
            row += [mib(gm["baseline"]), f"{gm['baseline'] / measured['peak']:.3f}", mib(gm["planned"]),
                    f"{gm['planned'] / measured['peak']:.3f}"]
            details.append((name, measured["split"], gm["baseline_split"]))
        print("| " + " | ".join(row) + " |", flush=True)
    if args.categories:
        print("\nAt each peak, MiB (PyTorch | gmopt eager baseline):")
        print("| model | " + " | ".join(CATEGORIES) + " |")
        print("|---|" + "---:|" * len(CATEGORIES))
        for name, split, gm_split in details:
            gm_split = dict(gm_split)
            cells = [f"{mib(split[c])} \\| {mib(gm_split.get(c, 0))}" if c != "inputs"
                     else f"{mib(split[c])} \\| -" for c in CATEGORIES]
            extra = gm_split.get("optimizer_state", 0) + gm_split.get("workspace", 0)
            print(f"| {name} | " + " | ".join(cells) + f" |{'' if not extra else f' (gmopt workspace+state {mib(extra)})'}")


if __name__ == "__main__":
    main()
