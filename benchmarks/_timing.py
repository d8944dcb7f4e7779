"""How the benchmarks time what they compare, so that every ratio in their JSON is taken one way.

* `Stopwatch` reads the wall clock (``time.perf_counter``) and this process's CPU clock
  (``time.process_time``), first waiting for a CUDA device's queued work when it has one.
* `interleaved` times the things a benchmark compares: untimed warm-up calls of each, then rounds
  that call each in turn (A, B, A, B, ...), so that load from other processes on a shared machine
  hits them alike.  Each thing's calls come back as a `Timing`: its best and median seconds.
* `Laps` takes readings from inside a loop that the benchmark does not drive (a `generate`
  streamer's callback): the seconds between them.
* `spread`: the min, median and max of figures taken over rounds.

Both clocks can be replaced (tests give a fake one).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from _device import synchronize


class Stopwatch:
    """Wall and CPU clock readings, taken once ``device``'s queued work is done (None: no device
    to wait for; a CPU device waits for nothing)."""

    def __init__(
        self,
        device: torch.device | str | None = None,
        *,
        wall: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.process_time,
    ):
        self.device, self.wall, self.cpu = device, wall, cpu

    def read(self) -> tuple[float, float]:
        """(wall, CPU) seconds now, after waiting for the device."""
        if self.device is not None:
            synchronize(self.device)
        return self.wall(), self.cpu()

    def time(self, function: Callable, *args) -> tuple[object, float, float]:
        """Call ``function(*args)``: (what it returned, wall seconds, CPU seconds it took)."""
        start_wall, start_cpu = self.read()
        value = function(*args)
        end_wall, end_cpu = self.read()
        return value, end_wall - start_wall, end_cpu - start_cpu


@dataclass(frozen=True)
class Timing:
    """The timed calls of one compared thing, in the order they ran."""

    wall_s: tuple[float, ...]  # wall-clock seconds of each call
    cpu_s: tuple[float, ...]  # this process's CPU seconds of each call
    values: tuple  # what each call returned

    @property
    def best_s(self) -> float:
        """The fastest call's wall seconds: the figure least inflated by other processes."""
        return min(self.wall_s)

    @property
    def median_s(self) -> float:
        """The median call's wall seconds."""
        return statistics.median(self.wall_s)

    @property
    def cpu_median_s(self) -> float:
        """The median call's CPU seconds (on a CPU run, not inflated by other processes' load)."""
        return statistics.median(self.cpu_s)

    @property
    def total_s(self) -> float:
        """Wall seconds of all the calls."""
        return sum(self.wall_s)

    @property
    def cpu_total_s(self) -> float:
        """CPU seconds of all the calls."""
        return sum(self.cpu_s)


def round_order(names: Sequence[Hashable], round_index: int, rotate: bool) -> list[Hashable]:
    """The order round ``round_index`` calls ``names`` in: as given, or (``rotate``) starting one
    further each round, so that each goes first (after another one's work) equally often."""
    shift = round_index % len(names) if rotate else 0
    return [*names[shift:], *names[:shift]]


def interleaved(
    functions: Mapping[Hashable, Callable[[int], object]],
    *,
    rounds: int,
    calls: int = 1,
    warmup: int = 1,
    rotate: bool = False,
    min_seconds: float = 0.0,
    max_rounds: int | None = None,
    stopwatch: Stopwatch | None = None,
) -> dict[Hashable, Timing]:
    """Time the compared ``functions`` in interleaved rounds; name -> `Timing` of its timed calls.

    First each function runs ``warmup`` untimed calls, one function after another.  Then each round
    calls every function ``calls`` times in a row, each call timed on its own, in `round_order`.
    A function receives its call's number: 0, 1, ... over its warm-up calls, then 0, 1, ... again
    over its timed calls (round r's c-th call: r * calls + c), so that it can pick that call's data.

    rounds: the rounds run; with ``min_seconds``, more follow (up to ``max_rounds``) while any
        function's timed calls add up to less than ``min_seconds`` of wall time.
    stopwatch: the clocks and the device waited for (default: `Stopwatch()`, no device).
    """
    if not functions:
        raise ValueError("interleaved needs at least one function to time; got none")
    for name, value, least in (("rounds", rounds, 1), ("calls", calls, 1), ("warmup", warmup, 0)):
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    max_rounds = rounds if max_rounds is None else max_rounds
    if max_rounds < rounds:
        raise ValueError(f"max_rounds ({max_rounds}) must be at least rounds ({rounds})")
    stopwatch = stopwatch or Stopwatch()
    for function in functions.values():
        for number in range(warmup):
            function(number)
    names = list(functions)
    measured = {name: ([], [], []) for name in names}  # name -> (wall, CPU, values)
    round_index = 0
    while round_index < rounds or (
        round_index < max_rounds and min(sum(measured[name][0]) for name in names) < min_seconds
    ):
        for name in round_order(names, round_index, rotate):
            for call in range(calls):
                value, wall, cpu = stopwatch.time(functions[name], round_index * calls + call)
                for kept, figure in zip(measured[name], (wall, cpu, value), strict=True):
                    kept.append(figure)
        round_index += 1
    return {name: Timing(tuple(wall), tuple(cpu), tuple(values)) for name, (wall, cpu, values) in measured.items()}


class Laps:
    """Readings of a `Stopwatch` taken from inside a loop the benchmark does not drive (``mark`` from
    a callback), and the seconds between them."""

    def __init__(self, stopwatch: Stopwatch):
        self.stopwatch = stopwatch
        self.readings: list[tuple[float, float]] = []

    def mark(self) -> None:
        """Take a reading now (after the device's queued work)."""
        self.readings.append(self.stopwatch.read())

    def intervals(self, skip: int = 0) -> tuple[list[float], list[float]]:
        """(wall, CPU) seconds between consecutive readings, leaving out the first ``skip`` readings."""
        pairs = list(itertools.pairwise(self.readings[skip:]))
        return [later[0] - earlier[0] for earlier, later in pairs], [later[1] - earlier[1] for earlier, later in pairs]


def spread(figures) -> dict[str, float]:
    """The min, median and max of ``figures`` (e.g. one ratio per round)."""
    figures = list(figures)
    if not figures:
        raise ValueError("spread needs at least one figure; got none")
    return {"min": min(figures), "median": statistics.median(figures), "max": max(figures)}
