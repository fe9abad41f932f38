"""gmopt.Session and gmopt.compile: the package's own API over the runtime
and the compiler, and NumPy arrays in and out."""

import numpy as np
import pytest

from conftest import adamw_reference, model_path, read_inputs, relative_difference
import gmopt

GPT = "gpt_tiny"
# The reference batch's bindings of gpt_tiny's symbolic dimensions.
GPT_DIMS = {"batch": 4, "batch_x_seq": 256}


def _session(model=GPT, **kwargs):
    return gmopt.Session.from_artifacts(model_path(model, ""), **kwargs)


def _inputs(session, model=GPT):
    tensors = read_inputs(model)
    return [tensors[name] for name in session.input_names()]


def test_read_tensor_proto():
    name, array = gmopt.read_tensor_proto(model_path(GPT, "test_data_set_0/input_0.pb"))
    assert name == "input_ids" and array.dtype == np.int64 and array.shape == (4, 64)
    with pytest.raises(gmopt.Error):
        gmopt.read_tensor_proto(model_path(GPT, "info.json"))


def test_session_trains_like_onnx_runtime():
    """Session.train_step + optimizer_step follow ONNX Runtime's AdamW run;
    train_step(update=True) (the optimizer in the same step) gives the same
    losses."""
    reference = adamw_reference(GPT)
    separate, fused = _session(), _session()
    for session in (separate, fused):
        session.learning_rate = reference["learning_rate"]
    inputs = _inputs(separate)
    for step in range(5):
        separate.lazy_reset_grad()
        loss = separate.train_step(*inputs)[0]
        separate.optimizer_step()
        fused.lazy_reset_grad()
        fused_loss = fused.train_step(*inputs, update=True)[0]
        assert abs(float(loss) - reference["losses"][step]) <= 1e-5 * reference["losses"][step]
        assert relative_difference(fused_loss, loss) <= 1e-6
    assert separate.step_count == fused.step_count == 5


def test_memory_figures():
    """memory(): the plan's figures by category and what the backend
    measured, after a step."""
    session = _session()
    session.lazy_reset_grad()
    session.train_step(*_inputs(session))
    memory = session.memory()
    planned = memory["planned"]
    assert set(planned["persistent_bytes"]) == set(gmopt.compiler.CATEGORIES)
    assert planned["peak_bytes"] == planned["arena_bytes"] + sum(planned["persistent_bytes"].values())
    assert planned["persistent_bytes"]["parameters"] >= 4 * 273152
    assert planned["lower_bound_bytes"] <= planned["arena_bytes"] + planned["workspace_bytes"]
    assert memory["measured"]["peak_bytes"] > 0
    assert isinstance(memory["pipeline"], str) and memory["pipeline"]


def test_compile_returns_the_plan_figures():
    """gmopt.compile compiles without running: the peak is the sum of its
    categories and the arena, the pipeline is the default one, and the
    optimizer model adds its state."""
    training = model_path(GPT, "training_model.onnx")
    plain = gmopt.compile(training, dims=GPT_DIMS)
    with_adamw = gmopt.compile(training, dims=GPT_DIMS,
                               optimizer_model=model_path(GPT, "optimizer_model.onnx"))
    for result in (plain, with_adamw):
        assert isinstance(result, gmopt.CompileResult)
        assert result.peak_bytes == sum(result.categories.values())
        assert result.categories["parameters"] >= 4 * 273152
        assert result.naive_bytes >= result.peak_bytes
        assert result.pipeline
    assert plain.categories["optimizer_state"] == 0
    # AdamW keeps two moments per trainable parameter.
    assert with_adamw.categories["optimizer_state"] >= 2 * 4 * 273152
    assert with_adamw.dims == GPT_DIMS


def test_compile_timeline_and_session_agree():
    """The timeline covers the schedule with one band per tensor; its live
    maximum is the persistent bytes plus the schedule's lower bound (LOAD),
    within the planned peak; a session compiling the same model plans the
    same peak."""
    training = model_path(GPT, "training_model.onnx")
    result = gmopt.compile(training, dims=GPT_DIMS, optimizer_model=model_path(GPT, "optimizer_model.onnx"))
    timeline = result.timeline
    assert len(timeline.steps) > 100 and len(timeline.recompute) in (0, len(timeline.steps))
    assert all(0 <= b.first_step <= b.last_step < len(timeline.steps) for b in timeline.bands)
    assert {b.category for b in timeline.bands} <= set(gmopt.compiler.CATEGORIES)
    persistent = sum(result.persistent_bytes.values())
    live_peak, step, split = timeline.peak()
    assert live_peak == persistent + result.lower_bound_bytes
    assert live_peak <= result.peak_bytes and sum(split.values()) == live_peak
    assert timeline.reserved_bytes == result.peak_bytes
    session = gmopt.Session.from_artifacts(model_path(GPT, ""), dims=GPT_DIMS)
    assert session.memory()["planned"]["peak_bytes"] == result.peak_bytes


