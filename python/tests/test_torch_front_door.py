"""gmopt.torch, the PyTorch front door (issue 37 item 4): gradients against
PyTorch autograd on three models, parameter names, errors, memory limits and
plan_memory. Every test but the first needs PyTorch and skips without it
(CI's interpreter has none; testdata/.venv has torch 2.4.1):

    PYTHONPATH=python:build/python testdata/.venv/bin/python -m pytest -q python/tests/test_torch_front_door.py
"""

import importlib.util
import os
import sys

import numpy as np
import pytest

import gmopt
import gmopt.torch as gmopt_torch

try:
    import torch
except ImportError:
    torch = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
# fp32 gradients against autograd's: max|gmopt - torch| <= RTOL * max|torch|
# per tensor (tensors whose reference is zero up to rounding: <= ATOL).
RTOL = 1e-5
ATOL = 1e-6


def load_bench():
    """bench/torch_front_door.py, which defines the three models."""
    path = os.path.join(REPO, "bench", "torch_front_door.py")
    spec = importlib.util.spec_from_file_location("torch_front_door", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def model(name):
    bench = load_bench()
    return bench, bench.make_models(torch)[name]


def assert_matches_autograd(bench, session, module, inputs, loss, targets):
    step = session.train_step(*inputs, *targets)
    ref_loss, ref_grads = bench.autograd_step(torch, module, inputs, loss, targets)
    assert step.loss == pytest.approx(ref_loss, rel=RTOL)
    assert sorted(step.gradients) == sorted(ref_grads)
    for name, ref in ref_grads.items():
        got = step.gradients[name]
        assert got is not None and got.shape == ref.shape and got.dtype == np.float32, name
        rel, diff = bench.relative_error(got, ref)
        if float(np.max(np.abs(ref))) < ATOL:
            assert diff <= ATOL, name
        else:
            assert rel <= RTOL, f"{name}: {rel:.3e}"
    return step


def test_missing_pytorch_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="gmopt.torch needs PyTorch"):
        gmopt_torch.compile_training(object(), ())


@needs_torch
@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
def test_first_step_gradients_equal_autograd(name):
    bench, (module, inputs, loss, targets) = model(name)
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    assert session.pipeline.startswith("canonicalize,autodiff{loss=output,trainable=")
    assert ",tie-weights,canonicalize{" in session.pipeline and ",plan-buffers{" in session.pipeline
    assert session.plan.peak_bytes > 0
    assert_matches_autograd(bench, session, module, inputs, loss, targets)
    # A second step overwrites the gradients (as after zero_grad); with
    # accumulate they add up.
    again = session.train_step(*inputs, *targets)
    twice = session.train_step(*inputs, *targets, accumulate=True)
    for param, grad in again.gradients.items():
        np.testing.assert_allclose(twice.gradients[param], 2 * grad, rtol=1e-6, atol=1e-7)


@needs_torch
def test_parameter_names_are_the_modules():
    bench, (module, inputs, loss, targets) = model("gpt")
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    names = [name for name, _ in module.named_parameters()]
    assert sorted(session.parameter_names) == sorted(names)
    values = session.parameters()
    for name, param in module.named_parameters():
        np.testing.assert_array_equal(values[name], param.detach().numpy())
    assert session.input_names == ["input_0", "target_0"]


@needs_torch
def test_parameters_copy_both_ways_and_torch_optimizer_steps():
    """Two SGD steps: gmopt's gradients into .grad, torch.optim's update,
    the new weights back into the session: the second step's gradients are
    autograd's at the updated weights."""
    bench, (module, inputs, loss, targets) = model("mlp")
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    reference = load_bench().make_models(torch)["mlp"][0]
    reference.load_state_dict(module.state_dict())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    session.train_step(*inputs, *targets)
    session.copy_to(module, gradients=True)
    optimizer.step()
    session.load_from(module)
    # The reference trains with autograd alone.
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    bench.autograd_step(torch, reference, inputs, loss, targets)
    ref_optimizer.step()
    for name, param in reference.named_parameters():
        np.testing.assert_allclose(session.parameters()[name], param.detach().numpy(), rtol=1e-5, atol=1e-7)
    assert_matches_autograd(bench, session, reference, inputs, loss, targets)
    with pytest.raises(KeyError, match="not a trained parameter"):
        session.set_parameter("no.such.weight", np.zeros(3, np.float32))


