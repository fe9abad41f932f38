#!/usr/bin/env python3
"""Regenerates gmopt's training-graph test data with ONNX Runtime's real artifact generator.

Usage (from the repository root):

    bash scripts/testdata-env.sh && testdata/.venv/bin/python testdata/generate.py

For every model below this script
  1. builds the PyTorch forward model with a fixed seed,
  2. exports it with torch.onnx.export (opset 17, symbolic batch dimension),
  3. calls onnxruntime.training.artifacts.generate_artifacts (loss block, AdamW optimizer,
     requires_grad / frozen_params) which writes training_model.onnx, eval_model.onnx,
     optimizer_model.onnx and checkpoint into testdata/<model>/,
  4. lowers ir_version to 8 where the generator wrote a higher one (so libonnx 1.12 reads
     the files) and checks that ONNX Runtime still loads the lowered files,
  5. runs training_model.onnx with ONNX Runtime (onnxruntime.training.api Module) on a
     fixed batch and writes test_data_set_0/{input,output}_K.pb (ONNX test-data layout),
  6. cross-checks loss and every gradient against torch autograd, and runs the same graph
     through a plain InferenceSession as a second ORT path,
  7. runs 20 plain-SGD steps with ORT gradients and writes sgd_losses.json (also replayed in
     torch as a check),
  8. trains 20 steps with ONNX Runtime's own training API (CheckpointState + Module + Optimizer
     over the artifacts, the optimizer_model.onnx's AdamW) and writes adamw_losses.json and
     adamw_final_params/ (replayed in numpy from ORT's gradients as a check),
and finally writes testdata/ops.txt and testdata/README.md.

`--only adamw-reference` does step 8 alone, over the committed artifacts, so the rest of the
committed test data is not rewritten.

Everything is seeded; running the script twice gives byte-identical files.
"""

import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module
import onnxruntime.training.onnxblock._graph_utils as onnxblock_graph_utils
import readme_writer  # noqa: E402 (testdata/, beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
MAX_IR_VERSION = 8
SGD_LR = 0.05
SGD_STEPS = 20
ADAMW_LR = 0.001  # per model `adamw_lr` overrides (mlp: at 1e-3 its loss reaches 3e-8, below fp32 resolution)
ADAMW_STEPS = 20
# adamw_final_params/ keeps every element of a parameter with at most this many elements and an
# evenly strided sample of larger ones (testdata/ stays within its 20 MB budget).
ADAMW_FINAL_SAMPLE = 4096
# ONNX Runtime's AdamWOptimizer attribute defaults (training_op_defs.cc), for absent attributes.
ADAMW_DEFAULTS = dict(alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=1e-2, correct_bias=1, adam_mode=0)
GRAD_RTOL = 1e-4  # tolerance a consumer should use for fp32 gradients (relative to max |ref|)
LOSS_RTOL = 1e-5
# The zero gradient-accumulation-buffer inputs are not written by default: they are as large as the
# parameters and would push testdata/ over its 20 MB budget. `--with-grad-buffers` writes them too.
WRITE_GRAD_BUFFERS = False

torch.use_deterministic_algorithms(True)
ort.set_default_logger_severity(3)
torch.set_num_threads(1)


# ----------------------------------------------------------------------------- exporter setup


# torch exports nn.LayerNorm at opset 17 as LayerNormalization with only its first output (Y).
# ONNX Runtime's gradient builder for LayerNormalization (onnxruntime-training 1.19.2) reads the
# optional Mean / InvStdDev outputs and fails with
#   gradient_builder_base.h:123 ... GradientBuilderBase::O(size_t, bool) const
#   i < node_->OutputDefs().size() was false
# (microsoft/onnxruntime issue 19427). So we register an exporter symbolic that emits the same
# LayerNormalization-17 node with all three outputs declared (ONNX-spec optional outputs; the
# forward math is unchanged).
@torch.onnx.symbolic_helper.parse_args("v", "is", "v", "v", "f", "b")
def _layer_norm_with_stats(g, inp, normalized_shape, weight, bias, eps, cudnn_enable):
    y, _mean, _inv_std = g.op("LayerNormalization", inp, weight, bias, epsilon_f=eps,
                              axis_i=-len(normalized_shape), outputs=3)
    return y


torch.onnx.register_custom_op_symbolic("aten::layer_norm", _layer_norm_with_stats, OPSET)


# ----------------------------------------------------------------------------- models


class MLP(nn.Module):
    """784-512-256-10 with ReLU (MNIST-sized classifier)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet(nn.Module):
    """LeNet-5 style: (Conv-ReLU-MaxPool) x2, then 3 Linear layers. Input 1x28x28."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5, padding=2)  # 28x28 -> 28x28 -> pool 14x14
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)  # 14x14 -> 10x10 -> pool 5x5
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu-conv-bn + shortcut (1x1 conv + bn when shape changes), relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc)


