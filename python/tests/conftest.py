"""Shared helpers of the gmopt Python tests: the committed ONNX Runtime
artifacts in testdata/ and their reference data."""

import json
import os

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.path.join(REPO, "testdata")

# The models of issue 37's port of ONNX Runtime's training-API tests: a GPT
# (tied embedding, Dropout at ratio 0), a BERT with two data inputs, a CNN with
# training-mode BatchNorm; regression_frozen has frozen parameters.
ORT_MODELS = ["gpt_tiny", "bert_tiny", "cnn_bn"]


def model_path(model, name):
    """The path of artifact ``name`` of ``model`` under testdata/."""
    return os.path.join(TESTDATA, model, name)


def read_inputs(model):
    """The reference batch: test_data_set_0's input tensors by name."""
    import gmopt
    return gmopt.read_test_data_set(model_path(model, "test_data_set_0"))


def user_inputs(module, model):
    """The reference batch in the order ``module`` takes its inputs."""
    tensors = read_inputs(model)
    return [tensors[name] for name in module.input_names()]


def adamw_reference(model):
    """ONNX Runtime's 20-step AdamW run (adamw_losses.json)."""
    with open(model_path(model, "adamw_losses.json")) as f:
        return json.load(f)


def relative_difference(got, ref):
    """max|got - ref| / max|ref| (testdata/README.md's measure)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(got - ref))) / scale


def make_trainer(model, learning_rate=None, checkpoint=None, **module_kwargs):
    """ONNX Runtime's trainer set-up on gmopt: CheckpointState, Module (with
    the eval model) and Optimizer over ``model``'s artifacts."""
    from gmopt.training import api
    state = api.CheckpointState.load_checkpoint(checkpoint or model_path(model, "checkpoint"))
    module = api.Module(model_path(model, "training_model.onnx"), state,
                        model_path(model, "eval_model.onnx"), device="cpu", **module_kwargs)
    optimizer = api.Optimizer(model_path(model, "optimizer_model.onnx"), module)
    if learning_rate is not None:
        optimizer.set_learning_rate(learning_rate)
    return state, module, optimizer


@pytest.fixture(params=ORT_MODELS)
def ort_model(request):
    """Each ORT-made model of the port."""
    return request.param
