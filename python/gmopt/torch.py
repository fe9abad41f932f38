"""gmopt.torch: train a PyTorch module with gmopt's compiler, from PyTorch.

The front door for a ``torch.nn.Module``:

* :func:`compile_training` exports the module and its loss as one forward
  model (``torch.onnx.export``: opset 17, training mode, parameters as
  initializers under their ``named_parameters()`` names, constant folding off
  so parameters stay parameters), builds the training step with gmopt's own
  autodiff (the ``autodiff`` pass, what ``gmopt-compile --train`` runs) and,
  if asked, an in-graph SGD or AdamW (``_core.compile_forward``), compiles it
  with gmopt's default pipeline (or a pipeline, or the least recompute that
  fits a ``memory_limit``) and returns a
  :class:`TorchTrainingSession` whose :meth:`~TorchTrainingSession.train_step`
  gives the loss and every parameter's gradient by its PyTorch name;
* :func:`plan_memory` answers "what planned peak at each batch size, and the
  largest batch that fits a limit" from gmopt's plans, without running a step.

PyTorch is imported when these are called, never when ``gmopt`` is: gmopt
itself does not need it. See docs/pytorch.md.
"""

import dataclasses
import io
import os
import tempfile
import warnings

import numpy as np

from gmopt import _core
from gmopt._units import parse_bytes
from gmopt.compiler import CompileResult
from gmopt.compiler import compile as _compile_plan
from gmopt.session import Session

# After the training step is built: gmopt's default pipeline
# (passes/DefaultPipeline.h, which _core.compile_forward runs for ""), and
# the memory-limit lever, that pipeline with its recompute pass in budget mode.
_DEFAULT_PIPELINE = ""
_SELECTIVE = "recompute{mode=selective}"


def _budget_pipeline(limit):
    """The default pipeline with the least recompute whose plan fits
    ``limit`` bytes in place of selective recompute."""
    default = _core.default_pipeline
    budget = f"recompute{{mode=budget,memory-limit={int(limit)}}}"
    if _SELECTIVE in default:
        return default.replace(_SELECTIVE, budget)
    # A default without selective recompute: the budget goes before the schedule.
    return default.replace("schedule", budget + ",schedule", 1)


# The opset torch exports at: the newest gmopt's importer reads (docs/opsets.md).
_OPSET = 17
# What the wrapper is called inside the exported module: a parameter `w` of
# the user's module is the initializer `module.w`.
_PREFIX = "module."
# torch.nn.functional losses by the names `loss=` takes.
_NAMED_LOSSES = {
    "cross_entropy": "cross_entropy",
    "mse": "mse_loss",
    "l1": "l1_loss",
    "bce_with_logits": "binary_cross_entropy_with_logits",
    "nll": "nll_loss",
}


def _import_torch():
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "gmopt.torch needs PyTorch, which is not installed in this interpreter "
            f"({err}); install torch (gmopt itself does not need it)") from err
    return torch


def _as_tuple(torch, value, what):
    """``value`` as a tuple of tensors; a TypeError naming ``what`` and the
    position of anything else."""
    if value is None:
        return ()
    if isinstance(value, dict):
        raise TypeError(f"{what}: keyword inputs are not exported; pass the tensors positionally "
                        "(a wrapper module can name them)")
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    for index, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"{what}[{index}]: expected a torch.Tensor, got {type(item).__name__} "
                            "(gmopt.torch exports tensor inputs only: pass other arguments "
                            "through a wrapper module's attributes)")
        if item.dim() == 0:
            raise ValueError(f"{what}[{index}]: a 0-dimensional tensor has no batch dimension; "
                             "give it at least one dimension")
    return items


def _loss_function(torch, loss):
    if loss is None or callable(loss):
        return loss
    if isinstance(loss, str) and loss in _NAMED_LOSSES:
        return getattr(torch.nn.functional, _NAMED_LOSSES[loss])
    raise ValueError(f"loss: expected None, a callable (outputs, *targets) -> scalar or one of "
                     f"{', '.join(sorted(_NAMED_LOSSES))}; got {loss!r}")


