"""Operator benchmark: talk_conv, dynamic_conv and light_conv against scaled-dot-product attention.

Times each op and SDPA on the same (B, T, C, H) for T = 256 .. 16,384, forward and
forward+backward, in one run, and reports the ratios SDPA time / op time, the growth of each op's
time with T (log-log slope: 1.0 is linear) and the peak extra memory of one forward pass.
``--backends`` times the ops on several backends (``torch``, ``cpu``, ``cuda``, ``auto``; see
talk_hf.ops._backend); on ``cuda`` each op runs its one set of CUDA kernels (talk_conv: the tiled
forward and the streaming backward; dynamic_conv and light_conv: the streaming kernels; each hands
the shapes its streaming kernels do not take to the tiled ones, see csrc/cuda_fallback.h).  Each
op's achieved memory bandwidth is reported as a fraction of a
same-run device-to-device copy (bytes of each input and output counted once; the backward pass
as forward+backward minus forward); the same run also measures ``clone()`` (a copy into a new
tensor, whose fresh pages cost first-touch faults on the CPU unless THP_MEM_ALLOC_ENABLE=1) and a
matrix product, the flop ceiling the convolutions are held against (``flops`` fractions).  ``--table6`` is the TaLK paper's Table 6 setting: B=10,
d=1024, H=16, fp32, T = 10 .. 10,000, iterations/s of talk_conv and dynamic_conv (k=3, k=31) on
the compiled backend and the PyTorch path, against SDPA (flash in bf16, and fp32).  ``--variants``
times candidate CUDA kernels that no GPU has verified yet (csrc/cuda_variants.h) against the default,
each case right after it in the same run (row ``cuda[name]``, ratio ``default_over_variant_*``).
Results are printed and saved as JSON under benchmarks/results/.

    python benchmarks/bench_ops.py                       # CPU or the visible GPU
    python benchmarks/bench_ops.py --lengths 256 1024 4096 --out benchmarks/results/ops_cpu.json
    python benchmarks/bench_ops.py --backends torch cpu --lengths 4096 --cases talk_bidirectional sdpa
    python benchmarks/bench_ops.py --table6              # on a GPU: results/table6_cuda.json
    THP_MEM_ALLOC_ENABLE=1 python benchmarks/bench_ops.py --lengths 16384 65536 --backends cpu \
        --cases talk_bidirectional talk_causal dynamic_conv_k3 dynamic_conv_k31 light_conv_k31 \
        --skip-peak --out benchmarks/results/ops_cpu_long.json   # the README's long-sequence table
"""

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _device import RESULTS, add_device_option, check_device_runs, device_name, process_status_bytes  # noqa: E402
from _timing import Stopwatch, interleaved  # noqa: E402

import talk_hf  # noqa: E402
from talk_hf.ops import _extension, dynamic_conv, light_conv, talk_conv  # noqa: E402
from talk_hf.ops._cuda_variants import cuda_variants  # noqa: E402


def build_case(name: str, *, batch: int, length: int, channels: int, heads: int, device, dtype, backend=None):
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


@dataclasses.dataclass(frozen=True)
class Case:
    """One measurement: the op or attention ``name`` (a key of ``CASES`` or ``ATTENTION``) on
    (``batch``, ``length``, ``channels``) inputs with ``heads`` heads, on ``device`` in ``dtype``."""

    name: str
    batch: int
    length: int
    channels: int
    heads: int
    device: torch.device
    dtype: torch.dtype

    def build(self, backend=None):
        """``build_case`` of this case: (run, inputs_needing_grad)."""
        return build_case(**vars(self), backend=backend)

    def peak_of_arguments(self, backend: str) -> list[str]:
        """The ``--peak-of`` values that name this case on the CPU (`from_peak_of` reads them)."""
        sizes = (self.batch, self.length, self.channels, self.heads)
        return [self.name, *map(str, sizes), str(self.dtype).removeprefix("torch."), backend]

    @classmethod
    def from_peak_of(cls, values: list[str]) -> tuple["Case", str]:
        """The CPU case and the backend that ``--peak-of`` names."""
        name, batch, length, channels, heads, dtype_name, backend = values
        sizes = dict(batch=int(batch), length=int(length), channels=int(channels), heads=int(heads))
        return cls(name, **sizes, device=torch.device("cpu"), dtype=getattr(torch, dtype_name)), backend


