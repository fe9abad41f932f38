#!/usr/bin/env python3
"""Writes resize_cases.json: Resize cases evaluated by ONNX's reference
implementation (onnx.reference, onnx 1.16.2), which ResizeTest.cpp checks the
CPU kernel against.

Run with the test-data venv (it has onnx and numpy; nothing here is needed
by the tests themselves, which read the committed JSON):

    testdata/.venv/bin/python tests/unit/Inputs/resize/make_resize_cases.py

Each case is one Resize node at a given opset: its attributes, the input X
(float32 uniform in [-1, 1) from numpy's default_rng(seed)), roi / scales /
sizes, and the reference output. ONNX's reference evaluator binds the
second input of an opset-10 node to `roi`, so opset-10 cases are evaluated
as their opset-11 equivalent: asymmetric coordinates and, for nearest,
floor when upsampling and ceil when downsampling (Resize-10's own test
`resize_downsample_nearest` expects the ceil).
"""

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import op_resize

# onnx 1.16's linear coefficients at an integral source coordinate are an
# int64 array, which exclude_outside's in-place renormalization cannot
# divide; the same values as float64 (nothing else changes).
_linear_coeffs = op_resize._linear_coeffs
op_resize._linear_coeffs = lambda ratio, scale=None: np.asarray(
    _linear_coeffs(ratio, scale), dtype=np.float64)

CASES = []


def case(name, shape, opset=13, scales=None, sizes=None, roi=None,
         dtype=np.float32, eval_attrs=None, **attrs):
    CASES.append(dict(name=name, shape=shape, opset=opset, scales=scales,
                      sizes=sizes, roi=roi, dtype=dtype,
                      eval_attrs=eval_attrs, attrs=attrs))


COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]

# Nearest: every nearest_mode under every coordinate mode, up and down.
for coord in COORDS:
    for nearest in NEAREST:
        case(f"nearest_up_{coord}_{nearest}", [1, 2, 3, 4],
             scales=[1, 1, 2, 1.5], mode="nearest",
             coordinate_transformation_mode=coord, nearest_mode=nearest)
        case(f"nearest_down_{coord}_{nearest}", [1, 2, 5, 8],
             scales=[1, 1, 0.6, 0.5], mode="nearest",
             coordinate_transformation_mode=coord, nearest_mode=nearest)
# Linear and cubic under every coordinate mode, up and down.
for mode in ["linear", "cubic"]:
    for coord in COORDS:
        case(f"{mode}_up_{coord}", [2, 1, 3, 4], scales=[1, 1, 2.5, 1.5],
             mode=mode, coordinate_transformation_mode=coord)
        case(f"{mode}_down_{coord}", [1, 2, 6, 8], scales=[1, 1, 0.5, 0.75],
             mode=mode, coordinate_transformation_mode=coord)
