#!/usr/bin/env python3
"""Writes hf_<family>[_nofold]/: tiny transformers models built by the
`transformers` library from its public configuration classes (random
weights, nothing downloaded), exported forward-only by torch.onnx.export as a
user would, and the first training step's references computed by PyTorch
autograd, for `gmopt-compile --train --loss=cross-entropy:logits,labels` with
no --frozen (issue 34 item 1: the exporter's float Constant nodes - causal
masks filled with -3.4e38, rotary positions and inverse frequencies, zero
attention biases, all-ones masks - are not parameters).

    testdata/.venv/bin/pip install transformers==4.46.3   # once; CI needs neither
    testdata/.venv/bin/python tests/lit/autodiff/Inputs/make_hf_models.py [FAMILY ...]

Families: llama (LlamaConfig; grouped-query attention, 4 heads and 2
key/value heads; rotary embeddings), t5 (T5Config; relative attention bias;
LM head tied to the shared embedding) and bart (BartConfig; learned
positions; tied LM head; the final_logits_bias buffer), written by default;
mistral, qwen2, gpt_neox and phi for bench/hf_autodiff_check.py. Each is
exported twice: hf_<family>/ with do_constant_folding=True (torch's default)
and hf_<family>_nofold/ with do_constant_folding=False; both with opset 17,
training=TrainingMode.EVAL, the family's default attention implementation
(sdpa where it has one), dropout 0 in the configuration and static shapes
(batch 2, sequence 8; --dynamic-batch makes the batch symbolic, which also
makes the exporter compute the causal masks in the graph instead of storing
them as Constant nodes).

The forward takes input_ids (T5, BART: and decoder_input_ids; with
--attention-mask also attention_mask) and returns logits [2, 8, V]. The loss
is torch.nn.functional.cross_entropy(logits.view(-1, V), labels.view(-1))
(mean), what `--loss=cross-entropy:logits,labels` appends. Every parameter
gets random values (the configuration's initialisation plus N(0, 0.02)
noise: torch's exporter merges initializers with identical values, and norms
start as all ones, biases as all zeros). Token ids avoid an embedding's
padding_idx (BART's 1): PyTorch gives that row no gradient, the exported
Gather cannot say so.

test_data_set_0 holds the batch (input_K.pb, named as the graph inputs, then
`labels`), the loss (output_0.pb) and one gradient per PyTorch parameter,
named after the ONNX initializer that holds it: `<name>_grad`, transposed
where the exporter folded a Transpose into a copy (onnx::MatMul_N). When a
parameter is held twice (a tied LM head that constant folding split into a
transposed copy, PyTorch issue 108342), the gradient is written for the
first initializer only: compile with tie-weights, which sums the copy's
contribution into it. info.json records what the lit tests check: PyTorch's
parameter count, the ONNX float initializers and the float Constant nodes of
more than one element (before issue 34's fix both were trainable:
old_trainable), and every initializer that holds no PyTorch parameter (a
buffer, such as BART's final_logits_bias), with its values and consumers.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))

# Sizes: "tiny" for the committed fixtures (hidden 32, 2 layers, vocabulary
# 96, sequence 8, batch 2); "bench" for bench/hf_autodiff_check.py.
SIZES = {
    "tiny": dict(hidden=32, heads=4, kv_heads=2, ffn=64, layers=2, vocab=96,
                 seq=8, batch=2),
    "bench": dict(hidden=128, heads=8, kv_heads=2, ffn=256, layers=2,
                  vocab=256, seq=32, batch=2),
}


def build(family, size):
    """The model (random weights) and its forward's input names."""
    import transformers as tf
    s = SIZES[size]
    h, nh, kv, ff, nl, v = (s["hidden"], s["heads"], s["kv_heads"], s["ffn"],
                            s["layers"], s["vocab"])
    positions = 4 * s["seq"]
    decoder_inputs = ["input_ids", "attention_mask"] if MASKS else ["input_ids"]
    if family == "llama":
        config = tf.LlamaConfig(vocab_size=v, hidden_size=h,
                                intermediate_size=ff, num_hidden_layers=nl,
                                num_attention_heads=nh,
                                num_key_value_heads=kv,
                                max_position_embeddings=positions,
                                attention_dropout=0.0)
        return tf.LlamaForCausalLM(config), decoder_inputs
    if family == "mistral":
        config = tf.MistralConfig(vocab_size=v, hidden_size=h,
                                  intermediate_size=ff, num_hidden_layers=nl,
                                  num_attention_heads=nh,
                                  num_key_value_heads=kv,
                                  max_position_embeddings=positions,
                                  attention_dropout=0.0)
        return tf.MistralForCausalLM(config), decoder_inputs
    if family == "qwen2":
        config = tf.Qwen2Config(vocab_size=v, hidden_size=h,
                                intermediate_size=ff, num_hidden_layers=nl,
                                num_attention_heads=nh,
                                num_key_value_heads=kv,
                                max_position_embeddings=positions,
                                attention_dropout=0.0)
        return tf.Qwen2ForCausalLM(config), decoder_inputs
    if family == "gpt_neox":
        config = tf.GPTNeoXConfig(vocab_size=v, hidden_size=h,
                                  intermediate_size=ff, num_hidden_layers=nl,
                                  num_attention_heads=nh,
                                  max_position_embeddings=positions,
                                  hidden_dropout=0.0, attention_dropout=0.0)
        return tf.GPTNeoXForCausalLM(config), decoder_inputs
    if family == "phi":
        config = tf.PhiConfig(vocab_size=v, hidden_size=h,
                              intermediate_size=ff, num_hidden_layers=nl,
                              num_attention_heads=nh,
                              max_position_embeddings=positions,
                              resid_pdrop=0.0, embd_pdrop=0.0,
                              attention_dropout=0.0)
        return tf.PhiForCausalLM(config), decoder_inputs
    seq2seq_inputs = (["input_ids", "attention_mask", "decoder_input_ids"]
                      if MASKS else ["input_ids", "decoder_input_ids"])
    if family == "t5":
        config = tf.T5Config(vocab_size=v, d_model=h, d_kv=h // nh, d_ff=ff,
                             num_layers=nl, num_decoder_layers=nl,
                             num_heads=nh, relative_attention_num_buckets=8,
                             relative_attention_max_distance=16,
                             dropout_rate=0.0, decoder_start_token_id=0)
        return tf.T5ForConditionalGeneration(config), seq2seq_inputs
    if family == "bart":
        config = tf.BartConfig(vocab_size=v, d_model=h, encoder_layers=nl,
                               decoder_layers=nl, encoder_attention_heads=nh,
                               decoder_attention_heads=nh,
                               encoder_ffn_dim=ff, decoder_ffn_dim=ff,
                               max_position_embeddings=positions,
                               dropout=0.0, attention_dropout=0.0,
                               activation_dropout=0.0)
        return tf.BartForConditionalGeneration(config), seq2seq_inputs
    raise ValueError(f"unknown family {family}")


