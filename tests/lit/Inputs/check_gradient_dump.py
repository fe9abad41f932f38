#!/usr/bin/env python3
"""Checks a `gmopt-run --dump-gradients` folder against ONNX Runtime's
reference gradients in a testdata test_data_set, with NumPy alone.

Usage: check_gradient_dump.py DUMP_DIR TEST_DATA_SET [RTOL]

The set's manifest.json names the reference outputs: role "gradient"
(`P_grad`, parameter P's gradient) and role "loss". Each reference
output_K.pb (an onnx.TensorProto, read here without protobuf: dims,
data_type, raw_data or float_data) is compared with the dump's gradient of
the same parameter (read by gpucheck.gradients.read_dump, which checks the
.npy files against the dump's manifest) as max|got - ref| <= RTOL * max|ref|
(default 1e-4, testdata/README.md's tolerance for fp32 gradients); the
dump's loss likewise. Passes (exit 0, "all N gradients and the loss within
RTOL") when every tensor agrees and the dump holds exactly the parameters
the set has gradients of.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))

from gpucheck import gradients  # noqa: E402  (scripts/gpucheck)
from split_test_data_set import read_tensor  # noqa: E402  (same folder)

DTYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def read_tensor_proto(path):
    """A float TensorProto's values as a NumPy array of its shape."""
    dims, dtype, _, raw = read_tensor(path)
    if dtype not in DTYPES:
        raise ValueError(f"{path}: data_type {dtype} is not a float type")
    return np.frombuffer(raw, dtype=np.dtype(DTYPES[dtype]).newbyteorder("<")).reshape(dims)


def main(argv):
    dump_dir, set_dir = argv[1], argv[2]
    rtol = float(argv[3]) if len(argv) > 3 else 1e-4
    with open(os.path.join(set_dir, "manifest.json")) as f:
        outputs = json.load(f)["outputs"]
    dump = gradients.read_dump(dump_dir)
    ok = True
    expected = []
    for output in outputs:
        if output["role"] != "gradient":
            continue
        name = output["name"][:-len("_grad")]
        expected.append(name)
        reference = read_tensor_proto(os.path.join(set_dir, output["file"]))
        if name not in dump.gradients:
            print(f"FAIL: {name}: not in the dump")
            ok = False
            continue
        agreement = gradients.compare_tensor(name, dump.gradients[name], reference, rtol)
        print(f"{name}: max rel {agreement.max_rel:.1e} {'ok' if agreement.ok else 'FAIL'} "
              f"{agreement.problem}".rstrip())
        ok &= agreement.ok
    extra = [name for name in dump.gradients if name not in expected]
    if extra:
        print(f"FAIL: not in the reference: {', '.join(extra)}")
        ok = False
    loss = next(o for o in outputs if o["role"] == "loss")
    reference_loss = float(read_tensor_proto(os.path.join(set_dir, loss["file"])))
    loss_rel = abs(dump.loss - reference_loss) / abs(reference_loss)
    print(f"loss: max rel {loss_rel:.1e} {'ok' if loss_rel <= rtol else 'FAIL'}")
    ok &= loss_rel <= rtol
    if ok:
        print(f"all {len(expected)} gradients and the loss within {rtol:g}")
        return 0
    print("the dump differs from the reference")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
