"""Training time: the clock that `--max_train_minutes` and `--eval_every_minutes` are measured on.

Training time is wall time without evaluation, saving and the spans a terminal stop holds the
process (`signals.stops_off_the_clock`): a fixed budget buys the same training whatever else the
run does.
"""

import math
import time
from contextlib import contextmanager


class TrainingClock:
    """Wall time spent training: everything between the laps except the spans spent `paused()`.

    A step's `lap()` therefore holds fetching its batches, launching its work and waiting for the
    device to finish the previous step (a GPU runs behind the host, so time measured from a step's
    start to its last launch alone misses most of the device's work), but not evaluation or
    saving. Time before a pause is banked and handed out with the next lap. Pauses may nest (a
    terminal stop during an evaluation): only the outermost one banks and restarts the clock.
    """

    def __init__(self):
        self._mark = time.perf_counter()
        self._banked = 0.0
        self._pause_depth = 0

    def lap(self) -> float:
        """Seconds of training since the last lap (or since the clock was made)."""
        now = time.perf_counter()
        seconds, self._mark, self._banked = self._banked + now - self._mark, now, 0.0
        return seconds

    @contextmanager
    def paused(self):
        """A span that is not training time (evaluation, saving, a stopped process)."""
        if self._pause_depth == 0:
            self._banked += time.perf_counter() - self._mark
        self._pause_depth += 1
        try:
            yield
        finally:
            self._pause_depth -= 1
            if self._pause_depth == 0:
                self._mark = time.perf_counter()


def crossed_multiple(before, after, interval):
    """Whether some whole multiple of `interval` (> 0) lies in (before, after]."""
    return math.floor(after / interval) > math.floor(before / interval)
