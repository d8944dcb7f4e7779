"""Operator benchmark: talk_conv, dynamic_conv and light_conv against scaled-dot-product attention.

Times each op and SDPA on the same (B, T, C, H) for T = 256 .. 16,384, forward and
forward+backward, in one run, and reports the ratios SDPA time / op time, the growth of each op's
time with T (log-log slope: 1.0 is linear) and the peak extra memory of one forward pass.
Results are printed and saved as JSON under benchmarks/results/.

    python benchmarks/bench_ops.py                       # CPU or the visible GPU
    python benchmarks/bench_ops.py --lengths 256 1024 4096 --out benchmarks/results/ops_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import talk_hf  # noqa: E402
from talk_hf.ops import dynamic_conv, light_conv, talk_conv  # noqa: E402


def build_case(name: str, batch: int, length: int, channels: int, heads: int, device, dtype):
    """Make the inputs of one benchmark case and return (run, inputs_needing_grad).

    ``run()`` computes the op's (B, T, C) output from freshly built leaf inputs.
    """
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
    x = make(batch, length, channels).requires_grad_()
    if name == "talk_bidirectional":
        left = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        right = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        return (lambda: talk_conv(x, left, right, 31, 31)), [x, left, right]
    if name == "talk_causal":
        left = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        return (lambda: talk_conv(x, left, None, 63, 0)), [x, left]
    if name.startswith("dynamic_conv_k"):
        kernel_size = int(name.removeprefix("dynamic_conv_k"))
        weight = torch.softmax(make(batch, length, heads, kernel_size), -1).requires_grad_()
        return (lambda: dynamic_conv(x, weight, kernel_size // 2)), [x, weight]
    if name.startswith("light_conv_k"):
        kernel_size = int(name.removeprefix("light_conv_k"))
        weight = torch.softmax(make(heads, kernel_size), -1).requires_grad_()
        return (lambda: light_conv(x, weight, kernel_size // 2)), [x, weight]
    if name == "sdpa":
        head_dim = channels // heads
        q, k, v = (make(batch, heads, length, head_dim).requires_grad_() for _ in range(3))
        return (lambda: F.scaled_dot_product_attention(q, k, v)), [q, k, v]
    raise ValueError(f"unknown case {name!r}")


CASES = ["talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31", "sdpa"]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(step, device, min_seconds: float, max_repeats: int = 50) -> float:
    """Median wall time of ``step()`` after one warm-up call, repeated for at least ``min_seconds``."""
    step()
    synchronize(device)
    times = []
    while (sum(times) < min_seconds or len(times) < 3) and len(times) < max_repeats:
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
        if times[-1] > 5 * min_seconds:  # very slow case: three samples are enough
            break
    return statistics.median(times)


def time_case(name, batch, length, channels, heads, device, dtype, min_seconds):
    """Forward and forward+backward median seconds of one case."""
    run, inputs = build_case(name, batch, length, channels, heads, device, dtype)

    def forward():
        with torch.no_grad():
            run()

    def forward_backward():
        for tensor in inputs:
            tensor.grad = None
        run().sum().backward()

    return median_seconds(forward, device, min_seconds), median_seconds(forward_backward, device, min_seconds)


def memory_status_bytes(field: str) -> int:
    """A memory field of /proc/self/status (Linux), e.g. VmRSS (now) or VmHWM (peak), in bytes.

    Both belong to this process image: unlike getrusage's ru_maxrss they are not inherited from
    the parent that forked the measuring subprocess.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def peak_forward_bytes(name, batch, length, channels, heads, device, dtype) -> int:
    """Peak memory one forward pass adds on top of its inputs.

    On CUDA the allocator's peak counter; on the CPU the process high-water mark, measured in a
    fresh subprocess (``--peak-of``) so that earlier cases cannot hide this one's peak.
    """
    if device.type == "cuda":
        run, _ = build_case(name, batch, length, channels, heads, device, dtype)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    command = [sys.executable, __file__, "--peak-of", name, str(batch), str(length), str(channels), str(heads), str(dtype).removeprefix("torch.")]
    return int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def report_cpu_peak(name, batch, length, channels, heads, dtype_name) -> None:
    """Subprocess side of :func:`peak_forward_bytes`: print the forward pass's extra peak RSS."""
    dtype = getattr(torch, dtype_name)
    warm_up, _ = build_case(name, 1, 8, channels, heads, torch.device("cpu"), dtype)
    with torch.no_grad():  # loads libraries and starts thread pools before the measurement
        warm_up()
    run, _ = build_case(name, batch, length, channels, heads, torch.device("cpu"), dtype)
    before = memory_status_bytes("VmRSS")
    with torch.no_grad():
        run()
    print(max(memory_status_bytes("VmHWM") - before, 0))


def log_log_slope(lengths, seconds) -> float:
    """Least-squares slope of log(time) against log(T): 1.0 means time grows linearly in T."""
    xs, ys = [math.log(t) for t in lengths], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def environment(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {
        "device": name,
        "device_type": device.type,
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "talk_hf": talk_hf.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    parser.add_argument("--min_seconds", type=float, default=0.3, help="time each measurement at least this long")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/ops_<device>.json)")
    parser.add_argument("--peak-of", nargs=6, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_of:
        name, *sizes, dtype_name = args.peak_of
        report_cpu_peak(name, *map(int, sizes), dtype_name)
        return

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    shape = {"batch": args.batch, "channels": args.channels, "heads": args.heads, "dtype": args.dtype}
    print(f"device {environment(device)['device']} ({device.type}), B={args.batch} C={args.channels} H={args.heads} {args.dtype}")
    print("talk_bidirectional: max_left=max_right=31; talk_causal: max_left=63; conv kernels centred")
    rows = []
    for length in args.lengths:
        for name in args.cases:
            forward, forward_backward = time_case(name, args.batch, length, args.channels, args.heads, device, dtype, args.min_seconds)
            peak = peak_forward_bytes(name, args.batch, length, args.channels, args.heads, device, dtype)
            rows.append({"case": name, "length": length, "forward_s": forward, "forward_backward_s": forward_backward, "forward_peak_bytes": peak})
        sdpa = next((r for r in rows if r["case"] == "sdpa" and r["length"] == length), None)
        for row in rows:
            if row["length"] == length and sdpa is not None:
                row["sdpa_over_op_forward"] = sdpa["forward_s"] / row["forward_s"]
                row["sdpa_over_op_forward_backward"] = sdpa["forward_backward_s"] / row["forward_backward_s"]
            if row["length"] == length:
                print(
                    f"T={length:6d} {row['case']:20s} fwd {row['forward_s'] * 1e3:9.2f} ms  fwd+bwd {row['forward_backward_s'] * 1e3:9.2f} ms"
                    f"  peak {row['forward_peak_bytes'] / 2**20:8.1f} MiB"
                    + (f"  SDPA/op fwd {row['sdpa_over_op_forward']:7.1f}x fwd+bwd {row['sdpa_over_op_forward_backward']:7.1f}x" if sdpa else "")
                )

    slopes = {}
    for name in args.cases:
        case_rows = [r for r in rows if r["case"] == name]
        if len(case_rows) > 1:
            slopes[name] = log_log_slope([r["length"] for r in case_rows], [r["forward_s"] for r in case_rows])
    print("time growth with T (log-log slope of forward time; 1.0 = linear):", {k: round(v, 2) for k, v in slopes.items()})

    out = args.out or ROOT / "benchmarks" / "results" / f"ops_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": environment(device), "shape": shape, "rows": rows, "forward_time_slope": slopes}, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
