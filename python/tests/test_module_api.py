"""gmopt.training.api.Module beyond the steps: names, contiguous parameters,
inference export, gmopt's own options, and errors that are Python
exceptions, never a crash."""

import os
import subprocess

import numpy as np
import pytest

from conftest import REPO, make_trainer, model_path, read_inputs, relative_difference, user_inputs
import gmopt
from gmopt.training import api


def test_input_and_output_names():
    """ONNX Runtime's names: user inputs only (no parameters, gradient
    buffers or lazy_reset_grad), the loss as the one output; the eval
    model's in eval mode."""
    expected = {
        "gpt_tiny": ["input_ids", "labels"],
        "bert_tiny": ["input_ids", "attention_mask", "labels"],
        "cnn_bn": ["input", "labels"],
    }
    for model, names in expected.items():
        _, module, _ = make_trainer(model)
        assert module.input_names() == names
        assert module.output_names() == ["onnx::loss::2"]
        module.eval()
        assert module.input_names() == names
        assert module.output_names() == ["onnx::loss::2"]


def test_contiguous_parameters_round_trip():
    """get_contiguous_parameters is every parameter (or the trainable ones)
    flattened in the training graph's input order; copy_buffer_to_parameters
    writes a buffer back, and the next step sees it."""
    state, module, _ = make_trainer("regression_frozen")
    order = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    everything = np.concatenate([state.parameters[n].data.ravel() for n in order])
    trainable = np.concatenate([state.parameters[n].data.ravel() for n in order[2:]])
    buffer = module.get_contiguous_parameters()
    assert buffer.dtype == np.float32 and buffer.shape == (module.get_parameters_size(False),)
    np.testing.assert_array_equal(buffer.numpy(), everything)
    assert module.get_parameters_size() == trainable.size
    np.testing.assert_array_equal(module.get_contiguous_parameters(trainable_only=True), trainable)

    inputs = user_inputs(module, "regression_frozen")
    module.lazy_reset_grad()
    loss = module(*inputs)
    module.copy_buffer_to_parameters(trainable * 0.5)
    np.testing.assert_array_equal(module.get_contiguous_parameters(True), trainable * np.float32(0.5))
    np.testing.assert_array_equal(state.parameters["fc1.weight"].data.ravel(), everything[:16 * 64])
    module.lazy_reset_grad()
    assert float(module(*inputs)) != float(loss)
    module.copy_buffer_to_parameters(everything, trainable_only=False)
    module.lazy_reset_grad()
    assert float(module(*inputs)) == float(loss)


def test_contiguous_parameters_of_a_gpt():
    """gpt_tiny: the frozen dropout_ratio is in the full buffer only."""
    _, module, _ = make_trainer("gpt_tiny")
    assert module.get_parameters_size(False) == module.get_parameters_size(True) + 1
    full = module.get_contiguous_parameters()
    module.copy_buffer_to_parameters(full, trainable_only=False)
    np.testing.assert_array_equal(module.get_contiguous_parameters(), full)


def test_copy_buffer_of_the_wrong_size_is_an_error():
    _, module, _ = make_trainer("regression_frozen")
    full = module.get_contiguous_parameters()
    with pytest.raises(gmopt.Error):
        module.copy_buffer_to_parameters(full)  # trainable_only=True: too long
    with pytest.raises(TypeError):
        module.copy_buffer_to_parameters(full.numpy().astype(np.float64), trainable_only=False)


def test_export_model_for_inferencing(tmp_path):
    """The inference model holds the trained parameters and ends at the
    named output (test_exported_model_loads_in_onnx_runtime runs it)."""
    state, module, optimizer = make_trainer("gpt_tiny")
    inputs = user_inputs(module, "gpt_tiny")
    module.lazy_reset_grad()
    module(*inputs)
    optimizer.step()
    path = tmp_path / "inference.onnx"
    module.export_model_for_inferencing(path, ["logits"])
    data = path.read_bytes()
    assert len(data) > 4 * module.get_parameters_size(True)
    assert b"logits" in data
    # Every trained parameter is stored with its current value.
    for name, p in state.parameters:
        if p.requires_grad:
            assert name.encode() in data and p.data.tobytes() in data, name
    # gmopt's importer reads it back (types inferred, graph verified): the
    # data input in, the logits out, the parameters as initializers.
    summary = gmopt.inspect_onnx(path)
    assert [v["name"] for v in summary["inputs"]] == ["input_ids"]
    assert [v["name"] for v in summary["outputs"]] == ["logits"]
    assert summary["outputs"][0]["type"].startswith("f32[")
    stored = {v["name"] for v in summary["initializers"]}
    assert {name for name, p in state.parameters if p.requires_grad} <= stored


ORT_PYTHON = os.path.join(REPO, "testdata", ".venv", "bin", "python")


@pytest.mark.skipif(not os.path.exists(ORT_PYTHON),
                    reason="no ONNX Runtime 1.19.2 on this machine (scripts/testdata-env.sh installs it)")
