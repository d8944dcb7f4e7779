"""When the training loop (`loop.fit`) evaluates, saves and stops, and the training time it paces
that by.

`Settings` is what `fit` reads of the command line, once: the step count, the time budget
(`--max_train_minutes`), the evaluation and save intervals, and the test hook `STOP_AFTER_STEPS`
that stops a run as a crash would. Training time (`TrainingClock`) is wall time without evaluation,
saving and the spans a terminal stop holds the process (`signals.stops_off_the_clock`): a fixed
budget buys the same training whatever else the run does. `SlowdownDetector` notices when the steps
suddenly take longer, as they do when another process takes the CPU.
"""

import math
import os
import statistics
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .messages import fail

# A test hook, not an option: set to a step number N, it makes the loop stop the run right after step
# N without saving (SystemExit, exit status 0), as a crash would; the exact-resume tests resume it.
STOP_AFTER_STEPS = "TALK_HF_TEST_STOP_AFTER_STEPS"


@dataclass(frozen=True)
class Settings:
    """What `fit` takes from the command line (`options.add_training_options`), read once."""

    output_dir: Path
    resume: bool  # continue from the saved state in output_dir
    max_steps: int  # the optimizer steps to train (`optimizer_steps.total_steps`)
    budget_seconds: float  # and at most this much training time (math.inf: no limit)
    eval_every: int  # steps between evaluations,
    eval_every_seconds: float | None  # or seconds of training time between them, when given
    save_every: int  # steps between saves of last/ and state/
    log_every: int  # steps between step records in log.jsonl
    clip_norm: float  # the gradients' largest norm (0: no clipping)
    smoothed: bool  # the training loss is label-smoothed (--label_smoothing > 0)
    average_last: int  # evaluate the mean weights of the last N evaluations at the end (0: off)
    metric: str  # the key of the evaluation's result that picks best/
    maximize: bool  # whether a higher `metric` is better
    stop_after_steps: int | None  # the test hook `STOP_AFTER_STEPS`

    @classmethod
    def from_args(cls, args, *, max_steps, metric, maximize):
        return cls(
            output_dir=Path(args.output_dir),
            resume=args.resume,
            max_steps=max_steps,
            budget_seconds=math.inf if args.max_train_minutes is None else 60 * args.max_train_minutes,
            eval_every=args.eval_every,
            eval_every_seconds=None if args.eval_every_minutes is None else 60 * args.eval_every_minutes,
            save_every=args.save_every,
            log_every=args.log_every,
            clip_norm=args.clip_norm,
            smoothed=args.label_smoothing > 0,
            average_last=args.average_last,
            metric=metric,
            maximize=maximize,
            stop_after_steps=stop_after_steps_hook(),
        )

    def finished(self, progress):
        """Whether training is done: `max_steps` steps, or the time budget spent."""
        return progress.step >= self.max_steps or progress.train_seconds >= self.budget_seconds

    def evaluation_due(self, progress, seconds_before):
        """Whether the step that brought training time from `seconds_before` to `progress`'s ends
        with an evaluation: every `eval_every` steps, or each time training time passes a multiple
        of `eval_every_seconds` when that is given."""
        if self.eval_every_seconds is None:
            return progress.step % self.eval_every == 0
        return crossed_multiple(seconds_before, progress.train_seconds, self.eval_every_seconds)

    def save_due(self, progress):
        """Whether the step `progress` stands at ends with a save of last/ and state/."""
        return progress.step % self.save_every == 0

    def stop_for_test(self, progress):
        """Whether the test hook `STOP_AFTER_STEPS` stops the run at the step `progress` stands at."""
        return self.stop_after_steps is not None and progress.step >= self.stop_after_steps


def stop_after_steps_hook():
    """The step number of the test hook `STOP_AFTER_STEPS`, None where it is not set."""
    value = os.environ.get(STOP_AFTER_STEPS)
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        fail(f"{STOP_AFTER_STEPS} (a test hook) must be a step number >= 1, not {value!r}")
    return int(value)


def crossed_multiple(before, after, interval):
    """Whether some whole multiple of `interval` (> 0) lies in (before, after]."""
    return math.floor(after / interval) > math.floor(before / interval)


class TrainingClock:
    """Wall time spent training: everything between the laps except the spans spent `paused()`.

    A step's `lap()` therefore holds fetching its batches, launching its work and waiting for the
    device to finish the previous step (a GPU runs behind the host, so time measured from a step's
    start to its last launch alone misses most of the device's work), but not evaluation or
    saving. Time before a pause is banked and handed out with the next lap. Pauses may nest (a
    terminal stop during an evaluation): only the outermost one banks and restarts the clock.

    Args:
        now: the time source, seconds from any fixed start (the tests give a fake one).
    """

    def __init__(self, now=time.perf_counter):
        self._now = now
        self._mark = now()
        self._banked = 0.0
        self._pause_depth = 0

    def lap(self) -> float:
        """Seconds of training since the last lap (or since the clock was made)."""
        now = self._now()
        seconds, self._mark, self._banked = self._banked + now - self._mark, now, 0.0
        return seconds

    @contextmanager
    def paused(self):
        """A span that is not training time (evaluation, saving, a stopped process)."""
        if self._pause_depth == 0:
            self._banked += self._now() - self._mark
        self._pause_depth += 1
        try:
            yield
        finally:
            self._pause_depth -= 1
            if self._pause_depth == 0:
                self._mark = self._now()


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
