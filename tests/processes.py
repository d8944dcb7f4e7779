"""Commands the tests run in child processes, ended with every process they started when they time out.

``subprocess.run(..., timeout=...)`` kills only the process it started, and what that one started
lives on after the test: the ranks of a launcher (torch's elastic launcher, which ``accelerate
launch`` runs, starts each rank in a session of its own), the compiler jobs of a kernel build, the
stages ``benchmarks/gpu_suite.sh`` runs under ``timeout`` (a process group of their own).  :func:`run`
starts a command in a new session with a variable named for this run in its environment, which every
process it starts inherits; on a timeout (or an interrupt) it kills the command's process group and
every process whose environment holds that variable, in whatever session, and waits until they are
gone.  Only a process that both clears its environment and leaves the group escapes.  (psutil, which
reads the other processes' environments, comes with accelerate.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import IO

import psutil

MARKER_PREFIX = "TALK_HF_TEST_RUN_"  # + a fresh id per run, so that a run inside a run keeps both
KILL_WAIT = 60  # seconds the killed processes get to be gone before run() gives up on them


def run(
    command: Sequence[str | os.PathLike],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
    check=check)``, except that a timeout kills every process the command started, not only the
    command, before it raises :class:`subprocess.TimeoutExpired` with the output (text) written until
    then.  ``env``: the command's whole environment (default: this process's)."""
    marker = MARKER_PREFIX + uuid.uuid4().hex
    environment = {**(os.environ if env is None else env), marker: "1"}
    # Files, not pipes: a process outside the command's tree that holds its output cannot make the
    # reading of it wait.
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command, cwd=cwd, env=environment, stdout=stdout, stderr=stderr, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_all_started(process, marker)
            raise subprocess.TimeoutExpired(command, timeout, _written(stdout), _written(stderr)) from None
        except BaseException:  # an interrupt of this wait (Ctrl-C, a test timeout) ends them too
            kill_all_started(process, marker)
            raise
        result = subprocess.CompletedProcess(command, process.returncode, _written(stdout), _written(stderr))
    if check:
        result.check_returncode()
    return result


def kill_all_started(process: subprocess.Popen, marker: str) -> None:
    """SIGKILL ``process`` (started in a session of its own), its process group and every process
    whose environment holds the variable ``marker``, again until none is left, then reap ``process``.
    Raises RuntimeError naming the processes still there after :data:`KILL_WAIT` seconds."""
    deadline = time.monotonic() + KILL_WAIT
    # Not reaped before the end, `process` keeps its pid, which is its group's id, from being reused.
    while left := _still_running(process.pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for each in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                each.kill()
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {[each.pid for each in left]} of {process.args} outlived SIGKILL")
        time.sleep(0.01)
    process.wait()


def _still_running(group: int, marker: str) -> list[psutil.Process]:
    """The processes, zombies aside, in the process group ``group`` or with ``marker`` in their
    environment (another user's processes cannot be read, and are none of them)."""
    found = []
    for each in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):  # gone, a zombie, or not readable
            if each.status() != psutil.STATUS_ZOMBIE and (os.getpgid(each.pid) == group or marker in each.environ()):
                found.append(each)
    return found


def _written(output: IO[str]) -> str:
    """What the processes wrote to ``output`` (a text file they share), read from its start."""
    output.seek(0)
    return output.read()