class ResNetTiny(nn.Module):
    """Conv stem, 2 residual blocks with BatchNorm, global average pool, linear head. Input 3x32x32."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


GPT_VOCAB, GPT_D, GPT_HEADS, GPT_SEQ, GPT_LAYERS, GPT_FF = 512, 128, 4, 64, 2, 128
GPT_SIZE = dict(vocab=GPT_VOCAB, d=GPT_D, heads=GPT_HEADS, seq=GPT_SEQ, layers=GPT_LAYERS, ff=GPT_FF)
# The opset-14 export (gpt_opset14): the same architecture at a quarter of the width, so the extra
# model costs little of the tracked-size budget.
GPT_SMALL = dict(vocab=64, d=32, heads=2, seq=16, layers=2, ff=64)
# bert_tiny and llama_tiny: GPT_SMALL's widths (Llama's SwiGLU MLP has three matrices, so ff 48).
BERT_SMALL = dict(vocab=64, d=32, heads=2, seq=16, layers=2, ff=64, classes=3)
LLAMA_SMALL = dict(vocab=64, d=32, heads=2, seq=16, layers=2, ff=48)
# llama_tiny_untied: one block of llama_tiny's width and its own LM head (the head is what differs;
# one block keeps the tracked size down).
LLAMA_UNTIED = dict(LLAMA_SMALL, layers=1, untied=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, seq, p):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(p)
        self.resid_drop = nn.Dropout(p)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class GPTBlock(nn.Module):
    def __init__(self, d, heads, seq, ff, p):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq, p)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp_fc = nn.Linear(d, ff)
        self.mlp_act = nn.GELU()
        self.mlp_proj = nn.Linear(ff, d)
        self.mlp_drop = nn.Dropout(p)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp_drop(self.mlp_proj(self.mlp_act(self.mlp_fc(self.ln_2(x)))))
        return x


class GPTTiny(nn.Module):
    """GPT-2 style pre-LN decoder. The LM head is tied to the token embedding (F.linear with wte.weight).

    `untied_head` is only set on the torch cross-check copy of gpt_tiny_untied: it then holds a
    separate parameter with the same data as wte.weight, mirroring the exported graph.
    """

    def __init__(self, p, size=GPT_SIZE):
        super().__init__()
        self.vocab = size["vocab"]
        self.wte = nn.Embedding(size["vocab"], size["d"])
        self.wpe = nn.Embedding(size["seq"], size["d"])
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList([GPTBlock(size["d"], size["heads"], size["seq"], size["ff"], p)
                                for _ in range(size["layers"])])
        self.ln_f = nn.LayerNorm(size["d"])
        self.untied_head = None
        # GPT-2 style init; LayerNorm gains/biases are perturbed so that no two parameters hold
        # identical data (keeps the reference gradients discriminative).
        with torch.no_grad():
            for name, prm in self.named_parameters():
                if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                    prm.copy_(1.0 + 0.1 * torch.randn_like(prm))
                elif prm.dim() == 1:
                    prm.copy_(0.02 * torch.randn_like(prm))
                else:
                    prm.normal_(0.0, 0.02)

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        head = self.wte.weight if self.untied_head is None else self.untied_head
        logits = F.linear(x, head)
        return logits.view(-1, self.vocab)  # (B*T, vocab): SoftmaxCrossEntropyLoss wants classes on axis 1


class Regressor(nn.Module):
    """16-64-64-4 MLP for MSE regression; fc1 is the frozen parameter group."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))


class BertTiny(nn.Module):
    """BERT-style encoder: token + position + token-type embeddings, embedding LayerNorm, post-LN
    encoder layers (self-attention with a key padding mask from `attention_mask`, GELU FFN), a
    pooler (Linear + tanh on token 0) and a classification head."""

    def __init__(self, vocab=64, d=32, heads=2, seq=16, layers=2, ff=64, classes=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                                batch_first=True) for _ in range(layers)])
        self.pool = nn.Linear(d, d)
        self.cls = nn.Linear(d, classes)
        perturb_norm_parameters(self)

    def forward(self, input_ids, attention_mask):
        _, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device)
        x = self.ln(self.tok(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids)))
        padding = attention_mask == 0  # True where a key is padding: no query attends to it
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class RMSNorm(nn.Module):
    """Llama's RMSNorm: w * x / sqrt(mean(x^2) + eps) (no mean subtraction, no bias)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half_rope(x, cos, sin):
    """Rotary position embedding in Llama's rotate-half form: x*cos + cat(-x2, x1)*sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, ff, bias=False)
        self.up = nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)


class LlamaTiny(nn.Module):
    """Llama-style decoder: RMSNorm, rotary embedding (cos/sin buffers, rotate-half), causal mask
    through torch.where, SwiGLU MLP (down(silu(gate(x)) * up(x))), bias-free linears, LM head tied
    to the token embedding, or with `untied` its own bias-free Linear (Llama 2's lm_head)."""

    def __init__(self, vocab=64, d=32, heads=2, seq=16, layers=2, ff=48, untied=False):
        super().__init__()
        self.heads = heads
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False) if untied else None
        self.blocks = nn.ModuleList([LlamaBlock(d, ff) for _ in range(layers)])
        self.norm = RMSNorm(d)
        hd = d // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", angles.cos()[None, None])
        self.register_buffer("sin", angles.sin()[None, None])
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))
        # Llama's init: every matrix (and the tied embedding) ~ N(0, 0.02), so the first loss is
        # near log(vocab) rather than the ~30 of nn.Embedding's N(0, 1) through the tied head.
        with torch.no_grad():
            for prm in self.parameters():
                if prm.dim() >= 2:
                    prm.normal_(0.0, 0.02)
        perturb_norm_parameters(self)

    def forward(self, input_ids):
        B, T = input_ids.shape
        H = self.heads
        cos, sin = self.cos[:, :, :T], self.sin[:, :, :T]
        x = self.emb(input_ids)
        for b in self.blocks:
            h = b.attn_norm(x)
            q = rotate_half_rope(b.q(h).view(B, T, H, -1).transpose(1, 2), cos, sin)
            k = rotate_half_rope(b.k(h).view(B, T, H, -1).transpose(1, 2), cos, sin)
            v = b.v(h).view(B, T, H, -1).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            att = torch.where(self.causal[:T, :T], att, torch.tensor(float("-inf")))
            y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + b.o(y)
            h = b.mlp_norm(x)
            x = x + b.down(F.silu(b.gate(h)) * b.up(h))
        x = self.norm(x)
        logits = x @ self.emb.weight.t() if self.head is None else self.head(x)
        return logits.reshape(-1, self.vocab)  # (B*T, vocab) for SoftmaxCrossEntropyLoss


class CnnBn(nn.Module):
    """Conv3x3(3->8)+BN+ReLU, two conv branches (1x1 and 3x3, 8->8 each) concatenated on the channel
    axis, BN(16)+ReLU, AvgPool(2), Linear(16*8*8 -> 10). Input 3x16x16. The convs have no bias: a
    bias before a training-mode BatchNorm has a zero gradient (the batch mean cancels it), which
    leaves nothing but rounding noise to compare."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.branch1x1 = nn.Conv2d(8, 8, 1, bias=False)
        self.branch3x3 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(16 * 8 * 8, 10)
        perturb_norm_parameters(self)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = torch.cat([self.branch1x1(x), self.branch3x3(x)], dim=1)
        x = self.pool(F.relu(self.bn2(x)))
        return self.fc(torch.flatten(x, 1))


def perturb_norm_parameters(model):
    """Sets every LayerNorm / RMSNorm / BatchNorm gain to 1 + 0.1*N(0,1) and bias to 0.02*N(0,1), so
    that no two parameters hold identical data (keeps the reference gradients discriminative)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.LayerNorm, RMSNorm, nn.BatchNorm2d)):
                mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(0.02 * torch.randn_like(mod.bias))


# ----------------------------------------------------------------------------- data


def mnist_like_batch(rng, batch, shape, classes):
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, classes, size=(batch,), dtype=np.int64)
    return [x, y]