MASKS = False
DYNAMIC_BATCH = False
TRAINING_MODE = False

FAMILIES = ["llama", "t5", "bart", "mistral", "qwen2", "gpt_neox", "phi"]
SEEDS = {name: 340 + k for k, name in enumerate(FAMILIES)}


class LogitsOnly(torch.nn.Module):
    """The forward a user exports: the model's inputs in, logits out."""

    def __init__(self, model, input_names):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs):
        kwargs = dict(zip(self.input_names, inputs))
        return self.model(**kwargs, use_cache=False).logits


def make_batch(input_names, size, seed, padding_ids=()):
    """Token ids (none of \p padding_ids), the attention mask if asked
    for, and labels."""
    s = SIZES[size]
    rng = np.random.default_rng(1000 + seed)
    b, n, v = s["batch"], s["seq"], s["vocab"]
    # An embedding's padding_idx (BART's pad token 1) gets no gradient in
    # PyTorch; the export's Gather has no such notion, so a batch holding
    # the id would train that row in any ONNX trainer: the batch avoids it.
    allowed = np.array([i for i in range(v) if i not in padding_ids])
    batch = {}
    for name in input_names:
        if name == "attention_mask":
            mask = np.ones((b, n), dtype=np.int64)
            mask[-1, -2:] = 0  # the last sequence padded at its end
            batch[name] = mask
        else:
            batch[name] = rng.choice(allowed, size=(b, n)).astype(np.int64)
    labels = rng.integers(0, v, size=(b, n), dtype=np.int64)
    return batch, labels