@dataclasses.dataclass(frozen=True)
class References:
    """The same-run ceilings the ops are held against: a device-to-device copy's bandwidth (100% of
    the bandwidth fractions), ``clone()``'s (a copy into a new tensor) and a matrix product's FLOP/s
    (100% of the flop fractions)."""

    copy_bytes_per_s: float
    clone_bytes_per_s: float
    matmul_flops_per_s: float


def bytes_moved(case: Case) -> tuple[int, int]:
    """(forward, backward) bytes an op must move at least: each input and output once.

    Forward reads x and the offsets (or kernel) and writes the output; backward reads the output
    gradient, x and the offsets (or kernel) and writes their gradients.
    """
    name, tokens_by_heads = case.name, case.batch * case.length * case.heads
    if name.startswith("talk"):
        side = tokens_by_heads * (2 if name == "talk_bidirectional" else 1)
    elif name.startswith("dynamic_conv_k"):
        side = tokens_by_heads * int(name.removeprefix("dynamic_conv_k"))
    else:  # light_conv: a small (H, K) kernel
        side = case.heads * int(name.removeprefix("light_conv_k"))
    tokens = case.batch * case.length * case.channels
    size = torch.finfo(case.dtype).bits // 8
    return (2 * tokens + side) * size, (3 * tokens + 2 * side) * size


def conv_flops(case: Case) -> tuple[int, int] | None:
    """(forward, backward) multiply-adds x 2 of a convolution case (None for the others): K per
    output element forward; K for grad x and K for the weight gradient backward."""
    for prefix in ("dynamic_conv_k", "light_conv_k"):
        if case.name.startswith(prefix):
            forward = 2 * case.batch * case.length * case.channels * int(case.name.removeprefix(prefix))
            return forward, 2 * forward
    return None