@dataclasses.dataclass
class _Export:
    """One exported forward model and what maps it back to PyTorch."""

    directory: tempfile.TemporaryDirectory
    path: str
    input_names: list
    # ONNX initializer name -> torch named_parameters() name, trainable only.
    onnx_to_torch: dict
    # torch parameters the exported graph does not read (no gradient).
    unused: list
    batch_dim: object
    batch: int
    # The examples' shapes, in input_names order: the step's.
    shapes: list = None
    # .gm files compiled so far (their names).
    compiled: int = 0

    def autodiff_pipeline(self):
        """The passes that build the training step, before the pipeline:
        what gmopt-compile --train runs (canonicalize, autodiff, tie-weights)."""
        trainable = ",".join(self.onnx_to_torch)
        data = ",".join(self.input_names)
        return (f'canonicalize,autodiff{{loss=output,trainable="{trainable}",data="{data}"}},'
                "tie-weights")

    def dims(self, batch=None):
        return {} if self.batch_dim is None else {"batch": int(self.batch if batch is None else batch)}


def _restore(torch, module, training, buffers):
    module.train(training)
    with torch.no_grad():
        for buffer, saved in buffers:
            buffer.copy_(saved)


def _export(module, example_inputs, loss, targets, batch_dim):
    torch = _import_torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    inputs = _as_tuple(torch, example_inputs, "example_inputs")
    if not inputs:
        raise ValueError("example_inputs: the module takes at least one tensor")
    targets = _as_tuple(torch, targets, "targets")
    loss_fn = _loss_function(torch, loss)
    if loss_fn is None and targets:
        raise ValueError("targets are the loss's inputs: give a loss too")
    if batch_dim is not None:
        batch_dim = int(batch_dim)
        sizes = {tuple(t.shape)[batch_dim] if t.dim() > batch_dim else None for t in inputs + targets}
        if None in sizes or len(sizes) != 1:
            raise ValueError(f"batch_dim={batch_dim}: every input and target needs the same extent there "
                             f"(shapes {[tuple(t.shape) for t in inputs + targets]}); "
                             "pass batch_dim=None for fixed shapes")
        batch = sizes.pop()
    else:
        batch = 0
    count = len(inputs)

    class LossModule(torch.nn.Module):
        """The module and its loss as one forward whose output is the loss."""

        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, *args):
            outputs = self.module(*args[:count])
            return outputs if loss_fn is None else loss_fn(outputs, *args[count:])

    wrapper = LossModule()
    arguments = inputs + targets
    was_training = module.training
    # Running the forward in training mode (the check below, the export's
    # trace) moves BatchNorm's running statistics: they are put back.
    buffers = [(buffer, buffer.detach().clone()) for buffer in module.buffers()]
    try:
        module.train()
        with torch.no_grad():
            value = wrapper(*arguments)
    except Exception as err:
        raise ValueError(f"{type(module).__name__} does not run on example_inputs: "
                         f"{type(err).__name__}: {err}") from err
    finally:
        _restore(torch, module, was_training, buffers)
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
        what = (f"a tensor of shape {tuple(value.shape)} and type {value.dtype}"
                if isinstance(value, torch.Tensor) else type(value).__name__)
        raise ValueError(("the module" if loss_fn is None else "the loss") +
                         f" must return a floating-point scalar (the loss), got {what}")
    input_names = [f"input_{i}" for i in range(len(inputs))] + [f"target_{i}" for i in range(len(targets))]
    dynamic_axes = None if batch_dim is None else {name: {batch_dim: "batch"} for name in input_names}
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            # The trace's notes on Python values made constants and on
            # BatchNorm's dropped counter update (both expected here).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
            torch.onnx.export(wrapper, arguments, buffer, input_names=input_names, output_names=["loss"],
                              opset_version=_OPSET, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, export_params=True,
                              keep_initializers_as_inputs=False, dynamic_axes=dynamic_axes)
    except Exception as err:
        raise ValueError(f"torch.onnx.export could not export {type(module).__name__}: "
                         f"{type(err).__name__}: {err}") from err
    finally:
        _restore(torch, module, was_training, buffers)
    directory = tempfile.TemporaryDirectory(prefix="gmopt_torch_")
    path = os.path.join(directory.name, "forward.onnx")
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
    try:
        described = _core.inspect_onnx(path, {})
    except _core.Error as err:
        directory.cleanup()
        message = str(err).replace(path + ": ", "")
        raise _core.Error(f"{type(module).__name__}: gmopt cannot compile its training step: "
                          f"{message}") from None
    initializers = {entry["name"] for entry in described["initializers"]}
    onnx_to_torch, unused = {}, []
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue
        if _PREFIX + name in initializers:
            onnx_to_torch[_PREFIX + name] = name
        else:
            unused.append(name)
    if not onnx_to_torch:
        raise ValueError(f"{type(module).__name__}: no trainable parameter of the module is in the "
                         "exported graph (nothing to train)")
    return _Export(directory, path, input_names, onnx_to_torch, unused, batch_dim, batch,
                   [tuple(t.shape) for t in arguments])


