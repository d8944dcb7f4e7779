"""The start-up choice of torch's CPU thread count: one thread per core that other processes leave free.

torch's intra-op thread pool waits at every parallel operator for its slowest thread, and a thread
whose core another process holds runs only when the scheduler lets it: the Multi30k main job,
started on a two-core machine while another process held one core, trained 950 steps in its 10
minutes instead of about 3,500 on the idle machine. So a CPU run that is not told `--threads`
first measures, for `SAMPLE_SECONDS`, how many of its cores other processes keep busy
(`other_load`), takes one thread per core left free (at least one, at most torch's own count:
`choose_threads`) and says so in one line. `--threads N`
sets the count without measuring; GPU runs keep torch's default. The machine can get busier later:
`pacing.SlowdownDetector` warns when the steps slow down.
"""

import os
import time
from typing import NamedTuple

import psutil
import torch

SAMPLE_SECONDS = 0.5  # long enough to see a process that holds a core, short beside a run's start


class CpuSnapshot(NamedTuple):
    """CPU time counters at one moment (seconds)."""

    busy: list[float]  # per CPU number: time not idle since boot, every process's
    own: float  # this process's CPU time (user + system), all its threads
    wall: float  # a monotonic clock


def available_cores() -> list[int]:
    """The CPU numbers this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(psutil.cpu_count() or 1))


def cpu_snapshot() -> CpuSnapshot:
    """The CPU time counters now: per CPU, the time spent not idle (iowait counts as idle)."""
    busy = [
        t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
        for t in psutil.cpu_times(percpu=True)
    ]
    own = psutil.Process().cpu_times()
    return CpuSnapshot(busy=busy, own=own.user + own.system, wall=time.monotonic())


def load_between(before: CpuSnapshot, after: CpuSnapshot, cores: list[int]) -> float:
    """How many of the CPUs `cores` other processes kept busy between two snapshots, on average: the
    busy time of those CPUs less this process's own, over the wall time (0 to len(cores))."""
    busy = sum(after.busy[core] - before.busy[core] for core in cores)
    others = busy - (after.own - before.own)
    return min(float(len(cores)), max(0.0, others / max(after.wall - before.wall, 1e-9)))


def other_load(cores: list[int], seconds: float = SAMPLE_SECONDS) -> float:
    """How many of `cores` other processes keep busy: measured over `seconds` while this one sleeps."""
    before = cpu_snapshot()
    time.sleep(seconds)
    return load_between(before, cpu_snapshot(), cores)


def choose_threads(cores: int, busy: float, most: int, processes: int = 1) -> int:
    """Threads per process for `cores` cores of which other processes keep `busy` busy (a core
    counts as taken when it is busy more than half the time), shared by `processes` processes of
    this run: at least 1, at most `most` (torch's own count)."""
    free = round(cores - busy)
    return max(1, min(most, free // processes))


def set_threads(accelerator, threads: int | None, measure=other_load) -> None:
    """Set torch's CPU threads of this process: `threads` (`--threads`) when given; otherwise, on a
    CPU run, `choose_threads` of the load that `measure(cores)` reports, said in one line by the
    main process. GPU runs keep torch's default."""
    if threads is not None:
        torch.set_num_threads(threads)
        return
    most = torch.get_num_threads()
    if accelerator.device.type != "cpu" or most == 1:
        return  # the device does the work, or there is nothing to choose
    cores = available_cores()
    busy = measure(cores)
    chosen = choose_threads(len(cores), busy, most, accelerator.num_processes)
    torch.set_num_threads(chosen)
    per_process = " per process" if accelerator.num_processes > 1 else ""
    accelerator.print(
        f"threads: {chosen}{per_process} (other processes kept {busy:.1f} of the {len(cores)} cores busy over "
        f"{SAMPLE_SECONDS:g} s; torch's own count is {most}); --threads N sets the count"
    )
