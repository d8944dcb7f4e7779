"""What the training loop (`loop.fit`) takes from the command line, read once into `Settings`,
and the test hook that stops a run as a crash would."""

import math
import os
from dataclasses import dataclass
from pathlib import Path

from .clock import crossed_multiple
from .options import fail

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
