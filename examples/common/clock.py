"""Training time: the clock that `--max_train_minutes` and `--eval_every_minutes` are measured on.

Training time is wall time without evaluation, saving and the spans a terminal stop holds the
process (`signals.stops_off_the_clock`): a fixed budget buys the same training whatever else the
run does.
"""

import math
import statistics
import time
from collections import deque
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


class SlowdownDetector:
    """Notices when training steps suddenly take several times as long as they did so far.

    Another process on the machine (even at `nice 19`) can slow a CPU run by an order of magnitude:
    torch's intra-op thread pool waits at every parallel operator for its slowest thread, and a
    thread whose core another process holds runs only when the scheduler lets it. A time-budgeted
    run keeps counting through that, so the run buys fewer steps than the same budget on an idle
    machine. `add` each step's seconds: it returns a warning once the median of the last `window`
    steps exceeds `factor` times the median of the run's earlier steps (after `warmup` of them),
    and warns again only after the steps have come back under half that.
    """

    def __init__(self, factor=4.0, window=10, warmup=20, history=500):
        self.factor, self.warmup = factor, warmup
        self._recent = deque(maxlen=window)
        self._history = deque(maxlen=history)  # the steps before `_recent`, slowed ones left out
        self._slow = False

    def add(self, seconds: float) -> str | None:
        """Count one step of `seconds`; a warning (a sentence) when the steps have just slowed down."""
        if len(self._recent) == self._recent.maxlen and not self._slow:
            self._history.append(self._recent[0])  # the one about to leave the window
        self._recent.append(seconds)
        if len(self._history) < self.warmup or len(self._recent) < self._recent.maxlen:
            return None
        usual, now = statistics.median(self._history), statistics.median(self._recent)
        if self._slow:
            self._slow = now > self.factor / 2 * usual
            return None
        if now <= self.factor * usual:
            return None
        self._slow = True
        return (
            f"the last {len(self._recent)} steps took {now:.3g} s each (median), {now / usual:.1f}x this run's usual "
            f"{usual:.3g} s: is another process using the CPU? The time budget keeps counting; on a shared "
            "machine run with fewer threads than cores (--threads 1), or alone"
        )
