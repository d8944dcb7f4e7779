"""Operator benchmark: talk_conv, dynamic_conv and light_conv against scaled-dot-product attention.

Times each op and SDPA on the same (B, T, C, H) for T = 256 .. 16,384, forward and
forward+backward, in one run, and reports the ratios SDPA time / op time, the growth of each op's
time with T (log-log slope: 1.0 is linear) and the peak extra memory of one forward pass.
``--backends`` times the ops on several backends (``torch``, ``cpu``, ``cuda``, ``auto``; see
talk_hf.ops._backend), and ``cuda-stream``: the CUDA backend with its streaming kernels
(``$TALK_HF_UNVERIFIED_CUDA``, csrc/cuda_*_stream.cu), whose rows carry ``tiled_over_stream_*``: the
time of the same case on ``cuda`` (the tiled kernels) over its own, measured in the same run.  Each op's achieved memory bandwidth is reported as a fraction of a
same-run device-to-device copy (bytes of each input and output counted once; the backward pass
as forward+backward minus forward); the same run also measures ``clone()`` (a copy into a new
tensor, whose fresh pages cost first-touch faults on the CPU unless THP_MEM_ALLOC_ENABLE=1) and a
matrix product, the flop ceiling the convolutions are held against (``flops`` fractions).  ``--table6`` is the TaLK paper's Table 6 setting: B=10,
d=1024, H=16, fp32, T = 10 .. 10,000, iterations/s of talk_conv and dynamic_conv (k=3, k=31) on
the compiled backend (on a GPU: both kernel sets) and the PyTorch path, against SDPA (flash in bf16,
and fp32).
Results are printed and saved as JSON under benchmarks/results/.

    python benchmarks/bench_ops.py                       # CPU or the visible GPU
    python benchmarks/bench_ops.py --lengths 256 1024 4096 --out benchmarks/results/ops_cpu.json
    python benchmarks/bench_ops.py --backends torch cpu --lengths 4096 --cases talk_bidirectional sdpa
    python benchmarks/bench_ops.py --table6              # on a GPU: results/table6_cuda.json
    THP_MEM_ALLOC_ENABLE=1 python benchmarks/bench_ops.py --lengths 16384 65536 --backends cpu \
        --cases talk_bidirectional talk_causal dynamic_conv_k3 dynamic_conv_k31 light_conv_k31 \
        --skip-peak --out benchmarks/results/ops_cpu_long.json   # the README's long-sequence table
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _device import device_name, synchronize  # noqa: E402

import talk_hf  # noqa: E402
from talk_hf.ops import dynamic_conv, light_conv, talk_conv  # noqa: E402


def build_case(name: str, batch: int, length: int, channels: int, heads: int, device, dtype, backend=None):
    """Make the inputs of one benchmark case and return (run, inputs_needing_grad).

    ``run()`` computes the op's (B, T, C) output from freshly built leaf inputs; ``backend`` is
    passed to the talk_hf ops (None: $TALK_HF_BACKEND, default "auto").
    """
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
    x = make(batch, length, channels).requires_grad_()
    if name == "talk_bidirectional":
        left = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        right = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        return (lambda: talk_conv(x, left, right, 31, 31, backend=backend)), [x, left, right]
    if name == "talk_causal":
        left = torch.rand(batch, length, heads, device=device, dtype=dtype).requires_grad_()
        return (lambda: talk_conv(x, left, None, 63, 0, backend=backend)), [x, left]
    if name.startswith("dynamic_conv_k"):
        kernel_size = int(name.removeprefix("dynamic_conv_k"))
        weight = torch.softmax(make(batch, length, heads, kernel_size), -1).requires_grad_()
        return (lambda: dynamic_conv(x, weight, kernel_size // 2, backend=backend)), [x, weight]
    if name.startswith("light_conv_k"):
        kernel_size = int(name.removeprefix("light_conv_k"))
        weight = torch.softmax(make(heads, kernel_size), -1).requires_grad_()
        return (lambda: light_conv(x, weight, kernel_size // 2, backend=backend)), [x, weight]
    if name == "sdpa":
        head_dim = channels // heads
        q, k, v = (make(batch, heads, length, head_dim).requires_grad_() for _ in range(3))
        return (lambda: F.scaled_dot_product_attention(q, k, v)), [q, k, v]
    if name == "sdpa_flash_bf16":  # the flash backend, in bf16 whatever --dtype says
        head_dim = channels // heads
        q, k, v = (make(batch, heads, length, head_dim).bfloat16().requires_grad_() for _ in range(3))

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        return flash, [q, k, v]
    raise ValueError(f"unknown case {name!r}")


# The benchmark backend that runs the "cuda" backend with the streaming kernels of these ops.
STREAM_BACKEND = "cuda-stream"
STREAM_OPS = "talk_conv,dynamic_conv,light_conv"
UNVERIFIED_CUDA_ENV = "TALK_HF_UNVERIFIED_CUDA"
CASES = ["talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31", "sdpa"]
ATTENTION = ("sdpa", "sdpa_flash_bf16")
TABLE6 = {
    "batch": 10,
    "channels": 1024,
    "heads": 16,
    "dtype": "float32",
    "lengths": [10, 100, 1000, 10000],
    "cases": ["talk_bidirectional", "dynamic_conv_k3", "dynamic_conv_k31", "sdpa_flash_bf16", "sdpa"],
}


@contextlib.contextmanager
def kernel_set(backend: str | None):
    """The ops' backend for a benchmark backend name; inside, ``$TALK_HF_UNVERIFIED_CUDA`` names the
    streaming ops for ``cuda-stream`` and nothing otherwise (the ops read it at each call)."""
    saved = os.environ.get(UNVERIFIED_CUDA_ENV)
    os.environ[UNVERIFIED_CUDA_ENV] = STREAM_OPS if backend == STREAM_BACKEND else ""
    try:
        yield "cuda" if backend == STREAM_BACKEND else backend
    finally:
        if saved is None:
            del os.environ[UNVERIFIED_CUDA_ENV]
        else:
            os.environ[UNVERIFIED_CUDA_ENV] = saved


def bytes_moved(name, batch, length, channels, heads, dtype):
    """(forward, backward) bytes an op must move at least: each input and output once.

    Forward reads x and the offsets (or kernel) and writes the output; backward reads the output
    gradient, x and the offsets (or kernel) and writes their gradients.
    """
    if name.startswith("talk"):
        side = batch * length * heads * (2 if name == "talk_bidirectional" else 1)
    elif name.startswith("dynamic_conv_k"):
        side = batch * length * heads * int(name.removeprefix("dynamic_conv_k"))
    else:  # light_conv: a small (H, K) kernel
        side = heads * int(name.removeprefix("light_conv_k"))
    tokens = batch * length * channels
    size = torch.finfo(dtype).bits // 8
    return (2 * tokens + side) * size, (3 * tokens + 2 * side) * size


def copy_bytes_per_second(device, nbytes: int, min_seconds: float) -> float:
    """Bandwidth of a device-to-device copy of ``nbytes`` (read + write), the reference of 100%."""
    source = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_()
    target = torch.empty_like(source)
    return 2 * nbytes / median_seconds(lambda: target.copy_(source), device, min_seconds)


def clone_bytes_per_second(device, nbytes: int, min_seconds: float) -> float:
    """Bandwidth of ``clone()`` of ``nbytes``: a copy into a freshly allocated tensor, as every op
    that returns a new tensor does (on the CPU the new pages' first-touch faults are included)."""
    source = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_()
    return 2 * nbytes / median_seconds(source.clone, device, min_seconds)


def matmul_flops_per_second(device, dtype, min_seconds: float) -> float:
    """FLOP/s of a square matrix product (2,048 on the CPU, 8,192 on a GPU), the compute ceiling
    that the kernels with many flops per byte (dynamic_conv with k = 31) are held against."""
    size = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    return 2 * size**3 / median_seconds(lambda: a @ b, device, min_seconds)


def conv_flops(name, batch, length, channels):
    """(forward, backward) multiply-adds x 2 of a convolution case (None for the others): K per
    output element forward; K for grad x and K for the weight gradient backward."""
    for prefix in ("dynamic_conv_k", "light_conv_k"):
        if name.startswith(prefix):
            forward = 2 * batch * length * channels * int(name.removeprefix(prefix))
            return forward, 2 * forward
    return None


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


def time_case(name, batch, length, channels, heads, device, dtype, min_seconds, backend=None):
    """Forward and forward+backward median seconds of one case.

    The backward pass starts from a fixed random gradient of the output, as inside a model: a
    ``.sum().backward()`` would add a reduction over the output and the writing out of its
    expanded all-ones gradient (the kernels read a contiguous one) to the op's time.
    """
    run, inputs = build_case(name, batch, length, channels, heads, device, dtype, backend)
    with torch.no_grad():
        output_gradient = torch.randn_like(run())

    def forward():
        with torch.no_grad():
            run()

    def forward_backward():
        for tensor in inputs:
            tensor.grad = None
        run().backward(output_gradient)

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


def peak_forward_bytes(name, batch, length, channels, heads, device, dtype, backend="auto") -> int:
    """Peak memory one forward pass adds on top of its inputs.

    On CUDA the allocator's peak counter; on the CPU the process high-water mark, measured in a
    fresh subprocess (``--peak-of``) so that earlier cases cannot hide this one's peak.
    """
    if device.type == "cuda":
        run, _ = build_case(name, batch, length, channels, heads, device, dtype, backend)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    command = [
        sys.executable,
        __file__,
        "--peak-of",
        name,
        str(batch),
        str(length),
        str(channels),
        str(heads),
        str(dtype).removeprefix("torch."),
        backend,
    ]
    return int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def report_cpu_peak(name, batch, length, channels, heads, dtype_name, backend) -> None:
    """Subprocess side of :func:`peak_forward_bytes`: print the forward pass's extra peak RSS."""
    dtype = getattr(torch, dtype_name)
    warm_up, _ = build_case(name, 1, 8, channels, heads, torch.device("cpu"), dtype, backend)
    with torch.no_grad():  # loads libraries and starts thread pools before the measurement
        warm_up()
    run, _ = build_case(name, batch, length, channels, heads, torch.device("cpu"), dtype, backend)
    before = memory_status_bytes("VmRSS")
    with torch.no_grad():
        run()
    print(max(memory_status_bytes("VmHWM") - before, 0))


def log_log_slope(lengths, seconds) -> float:
    """Least-squares slope of log(time) against log(T): 1.0 means time grows linearly in T."""
    xs, ys = [math.log(t) for t in lengths], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)


