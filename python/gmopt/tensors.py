"""Reading ONNX files: tensors into NumPy arrays, and what a model takes.

ONNX Runtime's examples and gmopt's ``testdata/`` keep inputs as serialized
``onnx.TensorProto`` files (``test_data_set_0/input_0.pb``, ...). These
helpers read them with gmopt's own reader, so no ``onnx`` package is needed.
"""

import os

from gmopt import _core


def read_tensor_proto(path):
    """Reads one serialized ``onnx.TensorProto``; returns ``(name, array)``.

    The array views the file's decoded bytes (bfloat16 as uint16 bits).
    Raises :class:`gmopt.Error` for a missing or malformed file.
    """
    return _core.read_tensor_file(os.fspath(path))


def read_test_data_set(directory, prefix="input_"):
    """Reads every ``<prefix>K.pb`` of an ONNX test-data directory.

    Returns a dict from each tensor's name to its array, in order of K.
    """
    directory = os.fspath(directory)
    numbered = []
    for entry in os.listdir(directory):
        stem, ext = os.path.splitext(entry)
        if ext == ".pb" and stem.startswith(prefix) and stem[len(prefix):].isdigit():
            numbered.append((int(stem[len(prefix):]), entry))
    if not numbered:
        raise FileNotFoundError(f"{directory}: no {prefix}K.pb files")
    tensors = {}
    for _, entry in sorted(numbered):
        name, array = read_tensor_proto(os.path.join(directory, entry))
        tensors[name] = array
    return tensors


def inspect_onnx(path, dims=None):
    """Imports the ONNX model at ``path`` with gmopt's importer (types
    inferred, graph verified; ``dims`` binds symbolic dimensions) and
    describes it: a dict of ``inputs``, ``outputs`` and ``initializers``
    (each a list of ``{"name", "type"}`` dicts, types as ``f32[batch,64]``)
    and ``nodes`` (the count). Raises :class:`gmopt.Error` for a model gmopt
    cannot read."""
    return _core.inspect_onnx(os.fspath(path), {str(k): int(v) for k, v in (dims or {}).items()})
