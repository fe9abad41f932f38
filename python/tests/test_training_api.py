"""gmopt.training.api against ONNX Runtime's training API: a port of ONNX
Runtime's own training-API behaviours (orttraining's python tests of
CheckpointState, Module, Optimizer and LinearLRScheduler) on the ORT-made
artifacts in testdata/, with ONNX Runtime's committed reference losses."""

import numpy as np
import pytest

from conftest import (adamw_reference, make_trainer, model_path, read_inputs,
                      relative_difference, user_inputs)
from gmopt.training import api


def test_train_step_loss_equals_onnx_runtime(ort_model):
    """One training step's loss is ONNX Runtime's (output_0.pb)."""
    import gmopt
    _, module, _ = make_trainer(ort_model)
    loss = module(*user_inputs(module, ort_model))
    assert isinstance(loss, np.ndarray) and loss.dtype == np.float32 and loss.shape == ()
    _, ref = gmopt.read_tensor_proto(model_path(ort_model, "test_data_set_0/output_0.pb"))
    assert relative_difference(loss, ref) <= 1e-5, (float(loss), float(ref))


# The final-parameter tolerance per model (testdata/README.md: 1e-5). The
# key bias of bert_tiny's attention has an identically zero true gradient, so
# both runtimes' gradients there are rounding noise that AdamW turns into
# lr-sized steps: after 20 steps that element differs by 2.3e-5 to 7.0e-5 of
# in_proj_bias's largest magnitude, depending on OpenBLAS's kernel
# (tests/unit/AdamWTestdataTest.cpp gives the same bound and the figures).
FINAL_PARAMETER_RTOL = {"bert_tiny": 1e-4}


def test_adamw_losses_equal_onnx_runtime(ort_model):
    """20 AdamW steps (lazy_reset_grad, train step, optimizer step) give ONNX
    Runtime's losses and final parameters (adamw_losses.json)."""
    import gmopt
    reference = adamw_reference(ort_model)
    state, module, optimizer = make_trainer(ort_model, reference["learning_rate"])
    module.train()
    inputs = user_inputs(module, ort_model)
    losses = []
    for _ in range(reference["steps"]):
        module.lazy_reset_grad()
        losses.append(float(module(*inputs)))
        optimizer.step()
    for step, (got, ref) in enumerate(zip(losses, reference["losses"])):
        assert abs(got - ref) <= 1e-5 * abs(ref), f"loss[{step}]: gmopt {got}, ONNX Runtime {ref}"
    final = reference["final_parameters"]
    for entry in final["params"]:
        _, ref = gmopt.read_tensor_proto(model_path(ort_model, f"{final['directory']}/{entry['file']}"))
        got = state.parameters[entry["name"]].data.ravel()[::entry["stride"]][:entry["count"]]
        assert relative_difference(got, ref) <= FINAL_PARAMETER_RTOL.get(ort_model, 1e-5), entry["name"]


def test_eval_step(ort_model):
    """eval() runs the eval model: the loss of the current parameters, no
    gradient or parameter change; train() switches back."""
    state, module, optimizer = make_trainer(ort_model)
    inputs = user_inputs(module, ort_model)
    module.lazy_reset_grad()
    train_loss = module(*inputs)
    trainable = [name for name, p in state.parameters if p.requires_grad]
    grads = {name: state.parameters[name].grad.copy() for name in trainable}
    before = module.get_contiguous_parameters().numpy().copy()
    assert module.eval() is module and module.training is False
    eval_inputs = [read_inputs(ort_model)[name] for name in module.input_names()]
    eval_loss = module(*eval_inputs)
    assert eval_loss.shape == ()
    if ort_model != "cnn_bn":
        # No BatchNorm: the eval model computes the training loss (Dropout
        # ratio is 0 in gpt_tiny).
        assert relative_difference(eval_loss, train_loss) <= 1e-5
    else:
        assert np.isfinite(eval_loss)
    np.testing.assert_array_equal(module.get_contiguous_parameters().numpy(), before)
    for name in trainable:
        np.testing.assert_array_equal(state.parameters[name].grad, grads[name])
    assert module.train() is module and module.training is True