def padding_ids(model):
    return sorted({m.padding_idx for m in model.modules()
                   if isinstance(m, torch.nn.Embedding)
                   and m.padding_idx is not None})


def randomize(model):
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.02 * torch.randn_like(param))


def save(array, name, path):
    # np.array (not ascontiguousarray): a 0-d loss stays 0-d.
    proto = numpy_helper.from_array(np.array(array, order="C"), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def constant_tensors(graph):
    """(output name, array) of every Constant node with a tensor value."""
    result = []
    for node in graph.node:
        if node.op_type != "Constant":
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                result.append((node.output[0], numpy_helper.to_array(attr.t)))
    return result


def describe(array):
    finite = array[np.isfinite(array)]
    return {"shape": list(array.shape), "dtype": str(array.dtype),
            "min": float(array.min()), "max": float(array.max()),
            "distinct": int(np.unique(array).size),
            "finite": int(finite.size) == int(array.size)}


def consumers(graph, name):
    return sorted({f"{n.op_type}({n.name})" for n in graph.node
                   if name in n.input})


def match_parameters(graph, model):
    """Maps each ONNX float initializer to the PyTorch parameter it holds:
    (torch name, transposed) or None for a buffer."""
    params = [(name, p.detach().numpy()) for name, p in
              model.named_parameters()]
    mapping = {}
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        found = None
        for name, value in params:
            if array.shape == value.shape and np.array_equal(array, value):
                found = (name, False)
                break
            if (array.ndim == 2 and array.shape == value.T.shape
                    and np.array_equal(array, value.T)):
                found = (name, True)
                break
        mapping[init.name] = found
    return mapping


def export_family(family, size, fold, out_dir, quiet=False):
    """Exports the family, writes test_data_set_0 and info.json; returns the
    info dictionary."""
    seed = SEEDS[family]
    torch.manual_seed(seed)
    model, input_names = build(family, size)
    randomize(model)
    model.train(TRAINING_MODE)  # dropout is 0 in every configuration
    wrapper = LogitsOnly(model, input_names)
    wrapper.train(TRAINING_MODE)
    pads = padding_ids(model)
    batch, labels = make_batch(input_names, size, seed, pads)
    os.makedirs(os.path.join(out_dir, "test_data_set_0"), exist_ok=True)
    model_path = os.path.join(out_dir, "model.onnx")
    example = tuple(torch.from_numpy(batch[name]) for name in input_names)
    dynamic = None
    if DYNAMIC_BATCH:
        dynamic = {name: {0: "batch"} for name in input_names}
        dynamic["logits"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(wrapper, example, model_path, opset_version=17,
                          input_names=input_names, output_names=["logits"],
                          dynamic_axes=dynamic, do_constant_folding=fold,
                          training=(torch.onnx.TrainingMode.TRAINING
                                    if TRAINING_MODE
                                    else torch.onnx.TrainingMode.EVAL))
    graph = onnx.load(model_path).graph

    logits = wrapper(*example)
    vocab = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, vocab),
                           torch.from_numpy(labels).reshape(-1))
    model.zero_grad()
    loss.backward()
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}

    data = os.path.join(out_dir, "test_data_set_0")
    for name in os.listdir(data):
        os.remove(os.path.join(data, name))
    k = 0
    for name in input_names:
        save(batch[name], name, os.path.join(data, f"input_{k}.pb"))
        k += 1
    save(labels, "labels", os.path.join(data, f"input_{k}.pb"))
    save(loss.detach().numpy(), "loss", os.path.join(data, "output_0.pb"))

    mapping = match_parameters(graph, model)
    float_inits = [i for i in graph.initializer
                   if i.data_type in (onnx.TensorProto.FLOAT,
                                      onnx.TensorProto.FLOAT16,
                                      onnx.TensorProto.BFLOAT16,
                                      onnx.TensorProto.DOUBLE)]
    candidates = [i for i in float_inits if int(np.prod(i.dims)) > 1]
    written, gradient_names, copies, buffers = set(), [], [], []
    k = 1
    for init in candidates:
        found = mapping[init.name]
        if found is None:
            array = numpy_helper.to_array(init)
            buffers.append(dict(name=init.name, **describe(array),
                                consumers=consumers(graph, init.name)))
            continue
        torch_name, transposed = found
        if torch_name in written:
            copies.append({"name": init.name, "of": torch_name,
                           "transposed": transposed})
            continue
        written.add(torch_name)
        grad = grads[torch_name].T if transposed else grads[torch_name]
        save(grad, init.name + "_grad", os.path.join(data, f"output_{k}.pb"))
        gradient_names.append(init.name + "_grad")
        k += 1
    missing = sorted(set(grads) - written)
    float_constants = [(name, array) for name, array in constant_tensors(graph)
                       if array.dtype.kind == "f" and array.size > 1]
    info = {
        "family": family,
        "size": size,
        "do_constant_folding": fold,
        "training_mode": "TRAINING" if TRAINING_MODE else "EVAL",
        "seed": seed,
        "inputs": input_names,
        "padding_ids_avoided": pads,
        "loss": float(loss.item()),
        "torch_parameters": len(grads),
        "torch_parameter_elements": int(sum(g.size for g in grads.values())),
        "onnx_float_initializers": len(candidates),
        "float_constant_nodes": len(float_constants),
        # Before issue 34's fix every float initializer or Constant value of
        # more than one element was trainable.
        "old_trainable": len(candidates) + len(float_constants),
        # The new rule: initializers only, the mask-valued ones left out.
        "new_trainable_expected": len([i for i in candidates
                                       if np.all(np.abs(numpy_helper.to_array(i)) < 1e30)]),
        "gradients_written": len(gradient_names),
        "parameters_not_in_onnx": missing,
        "tied_copies": copies,
        "buffers": buffers,
        "float_constants": [dict(name=name, **describe(array))
                            for name, array in float_constants],
        "ops": sorted({n.op_type for n in graph.node}),
        "nodes": len(graph.node),
    }
    with open(os.path.join(out_dir, "info.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    if not quiet:
        print(f"{out_dir}: loss {info['loss']:.6f}; torch parameters "
              f"{info['torch_parameters']}, ONNX float initializers "
              f"{info['onnx_float_initializers']} (tied copies "
              f"{len(copies)}, buffers {len(buffers)}), float Constant "
              f"nodes {len(float_constants)}; "
              f"old trainable {info['old_trainable']}; gradients "
              f"{info['gradients_written']}"
              + (f"; NOT IN ONNX: {missing}" if missing else ""))
        for buf in buffers:
            print(f"  buffer initializer {buf['name']} {buf['shape']} "
                  f"[{buf['min']:.4g}, {buf['max']:.4g}] -> "
                  f"{', '.join(buf['consumers'])}")
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", default=["llama", "t5", "bart"])
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--out", default=HERE,
                        help="where hf_<family>[_nofold]/ go")
    parser.add_argument("--fold", choices=["both", "true", "false"],
                        default="both")
    parser.add_argument("--attention-mask", action="store_true",
                        help="the forward takes attention_mask too")
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="export with a symbolic batch dimension")
    parser.add_argument("--training-mode", action="store_true",
                        help="export with training=TrainingMode.TRAINING")
    args = parser.parse_args()
    global MASKS, DYNAMIC_BATCH, TRAINING_MODE
    MASKS = args.attention_mask
    DYNAMIC_BATCH = args.dynamic_batch
    TRAINING_MODE = args.training_mode
    torch.set_num_threads(1)
    import transformers
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    folds = {"both": [True, False], "true": [True], "false": [False]}[args.fold]
    for family in args.families:
        for fold in folds:
            name = f"hf_{family}" + ("" if fold else "_nofold")
            export_family(family, args.size, fold,
                          os.path.join(args.out, name))
    print(f"transformers {transformers.__version__}, torch "
          f"{torch.__version__}, onnx {onnx.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
