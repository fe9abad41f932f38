"""ONNX Runtime's on-device training API (``onnxruntime.training.api``) on gmopt.

A script written for ONNX Runtime 1.19.2 runs on gmopt with its import changed
from ``onnxruntime.training.api`` to ``gmopt.training.api``: the same classes
(:class:`CheckpointState`, :class:`Module`, :class:`Optimizer`,
:class:`LinearLRScheduler`), with the same names, argument order and
behaviour, reading ONNX Runtime's own artifacts and checkpoint format. The
difference is underneath: when the :class:`Module` is created, gmopt compiles
the training graph with its default pipeline (or the ``memory_limit`` or
``pipeline`` given as keyword arguments) and every step runs on the buffer
plan it made.

Where ONNX Runtime hands out an ``OrtValue`` (``get_contiguous_parameters``),
gmopt returns a NumPy array that also answers ``.numpy()``;
``copy_buffer_to_parameters`` takes an array or anything with ``.numpy()``.
"""

import os

import numpy as np

from gmopt import _core
from gmopt.session import _open_options

__all__ = ["CheckpointState", "LinearLRScheduler", "Module", "Optimizer"]


class Parameter:
    """One model parameter: its name, value, gradient and whether it is
    trained. Returned by ``CheckpointState.parameters``."""

    def __init__(self, name, state):
        self._name = name
        self._state = state

    @property
    def name(self):
        """The name of the parameter."""
        return self._name

    @property
    def data(self):
        """A copy of the parameter's current value."""
        return self._state._state.get_parameter(self._name)

    @data.setter
    def data(self, value):
        self._state._state.update_parameter(self._name, _as_array(value))

    @property
    def grad(self):
        """The accumulated gradient, or None before the first training step
        (and for frozen parameters)."""
        module = self._state._module
        if module is None or not module._has_gradients or not self.requires_grad:
            return None
        return module._session.get_gradient(self._name)

    @property
    def requires_grad(self):
        """Whether the parameter is trained."""
        return self._state._state.is_trainable(self._name)

    def __repr__(self):
        return f"Parameter(name={self.name}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters of a :class:`CheckpointState`, by name (dict-like;
    iterating yields ``(name, Parameter)`` pairs in name order, as ONNX
    Runtime's does)."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        return Parameter(name, self._state)

    def __setitem__(self, name, value):
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        self._state._state.update_parameter(name, _as_array(value))

    def __contains__(self, name):
        return name in self._state._state.parameter_names()

    def __iter__(self):
        # By name, as ONNX Runtime's (a std::map) iterates.
        for name in sorted(self._state._state.parameter_names()):
            yield name, Parameter(name, self._state)

    def __len__(self):
        return len(self._state._state.parameter_names())

    def __repr__(self):
        return repr(sorted(self._state._state.parameter_names()))


