#!/usr/bin/env python3
"""Rebuilds the production-shape bench models from ONNX Runtime's real training-artifact generator.

Each model is a PyTorch module at its published shape, exported with torch.onnx.export in training
mode (opset 17, no constant folding: the settings of testdata/generate.py, whose LayerNormalization
exporter fix is imported with it) and turned into training_model.onnx, eval_model.onnx and
optimizer_model.onnx by onnxruntime.training.artifacts.generate_artifacts (CrossEntropyLoss, AdamW).

Graphs only, no weights. The parameters of the Transformers never hold data: they are created on
PyTorch's `meta` device (so GPT-2's 124M or the Llama layers' billions of parameters cost no memory
here; ResNet-50 is built on the CPU, as the tracer folds a Conv over meta tensors into a constant).
Every model is exported with export_params=False, and each parameter enters the forward graph as an initializer whose data is
declared external (in a file that is never written), which is all the generator needs: it moves the
parameters to graph inputs and reads only their names, types and shapes. Buffers (causal masks,
rotary tables, BatchNorm running statistics) are computed for real and exported as data. The
checkpoint the generator writes is its nominal one (names and shapes only) and is deleted, so the
folder holds graphs only. In the training graph the weights are graph inputs: compiling it with
gmopt needs no weight file.

Output: bench/models/<name>/ (git-ignored; rebuild with this script). Prints, per model, the
training graph's node count, the parameter count and the size of each file.

    /work/main/testdata/.venv/bin/python bench/models/build.py                # all production models
    /work/main/testdata/.venv/bin/python bench/models/build.py gpt2_small resnet50
    /work/main/testdata/.venv/bin/python bench/models/build.py --llama-layers 4 llama7b
    /work/main/testdata/.venv/bin/python bench/models/build.py --deep 60       # deep_gpt_60 only
"""

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "testdata"))

import generate  # noqa: E402  (testdata/generate.py: exporter setup, GPT model, IR lowering)
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnxruntime.training import artifacts, onnxblock  # noqa: E402
import onnxruntime.training.onnxblock._graph_utils as onnxblock_graph_utils  # noqa: E402

OPSET = generate.OPSET
# The external file every parameter initializer names. It is never written: nothing reads it.
ABSENT_WEIGHTS = "weights_not_stored.bin"

# ----------------------------------------------------------------------------- models


