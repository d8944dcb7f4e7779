"""What the benchmarks share about the device they run on."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch

# Where the benchmarks write their JSON unless --out says otherwise.
RESULTS = Path(__file__).parent / "results"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    return platform.processor() or platform.machine()


def cpu_family(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's vendor as results are kept per family: "intel", "amd", or the machine's architecture
    (e.g. "aarch64") where ``cpuinfo`` names neither."""
    vendor = ""
    if cpuinfo.exists():
        vendor = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("vendor_id")), "")
    families = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
    return next((family for name, family in families.items() if name in vendor), platform.machine().lower())


def device_name(device: torch.device | str) -> str:
    """The GPU's name for a CUDA device, the CPU model otherwise."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that wall times are honest."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def process_status_bytes(field: str) -> int | None:
    """A memory field of /proc/self/status in bytes, e.g. ``VmRSS`` (resident now) or ``VmHWM`` (its
    peak); None where there is no /proc (not Linux).

    Both belong to this process image: unlike getrusage's ru_maxrss they are not inherited from the
    parent that forked a measuring subprocess.
    """
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def run_metadata(device: torch.device | str) -> dict:
    """What a benchmark's JSON records about the run: device, threads, versions, the ops backend."""
    import transformers

    import talk_hf

    return {
        "device": str(device),
        "device_name": device_name(device),
        "cpu_family": cpu_family(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # AVX2, AVX512, ...: VMs of one type differ
        "cpu_threads": torch.get_num_threads(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "talk_hf": talk_hf.__version__,
        },
        "ops_backend": talk_hf.ops._backend.requested_backend(None),
    }


def add_device_option(parser) -> None:
    """``--device``: the visible GPU when there is one, else the CPU; a name torch cannot read is refused."""
    parser.add_argument("--device", type=device_name_of, default="cuda" if torch.cuda.is_available() else "cpu")


def device_name_of(text: str) -> str:
    """``text`` when it names a torch device (``cpu``, ``cuda``, ``cuda:1`` ...); argparse's error otherwise."""
    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is no torch device name (cpu, cuda, cuda:1 ...)") from None
    return text


def check_device_runs(device: str) -> None:
    """Stop with a message saying why, when ``device`` cannot run here: CUDA with a torch built
    without it or with no GPU visible, a GPU index past the visible ones, a device type other than
    cpu and cuda (the benchmarks time and measure memory on those two only)."""
    parsed = torch.device(device)
    if parsed.type == "cpu":
        return
    if parsed.type != "cuda":
        problem = f"the benchmarks run on cpu or cuda devices, not {parsed.type}"
    elif not torch.backends.cuda.is_built():
        problem = f"this torch ({torch.__version__}) is built without CUDA: install a CUDA build"
    elif torch.cuda.device_count() == 0:
        problem = f"no CUDA GPU is visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
    elif (parsed.index or 0) >= torch.cuda.device_count():
        problem = f"GPU {parsed.index} is not visible ({torch.cuda.device_count()} visible, numbered from 0)"
    else:
        return
    raise SystemExit(f"error: --device {device}: {problem}; or pass --device cpu")


def add_cpu_options(parser) -> None:
    """``--threads`` and ``--out``, the options every benchmark script has."""
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/...)")


def parse_cpu_args(parser):
    """Parse the command line of a benchmark with `add_cpu_options`: set torch's CPU threads from
    ``--threads`` and seed torch with 0, so every run times the same inputs."""
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def write_report(report: dict, out: Path | None, default_name: str, announce: bool = True) -> None:
    """Write a benchmark's JSON to ``out`` (default: benchmarks/results/``default_name``); with
    ``announce``, print its ``summary`` when it has one, and say where it went."""
    out = out or RESULTS / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if not announce:
        return
    if "summary" in report:
        print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out}")
