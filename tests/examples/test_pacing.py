"""Training time (on a fake clock), evaluation pacing by it, slowdown warnings and the stop test hook."""

import pytest
from common import pacing
from common.pacing import SlowdownDetector, TrainingClock, crossed_multiple

from .conftest import load_script


@pytest.mark.parametrize(
    "before, after, interval, expected",
    [
        (0.0, 0.9, 1.0, False),
        (0.9, 1.0, 1.0, True),
        (1.0, 1.5, 1.0, False),
        (0.5, 2.5, 1.0, True),
        (2.9, 6.1, 3.0, True),
    ],
)
def test_crossed_multiple_marks_the_step_that_passes_each_interval(before, after, interval, expected):
    assert crossed_multiple(before, after, interval) == expected


def test_training_clock_counts_everything_between_laps_but_the_pauses():
    """Batch fetching and waiting on the device count as training; evaluation and saving do not."""
    now = [100.0]
    clock = TrainingClock(now=lambda: now[0])
    now[0] += 2.0  # fetch a batch, launch the step
    assert clock.lap() == 2.0
    now[0] += 0.5  # wait for the device, log
    with clock.paused():
        now[0] += 30.0  # evaluate and save
    now[0] += 1.0  # the next step
    assert clock.lap() == 1.5  # the half second before the pause is banked, not lost
    assert clock.lap() == 0.0


def test_training_clock_pauses_nest():
    """A terminal stop during an evaluation must not bank the time before the evaluation twice."""
    now = [0.0]
    clock = TrainingClock(now=lambda: now[0])
    now[0] += 1.0
    with clock.paused():
        now[0] += 10.0
        with clock.paused():
            now[0] += 100.0
        now[0] += 10.0
    now[0] += 2.0
    assert clock.lap() == 3.0


def test_the_crash_of_the_resume_tests_is_a_test_hook_not_an_option(monkeypatch):
    """`TALK_HF_TEST_STOP_AFTER_STEPS` (see test_train_resume.py) is read by the loop; no flag sets it."""
    with pytest.raises(SystemExit):  # argparse: unrecognized arguments
        load_script("translation/train.py").parse_args(["--output_dir", "x", "--stop_after_steps", "3"])
    monkeypatch.delenv(pacing.STOP_AFTER_STEPS, raising=False)
    assert pacing.stop_after_steps_hook() is None
    monkeypatch.setenv(pacing.STOP_AFTER_STEPS, "7")
    assert pacing.stop_after_steps_hook() == 7
    for value in ("0", "-1", "seven"):
        monkeypatch.setenv(pacing.STOP_AFTER_STEPS, value)
        with pytest.raises(SystemExit, match=f"^error: {pacing.STOP_AFTER_STEPS} .* >= 1, not '{value}'"):
            pacing.stop_after_steps_hook()


def test_slowdown_detector_warns_once_when_steps_suddenly_slow_down():
    """Synthetic step times: 0.15 s steps with noise, then 13x slower (another process on the CPU)."""
    detector = SlowdownDetector(factor=4.0, window=10, warmup=20)
    usual = [0.15 * (1 + 0.3 * ((i * 7) % 5 - 2) / 2) for i in range(100)]  # 0.105 .. 0.195 s
    assert [detector.add(s) for s in usual] == [None] * 100
    assert all(detector.add(s) is None for s in [0.6] * 4)  # a few slow steps: the window's median holds
    warnings = [detector.add(s) for s in [2.0] * 30]
    assert sum(w is not None for w in warnings) == 1  # once, not at every slow step
    message = next(w for w in warnings if w is not None)
    assert "this run's usual 0.15 s" in message and "--threads 1" in message
    assert all(detector.add(s) is None for s in usual[:30])  # back to normal: quiet, and armed again
    assert sum(detector.add(s) is not None for s in [2.0] * 30) == 1


def test_slowdown_detector_stays_quiet_for_slow_starts_and_steady_runs():
    detector = SlowdownDetector(factor=4.0, window=10, warmup=20)
    assert all(detector.add(s) is None for s in [5.0] * 5 + [0.2] * 200)  # slow first steps (warm-up)
    steady = SlowdownDetector()
    assert all(steady.add(1.0 + 0.5 * (i % 2)) is None for i in range(1000))  # alternating 1.0 / 1.5 s
