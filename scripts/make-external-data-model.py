#!/usr/bin/python3
"""Writes tests/lit/Inputs/onnx/mlp_external_data.onnx for tests/lit/extdata.

The model is testdata/mlp/training_model.onnx (ONNX Runtime's training graph
of the small MLP) with every trainable parameter given a default value: an
initializer of the same name whose bytes are external data in
`mlp_external_data.bin` next to the model, each at an offset aligned to 64
bytes. Only the graph is committed (a few KB); the tests create the data
file at run time (`truncate -s`, all zeros) or leave it out. The script
prints the size the data file must have. Re-run it after changing it:

    /work/main/testdata/.venv/bin/python scripts/make-external-data-model.py

Needs the onnx Python package (testdata/.venv has it); the tests do not.
"""

import os

import onnx
from onnx import TensorProto

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SOURCE = os.path.join(ROOT, "testdata", "mlp", "training_model.onnx")
OUT_DIR = os.path.join(ROOT, "tests", "lit", "Inputs", "onnx")
NAME = "mlp_external_data"
ALIGN = 64


def main():
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
        tensor.data_location = TensorProto.EXTERNAL
        for key, text in (("location", NAME + ".bin"), ("offset", str(offset)),
                          ("length", str(4 * count))):
            entry = tensor.external_data.add()
            entry.key = key
            entry.value = text
        graph.initializer.append(tensor)
        offset += 4 * count
    with open(os.path.join(OUT_DIR, NAME + ".onnx"), "wb") as out:
        out.write(model.SerializeToString())
    print(offset)


if __name__ == "__main__":
    main()