def _budget_bytes(memory_limit):
    return None if memory_limit is None else parse_bytes(memory_limit)


def _optimizer_options(torch, optimizer):
    """``(options for _core.compile_forward, learning rate or None)`` of
    ``compile_training``'s ``optimizer``."""
    if optimizer is None:
        return None, None
    if isinstance(optimizer, str):
        if optimizer not in ("sgd", "adamw"):
            raise ValueError(f"optimizer: expected 'sgd', 'adamw', a dict, a torch.optim.SGD or "
                             f"AdamW, or None; got {optimizer!r}")
        return {"kind": optimizer}, None
    if isinstance(optimizer, dict):
        options = dict(optimizer)
        learning_rate = options.pop("lr", None)
        return options, learning_rate
    if isinstance(optimizer, torch.optim.Optimizer):
        kind = type(optimizer).__name__
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"optimizer: gmopt's in-graph {kind} has one parameter group, this one has "
                             f"{len(optimizer.param_groups)}")
        group = optimizer.param_groups[0]
        if type(optimizer) is torch.optim.SGD:
            if group.get("momentum") or group.get("weight_decay") or group.get("nesterov") or group.get("maximize"):
                raise ValueError("optimizer: gmopt's in-graph SGD is p -= lr * grad: momentum, "
                                 "weight_decay, nesterov and maximize must be off")
            return {"kind": "sgd"}, float(group["lr"])
        if type(optimizer) is torch.optim.AdamW:
            if group.get("amsgrad") or group.get("maximize"):
                raise ValueError("optimizer: gmopt's in-graph AdamW has no amsgrad or maximize")
            beta1, beta2 = group["betas"]
            return ({"kind": "adamw", "beta1": float(beta1), "beta2": float(beta2),
                     "epsilon": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                     "adam_mode": 0, "correct_bias": 1}, float(group["lr"]))
        raise ValueError(f"optimizer: gmopt builds SGD and AdamW in the graph; {kind} is neither")
    raise TypeError(f"optimizer: expected 'sgd', 'adamw', a dict or a torch.optim optimizer, got "
                    f"{type(optimizer).__name__}")


def _compile_error(module, export, err):
    """gmopt.Error ``err`` of compiling ``module``'s export, told in the
    module's terms (the export's temporary path left out)."""
    message = str(err).replace(export.path + ": ", "")
    return _core.Error(f"{type(module).__name__}: gmopt cannot compile its training step: {message}")


def _compile_step(export, batch, pipeline, optimizer, backend):
    """Builds the training step at ``batch`` (autodiff, then the optimizer
    when given), compiles it with ``pipeline`` and writes it as a .gm file in
    the export's folder: ``(path, the pipeline that ran)``."""
    export.compiled += 1
    path = os.path.join(export.directory.name, f"step_{export.compiled}.gm")
    ran = _core.compile_forward(export.path, export.dims(batch), export.autodiff_pipeline(), pipeline,
                                optimizer, path, backend)
    return path, ran