def token_batch(rng, batch, size=GPT_SIZE):
    seq = rng.integers(0, size["vocab"], size=(batch, size["seq"] + 1), dtype=np.int64)
    return [seq[:, :size["seq"]].copy(), seq[:, 1:].reshape(-1).copy()]  # next-token labels, flattened


def padded_token_batch(rng, batch, size, classes):
    """BERT batch: input_ids, attention_mask (1 = token, 0 = padding; rows 1 and 3 padded from
    positions 11 and 6, their ids set to 0 there as a tokenizer's pad id) and class labels."""
    ids = rng.integers(1, size["vocab"], size=(batch, size["seq"]), dtype=np.int64)
    mask = np.ones((batch, size["seq"]), dtype=np.int64)
    mask[1, 11:] = 0
    mask[3, 6:] = 0
    ids[mask == 0] = 0
    labels = rng.integers(0, classes, size=(batch,), dtype=np.int64)
    return [ids, mask, labels]


def regression_batch(rng, batch):
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32) / 4.0
    y = (np.sin(x @ w) + 0.1 * rng.standard_normal((batch, 4))).astype(np.float32)
    return [x, y]


# ----------------------------------------------------------------------------- model specs

LOSS_CE = artifacts.LossType.CrossEntropyLoss
LOSS_MSE = artifacts.LossType.MSELoss

SPECS = [
    dict(
        name="mlp", seed=1, make=MLP, loss=LOSS_CE, adamw_lr=1e-4, input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        batch=lambda rng: mnist_like_batch(rng, 8, (784,), 10), batch_desc="input float32[8,784] ~ N(0,1), labels int64[8] in [0,10)",
    ),
    dict(
        name="cnn", seed=2, make=LeNet, loss=LOSS_CE, input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        batch=lambda rng: mnist_like_batch(rng, 8, (1, 28, 28), 10), batch_desc="input float32[8,1,28,28] ~ N(0,1), labels int64[8] in [0,10)",
    ),
    dict(
        name="resnet_tiny", seed=3, make=ResNetTiny, loss=LOSS_CE, input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        batch=lambda rng: mnist_like_batch(rng, 4, (3, 32, 32), 10), batch_desc="input float32[4,3,32,32] ~ N(0,1), labels int64[4] in [0,10)",
    ),
    dict(
        name="gpt_tiny", seed=4, make=lambda: GPTTiny(0.0), dropout=0.0, loss=LOSS_CE, input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        batch=lambda rng: token_batch(rng, 4), batch_desc="input_ids int64[4,64] uniform in [0,512), labels int64[256] = next tokens",
    ),
    dict(
        name="gpt_tiny_untied", seed=4, make=lambda: GPTTiny(0.0), dropout=0.0, loss=LOSS_CE, input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        constant_folding=True, untie_check=True,
        batch=lambda rng: token_batch(rng, 4), batch_desc="input_ids int64[4,64] uniform in [0,512), labels int64[256] = next tokens",
    ),
    dict(
        name="gpt_tiny_dropout", seed=4, make=lambda: GPTTiny(0.1), dropout=0.1, loss=LOSS_CE, input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        reference=False, batch=None, batch_desc="(no reference data: dropout ratio 0.1 is random)",
    ),
    dict(
        # The same GPT exported at opset 14 (GPT_SMALL width): torch decomposes nn.LayerNorm below
        # opset 17 and ONNX Runtime's LayerNormFusion turns it back into a default-domain
        # LayerNormalization (ORT's contrib op, registered there since version 1).
        name="gpt_opset14", seed=6, opset=14, make=lambda: GPTTiny(0.0, GPT_SMALL), dropout=0.0, loss=LOSS_CE,
        input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        batch=lambda rng: token_batch(rng, 4, GPT_SMALL),
        batch_desc="input_ids int64[4,16] uniform in [0,64), labels int64[64] = next tokens",
    ),
    dict(
        # The same small GPT at opset 20, the newest torch 2.4's exporter accepts, with the IR versions
        # the generator wrote (9 for the training and eval graphs, 10 for the optimizer graph): gmopt
        # must not need them lowered for libonnx 1.12.
        name="gpt_opset20", seed=6, opset=20, keep_ir_version=True, make=lambda: GPTTiny(0.0, GPT_SMALL),
        dropout=0.0, loss=LOSS_CE, input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        batch=lambda rng: token_batch(rng, 4, GPT_SMALL),
        batch_desc="input_ids int64[4,16] uniform in [0,64), labels int64[64] = next tokens",
    ),
    dict(
        name="regression_frozen", seed=5, make=Regressor, loss=LOSS_MSE, input_names=["input"], output_names=["prediction"],
        dynamic_axes={"input": {0: "batch"}, "prediction": {0: "batch"}},
        frozen=["fc1.weight", "fc1.bias"],
        batch=lambda rng: regression_batch(rng, 8), batch_desc="input float32[8,16] ~ N(0,1), target float32[8,4] = sin(x@W)+noise",
    ),
    dict(
        # BERT-style encoder with two data inputs: the padding mask (attention_mask == 0) reaches the
        # attention scores through Equal/Where/Expand; nn.TransformerEncoderLayer's erf GELU becomes
        # com.microsoft::BiasGelu, its post-LN LayerNormalization; the pooler slices token 0.
        name="bert_tiny", seed=7, make=lambda: BertTiny(**BERT_SMALL), loss=LOSS_CE,
        input_names=["input_ids", "attention_mask"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "logits": {0: "batch"}},
        batch=lambda rng: padded_token_batch(rng, 4, BERT_SMALL, BERT_SMALL["classes"]),
        batch_desc="input_ids int64[4,16] uniform in [1,64) (0 at padding), attention_mask int64[4,16] "
                   "(row 1 padded from position 11, row 3 from 6, rows 0 and 2 unpadded), labels int64[4] in [0,3)",
    ),
    dict(
        # Llama-style decoder: RMSNorm (fused by the generator into SimplifiedLayerNormalization),
        # rotary embedding (rotate-half: Slice, Neg, Concat), SwiGLU (silu becomes
        # com.microsoft::QuickGelu with alpha 1), causal mask through Where, tied head.
        name="llama_tiny", seed=8, make=lambda: LlamaTiny(**LLAMA_SMALL), loss=LOSS_CE,
        input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        batch=lambda rng: token_batch(rng, 4, LLAMA_SMALL),
        batch_desc="input_ids int64[4,16] uniform in [0,64), labels int64[64] = next tokens",
    ),
    dict(
        # llama_tiny with an untied LM head (a bias-free Linear of its own, a MatMul by its
        # transposed weight) and one block: the embedding's only gradient is GatherGrad.
        name="llama_tiny_untied", seed=10, make=lambda: LlamaTiny(**LLAMA_UNTIED), loss=LOSS_CE,
        input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch_x_seq"}},
        batch=lambda rng: token_batch(rng, 4, LLAMA_UNTIED),
        batch_desc="input_ids int64[4,16] uniform in [0,64), labels int64[64] = next tokens",
    ),
    dict(
        # CNN with training-mode BatchNorm (BatchNormInternal / BatchNormalizationGrad), a channel
        # Concat of two conv branches (ConcatTraining, split again in the backward), AveragePool.
        # The batch is static: ONNX Runtime's CPU AveragePoolGrad takes dX's shape from the graph's
        # static shape of its output (InferOutputShapes in pool_gradient_op.cc), so with a symbolic
        # batch it computes garbage (with BatchNorm before it) or dies of SIGFPE (without).
        name="cnn_bn", seed=9, make=CnnBn, loss=LOSS_CE, input_names=["input"], output_names=["logits"],
        dynamic_axes={},
        batch=lambda rng: mnist_like_batch(rng, 4, (3, 16, 16), 10),
        batch_desc="input float32[4,3,16,16] ~ N(0,1), labels int64[4] in [0,10)",
    ),
]