@needs_torch
def test_tied_weights_get_the_sum_of_their_gradients():
    """An LM head tied to the embedding is one parameter in
    named_parameters(), and one initializer read twice in the export."""
    bench, (module, inputs, loss, targets) = model("gpt")
    module.head.weight = module.wte.weight
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    assert "head.weight" not in session.parameter_names
    assert_matches_autograd(bench, session, module, inputs, loss, targets)


@needs_torch
@pytest.mark.parametrize("kind, tolerance", [("sgd", 1e-5), ("adamw", 1e-4)])
def test_in_graph_optimizer_follows_torch_optim(kind, tolerance):
    """A torch.optim.SGD or AdamW handed to compile_training becomes the
    step's in-graph optimizer (its settings and learning rate): three
    updates leave the parameters where torch.optim's three leave them.
    AdamW divides each gradient by its own running magnitude, which turns
    fp32 rounding in the smallest gradients into visible update
    differences: its bound is 1e-4 (the MLP, whose gradients have no
    cancellation; a GPT's key bias, with gradients of 1e-10 that are pure
    rounding, moves by the sign of the noise)."""
    bench, (module, inputs, loss, targets) = model("mlp")
    reference = load_bench().make_models(torch)["mlp"][0]
    reference.load_state_dict(module.state_dict())
    if kind == "sgd":
        make = lambda params: torch.optim.SGD(params, lr=0.1)  # noqa: E731
    else:
        make = lambda params: torch.optim.AdamW(params, lr=1e-2, betas=(0.8, 0.99),  # noqa: E731
                                                eps=1e-7, weight_decay=0.1)
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets,
                                           optimizer=make(module.parameters()))
    assert session.has_optimizer and session.learning_rate == pytest.approx(0.1 if kind == "sgd" else 1e-2)
    assert (session.plan.persistent_bytes["optimizer_state"] > 0) == (kind == "adamw")
    ref_optimizer = make(reference.parameters())
    for step in range(3):
        got = session.train_step(*inputs, *targets, update=True)
        ref_loss, _ = bench.autograd_step(torch, reference, inputs, loss, targets)
        ref_optimizer.step()
        assert got.loss == pytest.approx(ref_loss, rel=tolerance), step
    assert session.step_count == 3
    for name, param in reference.named_parameters():
        rel, _ = bench.relative_error(session.parameters()[name], param.detach().numpy())
        assert rel <= tolerance, f"{name}: {rel:.3e}"
    plain = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    with pytest.raises(ValueError, match="compiled without an optimizer"):
        plain.train_step(*inputs, *targets, update=True)


@needs_torch
def test_frozen_and_unused_parameters():
    """requires_grad=False parameters are not trained; a parameter the
    forward never reads gets None, as its .grad stays None in PyTorch."""
    bench, (module, inputs, loss, targets) = model("mlp")
    module.fc1.weight.requires_grad_(False)
    module.unused = torch.nn.Linear(3, 3)
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    step = session.train_step(*inputs, *targets)
    assert "fc1.weight" not in step.gradients
    assert step.gradients["unused.weight"] is None and step.gradients["unused.bias"] is None
    ref_loss, ref_grads = bench.autograd_step(torch, module, inputs, loss, targets)
    assert ref_grads["unused.weight"] is None
    for name in ("fc1.bias", "fc2.weight", "out.weight"):
        rel, _ = bench.relative_error(step.gradients[name], ref_grads[name])
        assert rel <= RTOL, name


