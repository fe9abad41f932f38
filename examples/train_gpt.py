#!/usr/bin/env python3
"""Trains a small GPT on gmopt's own sources with gmopt.training.api.

The loop a person would write for ONNX Runtime's training API, with the
import changed: batches drawn from a memory-mapped token file, a cosine
learning-rate schedule with warm-up, an evaluation every --eval-every steps,
a checkpoint (parameters, AdamW moments, step and loss history) every
--checkpoint-every steps, a resume that continues bit-identically, a
progress line, and the loss curves as a PNG at the end.

The model is testdata/gpt_tiny (ONNX Runtime's artifacts of a 2-layer GPT,
vocabulary 512, sequence 64, batch 4); the tokens are the bytes of the
repository's C++ sources, the last tenth held out for evaluation.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/train_gpt.py --out /tmp/gpt-run
    # ... interrupted, or to continue a run:
    PYTHONPATH=python:build/python /usr/bin/python3 examples/train_gpt.py --out /tmp/gpt-run \\
        --resume /tmp/gpt-run/checkpoint_100
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from gmopt.training import api

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_png  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(REPO, "testdata", "gpt_tiny")
BATCH, SEQ = 4, 64
SOURCE_DIRS = ("ir", "passes", "backend", "tools")


def write_tokens(path):
    """Writes the byte tokens of the repository's C++ sources (sorted by
    path, so every run reads the same corpus) as uint16 to ``path``."""
    chunks = []
    for top in SOURCE_DIRS:
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".cpp", ".h")):
                    with open(os.path.join(root, name), "rb") as f:
                        chunks.append(np.frombuffer(f.read(), dtype=np.uint8))
    tokens = np.concatenate(chunks).astype(np.uint16)
    tokens.tofile(path)
    return len(tokens)


def open_tokens(out):
    """The corpus as a read-only memory map, written on first use."""
    path = os.path.join(out, "tokens.u16")
    if not os.path.exists(path):
        write_tokens(path)
    return np.memmap(path, dtype=np.uint16, mode="r")


def get_batch(tokens, split, step, seed):
    """Batch ``step`` of ``split``: BATCH windows at offsets drawn from a
    generator keyed by (seed, split, step), so a resumed run draws the
    batches the uninterrupted run would have."""
    cut = len(tokens) * 9 // 10
    lo, hi = (0, cut) if split == "train" else (cut, len(tokens))
    rng = np.random.default_rng([seed, 0 if split == "train" else 1, step])
    starts = rng.integers(lo, hi - SEQ - 1, size=BATCH)
    window = np.stack([tokens[s:s + SEQ + 1] for s in starts]).astype(np.int64)
    return window[:, :SEQ], window[:, 1:].reshape(-1)


def cosine_lr(step, peak, warmup, total, floor):
    """Linear warm-up to ``peak`` over ``warmup`` steps, then a cosine decay
    to ``floor`` at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def evaluate(module, tokens, seed, batches):
    module.eval()
    losses = [float(module(*get_batch(tokens, "eval", i, seed))) for i in range(batches)]
    module.train()
    return sum(losses) / len(losses)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory (tokens, checkpoints, history, plot)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps in all (default 300)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps (default 20)")
    p.add_argument("--eval-every", type=int, default=50, help="steps between evaluations")
    p.add_argument("--eval-batches", type=int, default=4, help="batches per evaluation")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--resume", help="a checkpoint directory this script wrote")
    p.add_argument("--seed", type=int, default=0, help="batch order seed")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    for name in ("steps", "warmup", "eval_every", "eval_batches", "checkpoint_every"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tokens = open_tokens(args.out)
    checkpoint = args.resume or os.path.join(ARTIFACTS, "checkpoint")
    state = api.CheckpointState.load_checkpoint(checkpoint)
    history = {"train": [], "eval": []}
    start = 0
    if args.resume:
        if "step" not in state.properties:
            sys.exit(f"train_gpt.py: {args.resume} was not written by this script (no 'step' property)")
        start = int(state.properties["step"])
        with open(os.path.join(args.resume, "history.json")) as f:
            history = json.load(f)
    module = api.Module(os.path.join(ARTIFACTS, "training_model.onnx"), state,
                        os.path.join(ARTIFACTS, "eval_model.onnx"), threads=args.threads)
    optimizer = api.Optimizer(os.path.join(ARTIFACTS, "optimizer_model.onnx"), module)

    began = time.perf_counter()
    for step in range(start, args.steps):
        lr = cosine_lr(step, args.lr, args.warmup, args.steps, args.lr / 10)
        optimizer.set_learning_rate(lr)
        module.lazy_reset_grad()
        loss = float(module(*get_batch(tokens, "train", step, args.seed)))
        optimizer.step()
        history["train"].append([step + 1, loss])
        done = step + 1
        if done % args.eval_every == 0 or done == args.steps:
            history["eval"].append([done, evaluate(module, tokens, args.seed, args.eval_batches)])
        if not args.quiet:
            rate = (done - start) * BATCH * SEQ / (time.perf_counter() - began)
            last_eval = f"  eval {history['eval'][-1][1]:.4f}" if history["eval"] else ""
            print(f"\rstep {done:5d}/{args.steps}  loss {loss:.4f}  lr {lr:.2e}  "
                  f"{rate:7.0f} tok/s{last_eval}", end="", flush=True)
        if done % args.checkpoint_every == 0 or done == args.steps:
            directory = os.path.join(args.out, f"checkpoint_{done}")
            os.makedirs(directory, exist_ok=True)
            state.properties["step"] = done
            api.CheckpointState.save_checkpoint(state, os.path.join(directory, "checkpoint"),
                                                include_optimizer_state=True)
            with open(os.path.join(directory, "history.json"), "w") as f:
                json.dump(history, f)
    if not args.quiet:
        print()
    with open(os.path.join(args.out, "history.json"), "w") as f:
        json.dump(history, f)
    plot_png.write_plot(os.path.join(args.out, "loss.png"),
                        [("train", history["train"], (31, 119, 180)),
                         ("eval", history["eval"], (214, 39, 40))])
    first, last = history["train"][0][1], history["train"][-1][1]
    print(f"train loss {first:.4f} -> {last:.4f}; plot {os.path.join(args.out, 'loss.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
