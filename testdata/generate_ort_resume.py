#!/usr/bin/env python3
"""Makes the ONNX Runtime resume fixture: a checkpoint that ONNX Runtime's training API saved with
its AdamW optimizer state after a few steps, and ONNX Runtime's own losses after resuming from it.

Usage (from the repository root):

    bash scripts/testdata-env.sh && testdata/.venv/bin/python testdata/generate_ort_resume.py

For each model in RESUMES (an existing testdata model: its training_model.onnx, eval_model.onnx,
optimizer_model.onnx, checkpoint and test_data_set_0) this script
  1. loads the model's checkpoint into onnxruntime.training.api CheckpointState + Module +
     Optimizer (onnxruntime-training 1.19.2), sets the learning rate of the model's
     adamw_losses.json and trains SAVED_AFTER AdamW steps on test_data_set_0's batch,
  2. saves CheckpointState.save_checkpoint(state, ..., include_optimizer_state=True) as
     testdata/ort_resume/<model>/checkpoint (its optimizer group `group0` holds the step count and
     each trainable parameter's momentum0/momentum1),
  3. loads that file into a fresh CheckpointState + Module + Optimizer, sets the same learning rate
     (ONNX Runtime resumes at its default 0.001 otherwise: the checkpoint's initial_learning_rate
     is a scheduler's base, not the rate in use) and trains RESUMED_STEPS more steps,
  4. checks those losses against one uninterrupted run of SAVED_AFTER + RESUMED_STEPS steps, and
     writes resume_losses.json (the format of adamw_losses.json, which `gmopt-run
     --loss-reference` reads: optimizer, hyper-parameters, learning rate, the resumed run's losses
     and its final parameters in resume_final_params/).

`--check-gmopt GMOPT_RUN` checks the other direction with the real ONNX Runtime: gmopt-run resumes
from the fixture for GMOPT_STEPS steps and saves an ONNX Runtime checkpoint (`--save-weights`);
ONNX Runtime loads that file, resumes it for the remaining steps, and its losses must equal the
fixture's to 1e-6 relative (and gmopt's saved moments and step those of ONNX Runtime's own run).
CI has no ONNX Runtime; the tests read the committed files.

Everything is seeded and single-threaded; running the script twice writes the same files.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.training.api import CheckpointState, Module, Optimizer

from generate import rel_diff, session_options, tensor_pb  # noqa: E402 (testdata/, beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "ort_resume")
SAVED_AFTER = 3  # AdamW steps before the checkpoint is saved
RESUMED_STEPS = 5  # steps ONNX Runtime trains after loading it
GMOPT_STEPS = 2  # --check-gmopt: steps gmopt-run trains before it saves
RESUMES = [dict(name="regression_frozen", dims=["batch=8"])]
RTOL = 1e-6


def log(*args):
    print("[ort_resume]", *args, flush=True)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def optimizer_state(path):
    """{group: (step, initial_learning_rate, {param: {state name: array}})} of a checkpoint file, read
    with the flatbuffers package against ort_training_checkpoint.fbs (the Python API has no reader)."""
    import struct
    from flatbuffers.table import Table

    buf = bytearray(open(path, "rb").read())

    def field(t, i):
        return t.Offset(4 + 2 * i)

    def string(t, i):
        o = field(t, i)
        return t.String(o + t.Pos).decode() if o else ""

    def tables(t, i):
        o = field(t, i)
        return [Table(buf, t.Indirect(t.Vector(o) + 4 * k)) for k in range(t.VectorLen(o))] if o else []

    def scalar(t, i, fmt, default):
        o = field(t, i)
        return struct.unpack_from(fmt, buf, t.Pos + o)[0] if o else default

    def tensor(t):  # ort.fbs Tensor: name 0, dims 2, data_type 3, raw_data 4
        o = field(t, 2)
        dims = [struct.unpack_from("<q", buf, t.Vector(o) + 8 * k)[0] for k in range(t.VectorLen(o))]
        if scalar(t, 3, "<i", 0) != onnx.TensorProto.FLOAT:
            raise RuntimeError(f"{path}: state tensor {string(t, 0)} is not float32")
        o = field(t, 4)
        raw = bytes(buf[t.Vector(o):t.Vector(o) + t.VectorLen(o)])
        return np.frombuffer(raw, dtype="<f4").reshape(dims)

    root = Table(buf, struct.unpack_from("<I", buf, 0)[0])
    groups = {}
    for g in tables(root, 2):  # Checkpoint.optimizer_groups
        params = {string(p, 0): {string(m, 0): tensor(m) for m in tables(p, 1)} for p in tables(g, 3)}
        groups[string(g, 0)] = (scalar(g, 1, "<q", 0), scalar(g, 2, "<f", 0.0), params)
    return groups


def model_files(name):
    mdir = os.path.join(HERE, name)
    tdir = os.path.join(mdir, "test_data_set_0")
    with open(os.path.join(tdir, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(mdir, "adamw_losses.json")) as f:
        adamw = json.load(f)
    data = [read_pb(os.path.join(tdir, e["file"])) for e in manifest["inputs"] if e["role"] == "data"]
    trainable = [e["name"] for e in manifest["inputs"] if e["role"] == "parameter"]
    return mdir, data, trainable, adamw


class Trainer:
    """ONNX Runtime's training API over a model's artifacts, from checkpoint file `ckpt`."""

    def __init__(self, mdir, ckpt, lr):
        self.state = CheckpointState.load_checkpoint(ckpt)
        self.module = Module(os.path.join(mdir, "training_model.onnx"), self.state,
                             os.path.join(mdir, "eval_model.onnx"), device="cpu",
                             session_options=session_options())
        self.optimizer = Optimizer(os.path.join(mdir, "optimizer_model.onnx"), self.module)
        self.optimizer.set_learning_rate(lr)
        self.module.train()

    def steps(self, data, count):
        losses = []
        for _ in range(count):
            self.module.lazy_reset_grad()
            losses.append(float(self.module(*data)))
            self.optimizer.step()
        return losses

    def save(self, path):
        CheckpointState.save_checkpoint(self.state, path, include_optimizer_state=True)


def generate(spec):
    name = spec["name"]
    mdir, data, trainable, adamw = model_files(name)
    lr = adamw["learning_rate"]
    odir = os.path.join(OUT, name)
    if os.path.isdir(odir):
        shutil.rmtree(odir)
    os.makedirs(odir)
    ckpt = os.path.join(odir, "checkpoint")

    straight = Trainer(mdir, os.path.join(mdir, "checkpoint"), lr).steps(data, SAVED_AFTER + RESUMED_STEPS)
    first = Trainer(mdir, os.path.join(mdir, "checkpoint"), lr)
    saved_losses = first.steps(data, SAVED_AFTER)
    first.save(ckpt)
    resumed = Trainer(mdir, ckpt, lr)
    losses = resumed.steps(data, RESUMED_STEPS)
    # ONNX Runtime's own resume is exact: it equals the uninterrupted run.
    if losses != straight[SAVED_AFTER:] or saved_losses != straight[:SAVED_AFTER]:
        raise RuntimeError(f"{name}: ONNX Runtime's resumed losses {losses} differ from its uninterrupted "
                           f"run's {straight[SAVED_AFTER:]}")
    final = {n: resumed.state.parameters[n].data.copy() for n in trainable}

    pdir = os.path.join(odir, "resume_final_params")
    os.makedirs(pdir)
    params = []
    for n in trainable:
        fn = f"{n}.pb"
        with open(os.path.join(pdir, fn), "wb") as f:
            f.write(tensor_pb(final[n].reshape(-1), n).SerializeToString())
        params.append(dict(name=n, file=fn, shape=list(final[n].shape), stride=1, count=int(final[n].size)))
    with open(os.path.join(odir, "resume_losses.json"), "w") as f:
        json.dump(dict(
            optimizer="AdamW",
            op=adamw["op"],
            hyperparameters=adamw["hyperparameters"],
            hyperparameters_source=f"{name}/adamw_losses.json (its optimizer_model.onnx)",
            learning_rate=lr,
            steps=RESUMED_STEPS,
            checkpoint="checkpoint",
            checkpoint_note=f"CheckpointState.save_checkpoint(include_optimizer_state=True) after {SAVED_AFTER} "
                            f"AdamW steps from {name}/checkpoint on {name}/test_data_set_0 at learning rate {lr} "
                            f"(onnxruntime-training {ort.__version__}): optimizer group 'group0', step "
                            f"{SAVED_AFTER}, momentum0/momentum1 per trainable parameter",
            trainer="a fresh CheckpointState.load_checkpoint(checkpoint) + Module + Optimizer, "
                    f"set_learning_rate({lr}); per step: lazy_reset_grad, train step, optimizer step",
            batch=f"{name}/test_data_set_0 data inputs (the same fixed batch every step)",
            losses_note=f"losses[k] is the loss computed with the parameters after {SAVED_AFTER} + k updates; "
                        f"they equal steps {SAVED_AFTER + 1}.. of one uninterrupted ONNX Runtime run",
            saved_run_losses=saved_losses,
            losses=losses,
            final_parameters=dict(
                directory="resume_final_params",
                note=f"trainable parameters after all {SAVED_AFTER + RESUMED_STEPS} updates, every element",
                params=params),
        ), f, indent=1)
        f.write("\n")
    log(f"{name}: saved after {SAVED_AFTER} steps ({os.path.getsize(ckpt)} bytes); resumed losses {losses}")


def check_gmopt(spec, gmopt_run):
    """gmopt-run resumes the fixture, saves an ONNX Runtime checkpoint; ONNX Runtime resumes that."""
    name = spec["name"]
    mdir, data, trainable, adamw = model_files(name)
    odir = os.path.join(OUT, name)
    with open(os.path.join(odir, "resume_losses.json")) as f:
        reference = json.load(f)
    lr = reference["learning_rate"]
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "gmopt.ckpt")
        cmd = [gmopt_run, os.path.join(mdir, "training_model.onnx"), "--backend=cpu", "--threads", "1",
               "--optimizer-model", os.path.join(mdir, "optimizer_model.onnx"),
               "--inputs", os.path.join(mdir, "test_data_set_0"), "--weights", os.path.join(odir, "checkpoint"),
               "--steps", str(GMOPT_STEPS), "--lr", str(lr), "--save-weights", saved]
        for d in spec["dims"]:
            cmd += ["--dim", d]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        log(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "(no output)")
        if out.stderr.strip():
            log(out.stderr.strip())
        # ONNX Runtime's own state after the same steps, for the moments and the step.
        own = Trainer(mdir, os.path.join(odir, "checkpoint"), lr)
        own.steps(data, GMOPT_STEPS)
        own_file = os.path.join(tmp, "ort.ckpt")
        own.save(own_file)
        ours = CheckpointState.load_checkpoint(saved)
        theirs = CheckpointState.load_checkpoint(own_file)
        worst = max(rel_diff(ours.parameters[n].data, theirs.parameters[n].data) for n in trainable)
        log(f"{name}: parameters after {GMOPT_STEPS} resumed steps, gmopt vs ONNX Runtime: {worst:.2e} relative")
        if worst > RTOL:
            raise RuntimeError(f"{name}: gmopt's saved parameters differ from ONNX Runtime's by {worst:.2e}")
        ours_state, theirs_state = optimizer_state(saved), optimizer_state(own_file)
        if list(ours_state) != list(theirs_state):
            raise RuntimeError(f"{name}: gmopt saved groups {list(ours_state)}, ONNX Runtime {list(theirs_state)}")
        for group, (step, initial_lr, params) in theirs_state.items():
            got_step, got_lr, got = ours_state[group]
            if (got_step, got_lr) != (step, initial_lr) or sorted(got) != sorted(params):
                raise RuntimeError(f"{name}: group {group}: gmopt saved step {got_step}, initial lr {got_lr}, "
                                   f"state of {sorted(got)}; ONNX Runtime {step}, {initial_lr}, {sorted(params)}")
            worst = max(rel_diff(got[p][m], params[p][m]) for p in params for m in params[p])
            log(f"{name}: group {group}: step {got_step}, initial lr {got_lr}; moments gmopt vs ONNX Runtime: "
                f"{worst:.2e} relative")
            if worst > RTOL or any(sorted(got[p]) != sorted(params[p]) for p in params):
                raise RuntimeError(f"{name}: gmopt's saved moments differ from ONNX Runtime's by {worst:.2e}")
        # The rest of the resume, in ONNX Runtime, from gmopt's file.
        resumed = Trainer(mdir, saved, lr)
        losses = resumed.steps(data, RESUMED_STEPS - GMOPT_STEPS)
        want = reference["losses"][GMOPT_STEPS:]
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, want))
        log(f"{name}: ONNX Runtime resumed from gmopt's checkpoint: {losses} vs {want}: {worst:.2e} relative")
        if worst > RTOL:
            raise RuntimeError(f"{name}: ONNX Runtime's losses from gmopt's checkpoint differ by {worst:.2e}")
        final = {n: resumed.state.parameters[n].data for n in trainable}
        with open(os.path.join(odir, "resume_losses.json")) as f:
            params = json.load(f)["final_parameters"]["params"]
        for p in params:
            ref = read_pb(os.path.join(odir, "resume_final_params", p["file"])).reshape(p["shape"])
            d = rel_diff(final[p["name"]], ref)
            if d > RTOL:
                raise RuntimeError(f"{name}: final {p['name']} differs by {d:.2e}")
        log(f"{name}: ok: gmopt's checkpoint resumes in ONNX Runtime with ONNX Runtime's own losses")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-gmopt", metavar="GMOPT_RUN",
                    help="check that ONNX Runtime resumes a checkpoint this gmopt-run saved (writes nothing)")
    args = ap.parse_args()
    for spec in RESUMES:
        if args.check_gmopt:
            check_gmopt(spec, args.check_gmopt)
        else:
            generate(spec)


if __name__ == "__main__":
    sys.exit(main())