def test_gradients_accumulate_until_lazy_reset():
    """Two training steps without lazy_reset_grad add their gradients; after
    it, the next step overwrites them."""
    state, module, _ = make_trainer("gpt_tiny")
    inputs = user_inputs(module, "gpt_tiny")
    name = next(n for n, p in state.parameters if p.requires_grad)
    assert state.parameters[name].grad is None
    module.lazy_reset_grad()
    module(*inputs)
    once = state.parameters[name].grad.copy()
    module(*inputs)
    np.testing.assert_allclose(state.parameters[name].grad, 2 * once, rtol=1e-6, atol=1e-9)
    module.lazy_reset_grad()
    module(*inputs)
    np.testing.assert_allclose(state.parameters[name].grad, once, rtol=1e-6, atol=1e-9)


def test_optimizer_step_changes_trainable_parameters_only():
    """An optimizer step moves every trainable parameter with a gradient and
    leaves frozen ones (gpt_tiny's dropout_ratio, regression_frozen's fc1)."""
    for model, frozen in (("gpt_tiny", ["dropout_ratio"]), ("regression_frozen", ["fc1.weight", "fc1.bias"])):
        state, module, optimizer = make_trainer(model)
        for name in frozen:
            assert state.parameters[name].requires_grad is False
        before = {name: p.data.copy() for name, p in state.parameters}
        module.lazy_reset_grad()
        module(*user_inputs(module, model))
        optimizer.step()
        for name, p in state.parameters:
            if p.requires_grad:
                assert not np.array_equal(p.data, before[name]), f"{model}: {name} did not move"
            else:
                np.testing.assert_array_equal(p.data, before[name])


def test_learning_rate_get_set():
    """The optimizer model's learning rate until set_learning_rate changes it
    (float32, as ONNX Runtime stores it)."""
    _, module, optimizer = make_trainer("gpt_tiny")
    assert optimizer.get_learning_rate() == pytest.approx(0.001, rel=1e-7)
    optimizer.set_learning_rate(0.5)
    assert optimizer.get_learning_rate() == 0.5
    optimizer.set_learning_rate(0.1)
    assert optimizer.get_learning_rate() == float(np.float32(0.1))


def _scheduled_rates(warmup, total, initial, updates):
    """The learning rates a LinearLRScheduler sets: after construction, after
    two scheduler steps without an update, then after each update."""
    _, module, optimizer = make_trainer("regression_frozen")
    inputs = user_inputs(module, "regression_frozen")
    scheduler = api.LinearLRScheduler(optimizer, warmup, total, initial)
    rates = [optimizer.get_learning_rate()]
    for _ in range(2):
        scheduler.step()
        rates.append(optimizer.get_learning_rate())
    for _ in range(updates):
        module.lazy_reset_grad()
        module(*inputs)
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.get_learning_rate())
    return rates