def test_compile_under_a_memory_limit():
    """A memory_limit the default plan exceeds makes the compiler choose a
    configuration whose planned peak fits."""
    training = model_path(GPT, "training_model.onnx")
    default = gmopt.compile(training, dims=GPT_DIMS)
    limit = int(default.peak_bytes * 0.9)
    limited = gmopt.compile(training, dims=GPT_DIMS, memory_limit=limit)
    assert limited.peak_bytes <= limit
    assert limited.pipeline != default.pipeline


def test_compile_refuses_a_bad_memory_limit():
    training = model_path(GPT, "training_model.onnx")
    for limit in (-5, 0, "12 parsecs"):
        with pytest.raises(ValueError):
            gmopt.compile(training, dims=GPT_DIMS, memory_limit=limit)


def test_arrays_in_and_out():
    """Outputs are NumPy arrays of the graph's dtype; parameters come back as
    copies (writing them changes nothing); non-contiguous inputs are
    accepted; set_parameter checks dtype and shape."""
    session = _session()
    name = session.parameter_names(trainable_only=True)[0]
    value = session.get_parameter(name)
    assert value.dtype == np.float32 and value.flags.c_contiguous
    # An array over the buffer the runtime handed over, not a copy of it.
    assert not value.flags.owndata and value.base is not None
    value += 1
    assert not np.array_equal(session.get_parameter(name), value)
    session.set_parameter(name, value)
    np.testing.assert_array_equal(session.get_parameter(name), value)
    with pytest.raises(gmopt.Error):
        session.set_parameter(name, value[:1])
    with pytest.raises(gmopt.Error, match="f32"):
        session.set_parameter(name, value.astype(np.float64))
    inputs = _inputs(session)
    ids = np.asfortranarray(inputs[0])
    assert not ids.flags.c_contiguous
    session.lazy_reset_grad()
    loss_f = session.train_step(ids, inputs[1])[0]
    session.lazy_reset_grad()
    loss_c = session.train_step(*inputs)[0]
    assert float(loss_f) == float(loss_c)
    assert session.parameters[name].shape == value.shape


def test_session_checkpoint_round_trip(tmp_path):
    """save_checkpoint / load_checkpoint restore parameters and the step
    count; properties set on the state are saved with them."""
    session = _session("regression_frozen")
    inputs = _inputs(session, "regression_frozen")
    session.lazy_reset_grad()
    session.train_step(*inputs, update=True)
    session.checkpoint_state.add_property("note", "after one step")
    saved = {name: session.get_parameter(name) for name in session.parameter_names()}
    session.save_checkpoint(tmp_path / "ckpt", include_optimizer_state=True)
    session.lazy_reset_grad()
    session.train_step(*inputs, update=True)
    session.load_checkpoint(tmp_path / "ckpt")
    for name, value in saved.items():
        np.testing.assert_array_equal(session.get_parameter(name), value)
    assert session.step_count == 1
    assert session.checkpoint_state.get_property("note") == "after one step"


def _tensor_proto(name, onnx_type, dims, raw):
    """A serialized onnx.TensorProto: dims (1), data_type (2), name (8),
    raw_data (9), written by hand so the test needs no onnx package."""
    def varint(n):
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    message = b"".join(varint(1 << 3) + varint(d) for d in dims)
    message += varint(2 << 3) + varint(onnx_type)
    return message + field(8, name.encode()) + field(9, raw)


@pytest.mark.parametrize("onnx_type,dtype", [
    (10, np.float16), (16, np.uint16), (9, np.bool_), (3, np.int8), (11, np.float64), (1, np.float32)])
def test_tensor_dtypes(tmp_path, onnx_type, dtype):
    """Every ONNX element type NumPy has comes back as its dtype, float16
    included; bfloat16 (16) as uint16 bits."""
    values = np.arange(6).reshape(2, 3).astype(dtype)
    if onnx_type == 16:
        values = (np.arange(6, dtype=np.float32).reshape(2, 3).view(np.uint32) >> 16).astype(np.uint16)
    path = tmp_path / "t.pb"
    path.write_bytes(_tensor_proto("t", onnx_type, values.shape, values.tobytes()))
    name, array = gmopt.read_tensor_proto(path)
    assert name == "t" and array.dtype == dtype and array.shape == (2, 3)
    np.testing.assert_array_equal(array, values)
    # The array views the reader's buffer: no copy was made for Python.
    assert not array.flags.owndata
