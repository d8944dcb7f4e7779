"""tests/processes.py: a command's timeout (or an interrupt) ends every process it started, wherever
that one went; otherwise the command runs as under subprocess.run."""

import os
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from . import processes


def launch(new_session: bool) -> str:
    """Python code that starts, as ``child``, a process that sleeps for a minute (in a session of its
    own if ``new_session``, as torch's elastic launcher, under ``accelerate launch``, starts each rank)."""
    sleeper = "import time; time.sleep(60)"
    start = f"subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session={new_session})"
    return f"import subprocess, sys; child = {start}"


# Commands that print the pid of the sleeping process they started, then wait.
PARENTS = {
    "in the command's process group": launch(False) + "; print(child.pid, flush=True); child.wait()",
    "in a session of its own": launch(True) + "; print(child.pid, flush=True); child.wait()",
    # its parent exited: out of the command's tree as well as its group
    "orphaned, in a session of its own": (
        "import subprocess, sys, time; "
        f"subprocess.run([sys.executable, '-c', {launch(True) + '; print(child.pid)'!r}]); "
        "time.sleep(60)"
    ),
}


def running(pid: int) -> bool:
    """Whether the process ``pid`` exists and is no zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_ended(printed: str) -> None:
    """The process whose pid the command ``printed`` is gone (and is killed if not, failing the test)."""
    assert printed.strip().isdigit(), f"the command printed no pid before it was stopped: {printed!r}"
    pid = int(printed)
    if running(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the command's child {pid} outlived the command")


@pytest.mark.parametrize("where", PARENTS)
def test_a_timeout_kills_the_processes_the_command_started(where):
    command = [sys.executable, "-c", PARENTS[where]]
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        processes.run(command, timeout=3)
    assert stopped.value.cmd == command and stopped.value.timeout == 3
    assert_ended(stopped.value.stdout)  # the output written before the timeout comes with it, as text


def test_an_interrupt_of_the_wait_kills_the_processes_too(tmp_path):
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        pytest.skip("needs SIGALRM's handler in the main thread")

    class Interrupted(Exception):
        pass

    def interrupt(*_):
        raise Interrupted

    pid_file = tmp_path / "pid"
    parent = launch(True) + f"; open({str(pid_file)!r}, 'w').write(str(child.pid))"
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 3)
    try:
        with pytest.raises(Interrupted):
            processes.run([sys.executable, "-c", parent + "; child.wait()"], timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert_ended(pid_file.read_text() if pid_file.exists() else "")


def test_output_exit_status_environment_and_folder_are_those_of_subprocess_run(tmp_path):
    code = (
        "import os, sys; print(os.environ['TALK_HF_TEST_VALUE'], os.getcwd()); "
        "print('error\\r\\nlines', file=sys.stderr); sys.exit(3)"
    )
    command = [sys.executable, "-c", code]
    env = {**os.environ, "TALK_HF_TEST_VALUE": "given"}
    ours = processes.run(command, timeout=60, env=env, cwd=tmp_path)
    theirs = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (ours.args, ours.returncode, ours.stdout, ours.stderr) == (
        theirs.args,
        theirs.returncode,
        theirs.stdout,
        theirs.stderr,
    )
    assert ours.returncode == 3 and ours.stdout == f"given {tmp_path}\n" and ours.stderr == "error\nlines\n"
    with pytest.raises(subprocess.CalledProcessError) as failed:
        processes.run(command, timeout=60, env=env, cwd=tmp_path, check=True)
    assert failed.value.returncode == 3 and failed.value.stderr == "error\nlines\n"
