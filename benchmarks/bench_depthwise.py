"""depthwise_conv's compiled CPU kernels against ``F.conv1d(groups=C)`` (its PyTorch path, the
``torch`` backend) at SliceNet's training shapes and at long T.

For each case (B, T, C, k, dilation, padding) it times, in one run and interleaved: the forward
(no autograd) and forward+backward (grad x and grad weight) of the ``cpu`` backend and of the
``torch`` backend (pad + ``conv1d(groups=C)`` + transposes), and ``x.clone()`` (a copy: the
memory-bandwidth yardstick).  The backward is forward+backward minus forward.  Each timing is the
median of ``--repeats`` calls, the five measurements' calls interleaved (`_timing.interleaved`);
the whole sweep runs ``--rounds`` times and the report gives each ratio's median and spread (min,
max) over the rounds, because the machine may be shared.

Ratios: ``speedup_*`` = conv1d time / ours (> 1: ours faster); ``*_copy_fraction`` = clone time /
the op's time (1.0: the op runs at copy speed; a forward reads x and writes out, as a clone does).

    python benchmarks/bench_depthwise.py                    # writes results/depthwise_cpu.json
    python benchmarks/bench_depthwise.py --rounds 5 --repeats 7 --threads 2
"""

from __future__ import annotations

import argparse

import torch
from _device import add_cpu_options, parse_cpu_args, run_metadata, write_report
from _timing import interleaved, spread

from talk_hf.models.slicenet.configuration_slicenet import SliceNetConfig
from talk_hf.ops import depthwise_conv, prepare_backend

# Multi30k comparison's SliceNet (examples/results/multi30k-en-de-slicenet/config.json): d_model 384,
# kernel sizes 3, 7, 15, 31, batches of ~128 sentences of ~32 tokens.
COMPARISON_CHANNELS, COMPARISON_KERNELS, TRAINING_BATCH, TRAINING_LENGTH = 384, (3, 7, 15, 31), 128, 32


def cases() -> list[dict]:
    """(B, T, C, k, dilation, padding) of SliceNet's training steps, then long T."""
    small = SliceNetConfig.from_preset("small")
    rows = [
        dict(batch=TRAINING_BATCH, length=TRAINING_LENGTH, channels=COMPARISON_CHANNELS, kernel_size=k, dilation=1)
        for k in COMPARISON_KERNELS
    ]
    rows += [
        dict(batch=TRAINING_BATCH, length=TRAINING_LENGTH, channels=small.d_model, kernel_size=k, dilation=d)
        for k, d in sorted(set(zip(small.kernel_sizes, small.dilations, strict=True)))
    ]
    rows += [dict(batch=4, length=4096, channels=COMPARISON_CHANNELS, kernel_size=k, dilation=1) for k in (3, 31)]
    return [dict(row, padding=padding) for row in rows for padding in ("causal", "centred")]


def time_case(case: dict, *, repeats: int) -> dict:
    """Median seconds of each measurement of one case over ``repeats`` interleaved calls (after one
    warm-up call each), so that load changes hit all alike."""
    x = torch.randn(case["batch"], case["length"], case["channels"], requires_grad=True)
    weight = torch.randn(case["channels"], case["kernel_size"], requires_grad=True)
    grad_out = torch.randn_like(x)
    options = dict(dilation=case["dilation"], padding=case["padding"])

    def forward(backend):
        def run(number):
            with torch.no_grad():
                depthwise_conv(x, weight, backend=backend, **options)

        return run

    def forward_backward(backend):
        def run(number):
            torch.autograd.grad(depthwise_conv(x, weight, backend=backend, **options), (x, weight), grad_out)

        return run

    measurements = {
        "copy": lambda number: x.detach().clone(),
        "ours_forward": forward("cpu"),
        "conv1d_forward": forward("torch"),
        "ours_forward_backward": forward_backward("cpu"),
        "conv1d_forward_backward": forward_backward("torch"),
    }
    return {name: timing.median_s for name, timing in interleaved(measurements, rounds=repeats).items()}


def ratios(seconds: dict) -> dict:
    ours_backward = seconds["ours_forward_backward"] - seconds["ours_forward"]
    conv1d_backward = seconds["conv1d_forward_backward"] - seconds["conv1d_forward"]
    return {
        "speedup_forward": seconds["conv1d_forward"] / seconds["ours_forward"],
        "speedup_backward": conv1d_backward / ours_backward,
        "speedup_forward_backward": seconds["conv1d_forward_backward"] / seconds["ours_forward_backward"],
        "ours_forward_copy_fraction": seconds["copy"] / seconds["ours_forward"],
        "conv1d_forward_copy_fraction": seconds["copy"] / seconds["conv1d_forward"],
        "ours_backward_copy_fraction": seconds["copy"] / ours_backward,
        "conv1d_backward_copy_fraction": seconds["copy"] / conv1d_backward,
    }


def table_row(case: dict, summary: dict) -> str:
    """One printed line: the case, the speedups' median [min-max], the copy fractions' medians."""

    def spread(name):
        s = summary[name]
        return f"{s['median']:5.1f} [{s['min']:.1f}-{s['max']:.1f}]"

    def fractions(stem):
        return f"{summary['ours_' + stem]['median']:.2f} | {summary['conv1d_' + stem]['median']:.2f}"

    return (
        f"{case['batch']:>4} {case['length']:>5} {case['channels']:>4} {case['kernel_size']:>3} "
        f"{case['dilation']:>2} {case['padding']:8} {spread('speedup_forward'):>14} "
        f"{spread('speedup_backward'):>14} {spread('speedup_forward_backward'):>14} "
        f"{fractions('forward_copy_fraction'):>22} {fractions('backward_copy_fraction'):>22}"
    )


def spread_over_rounds(per_round: list[dict]) -> dict:
    """Each ratio's median, min and max over the rounds (``ratios`` of one case, one per round)."""
    return {name: spread(r[name] for r in per_round) for name in per_round[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="sweeps over all cases (spread of the ratios)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per measurement (median)")
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    prepare_backend("cpu", "cpu")
    rounds = [[ratios(time_case(case, repeats=args.repeats)) for case in cases()] for _ in range(args.rounds)]
    results = []
    header = f"{'B':>4} {'T':>5} {'C':>4} {'k':>3} {'d':>2} {'padding':8} {'fwd x':>14} {'bwd x':>14} {'fwd+bwd x':>14}"
    print(header + f" {'fwd/copy ours|conv1d':>22} {'bwd/copy ours|conv1d':>22}")
    for index, case in enumerate(cases()):
        summary = spread_over_rounds([round_[index] for round_ in rounds])
        results.append(dict(case, **summary))
        print(table_row(case, summary))
    report = dict(
        run_metadata("cpu"),
        rounds=args.rounds,
        repeats=args.repeats,
        note="ratios measured in one run, interleaved; the spread is over rounds (a shared machine is noisy)",
        results=results,
    )
    write_report(report, args.out, "depthwise_cpu.json")


if __name__ == "__main__":
    main()