class Properties:
    """User properties of a :class:`CheckpointState` (int, float or str
    values), saved with the checkpoint. Dict-like; iterating yields
    ``(name, value)`` pairs in name order, as ONNX Runtime's does."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        if name not in self:
            raise KeyError(f"Property {name} not found.")
        return self._state._state.get_property(name)

    def __setitem__(self, name, value):
        self._state._state.add_property(name, value)

    def __contains__(self, name):
        return self._state._state.has_property(name)

    def __iter__(self):
        # By name, as ONNX Runtime iterates them.
        for name in sorted(self._state._state.property_names()):
            yield name, self._state._state.get_property(name)

    def __len__(self):
        return len(self._state._state.property_names())

    def __repr__(self):
        return repr(sorted(self._state._state.property_names()))


class CheckpointState:
    """The state of a training run: parameters, optimizer state and user
    properties. Create it with :meth:`load_checkpoint`.

    Once a :class:`Module` is made from the state, the state's parameters are
    the module's live parameters, and :meth:`save_checkpoint` writes their
    current values.
    """

    def __init__(self, state):
        if not isinstance(state, _core.CheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state
        self._module = None
        self._parameters = Parameters(self)
        self._properties = Properties(self)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri):
        """Loads an ONNX Runtime checkpoint (the file, or a directory
        holding ``checkpoint``)."""
        return cls(_core.CheckpointState.load(os.fspath(checkpoint_uri)))

    @classmethod
    def save_checkpoint(cls, state, checkpoint_uri, include_optimizer_state=False):
        """Writes ``state`` as an ONNX Runtime checkpoint; with
        ``include_optimizer_state`` the optimizer's moments and step count
        too."""
        state._state.save(os.fspath(checkpoint_uri), include_optimizer_state)

    @property
    def parameters(self):
        """The model parameters."""
        return self._parameters

    @property
    def properties(self):
        """The user properties."""
        return self._properties


def _as_array(value):
    """A NumPy array from an array or an OrtValue-like object (``.numpy()``)."""
    if isinstance(value, np.ndarray):
        return value
    to_numpy = getattr(value, "numpy", None)
    if callable(to_numpy):
        return to_numpy()
    return np.asarray(value)


class _ParameterBuffer(np.ndarray):
    """A NumPy array that also answers ONNX Runtime's ``OrtValue.numpy()``,
    so scripts that call ``get_contiguous_parameters().numpy()`` run
    unchanged."""

    def numpy(self):
        """The buffer as a plain ndarray (no copy)."""
        return self.view(np.ndarray)


def _backend_for_device(device):
    kind, _, index = str(device).partition(":")
    if index not in ("", "0"):
        raise ValueError(f"device {device!r}: gmopt runs on one device, cpu or cuda:0")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: expected 'cpu' or 'cuda'")
    return kind


def _threads_from_session_options(session_options):
    """ONNX Runtime's SessionOptions.intra_op_num_threads, when given."""
    threads = getattr(session_options, "intra_op_num_threads", 0) if session_options is not None else 0
    return threads if isinstance(threads, int) and threads > 0 else 0


class Module:
    """Trains a model from ONNX Runtime's training artifacts.

    Args:
        train_model_uri: the training model (``training_model.onnx``).
        state: the :class:`CheckpointState` holding the parameters.
        eval_model_uri: the eval model (``eval_model.onnx``), for
            :meth:`eval` calls and :meth:`export_model_for_inferencing`.
        device: ``"cpu"`` or ``"cuda"``.
        session_options: accepted for ONNX Runtime's signature; its
            ``intra_op_num_threads`` sets gmopt's CPU threads.

    gmopt's own keyword arguments: ``memory_limit`` (bytes or ``"512MiB"``:
    the compiler picks the fastest configuration that fits), ``pipeline`` (a
    gmopt pass pipeline instead of the default), ``dims`` (values of symbolic
    dimensions; unbound ones are taken from the first step's inputs),
    ``threads`` and ``seed``.

    Attributes:
        training: True in training mode, False in evaluation mode.
    """

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu",
                 session_options=None, *, memory_limit=None, pipeline=None, dims=None, threads=None,
                 seed=0):
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state: expected a CheckpointState, got {type(state).__name__}")
        self.training = True
        self._device = device
        self._state = state
        self._has_gradients = False
        if threads is None:
            threads = _threads_from_session_options(session_options)
        options = _open_options(_backend_for_device(device), threads, seed, dims, pipeline,
                                memory_limit, True)
        self._session = _core.TrainingSession.open(
            os.fspath(train_model_uri),
            "" if eval_model_uri is None else os.fspath(eval_model_uri), "", state._state,
            **options)
        state._module = self

    def __call__(self, *user_inputs):
        """Runs a training step (in training mode) or an eval step and
        returns the outputs: one array, or a tuple of them."""
        inputs = [_as_array(value) for value in user_inputs]
        if self.training:
            outputs = self._session.train_step(inputs)
            self._has_gradients = True
        else:
            outputs = self._session.eval_step(inputs)
        if len(outputs) == 1:
            return outputs[0]
        return tuple(outputs)

    def train(self, mode=True):
        """Sets training mode (``mode=False``: evaluation mode); returns self."""
        self.training = mode
        return self

    def eval(self):
        """Sets evaluation mode; returns self."""
        return self.train(False)

    def lazy_reset_grad(self):
        """Makes the next training step overwrite the gradients instead of
        adding to them."""
        return self._session.lazy_reset_grad()

    def get_contiguous_parameters(self, trainable_only=False):
        """Every parameter (or the trainable ones), flattened and concatenated
        in the training graph's input order: one float32 array (answering
        ``.numpy()`` as ONNX Runtime's OrtValue does)."""
        return self._session.get_contiguous_parameters(trainable_only).view(_ParameterBuffer)

    def get_parameters_size(self, trainable_only=True):
        """The number of elements :meth:`get_contiguous_parameters` holds."""
        return self._session.get_parameters_size(trainable_only)

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        """Splits a float32 buffer over the parameters, the inverse of
        :meth:`get_contiguous_parameters`."""
        self._session.copy_buffer_to_parameters(_as_array(buffer), trainable_only)

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names):
        """Writes an inference model: the eval model with the current
        parameters, ending at ``graph_output_names``."""
        self._session.export_model_for_inferencing(os.fspath(inference_model_uri),
                                                   list(graph_output_names))

    def input_names(self):
        """The inputs of the training (or, in eval mode, the eval) model."""
        return self._session.input_names(self.training)

    def output_names(self):
        """The outputs of the training (or, in eval mode, the eval) model."""
        return self._session.output_names(self.training)


