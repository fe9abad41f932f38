#!/usr/bin/env python3
"""Writes rms_norm/: a tiny forward model with two ai.onnx RMSNormalization
nodes (opset 23), built with onnx.helper (onnx 1.16 and torch 2.4 know
neither the op nor the opset, so nothing here exports or checks it), and
the first training step's references computed by PyTorch autograd on the
definition written out in float64 (ONNX's reference implementation,
onnx/reference/ops/op_rms_normalization.py, arrived in onnx 1.18).

    testdata/.venv/bin/python tests/lit/autodiff/Inputs/make_rms_norm.py

    hidden = MatMul(input [batch,4,8], w_in [8,8])
    normed = RMSNormalization(hidden, scale_last [8])          axis -1
    mixed  = RMSNormalization(Tanh(normed), scale_rows [8])    axis 1, eps 1e-3
    output = MatMul(mixed, w_out [8,3])

The second norm normalizes over [4,8] with a [8] scale broadcast over it.
opset21.onnx is the same graph at opset 21, before the op existed.
The loss is the mean squared error that `gmopt-compile --train --loss=mse`
appends. test_data_set_0 holds the batch (input_0.pb `input`, input_1.pb
`target`), the loss (output_0.pb) and every parameter gradient
(`<name>_grad`).
"""

import os

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "rms_norm")
EPS_LAST, EPS_ROWS = 1e-5, 1e-3


def rms_norm(x, scale, first_axis, epsilon):
    axes = tuple(range(first_axis, x.dim()))
    mean_square = (x * x).mean(dim=axes, keepdim=True)
    return x / torch.sqrt(mean_square + epsilon) * scale


def save(array, name, path):
    proto = numpy_helper.from_array(np.array(array, order="C"), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main():
    rng = np.random.default_rng(2323)
    params = {
        "w_in": rng.uniform(-0.6, 0.6, size=(8, 8)),
        "scale_last": rng.uniform(0.5, 1.5, size=(8,)),
        "scale_rows": rng.uniform(0.5, 1.5, size=(8,)),
        "w_out": rng.uniform(-0.6, 0.6, size=(8, 3)),
    }
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x = rng.uniform(-1, 1, size=(2, 4, 8)).astype(np.float32)
    target = rng.uniform(-1, 1, size=(2, 4, 3)).astype(np.float32)

    nodes = [
        helper.make_node("MatMul", ["input", "w_in"], ["hidden"],
                         name="project_in"),
        helper.make_node("RMSNormalization", ["hidden", "scale_last"],
                         ["normed"], name="rms_last", axis=-1,
                         epsilon=EPS_LAST),
        helper.make_node("Tanh", ["normed"], ["squashed"], name="squash"),
        helper.make_node("RMSNormalization", ["squashed", "scale_rows"],
                         ["mixed"], name="rms_rows", axis=1,
                         epsilon=EPS_ROWS),
        helper.make_node("MatMul", ["mixed", "w_out"], ["output"],
                         name="project_out"),
    ]
    graph = helper.make_graph(
        nodes, "rms_norm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       ["batch", 4, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                       ["batch", 4, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in params.items()])
    # IR version 10 (onnx 1.16's newest): only the opset says 23.
    model = helper.make_model(graph, producer_name="make_rms_norm.py",
                              opset_imports=[helper.make_opsetid("", 23)],
                              ir_version=10)
    data = os.path.join(OUT, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(OUT, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    # The same graph at opset 21, where RMSNormalization does not exist yet.
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 21))
    with open(os.path.join(OUT, "opset21.onnx"), "wb") as f:
        f.write(model.SerializeToString())

    torch_params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
                    for k, v in params.items()}
    hidden = torch.tensor(x, dtype=torch.float64) @ torch_params["w_in"]
    normed = rms_norm(hidden, torch_params["scale_last"], 2, EPS_LAST)
    mixed = rms_norm(torch.tanh(normed), torch_params["scale_rows"], 1,
                     EPS_ROWS)
    output = mixed @ torch_params["w_out"]
    loss = torch.mean((output - torch.tensor(target, dtype=torch.float64))**2)
    loss.backward()

    save(x, "input", os.path.join(data, "input_0.pb"))
    save(target, "target", os.path.join(data, "input_1.pb"))
    save(np.float32(loss.item()), "loss", os.path.join(data, "output_0.pb"))
    for k, (name, param) in enumerate(torch_params.items(), start=1):
        save(param.grad.numpy().astype(np.float32), name + "_grad",
             os.path.join(data, f"output_{k}.pb"))
    print(f"loss {loss.item():.6f}; {k} gradients; wrote {OUT}")


if __name__ == "__main__":
    main()