def _fitting_step(export, batch, limit, pipeline, optimizer, backend):
    """The step at ``batch`` compiled with ``pipeline`` (the default one
    when None) if its planned peak fits ``limit`` (or there is no limit),
    else with the least recompute that fits (the recompute pass's budget
    mode): ``(.gm path, pipeline, CompileResult)``. Raises gmopt.Error when
    nothing fits."""
    path, ran = _compile_step(export, batch, pipeline or _DEFAULT_PIPELINE, optimizer, backend)
    plan = _compile_plan(path, backend=backend)
    if limit is None or plan.peak_bytes <= limit or pipeline is not None:
        return path, ran, plan
    path, ran = _compile_step(export, batch, _budget_pipeline(limit), optimizer, backend)
    return path, ran, _compile_plan(path, backend=backend)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One training step: the loss and the gradient of every trainable
    parameter, by its name in ``module.named_parameters()`` (NumPy arrays;
    None for a parameter the exported graph does not read, whose ``.grad``
    PyTorch leaves None too)."""

    loss: float
    gradients: dict


class TorchTrainingSession:
    """A PyTorch module's training step compiled by gmopt (see
    :func:`compile_training`). Parameters and gradients are named as in the
    module's ``named_parameters()``."""

    def __init__(self, export, compiled, pipeline, plan, optimizer, backend, threads, seed):
        self._export = export
        self.pipeline = pipeline
        self.plan = plan
        self.has_optimizer = optimizer is not None
        self._session = Session(compiled, backend=backend, threads=threads, seed=seed)
        if plan is None:
            self.plan = CompileResult.from_memory(self._session.memory(), dims=export.dims())
        self._torch_to_onnx = {v: k for k, v in export.onnx_to_torch.items()}

    @property
    def parameter_names(self):
        """The trained parameters, by their PyTorch names."""
        return list(self._torch_to_onnx) + list(self._export.unused)

    @property
    def input_names(self):
        """What :meth:`train_step` takes: ``input_K`` for the module's
        inputs, then ``target_K`` for the loss's."""
        return list(self._export.input_names)

    def _feed(self, args):
        torch = _import_torch()
        if len(args) != len(self._export.input_names):
            raise TypeError(f"train_step takes {len(self._export.input_names)} tensors "
                            f"({', '.join(self._export.input_names)}), got {len(args)}")
        arrays = []
        for name, shape, value in zip(self._export.input_names, self._export.shapes, args):
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().numpy()
            if not isinstance(value, np.ndarray):
                raise TypeError(f"{name}: expected a torch.Tensor or a NumPy array, got {type(value).__name__}")
            if tuple(value.shape) != shape:
                raise ValueError(f"{name}: the step was compiled for shape {shape}, got "
                                 f"{tuple(value.shape)} (compile_training again for another shape)")
            arrays.append(np.ascontiguousarray(value))
        return arrays

    def train_step(self, *inputs_and_targets, accumulate=False, update=False):
        """Forward and backward on the module's inputs followed by the
        loss's targets; returns a :class:`StepResult`. The gradients are this
        step's (as after ``zero_grad()``) unless ``accumulate`` adds them to
        the previous steps'. With ``update`` the in-graph optimizer updates
        the parameters at the end of the same step (:meth:`optimizer_step`
        without a second pass)."""
        arrays = self._feed(inputs_and_targets)
        if update and not self.has_optimizer:
            raise ValueError("update: the step was compiled without an optimizer "
                             "(compile_training(..., optimizer=...))")
        if not accumulate:
            self._session.lazy_reset_grad()
        outputs = self._session.train_step(*arrays, update=update)
        return StepResult(loss=float(np.asarray(outputs[0]).reshape(())), gradients=self.gradients())

    def gradients(self):
        """The accumulated gradients by PyTorch name (copies)."""
        result = {name: np.array(self._session.get_gradient(onnx))
                  for name, onnx in self._torch_to_onnx.items()}
        result.update({name: None for name in self._export.unused})
        return result

    def parameters(self):
        """The current parameter values by PyTorch name (copies)."""
        return {name: self._session.get_parameter(onnx) for name, onnx in self._torch_to_onnx.items()}

    def set_parameter(self, name, value):
        """Overwrites parameter ``name`` (a PyTorch name) with a tensor or
        array of its shape and type."""
        if name not in self._torch_to_onnx:
            raise KeyError(f"{name!r} is not a trained parameter of the module "
                           f"(those are {', '.join(self._torch_to_onnx)})")
        torch = _import_torch()
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        self._session.set_parameter(self._torch_to_onnx[name], np.ascontiguousarray(value))

    def load_from(self, module):
        """Copies ``module``'s current trained parameters into the session."""
        named = dict(module.named_parameters())
        for name in self._torch_to_onnx:
            if name not in named:
                raise KeyError(f"{type(module).__name__} has no parameter {name!r}")
            self.set_parameter(name, named[name])

    def copy_to(self, module, gradients=False):
        """Copies the session's parameters (and, with ``gradients``, its
        gradients into ``.grad``) into ``module``, by name."""
        torch = _import_torch()
        named = dict(module.named_parameters())
        grads = self.gradients() if gradients else {}
        with torch.no_grad():
            for name, value in self.parameters().items():
                named[name].copy_(torch.from_numpy(np.array(value)))
                if gradients and grads.get(name) is not None:
                    named[name].grad = torch.from_numpy(grads[name]).to(named[name].dtype)

    def optimizer_step(self):
        """Applies the in-graph optimizer to the accumulated gradients."""
        if not self.has_optimizer:
            raise ValueError("optimizer_step: the step was compiled without an optimizer "
                             "(compile_training(..., optimizer=...))")
        self._session.optimizer_step()

    @property
    def learning_rate(self):
        """The learning rate of the next update."""
        return self._session.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._session.learning_rate = value

    @property
    def step_count(self):
        """Updates done so far."""
        return self._session.step_count

    def memory(self):
        """The planned and measured memory of the step (gmopt.Session.memory)."""
        return self._session.memory()


