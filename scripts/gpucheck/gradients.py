"""Reading `gmopt-run --dump-gradients` folders and comparing two of them.

A dump folder holds manifest.json (format "gmopt-gradients", version 1: the
model, backend, pipeline, micro_steps, the step's loss, and per trainable
parameter its name, file, dtype and shape) and one NumPy .npy file per
parameter (bfloat16 gradients widened to float32).

Two dumps are compared per tensor as gmopt-run's --check does, without its
absolute floor: the relative difference is max|got - ref| / max|ref| (0 when
both are all zero, inf when only the reference is), and a tensor agrees when
it is finite and that difference is at most the tolerance.
"""
import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

MANIFEST = "manifest.json"
FORMAT = "gmopt-gradients"
VERSION = 1


class DumpError(Exception):
    """A dump folder that cannot be read: missing, malformed or inconsistent."""


@dataclass
class Dump:
    """One gradient dump: the manifest and the gradients by parameter name,
    in the manifest's (the signature's) order."""

    folder: str
    manifest: dict
    loss: Optional[float]
    gradients: Dict[str, np.ndarray]


def read_dump(folder: str) -> Dump:
    """Reads the dump in `folder`, checking each file's dtype and shape
    against the manifest."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise DumpError(f"{path}: {e}") from e
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise DumpError(f"{path}: not a {FORMAT} version {VERSION} manifest")
    gradients = {}
    for entry in manifest.get("gradients", []):
        file = os.path.join(folder, entry["file"])
        try:
            array = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DumpError(f"{file}: {e}") from e
        if list(array.shape) != list(entry["shape"]):
            raise DumpError(f"{file}: shape {list(array.shape)}, the manifest says {entry['shape']}")
        stored = "float32" if entry["dtype"] == "bfloat16" else entry["dtype"]
        if array.dtype != np.dtype(stored):
            raise DumpError(f"{file}: dtype {array.dtype}, the manifest says {entry['dtype']}")
        gradients[entry["name"]] = array
    loss = manifest.get("loss")
    return Dump(folder, manifest, None if loss is None else float(loss), gradients)


@dataclass
class TensorAgreement:
    """One tensor of a dump against its reference."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    problem: str = ""


def relative_difference(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref| in float64; 0 when both are all zero, inf
    when only the reference is (or either holds a non-finite value)."""
    got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got64.size == 0:
        return 0.0
    if not (np.all(np.isfinite(got64)) and np.all(np.isfinite(ref64))):
        return math.inf
    diff = float(np.max(np.abs(got64 - ref64)))
    scale = float(np.max(np.abs(ref64)))
    if scale == 0:
        return 0.0 if diff == 0 else math.inf
    return diff / scale


def compare_tensor(name: str, got: np.ndarray, ref: np.ndarray, rtol: float) -> TensorAgreement:
    """`got` against `ref` under relative tolerance `rtol`."""
    if got.shape != ref.shape:
        return TensorAgreement(name, math.inf, math.inf, False,
                               f"shape {list(got.shape)} against {list(ref.shape)}")
    bad = [label for label, a in (("got", got), ("reference", ref))
           if not np.all(np.isfinite(np.asarray(a, np.float64)))]
    if bad:
        return TensorAgreement(name, math.inf, math.inf, False,
                               f"non-finite values in {' and '.join(bad)}")
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    rel = relative_difference(got, ref)
    return TensorAgreement(name, max_abs, rel, rel <= rtol)


@dataclass
class DumpAgreement:
    """A dump against a reference dump."""

    tensors: List[TensorAgreement] = field(default_factory=list)
    # Parameters one dump has and the other has not.
    missing: List[str] = field(default_factory=list)
    extra: List[str] = field(default_factory=list)
    # The step's loss: |got - ref| / |ref| (None when either has none).
    loss_rel: Optional[float] = None
    rtol: float = 0.0

    @property
    def failed(self) -> List[TensorAgreement]:
        return [t for t in self.tensors if not t.ok]

    @property
    def worst(self) -> Optional[TensorAgreement]:
        """The tensor with the largest relative difference."""
        return max(self.tensors, key=lambda t: t.max_rel, default=None)

    @property
    def max_rel(self) -> Optional[float]:
        worst = self.worst
        return None if worst is None else worst.max_rel

    @property
    def ok(self) -> bool:
        return bool(self.tensors) and not self.failed and not self.missing and not self.extra

    def describe_failure(self) -> str:
        """Why the dumps disagree, in one line (empty when they agree)."""
        if self.ok:
            return ""
        parts = []
        if not self.tensors:
            parts.append("no gradient compared")
        if self.failed:
            worst = max(self.failed, key=lambda t: t.max_rel)
            detail = worst.problem or f"{worst.max_rel:.1e}"
            parts.append(f"{len(self.failed)} of {len(self.tensors)} tensors beyond {self.rtol:g} "
                         f"(worst {worst.name}: {detail})")
        if self.missing:
            parts.append("missing: " + ", ".join(self.missing[:5]))
        if self.extra:
            parts.append("not in the reference: " + ", ".join(self.extra[:5]))
        return "; ".join(parts)

    def to_json(self) -> dict:
        def number(x):
            return None if x is None or not math.isfinite(x) else x
        return {
            "rtol": self.rtol, "ok": self.ok, "loss_rel_diff": number(self.loss_rel),
            "max_rel_diff": number(self.max_rel), "missing": self.missing, "extra": self.extra,
            "tensors": [{"name": t.name, "max_abs_diff": number(t.max_abs),
                         "max_rel_diff": number(t.max_rel), "ok": t.ok, "problem": t.problem}
                        for t in self.tensors],
        }


def compare_dumps(got: Dump, ref: Dump, rtol: float) -> DumpAgreement:
    """Every gradient of `got` against the same parameter's in `ref`."""
    agreement = DumpAgreement(rtol=rtol)
    for name, reference in ref.gradients.items():
        if name not in got.gradients:
            agreement.missing.append(name)
            continue
        agreement.tensors.append(compare_tensor(name, got.gradients[name], reference, rtol))
    agreement.extra = [name for name in got.gradients if name not in ref.gradients]
    if got.loss is not None and ref.loss is not None:
        agreement.loss_rel = (abs(got.loss - ref.loss) / abs(ref.loss) if ref.loss
                              else (0.0 if got.loss == 0 else math.inf))
    return agreement
