"""The start-up thread count: one thread per core that other processes leave free, `--threads` overriding.

The load is injected: nothing here measures or times the machine.
"""

from types import SimpleNamespace

import pytest
import torch
from common import threads
from common.threads import CpuSnapshot, choose_threads, load_between, set_threads


@pytest.mark.parametrize(
    "cores, busy, most, processes, expected",
    [
        (2, 0.0, 2, 1, 2),  # an idle machine: torch's own count
        (2, 0.1, 2, 1, 2),  # background noise takes no core
        (2, 1.0, 2, 1, 1),  # another process holds one of two cores (issue #42's main job)
        (2, 0.6, 2, 1, 1),  # a core busy more than half the time counts as taken
        (2, 2.0, 2, 1, 1),  # every core busy: still one thread
        (16, 0.0, 8, 1, 8),  # never more than torch's own count (physical cores, OMP_NUM_THREADS)
        (8, 2.0, 8, 2, 3),  # two processes of the run share the free cores
    ],
)
def test_threads_are_the_free_cores(cores, busy, most, processes, expected):
    assert choose_threads(cores, busy, most, processes) == expected


def test_load_of_others_is_the_busy_time_less_our_own():
    before = CpuSnapshot(busy=[10.0, 20.0], own=1.0, wall=100.0)
    after = CpuSnapshot(busy=[10.5, 20.5], own=1.4, wall=100.5)  # both CPUs busy; 0.4 s of it ours
    assert load_between(before, after, [0, 1]) == pytest.approx(1.2)
    assert load_between(before, after, [1]) == pytest.approx(0.2)  # only the CPUs we may run on
    idle = CpuSnapshot(busy=[10.0, 20.1], own=1.2, wall=100.5)  # our own time only (counters lag a bit)
    assert load_between(before, idle, [0, 1]) == 0.0


@pytest.fixture
def thread_calls(monkeypatch):
    """torch's thread count without touching the real one: the counts set, torch's own count 2, two cores."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(threads, "available_cores", lambda: [0, 1])
    return calls


def fake_accelerator(device="cpu", processes=1):
    lines = []
    return SimpleNamespace(device=torch.device(device), num_processes=processes, print=lines.append), lines


def test_a_cpu_run_on_a_busy_machine_takes_the_free_core_and_says_so(thread_calls):
    accelerator, lines = fake_accelerator()
    set_threads(accelerator, None, measure=lambda cores: 1.0)
    assert thread_calls == [1]
    assert len(lines) == 1 and lines[0].startswith("threads: 1 (other processes kept 1.0 of the 2 cores busy")
    assert "--threads N sets the count" in lines[0]


def test_a_cpu_run_on_an_idle_machine_keeps_every_core(thread_calls):
    accelerator, lines = fake_accelerator()
    set_threads(accelerator, None, measure=lambda cores: 0.05)
    assert thread_calls == [2] and lines[0].startswith("threads: 2 ")


def not_measured(cores):
    raise AssertionError("the load was measured")


def test_threads_flag_overrides_without_measuring(thread_calls):
    accelerator, lines = fake_accelerator()
    set_threads(accelerator, 2, measure=not_measured)
    assert thread_calls == [2] and lines == []


def test_gpu_runs_keep_torchs_count(thread_calls):
    accelerator, lines = fake_accelerator("cuda")
    set_threads(accelerator, None, measure=not_measured)
    assert thread_calls == [] and lines == []