def compile_training(module, example_inputs, loss=None, *, targets=None, memory_limit=None,
                     optimizer=None, pipeline=None, batch_dim=0, backend="cpu", threads=0, seed=0):
    """Compiles ``module``'s training step with gmopt and opens it.

    Args:
        module: a ``torch.nn.Module``.
        example_inputs: a tensor or a tuple of tensors, the module's
            positional inputs (their shapes are the step's).
        loss: None (the module returns its scalar loss), a callable
            ``(outputs, *targets) -> scalar`` exported with the module, or
            one of ``"cross_entropy"``, ``"mse"``, ``"l1"``,
            ``"bce_with_logits"``, ``"nll"`` (torch.nn.functional's).
        targets: a tensor or tuple of tensors, the loss's extra inputs
            (labels), fed after the module's inputs.
        memory_limit: a planned-peak budget (bytes or ``"512MiB"``): the
            default pipeline when it fits, else the least recompute whose
            plan fits (an error naming the smallest reachable peak if none).
        optimizer: None (gradients only: update with PyTorch), ``"sgd"``,
            ``"adamw"``, a dict (``kind`` and AdamW's ``beta1``, ``beta2``,
            ``epsilon``, ``weight_decay``, ``adam_mode``, ``correct_bias``,
            and ``lr``), or a ``torch.optim.SGD`` (plain) or
            ``torch.optim.AdamW`` whose one parameter group's settings and
            learning rate are taken: the optimizer becomes part of the
            compiled step (its state is in the plan).
        pipeline: gmopt's pass pipeline after the training step is built,
            instead of the default one.
        batch_dim: the inputs' batch axis (exported as the symbolic
            dimension ``batch``, bound to the example's extent), or None for
            fixed shapes.
        backend, threads, seed: as :class:`gmopt.Session`'s.

    Returns:
        a :class:`TorchTrainingSession`.
    """
    torch = _import_torch()
    if pipeline is not None and memory_limit is not None:
        raise ValueError("give a pipeline or a memory_limit, not both")
    limit = _budget_bytes(memory_limit)
    options, learning_rate = _optimizer_options(torch, optimizer)
    export = _export(module, example_inputs, loss, targets, batch_dim)
    try:
        if limit is None:
            compiled, ran = _compile_step(export, export.batch, pipeline or _DEFAULT_PIPELINE, options, backend)
            plan = None
        else:
            compiled, ran, plan = _fitting_step(export, export.batch, limit, pipeline, options, backend)
    except _core.Error as err:
        raise _compile_error(module, export, err) from None
    session = TorchTrainingSession(export, compiled, ran, plan, options, backend, threads, seed)
    if learning_rate is not None:
        session.learning_rate = learning_rate
    return session


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """:func:`plan_memory`'s answer.

    Attributes:
        peaks: planned peak bytes (gmopt's default pipeline, or the pipeline
            given) by batch size.
        results: the :class:`gmopt.CompileResult` of each batch size.
        limit: the limit asked about (bytes), or None.
        max_batch: the largest batch whose step fits ``limit`` (the
            default pipeline, else the least recompute that fits), or None
            without a limit; 0 when not even a batch of one fits.
        max_batch_peak: the planned peak at max_batch.
        max_batch_pipeline: the pipeline that fits at max_batch.
    """

    peaks: dict
    results: dict
    limit: int = None
    max_batch: int = None
    max_batch_peak: int = None
    max_batch_pipeline: str = None

    def table(self):
        """The answer as text lines."""
        lines = [f"{'batch':>8}  {'planned peak':>14}  {'MiB':>10}"]
        for batch, peak in sorted(self.peaks.items()):
            lines.append(f"{batch:>8}  {peak:>14}  {peak / 2**20:>10.2f}")
        if self.limit is not None:
            lines.append(f"largest batch that fits {self.limit} B ({self.limit / 2**30:.3f} GiB): "
                         f"{self.max_batch} (planned peak {self.max_batch_peak} B)")
        return "\n".join(lines)


