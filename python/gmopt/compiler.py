"""gmopt.compile: compile a training graph and read the plan's memory figures.

``compile`` runs gmopt's compiler on a model exactly as a :class:`Session`
would (import, optimizer merge, the default pipeline or the one given, or the
search under a ``memory_limit``, then the buffer plan) and returns the
figures of the plan it made, without running a step. Symbolic dimensions
must be bound (``dims={"batch": 8}``) since nothing is fed.
"""

import dataclasses

from gmopt.session import Session

# Memory categories in report order (DESIGN.md, "Memory accounting").
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "workspace")


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

    @property
    def categories(self):
        """The persistent bytes per category, then the arena as
        ``"arena"``: what the planned peak is made of."""
        parts = {name: self.persistent_bytes.get(name, 0) for name in CATEGORIES}
        parts["arena"] = self.arena_bytes
        return parts

    @classmethod
    def from_memory(cls, memory):
        """The result for a session's ``memory()`` dict."""
        planned = memory["planned"]
        persistent = {str(k).replace(" ", "_"): int(v) for k, v in planned["persistent_bytes"].items()}
        return cls(pipeline=memory["pipeline"], peak_bytes=planned["peak_bytes"],
                   arena_bytes=planned["arena_bytes"], persistent_bytes=persistent,
                   lower_bound_bytes=planned["lower_bound_bytes"], naive_bytes=planned["naive_bytes"],
                   eager_estimate_bytes=planned["eager_estimate_bytes"],
                   host_arena_bytes=planned["host_arena_bytes"], workspace_bytes=planned["workspace_bytes"])


def compile(model, *, checkpoint=None, optimizer_model=None, dims=None, pipeline=None,
            memory_limit=None, backend="cpu"):
    """Compiles ``model`` (a ``training_model.onnx`` or ``.gm``) and returns
    its :class:`CompileResult`.

    ``optimizer_model`` merges ONNX Runtime's optimizer into the step (so its
    state is counted); ``pipeline`` replaces the default pipeline;
    ``memory_limit`` (bytes or ``"512MiB"``) searches for the fastest
    configuration that fits. ``backend`` picks the workspace model planned
    for.
    """
    session = Session(model, checkpoint, None, optimizer_model, backend=backend, dims=dims,
                      pipeline=pipeline, memory_limit=memory_limit)
    return CompileResult.from_memory(session.memory())