class Optimizer:
    """Updates the parameters from the gradients with the optimizer of
    ``optimizer_uri`` (ONNX Runtime's ``optimizer_model.onnx``), which gmopt
    merges into the module's training step.

    Args:
        optimizer_uri: the optimizer model.
        module: the :class:`Module` to train.
    """

    def __init__(self, optimizer_uri, module):
        if not isinstance(module, Module):
            raise TypeError(f"module: expected a Module, got {type(module).__name__}")
        self._module = module
        module._session.add_optimizer(os.fspath(optimizer_uri))

    def step(self):
        """Updates the parameters from the accumulated gradients."""
        self._module._session.optimizer_step()

    def set_learning_rate(self, learning_rate):
        """Sets the learning rate of the next updates."""
        self._module._session.set_learning_rate(float(learning_rate))

    def get_learning_rate(self):
        """The learning rate of the next update."""
        return self._module._session.get_learning_rate()


class LinearLRScheduler:
    """Sets the optimizer's learning rate on a linear schedule.

    The learning rate is ``initial_lr * factor(step)``, ``step`` being the
    optimizer updates done so far: the factor rises from 0 to 1 over a
    warm-up, then falls to 0. It is set when the scheduler is made and at
    every :meth:`step`.

    ONNX Runtime 1.19.2's Python class hands its two counts to the C++
    scheduler in the other order than its docstring says (its pybind
    constructor, in orttraining_pybind_state.cc, takes the total count
    first), so the warm-up lasts
    ``total_step_count`` updates and the rate reaches 0 at
    ``warmup_step_count``. gmopt does the same, so a script's schedule, and
    its losses, are ONNX Runtime's (docs/python.md shows the values).
    """

    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer: expected an Optimizer, got {type(optimizer).__name__}")
        self._session = optimizer._module._session
        self._session.register_linear_lr_scheduler(int(total_step_count), int(warmup_step_count),
                                                   float(initial_lr))
        # ONNX Runtime's constructor sets the rate for the current update count.
        self._session.scheduler_step()

    def step(self):
        """Sets the learning rate for the optimizer's current update count;
        call it after each optimizer step."""
        self._session.scheduler_step()
