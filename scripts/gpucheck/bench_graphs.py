"""Resolving every model's training graph to
SCRATCH/models/<folder>/training_model.onnx (a link, or the .gz unpacked),
where the CUDA unit tests find the bench graphs too."""
import gzip
import os
import shutil
from dataclasses import dataclass
from typing import Optional

from gpucheck.plan import ModelConfig


@dataclass
class ResolvedGraph:
    """Where a model's graph came from (`source`, perhaps `.gz`) and where it
    is now (`path`; None when missing)."""

    folder: str
    source: str
    path: Optional[str]


def source_path(config: ModelConfig, root: str, models: str) -> str:
    """The graph's place: testdata/ in the checkout, bench models under
    `models`."""
    base = root if config.in_testdata else models
    return os.path.join(base, config.folder, "training_model.onnx")


def resolve(config: ModelConfig, root: str, models: str, scratch: str) -> ResolvedGraph:
    source = source_path(config, root, models)
    target = os.path.join(scratch, "models", config.folder, "training_model.onnx")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        os.remove(target)
    if os.path.isfile(source):
        os.symlink(os.path.abspath(source), target)
        return ResolvedGraph(config.folder, source, target)
    if os.path.isfile(source + ".gz"):
        # Shipped compressed (GPT-2 small's graph is 50 MB, 0.2 MB gzipped).
        try:
            with gzip.open(source + ".gz", "rb") as packed, open(target, "wb") as unpacked:
                shutil.copyfileobj(packed, unpacked)
        except (OSError, EOFError):
            os.remove(target)
            return ResolvedGraph(config.folder, source + ".gz", None)
        return ResolvedGraph(config.folder, source + ".gz", target)
    return ResolvedGraph(config.folder, source, None)