# ----------------------------------------------------------------------------- helpers


def log(*args):
    print(*args, flush=True)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def export_forward(model, example_inputs, spec):
    if "export_setup" in spec:
        spec["export_setup"](spec.get("opset", OPSET))  # e.g. registers exporter symbolics
    f = io.BytesIO()
    torch.onnx.export(
        model,
        tuple(torch.from_numpy(a) for a in example_inputs),
        f,
        input_names=spec["input_names"],
        output_names=spec["output_names"],
        dynamic_axes=spec["dynamic_axes"],
        opset_version=spec.get("opset", OPSET),
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=spec.get("constant_folding", False),
        export_params=True,
    )
    return onnx.load_from_string(f.getvalue())


def map_initializers(forward_model, named_params):
    """Maps float initializers of the exported graph to torch parameters.

    Returns {onnx_name: (torch_name, transposed)}. Initializers keep the torch name unless the
    exporter constant-folded a Transpose into a new initializer (onnx::MatMul_NNN); those are
    found by exact data match against the transposed torch parameter.
    """
    mapping, claimed = {}, set()
    inits = {i.name: numpy_helper.to_array(i) for i in forward_model.graph.initializer}
    for name in inits:
        if name in named_params:
            mapping[name] = (name, False)
            claimed.add(name)
    for name, arr in inits.items():
        if name in mapping or arr.dtype != np.float32:
            continue
        for tname, t in named_params.items():
            if tname in claimed:
                continue
            tv = t.detach().numpy()
            if tv.shape == arr.shape and np.array_equal(tv, arr):
                mapping[name] = (tname, False)
            elif tv.ndim == 2 and tv.T.shape == arr.shape and np.array_equal(tv.T, arr):
                mapping[name] = (tname, True)
            else:
                continue
            claimed.add(tname)
            break
    missing = set(named_params) - claimed
    if missing:
        raise RuntimeError(f"torch parameters not found among exported initializers: {sorted(missing)}")
    return mapping


DROPOUT_RATIO = "dropout_ratio"


def dropout_ratio_as_initializer(forward, ratio):
    """Replaces the constant `ratio` inputs of all Dropout nodes by one float initializer.

    ONNX Runtime's training build removes every Dropout whose ratio is a constant initializer
    equal to 0 (EliminateDropout, onnxruntime/core/optimizer/dropout_elimination.cc, applied by
    generate_artifacts' pre-training optimization), so a p=0 export would reach the training graph
    without any Dropout/DropoutGrad. The ratio is therefore made one initializer, passed to
    generate_artifacts as a frozen parameter: it becomes a graph input (value in the checkpoint),
    which EliminateDropout leaves alone. Forward semantics are unchanged.
    """
    consts = {n.output[0]: n for n in forward.graph.node if n.op_type == "Constant"}
    replaced = set()
    for n in forward.graph.node:
        if n.op_type != "Dropout":
            continue
        src = consts[n.input[1]]
        val = numpy_helper.to_array(src.attribute[0].t)
        if val.shape != () or float(val) != np.float32(ratio):
            raise RuntimeError(f"unexpected dropout ratio {val} in {n.name}")
        replaced.add(n.input[1])
        n.input[1] = DROPOUT_RATIO
    used = {i for n in forward.graph.node for i in n.input}
    keep = [n for n in forward.graph.node if not (n.op_type == "Constant" and n.output[0] in replaced
                                                   and n.output[0] not in used)]
    del forward.graph.node[:]
    forward.graph.node.extend(keep)
    forward.graph.initializer.append(numpy_helper.from_array(np.array(ratio, dtype=np.float32), DROPOUT_RATIO))
    return len(replaced)


def lower_ir_version(path, keep=False):
    m = onnx.load(path)
    before = m.ir_version
    if not keep and m.ir_version > MAX_IR_VERSION:
        m.ir_version = MAX_IR_VERSION
        onnx.save(m, path)
    return before, m.ir_version


def fix_eval_batchnorm(path):
    """Works around a generator bug (onnxruntime-training 1.19.2, onnxblock _disable_training_mode):
    for a model exported in training mode it sets BatchNormalization.training_mode=0 in
    eval_model.onnx but keeps the running_mean/running_var outputs, which ONNX shape inference
    (and so ORT) rejects: "This number of op outputs should be 1 when Training_mode = False".
    Removes those extra outputs when nothing consumes them. Returns the names of fixed nodes."""
    m = onnx.load(path)
    used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    fixed = []
    for n in m.graph.node:
        if n.op_type != "BatchNormalization" or len(n.output) == 1:
            continue
        mode = [a.i for a in n.attribute if a.name == "training_mode"]
        if mode and mode[0] == 0 and not any(o in used for o in n.output[1:] if o):
            del n.output[1:]
            fixed.append(n.name)
    if fixed:
        onnx.save(m, path)
    return fixed


