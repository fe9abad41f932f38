"""gpucheck.gradients: reading --dump-gradients folders and comparing them."""
import json
import math
import os

import numpy as np
import pytest

from gpucheck import gradients


def write_dump(folder, tensors, loss=2.0, dtypes=None):
    """A dump as gmopt-run writes it: name -> array, files by name."""
    os.makedirs(folder, exist_ok=True)
    entries = []
    for i, (name, array) in enumerate(tensors.items()):
        file = f"g{i}.npy"
        np.save(os.path.join(folder, file), array)
        dtype = (dtypes or {}).get(name, str(array.dtype))
        entries.append({"name": name, "file": file, "dtype": dtype, "shape": list(array.shape)})
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"format": "gmopt-gradients", "version": 1, "model": "m.onnx", "backend": "cpu",
                   "pipeline": "p", "micro_steps": 1, "loss": loss, "gradients": entries}, f)
    return folder


def test_read_dump_keeps_order_shapes_and_loss(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5], dtype=np.float32)
    dump = gradients.read_dump(write_dump(str(tmp_path), {"w": a, "b": b}, loss=0.25))
    assert list(dump.gradients) == ["w", "b"]
    np.testing.assert_array_equal(dump.gradients["w"], a)
    assert dump.loss == 0.25


def test_bfloat16_entries_are_stored_as_float32(tmp_path):
    folder = write_dump(str(tmp_path), {"w": np.ones(3, np.float32)}, dtypes={"w": "bfloat16"})
    assert gradients.read_dump(folder).gradients["w"].dtype == np.float32


@pytest.mark.parametrize("change, message", [
    (lambda m: m["gradients"][0].update(shape=[4]), "shape"),
    (lambda m: m["gradients"][0].update(dtype="float64"), "dtype"),
    (lambda m: m.update(format="something-else"), "not a gmopt-gradients"),
    (lambda m: m["gradients"][0].update(file="absent.npy"), "absent.npy"),
])
def test_inconsistent_dumps_are_refused(tmp_path, change, message):
    folder = write_dump(str(tmp_path), {"w": np.ones(3, np.float32)})
    path = os.path.join(folder, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    change(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)
    with pytest.raises(gradients.DumpError, match=message):
        gradients.read_dump(folder)


def test_missing_manifest_is_a_dump_error(tmp_path):
    with pytest.raises(gradients.DumpError, match="manifest.json"):
        gradients.read_dump(str(tmp_path))


def test_relative_difference_is_against_the_reference_magnitude():
    ref = np.array([1.0, -4.0], np.float32)
    got = np.array([1.0, -3.0], np.float32)
    assert gradients.relative_difference(got, ref) == pytest.approx(0.25)
    zeros = np.zeros(2, np.float32)
    assert gradients.relative_difference(zeros, zeros) == 0.0
    assert gradients.relative_difference(ref, zeros) == math.inf
    assert gradients.relative_difference(np.array([np.nan, 0], np.float32), ref) == math.inf


def test_compare_tensor_tolerance_and_problems():
    ref = np.array([2.0, 0.0], np.float32)
    assert gradients.compare_tensor("t", ref * 1.0005, ref, 1e-3).ok
    assert not gradients.compare_tensor("t", ref * 1.01, ref, 1e-3).ok
    bad = gradients.compare_tensor("t", np.array([np.inf, 0], np.float32), ref, 1.0)
    assert not bad.ok and "non-finite values in got" in bad.problem
    shape = gradients.compare_tensor("t", np.zeros(3, np.float32), ref, 1.0)
    assert not shape.ok and "shape" in shape.problem


def test_compare_dumps_reports_worst_missing_and_extra(tmp_path):
    ref = gradients.read_dump(write_dump(str(tmp_path / "ref"), {
        "a": np.array([1.0, 2.0], np.float32), "b": np.array([4.0], np.float32),
        "c": np.array([1.0], np.float32)}, loss=2.0))
    got = gradients.read_dump(write_dump(str(tmp_path / "got"), {
        "a": np.array([1.0, 2.0], np.float32), "b": np.array([5.0], np.float32),
        "d": np.array([1.0], np.float32)}, loss=2.5))
    agreement = gradients.compare_dumps(got, ref, 1e-3)
    assert not agreement.ok
    assert agreement.worst.name == "b" and agreement.max_rel == pytest.approx(0.25)
    assert agreement.missing == ["c"] and agreement.extra == ["d"]
    assert agreement.loss_rel == pytest.approx(0.25)
    text = agreement.describe_failure()
    assert "1 of 2 tensors beyond 0.001 (worst b: 2.5e-01)" in text
    assert "missing: c" in text and "not in the reference: d" in text
    as_json = agreement.to_json()
    assert as_json["ok"] is False and as_json["tensors"][1]["name"] == "b"


def test_identical_dumps_agree(tmp_path):
    tensors = {"w": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    ref = gradients.read_dump(write_dump(str(tmp_path / "ref"), tensors))
    got = gradients.read_dump(write_dump(str(tmp_path / "got"), tensors))
    agreement = gradients.compare_dumps(got, ref, 1e-6)
    assert agreement.ok and agreement.max_rel == 0.0 and agreement.describe_failure() == ""


def test_an_empty_comparison_does_not_pass(tmp_path):
    empty = gradients.read_dump(write_dump(str(tmp_path), {}))
    assert not gradients.compare_dumps(empty, empty, 1.0).ok
