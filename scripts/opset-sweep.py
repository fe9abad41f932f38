"""Sweeps ONNX Runtime's training-artifact generator over opsets 13-20 and runs
every graph it writes through gmopt, against ONNX Runtime's own numbers.

For each architecture x opset this script
  1. exports the model with torch.onnx.export at that opset and calls
     onnxruntime.training.artifacts.generate_artifacts, through
     testdata/generate.py's own machinery (imported as a module: the same
     models, seeds, batches, exporter setup, ORT/torch cross-checks, reference
     files), writing into a scratch folder (default /tmp/opset-sweep/<arch>_op<N>;
     never into testdata/) and keeping the IR versions the generator wrote;
  2. imports training_model.onnx with gmopt-opt;
  3. runs one step with gmopt-run --inputs test_data_set_0 --check
     test_data_set_0 (loss and every gradient against ONNX Runtime's);
  4. runs ONNX Runtime's 20 AdamW steps with gmopt-run --optimizer-model
     optimizer_model.onnx --loss-reference adamw_losses.json (losses and
     final parameters against ONNX Runtime's training API);
and prints one table row: architecture, opset, nodes of the training graph,
whether the export/generator, import, first step and AdamW steps worked, and
the worst relative differences (max|got-ref| / max|ref| per tensor) of the
first step (loss, gradients) and of the AdamW run (losses, final params).

Architectures are testdata/generate.py's SPECS (mlp, cnn, resnet_tiny,
gpt_tiny, regression_frozen, and bert_tiny, llama_tiny, llama_tiny_untied, cnn_bn once
generate.py has them) plus small probe models defined here for op forms the
architectures do not produce: nn.GELU(approximate="tanh") (ORT's FastGelu
fusion is not among the generator's pre-training rewrites: it stays Tanh
arithmetic), a bias-free GELU (com.microsoft Gelu), reductions with axes as an
input, ReduceMax/ReduceMin off the gradient path, torch.chunk/torch.split and
Pad (ORT's Pad gradient), boolean mask ops, and losses the generator's
LossType cannot write: LogSoftmax + NLL as a custom onnxblock loss and
F.log_softmax + F.nll_loss inside the model (ORT's fusion turns both into
SoftmaxCrossEntropyLossInternal), and F.cross_entropy inside the model
(SoftmaxCrossEntropyLossInternal from ORT's exporter symbolics, the ignore index
-100 as an input and an ignored label in the batch). A row's error column holds
the first error line.

    /work/main/testdata/.venv/bin/python scripts/opset-sweep.py            # everything
    /work/main/testdata/.venv/bin/python scripts/opset-sweep.py --opsets 14,20 --archs mlp,probe_gelu_tanh
    /work/main/testdata/.venv/bin/python scripts/opset-sweep.py --reuse     # rerun gmopt only

Each (architecture, opset) is generated in its own Python process (the
exporter and onnxblock keep global state); runs are sequential (the generator
is CPU heavy). --reuse skips generation where the scratch folder already holds
the artifacts; --generate PATH imports another generate.py (e.g. a newer one).
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPSETS = list(range(13, 21))
TESTDATA_ARCHS = ["mlp", "cnn", "resnet_tiny", "gpt_tiny", "regression_frozen", "bert_tiny", "llama_tiny",
                  "llama_tiny_untied",
                  "cnn_bn"]
# AdamW tolerance (gmopt-run --rtol) per architecture, as AdamWTestdataTest has
# it: with batch statistics ONNX Runtime drifts from itself by ~3e-2 in the
# parameters over 20 steps when only its thread count changes
# (scripts/ort-self-drift.py resnet_tiny); the table still shows the numbers.
ADAMW_RTOL = {"resnet_tiny": 2e-2, "cnn_bn": 2e-2}
PROBE_ARCHS = ["probe_gelu_tanh", "probe_gelu_nobias", "probe_reduce", "probe_reduce_max", "probe_split_pad",
               "probe_mask", "probe_nll", "probe_nll_in_model", "probe_ce_in_model"]


def load_generate(path):
    spec = importlib.util.spec_from_file_location("generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- probe models


def probe_specs(g):
    """Small models for the op forms the testdata architectures do not bring, in
    generate.py's spec format (classification over 4 classes, batch 4)."""
    import copy

    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from onnxruntime.training import onnxblock
    import onnxruntime.training.onnxblock._graph_utils as graph_utils

    class GeluTanh(nn.Module):
        """Linear -> GELU(tanh) -> Linear: ORT fuses the tanh GELU into FastGelu."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 16)
            self.act = nn.GELU(approximate="tanh")
            self.fc2 = nn.Linear(16, 4)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class GeluNoBias(nn.Module):
        """A GELU with no bias add before it (MatMul without bias, then exact GELU):
        Gelu, not BiasGelu; ai.onnx Gelu from opset 20."""

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(12, 16) * 0.3)
            self.fc2 = nn.Linear(16, 4)

        def forward(self, x):
            return self.fc2(F.gelu(x @ self.w) + F.gelu(x @ self.w, approximate="tanh"))

    class Reduce(nn.Module):
        """Reductions over the last axis (axes become an input at opset 18). ONNX
        Runtime 1.19 has no gradient for ReduceMax, ReduceMin (amax, amin) nor
        ReduceProd, so its generator cannot train those."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 4 * 8)

        def forward(self, x):
            h = self.fc1(x).view(-1, 4, 8)
            return (h.mean(-1) + torch.linalg.vector_norm(h, dim=-1)
                    + h.abs().sum(-1) * 0.1 + torch.logsumexp(h, -1) + (h * h).sum(-1) * 0.01
                    + h.pow(2).mean(-1))

    class ReduceMax(nn.Module):
        """ReduceMax/ReduceMin where no gradient flows (of the data input: ONNX
        has no detach, so a parameter upstream would need ORT's missing
        gradient)."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 4 * 8)

        def forward(self, x):
            h = self.fc1(x).view(-1, 4, 8)
            groups = x.view(-1, 4, 3)
            shifted = h - groups.amax(-1, keepdim=True)
            spread = groups.amax(-1) - groups.amin(-1)
            return torch.logsumexp(shifted, -1) * spread

    class SplitPad(nn.Module):
        """chunk into equal parts (Split, num_outputs at opset 18), Pad, Concat, unequal split."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 24)
            self.fc2 = nn.Linear(30, 4)

        def forward(self, x):
            a, b, c = self.fc1(x).chunk(3, dim=-1)
            d, e = torch.split(self.fc1(x), [10, 14], dim=-1)
            p = F.pad(a * b - c, (1, 2))
            return self.fc2(torch.cat([p, d[:, :5] * e[:, 3:8], e[:, :8] + c[:, :8], x[:, :6]], -1))

    class Mask(nn.Module):
        """Attention-mask style ops on masks derived from the input: Greater/Less,
        Not/And/Or, Equal on booleans, Cast to and from bool, Where, Expand."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 16)
            self.fc2 = nn.Linear(16, 4)

        def forward(self, x):
            h = self.fc1(x)
            xm = torch.cat([x, x[:, :4]], -1)
            keep = (xm > 0) & ~(xm < -1) | (h > 1.5)
            keep = keep & (xm > -2).long().bool()
            h = torch.where(keep, h, torch.zeros_like(h)) + keep.float() * 0.1
            h = h.masked_fill((xm > 0.5) == (h > 0), -1.0)
            pad = (x[:, :1] > 0).expand(-1, 16)
            return self.fc2(h * pad.to(h.dtype) + h)

    class Classifier(nn.Module):
        """Linear -> Tanh -> Linear logits for the loss probes."""

        def __init__(self, classes=4):
            super().__init__()
            self.fc1 = nn.Linear(12, 16)
            self.fc2 = nn.Linear(16, classes)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))

    class LogSoftmaxNllLoss(onnxblock.Block):
        """A loss block the generator has no LossType for: LogSoftmax over the class axis (1), then
        com.microsoft::NegativeLogLikelihoodLossInternal (mean), the NLL op of ONNX Runtime's own
        exporter symbolics. ONNX Runtime's SoftmaxCrossEntropyLossInternalFusion turns the pair into
        com.microsoft::SoftmaxCrossEntropyLossInternal before it builds the gradient. (ai.onnx
        NegativeLogLikelihoodLoss is not fused and has no gradient in ONNX Runtime 1.19.)"""

        def build(self, scores_input_name, labels_name="labels"):
            graph = self.base.graph
            if not any(o.domain == "com.microsoft" for o in self.base.opset_import):
                self.base.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
            if not graph_utils.node_arg_exists(self.base, labels_name):
                labels = copy.deepcopy(graph_utils.get_output_from_output_name(self.base, scores_input_name))
                labels.name = labels_name
                labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
                del labels.type.tensor_type.shape.dim[1]  # (N, C, d...) -> (N, d...)
                graph.input.append(labels)
            log_prob = graph_utils.generate_graph_name("log_prob")
            loss = graph_utils.generate_graph_name("loss")
            graph.node.append(onnx.helper.make_node("LogSoftmax", [scores_input_name], [log_prob], axis=1,
                                                    name=graph_utils.generate_graph_name("LogSoftmax")))
            graph.node.append(onnx.helper.make_node("NegativeLogLikelihoodLossInternal", [log_prob, labels_name],
                                                    [loss], domain="com.microsoft", reduction="mean",
                                                    name=graph_utils.generate_graph_name("NllLoss")))
            # ONNX has no shape inference for the contrib op: the scalar loss is declared.
            graph.value_info.append(onnx.helper.make_tensor_value_info(loss, onnx.TensorProto.FLOAT, []))
            return loss

    class NllInModel(nn.Module):
        """The loss inside the model, over a K-dimensional target: logits (N, 4 classes, 3 positions),
        log_softmax over the classes and nll_loss (mean, ignore_index -100 as torch exports it)."""

        def __init__(self):
            super().__init__()
            self.body = Classifier(12)

        def forward(self, x, labels):
            logits = self.body(x).view(-1, 4, 3)
            return F.nll_loss(F.log_softmax(logits, dim=1), labels)

    class CrossEntropyInModel(nn.Module):
        """The loss inside the model: F.cross_entropy, which torch exports as ai.onnx
        SoftmaxCrossEntropyLoss with ignore_index -100 (the generator adds no loss of its own)."""

        def __init__(self):
            super().__init__()
            self.body = Classifier()

        def forward(self, x, labels):
            return F.cross_entropy(self.body(x), labels)

    def ort_loss_symbolics(opset):
        """Exports torch's cross_entropy and nll_loss as ONNX Runtime's own training exporter does
        (ORTModule's custom symbolics): com.microsoft::SoftmaxCrossEntropyLossInternal and
        NegativeLogLikelihoodLossInternal, with the ignore index as an input. torch's own export,
        ai.onnx SoftmaxCrossEntropyLoss with only the loss output (LogSoftmax + NLL included, by its
        fuseLogSoftmaxNllLoss pass), cannot be trained by the generator: its gradient builder reads
        the log-probability output the export does not have. torch 2.4 traces F.nll_loss as
        aten::nll_loss_nd (nll_loss2d for 4-d input), which ORT registers no symbolic for: its
        nll_loss symbolic is registered for those too."""
        from torch.onnx import register_custom_op_symbolic
        from onnxruntime.training.ortmodule._custom_op_symbolic_registry import CustomOpSymbolicRegistry

        symbolics = CustomOpSymbolicRegistry._SYMBOLICS
        for name, symbolic in (("::cross_entropy_loss", "::cross_entropy_loss"), ("::nll_loss", "::nll_loss"),
                               ("::nll_loss_nd", "::nll_loss"), ("::nll_loss2d", "::nll_loss")):
            register_custom_op_symbolic(name, symbolics[symbolic], opset)

    def dense_batch(rng):
        x = rng.standard_normal((4, 12)).astype(np.float32)
        y = rng.integers(0, 4, size=(4,), dtype=np.int64)
        return [x, y]

    def ignored_label_batch(rng):
        """dense_batch with the label of row 2 set to -100 (torch's ignore_index): the mean is over
        the three others."""
        x, y = dense_batch(rng)
        y[2] = -100
        return [x, y]

    def positions_batch(rng):
        """Labels (4, 3) in [0, 4) for NllInModel, one of them -100."""
        x = rng.standard_normal((4, 12)).astype(np.float32)
        y = rng.integers(0, 4, size=(4, 3), dtype=np.int64)
        y[1, 2] = -100
        return [x, y]

    base = dict(loss=g.LOSS_CE, input_names=["input"], output_names=["logits"],
                dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, batch=dense_batch,
                batch_desc="input float32[4,12] ~ N(0,1), labels int64[4] in [0,4)")
    # The model returns its loss (generate_artifacts with loss=None): the labels are a model input.
    in_model = dict(loss=None, input_names=["input", "labels"], output_names=["loss"],
                    dynamic_axes={"input": {0: "batch"}, "labels": {0: "batch"}}, export_setup=ort_loss_symbolics)
    return {
        "probe_gelu_tanh": dict(base, seed=31, make=GeluTanh),
        "probe_gelu_nobias": dict(base, seed=32, make=GeluNoBias),
        "probe_reduce": dict(base, seed=33, make=Reduce),
        "probe_reduce_max": dict(base, seed=36, make=ReduceMax),
        "probe_split_pad": dict(base, seed=34, make=SplitPad),
        "probe_mask": dict(base, seed=35, make=Mask),
        "probe_nll": dict(base, seed=37, make=Classifier, loss=LogSoftmaxNllLoss(),
                          torch_loss=lambda out, target: F.nll_loss(F.log_softmax(out, dim=1), target)),
        "probe_nll_in_model": dict(in_model, seed=38, make=NllInModel, batch=positions_batch,
                                   batch_desc="input float32[4,12] ~ N(0,1), labels int64[4,3] in [0,4) "
                                              "(one -100)"),
        "probe_ce_in_model": dict(in_model, seed=39, make=CrossEntropyInModel, batch=ignored_label_batch,
                                  batch_desc="input float32[4,12] ~ N(0,1), labels int64[4] in [0,4) "
                                             "(row 2 -100)"),
    }


# ----------------------------------------------------------------------------- generation (worker)


def worker(args):
    """Generates one (architecture, opset) into args.out; exits non-zero on failure."""
    g = load_generate(args.generate)
    specs = {s["name"]: s for s in g.SPECS}
    specs.update(probe_specs(g))
    if args.arch not in specs:
        sys.exit(f"architecture {args.arch} is not in {args.generate} (nor a probe)")
    spec = dict(specs[args.arch])
    spec.update(name=os.path.basename(args.out), opset=args.opset, keep_ir_version=True)
    # Every spec with reference data gets it: the sweep compares with ORT.
    if spec.get("batch") is None:
        spec["reference"] = False
    g.HERE = os.path.dirname(args.out)
    # generate.py registers its LayerNormalization exporter symbolic at its
    # OPSET (17); torch uses it for that opset and above, as in testdata.
    g.build_model(spec)


# ----------------------------------------------------------------------------- gmopt (driver)


def run(cmd, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.time() - t0
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s", time.time() - t0


def first_error(text):
    for line in text.splitlines():
        if "error:" in line or "Error" in line or "error" in line.lower().split(":")[0]:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


ROW = re.compile(r"^\s+(\S.*?)\s+([0-9.]+e[-+][0-9]+)\s+([0-9.]+e[-+][0-9]+)\s+(ok|FAIL)\s*$")


def worst_rel(text, prefix=None):
    """The largest max_rel_err of gmopt-run's comparison table (rows whose name
    starts with prefix when given, else all rows)."""
    worst = None
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        name = m.group(1)
        if prefix is not None and not name.startswith(prefix):
            continue
        v = float(m.group(3))
        worst = v if worst is None else max(worst, v)
    return worst


def fmt(v):
    return "-" if v is None else f"{v:.1e}"


def sweep_one(arch, opset, args, bins):
    out = os.path.join(args.scratch, f"{arch}_op{opset}")
    row = dict(arch=arch, opset=opset, nodes=None, gen="-", imp="-", step="-", adamw="-", loss=None, grad=None,
               adamw_loss=None, adamw_param=None, error="")
    train = os.path.join(out, "training_model.onnx")
    if not (args.reuse and os.path.exists(train)):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--arch", arch, "--opset", str(opset),
               "--out", out, "--generate", args.generate]
        rc, text, _ = run(cmd, args.timeout)
        with open(out + ".log", "w") as f:
            f.write(text)
        if rc != 0 or not os.path.exists(train):
            row["gen"] = "FAIL"
            errors = [l for l in text.splitlines() if "Error" in l.split(":")[0] or l.startswith("RuntimeError")]
            why = errors[-1].strip() if errors else (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
            # ONNX Runtime's messages open with its source location; the reason follows.
            row["error"] = "generator: " + re.sub(r"^RuntimeError: /onnxruntime_src/\S+ .*?(\[ONNXRuntimeError\]|"
                                                  r"gradient_builder != nullptr was false\.)", r"\1", why)
            return row
    row["gen"] = "ok"
    import onnx

    model = onnx.load(train, load_external_data=False)
    row["nodes"] = len(model.graph.node)
    rc, text, _ = run([bins["opt"], train, "-o", os.devnull], args.timeout)
    if rc != 0:
        row["imp"] = "FAIL"
        row["error"] = first_error(text)
        return row
    row["imp"] = "ok"
    tds = os.path.join(out, "test_data_set_0")
    if not os.path.isdir(tds):
        row["error"] = "no reference data"
        return row
    rc, text, _ = run([bins["run"], train, "--backend=cpu", "--threads", "1", "--inputs", tds, "--check", tds],
                      args.timeout)
    with open(out + ".step.txt", "w") as f:
        f.write(text)
    row["loss"] = worst_rel(text, "loss")
    grads = [worst_rel(text, None)]
    row["grad"] = grads[0]
    row["step"] = "ok" if rc == 0 else "FAIL"
    if rc != 0:
        row["error"] = first_error(text)
    adamw = os.path.join(out, "adamw_losses.json")
    if os.path.exists(adamw):
        rc, text, _ = run([bins["run"], train, "--backend=cpu", "--threads", "1", "--inputs", tds,
                           "--optimizer-model", os.path.join(out, "optimizer_model.onnx"),
                           "--loss-reference", adamw, "--rtol", str(ADAMW_RTOL.get(arch, 1e-5))],
                          args.timeout)
        with open(out + ".adamw.txt", "w") as f:
            f.write(text)
        row["adamw_loss"] = worst_rel(text, "loss[")
        row["adamw_param"] = worst_rel(text, "final ")
        row["adamw"] = "ok" if rc == 0 else "FAIL"
        if rc != 0 and not row["error"]:
            row["error"] = first_error(text)
    return row


def print_table(rows, file=sys.stdout):
    head = ("arch", "opset", "nodes", "gen", "import", "step", "adamw", "loss", "grads", "adamw_loss",
            "adamw_param", "error")
    print("%-18s %5s %6s %4s %6s %4s %5s %8s %8s %10s %11s  %s" % head, file=file)
    for r in rows:
        print("%-18s %5d %6s %4s %6s %4s %5s %8s %8s %10s %11s  %s" % (
            r["arch"], r["opset"], "-" if r["nodes"] is None else r["nodes"], r["gen"], r["imp"], r["step"],
            r["adamw"], fmt(r["loss"]), fmt(r["grad"]), fmt(r["adamw_loss"]), fmt(r["adamw_param"]),
            r["error"][:200]), file=file)
    file.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default=",".join(TESTDATA_ARCHS + PROBE_ARCHS),
                    help="comma-separated architectures (generate.py SPECS names or probe_*)")
    ap.add_argument("--opsets", default=",".join(map(str, OPSETS)), help="comma-separated opsets")
    ap.add_argument("--scratch", default="/tmp/opset-sweep", help="where the artifacts are written")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="gmopt build folder")
    ap.add_argument("--generate", default=os.path.join(ROOT, "testdata", "generate.py"),
                    help="the generate.py whose machinery and SPECS are used")
    ap.add_argument("--reuse", action="store_true", help="keep artifacts already in the scratch folder")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per generator or gmopt run")
    ap.add_argument("--json", help="also write the rows as JSON here")
    # Internal: generate one (arch, opset).
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arch", help=argparse.SUPPRESS)
    ap.add_argument("--opset", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    scratch = os.path.abspath(args.scratch)
    testdata = os.path.realpath(os.path.join(ROOT, "testdata"))
    if os.path.realpath(scratch).startswith(testdata + os.sep) or os.path.realpath(scratch) == testdata:
        sys.exit("--scratch must not be inside testdata/")
    args.scratch = scratch
    os.makedirs(scratch, exist_ok=True)
    bins = dict(opt=os.path.join(args.build, "tools", "gmopt-opt"), run=os.path.join(args.build, "tools", "gmopt-run"))
    for b in bins.values():
        if not os.path.exists(b):
            sys.exit(f"{b} not found: build gmopt first (or pass --build)")
    rows = []
    for arch in args.archs.split(","):
        for opset in map(int, args.opsets.split(",")):
            row = sweep_one(arch, opset, args, bins)
            rows.append(row)
            print_table([row], file=sys.stderr)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