def plan_memory(module, example_inputs, batch_sizes=(1, 2, 4, 8), loss=None, *, targets=None,
                limit=None, optimizer=None, pipeline=None, batch_dim=0, backend="cpu",
                max_batch_search=1 << 20):
    """The planned peak of ``module``'s training step at each batch size and,
    given ``limit`` (bytes or ``"24GiB"``), the largest batch that fits,
    from gmopt's plans without running a step.

    The module is exported once with a symbolic batch (``batch_dim`` of
    every input and target) and compiled at each size. The largest batch is
    found by doubling then bisection (planned peaks grow with the batch); a
    size fits when the default pipeline's plan fits, or else the recompute
    pass's budget mode reaches the limit (``pipeline`` given: that pipeline
    only). ``optimizer`` (as :func:`compile_training`'s) puts the
    optimizer and its state in the step planned. ``max_batch_search`` bounds
    the doubling.
    """
    if batch_dim is None:
        raise ValueError("plan_memory needs a batch dimension (batch_dim)")
    sizes = sorted({int(b) for b in batch_sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch_sizes: expected positive sizes, got {list(batch_sizes)}")
    limit = _budget_bytes(limit)
    options, _ = _optimizer_options(_import_torch(), optimizer)
    export = _export(module, example_inputs, loss, targets, batch_dim)
    try:
        results = {}
        for batch in sizes:
            path, _ = _compile_step(export, batch, pipeline or _DEFAULT_PIPELINE, options, backend)
            results[batch] = _compile_plan(path, backend=backend)
            os.remove(path)
        peaks = {b: r.peak_bytes for b, r in results.items()}
        if limit is None:
            return MemoryPlan(peaks=peaks, results=results)
        found = _largest_fitting_batch(export, limit, pipeline, options, backend, max_batch_search)
    except _core.Error as err:
        raise _compile_error(module, export, err) from None
    finally:
        export.directory.cleanup()
    if found is None:
        return MemoryPlan(peaks=peaks, results=results, limit=limit, max_batch=0)
    batch, chosen, plan = found
    return MemoryPlan(peaks=peaks, results=results, limit=limit, max_batch=batch,
                      max_batch_peak=plan.peak_bytes, max_batch_pipeline=chosen)


def _largest_fitting_batch(export, limit, pipeline, optimizer, backend, most):
    cache = {}

    def fits(batch):
        if batch not in cache:
            try:
                path, chosen, plan = _fitting_step(export, batch, limit, pipeline, optimizer, backend)
                os.remove(path)
                cache[batch] = (chosen, plan) if plan.peak_bytes <= limit else None
            except _core.Error as err:
                # The budget's "cannot meet the limit" is a no; anything else
                # is the user's to see.
                if "cannot be met" not in str(err):
                    raise
                cache[batch] = None
        return cache[batch]

    if not fits(1):
        return None
    low, high = 1, 2
    while high <= most and fits(high):
        low, high = high, high * 2
    if high > most:
        return (low,) + fits(low)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return (low,) + fits(low)