def fix_eval_nll_loss(path):
    """Works around an ONNX Runtime 1.19.2 bug: its function body of
    com.microsoft::NegativeLogLikelihoodLossInternal (what its exporter symbolics write for
    F.nll_loss) calls Unsqueeze in the pre-opset-13 form, so a model at opset 13 or above that keeps
    the op does not load ("Unsqueeze ... has input size 1 not in range [min=2, max=2]"). The
    training graph does not keep it (SoftmaxCrossEntropyLossInternalFusion folds it with its
    LogSoftmax), but eval_model.onnx does, and the training API loads that too. Replaces each by
    the equivalent ai.onnx NegativeLogLikelihoodLoss, its constant ignore-index input moved to the
    attribute. Returns the names of the replaced nodes."""
    m = onnx.load(path)
    if not any(n.op_type == "NegativeLogLikelihoodLossInternal" for n in m.graph.node):
        return []
    constants = {n.output[0]: n for n in m.graph.node if n.op_type == "Constant"}
    replaced, nodes = [], []
    for n in m.graph.node:
        if n.op_type != "NegativeLogLikelihoodLossInternal" or n.domain != "com.microsoft":
            nodes.append(n)
            continue
        inputs = list(n.input) + [""] * (4 - len(n.input))
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        kwargs = dict(reduction=attrs.get("reduction", b"mean").decode())
        if inputs[3]:
            kwargs["ignore_index"] = int(numpy_helper.to_array(constants[inputs[3]].attribute[0].t))
        nodes.append(onnx.helper.make_node("NegativeLogLikelihoodLoss", [i for i in inputs[:3] if i] if inputs[2]
                                           else inputs[:2], list(n.output), name=n.name, **kwargs))
        replaced.append(n.name)
    used = {i for n in nodes for i in n.input}
    nodes = [n for n in nodes if not (n.op_type == "Constant" and n.output[0] not in used)]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.save(m, path)
    return replaced


def session_options():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def tensor_pb(arr, name):
    t = numpy_helper.from_array(np.array(arr, order="C", copy=True), name)  # keeps 0-d shapes
    return t


def elem_type_name(t):
    return onnx.TensorProto.DataType.Name(t)


def value_info_str(vi):
    tt = vi.type.tensor_type
    dims = [d.dim_param if d.dim_param else str(d.dim_value) for d in tt.shape.dim]
    return f"{vi.name}: {elem_type_name(tt.elem_type).lower()}[{','.join(dims)}]"


def rel_diff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


# ----------------------------------------------------------------------------- torch side


def torch_loss(model, spec, data):
    """The loss of `data` (the model's inputs, then the target) in torch. A spec whose loss is None
    has a model that computes its loss itself (its last input is the target); a spec with an
    onnxblock loss names its torch counterpart in `torch_loss` (a function of output and target)."""
    n_data = len(spec["input_names"])
    if spec["loss"] is None:
        return model(*[torch.from_numpy(a) for a in data[:n_data]])
    out = model(*[torch.from_numpy(a) for a in data[:n_data]])
    target = torch.from_numpy(data[n_data])
    if "torch_loss" in spec:
        return spec["torch_loss"](out, target)
    if spec["loss"] == LOSS_CE:
        return F.cross_entropy(out, target)
    return F.mse_loss(out, target)


def loss_name(loss):
    """The generator's loss as info.json records it: a LossType's name, a custom onnxblock's class
    name, or "in model" when the exported model returns its loss."""
    if loss is None:
        return "in model"
    return loss.name if isinstance(loss, artifacts.LossType) else type(loss).__name__


def torch_check_model(model, spec):
    """Copy of the exported torch model whose parameters correspond 1:1 to the ONNX parameters."""
    import copy

    m = copy.deepcopy(model)
    if spec.get("untie_check"):
        m.untied_head = nn.Parameter(m.wte.weight.detach().clone())
    m.train()
    return m


# ----------------------------------------------------------------------------- per model


