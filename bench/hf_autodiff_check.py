#!/usr/bin/env python3
"""Transformer families from `transformers`' public configurations, trained by
gmopt's own autodiff against PyTorch autograd (issue 34 item 1).

For each family (Llama with grouped-query attention, T5, BART, Mistral,
Qwen2, GPT-NeoX, Phi) and each constant-folding setting, builds the model
with random weights (nothing downloaded), exports the forward with
torch.onnx.export (opset 17, static shapes, the family's default attention),
computes the cross-entropy loss and every parameter's gradient with PyTorch
(tests/lit/autodiff/Inputs/make_hf_models.py, the generator of the lit
fixtures, at its "bench" size unless --size tiny), then runs

    gmopt-compile model.onnx --train --loss=cross-entropy:logits,labels [--passes=...tie-weights...]
    gmopt-run model.gm --backend=cpu --threads 1 --inputs D --check D

with no --frozen and prints one row per export: the trainable count gmopt
printed against PyTorch's parameter count, the count before issue 34's fix
(every float initializer or Constant node value of more than one element),
the worst gradient error relative to the reference's largest magnitude, and
pass/fail (counts equal, every check within tolerance). A tied LM head that
constant folding split into a transposed copy is compiled with tie-weights
in the pipeline (PyTorch issue 108342): the copy's gradient is summed into
the kept parameter, as PyTorch does.

    testdata/.venv/bin/pip install transformers==4.46.3   # once
    testdata/.venv/bin/python bench/hf_autodiff_check.py [--families llama t5 ...] [--size tiny]

--attention-mask adds attention_mask to the forward's inputs,
--dynamic-batch makes the batch symbolic (compiled with --dim batch=2),
--training-mode exports with TrainingMode.TRAINING, --freeze-buffers passes
--frozen= the initializers that hold no PyTorch parameter (BART's
final_logits_bias, the one such buffer: nothing in the graph tells a zero
buffer from a zero-initialised bias). Exit status 1 when a row fails.

Needs transformers (not in testdata/requirements.txt: CI does not run this);
without it, prints a note and exits 0.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lit", "autodiff", "Inputs"))

TIED_PIPELINE = ("canonicalize,tie-weights,fold-transpose,fold-scale,"
                 "recompute{mode=selective},schedule,plan-buffers")


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    return proc.returncode, proc.stdout


def check_one(gen, family, size, fold, work, tools, freeze_buffers):
    name = f"hf_{family}" + ("" if fold else "_nofold")
    out_dir = os.path.join(work, name)
    start = time.time()
    try:
        info = gen.export_family(family, size, fold, out_dir, quiet=True)
    except Exception as err:  # an export failure is a row, not a crash
        return {"name": name, "error": f"export: {type(err).__name__}: {err}"}
    row = {"name": name, "info": info, "torch": info["torch_parameters"],
           "old": info["old_trainable"]}
    data = os.path.join(out_dir, "test_data_set_0")
    compiled = os.path.join(out_dir, "model.gm")
    cmd = [os.path.join(tools, "gmopt-compile"),
           os.path.join(out_dir, "model.onnx"), "--train",
           "--loss=cross-entropy:logits,labels", "-o", compiled]
    if gen.DYNAMIC_BATCH:
        cmd.append(f"--dim=batch={gen.SIZES[size]['batch']}")
    row["tie"] = bool(info["tied_copies"])
    if row["tie"]:
        cmd.append("--passes=" + TIED_PIPELINE)
    row["frozen"] = [b["name"] for b in info["buffers"]] if freeze_buffers else []
    if row["frozen"]:
        cmd.append("--frozen=" + ",".join(row["frozen"]))
    rc, text = run(cmd)
    row["compile_log"] = text
    match = re.search(r"trainable: (\d+) parameters", text)
    row["gmopt"] = int(match.group(1)) if match else None
    if rc != 0:
        row["error"] = "compile: " + text.strip().splitlines()[-1]
        return row
    rc, text = run([os.path.join(tools, "gmopt-run"), compiled,
                    "--backend=cpu", "--threads", "1", "--quiet",
                    "--inputs", data, "--check", data])
    row["run_log"] = text
    # max_rel_err is max|got-ref| / max|ref|: meaningless where the
    # reference is zero up to rounding (a key projection's bias, whose
    # gradient softmax cancels); those pass on the absolute floor (1e-6)
    # and are counted apart.
    worst, worst_name, checked, near_zero = 0.0, None, 0, 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3] in ("ok", "FAIL"):
            try:
                abs_err, rel = float(parts[1]), float(parts[2])
            except ValueError:
                continue
            checked += 1
            if parts[0] == "loss":
                row["loss_rel"] = rel
                continue
            if rel > 0 and abs_err / rel < 1e-6:
                near_zero += 1
                continue
            if rel >= worst:
                worst, worst_name = rel, parts[0]
    row.update(worst=worst, worst_name=worst_name, checked=checked,
               near_zero=near_zero, run_rc=rc,
               seconds=time.time() - start)
    if rc != 0 and checked == 0:
        row["error"] = "run: " + text.strip().splitlines()[-1]
    row["ok"] = (rc == 0 and row["gmopt"] == row["torch"]
                 and checked == info["gradients_written"] + 1)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=None)
    parser.add_argument("--size", default="bench", choices=["tiny", "bench"])
    parser.add_argument("--fold", choices=["both", "true", "false"],
                        default="both")
    parser.add_argument("--tools", default=os.path.join(ROOT, "build", "tools"))
    parser.add_argument("--freeze-buffers", action="store_true",
                        help="pass --frozen= the initializers that hold no "
                        "PyTorch parameter (BART's final_logits_bias)")
    parser.add_argument("--attention-mask", action="store_true",
                        help="the forwards take attention_mask too (the "
                        "last sequence padded at its last 2 positions)")
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="export with a symbolic batch (compiled with "
                        "--dim batch=2)")
    parser.add_argument("--training-mode", action="store_true",
                        help="export with training=TrainingMode.TRAINING "
                        "(default EVAL; dropout is 0 either way)")
    parser.add_argument("--keep", help="write the exports here (kept)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the compile and run logs of failures")
    args = parser.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("hf_autodiff_check: transformers is not installed "
              "(testdata/.venv/bin/pip install transformers==4.46.3); "
              "nothing checked")
        return 0
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    import make_hf_models as gen
    gen.MASKS = args.attention_mask
    gen.DYNAMIC_BATCH = args.dynamic_batch
    gen.TRAINING_MODE = args.training_mode
    families = args.families or gen.FAMILIES
    folds = {"both": [True, False], "true": [True], "false": [False]}[args.fold]
    scratch = None
    if args.keep:
        work = args.keep
    else:
        scratch = tempfile.TemporaryDirectory(prefix="hf_autodiff_")
        work = scratch.name
    rows = []
    for family in families:
        for fold in folds:
            row = check_one(gen, family, args.size, fold, work, args.tools,
                            args.freeze_buffers)
            rows.append(row)
            sys.stderr.write(f"{row['name']}: "
                             f"{'ok' if row.get('ok') else 'FAIL'}\n")
    size = gen.SIZES[args.size]
    print(f"transformers {transformers.__version__}, torch "
          f"{torch.__version__}; size {args.size} "
          + ", ".join(f"{k} {v}" for k, v in size.items())
          + ("; attention_mask" if args.attention_mask else "")
          + ("; symbolic batch" if args.dynamic_batch else "")
          + ("; TrainingMode.TRAINING" if args.training_mode else ""))
    print(f"{'export':<20}{'torch':>6}{'gmopt':>6}{'old':>5}{'tie':>5}"
          f"{'checked':>8}{'~0':>4}{'worst grad rel':>16}  result  "
          f"worst tensor")
    failures = 0
    for row in rows:
        if "info" not in row:
            print(f"{row['name']:<20}  {row['error']}")
            failures += 1
            continue
        result = "pass" if row.get("ok") else "FAIL"
        failures += result != "pass"
        worst = (f"{row['worst']:.3e}" if "worst" in row else "-")
        print(f"{row['name']:<20}{row['torch']:>6}{str(row['gmopt']):>6}"
              f"{row['old']:>5}{'yes' if row['tie'] else 'no':>5}"
              f"{row.get('checked', 0):>8}{row.get('near_zero', 0):>4}"
              f"{worst:>16}  {result:<6}  {row.get('worst_name') or ''}"
              + (f"  ({row['error']})" if "error" in row else ""))
        if row["frozen"]:
            print(f"{'':<20}  --frozen={','.join(row['frozen'])}")
        extra = ([b["name"] for b in row["info"]["buffers"]])
        if row["gmopt"] is not None and row["gmopt"] != row["torch"]:
            print(f"{'':<20}  trainable but no PyTorch parameter: "
                  f"{', '.join(extra) or '?'}")
        if args.verbose and result != "pass":
            print(row.get("compile_log", ""), row.get("run_log", ""))
    print(f"{len(rows) - failures} passed, {failures} failed")
    if scratch is not None:
        scratch.cleanup()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
