"""bench_train's worker processes (`benchmarks/_workers.py`): the request/answer protocol, and a
worker that dies: out of memory is a result, any other death an error naming what it measured.
The children here are small Python programs that play a worker, without torch."""

import io
import json
import sys
import textwrap

import pytest
from _workers import Work, WorkerProcess, serve


class CountingWork(Work):
    def __init__(self):
        self.ready, self.runs = {"memory_before_bytes": 5}, 0

    def run(self) -> dict:
        self.runs += 1
        return {"wall_s": float(self.runs)}

    def finish(self) -> dict:
        return {"peak_memory_bytes": 9}


def test_serve_answers_each_request_after_the_ready_line():
    replies = io.StringIO()
    serve(CountingWork(), io.StringIO("run\nrun\nfinish\nrun\n"), replies)  # nothing after finish is read
    answers = [json.loads(line) for line in replies.getvalue().splitlines()]
    assert answers == [{"memory_before_bytes": 5}, {"wall_s": 1.0}, {"wall_s": 2.0}, {"peak_memory_bytes": 9}]


@pytest.mark.parametrize(
    ("requests", "message"),
    [("run\nstep\n", r"worker request 'step': expected 'run' or 'finish'"), ("run\n", "ended before 'finish'")],
)
def test_serve_refuses_an_unknown_request_and_requests_without_finish(requests, message):
    with pytest.raises(ValueError, match=message):
        serve(CountingWork(), io.StringIO(requests), io.StringIO())


def child(body: str) -> list[str]:
    """A Python child that runs ``body`` (its replies: JSON lines on stdout)."""
    return [sys.executable, "-c", textwrap.dedent(body)]


PLAYS_A_WORKER = """
    import json, sys
    print(json.dumps({"memory_before_bytes": 1}), flush=True)
    for number, line in enumerate(sys.stdin):
        if line.strip() == "finish":
            print(json.dumps({"peak_memory_bytes": 3}), flush=True)
            break
        print(json.dumps({"wall_s": number + 0.5}), flush=True)
"""


def test_a_worker_process_is_driven_one_call_at_a_time():
    worker = WorkerProcess(child(PLAYS_A_WORKER), what="a model (train, source length 8)")
    try:
        assert worker.ready == {"memory_before_bytes": 1}
        assert [worker.run(), worker.run()] == [{"wall_s": 0.5}, {"wall_s": 1.5}]
        assert worker.finish() == {"peak_memory_bytes": 3}
    finally:
        worker.close()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (  # an allocator's message, after one answered call
            """
            import json, sys
            print(json.dumps({"memory_before_bytes": 1}), flush=True)
            sys.stdin.readline(); print(json.dumps({"wall_s": 1.0}), flush=True)
            sys.stdin.readline()
            sys.exit("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB")
            """,
            "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB",
        ),
        (  # the kernel's OOM killer
            """
            import json, os, signal, sys
            print(json.dumps({"memory_before_bytes": 1}), flush=True)
            sys.stdin.readline(); print(json.dumps({"wall_s": 1.0}), flush=True)
            sys.stdin.readline(); os.kill(os.getpid(), signal.SIGKILL)
            """,
            "killed (SIGKILL, out of memory)",
        ),
    ],
)
def test_a_worker_that_runs_out_of_memory_answers_so_from_then_on(body, error):
    worker = WorkerProcess(child(body), what="a model (train, source length 8)")
    try:
        assert worker.run() == {"wall_s": 1.0}
        failure = {"status": "out of memory", "error": error}
        assert [worker.run(), worker.run(), worker.finish()] == [failure] * 3
    finally:
        worker.close()


def test_a_worker_that_fails_while_building_is_out_of_memory_before_any_call():
    worker = WorkerProcess(child("import sys; sys.exit('torch.OutOfMemoryError: CUDA out of memory')"), what="x")
    try:
        assert worker.ready["status"] == "out of memory" and worker.run() == worker.ready
    finally:
        worker.close()


def test_a_worker_that_fails_otherwise_raises_with_its_stderr():
    worker = WorkerProcess(child("import sys; sys.exit('ValueError: unknown model')"), what="Nope (train, source 8)")
    try:
        with pytest.raises(
            RuntimeError, match=r"Nope \(train, source 8\) failed \(exit status 1\):\nValueError: unknown"
        ):
            worker.ready  # noqa: B018
    finally:
        worker.close()
