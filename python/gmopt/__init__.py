"""gmopt: train ONNX training graphs in less memory, from Python.

The package is a thin layer over gmopt's C++ libraries (the extension module
``gmopt._core``):

* :class:`gmopt.Session` trains a model: ONNX Runtime's training artifacts
  (``training_model.onnx``, ``eval_model.onnx``, ``optimizer_model.onnx``, a
  checkpoint) or a ``.gm`` file written by ``gmopt-compile``, compiled with
  gmopt's default pipeline (or a pipeline or ``memory_limit`` of your own)
  and run on the plan it made;
* :func:`gmopt.compile` compiles a model without running it and returns the
  plan's memory figures as Python objects;
* :mod:`gmopt.training.api` is ONNX Runtime's ``onnxruntime.training.api``
  (``CheckpointState``, ``Module``, ``Optimizer``, ``LinearLRScheduler``): a
  script written for ONNX Runtime runs on gmopt with that import changed.

Tensors are NumPy arrays in and out, not copied where the layout allows
(C-contiguous arrays of the graph's element type). bfloat16 tensors are
uint16 arrays of their bits (NumPy has no bfloat16).
"""

import pkgutil

# From a checkout the extension module is built into <build>/python/gmopt
# while these sources stay in python/gmopt: with both folders on sys.path,
# the package spans them. An installed package has one folder; this is then
# a no-op.
__path__ = pkgutil.extend_path(__path__, __name__)

from gmopt._core import Error  # noqa: E402
from gmopt.compiler import CompileResult, compile  # noqa: E402
from gmopt.session import Session  # noqa: E402
from gmopt.tensors import inspect_onnx, read_tensor_proto, read_test_data_set  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "CompileResult",
    "Error",
    "Session",
    "compile",
    "inspect_onnx",
    "read_tensor_proto",
    "read_test_data_set",
]