def build_model(spec):
    name = spec["name"]
    outdir = os.path.join(HERE, name)
    log(f"\n=== {name}")
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)

    torch.manual_seed(spec["seed"])
    model = spec["make"]()
    model.train()
    rng = np.random.default_rng(1000 + spec["seed"])
    data = spec["batch"](rng) if spec["batch"] else None
    n_data = len(spec["input_names"])
    example = data[:n_data] if data else token_batch(np.random.default_rng(0), 2)[:1]

    forward = export_forward(model, example, spec)
    n_dropout = sum(n.op_type == "Dropout" for n in forward.graph.node)
    if "dropout" in spec:
        n_ratio = dropout_ratio_as_initializer(forward, spec["dropout"])
        log(f"{n_dropout} Dropout nodes: ratio {spec['dropout']} moved from {n_ratio} Constant nodes to "
            f"initializer '{DROPOUT_RATIO}' (frozen parameter)")
    check_model = torch_check_model(model, spec)
    check_named = dict(check_model.named_parameters())
    mapping = map_initializers(forward, check_named)
    frozen_torch = set(spec.get("frozen", []))
    trainable = [n for n, (t, _) in mapping.items() if t not in frozen_torch]
    frozen = [n for n, (t, _) in mapping.items() if t in frozen_torch]
    if "dropout" in spec:
        frozen.append(DROPOUT_RATIO)
    log(f"exported forward graph: {len(forward.graph.node)} nodes, {len(mapping)} parameters "
        f"({len(trainable)} trainable, {len(frozen)} frozen)")
    init_values = {i.name: numpy_helper.to_array(i) for i in forward.graph.initializer}

    # The onnxblock name counter is process global; reset it so every model's generated names
    # (onnx::loss::N ...) do not depend on which models were generated before it.
    onnxblock_graph_utils._GRAPH_TOKEN = 0
    artifacts.generate_artifacts(
        forward,
        requires_grad=trainable,
        frozen_params=frozen or None,
        loss=spec["loss"],
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=outdir,
    )

    ir = {}
    for fn in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        ir[fn] = lower_ir_version(os.path.join(outdir, fn), keep=spec.get("keep_ir_version", False))
        log(f"{fn}: ir_version {ir[fn][0]} -> {ir[fn][1]}")

    eval_fixed = fix_eval_batchnorm(os.path.join(outdir, "eval_model.onnx"))
    if eval_fixed:
        log(f"eval_model.onnx: removed unused running-stat outputs of {len(eval_fixed)} BatchNormalization "
            "nodes with training_mode=0 (generator bug workaround)")

    eval_nll = fix_eval_nll_loss(os.path.join(outdir, "eval_model.onnx"))
    if eval_nll:
        log(f"eval_model.onnx: {len(eval_nll)} com.microsoft NegativeLogLikelihoodLossInternal nodes replaced by "
            "ai.onnx NegativeLogLikelihoodLoss (generator bug workaround)")

    train_path = os.path.join(outdir, "training_model.onnx")
    tm = onnx.load(train_path)
    for imp in tm.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > spec.get("opset", OPSET):
            raise RuntimeError(f"{name}: training model uses ai.onnx opset {imp.version} > "
                               f"{spec.get('opset', OPSET)}")

    # ORT must still load every (ir-lowered) artifact: Module loads training+eval, plus the optimizer.
    state = CheckpointState.load_checkpoint(os.path.join(outdir, "checkpoint"))
    module = Module(train_path, state, os.path.join(outdir, "eval_model.onnx"), device="cpu",
                    session_options=session_options())
    from onnxruntime.training.api import Optimizer
    Optimizer(os.path.join(outdir, "optimizer_model.onnx"), module)

    info = dict(
        model=name,
        torch_class=type(model).__name__,
        export=dict(opset=spec.get("opset", OPSET), training_mode="TRAINING", do_constant_folding=spec.get("constant_folding", False),
                    dynamic_axes=spec["dynamic_axes"]),
        loss=loss_name(spec["loss"]),
        optimizer="AdamW",
        param_map={**{n: dict(torch=t, transposed=tr, trainable=n in trainable) for n, (t, tr) in mapping.items()},
                   **({DROPOUT_RATIO: dict(torch=None, transposed=False, trainable=False,
                                           note="dropout ratio of every Dropout node (not a torch parameter)")}
                      if "dropout" in spec else {})},
        dropout_nodes_in_forward_export=n_dropout,
        ir_version_written_by_generator={k: v[0] for k, v in ir.items()},
        batch=spec["batch_desc"],
        eval_model_batchnorm_outputs_removed=eval_fixed,
        **({"eval_model_nll_loss_replaced": eval_nll} if eval_nll else {}),
    )

    if spec.get("reference", True):
        info.update(reference_data(spec, outdir, tm, module, state, data, init_values, trainable, frozen,
                                   mapping, check_model))
        adamw_reference(spec)
    with open(os.path.join(outdir, "info.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    return info


def reference_data(spec, outdir, tm, module, state, data, init_values, trainable, frozen, mapping, check_model):
    name = spec["name"]
    param_set = set(trainable) | set(frozen)
    buffer_suffix = "_grad.accumulation.buffer"
    graph_inputs = [i.name for i in tm.graph.input]
    trainable = [n for n in graph_inputs if n in set(trainable)]  # graph-input order
    frozen = [n for n in graph_inputs if n in set(frozen)]
    user_inputs = [n for n in graph_inputs if n not in param_set and not n.endswith(buffer_suffix)
                   and n != "lazy_reset_grad"]
    if len(user_inputs) != len(data):
        raise RuntimeError(f"{name}: user inputs {user_inputs} vs {len(data)} data arrays")
    user_values = dict(zip(user_inputs, data))

    # Checkpoint values must be the exported initializers.
    for n in param_set:
        if not np.array_equal(state.parameters[n].data, init_values[n]):
            raise RuntimeError(f"{name}: checkpoint value of {n} differs from the exported initializer")

    # --- ORT path 1: onnxruntime.training.api.Module (what an on-device trainer runs)
    module.train()
    module.lazy_reset_grad()
    loss = np.asarray(module(*[user_values[n] for n in user_inputs]), dtype=np.float32)
    grads = {n: state.parameters[n].grad.copy() for n in trainable}

    # --- ORT path 2: plain InferenceSession on training_model.onnx with every graph input fed
    feeds = {}
    for n in graph_inputs:
        if n in user_values:
            feeds[n] = user_values[n]
        elif n in param_set:
            feeds[n] = init_values[n]
        elif n.endswith(buffer_suffix):
            feeds[n] = np.zeros_like(init_values[n[: -len(buffer_suffix)]])
        elif n == "lazy_reset_grad":
            feeds[n] = np.array([True])
        else:
            raise RuntimeError(f"{name}: unexpected graph input {n}")
    sess = ort.InferenceSession(os.path.join(outdir, "training_model.onnx"), session_options(),
                                providers=["CPUExecutionProvider"])
    ort_inputs = {n: ort.OrtValue.ortvalue_from_numpy(v.copy()) for n, v in feeds.items()}
    binding = sess.io_binding()
    for n, v in ort_inputs.items():
        binding.bind_ortvalue_input(n, v)
    for o in sess.get_outputs():
        binding.bind_output(o.name)
    sess.run_with_iobinding(binding)
    outs = [o.numpy() for o in binding.get_outputs()]
    graph_outputs = [o.name for o in tm.graph.output]
    out_values = dict(zip(graph_outputs, outs))
    sess_loss_diff = rel_diff(out_values[graph_outputs[0]], loss)
    inplace_diff = max(rel_diff(ort_inputs[n + buffer_suffix].numpy(), grads[n]) for n in trainable)
    log(f"InferenceSession vs Module: loss rel diff {sess_loss_diff:.2e}; "
        f"accumulation buffers (written in place) vs Module grads: max rel diff {inplace_diff:.2e}")
    if sess_loss_diff > LOSS_RTOL or inplace_diff > GRAD_RTOL:
        raise RuntimeError(f"{name}: the two ORT paths disagree")

    # --- torch autograd cross-check
    check_model.zero_grad()
    tl = torch_loss(check_model, spec, data)
    tl.backward()
    check_named = dict(check_model.named_parameters())
    loss_diff = rel_diff(loss, tl.item())
    worst = (0.0, None)
    for n in trainable:
        t, tr = mapping[n]
        tg = check_named[t].grad.numpy()
        d = rel_diff(grads[n], tg.T if tr else tg)
        worst = max(worst, (d, n))
    for n in frozen:
        if n != DROPOUT_RATIO and check_named[mapping[n][0]].grad is None:
            raise RuntimeError(f"{name}: torch has no grad for frozen {n}")
    log(f"ORT vs torch: loss {float(loss):.7f} vs {tl.item():.7f} (rel {loss_diff:.2e}); "
        f"max gradient rel diff {worst[0]:.2e} ({worst[1]})")
    if loss_diff > LOSS_RTOL or worst[0] > GRAD_RTOL:
        raise RuntimeError(f"{name}: ORT and torch disagree")

    # --- write test_data_set_0
    tdir = os.path.join(outdir, "test_data_set_0")
    os.makedirs(tdir)
    manifest = dict(inputs=[], outputs=[])
    for k, n in enumerate(graph_inputs):
        role = ("data" if n in user_values else "parameter" if n in trainable else "frozen_parameter"
                if n in frozen else "gradient_buffer" if n.endswith(buffer_suffix) else "lazy_reset_grad")
        arr = feeds[n]
        stored = role != "gradient_buffer" or WRITE_GRAD_BUFFERS
        if stored:
            with open(os.path.join(tdir, f"input_{k}.pb"), "wb") as f:
                f.write(tensor_pb(arr, n).SerializeToString())
        entry = dict(index=k, file=f"input_{k}.pb" if stored else None, name=n, role=role,
                     dtype=str(arr.dtype), shape=list(arr.shape))
        if not stored:
            entry["value"] = "zeros (file not stored; feed a zero tensor of this dtype/shape)"
        manifest["inputs"].append(entry)
    k = 0
    for n in graph_outputs:
        arr = loss if n == graph_outputs[0] else out_values[n]
        if n != graph_outputs[0] and not (arr.dtype == np.bool_ and arr.all()):
            raise RuntimeError(f"{name}: accumulation flag {n} = {arr}")
        role = "loss" if n == graph_outputs[0] else "accumulation_flag"
        with open(os.path.join(tdir, f"output_{k}.pb"), "wb") as f:
            f.write(tensor_pb(arr, n).SerializeToString())
        manifest["outputs"].append(dict(index=k, file=f"output_{k}.pb", name=n, role=role, graph_output=True,
                                        dtype=str(arr.dtype), shape=list(arr.shape)))
        k += 1
    for n in trainable:
        gname = n + "_grad"
        with open(os.path.join(tdir, f"output_{k}.pb"), "wb") as f:
            f.write(tensor_pb(grads[n], gname).SerializeToString())
        manifest["outputs"].append(dict(index=k, file=f"output_{k}.pb", name=gname, role="gradient", graph_output=False,
                                        parameter=n, buffer=n + buffer_suffix,
                                        dtype=str(grads[n].dtype), shape=list(grads[n].shape)))
        k += 1
    with open(os.path.join(tdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")

    # --- 20 plain SGD steps on the same batch, ORT gradients
    losses = []
    for step in range(SGD_STEPS):
        module.lazy_reset_grad()
        losses.append(float(module(*[user_values[n] for n in user_inputs])))
        for n in trainable:
            p = state.parameters[n]
            state.parameters[n] = (p.data - np.float32(SGD_LR) * p.grad).astype(np.float32)
    # same in torch
    tm_ = check_model
    tlosses = []
    for step in range(SGD_STEPS):
        tm_.zero_grad()
        tl = torch_loss(tm_, spec, data)
        tl.backward()
        tlosses.append(tl.item())
        with torch.no_grad():
            for n in trainable:
                prm = dict(tm_.named_parameters())[mapping[n][0]]
                prm -= SGD_LR * prm.grad
    sgd_diff = max(abs(a - b) / abs(b) for a, b in zip(losses, tlosses))
    log(f"SGD x{SGD_STEPS} lr {SGD_LR}: loss {losses[0]:.5f} -> {losses[-1]:.5f}; "
        f"max rel diff vs torch {sgd_diff:.2e}")
    if sgd_diff > 1e-3:
        raise RuntimeError(f"{name}: SGD replay disagrees with torch")
    with open(os.path.join(outdir, "sgd_losses.json"), "w") as f:
        json.dump(dict(
            learning_rate=SGD_LR,
            steps=SGD_STEPS,
            batch="test_data_set_0 data inputs (the same fixed batch every step)",
            initial_parameters="test_data_set_0 parameter inputs (frozen parameters never change)",
            update="for every trainable parameter p (graph inputs with a *_grad.accumulation.buffer): "
                   "p = p - learning_rate * grad(p), in float32, after each step; "
                   "gradient buffers reset each step (lazy_reset_grad = true)",
            losses_note="losses[k] is the loss computed with the parameters after k updates "
                        "(losses[0] == output_0.pb)",
            losses=losses,
            torch_losses_for_comparison=tlosses,
        ), f, indent=1)
        f.write("\n")
    return dict(reference=dict(loss=float(loss), torch_loss=tl.item() if False else tlosses[0],
                               max_grad_rel_diff_vs_torch=worst[0], loss_rel_diff_vs_torch=loss_diff,
                               sgd_max_rel_diff_vs_torch=sgd_diff, sgd_first=losses[0], sgd_last=losses[-1]))


# ----------------------------------------------------------------------------- AdamW reference


def optimizer_hyperparameters(path):
    """The optimizer op of an optimizer_model.onnx and its attributes (defaults filled in)."""
    m = onnx.load(path)
    nodes = [n for n in m.graph.node if n.op_type in ("AdamWOptimizer", "SGDOptimizerV2")]
    if len(nodes) != 1:
        raise RuntimeError(f"{path}: expected one optimizer node, found {[n.op_type for n in m.graph.node]}")
    node = nodes[0]
    if node.op_type != "AdamWOptimizer":
        raise RuntimeError(f"{path}: {node.op_type} (only AdamW artifacts are generated)")
    attrs = dict(ADAMW_DEFAULTS)
    for a in node.attribute:
        attrs[a.name] = int(a.i) if a.type == onnx.AttributeProto.INT else float(np.float32(a.f))
    return node.op_type, attrs


def numpy_adamw(attrs, lr, step, w, g, m1, m2):
    """ONNX Runtime's AdamWOptimizer update (adamw.cc) in float32, for the cross-check."""
    f = np.float32
    alpha, beta, eps, wd = f(attrs["alpha"]), f(attrs["beta"]), f(attrs["epsilon"]), f(attrs["weight_decay"])
    lr = f(lr)
    ca = cb = f(1)
    lrc = lr
    if attrs["correct_bias"] == 1:
        ca = f(1) - f(math.pow(float(alpha), step))
        cb = f(1) - f(math.pow(float(beta), step))
        lrc = lr * (np.sqrt(cb) / ca)
    if attrs["adam_mode"] == 0:
        w = w - w * lr * wd
    m1 = alpha * m1 + (f(1) - alpha) * g
    m2 = beta * m2 + (f(1) - beta) * g * g
    if attrs["adam_mode"] == 0:
        w = w - (lr * m1) / (ca * (np.sqrt(m2 / cb) + eps))
    else:
        w = w - lrc * m1 / (np.sqrt(m2) + eps)
        w = w - lr * wd * w
    return w.astype(np.float32), m1.astype(np.float32), m2.astype(np.float32)


def adamw_reference(spec):
    """Trains ADAMW_STEPS steps with ONNX Runtime's training API on test_data_set_0 and writes
    adamw_losses.json and adamw_final_params/."""
    name = spec["name"]
    outdir = os.path.join(HERE, name)
    tdir = os.path.join(outdir, "test_data_set_0")
    with open(os.path.join(tdir, "manifest.json")) as f:
        manifest = json.load(f)

    def read_pb(fn):
        t = onnx.TensorProto()
        with open(os.path.join(tdir, fn), "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    user = [read_pb(e["file"]) for e in manifest["inputs"] if e["role"] == "data"]
    trainable = [e["name"] for e in manifest["inputs"] if e["role"] == "parameter"]
    initial = {e["name"]: read_pb(e["file"]) for e in manifest["inputs"]
               if e["role"] in ("parameter", "frozen_parameter")}
    op_type, attrs = optimizer_hyperparameters(os.path.join(outdir, "optimizer_model.onnx"))
    lr = spec.get("adamw_lr", ADAMW_LR)

    state = CheckpointState.load_checkpoint(os.path.join(outdir, "checkpoint"))
    for n, v in initial.items():
        if not np.array_equal(state.parameters[n].data, v):
            raise RuntimeError(f"{name}: checkpoint value of {n} differs from test_data_set_0")
    module = Module(os.path.join(outdir, "training_model.onnx"), state, os.path.join(outdir, "eval_model.onnx"),
                    device="cpu", session_options=session_options())
    from onnxruntime.training.api import Optimizer
    optimizer = Optimizer(os.path.join(outdir, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(lr)
    module.train()

    replay = {n: (initial[n].astype(np.float32), np.zeros_like(initial[n]), np.zeros_like(initial[n]))
              for n in trainable}
    losses = []
    for step in range(1, ADAMW_STEPS + 1):
        module.lazy_reset_grad()
        losses.append(float(module(*user)))
        for n in trainable:
            w, m1, m2 = replay[n]
            replay[n] = numpy_adamw(attrs, lr, step, w, state.parameters[n].grad.copy(), m1, m2)
        optimizer.step()
        # numpy replays each step from ORT's own parameters so the check does not drift.
        worst = max(rel_diff(state.parameters[n].data, replay[n][0]) for n in trainable)
        if worst > 1e-5:
            raise RuntimeError(f"{name}: step {step}: ORT AdamW and the numpy replay differ by {worst:.2e}")
        replay = {n: (state.parameters[n].data.copy(), replay[n][1], replay[n][2]) for n in trainable}
    final = {n: state.parameters[n].data.copy() for n in trainable}
    log(f"{name}: AdamW x{ADAMW_STEPS} lr {lr}: loss {losses[0]:.5f} -> {losses[-1]:.5f}")

    pdir = os.path.join(outdir, "adamw_final_params")
    if os.path.isdir(pdir):
        shutil.rmtree(pdir)
    os.makedirs(pdir)
    params = []
    for n in trainable:
        flat = final[n].reshape(-1)
        stride = max(1, -(-flat.size // ADAMW_FINAL_SAMPLE))
        sample = np.ascontiguousarray(flat[::stride])
        fn = f"{n}.pb"
        with open(os.path.join(pdir, fn), "wb") as f:
            f.write(tensor_pb(sample, n).SerializeToString())
        params.append(dict(name=n, file=fn, shape=list(final[n].shape), stride=stride, count=int(sample.size)))
    with open(os.path.join(outdir, "adamw_losses.json"), "w") as f:
        json.dump(dict(
            optimizer="AdamW",
            op=f"com.microsoft.{op_type}",
            hyperparameters=attrs,
            hyperparameters_source="the AdamWOptimizer node of optimizer_model.onnx (ONNX Runtime's defaults for "
                                   "absent attributes)",
            learning_rate=lr,
            steps=ADAMW_STEPS,
            step_count="ONNX Runtime feeds step = (updates done so far) + 1 to each update (bias correction)",
            trainer="onnxruntime.training.api CheckpointState + Module + Optimizer (onnxruntime-training "
                    f"{ort.__version__}), set_learning_rate({lr}); per step: lazy_reset_grad, train step, "
                    "optimizer step",
            batch="test_data_set_0 data inputs (the same fixed batch every step)",
            initial_parameters="test_data_set_0 parameter inputs (== checkpoint)",
            losses_note="losses[k] is the loss computed with the parameters after k updates",
            losses=losses,
            final_parameters=dict(
                directory="adamw_final_params",
                note=f"trainable parameters after all {ADAMW_STEPS} updates; file K holds flat elements "
                     "0, stride, 2*stride, ... of the parameter (every element when stride is 1)",
                params=params),
        ), f, indent=1)
        f.write("\n")


# ----------------------------------------------------------------------------- summary


def main():
    infos = []
    for spec in SPECS:
        infos.append(build_model(spec))
    readme_writer.write_ops_and_readme(infos, sys.modules[__name__])


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="only these models (debugging; README/ops.txt not rewritten)")
    ap.add_argument("--with-grad-buffers", action="store_true",
                    help="also write the zero *_grad.accumulation.buffer inputs (adds ~5.4 MB)")
    ap.add_argument("--only", choices=["adamw-reference", "readme"],
                    help="adamw-reference: only (re)write adamw_losses.json and adamw_final_params/ from the "
                         "committed artifacts and test_data_set_0; readme: only rewrite README.md and ops.txt "
                         "from the committed model folders and their info.json (after generating some models)")
    args = ap.parse_args()
    WRITE_GRAD_BUFFERS = args.with_grad_buffers
    if args.only == "adamw-reference":
        for s in SPECS:
            if s.get("reference", True) and (not args.models or s["name"] in args.models):
                adamw_reference(s)
    elif args.only == "readme":
        infos = []
        for s in SPECS:
            with open(os.path.join(HERE, s["name"], "info.json")) as f:
                infos.append(json.load(f))
        readme_writer.write_ops_and_readme(infos, sys.modules[__name__])
    elif args.models:
        unknown = set(args.models) - {s["name"] for s in SPECS}
        if unknown:
            sys.exit(f"unknown models {sorted(unknown)}")
        for s in [s for s in SPECS if s["name"] in args.models]:
            build_model(s)
    else:
        main()
