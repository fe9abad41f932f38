"""How far ONNX Runtime drifts from itself over 20 AdamW steps when only its
thread count (the summation order) changes: the floor under any comparison of
another implementation with ORT's adamw_losses.json. Trains each named testdata
model with intra_op_num_threads=1 and =2 (same artifacts, batch and learning
rate as testdata/generate.py's reference) and prints the largest relative
difference of the losses and of the final parameters (per tensor, of its
largest magnitude).

    testdata/.venv/bin/python scripts/ort-self-drift.py resnet_tiny cnn
"""
import json, os, sys, numpy as np, onnx
from onnx import numpy_helper
import onnxruntime as ort
from onnxruntime.training.api import CheckpointState, Module, Optimizer
T = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
def run(name, threads):
    d = os.path.join(T, name); td = os.path.join(d, "test_data_set_0")
    man = json.load(open(os.path.join(td, "manifest.json")))
    def rd(fn):
        t = onnx.TensorProto(); t.ParseFromString(open(os.path.join(td, fn), "rb").read()); return numpy_helper.to_array(t)
    user = [rd(e["file"]) for e in man["inputs"] if e["role"] == "data"]
    trainable = [e["name"] for e in man["inputs"] if e["role"] == "parameter"]
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1; so.log_severity_level = 3
    st = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    m = Module(os.path.join(d, "training_model.onnx"), st, os.path.join(d, "eval_model.onnx"), device="cpu", session_options=so)
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), m)
    lr = json.load(open(os.path.join(d, "adamw_losses.json")))["learning_rate"]
    opt.set_learning_rate(lr); m.train(); losses = []
    for s in range(20):
        m.lazy_reset_grad(); losses.append(float(m(*user))); opt.step()
    return losses, {n: st.parameters[n].data.copy() for n in trainable}
for name in sys.argv[1:]:
    l1, p1 = run(name, 1); l2, p2 = run(name, 2)
    ld = max(abs(a - b) / abs(b) for a, b in zip(l1, l2))
    pd = {n: float(np.max(np.abs(p1[n] - p2[n])) / max(np.max(np.abs(p2[n])), 1e-30)) for n in p1}
    worst = max(pd, key=pd.get)
    print(f"{name}: ORT 1 thread vs 2 threads over 20 AdamW steps: losses {ld:.2e}, params {pd[worst]:.2e} ({worst})")