def measure_references(device, *, dtype, nbytes: int, min_seconds: float) -> References:
    """Copy and ``clone()`` bandwidth over ``nbytes`` (at least 256 MiB for the copy on a GPU, 64 MiB
    otherwise) and the FLOP/s of a square matrix product (2,048 on the CPU, 8,192 on a GPU).

    ``clone()`` is what every op that returns a new tensor does: on the CPU the new pages'
    first-touch faults are included (unless THP_MEM_ALLOC_ENABLE=1).
    """
    copy_bytes = max(nbytes, 2**28 if device.type == "cuda" else 2**26)
    copy_source = torch.empty(copy_bytes // 4, device=device, dtype=torch.float32).uniform_()
    copy_target = torch.empty_like(copy_source)
    clone_source = torch.empty(max(nbytes, 2**26) // 4, device=device, dtype=torch.float32).uniform_()
    size = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    references = {
        "copy": lambda number: copy_target.copy_(copy_source),
        "clone": lambda number: clone_source.clone(),
        "matmul": lambda number: a @ b,
    }
    seconds = {name: timing.median_s for name, timing in timed(references, device, min_seconds).items()}
    return References(
        copy_bytes_per_s=2 * copy_source.nbytes / seconds["copy"],
        clone_bytes_per_s=2 * clone_source.nbytes / seconds["clone"],
        matmul_flops_per_s=2 * size**3 / seconds["matmul"],
    )


def timed(functions: dict, device, min_seconds: float) -> dict:
    """`_timing.interleaved` as every measurement here takes it: one warm-up call each, then at least
    three interleaved rounds and more (up to 50) until each function has run ``min_seconds``."""
    return interleaved(functions, rounds=3, min_seconds=min_seconds, max_rounds=50, stopwatch=Stopwatch(device))


def time_case(case: Case, *, min_seconds: float, backend=None) -> tuple[float, float]:
    """Forward and forward+backward median seconds of one case.

    The backward pass starts from a fixed random gradient of the output, as inside a model: a
    ``.sum().backward()`` would add a reduction over the output and the writing out of its
    expanded all-ones gradient (the kernels read a contiguous one) to the op's time.
    """
    run, inputs = case.build(backend)
    with torch.no_grad():
        output_gradient = torch.randn_like(run())

    def forward(number):
        with torch.no_grad():
            run()

    def forward_backward(number):
        for tensor in inputs:
            tensor.grad = None
        run().backward(output_gradient)

    timings = timed({"forward": forward, "forward_backward": forward_backward}, case.device, min_seconds)
    return timings["forward"].median_s, timings["forward_backward"].median_s


def peak_forward_bytes(case: Case, *, backend: str = "auto") -> int:
    """Peak memory one forward pass adds on top of its inputs.

    On CUDA the allocator's peak counter; on the CPU the process high-water mark, measured in a
    fresh subprocess (``--peak-of``) so that earlier cases cannot hide this one's peak.
    """
    if case.device.type == "cuda":
        run, _ = case.build(backend)
        torch.cuda.synchronize(case.device)
        torch.cuda.reset_peak_memory_stats(case.device)
        before = torch.cuda.memory_allocated(case.device)
        with torch.no_grad():
            run()
        torch.cuda.synchronize(case.device)
        return torch.cuda.max_memory_allocated(case.device) - before
    command = [sys.executable, __file__, "--peak-of", *case.peak_of_arguments(backend)]
    return int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def report_cpu_peak(case: Case, *, backend: str) -> None:
    """Subprocess side of :func:`peak_forward_bytes`: print the forward pass's extra peak RSS."""
    warm_up, _ = dataclasses.replace(case, batch=1, length=8).build(backend)
    with torch.no_grad():  # loads libraries and starts thread pools before the measurement
        warm_up()
    run, _ = case.build(backend)
    before = process_status_bytes("VmRSS")
    if before is None:
        raise RuntimeError("peak memory on the CPU is read from /proc/self/status (Linux): pass --skip-peak")
    with torch.no_grad():
        run()
    print(max(process_status_bytes("VmHWM") - before, 0))


def backends_of(name: str, backends: list[str]) -> list[str]:
    """The backends that case ``name`` runs on: ``-`` for attention, else ``backends``."""
    if name in ATTENTION:
        return ["-"]
    return list(backends)


def measure_row(case: Case, *, backend: str, references: References, min_seconds: float, skip_peak: bool) -> dict:
    """The report's row of one case on one backend (``-`` for attention): seconds, peak
    memory, and for the ops the fractions of the same-run `references` they reach.  A case that
    runs out of GPU memory (like self-attention at T = 10,000 in the paper) gets a row saying so."""
    op_backend = None if case.name in ATTENTION else backend
    head = {"case": case.name, "backend": backend, "length": case.length}
    try:
        forward, forward_backward = time_case(case, min_seconds=min_seconds, backend=op_backend)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        print(f"T={case.length:6d} {case.name:20s} {backend:11s} out of memory")
        return {**head, "error": "out of memory"}
    row = {**head, "forward_s": forward, "forward_backward_s": forward_backward, "iterations_per_s": 1 / forward}
    if not skip_peak:
        row["forward_peak_bytes"] = peak_forward_bytes(case, backend=op_backend or "auto")
    if case.name not in ATTENTION:
        row |= fractions_of_ceilings(case, forward=forward, forward_backward=forward_backward, references=references)
    return row


def measure_variant_row(case: Case, default_row: dict, *, variant: str, **timing) -> dict:
    """The row of ``case`` on backend cuda with the candidate kernel ``variant`` switched on
    (talk_hf.ops._cuda_variants), measured right after ``default_row``, the same case on the default
    kernels: backend ``cuda[variant]``, with ``default_over_variant_forward`` and
    ``_forward_backward``, the default's time over the candidate's (above 1: the candidate is faster)."""
    with cuda_variants(_extension.load("cuda"), [variant]):
        row = measure_row(case, backend="cuda", **timing)
    row["backend"] = f"cuda[{variant}]"
    if "error" not in row and "error" not in default_row:
        for phase in ("forward", "forward_backward"):
            row[f"default_over_variant_{phase}"] = default_row[f"{phase}_s"] / row[f"{phase}_s"]
    return row


def fractions_of_ceilings(case: Case, *, forward: float, forward_backward: float, references: References) -> dict:
    """The op's achieved bandwidth (and, for a convolution, FLOP/s) as fractions of the same-run
    copy (matrix product), forward and backward (forward+backward minus forward)."""
    backward = max(forward_backward - forward, 1e-9)
    forward_bytes, backward_bytes = bytes_moved(case)
    fractions = {
        "forward_bandwidth_fraction": forward_bytes / forward / references.copy_bytes_per_s,
        "backward_bandwidth_fraction": backward_bytes / backward / references.copy_bytes_per_s,
    }
    flops = conv_flops(case)
    if flops:
        fractions["forward_flops_fraction"] = flops[0] / forward / references.matmul_flops_per_s
        fractions["backward_flops_fraction"] = flops[1] / backward / references.matmul_flops_per_s
    return fractions


def add_ratios(rows: list[dict], *, length: int) -> tuple[list[dict], dict]:
    """Give the measured rows of ``length`` their ratios: attention's time over theirs
    (``sdpa_over_op_*``, ``sdpa_flash_over_op_*``).  Returns those rows and the attention rows by
    case."""
    measured = [row for row in rows if "error" not in row and row["length"] == length]
    baselines = {row["case"]: row for row in measured if row["case"] in ATTENTION}
    for row in measured:
        for attention, label in (("sdpa", "sdpa"), ("sdpa_flash_bf16", "sdpa_flash")):
            if attention in baselines:
                for phase in ("forward", "forward_backward"):
                    row[f"{label}_over_op_{phase}"] = baselines[attention][f"{phase}_s"] / row[f"{phase}_s"]
    return measured, baselines


def describe(row: dict, *, baselines: dict) -> str:
    """One printed line of a measured row: times, peak memory and the ratios and fractions it has."""
    parts = [
        f"T={row['length']:6d} {row['case']:20s} {row['backend']:11s} fwd {row['forward_s'] * 1e3:9.3f} ms"
        f"  fwd+bwd {row['forward_backward_s'] * 1e3:9.3f} ms  {row['iterations_per_s']:9.1f} it/s"
    ]
    if "forward_peak_bytes" in row:
        parts.append(f"  peak {row['forward_peak_bytes'] / 2**20:8.1f} MiB")
    if "sdpa" in baselines:
        parts.append(
            f"  SDPA/op fwd {row['sdpa_over_op_forward']:7.1f}x fwd+bwd {row['sdpa_over_op_forward_backward']:7.1f}x"
        )
    if "sdpa_flash_bf16" in baselines:
        parts.append(f"  flash/op fwd {row['sdpa_flash_over_op_forward']:7.1f}x")
    if "forward_bandwidth_fraction" in row:
        parts.append(
            f"  bandwidth fwd {row['forward_bandwidth_fraction']:5.0%} bwd {row['backward_bandwidth_fraction']:5.0%}"
        )
    if "default_over_variant_forward" in row:
        parts.append(
            f"  default/candidate fwd {row['default_over_variant_forward']:5.2f}x"
            f" fwd+bwd {row['default_over_variant_forward_backward']:5.2f}x"
        )
    if "forward_flops_fraction" in row:
        parts.append(f"  flops fwd {row['forward_flops_fraction']:5.0%} bwd {row['backward_flops_fraction']:5.0%}")
    return "".join(parts)


def log_log_slope(lengths, seconds) -> float:
    """Least-squares slope of log(time) against log(T): 1.0 means time grows linearly in T."""
    xs, ys = [math.log(t) for t in lengths], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)


def forward_time_slopes(rows: list[dict], cases: list[str]) -> dict[str, float]:
    """Each case's (and backend's) `log_log_slope` of forward time, where it has two lengths or more;
    keyed ``case`` on ``auto`` and for attention, ``case[backend]`` otherwise."""
    slopes = {}
    for name in cases:
        for backend in {row["backend"] for row in rows if row["case"] == name}:
            case_rows = [r for r in rows if r["case"] == name and r["backend"] == backend and "error" not in r]
            if len(case_rows) > 1:
                slopes[name if backend in ("-", "auto") else f"{name}[{backend}]"] = log_log_slope(
                    [r["length"] for r in case_rows], [r["forward_s"] for r in case_rows]
                )
    return slopes


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


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; with ``--table6``, the paper's setting in place of the shape, lengths,
    cases and backends."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    add_device_option(parser)
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES + ["sdpa_flash_bf16"])
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["auto"],
        choices=["auto", "torch", "cpu", "cuda"],
        help="backends of the talk_hf ops (SDPA runs once)",
    )
    parser.add_argument(
        "--table6",
        action="store_true",
        help="the TaLK paper's Table 6 setting; overrides shape, lengths, cases and backends",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[],
        metavar="NAME",
        help="candidate CUDA kernels (csrc/cuda_variants.h): each case on cuda is timed again with each one "
        "switched on, right after the default, and gets the ratio default time / candidate time",
    )
    parser.add_argument("--skip-peak", action="store_true", help="do not measure peak memory (faster)")
    parser.add_argument("--min_seconds", type=float, default=0.3, help="time each measurement at least this long")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (default benchmarks/results/ops_<device>.json)"
    )
    parser.add_argument("--peak-of", nargs=7, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variants and args.device.split(":")[0] != "cuda":
        parser.error(f"--variants {' '.join(args.variants)} names candidate CUDA kernels: it needs --device cuda")
    if not args.table6:
        return args
    backends = [torch.device(args.device).type, "torch"]
    return argparse.Namespace(**{**vars(args), **TABLE6, "backends": backends})


def write_results(out: Path, *, environment: dict, shape: dict, references: References, rows, slopes=None) -> None:
    """Write what is measured so far (after every length: a killed run keeps its rows)."""
    result = {"environment": environment, "shape": shape, **vars(references), "rows": rows}
    out.write_text(json.dumps({**result, "forward_time_slope": slopes or {}}, indent=2))


def main(argv=None) -> None:
    args = parse_args(argv)
    check_device_runs(args.device)
    if args.peak_of:
        case, backend = Case.from_peak_of(args.peak_of)
        report_cpu_peak(case, backend=backend)
        return
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    shape = {"batch": args.batch, "channels": args.channels, "heads": args.heads, "dtype": args.dtype}
    print(f"device {device_name(device)} ({device.type}), B={args.batch} C={args.channels} H={args.heads} {args.dtype}")
    print("talk_bidirectional: max_left=max_right=31; talk_causal: max_left=63; conv kernels centred")
    largest_x = args.batch * max(args.lengths) * args.channels * torch.finfo(dtype).bits // 8
    references = measure_references(device, dtype=dtype, nbytes=largest_x, min_seconds=args.min_seconds)
    print(
        f"device-to-device copy: {references.copy_bytes_per_s / 1e9:.1f} GB/s (100% of the bandwidth fractions); "
        f"clone (into a new tensor): {references.clone_bytes_per_s / 1e9:.1f} GB/s; "
        f"matmul: {references.matmul_flops_per_s / 1e9:.0f} GFLOP/s (100% of the flop fractions)"
    )
    out = args.out or RESULTS / f"{'table6' if args.table6 else 'ops'}_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = dict(environment=environment(device), shape=shape, references=references)
    timing = dict(references=references, min_seconds=args.min_seconds, skip_peak=args.skip_peak)
    rows = []
    for length in args.lengths:
        sizes = dict(batch=args.batch, length=length, channels=args.channels, heads=args.heads)
        for name in args.cases:
            case = Case(name, **sizes, device=device, dtype=dtype)
            for backend in backends_of(name, args.backends):
                default_row = measure_row(case, backend=backend, **timing)
                rows.append(default_row)
                if backend == "cuda":
                    rows += [
                        measure_variant_row(case, default_row, variant=variant, **timing) for variant in args.variants
                    ]
        length_rows, baselines = add_ratios(rows, length=length)
        for row in length_rows:
            print(describe(row, baselines=baselines))
        write_results(out, **report, rows=rows)
    slopes = forward_time_slopes(rows, args.cases)
    print(
        "time growth with T (log-log slope of forward time; 1.0 = linear):", {k: round(v, 2) for k, v in slopes.items()}
    )
    write_results(out, **report, rows=rows, slopes=slopes)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
