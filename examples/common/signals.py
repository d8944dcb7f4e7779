"""Terminal stops (Ctrl-Z, `kill -TSTP`): they stop a training script wherever it is, and cost
its time budget nothing.

Both functions do nothing where there is no SIGTSTP (Windows) or off the main thread (Python
installs signal handlers only there).
"""

import os
import signal
import threading
from contextlib import contextmanager


def _can_handle_stops():
    return hasattr(signal, "SIGTSTP") and threading.current_thread() is threading.main_thread()


def stop_on_terminal_stop():
    """Make a terminal stop stop this process however it was started; call it first thing in a script.

    A process whose process group is orphaned (started with `setsid`, or `nohup ... &` from a shell
    that has exited: the usual way to leave a long run behind) discards a SIGTSTP that has its
    default action, so `kill -TSTP` stopped such a run only inside `stops_off_the_clock`, not while
    it loaded data or evaluated the test set. With this handler it stops everywhere; inside
    `stops_off_the_clock` the handler that also pauses the clock takes over.
    """
    if _can_handle_stops():
        signal.signal(signal.SIGTSTP, _stop_this_process)


def _stop_this_process(signum, frame):
    os.kill(os.getpid(), signal.SIGSTOP)  # returns once somebody sends SIGCONT


@contextmanager
def stops_off_the_clock(clock):
    """Make a terminal stop stop the process without charging the training time of `clock`.

    Inside the block, SIGTSTP pauses `clock` (a `pacing.TrainingClock`), stops the process and,
    once it is continued (`fg`, `kill -CONT`), restarts the clock: a time-budgeted run can be
    stopped to free the machine for a while and still trains for its whole budget.
    """
    if not _can_handle_stops():
        yield
        return

    def stop(signum, frame):
        with clock.paused():
            _stop_this_process(signum, frame)

    previous = signal.signal(signal.SIGTSTP, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous)
