"""gmopt.compile: compile a training graph and read the plan's memory figures.

``compile`` runs gmopt's compiler on a model exactly as a :class:`Session`
would (import, optimizer merge, the default pipeline or the one given, then
the buffer plan) and returns the figures of the plan it made and its
timeline, without running a step. Symbolic dimensions must be bound
(``dims={"batch": 8}``) since nothing is fed.
"""

import dataclasses
import os

import numpy as np

from gmopt import _core
from gmopt._units import parse_bytes
from gmopt.session import Session

# Memory categories in report order (DESIGN.md, "Memory accounting").
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "workspace")


@dataclasses.dataclass(frozen=True)
class Band:
    """One tensor with storage of its own, live over steps
    ``first_step..last_step`` (inclusive) of the schedule."""

    tensor: str
    producer: str
    category: str
    bytes: int
    first_step: int
    last_step: int


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The plan over the schedule: ``steps[i]`` names the node at step i
    (``recompute[i]`` marks recompute clones), and ``bands`` are the tensors
    (what ``gmopt-compile --timeline`` draws). ``reserved_bytes`` is what the
    plan reserves (arena + persistent)."""

    steps: list
    recompute: list
    bands: list
    reserved_bytes: int

    @classmethod
    def from_dict(cls, data):
        bands = [Band(**band) for band in data["bands"]]
        return cls(steps=list(data["steps"]), recompute=list(data["recompute"]), bands=bands,
                   reserved_bytes=data["reserved_bytes"])

    def live_bytes(self, category=None):
        """Bytes live at each step (of one category, if given), as an int64
        array."""
        live = np.zeros(len(self.steps) + 1, dtype=np.int64)
        for band in self.bands:
            if category is None or band.category == category:
                live[band.first_step] += band.bytes
                live[band.last_step + 1] -= band.bytes
        return np.cumsum(live)[:-1]

    def peak(self):
        """``(bytes, step, bytes by category at that step)`` of the largest
        live total."""
        live = self.live_bytes()
        step = int(np.argmax(live)) if len(live) else 0
        split = {name: int(self.live_bytes(name)[step]) if len(live) else 0 for name in CATEGORIES}
        return int(live[step]) if len(live) else 0, step, split


@dataclasses.dataclass(frozen=True)
class CompileResult:
    """The plan's figures, in bytes.

    Attributes:
        pipeline: the pass pipeline that compiled the step (replayable).
        peak_bytes: the planned device peak (arena + persistent bytes).
        arena_bytes: the arena the plan lays transient tensors out in.
        persistent_bytes: persistent bytes per memory category (parameters,
            gradients, optimizer_state, ...), a dict by category name.
        lower_bound_bytes: the largest live total over the schedule (LOAD).
        naive_bytes: every tensor's bytes added up, no reuse.
        eager_estimate_bytes: the estimated peak of eager execution (each
            tensor from its definition to its last use).
        host_arena_bytes: the host arena of offloaded tensors (apart from
            the device peak).
        workspace_bytes: the largest kernel workspace of one step.
        timeline: the plan over the schedule (:class:`Timeline`), or None
            where the compile did not keep it (under a memory limit).
        dims: the symbolic dimensions' bindings.
    """

    pipeline: str
    peak_bytes: int
    arena_bytes: int
    persistent_bytes: dict
    lower_bound_bytes: int
    naive_bytes: int
    eager_estimate_bytes: int
    host_arena_bytes: int
    workspace_bytes: int
    timeline: Timeline = None
    dims: dict = None

    @property
    def categories(self):
        """The persistent bytes per category, then the arena as
        ``"arena"``: what the planned peak is made of."""
        parts = {name: self.persistent_bytes.get(name, 0) for name in CATEGORIES}
        parts["arena"] = self.arena_bytes
        return parts

    @classmethod
    def from_memory(cls, memory, timeline=None, dims=None):
        """The result for a ``memory()`` dict (a session's, or compile_plan's)."""
        planned = memory["planned"]
        persistent = {str(k): int(v) for k, v in planned["persistent_bytes"].items()}
        return cls(pipeline=memory["pipeline"], peak_bytes=planned["peak_bytes"],
                   arena_bytes=planned["arena_bytes"], persistent_bytes=persistent,
                   lower_bound_bytes=planned["lower_bound_bytes"], naive_bytes=planned["naive_bytes"],
                   eager_estimate_bytes=planned["eager_estimate_bytes"],
                   host_arena_bytes=planned["host_arena_bytes"], workspace_bytes=planned["workspace_bytes"],
                   timeline=timeline, dims=dims)


def compile(model, *, checkpoint=None, optimizer_model=None, dims=None, pipeline=None,
            memory_limit=None, backend="cpu"):
    """Compiles ``model`` (a ``training_model.onnx`` or ``.gm``) and returns
    its :class:`CompileResult`.

    ``optimizer_model`` merges ONNX Runtime's optimizer into the step (so its
    state is counted); ``pipeline`` replaces the default pipeline;
    ``memory_limit`` (bytes or ``"512MiB"``) searches for the fastest
    configuration that fits. ``backend`` picks the workspace model planned
    for. ``checkpoint`` is accepted for symmetry with :class:`Session`; the
    plan does not depend on parameter values.
    """
    if pipeline is not None and memory_limit is not None:
        raise ValueError("give a pipeline or a memory_limit, not both")
    if memory_limit is not None:
        parse_bytes(memory_limit)
        session = Session(model, checkpoint, None, optimizer_model, backend=backend, dims=dims,
                          memory_limit=memory_limit)
        return CompileResult.from_memory(session.memory(), dims=dict(dims or {}))
    plan = _core.compile_plan(os.fspath(model), {str(k): int(v) for k, v in (dims or {}).items()},
                              pipeline or "", "" if optimizer_model is None else os.fspath(optimizer_model),
                              backend)
    return CompileResult.from_memory(plan, Timeline.from_dict(plan["timeline"]), plan["dims"])