class BertLayer(nn.Module):
    """A BERT encoder layer (post-LN): self-attention with the padding mask applied by masked_fill
    (Where) and dropout on the attention probabilities, residual + LayerNorm, GELU FFN, residual +
    LayerNorm. Written out rather than nn.TransformerEncoderLayer, whose training-mode attention
    exports through scaled_dot_product_attention as a one-output Dropout that ONNX Runtime's
    DropoutGrad builder cannot differentiate (it needs the mask output)."""

    def __init__(self, d, heads, ff, p):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_out = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(p)
        self.attn_out_drop = nn.Dropout(p)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff_in = nn.Linear(d, ff)
        self.ff_out = nn.Linear(ff, d)
        self.ff_drop = nn.Dropout(p)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, padding):
        batch, seq, d = x.shape
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(d, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(padding[:, None, None, :], float("-inf"))
        y = (self.attn_drop(F.softmax(att, dim=-1)) @ v).transpose(1, 2).reshape(batch, seq, d)
        x = self.ln1(x + self.attn_out_drop(self.attn_out(y)))
        return self.ln2(x + self.ff_drop(self.ff_out(F.gelu(self.ff_in(x)))))


class BertBase(nn.Module):
    """BERT-base style encoder: token + position + segment embeddings, LayerNorm, post-LN encoder
    layers (GELU FFN), the padding mask (attention_mask == 0) masking keys, tanh pooler over the
    first token and a classification head."""

    def __init__(self, vocab=30522, d=768, heads=12, seq=512, layers=12, ff=3072, classes=2, p=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(p)
        self.layers = nn.ModuleList([BertLayer(d, heads, ff, p) for _ in range(layers)])
        self.pool = nn.Linear(d, d)
        self.cls = nn.Linear(d, classes)

    def forward(self, input_ids, attention_mask):
        _, seq = input_ids.shape
        pos = torch.arange(seq, device=input_ids.device)
        x = self.drop(self.ln(self.tok(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids))))
        padding = attention_mask == 0
        for layer in self.layers:
            x = layer(x, padding)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class Bottleneck(nn.Module):
    """ResNet-50 bottleneck: 1x1 reduce, 3x3 (stride here, as torchvision's v1.5), 1x1 expand x4,
    BatchNorm after each, projection shortcut where the shape changes."""

    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet50(nn.Module):
    """ResNet-50: 7x7/2 stem, 3x3/2 max pool, bottleneck stages 3-4-6-3 (widths 64-128-256-512),
    global average pool, 1000-way linear head. Input 3x224x224."""

    def __init__(self, blocks=(3, 4, 6, 3), classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, cin = [], 64
        for i, count in enumerate(blocks):
            width = 64 * 2 ** i
            for j in range(count):
                stages.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.stages(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LlamaBlock(generate.LlamaBlock):
    """testdata's Llama block (the same layers) with its own forward: attention over `heads`
    heads, the rotary embedding applied to q and k."""

    def __init__(self, d, heads, ff):
        super().__init__(d, ff)
        self.heads = heads

    def forward(self, x, cos, sin, causal):
        batch, seq, d = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(batch, seq, self.heads, -1).transpose(1, 2)
        k = self.k(h).view(batch, seq, self.heads, -1).transpose(1, 2)
        v = self.v(h).view(batch, seq, self.heads, -1).transpose(1, 2)
        q = generate.rotate_half_rope(q, cos, sin)
        k = generate.rotate_half_rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = torch.where(causal, att, torch.tensor(float("-inf")))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, d)
        x = x + self.o(y)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """Llama-style decoder: RMSNorm pre-norm, rotary position embedding (rotate-half form), causal
    mask by Where, SwiGLU FFN, no biases, untied LM head (as Llama-2 7B)."""

    def __init__(self, vocab=32000, d=4096, heads=32, seq=2048, layers=2, ff=11008):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, heads, ff) for _ in range(layers)])
        self.norm = generate.RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        head_dim = d // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos()[None, None])
        self.register_buffer("sin", angles.sin()[None, None])
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, input_ids):
        _, seq = input_ids.shape
        x = self.embed(input_ids)
        cos, sin, causal = self.cos[:, :, :seq], self.sin[:, :, :seq], self.causal[:seq, :seq]
        for block in self.blocks:
            x = block(x, cos, sin, causal)
        return self.head(self.norm(x)).reshape(-1, self.vocab)


# ----------------------------------------------------------------------------- the generator