case("cubic_A_n0p5_exclude_outside_up", [1, 1, 4, 4], scales=[1, 1, 2, 2],
     mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
case("cubic_A_n0p5_exclude_outside_down", [1, 1, 8, 8],
     scales=[1, 1, 0.75, 0.5], mode="cubic", cubic_coeff_a=-0.5,
     exclude_outside=1)
case("linear_exclude_outside_down", [1, 1, 5, 7], scales=[1, 1, 0.6, 0.5],
     mode="linear", exclude_outside=1)
# N-D multilinear (three resized axes) and a rank-3 resize of every axis.
case("linear_3d_up", [1, 1, 2, 3, 4], scales=[1, 1, 2, 1.5, 0.75],
     mode="linear")
case("linear_all_axes", [3, 4, 2], scales=[2, 0.5, 1.5], mode="linear",
     coordinate_transformation_mode="align_corners")
case("cubic_rank2", [5, 6], scales=[1.5, 0.5], mode="cubic")
# Sizes (scale = size / extent), including an output extent of 1.
case("sizes_nearest", [1, 1, 4, 4], sizes=[1, 1, 7, 3], mode="nearest")
case("sizes_linear_pytorch_half_pixel", [1, 1, 4, 4], sizes=[1, 1, 3, 1],
     mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
case("sizes_cubic_align_corners", [1, 2, 4, 5], sizes=[1, 2, 9, 3],
     mode="cubic", coordinate_transformation_mode="align_corners")
# Opset 18: axes and keep_aspect_ratio_policy.
case("axes_2_3_scales", [1, 2, 3, 4], opset=18, scales=[2, 1.5],
     axes=[2, 3], mode="linear")
case("axes_3_2_sizes", [1, 2, 3, 4], opset=18, sizes=[6, 5], axes=[3, 2],
     mode="nearest")
case("axes_last_cubic", [2, 3, 4], opset=18, scales=[0.75], axes=[2],
     mode="cubic")
case("not_larger_nearest", [1, 1, 2, 2], opset=18, sizes=[7, 8],
     axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode="nearest")
case("not_smaller_linear", [1, 1, 4, 6], opset=18, sizes=[3, 2],
     axes=[2, 3], keep_aspect_ratio_policy="not_smaller", mode="linear")
# tf_crop_and_resize: the roi, and extrapolation outside it.
case("tf_crop_and_resize_linear", [1, 1, 4, 4], scales=[1, 1, 0.75, 0.75],
     roi=[0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], mode="linear",
     coordinate_transformation_mode="tf_crop_and_resize",
     extrapolation_value=10.0)
case("tf_crop_and_resize_nearest_sizes", [1, 1, 4, 4], sizes=[1, 1, 3, 3],
     roi=[0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8], mode="nearest",
     coordinate_transformation_mode="tf_crop_and_resize")
case("tf_crop_and_resize_axes", [1, 1, 4, 4], opset=18, sizes=[3, 3],
     axes=[3, 2], roi=[0.6, 0.4, 0.8, 0.6], mode="linear",
     coordinate_transformation_mode="tf_crop_and_resize")
# Opset 19: half_pixel_symmetric (differs when scale * extent is fractional).
case("half_pixel_symmetric_up", [1, 1, 2, 2], opset=19,
     scales=[1, 1, 2.3, 2.94], mode="linear",
     coordinate_transformation_mode="half_pixel_symmetric")
case("half_pixel_symmetric_down", [1, 1, 4, 4], opset=19,
     scales=[1, 1, 0.8, 0.8], mode="linear",
     coordinate_transformation_mode="half_pixel_symmetric")
# Opset 11 (tf_half_pixel_for_nn is not in the reference implementation).
case("opset11_cubic", [1, 1, 4, 4], opset=11, scales=[1, 1, 0.75, 1.5],
     mode="cubic", coordinate_transformation_mode="asymmetric")
# Opset 10 (X, scales): asymmetric; nearest floors up and ceils down.
case("opset10_nearest_up", [1, 1, 2, 3], opset=10, scales=[1, 1, 2, 1.5],
     mode="nearest",
     eval_attrs=dict(coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor"))
case("opset10_nearest_down", [1, 1, 2, 4], opset=10, scales=[1, 1, 0.6, 0.6],
     mode="nearest",
     eval_attrs=dict(coordinate_transformation_mode="asymmetric",
                     nearest_mode="ceil"))
case("opset10_linear", [1, 1, 2, 3], opset=10, scales=[1, 1, 2, 0.5],
     mode="linear",
     eval_attrs=dict(coordinate_transformation_mode="asymmetric"))
# Float64 tensors.
case("linear_f64", [1, 2, 3, 3], scales=[1, 1, 1.5, 2], mode="linear",
     dtype=np.float64)
case("cubic_f64_down", [1, 1, 6, 6], scales=[1, 1, 0.5, 0.5], mode="cubic",
     dtype=np.float64)


def evaluate(c, x):
    opset = max(c["opset"], 11)
    attrs = dict(c["attrs"])
    attrs.update(c["eval_attrs"] or {})
    elem = TensorProto.DOUBLE if c["dtype"] == np.float64 else TensorProto.FLOAT
    inputs, feeds = ["X"], {"X": x}
    graph_inputs = [helper.make_tensor_value_info("X", elem, None)]

    def add(name, value, proto_type, np_type):
        if value is None:
            inputs.append("")
            return
        inputs.append(name)
        feeds[name] = np.array(value, dtype=np_type)
        graph_inputs.append(helper.make_tensor_value_info(name, proto_type,
                                                          None))

    add("roi", c["roi"], TensorProto.FLOAT, np.float32)
    add("scales", c["scales"], TensorProto.FLOAT, np.float32)
    add("sizes", c["sizes"], TensorProto.INT64, np.int64)
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("Resize", inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], "resize", graph_inputs,
                              [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", opset)])
    (y,) = ReferenceEvaluator(model).run(None, feeds)
    return y


def main():
    out = []
    for seed, c in enumerate(CASES):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, size=c["shape"]).astype(c["dtype"])
        y = evaluate(c, x)
        # Enough digits to round-trip the element type, no more.
        digits = "{:.17g}" if c["dtype"] == np.float64 else "{:.9g}"
        out.append(dict(
            name=c["name"], opset=c["opset"],
            dtype="float64" if c["dtype"] == np.float64 else "float32",
            attrs=c["attrs"], x_shape=list(x.shape),
            x=[float(digits.format(v)) for v in x.ravel()],
            roi=c["roi"], scales=c["scales"], sizes=c["sizes"],
            y_shape=list(y.shape), y=[float(digits.format(v)) for v in y.ravel()]))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "resize_cases.json")
    with open(path, "w") as f:
        json.dump(dict(generator=f"onnx.reference (onnx {onnx.__version__}), "
                       "tests/unit/Inputs/resize/make_resize_cases.py",
                       cases=out), f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()
