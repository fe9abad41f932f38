"""The check's total time budget: every run is started only with time left,
and cut at what is left."""
import time


class Budget:
    """`seconds` from now (or from `start`), on `clock` (time.monotonic by
    default; tests pass their own)."""

    # A run is not started with less than this left...
    MIN_START_SECONDS = 20
    # ...and is cut this much before the end, to leave time to report.
    MARGIN_SECONDS = 5

    def __init__(self, seconds: int, clock=time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.start = clock()
        self.deadline = self.start + seconds

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def run_limit(self, cap: float):
        """The time limit of a run that may take at most `cap` seconds: None
        when the budget has not MIN_START_SECONDS left to start it."""
        left = self.remaining()
        if left < self.MIN_START_SECONDS:
            return None
        return int(min(left - self.MARGIN_SECONDS, cap))