@contextlib.contextmanager
def parameters_on_meta():
    """While active, every nn.Parameter a module registers is replaced by a `meta` tensor of the
    same shape (no storage; initializers become no-ops) and every buffer is registered as a meta
    tensor too, its real value kept in `module._bench_buffer_values` for the export. Tracing needs
    all tensors on one device; buffers are small and their values matter (masks, rotary tables)."""
    register_parameter = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer

    def on_meta_parameter(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(torch.empty_like(param, device="meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def on_meta_buffer(self, name, tensor, persistent=True):
        if tensor is not None and tensor.device.type != "meta":
            self.__dict__.setdefault("_bench_buffer_values", {})[name] = tensor.detach().clone()
            tensor = torch.empty_like(tensor, device="meta")
        register_buffer(self, name, tensor, persistent)

    nn.Module.register_parameter = on_meta_parameter
    nn.Module.register_buffer = on_meta_buffer
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter
        nn.Module.register_buffer = register_buffer


def buffer_values(model):
    """{full buffer name: CPU value}: recorded by parameters_on_meta, or the model's own buffers
    when it was built on the CPU."""
    values = {name: value.detach() for name, value in model.named_buffers() if value.device.type == "cpu"}
    for prefix, module in model.named_modules():
        for name, value in module.__dict__.get("_bench_buffer_values", {}).items():
            values[f"{prefix}.{name}" if prefix else name] = value
    return values


def export_forward_graph(model, example_inputs, input_names, output_names, dynamic_axes):
    """torch.onnx.export of a model whose parameters are on `meta`: parameters and buffers come out
    as graph inputs (export_params=False; keep_initializers_as_inputs=True, as the exporter's
    initializer deduplication would merge every two meta tensors of one shape). Buffers become initializers holding their values;
    parameters become initializers whose data is declared external and never written.
    Returns (forward ModelProto, [parameter names], parameter element count)."""
    path = os.path.join(HERE, ".export.onnx")
    try:
        torch.onnx.export(model, tuple(example_inputs), path, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes, opset_version=OPSET,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          export_params=False, keep_initializers_as_inputs=True)
        forward = onnx.load(path)
    finally:
        if os.path.exists(path):
            os.remove(path)
    params = dict(model.named_parameters())
    buffers = buffer_values(model)
    kept_inputs, param_names, elements, offset = [], [], 0, 0
    for value in forward.graph.input:
        if value.name in buffers:
            forward.graph.initializer.append(numpy_helper.from_array(buffers[value.name].numpy(), value.name))
        elif value.name in params:
            tensor_type = value.type.tensor_type
            dims = [d.dim_value for d in tensor_type.shape.dim]
            assert list(params[value.name].shape) == dims, value.name
            init = onnx.TensorProto(name=value.name, data_type=tensor_type.elem_type, dims=dims)
            length = math.prod(dims) * 4
            for key, entry in (("location", ABSENT_WEIGHTS), ("offset", offset), ("length", length)):
                init.external_data.add(key=key, value=str(entry))
            init.data_location = onnx.TensorProto.EXTERNAL
            forward.graph.initializer.append(init)
            param_names.append(value.name)
            elements += math.prod(dims)
            offset += length
        else:
            kept_inputs.append(value)
    missing = set(params) - set(param_names)
    if missing:
        raise RuntimeError(f"parameters not among the exported graph inputs: {sorted(missing)}")
    del forward.graph.input[:]
    forward.graph.input.extend(kept_inputs)
    return forward, param_names, elements


@contextlib.contextmanager
def absent_weights_generator(weight_bytes):
    """The setting generate_artifacts runs in. It always writes a full checkpoint of the parameter
    values, which do not exist here: it is asked for the nominal one (names, shapes, types)
    instead. And onnx.checker (which it runs) insists that an external-data file exists, relative
    to the working directory for a model in memory: the working directory is a temporary one
    holding a sparse file of the declared size (no disk blocks; nothing reads it)."""
    save_checkpoint = onnxblock.save_checkpoint

    def save_nominal(parameters, path, nominal_checkpoint=False):
        save_checkpoint(parameters, path, nominal_checkpoint=True)

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, ABSENT_WEIGHTS), "wb") as f:
            f.truncate(weight_bytes)
        onnxblock.save_checkpoint = save_nominal
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(cwd)
            onnxblock.save_checkpoint = save_checkpoint


def build(name, make, example_inputs, input_names, output_names, dynamic_axes, out_root, describe, on_meta=True):
    outdir = os.path.join(out_root, name)
    print(f"=== {name}: {describe}", flush=True)
    start = time.time()
    torch.manual_seed(0)
    with parameters_on_meta() if on_meta else contextlib.nullcontext():
        model = make()
    model.train()
    device = "meta" if on_meta else "cpu"
    example_inputs = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype in example_inputs]
    forward, param_names, elements = export_forward_graph(model, example_inputs, input_names, output_names,
                                                          dynamic_axes)
    del model
    print(f"  forward graph: {len(forward.graph.node)} nodes, {len(param_names)} parameters "
          f"({elements:,} elements, {elements * 4 / 2**30:.2f} GiB fp32, not stored)", flush=True)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    onnxblock_graph_utils._GRAPH_TOKEN = 0  # generated names independent of earlier models
    outdir = os.path.abspath(outdir)
    with absent_weights_generator(elements * 4):
        artifacts.generate_artifacts(forward, requires_grad=param_names, loss=generate.LOSS_CE,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=outdir)
    os.remove(os.path.join(outdir, "checkpoint"))
    files = {}
    for fn in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        path = os.path.join(outdir, fn)
        generate.lower_ir_version(path)
        files[fn] = os.path.getsize(path)
    leftovers = sorted(set(os.listdir(outdir)) - set(files))
    if leftovers:
        raise RuntimeError(f"{outdir}: unexpected files {leftovers}")
    training = onnx.load(os.path.join(outdir, "training_model.onnx"), load_external_data=False)
    external = [i.name for i in training.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise RuntimeError(f"{name}: training graph still holds parameter initializers {external[:3]}...")
    inputs = ", ".join(f"{v.name}[{','.join(d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim)}]"
                       for v in training.graph.input[:len(input_names) + 1])
    print(f"  training graph: {len(training.graph.node)} nodes, {len(training.graph.input)} inputs "
          f"(data: {inputs})", flush=True)
    print("  " + ", ".join(f"{fn} {size:,} B" for fn, size in files.items())
          + f"  ({time.time() - start:.1f} s)", flush=True)
    return dict(name=name, nodes=len(training.graph.node), parameters=elements, files=files)


def token_inputs(batch=2, seq=16):
    """(shape, dtype) of the example token batch the export traces."""
    return [((batch, seq), torch.long)]


def gpt2_small(size):
    return generate.GPTTiny(0.1, size)


GPT2_SMALL = dict(vocab=50257, d=768, heads=12, seq=1024, layers=12, ff=3072)
# Deep narrow GPT for the compile-speed bench: GPT-2's block at d_model 64.
DEEP_GPT = dict(vocab=512, d=64, heads=2, seq=64, ff=256)
SEQ_AXES = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch_x_seq"}}


def model_specs(args):
    llama_layers = args.llama_layers
    return {
        "gpt2_small": dict(
            make=lambda: gpt2_small(GPT2_SMALL), example_inputs=token_inputs(), input_names=["input_ids"],
            output_names=["logits"], dynamic_axes=SEQ_AXES,
            describe="GPT-2 small (12 layers, d_model 768, 12 heads, vocab 50257, seq <= 1024, dropout 0.1, "
                     "tied head); batch and seq symbolic"),
        "bert_base": dict(
            make=BertBase, input_names=["input_ids", "attention_mask"], output_names=["logits"],
            example_inputs=token_inputs() + token_inputs(),
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "logits": {0: "batch"}},
            describe="BERT-base (12 post-LN layers, 768, 12 heads, FFN 3072, vocab 30522, seq <= 512, padding "
                     "mask, pooler, 2-way classification head, dropout 0.1); batch and seq symbolic"),
        "resnet50": dict(
            make=ResNet50, input_names=["input"], output_names=["logits"],
            example_inputs=[((2, 3, 224, 224), torch.float32)],
            # The TorchScript tracer folds a Conv over meta tensors into a Constant (torch 2.4), so
            # ResNet-50 is built on the CPU: its 25.6M parameters are 0.1 GB.
            on_meta=False,
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            describe="ResNet-50 (bottlenecks 3-4-6-3, BatchNorm, 224x224, 1000 classes); batch symbolic"),
        "llama7b": dict(
            make=lambda: Llama(layers=llama_layers), example_inputs=token_inputs(), input_names=["input_ids"],
            output_names=["logits"], dynamic_axes=SEQ_AXES,
            describe=f"Llama at 7B width ({llama_layers} of 32 layers, d_model 4096, 32 heads, FFN 11008, "
                     "vocab 32000, seq <= 2048, RMSNorm, rotary, SwiGLU, untied head); batch and seq symbolic"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("models", nargs="*", help="models to build (default: all production models): "
                        "gpt2_small, bert_base, resnet50, llama7b")
    parser.add_argument("--out", default=HERE, help="output root (default: bench/models)")
    parser.add_argument("--llama-layers", type=int, default=2, help="decoder layers of llama7b (default 2)")
    parser.add_argument("--deep", type=int, action="append", default=[], metavar="N",
                        help="also build deep_gpt_N: GPT-2 blocks at d_model 64 (2 heads, FFN 256, vocab 512, "
                             "seq <= 64), N layers; repeatable")
    args = parser.parse_args()
    torch.set_num_threads(1)
    specs = model_specs(args)
    unknown = [m for m in args.models if m not in specs]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {sorted(specs)}")
    wanted = args.models or ([] if args.deep else list(specs))
    for layers in args.deep:
        if layers < 1:
            parser.error("--deep needs at least one layer")
        size = dict(DEEP_GPT, layers=layers)
        specs[f"deep_gpt_{layers}"] = dict(
            make=lambda size=size: generate.GPTTiny(0.0, size), example_inputs=token_inputs(),
            input_names=["input_ids"], output_names=["logits"], dynamic_axes=SEQ_AXES,
            describe=f"deep narrow GPT ({layers} layers, d_model 64, 2 heads, FFN 256, vocab 512, seq <= 64)")
        wanted.append(f"deep_gpt_{layers}")
    built = [build(name, out_root=args.out, **specs[name]) for name in wanted]
    print("\n| model | training nodes | parameters | training_model.onnx bytes |")
    print("|---|---:|---:|---:|")
    for b in built:
        print(f"| {b['name']} | {b['nodes']} | {b['parameters']:,} | {b['files']['training_model.onnx']:,} |")


if __name__ == "__main__":
    main()