def test_exported_model_loads_in_onnx_runtime(tmp_path):
    """ONNX Runtime's InferenceSession loads the exported model and its logits
    give the loss gmopt's eval step computes."""
    _, module, _ = make_trainer("gpt_tiny")
    tensors = read_inputs("gpt_tiny")
    module.eval()
    eval_loss = float(module(*[tensors[n] for n in module.input_names()]))
    path = tmp_path / "inference.onnx"
    module.export_model_for_inferencing(path, ["logits"])
    np.save(tmp_path / "input_ids.npy", tensors["input_ids"])
    np.save(tmp_path / "labels.npy", tensors["labels"])
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        "d = sys.argv[1]\n"
        "s = ort.InferenceSession(d + '/inference.onnx', providers=['CPUExecutionProvider'])\n"
        "logits = s.run(['logits'], {'input_ids': np.load(d + '/input_ids.npy')})[0].astype(np.float64)\n"
        "labels = np.load(d + '/labels.npy')\n"
        "z = logits - logits.max(axis=1, keepdims=True)\n"
        "logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))\n"
        "print(-logp[np.arange(len(labels)), labels].mean())\n")
    result = subprocess.run([ORT_PYTHON, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    ort_loss = float(result.stdout.strip().splitlines()[-1])
    assert relative_difference(ort_loss, eval_loss) <= 1e-5


def test_pipeline_option():
    """A pipeline given to the Module compiles the step (and is recorded);
    a bad one is an error naming it."""
    def fresh_state():
        return api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint"))

    module = api.Module(model_path("gpt_tiny", "training_model.onnx"), fresh_state(),
                        pipeline="canonicalize,plan-buffers")
    assert np.isfinite(module(*user_inputs(module, "gpt_tiny")))
    assert module._session.memory()["pipeline"].startswith("canonicalize")
    # With every dimension bound the step compiles when the Module is made;
    # otherwise at the first step, which binds them from its inputs.
    with pytest.raises(gmopt.Error, match="no-such-pass"):
        api.Module(model_path("gpt_tiny", "training_model.onnx"), fresh_state(), pipeline="no-such-pass",
                   dims={"batch": 4, "batch_x_seq": 256})
    module = api.Module(model_path("gpt_tiny", "training_model.onnx"), fresh_state(), pipeline="no-such-pass")
    with pytest.raises(gmopt.Error, match="no-such-pass"):
        module(*user_inputs(module, "gpt_tiny"))


def test_memory_limit_is_parsed():
    state = api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint"))
    with pytest.raises(ValueError, match="memory_limit"):
        api.Module(model_path("gpt_tiny", "training_model.onnx"), state, memory_limit="lots")
    with pytest.raises(ValueError, match="not both"):
        api.Module(model_path("gpt_tiny", "training_model.onnx"), state, memory_limit=1 << 30,
                   pipeline="canonicalize")


def test_memory_limit_fits_the_plan():
    """Under a memory_limit the default plan exceeds, the Module trains on a
    plan that fits, with ONNX Runtime's loss."""
    plain = api.Module(model_path("gpt_tiny", "training_model.onnx"),
                       api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint")))
    inputs = user_inputs(plain, "gpt_tiny")
    loss = plain(*inputs)
    limit = int(plain._session.memory()["planned"]["peak_bytes"] * 0.9)
    state = api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint"))
    module = api.Module(model_path("gpt_tiny", "training_model.onnx"), state, memory_limit=limit)
    assert relative_difference(module(*inputs), loss) <= 1e-5
    assert module._session.memory()["planned"]["peak_bytes"] <= limit


def test_errors_are_python_exceptions(tmp_path):
    """Missing files, wrong input counts and dtypes, unknown devices: each a
    Python exception with a message."""
    with pytest.raises(gmopt.Error, match="nope"):
        api.CheckpointState.load_checkpoint(tmp_path / "nope")
    state = api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint"))
    with pytest.raises(gmopt.Error):
        api.Module(tmp_path / "missing.onnx", state)
    with pytest.raises(ValueError, match="device"):
        api.Module(model_path("gpt_tiny", "training_model.onnx"), state, device="tpu")
    with pytest.raises(TypeError):
        api.Module(model_path("gpt_tiny", "training_model.onnx"), "checkpoint")
    _, module, _ = make_trainer("gpt_tiny")
    inputs = user_inputs(module, "gpt_tiny")
    with pytest.raises(gmopt.Error):
        module(inputs[0])
    with pytest.raises(gmopt.Error):
        module(inputs[0].astype(np.float32), inputs[1])
    with pytest.raises(TypeError):
        module(np.array(["a", "b"]), inputs[1])
    with pytest.raises(gmopt.Error):
        module.export_model_for_inferencing(tmp_path / "x.onnx", ["no_such_output"])
    with pytest.raises(gmopt.Error):
        api.Optimizer(tmp_path / "missing_optimizer.onnx", module)


class _OrtValueLike:
    """What a script ported from ONNX Runtime may still pass around: an
    object with OrtValue's .numpy()."""

    def __init__(self, array):
        self._array = array

    def numpy(self):
        return self._array


def test_ortvalue_like_inputs_and_buffers():
    """Inputs and parameter buffers given as objects with .numpy() (ONNX
    Runtime's OrtValue) are read through it."""
    _, module, _ = make_trainer("regression_frozen")
    inputs = user_inputs(module, "regression_frozen")
    module.lazy_reset_grad()
    plain = module(*inputs)
    module.lazy_reset_grad()
    wrapped = module(*[_OrtValueLike(x) for x in inputs])
    assert float(plain) == float(wrapped)
    buffer = module.get_contiguous_parameters(trainable_only=True)
    module.copy_buffer_to_parameters(_OrtValueLike(buffer.numpy() * 2))
    np.testing.assert_array_equal(module.get_contiguous_parameters(True), buffer.numpy() * np.float32(2))