@needs_torch
def test_module_returning_its_loss_and_named_loss():
    bench, (module, inputs, _, targets) = model("mlp")

    class WithLoss(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.inner(x), y)

    wrapped = WithLoss(module)
    session = gmopt_torch.compile_training(wrapped, inputs + targets)
    step = session.train_step(*inputs, *targets)
    named = gmopt_torch.compile_training(module, inputs, "cross_entropy", targets=targets)
    step2 = named.train_step(*inputs, *targets)
    assert step.loss == pytest.approx(step2.loss, rel=1e-6)
    for name, grad in step2.gradients.items():
        np.testing.assert_allclose(step.gradients["inner." + name], grad, rtol=1e-6, atol=1e-8)


@needs_torch
def test_batchnorm_buffers_are_left_as_they_were():
    _, (module, inputs, loss, targets) = model("cnn")
    before = {name: b.clone() for name, b in module.named_buffers()}
    training = module.training
    module.eval()
    gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    assert not module.training
    module.train(training)
    for name, buffer in module.named_buffers():
        assert torch.equal(buffer, before[name]), name


@needs_torch
def test_unsupported_inputs_are_clear_errors():
    _, (module, inputs, loss, targets) = model("mlp")
    with pytest.raises(TypeError, match=r"example_inputs\[1\]: expected a torch.Tensor, got int"):
        gmopt_torch.compile_training(module, (inputs[0], 3), loss, targets=targets)
    with pytest.raises(TypeError, match="example_inputs: keyword inputs are not exported"):
        gmopt_torch.compile_training(module, {"x": inputs[0]}, loss, targets=targets)
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got function"):
        gmopt_torch.compile_training(lambda x: x, inputs, loss, targets=targets)
    with pytest.raises(ValueError, match="must return a floating-point scalar"):
        gmopt_torch.compile_training(module, inputs)  # logits, no loss
    with pytest.raises(ValueError, match="loss: expected None, a callable"):
        gmopt_torch.compile_training(module, inputs, "hinge", targets=targets)
    with pytest.raises(ValueError, match="optimizer: expected 'sgd', 'adamw'"):
        gmopt_torch.compile_training(module, inputs, loss, targets=targets, optimizer="lamb")
    with pytest.raises(ValueError, match="Adam is neither"):
        gmopt_torch.compile_training(module, inputs, loss, targets=targets,
                                     optimizer=torch.optim.Adam(module.parameters()))
    with pytest.raises(ValueError, match="momentum, weight_decay, nesterov and maximize must be off"):
        gmopt_torch.compile_training(module, inputs, loss, targets=targets,
                                     optimizer=torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(gmopt.Error, match="adam_mode"):
        gmopt_torch.compile_training(module, inputs, loss, targets=targets,
                                     optimizer={"kind": "adamw", "adam_mode": 3})
    with pytest.raises(ValueError, match="batch_dim=0: every input and target needs the same extent"):
        gmopt_torch.compile_training(module, inputs, loss, targets=torch.zeros(3, dtype=torch.long))
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    with pytest.raises(TypeError, match="train_step takes 2 tensors"):
        session.train_step(*inputs)
    with pytest.raises(TypeError, match="target_0: expected a torch.Tensor or a NumPy array, got list"):
        session.train_step(inputs[0], [1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"input_0: the step was compiled for shape \(4, 32\), got \(3, 32\)"):
        session.train_step(inputs[0][:3], targets[0][:3])


@needs_torch
def test_model_torch_cannot_export_is_a_clear_error():
    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return torch.linalg.svdvals(x @ self.weight).sum()

    with pytest.raises(ValueError, match="torch.onnx.export could not export Spectral"):
        gmopt_torch.compile_training(Spectral(), torch.randn(2, 4, 4))


@needs_torch
def test_model_gmopt_cannot_train_is_a_clear_error():
    class Scan(torch.nn.Module):
        def __init__(self, op):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 4))
            self.op = op

        def forward(self, x):
            return self.op(x @ self.weight).sum()

    # An op gmopt does not know, and a loss with no gradient path.
    with pytest.raises(gmopt.Error, match=r"^Scan: gmopt cannot compile its training step: "
                                          r"unknown op 'CumSum'"):
        gmopt_torch.compile_training(Scan(lambda z: torch.cumsum(z, 1)), torch.randn(2, 4))
    with pytest.raises(gmopt.Error, match="no trainable parameter has a gradient"):
        gmopt_torch.compile_training(Scan(torch.round), torch.randn(2, 4))


