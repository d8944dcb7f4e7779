"""benchmarks/_timing.py with a fake clock: warm-up calls are untimed, rounds interleave the compared
functions, and each `Timing` holds the right calls, best and median."""

import pytest
from _timing import Laps, Stopwatch, Timing, interleaved, round_order, spread


class FakeClock:
    """A wall and a CPU clock that move only when a fake function says it ran for some seconds."""

    def __init__(self):
        self.wall_now, self.cpu_now = 0.0, 0.0

    def run_for(self, wall: float, cpu: float | None = None) -> None:
        self.wall_now += wall
        self.cpu_now += wall if cpu is None else cpu

    def stopwatch(self) -> Stopwatch:
        return Stopwatch(wall=lambda: self.wall_now, cpu=lambda: self.cpu_now)


def scripted(clock: FakeClock, log: list, name: str, seconds: list[float]):
    """A function that logs (name, call number) and takes the next of ``seconds`` on the clock."""
    durations = iter(seconds)

    def function(number):
        log.append((name, number))
        clock.run_for(next(durations))
        return f"{name}{number}"

    return function


def test_warm_up_calls_are_not_timed_and_rounds_alternate():
    clock, log = FakeClock(), []
    functions = {
        "A": scripted(clock, log, "A", [100.0, 100.0, 3.0, 1.0, 2.0]),  # two slow warm-up calls
        "B": scripted(clock, log, "B", [50.0, 50.0, 6.0, 4.0, 5.0]),
    }
    timings = interleaved(functions, rounds=3, warmup=2, stopwatch=clock.stopwatch())
    assert log == [("A", 0), ("A", 1), ("B", 0), ("B", 1)] + [(n, r) for r in range(3) for n in "AB"]
    assert timings["A"].wall_s == (3.0, 1.0, 2.0) and timings["B"].wall_s == (6.0, 4.0, 5.0)
    assert timings["A"].values == ("A0", "A1", "A2")
    assert (timings["A"].best_s, timings["A"].median_s, timings["A"].total_s) == (1.0, 2.0, 6.0)
    assert (timings["B"].best_s, timings["B"].median_s) == (4.0, 5.0)


def test_calls_per_round_are_each_timed_and_numbered_across_rounds():
    clock, log = FakeClock(), []
    functions = {name: scripted(clock, log, name, [1.0, 2.0, 3.0, 4.0]) for name in "AB"}
    timings = interleaved(functions, rounds=2, calls=2, warmup=0, stopwatch=clock.stopwatch())
    assert log == [("A", 0), ("A", 1), ("B", 0), ("B", 1), ("A", 2), ("A", 3), ("B", 2), ("B", 3)]
    assert timings["B"].wall_s == (1.0, 2.0, 3.0, 4.0)
    assert timings["B"].median_s == 2.5  # an even count: the mean of the middle two


def test_rotated_rounds_start_one_further_each_round():
    assert [round_order("ABC", r, rotate=True) for r in range(4)] == [
        list("ABC"),
        list("BCA"),
        list("CAB"),
        list("ABC"),
    ]
    assert round_order("ABC", 2, rotate=False) == list("ABC")
    clock, log = FakeClock(), []
    functions = {name: scripted(clock, log, name, [1.0] * 2) for name in "AB"}
    interleaved(functions, rounds=2, warmup=0, rotate=True, stopwatch=clock.stopwatch())
    assert [name for name, _ in log] == ["A", "B", "B", "A"]


def test_cpu_seconds_are_kept_apart_from_wall_seconds():
    clock = FakeClock()
    costs = iter([(4.0, 1.0), (8.0, 3.0), (6.0, 2.0)])  # (wall, CPU): another process took the rest

    def function(number):
        clock.run_for(*next(costs))

    timing = interleaved({"A": function}, rounds=3, warmup=0, stopwatch=clock.stopwatch())["A"]
    assert timing.wall_s == (4.0, 8.0, 6.0) and timing.cpu_s == (1.0, 3.0, 2.0)
    assert (timing.median_s, timing.cpu_median_s, timing.cpu_total_s) == (6.0, 2.0, 6.0)


def test_min_seconds_adds_rounds_until_every_function_has_that_much_up_to_max_rounds():
    clock, log = FakeClock(), []
    functions = {"fast": scripted(clock, log, "fast", [1.0] * 10), "slow": scripted(clock, log, "slow", [5.0] * 10)}
    timings = interleaved(functions, rounds=2, warmup=0, min_seconds=4.0, max_rounds=10, stopwatch=clock.stopwatch())
    assert len(timings["fast"].wall_s) == len(timings["slow"].wall_s) == 4  # fast reaches 4 s in 4 rounds
    capped = interleaved(functions, rounds=1, warmup=0, min_seconds=100.0, max_rounds=3, stopwatch=clock.stopwatch())
    assert len(capped["fast"].wall_s) == 3


def test_the_device_is_waited_for_before_each_reading(monkeypatch):
    import _timing

    waits = []
    monkeypatch.setattr(_timing, "synchronize", waits.append)
    clock = FakeClock()
    stopwatch = Stopwatch("cuda:0", wall=lambda: clock.wall_now, cpu=lambda: clock.cpu_now)
    interleaved({"A": lambda number: clock.run_for(1.0)}, rounds=2, warmup=0, stopwatch=stopwatch)
    assert waits == ["cuda:0"] * 4  # before and after each of the two calls


def test_laps_give_the_seconds_between_readings():
    clock = FakeClock()
    laps = Laps(clock.stopwatch())
    for seconds in (10.0, 1.0, 2.0, 4.0):
        clock.run_for(seconds, seconds / 2)
        laps.mark()
    assert laps.intervals() == ([1.0, 2.0, 4.0], [0.5, 1.0, 2.0])
    assert laps.intervals(skip=1) == ([2.0, 4.0], [1.0, 2.0])


def test_spread_and_timing_figures():
    assert spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0}
    timing = Timing((2.0, 1.0, 9.0), (1.0, 1.0, 1.0), (None, None, None))
    assert (timing.best_s, timing.median_s) == (1.0, 2.0)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(rounds=0), "rounds must be at least 1, got 0"),
        (dict(rounds=1, calls=0), "calls must be at least 1, got 0"),
        (dict(rounds=1, warmup=-1), "warmup must be at least 0, got -1"),
        (dict(rounds=3, max_rounds=2), r"max_rounds \(2\) must be at least rounds \(3\)"),
    ],
)
def test_bad_settings_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        interleaved({"A": lambda number: None}, **options)


def test_nothing_to_time_or_to_summarise_is_refused():
    with pytest.raises(ValueError, match="at least one function"):
        interleaved({}, rounds=1)
    with pytest.raises(ValueError, match="at least one figure"):
        spread([])
