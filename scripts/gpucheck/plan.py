"""What the check runs: the models at their batch sizes, and the pipelines.

On CUDA the bench models run at real batch sizes; with --backend cpu (the
plumbing check on a machine without a GPU) at tiny ones. Each model also
names the small batch at which its gradients are compared with the CPU's.
"""
from dataclasses import dataclass
from typing import List, Tuple

DEFAULT_PIPELINE = "canonicalize,fold-transpose,schedule,plan-buffers"
RECOMPUTE_PIPELINE = "canonicalize,fold-transpose,recompute{mode=selective},schedule,plan-buffers"
AMP_PIPELINE = ("canonicalize,fold-transpose,recompute{mode=selective},amp{dtype=bf16},"
                "schedule,plan-buffers")


@dataclass(frozen=True)
class ModelConfig:
    """One model row: `label` in the tables; `folder` a bench model's name
    (under --models) or `testdata/NAME`; `dims` the measured runs' --dim
    bindings and `small_dims` those of the gradient check."""

    label: str
    folder: str
    dims: Tuple[str, ...]
    small_dims: Tuple[str, ...]

    @property
    def in_testdata(self) -> bool:
        return self.folder.startswith("testdata/")

    @property
    def key(self) -> str:
        """The folder as a file-name fragment (testdata/cnn -> testdata_cnn)."""
        return self.folder.replace("/", "_")


@dataclass(frozen=True)
class Pipeline:
    """A pipeline the models run with; `dtype` picks the gradient tolerance
    (fp32 or amp)."""

    name: str
    passes: str
    dtype: str

    @property
    def key(self) -> str:
        return self.name.replace("+", "_")


def model_configs(backend: str) -> List[ModelConfig]:
    """The models of a run on `backend` (cuda or cpu)."""
    if backend == "cuda":
        return [
            ModelConfig("gpt2_small b8xs1024", "gpt2_small", ("batch=8", "seq=1024", "batch_x_seq=8192"),
                        ("batch=1", "seq=128", "batch_x_seq=128")),
            ModelConfig("resnet50 b64", "resnet50", ("batch=64",), ("batch=2",)),
            ModelConfig("cnn b256", "testdata/cnn", ("batch=256",), ("batch=8",)),
            ModelConfig("cnn_bn b256", "testdata/cnn_bn", ("batch=256",), ("batch=4",)),
            ModelConfig("resnet_tiny b128", "testdata/resnet_tiny", ("batch=128",), ("batch=4",)),
        ]
    return [
        ModelConfig("gpt2_small b1xs32", "gpt2_small", ("batch=1", "seq=32", "batch_x_seq=32"),
                    ("batch=1", "seq=32", "batch_x_seq=32")),
        ModelConfig("resnet50 b2", "resnet50", ("batch=2",), ("batch=2",)),
        ModelConfig("cnn b8", "testdata/cnn", ("batch=8",), ("batch=8",)),
    ]


def measured_steps(backend: str) -> int:
    """Steps of a measured run (the first is the warm-up the median leaves out)."""
    return 3 if backend == "cuda" else 2


def pipelines(quick: bool) -> List[Pipeline]:
    """The pipelines: the default one only with --quick."""
    default = Pipeline("default", DEFAULT_PIPELINE, "fp32")
    if quick:
        return [default]
    return [default, Pipeline("recompute", RECOMPUTE_PIPELINE, "fp32"),
            Pipeline("recompute+amp", AMP_PIPELINE, "amp")]


def gradient_rtol(dtype: str, fp32_rtol: float, amp_rtol: float) -> float:
    """The gradient tolerance of a pipeline of `dtype`."""
    return amp_rtol if dtype == "amp" else fp32_rtol


def dim_flags(dims) -> List[str]:
    """gmopt-run's --dim flags for `dims`."""
    flags = []
    for dim in dims:
        flags += ["--dim", dim]
    return flags
