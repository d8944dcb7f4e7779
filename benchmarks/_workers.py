"""Work held in a process of its own and driven one timed call at a time, so that compared models
can alternate call by call (`_timing.interleaved`) while each keeps its own peak memory.

A `Work` is built in the worker process and answers three requests: ``ready`` (what it reports
once built, e.g. its memory before the first call), ``run`` (one timed call) and ``finish`` (its
figures after the last call, e.g. its peak memory).  `serve` answers the requests that arrive as
lines on the worker's stdin with JSON lines on its stdout; `WorkerProcess` is the driving side,
with the same ``ready`` / ``run()`` / ``finish()``, so that a benchmark (or a test, with the `Work`
itself in its own process) drives either alike.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Protocol

from _train_step import failure_of


class Work(Protocol):
    """What a worker serves: ``ready`` once built, a dict per ``run()`` call, a dict at ``finish()``.
    The classes that serve it name it as their base, for `close`."""

    ready: dict

    def run(self) -> dict:
        """One measured call's record."""

    def finish(self) -> dict:
        """The work's last record, after its last call."""

    def close(self) -> None:
        """Release the work's process (a `Work` in this process holds none)."""


def serve(work: Work, requests: IO[str], replies: IO[str]) -> None:
    """Answer ``requests`` (lines ``run`` or ``finish``) with one JSON line each on ``replies``,
    after a first line with ``work.ready``; return after ``finish``.

    Raises:
        ValueError: a request other than ``run`` or ``finish``, or the requests ending before ``finish``.
    """

    def reply(answer: dict) -> None:
        replies.write(json.dumps(answer) + "\n")
        replies.flush()

    reply(work.ready)
    for line in requests:
        request = line.strip()
        if request == "run":
            reply(work.run())
        elif request == "finish":
            reply(work.finish())
            return
        else:
            raise ValueError(f"worker request {request!r}: expected 'run' or 'finish'")
    raise ValueError("the worker's requests ended before 'finish'")


def serve_stdio(make_work: Callable[[], Work]) -> None:
    """`serve` the work that ``make_work`` builds over this process's stdin and stdout; whatever
    else prints to stdout (the libraries' messages) goes to stderr, out of the replies."""
    replies, sys.stdout = sys.stdout, sys.stderr
    serve(make_work(), sys.stdin, replies)


class WorkerProcess(Work):
    """The driving side of a worker: ``command`` starts a process that `serve`s one `Work`.

    A worker that dies without its answer has run out of memory (killed by the kernel, or an
    allocator's message on its stderr: `_train_step.failure_of`); from then on every request answers
    ``{"status": "out of memory", "error": ...}``.  Any other death raises RuntimeError naming
    ``what`` the worker measured, with its stderr.
    """

    def __init__(self, command: list[str], what: str):
        self.what = what
        self.failure: dict | None = None
        self.stderr = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would block the worker
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )

    @functools.cached_property
    def ready(self) -> dict:
        """The work's first answer, once it is built (its failure when it died building)."""
        return self._answer()

    def run(self) -> dict:
        return self._request("run")

    def finish(self) -> dict:
        return self._request("finish")

    def _request(self, request: str) -> dict:
        self.ready  # noqa: B018  (the work's first answer is read before any other)
        if self.failure is None:
            try:
                self.process.stdin.write(request + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:  # the worker has died: _answer reads why
                pass
        return self._answer()

    def _answer(self) -> dict:
        if self.failure is not None:
            return self.failure
        line = self.process.stdout.readline()
        if line:
            return json.loads(line)
        returncode = self.process.wait()
        self.stderr.seek(0)
        self.failure = failure_of(self.what, returncode, self.stderr.read())
        return self.failure

    def close(self) -> None:
        """End the worker (when it is still running) and release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            stream.close()
