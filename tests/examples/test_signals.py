"""Terminal stops: they stop a run wherever it is, and cost its training time nothing.

Nothing here sleeps or times: the clock is fake, and the test waits for a child's stop itself."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from common import signals
from common.pacing import TrainingClock


@pytest.mark.skipif(not hasattr(signal, "SIGTSTP"), reason="needs SIGTSTP")
def test_a_terminal_stop_does_not_count_as_training_time(monkeypatch):
    """`kill -TSTP` stops a training process; the time until `kill -CONT` is not charged to the budget.
    The stop is faked: where the process would stand stopped, the clock's time source moves on 100 s
    (that a real stop stops the process: `test_a_terminal_stop_stops_a_run_left_in_its_own_session`)."""
    now = [0.0]

    def stand_stopped(signum, frame):
        now[0] += 100.0

    monkeypatch.setattr(signals, "_stop_this_process", stand_stopped)
    clock = TrainingClock(now=lambda: now[0])
    before = signal.getsignal(signal.SIGTSTP)
    with signals.stops_off_the_clock(clock):
        now[0] += 1.0
        signal.raise_signal(signal.SIGTSTP)  # its Python handler runs before this returns
        now[0] += 2.0
    assert now[0] == 103.0  # the stop came, in the middle of the training time
    assert clock.lap() == 3.0  # the 100 s spent stopped are not in the lap
    assert signal.getsignal(signal.SIGTSTP) == before  # the block leaves the handler as it was


TERMINAL_STOP_CHILD = """
import contextlib, sys
sys.path.insert(0, sys.argv[1])
from common import signals
from common.pacing import TrainingClock
handler = sys.argv[2]
if handler == "stop_on_terminal_stop":
    signals.stop_on_terminal_stop()
training = signals.stops_off_the_clock(TrainingClock()) if handler == "stops_off_the_clock" else contextlib.nullcontext()
with training:
    print("ready", flush=True)
    sys.stdin.readline()  # the stop arrives while this waits
"""


@pytest.mark.skipif(
    not hasattr(signal, "SIGTSTP") or not hasattr(os, "WUNTRACED"), reason="needs SIGTSTP and waitpid's WUNTRACED"
)
@pytest.mark.parametrize(
    ("handler", "stops"), [("stop_on_terminal_stop", True), ("stops_off_the_clock", True), ("default", False)]
)
def test_a_terminal_stop_stops_a_run_left_in_its_own_session(handler, stops):
    """A run in an orphaned process group (its own session, as `setsid` leaves it) discards a default
    SIGTSTP; with `stop_on_terminal_stop` it stops, as the scripts' runs must outside the training loop,
    and inside it `stops_off_the_clock` stops it; continued, it goes on. Nothing is timed: the test
    waits for the child's stop (waitpid), and a child that discards the stop answers at once."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    child = subprocess.Popen(
        [sys.executable, "-c", TERMINAL_STOP_CHILD, str(examples), handler],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    watchdog = threading.Timer(60, child.kill)  # a child that never stops fails the test, not hangs it
    watchdog.start()
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTSTP)
        if stops:
            _, status = os.waitpid(child.pid, os.WUNTRACED)  # returns once the child has stopped
            assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP  # by the handler
            child.send_signal(signal.SIGCONT)
        # A pending signal is handled before the child's read returns: a discarded stop is gone by
        # the time it reads this line, and a stopped child would never answer.
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        watchdog.cancel()
        child.kill()
