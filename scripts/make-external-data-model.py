#!/usr/bin/python3
"""Writes the external-data models of tests/lit/extdata (tests/lit/Inputs/onnx).

mlp_external_data.onnx is testdata/mlp/training_model.onnx (ONNX Runtime's
training graph of the small MLP) with every trainable parameter given a
default value: an initializer of the same name whose bytes are external
data in `mlp_external_data.bin` next to the model, each at an offset aligned
to 64 bytes.

rotary_external_constant.onnx is a forward model in the shape of torchtune's
Llama-2 export (issue 34, item 7): the rotary positions are the value of a
Constant node, `/layers.0/attn/pos_embeddings/Constant_1`, whose tensor is
external data in `rotary_external_constant.bin`; logits =
MatMul(x * Concat(Cos(positions), Sin(positions)), proj.weight).

Only the graphs are committed (a few KB); the tests create the data files at
run time (`truncate -s`, all zeros) or leave them out. The script prints the
size each data file must have. Re-run it after changing it:

    /work/main/testdata/.venv/bin/python scripts/make-external-data-model.py

Needs the onnx Python package (testdata/.venv has it); the tests do not.
"""

import os

import onnx
from onnx import TensorProto, helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SOURCE = os.path.join(ROOT, "testdata", "mlp", "training_model.onnx")
OUT_DIR = os.path.join(ROOT, "tests", "lit", "Inputs", "onnx")
NAME = "mlp_external_data"
ROTARY_NAME = "rotary_external_constant"
ALIGN = 64


def make_external(tensor, location, offset, length):
    """Marks `tensor` (no data of its own) as stored in `location`."""
    tensor.data_location = TensorProto.EXTERNAL
    for key, text in (("location", location), ("offset", str(offset)),
                      ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = text


def write_mlp():
    model = onnx.load(SOURCE)
    graph = model.graph
    offset = 0
    for value in graph.input:
        name = value.name
        if not name.startswith("fc") or name.endswith(".buffer"):
            continue
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        count = 1
        for d in dims:
            count *= d
        offset = (offset + ALIGN - 1) // ALIGN * ALIGN
        tensor = TensorProto(name=name, data_type=value.type.tensor_type.elem_type,
                             dims=dims)
        make_external(tensor, NAME + ".bin", offset, 4 * count)
        graph.initializer.append(tensor)
        offset += 4 * count
    with open(os.path.join(OUT_DIR, NAME + ".onnx"), "wb") as out:
        out.write(model.SerializeToString())
    return offset


def write_rotary():
    seq, half = 4, 4
    positions = TensorProto(name="", data_type=TensorProto.FLOAT,
                            dims=[seq, half])
    make_external(positions, ROTARY_NAME + ".bin", 0, 4 * seq * half)
    prefix = "/layers.0/attn/pos_embeddings/"
    table = prefix + "Constant_1_output_0"
    weight = [0.01 * i - 0.3 for i in range(2 * half * 2 * half)]
    nodes = [
        helper.make_node("Constant", [], [table], name=prefix + "Constant_1",
                         value=positions),
        helper.make_node("Cos", [table], [prefix + "Cos_output_0"],
                         name=prefix + "Cos"),
        helper.make_node("Sin", [table], [prefix + "Sin_output_0"],
                         name=prefix + "Sin"),
        helper.make_node("Concat", [prefix + "Cos_output_0",
                                    prefix + "Sin_output_0"],
                         [prefix + "Concat_output_0"], name=prefix + "Concat",
                         axis=-1),
        helper.make_node("Mul", ["x", prefix + "Concat_output_0"],
                         [prefix + "Mul_output_0"], name=prefix + "Mul"),
        helper.make_node("MatMul", [prefix + "Mul_output_0", "proj.weight"],
                         ["logits"], name="/proj/MatMul"),
    ]
    graph = helper.make_graph(
        nodes, "rotary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                       ["batch", seq, 2 * half])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       ["batch", seq, 2 * half])],
        [helper.make_tensor("proj.weight", TensorProto.FLOAT,
                            [2 * half, 2 * half], weight)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make-external-data-model.py")
    model.ir_version = 8
    with open(os.path.join(OUT_DIR, ROTARY_NAME + ".onnx"), "wb") as out:
        out.write(model.SerializeToString())
    return 4 * seq * half


def main():
    print(NAME + ".bin", write_mlp())
    print(ROTARY_NAME + ".bin", write_rotary())


if __name__ == "__main__":
    main()
