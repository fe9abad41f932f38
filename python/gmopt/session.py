"""gmopt.Session: a compiled, planned training step, driven from Python.

A Session is gmopt_runtime's ``TrainingSession``: the training graph is
compiled once when the session opens (gmopt's default pipeline, or the
``pipeline`` or ``memory_limit`` given), the optimizer is part of the step,
and every step runs on the plan the compiler made. Inputs are NumPy arrays in
the order of :meth:`Session.input_names`; outputs come back as arrays.
"""

import os

from gmopt import _core
from gmopt._units import parse_bytes

_BACKENDS = ("auto", "cpu", "cuda")


def _open_options(backend, threads, seed, dims, pipeline, memory_limit, planned):
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(_BACKENDS)}, got {backend!r}")
    if pipeline is not None and memory_limit is not None:
        raise ValueError("give a pipeline or a memory_limit, not both")
    options = {
        "backend": backend,
        "threads": int(threads),
        "seed": int(seed),
        "planned": bool(planned),
        "dims": {str(k): int(v) for k, v in (dims or {}).items()},
        "pipeline": pipeline or "",
        "memory_limit_bytes": None if memory_limit is None else parse_bytes(memory_limit),
    }
    return options


class Session:
    """Trains one model.

    Args:
        training_model: ``training_model.onnx`` (ONNX Runtime's artifact) or a
            ``.gm`` file from ``gmopt-compile``.
        checkpoint: a checkpoint path or a ``gmopt._core.CheckpointState``
            holding the parameters (ONNX Runtime's ``checkpoint``); without
            one the model's own values are used (seeded initial values for
            parameters it gives none), and no eval model can be opened.
        eval_model: ``eval_model.onnx``, for :meth:`eval_step` and
            :meth:`export_model_for_inferencing`.
        optimizer_model: ``optimizer_model.onnx``; its optimizer becomes part
            of the training step (needed by :meth:`optimizer_step`).
        backend: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        threads: CPU worker threads (0: every core).
        seed: seed of random ops such as dropout.
        dims: values of symbolic dimensions, e.g. ``{"batch": 8}``; those left
            open are bound from the first step's inputs.
        pipeline: a gmopt pass pipeline (gmopt-opt's text form) instead of the
            default one.
        memory_limit: a budget (bytes, or a string like ``"512MiB"``): the
            compiler picks the fastest configuration whose planned peak fits.
        planned: run on the planned arena (True) or allocate each tensor at
            its definition (False; for comparisons).
    """

    def __init__(self, training_model, checkpoint=None, eval_model=None, optimizer_model=None, *,
                 backend="cpu", threads=0, seed=0, dims=None, pipeline=None, memory_limit=None,
                 planned=True):
        options = _open_options(backend, threads, seed, dims, pipeline, memory_limit, planned)
        if isinstance(checkpoint, (str, os.PathLike)):
            checkpoint = _core.CheckpointState.load(os.fspath(checkpoint))
        elif checkpoint is not None and not isinstance(checkpoint, _core.CheckpointState):
            raise TypeError(f"checkpoint: expected a path or a CheckpointState, got {type(checkpoint).__name__}")
        if checkpoint is None and eval_model is not None:
            raise ValueError("eval_model: opening an eval model takes a checkpoint (the parameters)")
        if checkpoint is None:
            # The model's own values (seeded ones where it has none); an
            # optimizer model is merged after.
            self._session = _core.TrainingSession.open(os.fspath(training_model), **options)
            if optimizer_model is not None:
                self._session.add_optimizer(os.fspath(optimizer_model))
        else:
            self._session = _core.TrainingSession.open(
                os.fspath(training_model),
                "" if eval_model is None else os.fspath(eval_model),
                "" if optimizer_model is None else os.fspath(optimizer_model),
                checkpoint, **options)

    @classmethod
    def from_artifacts(cls, directory, **kwargs):
        """Opens the artifacts ONNX Runtime's ``generate_artifacts`` writes in
        ``directory``: ``training_model.onnx`` and, where present,
        ``eval_model.onnx``, ``optimizer_model.onnx`` and ``checkpoint``."""
        directory = os.fspath(directory)

        def present(name):
            path = os.path.join(directory, name)
            return path if os.path.exists(path) else None

        return cls(os.path.join(directory, "training_model.onnx"), present("checkpoint"),
                   present("eval_model.onnx"), present("optimizer_model.onnx"), **kwargs)

    # Steps ------------------------------------------------------------------
    def train_step(self, *inputs, update=False):
        """Forward and backward on ``inputs``; returns the training graph's
        outputs (the loss first) as a list of arrays. Gradients add up until
        :meth:`lazy_reset_grad`. With ``update=True`` the optimizer runs at
        the end of the same step (:meth:`optimizer_step` without a second
        pass)."""
        if update:
            return self._session.train_step_and_update(list(inputs))
        return self._session.train_step(list(inputs))

    def eval_step(self, *inputs):
        """The eval model's outputs on ``inputs``; no gradient changes."""
        return self._session.eval_step(list(inputs))

    def lazy_reset_grad(self):
        """Makes the next training step overwrite the gradients."""
        self._session.lazy_reset_grad()

    def optimizer_step(self):
        """Applies the optimizer to the accumulated gradients."""
        self._session.optimizer_step()

    @property
    def learning_rate(self):
        """The learning rate of the next optimizer step."""
        return self._session.get_learning_rate()

    @learning_rate.setter
    def learning_rate(self, value):
        self._session.set_learning_rate(float(value))

    @property
    def step_count(self):
        """Optimizer updates done so far."""
        return self._session.step_count()

    # Names and parameters ------------------------------------------------------
    def input_names(self, training=True):
        """What :meth:`train_step` (or, with ``training=False``,
        :meth:`eval_step`) takes, in order."""
        return self._session.input_names(training)

    def output_names(self, training=True):
        """What :meth:`train_step` (or :meth:`eval_step`) returns, in order."""
        return self._session.output_names(training)

    def parameter_names(self, trainable_only=False):
        """Parameters in the training graph's input order."""
        return self._session.parameter_names(trainable_only)

    def get_parameter(self, name):
        """A copy of parameter ``name``'s current value."""
        return self._session.get_parameter(name)

    def set_parameter(self, name, value):
        """Overwrites parameter ``name`` (same dtype and shape)."""
        self._session.set_parameter(name, value)

    def get_gradient(self, name):
        """The gradient accumulated for trainable parameter ``name``."""
        return self._session.get_gradient(name)

    @property
    def parameters(self):
        """Every parameter's current value, by name (copies)."""
        return {name: self._session.get_parameter(name) for name in self.parameter_names()}

    # Checkpoints, export, memory -----------------------------------------------
    def save_checkpoint(self, path, include_optimizer_state=False):
        """Writes an ONNX Runtime checkpoint (parameters, properties and, if
        asked, the optimizer state)."""
        self._session.save_checkpoint(os.fspath(path), include_optimizer_state)

    def load_checkpoint(self, path):
        """Takes parameters, optimizer state and properties from a checkpoint."""
        self._session.load_checkpoint(os.fspath(path))

    def export_model_for_inferencing(self, path, graph_output_names):
        """Writes the eval model with the current parameters and the given
        outputs as an inference ONNX model."""
        self._session.export_model_for_inferencing(os.fspath(path), list(graph_output_names))

    def memory(self):
        """The training step's memory: ``planned`` (the plan's figures) and
        ``measured`` (the backend's high-water mark so far), each a dict of
        bytes, categories by name, and the ``pipeline`` that compiled it."""
        return self._session.memory()

    @property
    def checkpoint_state(self):
        """The state (parameters, properties) this session is attached to."""
        return self._session.checkpoint_state()
