#!/usr/bin/env python3
"""gmopt.torch on three PyTorch models: gradients against autograd, and
plan_memory's table (issue 37 item 4).

Three modules built from torch layers with random weights (nothing
downloaded): an MLP (Linear, GELU, tanh; cross-entropy), a small CNN
(Conv2d without bias, training-mode BatchNorm2d, ReLU, max pooling, Linear;
cross-entropy) and a two-block GPT (token and position Embedding, LayerNorm,
causal self-attention written with torch ops, GELU MLP, an LM head;
cross-entropy over every position). For each, gmopt.torch.compile_training
exports the module with its loss, builds the training step with gmopt's
autodiff and the default pipeline, runs one step, and the loss and every
parameter's gradient are compared with PyTorch autograd's on the same batch:
the error of a tensor is max|gmopt - torch| / max|torch|. Then
gmopt.torch.plan_memory prints the GPT's planned peak per batch size and the
largest batch that fits a limit, without and with an in-graph AdamW.

    PYTHONPATH=python:build/python testdata/.venv/bin/python bench/torch_front_door.py [--limit 4MiB]

python/tests/test_torch_front_door.py imports the models from here.
"""

import argparse
import math
import sys
import time


def relative_error(got, ref):
    """max|got - ref| / max|ref|, and max|got - ref| (for references that are
    zero up to rounding, where the ratio means nothing)."""
    import numpy as np
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    diff = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return diff / max(scale, 1e-30), diff


def make_models(torch):
    """name -> (module, example_inputs, loss, targets), seeded."""
    nn = torch.nn
    F = torch.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(32, 64)
            self.fc2 = nn.Linear(64, 64)
            self.out = nn.Linear(64, 10)

        def forward(self, x):
            return self.out(torch.tanh(self.fc2(F.gelu(self.fc1(x)))))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(16)
            self.fc = nn.Linear(16 * 4 * 4, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
            x = F.relu(self.bn2(self.conv2(x)))
            return self.fc(torch.flatten(x, 1))

    class Block(nn.Module):
        def __init__(self, dim, heads, context):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc = nn.Linear(dim, 4 * dim)
            self.fc2 = nn.Linear(4 * dim, dim)
            causal = torch.tril(torch.ones(context, context)).view(1, 1, context, context) == 0
            self.register_buffer("mask", causal, persistent=False)

        def forward(self, x):
            b, t, d = x.shape
            head = d // self.heads
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, head).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
            scores = scores.masked_fill(self.mask[:, :, :t, :t], float("-inf"))
            y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab=64, dim=32, heads=4, context=16, layers=2):
            super().__init__()
            self.wte = nn.Embedding(vocab, dim)
            self.wpe = nn.Embedding(context, dim)
            self.blocks = nn.ModuleList([Block(dim, heads, context) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    def lm_loss(logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    torch.manual_seed(0)
    return {
        "mlp": (MLP(), (torch.randn(4, 32),), F.cross_entropy, (torch.randint(0, 10, (4,)),)),
        "cnn": (CNN(), (torch.randn(4, 3, 16, 16),), F.cross_entropy, (torch.randint(0, 10, (4,)),)),
        "gpt": (GPT(), (torch.randint(0, 64, (2, 16)),), lm_loss, (torch.randint(0, 64, (2, 16)),)),
    }


def autograd_step(torch, module, inputs, loss, targets):
    """PyTorch's loss and gradients (by name) on one batch, in train mode."""
    module.train()
    module.zero_grad(set_to_none=True)
    value = loss(module(*inputs), *targets)
    value.backward()
    grads = {name: None if p.grad is None else p.grad.detach().numpy().copy()
             for name, p in module.named_parameters()}
    return float(value), grads


def check_model(torch, gmopt_torch, name, module, inputs, loss, targets):
    """One row: gmopt's step against autograd's on a copy of the weights."""
    start = time.time()
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    compiled = time.time() - start
    step = session.train_step(*inputs, *targets)
    ref_loss, ref_grads = autograd_step(torch, module, inputs, loss, targets)
    worst, worst_name, near_zero = 0.0, None, 0
    for param, ref in ref_grads.items():
        rel, diff = relative_error(step.gradients[param], ref)
        if float(abs(ref).max()) < 1e-6:
            near_zero += 1
            continue
        if rel >= worst:
            worst, worst_name = rel, param
    loss_rel = abs(step.loss - ref_loss) / max(abs(ref_loss), 1e-30)
    return {"name": name, "params": len(ref_grads), "loss": step.loss, "torch_loss": ref_loss,
            "loss_rel": loss_rel, "worst": worst, "worst_name": worst_name, "near_zero": near_zero,
            "peak": session.plan.peak_bytes, "compile_s": compiled}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", default="4MiB", help="plan_memory's limit (default 4MiB)")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64",
                        help="plan_memory's batch sizes (comma-separated)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_front_door: PyTorch is not installed (run it with testdata/.venv/bin/python); "
              "nothing checked")
        return 0
    import gmopt.torch as gmopt_torch
    torch.set_num_threads(1)
    models = make_models(torch)
    print(f"torch {torch.__version__}; one step, fp32, CPU; error = max|gmopt - torch| / max|torch| "
          "per gradient tensor")
    print(f"{'model':<6}{'params':>7}{'loss':>12}{'torch loss':>12}{'loss rel':>11}"
          f"{'worst grad rel':>16}  {'worst tensor':<24}{'peak B':>10}{'compile s':>11}")
    failed = 0
    for name, (module, inputs, loss, targets) in models.items():
        row = check_model(torch, gmopt_torch, name, module, inputs, loss, targets)
        ok = row["worst"] <= 1e-5 and row["loss_rel"] <= 1e-5
        failed += not ok
        print(f"{row['name']:<6}{row['params']:>7}{row['loss']:>12.6f}{row['torch_loss']:>12.6f}"
              f"{row['loss_rel']:>11.2e}{row['worst']:>16.3e}  {row['worst_name']:<24}"
              f"{row['peak']:>10}{row['compile_s']:>11.2f}" + ("" if ok else "  FAIL"))
    module, inputs, loss, targets = models["gpt"]
    batches = [int(b) for b in args.batches.split(",")]
    start = time.time()
    plan = gmopt_torch.plan_memory(module, inputs, batches, loss, targets=targets, limit=args.limit)
    print(f"\nplan_memory(gpt, batch_sizes={batches}, limit={args.limit!r}) "
          f"({time.time() - start:.1f} s)")
    print(plan.table())
    print("at the largest batch: " + ("recompute's budget mode" if "mode=budget" in plan.max_batch_pipeline
                                      else "the default pipeline"))
    start = time.time()
    plan = gmopt_torch.plan_memory(module, inputs, batches, loss, targets=targets, limit=args.limit,
                                   optimizer="adamw")
    print(f"\nthe same with optimizer='adamw' (its moments in the plan) ({time.time() - start:.1f} s)")
    print(plan.table())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