def environment(device: torch.device) -> dict:
    return {
        "device": device_name(device),
        "device_type": device.type,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # AVX2, AVX512, ...: VMs of one type differ
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "talk_hf": talk_hf.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        # PyTorch's CPU allocator backs allocations of 2 MiB or more with huge pages when this is 1:
        # far fewer page faults for each fresh output and gradient (see README, "CPU speed").
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        # The compiled CPU kernels target the host's vector instructions unless this is 1.
        "TALK_HF_PORTABLE_CPU": os.environ.get("TALK_HF_PORTABLE_CPU"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES + ["sdpa_flash_bf16"])
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["auto"],
        choices=["auto", "torch", "cpu", "cuda", STREAM_BACKEND],
        help="backends of the talk_hf ops (SDPA runs once)",
    )
    parser.add_argument(
        "--table6",
        action="store_true",
        help="the TaLK paper's Table 6 setting; overrides shape, lengths, cases and backends",
    )
    parser.add_argument("--skip-peak", action="store_true", help="do not measure peak memory (faster)")
    parser.add_argument("--min_seconds", type=float, default=0.3, help="time each measurement at least this long")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (default benchmarks/results/ops_<device>.json)"
    )
    parser.add_argument("--peak-of", nargs=7, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_of:
        name, *sizes, dtype_name, backend = args.peak_of
        report_cpu_peak(name, *map(int, sizes), dtype_name, backend)
        return

    device = torch.device(args.device)
    if args.table6:
        for key, value in TABLE6.items():
            setattr(args, key, value)
        args.backends = [device.type, STREAM_BACKEND, "torch"] if device.type == "cuda" else [device.type, "torch"]
    dtype = getattr(torch, args.dtype)
    shape = {"batch": args.batch, "channels": args.channels, "heads": args.heads, "dtype": args.dtype}
    largest_x = args.batch * max(args.lengths) * args.channels * torch.finfo(dtype).bits // 8
    copy_bandwidth = copy_bytes_per_second(
        device, max(largest_x, 2**28 if device.type == "cuda" else 2**26), args.min_seconds
    )
    print(
        f"device {environment(device)['device']} ({device.type}), B={args.batch} C={args.channels} H={args.heads} {args.dtype}"
    )
    print("talk_bidirectional: max_left=max_right=31; talk_causal: max_left=63; conv kernels centred")
    clone_bandwidth = clone_bytes_per_second(device, max(largest_x, 2**26), args.min_seconds)
    matmul_flops = matmul_flops_per_second(device, dtype, args.min_seconds)
    print(
        f"device-to-device copy: {copy_bandwidth / 1e9:.1f} GB/s (100% of the bandwidth fractions); "
        f"clone (into a new tensor): {clone_bandwidth / 1e9:.1f} GB/s; matmul: {matmul_flops / 1e9:.0f} GFLOP/s "
        f"(100% of the flop fractions)"
    )
    stem = "table6" if args.table6 else "ops"
    out = args.out or ROOT / "benchmarks" / "results" / f"{stem}_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(rows, slopes=None):
        """Write what is measured so far (after every length: a killed run keeps its rows)."""
        result = {
            "environment": environment(device),
            "shape": shape,
            "copy_bytes_per_s": copy_bandwidth,
            "clone_bytes_per_s": clone_bandwidth,
            "matmul_flops_per_s": matmul_flops,
            "rows": rows,
        }
        out.write_text(json.dumps({**result, "forward_time_slope": slopes or {}}, indent=2))

    rows = []
    for length in args.lengths:
        for name in args.cases:
            for backend in ["-"] if name in ATTENTION else args.backends:
                try:
                    with kernel_set(None if name in ATTENTION else backend) as op_backend:
                        forward, forward_backward = time_case(
                            name,
                            args.batch,
                            length,
                            args.channels,
                            args.heads,
                            device,
                            dtype,
                            args.min_seconds,
                            op_backend,
                        )
                except torch.cuda.OutOfMemoryError:  # like self-attention at T = 10,000 in the paper
                    torch.cuda.empty_cache()
                    print(f"T={length:6d} {name:20s} {backend:11s} out of memory")
                    rows.append({"case": name, "backend": backend, "length": length, "error": "out of memory"})
                    continue
                row = {
                    "case": name,
                    "backend": backend,
                    "length": length,
                    "forward_s": forward,
                    "forward_backward_s": forward_backward,
                    "iterations_per_s": 1 / forward,
                }
                if not args.skip_peak:
                    with kernel_set(None if name in ATTENTION else backend) as op_backend:
                        row["forward_peak_bytes"] = peak_forward_bytes(
                            name, args.batch, length, args.channels, args.heads, device, dtype, op_backend or "auto"
                        )
                if name not in ATTENTION:
                    forward_bytes, backward_bytes = bytes_moved(
                        name, args.batch, length, args.channels, args.heads, dtype
                    )
                    row["forward_bandwidth_fraction"] = forward_bytes / forward / copy_bandwidth
                    row["backward_bandwidth_fraction"] = (
                        backward_bytes / max(forward_backward - forward, 1e-9) / copy_bandwidth
                    )
                    flops = conv_flops(name, args.batch, length, args.channels)
                    if flops:
                        row["forward_flops_fraction"] = flops[0] / forward / matmul_flops
                        row["backward_flops_fraction"] = flops[1] / max(forward_backward - forward, 1e-9) / matmul_flops
                rows.append(row)
        measured = [r for r in rows if "error" not in r]
        baselines = {r["case"]: r for r in measured if r["case"] in ATTENTION and r["length"] == length}
        tiled = {r["case"]: r for r in measured if r["backend"] == "cuda" and r["length"] == length}
        for row in measured:
            if row["length"] != length:
                continue
            for attention, label in (("sdpa", "sdpa"), ("sdpa_flash_bf16", "sdpa_flash")):
                if attention in baselines:
                    row[f"{label}_over_op_forward"] = baselines[attention]["forward_s"] / row["forward_s"]
                    row[f"{label}_over_op_forward_backward"] = (
                        baselines[attention]["forward_backward_s"] / row["forward_backward_s"]
                    )
            if row["backend"] == STREAM_BACKEND and row["case"] in tiled:
                for phase in ("forward", "forward_backward"):
                    row[f"tiled_over_stream_{phase}"] = tiled[row["case"]][f"{phase}_s"] / row[f"{phase}_s"]
            print(
                f"T={length:6d} {row['case']:20s} {row['backend']:11s} fwd {row['forward_s'] * 1e3:9.3f} ms"
                f"  fwd+bwd {row['forward_backward_s'] * 1e3:9.3f} ms  {row['iterations_per_s']:9.1f} it/s"
                + (f"  peak {row['forward_peak_bytes'] / 2**20:8.1f} MiB" if "forward_peak_bytes" in row else "")
                + (
                    f"  SDPA/op fwd {row['sdpa_over_op_forward']:7.1f}x fwd+bwd {row['sdpa_over_op_forward_backward']:7.1f}x"
                    if "sdpa" in baselines
                    else ""
                )
                + (
                    f"  flash/op fwd {row['sdpa_flash_over_op_forward']:7.1f}x"
                    if "sdpa_flash_bf16" in baselines
                    else ""
                )
                + (
                    f"  bandwidth fwd {row['forward_bandwidth_fraction']:5.0%} bwd {row['backward_bandwidth_fraction']:5.0%}"
                    if "forward_bandwidth_fraction" in row
                    else ""
                )
                + (
                    f"  flops fwd {row['forward_flops_fraction']:5.0%} bwd {row['backward_flops_fraction']:5.0%}"
                    if "forward_flops_fraction" in row
                    else ""
                )
                + (
                    f"  tiled/stream fwd {row['tiled_over_stream_forward']:5.2f}x"
                    f" fwd+bwd {row['tiled_over_stream_forward_backward']:5.2f}x"
                    if "tiled_over_stream_forward" in row
                    else ""
                )
            )
        save(rows)

    slopes = {}
    for name in args.cases:
        for backend in {r["backend"] for r in rows if r["case"] == name}:
            case_rows = [r for r in rows if r["case"] == name and r["backend"] == backend and "error" not in r]
            if len(case_rows) > 1:
                slopes[name if backend in ("-", "auto") else f"{name}[{backend}]"] = log_log_slope(
                    [r["length"] for r in case_rows], [r["forward_s"] for r in case_rows]
                )
    print(
        "time growth with T (log-log slope of forward time; 1.0 = linear):", {k: round(v, 2) for k, v in slopes.items()}
    )

    save(rows, slopes)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