# ONNX Runtime 1.19.2's values for the same calls (onnxruntime-training
# 1.19.2, CPU, recorded with the loop of _scheduled_rates): its Python class
# passes the two counts to the C++ scheduler swapped (api.LinearLRScheduler's
# docstring), and the step is the optimizer's update count.
ORT_SCHEDULES = [
    ((3, 10, 2.0), [0.0, 0.0, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 0.0, 0.0]),
    ((0, 4, 2.0), [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    ((5, 2, 2.0), [0.0, 0.0, 0.0, 1.0, 2.0, 1.3333, 0.6667, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    ((2, 6, 1.0), [0.0, 0.0, 0.0, 0.1667, 0.3333, 0.5, 0.6667, 0.8333, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    ((5, 0, 2.0), [2.0, 2.0, 2.0, 1.6, 1.2, 0.8, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("args,expected", ORT_SCHEDULES)
def test_linear_lr_scheduler_matches_onnx_runtime(args, expected):
    rates = _scheduled_rates(*args, updates=len(expected) - 3)
    np.testing.assert_allclose(rates, expected, atol=5e-5)


def test_linear_lr_scheduler_rates_are_float32():
    """Each rate is float32(initial) * float32(step / warmup), as ONNX
    Runtime computes it (1/6 is 0.1666666716337204)."""
    rates = _scheduled_rates(2, 6, 1.0, updates=1)
    assert rates[-1] == float(np.float32(1.0) * (np.float32(1) / np.float32(6)))


def test_checkpoint_properties_round_trip(tmp_path):
    """int, float and str properties survive save and load; a missing one is
    a KeyError, a value of another type a TypeError."""
    state = api.CheckpointState.load_checkpoint(model_path("gpt_tiny", "checkpoint"))
    assert len(state.properties) == 0
    state.properties["epoch"] = 3
    state.properties["best_loss"] = 1.5
    state.properties["run"] = "gmopt"
    state.properties["epoch"] = 4
    assert "epoch" in state.properties and "nope" not in state.properties
    with pytest.raises(KeyError, match="Property nope not found"):
        state.properties["nope"]
    with pytest.raises(TypeError):
        state.properties["bad"] = [1, 2]
    # ONNX Runtime iterates properties (and parameters) by name.
    assert [name for name, _ in state.properties] == ["best_loss", "epoch", "run"]
    names = [name for name, _ in state.parameters]
    assert names == sorted(names) and names[0] == "dropout_ratio"
    path = tmp_path / "checkpoint"
    api.CheckpointState.save_checkpoint(state, path)
    loaded = api.CheckpointState.load_checkpoint(path)
    values = dict(loaded.properties)
    assert values == {"epoch": 4, "best_loss": 1.5, "run": "gmopt"}
    assert [type(values[k]) for k in ("epoch", "best_loss", "run")] == [int, float, str]
    assert len(loaded.parameters) == len(state.parameters)
    for name, p in state.parameters:
        np.testing.assert_array_equal(loaded.parameters[name].data, p.data)
        assert loaded.parameters[name].requires_grad == p.requires_grad


def test_checkpoint_parameters(tmp_path):
    """CheckpointState.parameters: lookup, KeyError, writes, and the live
    values of the module once one is made from the state."""
    state = api.CheckpointState.load_checkpoint(model_path("regression_frozen", "checkpoint"))
    with pytest.raises(KeyError, match="Parameter nope not found"):
        state.parameters["nope"]
    names = [name for name, _ in state.parameters]
    assert set(names) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}
    value = state.parameters["fc2.bias"].data
    state.parameters["fc2.bias"] = value + 1
    np.testing.assert_array_equal(state.parameters["fc2.bias"].data, value + 1)
    module = api.Module(model_path("regression_frozen", "training_model.onnx"), state)
    optimizer = api.Optimizer(model_path("regression_frozen", "optimizer_model.onnx"), module)
    module.lazy_reset_grad()
    module(*user_inputs(module, "regression_frozen"))
    optimizer.step()
    assert not np.array_equal(state.parameters["fc2.bias"].data, value + 1)


def test_checkpoint_resume_continues_the_run(tmp_path):
    """Saving with the optimizer state after 3 steps and resuming in a fresh
    CheckpointState + Module + Optimizer gives the uninterrupted run's
    losses (ONNX Runtime's resume behaviour)."""
    model = "regression_frozen"
    state, module, optimizer = make_trainer(model, 0.001)
    inputs = user_inputs(module, model)

    def run(module, optimizer, steps):
        losses = []
        for _ in range(steps):
            module.lazy_reset_grad()
            losses.append(float(module(*inputs)))
            optimizer.step()
        return losses

    first = run(module, optimizer, 3)
    path = tmp_path / "resume.ckpt"
    api.CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    rest = run(module, optimizer, 5)
    _, module2, optimizer2 = make_trainer(model, 0.001, checkpoint=path)
    resumed = run(module2, optimizer2, 5)
    assert len(first) == 3
    np.testing.assert_allclose(resumed, rest, rtol=1e-6)


def test_resume_from_onnx_runtime_checkpoint():
    """ONNX Runtime's own checkpoint after 3 AdamW steps (with its optimizer
    state) resumes to its losses of steps 4-8 (testdata/ort_resume)."""
    import json
    base = model_path("ort_resume", "regression_frozen")
    with open(f"{base}/resume_losses.json") as f:
        reference = json.load(f)
    _, module, optimizer = make_trainer("regression_frozen", reference["learning_rate"],
                                        checkpoint=f"{base}/checkpoint")
    inputs = user_inputs(module, "regression_frozen")
    losses = []
    for _ in range(len(reference["losses"])):
        module.lazy_reset_grad()
        losses.append(float(module(*inputs)))
        optimizer.step()
    np.testing.assert_allclose(losses, reference["losses"], rtol=1e-6)
