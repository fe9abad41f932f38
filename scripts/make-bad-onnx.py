#!/usr/bin/python3
"""Writes the small malformed ONNX models used by tests/lit/onnx/*.test.

Each file exercises one error path of gmopt's ONNX importer (or, for
unbound_dim.onnx, of gmopt-compile's dimension check). The files are a few
hundred bytes each and are committed; re-run this script after changing it:

    /usr/bin/python3 scripts/make-bad-onnx.py

Needs Debian's python3-onnx (apt-get install -y python3-onnx). The models are
written with onnx.helper and serialized directly: the ONNX checker is not run,
since most of them are invalid on purpose.
"""

import os
import sys

from onnx import TensorProto, helper

OUT_DIR = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lit", "Inputs", "onnx"
)

F32 = TensorProto.FLOAT


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, opset=17, ir_version=8, extra_opsets=(),
          initializers=()):
    graph = helper.make_graph(nodes, "bad", inputs, outputs,
                              initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(domain, version) for domain, version in extra_opsets]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="make-bad-onnx")
    m.ir_version = ir_version
    return m.SerializeToString()


def relu_model(**kwargs):
    return model([helper.make_node("Relu", ["x"], ["y"], name="r0")],
                 [tensor("x", F32, [2, 3])], [tensor("y", F32, [2, 3])], **kwargs)


def cases():
    yield "valid_relu.onnx", relu_model()

    # A valid model cut in the middle of its graph.
    full = relu_model()
    yield "truncated.onnx", full[: len(full) // 2]

    # Field 0x...ff with wire type 7: no protobuf parser accepts this.
    yield "garbage.onnx", b"\xff\xff\xff\xff\xff\x0fthis is not an ONNX model\n"

    yield "unknown_op.onnx", model(
        [helper.make_node("Bar", ["x"], ["y"], name="bar0", domain="com.foo")],
        [tensor("x", F32, [2])], [tensor("y", F32, [2])],
        extra_opsets=[("com.foo", 1)])

    yield "wrong_arity.onnx", model(
        [helper.make_node("Relu", ["x", "x"], ["y"], name="relu0")],
        [tensor("x", F32, [2])], [tensor("y", F32, [2])])

    yield "missing_input.onnx", model(
        [helper.make_node("Relu", ["nope"], ["y"], name="r0")],
        [tensor("x", F32, [2])], [tensor("y", F32, [2])])

    yield "cycle.onnx", model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="nodeA"),
         helper.make_node("Relu", ["a"], ["b"], name="nodeB")],
        [tensor("x", F32, [2])], [tensor("a", F32, [2])])

    yield "dtype_mismatch.onnx", model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add0")],
        [tensor("a", F32, [2]), tensor("b", TensorProto.FLOAT16, [2])],
        [tensor("y", F32, [2])])

    yield "duplicate_def.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="r0"),
         helper.make_node("Neg", ["x"], ["y"], name="r1")],
        [tensor("x", F32, [2])], [tensor("y", F32, [2])])

    then_graph = helper.make_graph([], "then", [], [])
    yield "subgraph.onnx", model(
        [helper.make_node("If", ["cond"], ["y"], name="if0",
                          then_branch=then_graph, else_branch=then_graph)],
        [tensor("cond", TensorProto.BOOL, [])], [tensor("y", F32, [2])])

    yield "unbound_dim.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="r0")],
        [tensor("x", F32, ["batch", 4])], [tensor("y", F32, ["batch", 4])])

    yield "opset12.onnx", relu_model(opset=12)
    yield "opset22.onnx", relu_model(opset=22)
    yield "opset24.onnx", relu_model(opset=24)
    yield "ir_version11.onnx", relu_model(ir_version=11)

    # An initializer in external data, at `external_data.bin` next to the
    # model; tests/lit/bad-input/files-external-data.test makes that name a
    # symbolic link (to /etc/passwd, /dev/zero, ...) or a FIFO.
    weight = TensorProto(name="w", data_type=F32, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "external_data.bin"), ("offset", "0"),
                       ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    yield "external_data.onnx", model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add0")],
        [tensor("x", F32, [4])], [tensor("y", F32, [4])],
        initializers=[weight])

    # testdata/mlp's training graph with one node name that is not UTF-8
    # (ONNX allows any bytes; the .gm container must store it). Patched in
    # the serialized bytes: Python's protobuf refuses such a str.
    mlp = os.path.join(os.path.dirname(OUT_DIR), "..", "..", "..", "testdata",
                       "mlp", "training_model.onnx")
    with open(mlp, "rb") as f:
        data = f.read()
    name = b"/Relu_1_Grad/ReluGrad_0"
    assert data.count(name) == 1, "the node name must occur once"
    yield "mlp_non_utf8_name.onnx", data.replace(name, b"/Relu_1_Grad/Relu\xffrad_0")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, data in cases():
        path = os.path.join(OUT_DIR, name)
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {os.path.relpath(path)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