@needs_torch
def test_memory_limit_picks_recompute_that_fits():
    bench, (module, inputs, loss, targets) = model("gpt")
    free = gmopt_torch.compile_training(module, inputs, loss, targets=targets)
    limit = int(free.plan.peak_bytes * 0.9)
    session = gmopt_torch.compile_training(module, inputs, loss, targets=targets, memory_limit=limit)
    assert "recompute{mode=budget" in session.pipeline
    assert session.plan.peak_bytes <= limit
    assert session.memory()["planned"]["peak_bytes"] == session.plan.peak_bytes
    # Recompute changes where values come from, not the gradients.
    assert_matches_autograd(bench, session, module, inputs, loss, targets)
    roomy = gmopt_torch.compile_training(module, inputs, loss, targets=targets,
                                         memory_limit=free.plan.peak_bytes)
    assert "recompute{mode=selective," in roomy.pipeline
    with pytest.raises(gmopt.Error, match="cannot be met"):
        gmopt_torch.compile_training(module, inputs, loss, targets=targets, memory_limit="64KiB")


@needs_torch
def test_plan_memory_peaks_and_largest_batch():
    _, (module, inputs, loss, targets) = model("gpt")
    sizes = [1, 2, 4, 8, 16]
    plan = gmopt_torch.plan_memory(module, inputs, sizes, loss, targets=targets)
    assert sorted(plan.peaks) == sizes and plan.max_batch is None
    peaks = [plan.peaks[b] for b in sizes]
    assert all(a < b for a, b in zip(peaks, peaks[1:])), peaks
    for batch in sizes:
        assert plan.results[batch].dims == {"batch": batch}
        assert plan.results[batch].peak_bytes == plan.peaks[batch]
    # The default pipeline's plan at batch 8 fits a limit of its own peak:
    # the answer is at least 8, its plan fits, and one more does not.
    limit = plan.peaks[8]
    fit = gmopt_torch.plan_memory(module, inputs, [8], loss, targets=targets, limit=limit)
    assert fit.limit == limit and fit.max_batch >= 8
    assert fit.max_batch_peak <= limit
    export = gmopt_torch._export(module, inputs, loss, targets, 0)
    try:
        # One more: the default plan is over the limit and recompute's
        # budget cannot bring it under.
        with pytest.raises(gmopt.Error, match="cannot be met"):
            gmopt_torch._fitting_step(export, fit.max_batch + 1, limit, None, None, "cpu")
        _, _, at_max = gmopt_torch._fitting_step(export, fit.max_batch, limit, None, None, "cpu")
        assert at_max.peak_bytes == fit.max_batch_peak
    finally:
        export.directory.cleanup()
    assert f"largest batch that fits {limit} B" in fit.table() and f": {fit.max_batch} " in fit.table()
    # Nothing fits a limit below the parameters' own bytes.
    none = gmopt_torch.plan_memory(module, inputs, [1], loss, targets=targets, limit="16KiB")
    assert none.max_batch == 0
    with pytest.raises(ValueError, match="batch_sizes: expected positive sizes"):
        gmopt_torch.plan_memory(module, inputs, [0, 2], loss, targets=targets)
